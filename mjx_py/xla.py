"""XLA compile options for mjx_py's programs.

FAST_COMPILE = {'xla_cpu_use_fusion_emitters': False}: XLA:CPU builds each fusion with its
classic elemental emitters instead of the newer MLIR fusion emitters (its default). Pass it to
``jax.jit(fn, compiler_options=mjx_py.FAST_COMPILE)`` (or to ``.lower(...).compile(
compiler_options=...)``). It is an XLA:CPU option; ``compile_options()`` gives it only when
JAX's default backend is the CPU.

Measured on the humanoid's step (models/humanoid.xml with contacts, float32, 2-core CPU, jax
0.10.2): the XLA compile took 4.3 s instead of 6.4 s and the process peaked at 405 MB instead
of 958 MB (the emitters' transient memory); a batch-1 step ran 12% slower (0.90 against
0.80 ms), a batch-1024 step 7% slower (406 against 381 ms). So it suits short runs,
notebooks, tests and gradient programs, where compiling dominates; long training runs keep the
default. The main job (``python -m mjx_py``) uses it unless ``--full-opt`` is given.
"""

from __future__ import annotations

import jax

FAST_COMPILE = {'xla_cpu_use_fusion_emitters': False}


def compile_options(fast: bool = True) -> dict | None:
  """FAST_COMPILE when ``fast`` and JAX's default backend is the CPU, else None (XLA's
  defaults): the compiler_options the main job and the benchmark scripts pass."""
  return dict(FAST_COMPILE) if fast and jax.default_backend() == 'cpu' else None


__all__ = ['FAST_COMPILE', 'compile_options']
