"""Benchmark: ``python -m mjx_py.testspeed MODEL [--batch B ...] [--smooth] [--grad NSTEP]``.

Times jit compilation of ``step`` and steps/s of ``jax.vmap(step)`` over a batch of worlds
(random controls, ``lax.scan`` over steps), and reports peak resident memory. The side-by-side
run with MuJoCo C (``mujoco.rollout``) and MJX in the same process is
``examples/compare_speed.py`` (the library never imports mujoco).
``--smooth`` disables the constraint solver in all three (the smooth-dynamics benchmark).
``--grad NSTEP`` also times reverse-mode jax.grad through NSTEP steps of one world: compile
time of ``step`` and of the gradient, and the gradient's cost relative to the forward rollout.
``--cache`` keeps every program's trace (mjx_py.xla.lower_cached) and compiled code (JAX's
persistent compilation cache) on disk, so a second run reports the compile times of a warm
start. Never a timed test: numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import time

import jax
import jax.numpy as jnp
import numpy as np

from mjx_py.xla import lower_cached, lower_paused


def peak_rss_mb() -> float:
  """This process's peak resident memory (MB)."""
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def peak_device_mb() -> float | None:
  """Peak memory in use on the first device (MB), where the backend reports it (GPU, TPU);
  None on CPU."""
  stats = jax.devices()[0].memory_stats() or {}
  peak = stats.get('peak_bytes_in_use')
  return None if peak is None else peak / 2**20


def disable_constraints(xml: str) -> str:
  """The model with <flag constraint="disable"/> appended (the last <option> wins)."""
  return re.sub(r'</mujoco>\s*$', '<option><flag constraint="disable"/></option></mujoco>', xml)


def device_name() -> str:
  dev = jax.devices()[0]
  return f'{dev.platform} ({len(jax.devices())} device(s))'


def _prepare_xml(path: str, smooth: bool) -> str:
  with open(path) as f:
    xml = f.read()
  return disable_constraints(xml) if smooth else xml


def capacity_model(arrays: dict, nconmax: int | None = None, njmax: int | None = None):
  """put_model(arrays) with the contact capacity ``nconmax`` (None: put_model's default
  budget) and the constraint-row capacity ``njmax`` (None: put_model's default, every row the
  contact capacity can produce); the pair capacity npairmax stays at least the default's, so
  that a smaller contact buffer drops no pair that could touch (put_model's own npairmax
  default follows nconmax)."""
  import mjx_py
  m = mjx_py.put_model(arrays)
  if nconmax is None and njmax is None:
    return m
  npairmax = m.npairmax if nconmax is None else max(nconmax, m.npairmax)
  return mjx_py.put_model(arrays, nconmax=nconmax, npairmax=npairmax, njmax=njmax)


# the probe of --fit-capacity (the main job, examples/compare_speed.py)
FIT_BATCH, FIT_NSTEP = 64, 500


def fit_for(xml: str, base_dir: str = '') -> tuple:
  """mjx_py.fit_capacity on the Model of ``xml`` at the default capacities, FIT_BATCH worlds x
  FIT_NSTEP steps of random controls: (Capacity, seconds taken, compile included), and a line
  that reports them."""
  from mjx_py import capacity, mjcf, put_model
  t0 = time.perf_counter()
  m = put_model(mjcf.compile_string(xml, file=os.path.join(base_dir or '.', 'model.xml')))
  fit = capacity.fit_capacity(m, batch=FIT_BATCH, nstep=FIT_NSTEP)
  took = time.perf_counter() - t0
  line = (f'fitted capacity (mjx_py.fit_capacity: {FIT_BATCH} worlds x {FIT_NSTEP} steps of '
          f'random controls, {took:.1f} s): nconmax={fit.nconmax} (at most {fit.ncon} contacts '
          f'seen, default {m.nconmax}), njmax={fit.njmax} (at most {fit.nefc} rows seen, '
          f'default {m.nefc_max})')
  return fit, took, line


FIT_HELP = ("first fit the contact and row capacities (--nconmax, --njmax) to the model "
            "(mjx_py.fit_capacity: the most contacts and rows of 64 worlds x 500 steps of "
            "random controls, with a margin); --nconmax / --njmax given override the fit")


def apply_fit(args, xml: str, base_dir: str = '') -> bool:
  """--fit-capacity of the command lines: when ``args.fit_capacity`` and not ``args.smooth``
  (no constraints, nothing to fit), fits the capacities of ``xml`` (fit_for), prints the fit
  and sets ``args.nconmax`` / ``args.njmax`` where they are None. Returns whether it did."""
  if not args.fit_capacity or args.smooth:
    return False
  fit, _, line = fit_for(xml, base_dir)
  print(line, flush=True)
  args.nconmax = fit.nconmax if args.nconmax is None else args.nconmax
  args.njmax = fit.njmax if args.njmax is None else args.njmax
  return True


def model_and_controls(xml: str, shape: tuple, seed: int = 0, base_dir: str = '',
                       nconmax: int | None = None, njmax: int | None = None):
  """The compiled Model (capacities ``nconmax`` and ``njmax``, see capacity_model), its zero
  Data and random controls of shape ``shape + (nu,)``: uniform in the control range where
  limited, standard normal elsewhere."""
  import mjx_py
  from mjx_py import mjcf
  m = capacity_model(mjcf.compile_string(xml, file=os.path.join(base_dir or '.', 'model.xml')),
                     nconmax, njmax)
  d0 = mjx_py.make_data(m)
  lo, hi = np.asarray(m.actuator_ctrlrange).T if m.nu else (np.zeros(0), np.zeros(0))
  ctrl = random_controls(lo, hi, np.asarray(m.actuator_ctrllimited) > 0, shape, seed)
  return m, d0, jnp.asarray(ctrl, dtype=d0.qpos.dtype)


def random_controls(lo, hi, limited, shape: tuple, seed: int = 0):
  """Random controls of shape ``shape + (nu,)`` (numpy, float64) for actuators with control
  ranges [lo, hi] (nu,): uniform in the range where ``limited``, standard normal elsewhere."""
  rng = np.random.default_rng(seed)
  shape = tuple(shape) + (len(lo),)
  return np.where(limited, lo + (hi - lo) * rng.random(shape), rng.standard_normal(shape))


def with_element(xml: str, element: str) -> str:
  """The MJCF text with ``element`` (e.g. an <option .../>) appended inside <mujoco>."""
  return re.sub(r'</mujoco>\s*$', element + '</mujoco>', xml)


def batched_rollout(m, peaks: bool = False):
  """rollout(d, ctrls) -> d: ``len(ctrls)`` steps of ``jax.vmap(step)`` over the batched Data
  ``d`` (leading axis: worlds), ctrls (nstep, batch, nu) set before each step (lax.scan). The
  scan carries only the state (mjx_py.rollout.scan_state, as ``rollout(...,
  state_only=True)``): the Data returned has the last step's state and d's other fields, as
  mujoco.rollout returns states.

  peaks: rollout(d, ctrls, peak) -> (d, peak) instead, peak (batch, 2) int32 the most contacts
  (ncon) and constraint rows (nefc) each world had after a step's forward pass, folded into the
  ``peak`` passed in (start from zeros), so that a run can tell how much of the capacities
  (nconmax, nefc_max) it used."""
  from mjx_py.capacity import fold_peaks
  from mjx_py.forward import step
  from mjx_py.rollout import scan_state

  def one(d, c):
    return jax.vmap(lambda d, c: step(m, d.__class__(**{**vars(d), 'ctrl': c})))(d, c)

  def rollout(d, ctrls):
    return scan_state(lambda d, c: (one(d, c), None), d, ctrls)[0]

  def rollout_peaks(d, ctrls, peak):
    # each step's counts folded with the peak passed in, then the largest over the steps
    def body(d, c):
      out = one(d, c)
      return out, fold_peaks(peak, out)
    d, peaks = scan_state(body, d, ctrls)
    return d, jnp.max(peaks, axis=0)
  return rollout_peaks if peaks else rollout


def device_split(batch: int) -> int:
  """The devices per_device splits ``batch`` worlds over: every device of JAX's default
  backend when the batch divides evenly among them, else 1."""
  ndev = len(jax.devices())
  return ndev if ndev > 1 and batch % ndev == 0 else 1


def worlds_per_device(batch: int) -> int:
  """The worlds each device steps when per_device splits ``batch`` worlds."""
  return batch // device_split(batch)


def compile_options_for(batch: int, fast: bool = True):
  """mjx_py.xla.compile_options for a rollout of ``batch`` worlds run by per_device."""
  from mjx_py.xla import compile_options
  return compile_options(fast, batch=worlds_per_device(batch))


def per_device(fn, batch: int, in_axes=0, out_axes=0):
  """(fn', place, ndev): ``fn`` (a batched function of ``batch`` worlds) run by
  mjx_py.shard_worlds on every device of JAX's default backend when there are several and
  ``batch`` is a multiple of their count, else ``fn`` itself; ``place(x, axis=0)`` lays an
  argument whose batch is on ``axis`` out for fn' (mjx_py.shard_batch; unchanged when fn runs
  whole); ndev the devices used. One device per CPU core comes from mjx_py.xla.set_cpu_flags."""
  import mjx_py
  ndev = device_split(batch)
  if ndev == 1:
    return fn, lambda x, axis=0: x, 1
  mesh = mjx_py.batch_mesh()
  return (mjx_py.shard_worlds(fn, mesh, in_axes, out_axes),
          lambda x, axis=0: mjx_py.shard_batch(x, mesh, axis), ndev)


def broadcast_batch(d, batch: int):
  """``batch`` copies of the Data ``d`` stacked on a leading axis."""
  return jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (batch,) + x.shape), d)


def best_time(fn, repeat: int = 1) -> float:
  """The shortest wall time (s) of ``repeat`` calls of ``fn()`` (its result waited for)."""
  best = float('inf')
  for _ in range(max(1, repeat)):
    t0 = time.perf_counter()
    jax.block_until_ready(fn())
    best = min(best, time.perf_counter() - t0)
  return best


def _lower(fn, *args, name: str, consts, cache: str | None):
  """``jax.jit(fn).lower(*args)``: through mjx_py.xla.lower_cached (its key: ``name`` and the
  closed-over ``consts``) when ``cache`` is a cache directory, else traced (lower_paused)."""
  if cache is None:
    return lower_paused(jax.jit(fn), *args)
  return lower_cached(fn, *args, name='mjx_py.testspeed.' + name, consts=consts,
                      cache_dir=cache)[0]


def time_rollout(xml: str, batch: int, nstep: int, seed: int = 0, base_dir: str = '',
                 compiler_options: dict | None = None, repeat: int = 1,
                 nconmax: int | None = None, cache: str | None = None,
                 njmax: int | None = None):
  """(compile seconds, steps/s) of vmap(step) over ``batch`` worlds for ``nstep`` steps
  (``compiler_options``: XLA options of the compile, e.g. mjx_py.FAST_COMPILE; ``nconmax``:
  the contact capacity, None for the default; ``njmax``: the constraint-row capacity, None
  for the default; ``cache``: a cache directory for lower_cached,
  None to trace); the steps/s of the fastest of ``repeat`` runs
  after a warm-up run. With several devices (one per CPU core after mjx_py.xla.set_cpu_flags)
  each steps its block of the worlds (per_device), as mujoco.rollout's threads do."""
  m, d0, ctrl = model_and_controls(xml, (nstep, batch), seed, base_dir, nconmax, njmax)
  fn, place, _ = per_device(batched_rollout(m), batch, in_axes=(0, 1))
  dbatch, ctrl = place(broadcast_batch(d0, batch)), place(ctrl, axis=1)
  t0 = time.perf_counter()
  fn = _lower(fn, dbatch, ctrl, name='rollout', consts=m, cache=cache).compile(
      compiler_options=compiler_options)
  compile_s = time.perf_counter() - t0
  jax.block_until_ready(fn(dbatch, ctrl))
  return compile_s, batch * nstep / best_time(lambda: fn(dbatch, ctrl), repeat)


def time_grad(xml: str, nstep: int, seed: int = 0, base_dir: str = '',
              compiler_options: dict | None = None, remat: bool = False,
              cache: str | None = None):
  """One world, ``nstep`` steps of random controls (mjx_py.rollout); the loss is the squared final
  qpos, differentiated (jax.grad, reverse mode) with respect to the initial qvel and the control
  sequence. Returns (compile s of the jitted step, compile s of the jitted gradient, seconds
  per forward rollout, seconds per gradient, the gradient program's temporary buffers in MB
  from XLA's memory analysis or None where the backend gives none), the runs timed after a
  warm-up call. ``compiler_options``: XLA options of the three compiles (e.g.
  mjx_py.FAST_COMPILE); ``remat``: mjx_py.rollout's remat (each step recomputed in the backward
  pass); ``cache``: as time_rollout's."""
  from mjx_py.forward import step
  from mjx_py.rollout import rollout as run
  m, d0, ctrl = model_and_controls(xml, (nstep,), seed, base_dir)

  def rollout(qvel, ctrls):
    d = run(m, d0.__class__(**{**vars(d0), 'qvel': qvel}), ctrls, remat=remat)[0]
    return jnp.sum(d.qpos ** 2)

  t0 = time.perf_counter()
  opts = dict(compiler_options=compiler_options)
  _lower(step, m, d0, name='step', consts=(), cache=cache).compile(**opts)
  step_compile = time.perf_counter() - t0
  name = 'remat' if remat else 'scan'
  fwd = _lower(rollout, d0.qvel, ctrl, name='forward.' + name, consts=(m, d0),
               cache=cache).compile(**opts)
  t0 = time.perf_counter()
  grad = _lower(jax.grad(rollout, argnums=(0, 1)), d0.qvel, ctrl, name='grad.' + name,
                consts=(m, d0), cache=cache).compile(**opts)
  grad_compile = time.perf_counter() - t0

  def timed(fn, reps=3):
    jax.block_until_ready(fn(d0.qvel, ctrl))
    t0 = time.perf_counter()
    for _ in range(reps):
      jax.block_until_ready(fn(d0.qvel, ctrl))
    return (time.perf_counter() - t0) / reps

  return step_compile, grad_compile, timed(fwd), timed(grad), _temp_mb(grad)


def _temp_mb(compiled):
  """A compiled program's temporary buffers (MB), or None where XLA gives no analysis."""
  analysis = compiled.memory_analysis()
  size = getattr(analysis, 'temp_size_in_bytes', None) if analysis is not None else None
  return None if size is None else size / 1e6


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(prog='python -m mjx_py.testspeed',
                                   description=__doc__.splitlines()[0])
  parser.add_argument('model')
  parser.add_argument('--batch', type=int, nargs='+', default=[1, 64, 1024])
  parser.add_argument('--nstep', type=int, default=200)
  parser.add_argument('--smooth', action='store_true', help='disable the constraint solver')
  parser.add_argument('--grad', type=int, default=0, metavar='NSTEP',
                      help='also time jax.grad through NSTEP steps of one world (compile time '
                           'of step and of the gradient, and the gradient\'s cost against the '
                           'forward rollout)')
  parser.add_argument('--remat', action='store_true',
                      help='with --grad: recompute each step in the backward pass '
                           '(mjx_py.rollout remat=True)')
  parser.add_argument('--fast-compile', action='store_true',
                      help='compile with mjx_py.FAST_COMPILE (XLA:CPU classic emitters; the '
                           'default, kept for older command lines)')
  parser.add_argument('--full-opt', action='store_true',
                      help="compile with XLA's default CPU emitters instead of FAST_COMPILE")
  parser.add_argument('--repeat', type=int, default=3,
                      help='timed runs per batch size (the fastest is reported)')
  parser.add_argument('--nconmax', type=int, default=None,
                      help='contact capacity (put_model nconmax; default: the per-geom budget)')
  parser.add_argument('--njmax', type=int, default=None,
                      help='constraint-row capacity (put_model njmax; default: every row the '
                           'contact capacity can produce)')
  parser.add_argument('--fit-capacity', action='store_true', help=FIT_HELP)
  parser.add_argument('--devices', type=int, default=None,
                      help='CPU devices to split the batch over (mjx_py.xla.set_cpu_flags; '
                           'default: one per core, 1: a single device)')
  parser.add_argument('--cache', action='store_true',
                      help='keep traced programs (mjx_py.xla.lower_cached, needs the cache '
                           'extra) and compiled ones (JAX\'s persistent compilation cache) in '
                           '$MJX_PY_CACHE_DIR, else ~/.cache/mjx_py/xla')
  args = parser.parse_args(argv)
  from .xla import compile_options, enable_compile_cache, export_supported, set_cpu_flags
  set_cpu_flags(args.devices)  # before any JAX computation (see mjx_py.xla)
  cache = None
  if args.cache:
    if not export_supported():
      parser.error("--cache needs jax.export's serialization: pip install 'mjx_py[cache]'")
    cache = enable_compile_cache()
  xml = _prepare_xml(args.model, args.smooth)
  apply_fit(args, xml, os.path.dirname(args.model))
  print(f'model {os.path.basename(args.model)}  device {jax.devices()[0].platform}  '
        f'x64 {jax.config.jax_enable_x64}  nstep {args.nstep}'
        + ('  XLA defaults' if args.full_opt else
           '  FAST_COMPILE (+ NO_LIBRARY_FUSIONS and NO_LOOP_HOISTING from 32 worlds per device)'))
  print(f"{'batch':>6} {'ours steps/s':>14} {'compile s':>10}")
  for batch in args.batch:
    c, sps = time_rollout(xml, batch, args.nstep, base_dir=os.path.dirname(args.model),
                          compiler_options=compile_options_for(batch, not args.full_opt),
                          repeat=args.repeat, nconmax=args.nconmax, cache=cache,
                          njmax=args.njmax)
    print(f'{batch:>6} {sps:>14,.0f} {c:>10.2f}', flush=True)
  if args.grad:
    cs, cg, tf, tg, temp = time_grad(xml, args.grad, base_dir=os.path.dirname(args.model),
                                     compiler_options=compile_options(not args.full_opt),
                                     remat=args.remat, cache=cache)
    temp = '' if temp is None else f', temporary buffers {temp:.1f} MB'
    print(f'grad through {args.grad} steps{" (remat)" if args.remat else ""}: step compile '
          f'{cs:.2f} s, grad compile {cg:.2f} s, forward {tf * 1e3:.1f} ms, grad '
          f'{tg * 1e3:.1f} ms ({tg / tf:.2f}x the forward){temp}')
  print(f'peak RSS {peak_rss_mb():.0f} MB')
  return 0


if __name__ == '__main__':
  raise SystemExit(main())
