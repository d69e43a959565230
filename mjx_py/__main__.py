"""Command line: ``python -m mjx_py [MODEL.xml]`` (also the ``mjx-py`` console script).

The main job: compiles a model (MJCF -> Model, then jit of the batched step), simulates B
worlds for N steps with random controls under a progress bar (the full step: contacts, limits,
equality and friction loss, solved by the model's constraint solver; ``--smooth`` switches the
constraints off), and prints env-steps/s, the jit compile time and the peak memory.
``--compare`` also runs MuJoCo C (``mujoco.rollout``, 1 thread and all cores) and MJX on the
same model and batch, and prints the three side by side (needs the ``bench`` extra).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

DEFAULT_MODEL = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                             'models', 'humanoid.xml')
BAR = 30


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(prog='mjx-py', description=__doc__.splitlines()[0])
  parser.add_argument('model', nargs='?', default=DEFAULT_MODEL, help='MJCF file')
  parser.add_argument('--repeat', type=int, default=5, help='compile this many times')
  parser.add_argument('--batch', type=int, default=64, help='worlds simulated at once')
  parser.add_argument('--nstep', type=int, default=200, help='steps per world')
  parser.add_argument('--smooth', action='store_true',
                      help='disable the constraints (contacts, limits, equality, friction loss)')
  parser.add_argument('--compare', action='store_true',
                      help='also run MuJoCo C and MJX on the same model and batch and print a '
                           'side-by-side table (needs the bench extra)')
  parser.add_argument('--mjx-nstep', type=int, default=20,
                      help='steps per MJX rollout with --compare (MJX is slow on CPU)')
  parser.add_argument('--mjx-timeout', type=float, default=600,
                      help='seconds before the MJX measurement is given up')
  parser.add_argument('--no-mjx', action='store_true', help='with --compare: MuJoCo C only')
  parser.add_argument('--no-progress', action='store_true', help='no progress bar')
  args = parser.parse_args(argv)

  from . import MJCFError, mjcf, put_model
  try:
    times = []
    for _ in range(max(1, args.repeat)):
      t0 = time.perf_counter()
      arrays = mjcf.compile_file(args.model)
      times.append(time.perf_counter() - t0)
  except MJCFError as e:
    print(f'error: {e}', file=sys.stderr)
    return 1
  t0 = time.perf_counter()
  m = put_model(arrays)
  t_put = time.perf_counter() - t0
  print(f'model: {args.model}')
  sizes = ('nq nv nu na nbody njnt ngeom nsite ncam nlight nmocap ntendon nwrap neq npair '
           'nexclude nsensor nsensordata nkey').split()
  print('sizes: ' + ', '.join(f'{k}={getattr(m, k)}' for k in sizes))
  print(f'total mass: {float(m.body_mass.sum()):.4g} kg, timestep: {float(m.opt.timestep):g} s')
  print(f'compile (MJCF -> arrays): best {min(times) * 1e3:.1f} ms of {len(times)}, '
        f'first {times[0] * 1e3:.1f} ms; put_model: {t_put * 1e3:.1f} ms')
  if args.nstep > 0 and args.batch > 0:
    with open(args.model) as f:
      xml = f.read()
    if args.smooth:
      from .testspeed import disable_constraints
      xml = disable_constraints(xml)
    sps = simulate(xml, args.batch, args.nstep, os.path.dirname(args.model), args.smooth,
                   progress=not args.no_progress)
    if args.compare:
      try:
        _compare(xml, args, sps)
      except RuntimeError as e:
        print(f'error: {e}', file=sys.stderr)
        return 1
  return 0


def _progress(done: int, total: int, steps_per_s: float) -> None:
  """One progress-bar line on stderr, redrawn in place."""
  fill = int(BAR * done / max(total, 1))
  sys.stderr.write(f'\r[{"#" * fill}{"." * (BAR - fill)}] {done}/{total} steps '
                   f'{steps_per_s:,.0f} env-steps/s')
  sys.stderr.flush()


def simulate(xml: str, batch: int, nstep: int, base_dir: str, smooth: bool,
             progress: bool = True) -> float:
  """Compiles the batched step and runs ``batch`` worlds for about ``nstep`` steps (whole
  chunks of a jitted lax.scan, so that the bar can move), printing the compile time,
  env-steps/s and peak memory. Returns env-steps/s."""
  import jax

  from . import testspeed
  chunk = max(1, nstep // 20)
  nchunk = -(-nstep // chunk)
  m, d, ctrl = testspeed.model_and_controls(xml, (nchunk, chunk, batch), base_dir=base_dir)
  d = testspeed.broadcast_batch(d, batch)
  print('simulating ' + ('without constraints' if smooth else 'with contacts and constraints')
        + f' on {testspeed.device_name()}: {batch} worlds x {nchunk * chunk} steps')
  t0 = time.perf_counter()
  fn = jax.jit(testspeed.batched_rollout(m)).lower(d, ctrl[0]).compile()
  jit_s = time.perf_counter() - t0
  print(f'jit compile of the batched step: {jit_s:.2f} s')
  jax.block_until_ready(fn(d, ctrl[0]))        # warm-up (first-run allocations)
  t0 = time.perf_counter()
  for i in range(nchunk):
    d = jax.block_until_ready(fn(d, ctrl[i]))
    if progress:
      _progress((i + 1) * chunk, nchunk * chunk,
                batch * (i + 1) * chunk / (time.perf_counter() - t0))
  run_s = time.perf_counter() - t0
  if progress:
    sys.stderr.write('\n')
  sps = batch * nchunk * chunk / run_s
  bad = int(jax.numpy.sum(d.warning_counts))
  print(f'simulate: {sps:,.0f} env-steps/s ({run_s:.2f} s for {batch * nchunk * chunk:,} '
        f'env-steps); warnings raised: {bad}')
  device = testspeed.peak_device_mb()
  print(f'peak memory: {testspeed.peak_rss_mb():,.0f} MB resident'
        + (f', {device:,.0f} MB on the device' if device is not None else ''))
  return sps


def _compare(xml: str, args, sps: float) -> None:
  """MuJoCo C and MJX on the same model and batch; a side-by-side table."""
  from . import compare
  ncpu = os.cpu_count() or 1
  rows = [('mjx_py', f'{sps:,.0f}')]
  print('running MuJoCo C (mujoco.rollout) ...', flush=True)
  rows.append(('MuJoCo C, 1 thread', f'{compare.time_mujoco(xml, args.batch, args.nstep, 1):,.0f}'))
  rows.append((f'MuJoCo C, {ncpu} threads',
               f'{compare.time_mujoco(xml, args.batch, args.nstep, ncpu):,.0f}'))
  if not args.no_mjx:
    print(f'running MJX ({args.mjx_nstep} steps, up to {args.mjx_timeout:.0f} s) ...', flush=True)
    res = compare.time_mjx_limited(xml, args.batch, args.mjx_nstep, args.mjx_timeout)
    rows.append(('MJX', res if isinstance(res, str) else
                 f'{res[1]:,.0f} (jit compile {res[0]:.2f} s)'))
  width = max(len(r[0]) for r in rows)
  print(f'\n{"engine":<{width}}  env-steps/s at batch {args.batch}')
  for name, value in rows:
    print(f'{name:<{width}}  {value}')


if __name__ == '__main__':
  sys.exit(main())
