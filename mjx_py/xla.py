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


def compile_options(fast: bool = True) -> dict | None:
  """FAST_COMPILE when ``fast`` and JAX's default backend is the CPU, else None (XLA's
  defaults): the compiler_options the main job and the benchmark scripts pass."""
  return dict(FAST_COMPILE) if fast and jax.default_backend() == 'cpu' else None


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


__all__ = ['FAST_COMPILE', 'compile_options', 'default_cache_dir', 'enable_compile_cache']
