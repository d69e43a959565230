"""XLA compile options for mjx_py's programs.

FAST_COMPILE = {'xla_cpu_use_fusion_emitters': False}: XLA:CPU builds each fusion with its
classic elemental emitters instead of the newer MLIR fusion emitters (its default). Pass it to
``jax.jit(fn, compiler_options=mjx_py.FAST_COMPILE)`` (or to ``.lower(...).compile(
compiler_options=...)``). It is an XLA:CPU option; ``compile_options()`` gives it only when
JAX's default backend is the CPU.

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

set_cpu_flags(): adds CPU_XLA_FLAGS to $XLA_FLAGS, which XLA reads once, when it starts (the
first computation of the process); so call it before any JAX computation. CPU_XLA_FLAGS raises
XLA:CPU's small-while-loop threshold (the backend option
xla_cpu_small_while_loop_byte_threshold, default 1024 bytes) to 32768: a while loop whose
buffers fit it is compiled into one kernel (a "small call") instead of running each step's
operations one by one on XLA's thunk executor, whose per-operation cost dominates a single
world's step. It is not a compile option (``compiler_options`` cannot set backend options), hence
the environment variable; results are unchanged (float64 rollouts bit-identical). Measured
(float32 rollouts of 200 steps at batch 1, 2-core CPU, FAST_COMPILE, each setting in its own
process, medians of 7 over 2-3 processes): humanoid 6,038-6,150 -> 6,727-6,817 env-steps/s,
hopper 6,051-6,122 -> 7,145-7,211, ant 3,044-3,089 -> 3,819-3,888; at batch 64 the humanoid
gained about 2% (15,172-16,233 -> 15,544-16,647) and at batch 1024 nothing (its loops are
larger than the threshold). The main job, ``mjx_py.testspeed`` and
``examples/compare_speed.py`` call it at start (so MJX, measured in the same process, runs
with it too); library users call it themselves, or set the flag in $XLA_FLAGS.

enable_compile_cache(path=None): JAX's persistent compilation cache in ``path`` (default
$MJX_PY_CACHE_DIR, else ~/.cache/mjx_py/xla), so that a program compiled once (the same model,
batch size, options and JAX version) loads from disk in a later process instead of being
compiled again. Measured on the humanoid's step (FAST_COMPILE, 2-core CPU): XLA compile 4.35 s
in the first process, 0.43 s in the second (tracing and lowering, 1.7 s, are not cached). The
main job enables it with ``--cache``; library users call it themselves.
"""

from __future__ import annotations

import os

import jax

FAST_COMPILE = {'xla_cpu_use_fusion_emitters': False}
CPU_XLA_FLAGS = '--xla_backend_extra_options=xla_cpu_small_while_loop_byte_threshold=32768'


def compile_options(fast: bool = True) -> dict | None:
  """FAST_COMPILE when ``fast`` and JAX's default backend is the CPU, else None (XLA's
  defaults): the compiler_options the main job and the benchmark scripts pass."""
  return dict(FAST_COMPILE) if fast and jax.default_backend() == 'cpu' else None


def set_cpu_flags() -> bool:
  """Appends CPU_XLA_FLAGS to $XLA_FLAGS (see the module docstring). Returns True when it did;
  False when XLA has already started in this process (the flags would have no effect: call it
  before the first JAX computation) or when $XLA_FLAGS already sets xla_backend_extra_options
  (the user's setting is kept). Harmless on accelerators (the option is XLA:CPU's)."""
  flags = os.environ.get('XLA_FLAGS', '')
  if 'xla_backend_extra_options' in flags or _backend_started():
    return False
  os.environ['XLA_FLAGS'] = f'{flags} {CPU_XLA_FLAGS}'.strip()
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


__all__ = ['FAST_COMPILE', 'CPU_XLA_FLAGS', 'compile_options', 'set_cpu_flags',
           'default_cache_dir', 'enable_compile_cache']
