"""Side-by-side compile times and memory: mjx_py vs MJX, every program in a fresh process.

Run: python examples/compare_compile.py MODEL [MODEL ...] [--nstep 100] [--no-mjx]
     [--full-opt] [--timeout 900] [--option "<option><flag energy=\"disable\"/></option>"]

For each model and engine, two child processes, each started fresh (no trace, lowering or
compile cache carried over from another measurement):

- ``step``: ``jax.jit(step)`` of one world, the Model and the Data passed as arguments, lowered
  (tracing and lowering to StableHLO, timed together) and compiled by XLA (timed apart), then
  called once;
- ``grad``: ``jax.jit(jax.grad(loss))`` with ``loss(qvel0, ctrls)`` the sum of the squared final
  qpos after NSTEP steps (one ``lax.scan`` of ``step``, the Model closed over, the control of
  each step set before it), differentiated with respect to the initial qvel and the control
  sequence (random controls: uniform in the control range where limited); lowered and
  compiled as above, then timed (the fastest of 5 gradients, after a warm-up call).

Each child prints its figures and its peak resident memory (the whole process: Python, JAX, the
engine, the compile and the run), so the ``step`` child's peak is the memory of a process that
builds and steps one world. The two engines run the same code around their ``step``, in float32,
with the same XLA options (``mjx_py.FAST_COMPILE`` for both; ``--full-opt``: XLA's defaults for
both) and the same $XLA_FLAGS (``mjx_py.xla.set_cpu_flags`` with one device). MJX gets the
model with its sensors removed (it lacks several sensor types; examples/compare_speed.py does
the same), and for ``grad`` its solver's iterations set to 1 (MJX runs more iterations in a
``lax.while_loop``, which reverse mode refuses; mjx_py differentiates its default solver, up to
100 iterations, implicitly); a model MJX refuses, or a child past ``--timeout`` seconds, is
reported as such. ``--option`` appends an element to every model for both engines (e.g. the
energy flag off, which MJX refuses). Needs the bench extra (mujoco, mujoco-mjx); mjx_py itself
never imports mujoco.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ENGINES = ('mjx_py', 'mjx')
KINDS = ('step', 'grad')


def _ours(xml: str, base_dir: str, grad: bool):
  """(step, Model, Data, the controls' (lo, hi, limited), replace(d, **fields)) for mjx_py."""
  import dataclasses

  import numpy as np

  import mjx_py
  from mjx_py import mjcf
  del grad                               # one Model for both programs
  m = mjx_py.put_model(mjcf.compile_string(xml, file=os.path.join(base_dir, 'model.xml')))
  d = mjx_py.make_data(m)
  ctrlrange = np.asarray(m.actuator_ctrlrange).reshape(-1, 2)
  limits = (ctrlrange[:, 0], ctrlrange[:, 1], np.asarray(m.actuator_ctrllimited) > 0)
  return mjx_py.step, m, d, limits, dataclasses.replace


def _mjx(xml: str, base_dir: str, grad: bool):
  """The same for MJX (the model compiled by MuJoCo without its sensors, then mjx.put_model);
  with ``grad``, the solver's iterations set to 1: MJX runs more than one in a
  ``lax.while_loop``, which reverse mode cannot differentiate, and a single iteration is
  the setting it differentiates (its line search is a fixed-length scan either way)."""
  import mujoco
  from mujoco import mjx
  spec = mujoco.MjSpec.from_string(xml)
  spec.modelfiledir = base_dir
  for s in list(spec.sensors):
    s.delete()
  mj = spec.compile()
  if grad:
    mj.opt.iterations = 1
  mx = mjx.put_model(mj)
  limits = (mj.actuator_ctrlrange[:, 0], mj.actuator_ctrlrange[:, 1],
            mj.actuator_ctrllimited > 0)
  return mjx.step, mx, mjx.make_data(mx), limits, lambda d, **kw: d.replace(**kw)


def child(engine: str, kind: str, path: str, nstep: int, fast: bool, option: str = '') -> dict:
  """One measurement in this process (see the module docstring): a dict of seconds and MB."""
  from mjx_py.xla import set_cpu_flags
  set_cpu_flags(1)                       # before JAX's backend starts: one CPU device
  import jax
  import jax.numpy as jnp

  from mjx_py import testspeed
  from mjx_py.xla import compile_options, lower_paused
  with open(path) as f:
    xml = f.read()
  if option:
    xml = testspeed.with_element(xml, option)
  base_dir = os.path.dirname(os.path.abspath(path))
  step, m, d0, limits, replace = (_ours if engine == 'mjx_py' else _mjx)(xml, base_dir,
                                                                   kind == 'grad')
  options = compile_options(fast)
  out = {}
  if kind == 'step':
    jitted, args = jax.jit(step), (m, d0)
  else:
    ctrls = jnp.asarray(testspeed.random_controls(*limits, (nstep,)), jnp.float32)

    def loss(qvel, ctrls):
      def body(d, c):
        return step(m, replace(d, ctrl=c)), None
      d = jax.lax.scan(body, replace(d0, qvel=qvel), ctrls)[0]
      return jnp.sum(d.qpos ** 2)

    jitted, args = jax.jit(jax.grad(loss, argnums=(0, 1))), (d0.qvel, ctrls)
  t0 = time.perf_counter()
  lowered = lower_paused(jitted, *args)
  t1 = time.perf_counter()
  compiled = lowered.compile(compiler_options=options)
  t2 = time.perf_counter()
  out.update(lower_s=t1 - t0, xla_s=t2 - t1)
  result = jax.block_until_ready(compiled(*args))
  if kind == 'grad':
    best = float('inf')
    for _ in range(5):
      t0 = time.perf_counter()
      result = jax.block_until_ready(compiled(*args))
      best = min(best, time.perf_counter() - t0)
    out['run_ms'] = best * 1e3
    out['finite'] = bool(all(jnp.all(jnp.isfinite(g)) for g in result))
  out['peak_mb'] = testspeed.peak_rss_mb()
  return out


def _run_child(engine, kind, path, args) -> dict | str:
  """child() in a fresh Python process: its dict, or a line saying why there is none."""
  cmd = [sys.executable, os.path.abspath(__file__), path, '--child', engine, kind,
         '--nstep', str(args.nstep), '--option', args.option]
  cmd += ['--full-opt'] if args.full_opt else []
  t0 = time.perf_counter()
  try:
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
  except subprocess.TimeoutExpired:
    return f'not finished in {time.perf_counter() - t0:.0f} s'
  for line in reversed(res.stdout.splitlines()):
    if line.startswith('{'):
      return json.loads(line)
  last = (res.stderr.strip().splitlines() or ['no output'])[-1]
  return f'failed: {last[:160]}'


def _row(model: str, engine: str, kind: str, res) -> str:
  head = f'{model:<16} {engine:<7} {kind:<5}'
  if isinstance(res, str):
    return f'{head} {res}'
  total = res['lower_s'] + res['xla_s']
  run = f"{res['run_ms']:>9.1f}" if 'run_ms' in res else f"{'':>9}"
  finite = {True: 'finite', False: 'NOT finite'}.get(res.get('finite'), '')
  return (f"{head} {res['lower_s']:>8.2f} {res['xla_s']:>8.2f} {total:>8.2f} {run} "
          f"{res['peak_mb']:>8,.0f}  {finite}")


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('models', nargs='+')
  parser.add_argument('--nstep', type=int, default=100, help='steps the gradient runs through')
  parser.add_argument('--no-mjx', action='store_true', help='skip MJX')
  parser.add_argument('--full-opt', action='store_true',
                      help="both engines compile with XLA's default CPU options instead of "
                           'mjx_py.FAST_COMPILE')
  parser.add_argument('--timeout', type=float, default=900,
                      help='seconds before a child process (one program) is given up')
  parser.add_argument('--option', default='',
                      help='an element appended to every model for both engines, e.g. '
                           '\'<option><flag energy="disable"/></option>\'')
  parser.add_argument('--child', nargs=2, metavar=('ENGINE', 'KIND'),
                      help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.child:
    engine, kind = args.child
    res = child(engine, kind, args.models[0], args.nstep, not args.full_opt, args.option)
    print(json.dumps(res), flush=True)
    return 0
  engines = ENGINES[:1] if args.no_mjx else ENGINES
  print(f"float32, one world, {'XLA defaults' if args.full_opt else 'FAST_COMPILE'} for both "
        f'engines, grad through {args.nstep} steps (MJX: solver iterations 1, the setting '
        f'it differentiates); every row a fresh process')
  print(f"{'model':<16} {'engine':<7} {'prog':<5} {'lower s':>8} {'XLA s':>8} {'total s':>8} "
        f"{'grad ms':>9} {'peak MB':>8}")
  for path in args.models:
    name = os.path.basename(path)
    for kind in KINDS:
      for engine in engines:
        res = _run_child(engine, kind, path, args)
        print(_row(name, engine, kind, res), flush=True)
  return 0


if __name__ == '__main__':
  sys.exit(main())
