"""Command line: ``python -m mjx_py [MODEL.xml]`` (also the ``mjx-py`` console script).

The main job: compiles a model (MJCF -> Model, then jit of the batched step), simulates B
worlds for N steps with random controls under a progress bar (the full step: contacts, limits,
equality and friction loss, solved by the model's constraint solver; ``--smooth`` switches the
constraints off), and prints env-steps/s, the jit compile time and the peak memory. On CPU
the batch is split into one block per core, each stepped by its own device's program
(mjx_py.xla.set_cpu_flags, mjx_py.shard_worlds; ``--devices 1`` keeps one device). With
``--cache`` the traced program goes to disk (mjx_py.xla.lower_cached: jax.export's StableHLO,
which needs the flatbuffers package, the ``cache`` extra) and the compiled one to JAX's
persistent compilation cache (mjx_py.enable_compile_cache), so a later run of the same model and
batch loads both instead of tracing and compiling (humanoid at batch 1, on a slow day: jit 26.2
s and a 633 MB peak in the first run, 1.7-1.8 s and 522-524 MB in the next two; at batch 64
over 2 devices 2.0-2.3 s, against 8.9-9.9 s with XLA's cache alone and 31.8 s without a cache;
storing the program costs the first run's memory, so the cache is not the default).
``--compare`` then runs examples/compare_speed.py (a source checkout's benchmark script) on the
same model and batch in a child process: mjx_py, MuJoCo C (``mujoco.rollout``, 1 thread and all
cores) and MJX side by side from one run. The package never imports mujoco (the tests' oracle);
that script does, and needs the ``bench`` extra.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MODEL = os.path.join(ROOT, 'models', 'humanoid.xml')
COMPARE_SCRIPT = os.path.join(ROOT, 'examples', 'compare_speed.py')
BAR = 30
# jax.monitoring events of the persistent compilation cache
CACHE_EVENTS = ('/jax/compilation_cache/cache_hits', '/jax/compilation_cache/cache_misses')


def main(argv=None) -> int:
  # imports jax, which starts no backend (see set_cpu_flags)
  from .testspeed import FIT_HELP, apply_fit, capacity_model, disable_constraints
  parser = argparse.ArgumentParser(prog='mjx-py', description=__doc__.splitlines()[0])
  parser.add_argument('model', nargs='?', default=DEFAULT_MODEL, help='MJCF file')
  parser.add_argument('--repeat', type=int, default=5, help='compile this many times')
  parser.add_argument('--batch', type=int, default=64, help='worlds simulated at once')
  parser.add_argument('--nstep', type=int, default=200, help='steps per world')
  parser.add_argument('--smooth', action='store_true',
                      help='disable the constraints (contacts, limits, equality, friction loss)')
  parser.add_argument('--compare', action='store_true',
                      help='then run examples/compare_speed.py (mjx_py, MuJoCo C and MJX side by '
                           'side) on the same model and batch (needs the bench extra)')
  parser.add_argument('--mjx-nstep', type=int, default=20,
                      help='steps per MJX rollout with --compare: the first of the steps timed '
                           'for mjx_py, with the same controls (MJX is slow on CPU)')
  parser.add_argument('--mjx-timeout', type=float, default=600,
                      help='seconds before the MJX measurement is given up')
  parser.add_argument('--mjx-python', default=None, metavar='PYTHON',
                      help='with --compare: run MJX in this Python interpreter (e.g. a virtual '
                           'environment with jax 0.11.2, where MJX\'s humanoid does not '
                           'deadlock in jaxlib 0.10.2\'s batched LAPACK Cholesky; see '
                           'examples/compare_speed.py)')
  parser.add_argument('--no-mjx', action='store_true', help='with --compare: MuJoCo C only')
  parser.add_argument('--no-progress', action='store_true', help='no progress bar')
  parser.add_argument('--cache', action='store_true',
                      help='keep the traced program (mjx_py.xla.lower_cached, needs the cache '
                           'extra) and the compiled one (JAX\'s persistent compilation cache) in '
                           '$MJX_PY_CACHE_DIR, else ~/.cache/mjx_py/xla: a later run of the same '
                           'model and batch loads them')
  parser.add_argument('--nconmax', type=int, default=None,
                      help="contact capacity of mjx_py's Model (put_model's nconmax; default: "
                           'the per-geom budget, e.g. 54 for the humanoid): the cost of the '
                           'contact and constraint stages grows with it; contacts beyond it '
                           'are dropped (the shallowest first) and counted as warnings. The '
                           'pairs tested (npairmax) stay at least the default\'s')
  parser.add_argument('--njmax', type=int, default=None,
                      help="constraint-row capacity of mjx_py's Model (put_model's njmax; "
                           'default: every row the contact capacity can produce, e.g. 262 for '
                           'the humanoid): the efc buffers, the constraint rows and the solver '
                           'cost in proportion to it; a world whose rows do not fit gets none '
                           'in that step (mjWARN_CNSTRFULL, as MuJoCo)')
  parser.add_argument('--fit-capacity', action='store_true',
                      help=FIT_HELP + ' (the peak memory printed includes the probe\'s)')
  parser.add_argument('--full-opt', action='store_true',
                      help="compile with XLA's default CPU emitters (slower to compile, more "
                           'memory, and with jax 0.10.2 not faster to run) instead of '
                           'mjx_py.FAST_COMPILE')
  parser.add_argument('--devices', type=int, default=None,
                      help='CPU devices to split the batch over (mjx_py.xla.set_cpu_flags; '
                           'default: one per core, 1: a single device)')
  args = parser.parse_args(argv)
  from .xla import set_cpu_flags
  set_cpu_flags(args.devices)  # before any JAX computation (see mjx_py.xla)

  from . import MJCFError, mjcf
  try:
    times = []
    for _ in range(max(1, args.repeat)):
      t0 = time.perf_counter()
      arrays = mjcf.compile_file(args.model)
      times.append(time.perf_counter() - t0)
  except MJCFError as e:
    print(f'error: {e}', file=sys.stderr)
    return 1
  with open(args.model) as f:
    xml = f.read()
  fitted = apply_fit(args, xml, os.path.dirname(args.model))
  t0 = time.perf_counter()
  m = capacity_model(arrays, args.nconmax, args.njmax)
  t_put = time.perf_counter() - t0
  print(f'model: {args.model}')
  sizes = ('nq nv nu na nbody njnt ngeom nsite ncam nlight nmocap ntendon nwrap neq npair '
           'nexclude nsensor nsensordata nkey').split()
  print('sizes: ' + ', '.join(f'{k}={getattr(m, k)}' for k in sizes))
  print(f'total mass: {float(m.body_mass.sum()):.4g} kg, timestep: {float(m.opt.timestep):g} s')
  print(f'capacity: nconmax={m.nconmax} contacts, npairmax={m.npairmax} pairs per geom type '
        f'pair, nefc_max={m.nefc_max} constraint rows'
        + (' (--fit-capacity)' if fitted else
           ''.join(f' (--{k})' for k in ('nconmax', 'njmax') if getattr(args, k) is not None)))
  print(f'compile (MJCF -> arrays): best {min(times) * 1e3:.1f} ms of {len(times)}, '
        f'first {times[0] * 1e3:.1f} ms; put_model: {t_put * 1e3:.1f} ms')
  if args.nstep > 0 and args.batch > 0:
    if args.smooth:
      xml = disable_constraints(xml)
    simulate(xml, args.batch, args.nstep, os.path.dirname(args.model), args.smooth,
             progress=not args.no_progress, fast_compile=not args.full_opt,
             cache=args.cache, nconmax=args.nconmax, njmax=args.njmax)
    if args.compare:
      return _compare(args)
  return 0


def _progress(done: int, total: int, steps_per_s: float) -> None:
  """One progress-bar line on stderr, redrawn in place."""
  fill = int(BAR * done / max(total, 1))
  sys.stderr.write(f'\r[{"#" * fill}{"." * (BAR - fill)}] {done}/{total} steps '
                   f'{steps_per_s:,.0f} env-steps/s')
  sys.stderr.flush()


def simulate(xml: str, batch: int, nstep: int, base_dir: str, smooth: bool,
             progress: bool = True, fast_compile: bool = True, cache: bool = False,
             nconmax: int | None = None, njmax: int | None = None) -> float:
  """Compiles the batched step and runs ``batch`` worlds for about ``nstep`` steps (whole
  chunks of a jitted lax.scan, so that the bar can move), printing the compile time,
  env-steps/s and peak memory. Returns env-steps/s. ``fast_compile``: compile with
  mjx_py.FAST_COMPILE (else XLA's defaults); ``cache``: with JAX's persistent compilation
  cache (mjx_py.enable_compile_cache) and the traced program on disk (mjx_py.xla.lower_cached,
  where jax.export can serialize), whose hits and misses are printed; ``nconmax`` and
  ``njmax``: the contact and constraint-row capacities (None: put_model's defaults)."""
  import jax

  from . import testspeed
  from .xla import (
    PROGRAM_DIR,
    enable_compile_cache,
    export_supported,
    lower_cached,
    lower_paused,
    option_groups,
  )
  events = []
  if cache:
    cache_dir = enable_compile_cache()
    stored = set(os.listdir(cache_dir))
    jax.monitoring.register_event_listener(
        lambda name, **kw: events.append(name) if name.startswith(CACHE_EVENTS) else None)
  chunk = max(1, nstep // 20)
  nchunk = -(-nstep // chunk)
  m, d, ctrl = testspeed.model_and_controls(xml, (nchunk, chunk, batch), base_dir=base_dir,
                                            nconmax=nconmax, njmax=njmax)
  fn, place, ndev = testspeed.per_device(testspeed.batched_rollout(m, peaks=True), batch,
                                         in_axes=(0, 1, 0))
  d, ctrl = place(testspeed.broadcast_batch(d, batch)), place(ctrl, axis=2)
  peak = place(jax.numpy.zeros((batch, 2), jax.numpy.int32))
  split = ''
  if ndev > 1:
    split = f', {batch // ndev} on each of {ndev} devices'
  elif batch > 1 and len(jax.devices()) > 1:
    split = f', on one device ({batch} worlds do not split evenly over {len(jax.devices())})'
  print('simulating ' + ('without constraints' if smooth else 'with contacts and constraints')
        + f' on {testspeed.device_name()}: {batch} worlds x {nchunk * chunk} steps{split}')
  t0 = time.perf_counter()
  options = testspeed.compile_options_for(batch, fast_compile)
  # traced and lowered with Python's collector paused (mjx_py.xla.gc_paused)
  loaded = None                  # the traced program: None not kept, else whether loaded
  if cache and export_supported():
    # the trace and lowering too, keyed by the model (its values: fn closes over it)
    lowered, loaded = lower_cached(fn, d, ctrl[0], peak, name='mjx_py.simulate', consts=m,
                                   cache_dir=cache_dir)
  else:
    lowered = lower_paused(jax.jit(fn), d, ctrl[0], peak)
  fn = lowered.compile(compiler_options=options)
  jit_s = time.perf_counter() - t0
  print(f'jit compile of the batched step: {jit_s:.2f} s'
        + (f' (mjx_py.{" + ".join(option_groups(options))})' if options
           else " (XLA's default options)"))
  if cache:
    if any(e.endswith('cache_hits') for e in events):
      what = 'loaded from the cache'
    elif set(os.listdir(cache_dir)) - stored - {PROGRAM_DIR}:
      what = 'compiled, then stored'
    else:
      what = 'compiled, not stored: the cache keeps programs that take 1 s or more to compile'
    print(f'persistent compilation cache: {cache_dir} ({what})')
    if loaded is None:
      print("trace and lowering not cached: jax.export's serialization needs flatbuffers "
            "(pip install 'mjx_py[cache]')")
    else:
      print('traced program: ' + ('loaded from the cache' if loaded else 'traced, then stored')
            + f' ({os.path.join(cache_dir, PROGRAM_DIR)})')
  jax.block_until_ready(fn(d, ctrl[0], peak))  # warm-up (first-run allocations)
  t0 = time.perf_counter()
  for i in range(nchunk):
    d, peak = jax.block_until_ready(fn(d, ctrl[i], peak))
    if progress:
      _progress((i + 1) * chunk, nchunk * chunk,
                batch * (i + 1) * chunk / (time.perf_counter() - t0))
  run_s = time.perf_counter() - t0
  if progress:
    sys.stderr.write('\n')
  sps = batch * nchunk * chunk / run_s
  print(f'simulate: {sps:,.0f} env-steps/s ({run_s:.2f} s for {batch * nchunk * chunk:,} '
        f'env-steps); warnings raised: {warning_summary(d.warning_counts)}')
  ncon, nefc = (int(x) for x in jax.numpy.max(peak, axis=0))
  print(f'capacity used: at most {ncon} of nconmax={m.nconmax} contacts and {nefc} of '
        f'nefc_max={m.nefc_max} constraint rows in any world and step (the stages after '
        'collision cost in proportion to the capacities: --nconmax, --njmax, README '
        'Benchmarks)')
  device = testspeed.peak_device_mb()
  print(f'peak memory: {testspeed.peak_rss_mb():,.0f} MB resident'
        + (f', {device:,.0f} MB on the device' if device is not None else ''))
  return sps


def warning_summary(counts) -> str:
  """The warnings of a batch, counts (batch, NWARNING) int (Data.warning_counts): their total,
  then each kind raised with MuJoCo's name, its count and the worlds that raised it, e.g.
  ``3 (mjWARN_CONTACTFULL 3 in 1 of 1024 worlds)``; ``0`` when none was."""
  import numpy as np

  from .data import WARNING_NAMES
  counts = np.asarray(counts).reshape(-1, len(WARNING_NAMES))
  kinds = [f'{name} {int(counts[:, i].sum())} in {int(np.count_nonzero(counts[:, i]))} of '
           f'{len(counts)} worlds' for i, name in enumerate(WARNING_NAMES) if counts[:, i].any()]
  return f'{int(counts.sum())}' + (f' ({", ".join(kinds)})' if kinds else '')


def _compare(args) -> int:
  """Runs examples/compare_speed.py on the same model, batch and steps in a child process and
  prints its side-by-side table. Returns the exit status."""
  import subprocess
  if not os.path.exists(COMPARE_SCRIPT):
    print(f'error: --compare needs a source checkout ({COMPARE_SCRIPT} is missing)',
          file=sys.stderr)
    return 1
  cmd = [sys.executable, COMPARE_SCRIPT, args.model, '--batch', str(args.batch), '--nstep',
         str(args.nstep), '--mjx-nstep', str(args.mjx_nstep), '--mjx-timeout',
         str(args.mjx_timeout)]
  for k in ('nconmax', 'njmax', 'mjx_python'):
    if getattr(args, k) is not None:
      cmd += [f'--{k.replace("_", "-")}', str(getattr(args, k))]
  cmd += (['--no-mjx'] * args.no_mjx + ['--smooth'] * args.smooth
          + ['--full-opt'] * args.full_opt)
  print('side by side (examples/compare_speed.py, the fastest of 3 runs each) ...', flush=True)
  res = subprocess.run(cmd, capture_output=True, text=True)
  print(res.stdout, end='')
  if res.returncode:
    hint = (" (pip install -e '.[bench]')" if 'No module named' in res.stderr else '')
    print(f'error: the comparison failed{hint}:\n{res.stderr[-2000:]}', file=sys.stderr)
  return res.returncode


if __name__ == '__main__':
  sys.exit(main())
