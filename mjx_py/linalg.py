"""Dense factorizations in plain JAX operations (no LAPACK custom calls) for the step.

Why not ``jnp.linalg.cholesky`` / ``jnp.linalg.solve``: on CPU they call jaxlib's LAPACK
kernels, which split a vmapped batch of matrices over the thread pool that XLA runs the program
on and block until the pieces finish. Measured with jaxlib 0.10.2 on 2 cores: a vmapped
humanoid rollout at batch 1024 hung in about one run in three, every pool thread waiting
inside ``lapack_spotrf_ffi``'s ParallelBatchMap (it still hung with the step's two
factorizations forced to run one after the other). The loops here compile to ordinary XLA
while-loops of fused elementwise work, so nothing can block, and they behave the same on CPU,
GPU and TPU.

The solves use the inverse from Gauss-Jordan elimination without pivoting (``inverse``).
MuJoCo factors qM by LDL^T (mj_factorM) and M - h D by LU without pivoting; in exact arithmetic
these give the same solution, and in float64 the results agree to rounding (the per-stage parity
tests hold qacc to 1e-8 relative). Gradients go through
``lax.custom_linear_solve``: the derivative of the solution is the solve of the differentiated
system (implicit differentiation), so no derivative flows through the factorization loops.

The loop index is not batched, so under vmap the dynamic slices stay slices (no gathers).
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax


def inverse(a):
  """a^-1 (n, n) by Gauss-Jordan elimination without pivoting, for a with nonzero leading
  minors (symmetric positive definite a, or M - h D of the implicit integrators): one loop of
  n eliminations, each a rank-1 update of the whole matrix. Against a Cholesky factorization
  and two triangular solves (three loops) this has a third of the loop iterations, which is
  what a step of a small model pays for on CPU; the solve is then a matrix product."""
  a = jnp.asarray(a)
  n = a.shape[-1]
  one = jnp.ones((1, 1), a.dtype)

  def body(k, w):
    # in-place Gauss-Jordan: row k is divided by the pivot, column k eliminated from the
    # other rows, and the identity's column k takes the place of column k
    pivot = lax.dynamic_slice(w, (k, k), (1, 1))[0, 0]
    col = lax.dynamic_slice_in_dim(w, k, 1, axis=1)[:, 0]
    col = lax.dynamic_update_slice_in_dim(col, jnp.zeros((1,), a.dtype), k, 0)
    w = lax.dynamic_update_slice_in_dim(w, jnp.zeros((n, 1), a.dtype), k, axis=1)
    w = lax.dynamic_update_slice(w, one, (k, k))
    row = lax.dynamic_slice_in_dim(w, k, 1, axis=0)[0] / pivot
    w = w - col[:, None] * row[None, :]
    return lax.dynamic_update_slice_in_dim(w, row[None, :], k, axis=0)
  return lax.fori_loop(0, n, body, a)


def solve_spd(a, b):
  """Solve a y = b for symmetric positive definite a (n, n), b (n,) or (n, k), with implicit
  gradients (see the module docstring)."""
  inv = lax.stop_gradient(inverse(a))
  return lax.custom_linear_solve(lambda x: a @ x, b, lambda _, r: inv @ r, symmetric=True)


def solve(a, b):
  """Solve a y = b for a general a (n, n) with nonzero leading minors (no pivoting, as
  MuJoCo's implicit integrators), b (n,) or (n, k), with implicit gradients."""
  inv = lax.stop_gradient(inverse(a))
  return lax.custom_linear_solve(lambda x: a @ x, b, lambda _, r: inv @ r,
                                 transpose_solve=lambda _, r: inv.T @ r)


__all__ = ['inverse', 'solve', 'solve_spd']
