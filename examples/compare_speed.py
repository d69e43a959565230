"""Side-by-side speed: mjx_py vs MuJoCo C (mujoco.rollout, 1 thread and all cores) vs MJX.

Run: python examples/compare_speed.py MODEL [--batch 1 64 1024] [--nstep 200] [--mjx-nstep 20]
     [--repeat 3] [--smooth] [--no-mjx] [--option "<option noslip_iterations=\"0\"/>"]
     [--nconmax N] [--njmax N] [--fit-capacity [--also-default]] [--devices N]
     [--mjx-python PYTHON]
Needs the bench extra (mujoco, mujoco-mjx). All three run in one run on one machine (MJX in a
child process, retried in a fresh one when a try hangs, given up after --mjx-timeout), so the
ratios are comparable; each figure is
the fastest of --repeat timed runs (after a warm-up run for the JAX engines); each row ends
with the throughput issue's two figures, ours as a share of MuJoCo C on all threads and as a
multiple of MJX. ``--fit-capacity`` first sizes mjx_py's contact and constraint-row capacities
to the model (mjx_py.fit_capacity, printed above the table); MuJoCo C allocates per step and
MJX sizes its contact buffer from the model's candidate geom pairs: neither has the knob.
mjx_py's rollout (mjx_py.testspeed.batched_rollout) carries only the state from step to step,
as mujoco.rollout returns states (mjx_py.rollout's ``state_only``); MJX's carries its whole
Data, as MJX's own loops do. Every engine starts each batch's worlds from the model's initial
state and steps them with random controls (uniform in the control range where limited,
standard normal elsewhere): MJX with mjx_py's own (the same seed, its first --mjx-nstep steps),
MuJoCo C with draws of its own from the same distribution. ``--mjx-nstep`` equal to
``--nstep`` times the three engines over the same stretch of motion. ``--mjx-python`` runs MJX
in another Python interpreter, e.g. one with a newer jaxlib (see _OtherPython).
``mjx-py MODEL --compare`` runs this script for its batch size. The engine itself never imports
mujoco: it is the tests' oracle and this script's reference.
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import os
import queue as queue_module
import re
import subprocess
import sys
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np

import mjx_py
from mjx_py import testspeed
from mjx_py.xla import lower_paused, set_cpu_flags


def _time_mujoco(xml: str, batch: int, nstep: int, threads: int, repeat: int):
  import mujoco
  from mujoco import rollout
  mj = mujoco.MjModel.from_xml_string(xml)
  datas = [mujoco.MjData(mj) for _ in range(max(threads, 1))]
  state0 = np.zeros((batch, mujoco.mj_stateSize(mj, mujoco.mjtState.mjSTATE_FULLPHYSICS)))
  for i in range(batch):
    mujoco.mj_getState(mj, datas[0], state0[i], mujoco.mjtState.mjSTATE_FULLPHYSICS)
  lo, hi = mj.actuator_ctrlrange.T
  rng = np.random.default_rng(0)
  ctrl = np.where(mj.actuator_ctrllimited, lo + (hi - lo) * rng.random((batch, nstep, mj.nu)),
                  rng.standard_normal((batch, nstep, mj.nu)))
  runner = rollout.Rollout(nthread=threads) if threads > 1 else None
  best = float('inf')
  for _ in range(max(1, repeat)):
    t0 = time.perf_counter()
    if runner is not None:
      runner.rollout([mj] * batch, datas, state0, ctrl)
    else:
      rollout.rollout([mj] * batch, datas[0], state0, ctrl)
    best = min(best, time.perf_counter() - t0)
  return batch * nstep / best


def mjx_controls(mj, nstep: int, batch: int):
  """MJX's controls (nstep, batch, nu), numpy float64, for the MjModel ``mj``: those of mjx_py's
  rollout (testspeed.model_and_controls, the same seed), so that MJX's first nstep steps are
  mjx_py's (until stop 71 MJX stepped with zero controls)."""
  lo, hi = mj.actuator_ctrlrange.T
  return testspeed.random_controls(lo, hi, mj.actuator_ctrllimited > 0, (nstep, batch))


def _time_mjx(xml: str, batch: int, nstep: int, repeat: int, progress=None):
  """MJX's compile time (s) and env-steps/s (the fastest of ``repeat`` runs after a warm-up
  run); ``progress`` (a queue) gets ('compiled', s) after the compile and ('warm', s) after the
  warm-up run."""
  import mujoco
  from mujoco import mjx
  spec = mujoco.MjSpec.from_string(xml)
  for s in list(spec.sensors):  # MJX lacks several sensor types; sensors are not timed here
    s.delete()
  mj = spec.compile()
  mx = mjx.put_model(mj)
  d0 = mjx.make_data(mx)

  def rollout(d, ctrls):
    def body(d, c):
      return jax.vmap(lambda d, c: mjx.step(mx, d.replace(ctrl=c)))(d, c), None
    return jax.lax.scan(body, d, ctrls)[0]

  # on one device, not split over the CPU devices with shard_worlds as mjx_py's rollouts are:
  # split, MJX deadlocked in LAPACK's Cholesky at batch 64 and 1024 (see _time_mjx_limited)
  dbatch = jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (batch,) + x.shape), d0)
  ctrl = jnp.asarray(mjx_controls(mj, nstep, batch), jnp.float32)
  t0 = time.perf_counter()
  # lowered as mjx_py's programs are (testspeed), so the compiles compare alike
  fn = lower_paused(jax.jit(rollout), dbatch, ctrl).compile()
  compile_s = time.perf_counter() - t0
  if progress is not None:
    progress.put(('compiled', compile_s))
  t0 = time.perf_counter()
  jax.block_until_ready(fn(dbatch, ctrl))
  if progress is not None:
    progress.put(('warm', time.perf_counter() - t0))
  return compile_s, batch * nstep / testspeed.best_time(lambda: fn(dbatch, ctrl), repeat)


def _mjx_worker(xml, batch, nstep, repeat, queue):
  try:
    queue.put(('done', _time_mjx(xml, batch, nstep, repeat, queue)))
  except Exception as e:  # MJX does not support every model
    queue.put(('done', f'n/a ({type(e).__name__}: {e})'))


# XLA:CPU's flag that keeps its Eigen intra-op pool out of the child MJX runs in. With the
# pool, MJX's humanoid step at batch 1024 deadlocks on this 2-core machine now and then
# (jaxlib 0.10.2): the thunk executor runs as many batched LAPACK Cholesky calls at once as the
# pool has threads, and each then waits (lapack_spotrf_ffi -> ParallelBatchMap) for pool work
# that no free thread is left to run. Seen in 4 of 5 runs of this script at stop 63 and, with
# XLA's default loop threshold, in 2 of 3 runs of MJX alone at stop 64 (the third: 2,181
# env-steps/s), in none of 5 with the flag (1,714-1,997). The ant, which never deadlocked, ran
# as fast with it (1,178 / 1,200 against 1,228 / 1,202 env-steps/s at batch 1024, alternating
# processes); --mjx-eigen-threads drops it. It makes the deadlock rarer, not impossible: a try
# that hangs anyway is retried (MJX_TRIES).
MJX_SINGLE_THREAD_EIGEN = '--xla_cpu_multi_thread_eigen=false'


def _mjx_flags(flags: str, batch: int, eigen_threads: bool) -> str:
  """The $XLA_FLAGS of MJX's child process from this process's ``flags``."""
  # MJX runs on one device, without the split into one device per core, and its batches with
  # XLA's default loop threshold (at batch 1 it runs, and faster, with mjx_py's 1 MB). Until
  # stop 64 its batches had a threshold of 32 KB; with it MJX's humanoid at batch 1024 hung in
  # 2 of 3 processes even without the Eigen pool (below), and in none of 5 with XLA's default;
  # the ant ran as fast with either (1,137 / 1,141 env-steps/s with the default against 1,113 /
  # 1,206, alternating processes).
  child = re.sub(r'\s*--xla_force_host_platform_device_count=\d+', '', flags)
  if batch > 1:
    child = re.sub(r'\s*--xla_backend_extra_options=\S*small_while_loop_byte_threshold=\d+',
                   '', child)
  if eigen_threads:
    child = re.sub(r'\s*--xla_cpu_multi_thread_eigen=\w+', '', child)
  elif 'multi_thread_eigen' not in child:
    child += ' ' + MJX_SINGLE_THREAD_EIGEN
  return child.strip()


# tries of MJX's measurement (MJX_TRIES), each a fresh child process, and how long after its
# compile a try may take to finish its warm-up run (MJX_WARM_TIMEOUT s) and then its timed runs
# (MJX_RUN_FACTOR times the warm-up run's time each, and 30 s more), before it counts as hung.
# The Eigen flag above made the deadlock rarer, not impossible: at stop 65 MJX's humanoid at
# batch 1024 alone (10 steps, the child's flags) hung in 2 of 3 processes, every hang with both
# of the pool's threads in lapack_spotrf_ffi -> ParallelBatchMap -> BlockingCounter::Wait (gdb),
# and the third ran 1,972 env-steps/s. A try that hangs is killed and the next one starts; MJX
# itself is unchanged. jaxlib 0.10.2's batched LAPACK kernels split a batch over the intra-op
# pool and wait for the pieces, so concurrent calls can take every thread (the pool's size is
# the process's CPU affinity). jaxlib 0.11.2 runs a batch's pieces in turn: with --mjx-python
# in a jax 0.11.2 environment MJX's humanoid at batch 1024 ran on its first try (stop 72).
# MJX_WARM_TIMEOUT is for rollouts of up to MJX_WARM_NSTEP steps and grows in proportion beyond
# (at stop 71 a 100-step warm-up run of MJX's ant at batch 1024 did not end within 120 s in
# three tries).
MJX_TRIES = 4
MJX_WARM_TIMEOUT = 120.0
MJX_WARM_NSTEP = 20
MJX_RUN_FACTOR = 5.0


# --mjx-python: MJX's child in another Python interpreter (e.g. a Python 3.12 virtual
# environment with jax 0.11.2, whose batched LAPACK kernels run a batch's pieces one after the
# other instead of waiting on the intra-op pool, so MJX's humanoid at batch 1024 does not
# deadlock). multiprocessing cannot start it (a spawned child takes the parent's sys.path, here
# another Python's site-packages), so it is a subprocess running _CHILD_PROGRAM: it loads the
# worker's source file as a module, reads the worker's arguments from stdin (JSON) and writes
# each message the worker puts as a line on stdout (_CHILD_TAG, then JSON).
_CHILD_TAG = 'mjx-child-message '
_CHILD_PROGRAM = f"""
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location('mjx_child_worker', sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
class Messages:
  def put(self, message):
    print({_CHILD_TAG!r} + json.dumps(message), flush=True)
getattr(module, sys.argv[2])(*json.load(sys.stdin), Messages())
"""
# the versions the other interpreter reports (mjx_python_versions), after one computation (XLA
# reads $XLA_FLAGS when it starts, and ends a process whose flags it does not know)
_VERSIONS_PROGRAM = ('import jax, jaxlib, mujoco\nfrom mujoco import mjx\n'
                     'jax.numpy.zeros(1).block_until_ready()\n'
                     'print(f"jax {jax.__version__}, jaxlib {jaxlib.__version__}, '
                     'mujoco {mujoco.__version__}")')


def _child_env(flags: str) -> dict:
  """The environment of a child in another interpreter: $XLA_FLAGS ``flags``, and this
  checkout's mjx_py importable (its package's parent directory first on $PYTHONPATH)."""
  root = os.path.dirname(os.path.dirname(os.path.abspath(mjx_py.__file__)))
  path = os.environ.get('PYTHONPATH')
  return dict(os.environ, XLA_FLAGS=flags,
              PYTHONPATH=root + (os.pathsep + path if path else ''))


def mjx_python_versions(python: str, flags: str = '') -> str:
  """'jax X, jaxlib Y, mujoco Z' of the Python interpreter ``python`` (run with $XLA_FLAGS
  ``flags``); raises RuntimeError, with the interpreter's last error line, when it cannot
  import jax, mujoco and MJX or does not start."""
  try:
    res = subprocess.run([python, '-c', _VERSIONS_PROGRAM], capture_output=True, text=True,
                         env=_child_env(flags), timeout=300)
  except OSError as e:
    raise RuntimeError(f'--mjx-python {python}: {e}') from None
  if res.returncode:
    last = (res.stderr.strip().splitlines() or ['no output'])[-1]
    raise RuntimeError(f'--mjx-python {python} cannot run MJX (exit status {res.returncode}: '
                       f'{last})')
  return res.stdout.strip()


class _OtherPython:
  """A worker (a module-level function with _mjx_worker's arguments and messages) run by
  _CHILD_PROGRAM in the Python interpreter ``python``, with $XLA_FLAGS ``flags``; its messages
  arrive in ``queue`` as they do from a multiprocessing child. If it exits without its 'done'
  message, a 'done' message with its exit status and last error line follows."""

  def __init__(self, python: str, worker, args: tuple, flags: str):
    source = os.path.abspath(worker.__code__.co_filename)
    self.queue = queue_module.Queue()
    self._errors = collections.deque(maxlen=1)      # its last error line
    self.proc = subprocess.Popen([python, '-c', _CHILD_PROGRAM, source, worker.__name__],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, env=_child_env(flags))
    self._stderr = threading.Thread(target=self._read_errors, daemon=True)
    self._stderr.start()
    threading.Thread(target=self._read_messages, daemon=True).start()
    self.proc.stdin.write(json.dumps(list(args)))
    self.proc.stdin.close()

  def _read_errors(self):
    for line in self.proc.stderr:
      if line.strip():
        self._errors.append(line.strip())

  def _read_messages(self):
    for line in self.proc.stdout:
      if line.startswith(_CHILD_TAG):
        kind, value = json.loads(line[len(_CHILD_TAG):])
        self.queue.put((kind, tuple(value) if isinstance(value, list) else value))
        if kind == 'done':
          return
    status = self.proc.wait()
    self._stderr.join(timeout=30)    # its last lines (it ends at the end of the output)
    last = self._errors[-1] if self._errors else 'no error output'
    self.queue.put(('done', f'n/a (its interpreter exited with status {status}: {last})'))

  def kill(self):
    self.proc.kill()

  def join(self):
    self.proc.wait()


def _time_mjx_limited(xml: str, batch: int, nstep: int, repeat: int, timeout: float,
                      eigen_threads: bool = False, worker=None, python: str | None = None):
  """_time_mjx in a child process, retried in a fresh one when a try hangs after its compile
  (see MJX_TRIES), given up after ``timeout`` seconds in all (MJX's XLA compile on CPU can
  take many minutes, e.g. for a 20-link chain): ((compile s, steps/s), hung tries) or a
  message. ``worker`` (None: _mjx_worker) is the child's function, with _mjx_worker's
  arguments and messages; ``python`` (None: this interpreter, a multiprocessing child) another
  Python interpreter to run it in (--mjx-python, _OtherPython)."""
  ctx = multiprocessing.get_context('spawn')
  flags = os.environ.get('XLA_FLAGS', '')
  child_flags = _mjx_flags(flags, batch, eigen_threads)
  worker = worker or _mjx_worker
  start = time.perf_counter()
  hung = 0
  for _ in range(MJX_TRIES):
    if python is not None:
      try:
        proc = _OtherPython(python, worker, (xml, batch, nstep, repeat), child_flags)
      except OSError as e:
        return f'n/a (--mjx-python {python}: {e})'
      queue = proc.queue
    else:
      queue = ctx.Queue()
      proc = ctx.Process(target=worker, args=(xml, batch, nstep, repeat, queue))
      os.environ['XLA_FLAGS'] = child_flags
      try:
        proc.start()                 # the child reads $XLA_FLAGS as it is now
      finally:
        os.environ['XLA_FLAGS'] = flags
    try:
      limit = None                   # the compile: until the whole timeout
      while True:
        left = timeout - (time.perf_counter() - start)
        wait = left if limit is None else min(left, limit)
        if wait <= 0:
          raise queue_module.Empty
        kind, value = queue.get(timeout=wait)
        if kind == 'done':
          return value if isinstance(value, str) else (value, hung)
        # after the compile the warm-up run, after that the timed runs, each with its limit
        limit = (MJX_WARM_TIMEOUT * max(1.0, nstep / MJX_WARM_NSTEP) if kind == 'compiled'
                 else MJX_RUN_FACTOR * repeat * value + 30.0)
    except queue_module.Empty:
      if limit is None or time.perf_counter() - start >= timeout:
        return f'not finished in {time.perf_counter() - start:.0f} s ({hung} tries hung)'
      hung += 1
    finally:
      proc.kill()
      proc.join()
  return f'hung in all {hung} tries ({time.perf_counter() - start:.0f} s)'


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('model')
  parser.add_argument('--batch', type=int, nargs='+', default=[1, 64, 1024])
  parser.add_argument('--nstep', type=int, default=200)
  parser.add_argument('--mjx-nstep', type=int, default=20,
                      help='steps per MJX rollout: the first steps of those timed for mjx_py, '
                           'with the same controls (MJX on CPU is slow; its compile time does not '
                           'depend on this, since the steps run in lax.scan)')
  parser.add_argument('--no-mjx', action='store_true', help='skip MJX')
  parser.add_argument('--mjx-eigen-threads', action='store_true',
                      help="run MJX with XLA:CPU's Eigen thread pool (by default its child "
                           'process runs with --xla_cpu_multi_thread_eigen=false, since with the '
                           "pool MJX's batched Cholesky can deadlock on a 2-core CPU)")
  parser.add_argument('--mjx-python', default=None, metavar='PYTHON',
                      help='run MJX in this Python interpreter (it needs jax, mujoco and '
                           "mujoco-mjx; this checkout's mjx_py is put on its path): e.g. a "
                           "virtual environment with jax 0.11.2, whose batched LAPACK Cholesky "
                           "does not deadlock MJX's humanoid as jaxlib 0.10.2's does on a 2-core "
                           'CPU. The table names both JAX versions')
  parser.add_argument('--mjx-timeout', type=float, default=600,
                      help='seconds before an MJX measurement (compile + two runs) is given up')
  parser.add_argument('--smooth', action='store_true', help='disable the constraint solver')
  parser.add_argument('--option', default='',
                      help='an <option .../> element appended to the model for all three '
                           'engines, e.g. \'<option noslip_iterations="0"/>\'')
  parser.add_argument('--fast-compile', action='store_true',
                      help="compile mjx_py's rollout with mjx_py.FAST_COMPILE (the default; "
                           'kept for older command lines)')
  parser.add_argument('--full-opt', action='store_true',
                      help="compile mjx_py's rollout with XLA's default CPU emitters instead of "
                           'mjx_py.FAST_COMPILE (slower to compile and, measured with jax '
                           '0.10.2, not faster to run)')
  parser.add_argument('--repeat', type=int, default=3,
                      help='timed runs of each engine per batch size (the fastest is reported)')
  parser.add_argument('--nconmax', type=int, default=None,
                      help="mjx_py's contact capacity (put_model nconmax; default: its "
                           'per-geom budget); MuJoCo C and MJX size their contacts their own way')
  parser.add_argument('--njmax', type=int, default=None,
                      help="mjx_py's constraint-row capacity (put_model njmax; default: every "
                           'row its contact capacity can produce)')
  parser.add_argument('--fit-capacity', action='store_true', help=testspeed.FIT_HELP)
  parser.add_argument('--also-default', action='store_true',
                      help="with --fit-capacity, --nconmax or --njmax: also time mjx_py at its "
                           'default capacities in the same run (a second line per batch, '
                           "against the same MuJoCo C and MJX figures)")
  parser.add_argument('--devices', type=int, default=None,
                      help="CPU devices mjx_py splits a batch over (mjx_py.xla.set_cpu_flags; "
                           'default: one per core, 1: a single device; MJX runs on one)')
  args = parser.parse_args()
  # before any JAX computation (see mjx_py.xla); MJX's child process gets its own variant of
  # them (_time_mjx_limited)
  set_cpu_flags(args.devices)
  with open(args.model) as f:
    xml = f.read()
  if args.option:
    xml = testspeed.with_element(xml, args.option)
  if args.smooth:
    xml = testspeed.disable_constraints(xml)
  testspeed.apply_fit(args, xml, os.path.dirname(args.model))

  def ours(batch, **capacities):
    return testspeed.time_rollout(
        xml, batch, args.nstep, base_dir=os.path.dirname(args.model),
        compiler_options=testspeed.compile_options_for(batch, not args.full_opt),
        repeat=args.repeat, **capacities)

  ncpu = os.cpu_count() or 1
  if not args.no_mjx and args.mjx_python:
    try:
      # with the child's flags at batch 1, which keep the most of this process's
      theirs = mjx_python_versions(args.mjx_python, _mjx_flags(
          os.environ.get('XLA_FLAGS', ''), 1, args.mjx_eigen_threads))
    except RuntimeError as e:
      parser.error(str(e))
    import mujoco
    print(f'MJX runs in {args.mjx_python} ({theirs}); mjx_py and MuJoCo C in {sys.executable} '
          f'(jax {jax.__version__}, mujoco {mujoco.__version__})')
  if not args.no_mjx and args.mjx_nstep != args.nstep:
    print(f'MJX times the first {args.mjx_nstep} of the {args.nstep} steps timed for mjx_py and '
          'MuJoCo C (--mjx-nstep; MJX\'s speed depends on the stretch of motion: give '
          f'--mjx-nstep {args.nstep} to time the same steps)')
  print(f"{'batch':>6} {'ours':>12} {'compile s':>10} {'MuJoCo 1thr':>12} "
        f"{f'MuJoCo {ncpu}thr':>12} {'MJX':>12} {'MJX compile':>11} {f'/ C {ncpu}thr':>9} "
        f"{'/ MJX':>7}  (env-steps/s; the last two: ours as a share of MuJoCo C on all "
        "threads and as a multiple of MJX, the issue's two throughput targets)")
  for batch in args.batch:
    c, sps = ours(batch, nconmax=args.nconmax, njmax=args.njmax)
    print(f'{batch:>6} {sps:>12,.0f} {c:>10.2f}', end=' ', flush=True)
    default = None
    if args.also_default and (args.nconmax, args.njmax) != (None, None):
      default = ours(batch)
    c1 = _time_mujoco(xml, batch, args.nstep, 1, args.repeat)
    cn = _time_mujoco(xml, batch, args.nstep, ncpu, args.repeat)
    print(f'{c1:>12,.0f} {cn:>12,.0f}', end=' ', flush=True)
    share = f'{sps / cn:>9.0%}'
    mjx_sps = None
    if args.no_mjx:
      print(f"{'':>12} {'':>11} {share}", flush=True)
    else:
      res = _time_mjx_limited(xml, batch, args.mjx_nstep, args.repeat, args.mjx_timeout,
                              args.mjx_eigen_threads, python=args.mjx_python)
      if isinstance(res, str):
        print(f'MJX: {res} {share}', flush=True)
      else:
        (mjx_compile, mjx_sps), hung = res
        note = f'  (MJX hung in {hung} of {hung + 1} tries)' if hung else ''
        print(f'{mjx_sps:>12,.0f} {mjx_compile:>11.2f} {share} {sps / mjx_sps:>6.1f}x{note}',
              flush=True)
    if default is not None:
      cd, sd = default
      print(f"{'':>6} {sd:>12,.0f} {cd:>10.2f}  (mjx_py at its default capacities: "
            f'{sd / cn:.0%} of MuJoCo C on {ncpu} threads'
            + (f', {sd / mjx_sps:.1f}x MJX' if mjx_sps else '') + ')', flush=True)


if __name__ == '__main__':
  main()
