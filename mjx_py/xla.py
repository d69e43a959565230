"""XLA compile options for mjx_py's programs.

FAST_COMPILE = {'xla_cpu_use_fusion_emitters': False, 'xla_disable_hlo_passes':
'tree_reduction_rewriter'}: XLA:CPU builds each fusion with its classic elemental emitters
instead of the newer MLIR fusion emitters (its default), and leaves out its tree-reduction
rewrite (below). Pass it to ``jax.jit(fn, compiler_options=mjx_py.FAST_COMPILE)`` (or to
``.lower(...).compile(compiler_options=...)``). The emitters' option is XLA:CPU's, and only
some XLAs have it: jaxlib 0.10.2's does; jaxlib 0.11.2's does not (its XLA:CPU has only the new
emitters: the option raises "No such compile option", and ``--xla_cpu_use_fusion_emitters`` in
$XLA_FLAGS ends the process as XLA starts; seen on a lent GPU machine). ``compile_options()``
gives it only when JAX's default backend is the CPU and that backend accepts it
(``fast_compile_supported()``, one tiny compile per process), so the main job and the benchmark
scripts run on either; ``compile_options(batch=B)`` adds NO_LIBRARY_FUSIONS (below) for
programs of B >= 32 worlds per device.

Measured on the humanoid's step (models/humanoid.xml with contacts, float32, 2-core CPU, jax
0.10.2): the XLA compile took 4.3 s instead of 6.4 s and the process peaked at 405 MB instead
of 958 MB (the emitters' transient memory). Its run time was 7-13% slower in early rounds;
with the current code the classic emitters run as fast or faster: rollouts of 100 steps
(examples/compare_speed.py, fastest of 3, env-steps/s at batch 1 / 64 / 1024) gave the humanoid
5,506 / 16,151 / 21,844 against 5,074 / 11,120 / 15,208 with XLA's defaults, the ant 2,773 /
8,579 / 12,400 against 2,497 / 6,727 / 11,937, the hopper 5,550 / 22,065 / 29,431 against
5,497 / 22,111 / 28,859; the rollouts compiled in 8.8-11.6 s against 13.1-15.3 s (humanoid),
9.2-12.3 against 10.9-14.6 s (ant) and within a second either way (hopper). So the main job
(``python -m mjx_py``), ``mjx_py.testspeed`` and ``examples/compare_speed.py`` use it on CPU
unless ``--full-opt`` is given, and it is the recommended option for ``jax.jit(step)`` on CPU.

The tree-reduction rewrite splits every reduction of more than 32 elements into a windowed
reduction and a second reduction (for the rounding of very long sums); a step's reductions are
short (rows, dofs, contact slots, or worlds of a batch) and each split costs the program a
kernel of its own to compile: the humanoid's batch-1024 step had 60 of them, 3.8 s of LLVM
time summed over both cores (examples/profile_compile.py). Measured with the emitters' option
on (humanoid, float32, 2-core CPU, one process per setting, two each): the XLA compile of a
30-step rollout at batch 1024 from 27.7-29.8 s to 25.7-26.9 s (its final qpos identical), of
a 200-step rollout at batch 1 from 17.3-18.4 s to 16.8-17.7 s, of the gradient through 100
steps from 37.8 to 35.8 s; run times within the machine's spread (batch 1024: 4,648-4,927
against 4,222-4,980 env-steps/s, batch 1: 1,740-2,196 against 1,386-1,554); float64 100-step
rollouts differ by rounding (qpos 8.5e-14, qacc 2.0e-10 of 1.6e3). The figures are from a
machine that ran several times slower than the ones above.

NO_LIBRARY_FUSIONS = {'xla_cpu_experimental_ynn_fusion_type': ''}: XLA:CPU (jaxlib 0.10.2)
hands some fused kernels to the YNNPACK library (its "library fusions": short reductions such
as safe_norm's sums of squares, batched small dot products such as make_frame's and the
quaternion forms' contractions); the option turns them off, so that those kernels are XLA's
own fused loops. For a batch of worlds that is faster: a library fusion is one thunk call per
kernel, with its own buffers, where XLA's loop fuses with its neighbours. Measured (float32,
FAST_COMPILE, 2-core CPU, one device per core; one process, the two programs compiled from
one lowering and called alternately, 11 calls of a 20-step rollout each, median time ratio
with the option to without): hopper 0.839 at batch 1024 and 0.934 at 64, humanoid 0.874 at
1024 and 0.835-0.883 at 64, ant 0.844 at 1024 and 0.906 at 64 (keeping only the library's
dots: 0.86-0.93; only its reductions: 0.98). compile_options adds it for programs of at least
LIBRARY_FUSIONS_MIN_BATCH = 32 worlds per device (``batch``), not below: a library fusion
inside a while loop also keeps XLA:CPU from compiling that loop into one kernel (the small-loop
threshold below), and without them the loops of a small model's small batch fall under the
threshold whole, the step's and a rollout's too. One such kernel runs fast but compiles
slowly: the hopper's batch-1 rollout of 200 steps ran 15,800-22,000 instead of 5,400
env-steps/s but compiled in 30-35 s instead of 10-12 s, batches of 2 and 8 in 28 and 42 s, its
gradient through 100 steps in 120 s instead of 30 s (3x faster to run), and the one-world
step of the hopper and the cart-pole (RK4: the stages' scan became one kernel) in about twice
the time. The humanoid's batch-1 programs did not change. A 128 KB threshold avoids those
kernels but takes the humanoid at batch 64 back to its speed with the library fusions, so the
option is tied to the batch instead.

NO_LOOP_HOISTING = 'while-loop-invariant-code-motion': the HLO pass compile_options also leaves
out (``xla_disable_hlo_passes``, after FAST_COMPILE's) from LIBRARY_FUSIONS_MIN_BATCH worlds per
device. The pass hoists each while loop's invariant computations out of its body; a step's
loops (the solver's iterations, the CPU chunks, a rollout's scan) hold many, and the compile
pays for the hoisting more than the batched run gains from it. Measured (humanoid, float32,
2-core CPU, both devices, the programs with and without it compiled in one process, 11
alternating calls of 20-step rollouts, median-pair / fastest time ratio; stop 75): batch 1024
compiled in 20.73 instead of 30.77 s and ran at 0.951 / 0.959 of the time, batch 64 (the main
job's) in 20.77 instead of 32.13 s at 0.967 / 0.990. A single world's rollout compiled faster
too (10.93 against 14.72 s, 200 steps) but ran slower (1.050 / 1.083), so below the batch
threshold the pass stays. Leaving it out changed no result where checked: float64 100-step
rollouts at batch 32 (humanoid, ant) and the humanoid's float32 gradient through 100 steps,
each compiled with and without it, were bit-identical.

set_cpu_flags(): adds CPU_XLA_FLAGS to $XLA_FLAGS, which XLA reads once, when it starts (the
first computation of the process); so call it before any JAX computation. CPU_XLA_FLAGS raises
XLA:CPU's small-while-loop threshold (the backend option
xla_cpu_small_while_loop_byte_threshold, default 1024 bytes) to 1 MB: a while loop whose
buffers fit it is compiled into one kernel (a "small call") instead of running each step's
operations one by one on XLA's thunk executor, whose per-operation cost dominates a single
world's step. It is not a compile option (``compiler_options`` cannot set backend options), hence
the environment variable; results are unchanged up to rounding (below). Measured
(float32 rollouts of 200 steps at batch 1, 2-core CPU, FAST_COMPILE, each setting in its own
process, medians of 7 over 2-3 processes): humanoid 6,038-6,150 -> 6,727-6,817 env-steps/s,
hopper 6,051-6,122 -> 7,145-7,211, ant 3,044-3,089 -> 3,819-3,888; at batch 64 the humanoid
gained about 2% (15,172-16,233 -> 15,544-16,647) and at batch 1024 nothing (its loops are
larger than the threshold). Those figures are for a threshold of 32 KB. With one device per
core (below) each device's program runs on its own, and whole loops pay more: raised to 1 MB
(float32, FAST_COMPILE, one process per setting, medians of 7), the humanoid at batch 64 split
over 2 devices went from 26,322-28,376 to 32,132-32,729 env-steps/s, at batch 1 (300 steps)
from 7,520-7,568 to 8,286-8,391, the hopper at batch 1 from 7,133-7,408 to 7,655-7,760; the
ant at batch 1 (3,919-3,976 against 3,838-3,901), the hopper and the ant at batch 64 split
(46,547 -> 46,687, 18,976 -> 19,818), the humanoid at batch 1024 split (30,045 -> 29,504),
at batch 64 on one device (16,510-16,668 against 16,641-16,903), the gradient through 100
steps (49.3 against 49.1 ms) and the compile times moved within noise. Float64 rollouts of 100
steps: bit-identical at batch 8 (humanoid, ant); at batch 1 within 1.6e-10 (the humanoid's
qpos and qacc: the loop compiled as one kernel rounds some sums differently). A threshold of
64 MB (which takes in the CPU chunks' loop of a batch-1024 step, and a whole batch-64 rollout)
measured within the machine's spread at batch 64 and 1024 (README, stop 36): it stays 1 MB.
The main job, ``mjx_py.testspeed`` and ``examples/compare_speed.py`` call it at start (MJX,
measured in a child process of compare_speed, gets its own variant); library users call it
themselves, or set the flag in $XLA_FLAGS.

set_cpu_flags also splits the CPU into one XLA device per core (DEVICE_COUNT_FLAG, JAX's
``--xla_force_host_platform_device_count``; ``devices=1`` keeps one). A program on one device
runs as before, on the shared thread pool of all cores; ``mjx_py.shard_worlds`` runs a batch's
blocks on all devices at once, one per core, as mujoco.rollout runs a thread per core. XLA's
own use of the second core inside one program is small: the humanoid at batch 1024 (float32,
FAST_COMPILE, 50 steps, XLA's default loop threshold) ran 14,479 env-steps/s pinned to one
core and 22,485 on two as one device, and 29,259 as two devices under shard_worlds; at batch
64, 16,735 as one device and 28,277 as two (one process each). A batch of one world stays on
one device. The main job and the benchmark scripts split every batch that divides evenly
(``mjx_py.testspeed.per_device``). MJX, in examples/compare_speed.py, stays on one device:
split the same way it deadlocks in jaxlib's LAPACK Cholesky (see mjx_py.batch.shard_worlds).

enable_compile_cache(path=None): JAX's persistent compilation cache in ``path`` (default
$MJX_PY_CACHE_DIR, else ~/.cache/mjx_py/xla), so that a program compiled once (the same model,
batch size, options and JAX version) loads from disk in a later process instead of being
compiled again. Measured on the humanoid's step (FAST_COMPILE, 2-core CPU): XLA compile 4.35 s
in the first process, 0.43 s in the second (tracing and lowering, 1.7 s, are not cached). The
main job enables it with ``--cache``; library users call it themselves.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import hashlib
import os
import pickle
import threading

import jax
import jax.numpy as jnp
import numpy as np

FAST_COMPILE = {'xla_cpu_use_fusion_emitters': False,
                'xla_disable_hlo_passes': 'tree_reduction_rewriter'}
NO_LIBRARY_FUSIONS = {'xla_cpu_experimental_ynn_fusion_type': ''}
# the HLO pass compile_options leaves out of batched programs (see the module docstring)
NO_LOOP_HOISTING = 'while-loop-invariant-code-motion'
# worlds per device from which compile_options adds NO_LIBRARY_FUSIONS and NO_LOOP_HOISTING
# (see the docstring)
LIBRARY_FUSIONS_MIN_BATCH = 32
CPU_XLA_FLAGS = ('--xla_backend_extra_options='
                 'xla_cpu_small_while_loop_byte_threshold=1048576')
DEVICE_COUNT_FLAG = '--xla_force_host_platform_device_count'


def full_precision(fn):
  """``fn`` traced with jax.default_matmul_precision('highest') unless the caller has set a
  default precision of its own (jax_default_matmul_precision, globally or in a context).

  JAX's default lets float32 matrix products run in reduced precision on accelerators (TF32 on
  recent NVIDIA GPUs, bfloat16 passes on TPUs); the dynamics' sums (M qacc, J' D J, the
  Cholesky solves, the Jacobian products) need float32's full mantissa, as MuJoCo's float64
  arithmetic does. The setting is read when an operation is traced, so step, forward and
  set_const carry it, and so do the rules JAX traces later, outside their call (the solver's
  and the linear solves' custom JVPs, mjx_py.batching's vmap rules): under jax.grad or
  jax.vmap of a jitted step every product is a full-precision one. CPUs compute float32
  products in full precision whatever the setting; on an H200 the humanoid at batch 8192 ran
  as fast either way (README, GPU)."""
  @functools.wraps(fn)
  def wrapped(*args, **kwargs):
    if jax.config.jax_default_matmul_precision is not None:
      return fn(*args, **kwargs)
    with jax.default_matmul_precision('highest'):
      return fn(*args, **kwargs)
  return wrapped


def compile_options(fast: bool = True, batch: int = 1) -> dict | None:
  """mjx_py's XLA:CPU compile options, when ``fast`` and JAX's default backend is the CPU:
  FAST_COMPILE, and for a program that steps at least LIBRARY_FUSIONS_MIN_BATCH worlds on
  each device (``batch``: the worlds one device's program steps) also NO_LIBRARY_FUSIONS and
  the NO_LOOP_HOISTING pass left out, the first two where that backend accepts them
  (fast_compile_supported, no_library_fusions_supported; see the module docstring). None
  (XLA's defaults) when ``fast`` is False, on an accelerator, or when none applies. The
  compiler_options the main job and the benchmark scripts pass."""
  if not fast or jax.default_backend() != 'cpu':
    return None
  options = {}
  if fast_compile_supported():
    options.update(FAST_COMPILE)
  if batch >= LIBRARY_FUSIONS_MIN_BATCH:
    if no_library_fusions_supported():
      options.update(NO_LIBRARY_FUSIONS)
    passes = options.get('xla_disable_hlo_passes')
    options['xla_disable_hlo_passes'] = ','.join(filter(None, [passes, NO_LOOP_HOISTING]))
  return options or None


def option_groups(options: dict | None) -> list:
  """The names of mjx_py's option sets ('FAST_COMPILE', 'NO_LIBRARY_FUSIONS',
  'NO_LOOP_HOISTING') that the compile options ``options`` include (the HLO passes left out
  compared as a set)."""
  options, passes = _split_passes(options)
  names = []
  for name, group in (('FAST_COMPILE', FAST_COMPILE), ('NO_LIBRARY_FUSIONS', NO_LIBRARY_FUSIONS)):
    rest, need = _split_passes(group)
    if (rest or need) and rest.items() <= options.items() and need <= passes:
      names.append(name)
  return names + (['NO_LOOP_HOISTING'] if NO_LOOP_HOISTING in passes else [])


def _split_passes(options: dict | None) -> tuple:
  """(the compile options without xla_disable_hlo_passes, the set of HLO passes it names)."""
  options = dict(options or {})
  return options, set(filter(None, options.pop('xla_disable_hlo_passes', '').split(',')))


def _cpu_accepts(options: dict) -> bool:
  """Whether the CPU backend's XLA accepts the compile options ``options``: a one-operation
  program compiled with them. Starts JAX's backends."""
  cpu = jax.devices('cpu')[0]
  try:
    jax.jit(lambda x: x + 1).lower(jax.device_put(np.float32(0), cpu)).compile(
        compiler_options=options)
  except Exception as e:  # noqa: BLE001  (jaxlib raises its own runtime error type)
    if 'compile option' in str(e) or 'not a valid enum value' in str(e):
      return False
    raise
  return True


@functools.cache
def fast_compile_supported() -> bool:
  """Whether the CPU backend's XLA has FAST_COMPILE's options (see the module docstring),
  asked once per process."""
  return _cpu_accepts(FAST_COMPILE)


@functools.cache
def no_library_fusions_supported() -> bool:
  """Whether the CPU backend's XLA has NO_LIBRARY_FUSIONS's option (see the module
  docstring), asked once per process."""
  return _cpu_accepts(NO_LIBRARY_FUSIONS)


def cpu_count() -> int:
  """The CPU cores this process may run on (its affinity mask where the OS reports one)."""
  try:
    return max(1, len(os.sched_getaffinity(0)))
  except AttributeError:                    # no sched_getaffinity (macOS, Windows)
    return max(1, os.cpu_count() or 1)


def set_cpu_flags(devices: int | None = None) -> bool:
  """Appends CPU_XLA_FLAGS and the CPU device count to $XLA_FLAGS (see the module docstring).

  devices: how many devices XLA:CPU presents (``--xla_force_host_platform_device_count``);
  None for one per core (``cpu_count()``), 1 to keep a single device. Several devices change
  nothing for a program on one device; ``mjx_py.shard_worlds`` runs a batch on all of them.
  Returns True when it added anything; False when it added nothing: XLA has already started in
  this process (the flags would have no effect: call it before the first JAX computation), or
  $XLA_FLAGS already sets what it would add (the user's settings are kept: any
  xla_backend_extra_options, a device count; so is a count given by
  ``jax.config.update('jax_num_cpu_devices', n)``). Harmless on accelerators (both are
  XLA:CPU's)."""
  if _backend_started():
    return False
  flags = os.environ.get('XLA_FLAGS', '')
  add = []
  if 'xla_backend_extra_options' not in flags:
    add.append(CPU_XLA_FLAGS)
  count = cpu_count() if devices is None else int(devices)
  if (count > 1 and 'xla_force_host_platform_device_count' not in flags
          and getattr(jax.config, 'jax_num_cpu_devices', -1) in (-1, None)):
    add.append(f'{DEVICE_COUNT_FLAG}={count}')
  if not add:
    return False
  os.environ['XLA_FLAGS'] = ' '.join([flags] + add).strip()
  return True


def _backend_started() -> bool:
  """Whether JAX has started its backends (XLA has read $XLA_FLAGS by then)."""
  try:
    from jax._src import xla_bridge
    return bool(xla_bridge.backends_are_initialized())
  except (ImportError, AttributeError):     # another JAX layout: assume not started
    return False


def default_cache_dir() -> str:
  """$MJX_PY_CACHE_DIR, else ~/.cache/mjx_py/xla."""
  return os.environ.get('MJX_PY_CACHE_DIR') or os.path.join(
      os.path.expanduser('~'), '.cache', 'mjx_py', 'xla')


def enable_compile_cache(path: str | None = None, min_compile_secs: float = 1.0) -> str:
  """Turns on JAX's persistent compilation cache in ``path`` (created if missing; default
  ``default_cache_dir()``) for programs whose compile takes at least ``min_compile_secs``.
  Call it before the first compile of the process. Returns the directory."""
  path = os.path.abspath(path or default_cache_dir())
  os.makedirs(path, exist_ok=True)
  jax.config.update('jax_compilation_cache_dir', path)
  jax.config.update('jax_persistent_cache_min_compile_time_secs', float(min_compile_secs))
  return path


class gc_paused(contextlib.ContextDecorator):
  """Python's cyclic garbage collector paused while tracing (a context manager and a
  decorator; nested and concurrent uses share one pause, which ends with the last of them).

  Tracing and lowering a step allocate hundreds of thousands of Python objects (tracers, jaxpr
  equations, MLIR operations) that stay alive until the trace ends, so the collector's automatic
  full collections, triggered by allocation counts, keep walking a growing heap for almost
  nothing: measured on the humanoid (float32, 2-core CPU, gc.callbacks), 0.48 s of a 2.4 s trace
  of the one-world step, and 2.4 s of the 12.5 s trace and 0.55 s of the 4.2 s lowering of the
  gradient through 100 steps, mostly in 4-8 collections of the oldest generation. The entry
  points that trace the pipeline (forward, step, rollout, set_const) run under it, and so do the
  main job's and the benchmark scripts' ``jax.jit(...).lower(...)`` (through lower_paused, which
  also covers JAX's transposition under jax.grad, after mjx_py's functions have returned); lower
  your own the same way. Measured on the humanoid (float32, 2-core CPU, one process, the
  variants alternating, rounds 2 and 3 of 3: the first round starts cold), trace and lower
  without the pause, with it inside mjx_py's functions only, and around the whole lower: the
  one-world step 4.74-5.20 s, 4.76-5.09 s and 4.00-4.16 s; vmap(step) over 64 worlds 6.71-7.13
  s, 6.33-6.76 s and 5.91-6.33 s; the gradient through 100 steps 14.0-14.7 s, 12.8-13.5 s and
  11.3-11.9 s. XLA's compile allocates no Python objects, so it needs no pause, and leaving it
  out frees the trace's garbage first: the first collection after the pause collects what was
  made during it (the main job at batch 1 peaked at 557 MB with its compile paused too, 552 MB
  without, 546 MB before any pause). A collector the caller had disabled stays disabled."""

  _lock = threading.Lock()
  _depth = 0
  _resume = False

  def __enter__(self):
    cls = type(self)
    with cls._lock:
      if cls._depth == 0:
        cls._resume = gc.isenabled()
        gc.disable()
      cls._depth += 1
    return self

  def __exit__(self, *exc):
    cls = type(self)
    with cls._lock:
      cls._depth -= 1
      if cls._depth == 0 and cls._resume:
        gc.enable()
    return False


def lower_paused(jitted, *args, **kwargs):
  """``jitted.lower(*args, **kwargs)`` (trace and lower) with the collector paused (gc_paused);
  compile the result outside the pause, so that the trace's garbage is freed first."""
  with gc_paused():
    return jitted.lower(*args, **kwargs)


# ---------------------------------------------------------------------------------------------
# Traced programs on disk: jax.export's serialized StableHLO, keyed by everything that shapes it

PROGRAM_DIR = 'programs'         # lower_cached's files, under the compile cache's directory


@functools.lru_cache(maxsize=1)
def source_digest() -> str:
  """sha256 of the mjx_py package's Python sources (every .py file under the package, by
  relative path): part of lower_cached's key, so an edited engine never loads a stale trace."""
  root = os.path.dirname(os.path.abspath(__file__))
  h = hashlib.sha256()
  for folder, dirs, files in os.walk(root):
    dirs.sort()
    for name in sorted(f for f in files if f.endswith('.py')):
      path = os.path.join(folder, name)
      h.update(os.path.relpath(path, root).encode() + b'\0')
      with open(path, 'rb') as f:
        h.update(f.read() + b'\0')
  return h.hexdigest()


def program_key(name: str, args, consts=()) -> str:
  """lower_cached's key (hex sha256) for the function called ``name`` traced on ``args``
  (pytrees of arrays) with ``consts`` (pytrees it closes over, e.g. a Model): the package
  sources (source_digest), JAX's and jaxlib's versions, the backend and its devices, $XLA_FLAGS
  and JAX's float width; the arguments' structure, shapes, dtypes and shardings; the
  constants' structure (a Model's static metadata: sizes, options, names) and values."""
  h = hashlib.sha256()

  def put(*parts):
    for part in parts:
      h.update(str(part).encode() + b'\0')

  put(name, source_digest(), jax.__version__, jax.lib.__version__, jax.default_backend(),
      [d.device_kind for d in jax.devices()], os.environ.get('XLA_FLAGS', ''),
      jax.config.jax_enable_x64)
  leaves, treedef = jax.tree_util.tree_flatten(args)
  put(treedef)
  for x in leaves:
    put(jnp.shape(x), jnp.result_type(x), getattr(x, 'sharding', None))
  leaves, treedef = jax.tree_util.tree_flatten(consts)
  put(treedef)
  for x in leaves:
    x = np.asarray(x)
    put(x.shape, x.dtype)
    h.update(np.ascontiguousarray(x).tobytes())
  return h.hexdigest()


def export_supported() -> bool:
  """Whether jax.export can write programs here (its serialization needs the flatbuffers
  package: ``pip install 'mjx_py[cache]'``)."""
  try:
    import flatbuffers  # noqa: F401
  except ImportError:
    return False
  return True


def lower_cached(fn, *args, name: str, consts=(), cache_dir: str | None = None):
  """``jax.jit(fn).lower(*args)`` whose trace and lowering are kept on disk: (lowered, hit).

  The first call traces and lowers ``fn`` (under gc_paused) with ``jax.export``, as a function
  of the arguments' flat leaves, and writes the serialized program (StableHLO bytecode, a few
  hundred KB) with the result's tree structure (pickled) to
  ``cache_dir/programs/<program_key>.jaxexport``; a later call with the same key, in any
  process, reads them back instead of tracing (``hit`` True). Either way the result is the
  lowering of the exported program's call, to be compiled as usual (``.compile(...)``, which
  with enable_compile_cache on loads XLA's executable from the same directory), so a first and
  a later process compile the same module. The pickle is loaded from the directory as found:
  keep it private, as you would JAX's own cache.

  ``fn``: a function of pytrees of arrays returning a pytree of arrays; ``args``: the values it
  is called with (their shapes, dtypes and shardings fix the program; a shard_map over several
  devices is kept whole, and loads only with the same devices); ``name`` names it in the key
  and ``consts`` are the pytrees it closes over (a Model: its static metadata and its values
  are part of the key). Two functions must not share a name unless they are the same code: the
  key holds the mjx_py sources but not the caller's, so a caller's own ``fn`` carries its
  version in ``name``. Module globals changed at run time (e.g. mjx_py.solver.CPU_CHUNK) are not
  in the key. ``cache_dir`` defaults to default_cache_dir(). Needs export_supported()."""
  from jax import export
  path = os.path.join(os.path.abspath(cache_dir or default_cache_dir()), PROGRAM_DIR)
  file = os.path.join(path, program_key(name, args, consts) + '.jaxexport')
  leaves, in_tree = jax.tree_util.tree_flatten(args)
  hit = os.path.exists(file)
  if hit:
    with open(file, 'rb') as f:
      out_tree, data = pickle.load(f)
    exp = export.deserialize(bytearray(data))
  else:
    trees = []                   # the result's structure, set by the trace

    def flat(*xs):
      # the exported function takes and returns flat leaves: the pytrees' node types (Model,
      # Data) need no serialization of their own, the caller's args rebuild them
      out, tree = jax.tree_util.tree_flatten(fn(*jax.tree_util.tree_unflatten(in_tree, xs)))
      trees.append(tree)
      return out

    with gc_paused():
      exp = export.export(jax.jit(flat))(*leaves)
    out_tree = trees[0]
    os.makedirs(path, exist_ok=True)
    tmp = f'{file}.{os.getpid()}.tmp'
    with open(tmp, 'wb') as f:
      pickle.dump((out_tree, exp.serialize()), f)
    os.replace(tmp, file)        # atomic: a concurrent reader sees the whole file or none

  def call(*a):
    return jax.tree_util.tree_unflatten(out_tree, exp.call(*jax.tree_util.tree_leaves(a)))
  with gc_paused():
    return jax.jit(call).lower(*args), hit


__all__ = ['FAST_COMPILE', 'NO_LIBRARY_FUSIONS', 'LIBRARY_FUSIONS_MIN_BATCH', 'CPU_XLA_FLAGS',
           'DEVICE_COUNT_FLAG', 'compile_options', 'option_groups', 'fast_compile_supported',
           'no_library_fusions_supported', 'cpu_count', 'gc_paused', 'lower_paused',
           'set_cpu_flags', 'default_cache_dir', 'enable_compile_cache', 'PROGRAM_DIR',
           'source_digest', 'program_key', 'export_supported', 'lower_cached']
