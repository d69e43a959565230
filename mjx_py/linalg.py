"""Dense factorizations in plain JAX operations (no LAPACK custom calls) for the step; on a GPU
the direct solve is the backend's batched LU solve instead (``solve_direct``).

Why not ``jnp.linalg.cholesky`` / ``jnp.linalg.solve``: on CPU they call jaxlib's LAPACK
kernels, which split a vmapped batch of matrices over the thread pool that XLA runs the program
on and block until the pieces finish. Measured with jaxlib 0.10.2 on 2 cores: a vmapped
humanoid rollout at batch 1024 hung in about one run in three, every pool thread waiting
inside ``lapack_spotrf_ffi``'s ParallelBatchMap (it still hung with the step's two
factorizations forced to run one after the other). The loops here compile to ordinary XLA
while-loops of fused elementwise work, so nothing can block, and they run on any backend (on
a GPU the direct solve takes the library's batched kernels, which run faster there: see
``solve_direct``).

The solves eliminate without pivoting: for a value (``solve_direct``) Gaussian elimination on
[a | b] and back substitution for batches of ELIMINATION_MIN_BATCH systems or more, Gauss-Jordan
on [a | b] for smaller ones; the Gauss-Jordan inverse (``inverse``) when differentiated and in
the dual solvers.
MuJoCo factors qM by LDL^T (mj_factorM) and M - h D by LU without pivoting; in exact arithmetic
these give the same solution, and in float64 the results agree to rounding (the per-stage parity
tests hold qacc to 1e-8 relative). Gradients go through
``lax.custom_linear_solve``: the derivative of the solution is the solve of the differentiated
system (implicit differentiation), so no derivative flows through the factorization loops.

The loop index is not batched, so under vmap the dynamic slices stay slices (no gathers); the
loop sees the whole batch at once (``inverse``).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

from .batching import per_world
from .xla import full_precision

# the CPU's batched eliminations over more than CPU_BLOCK worlds whose operands take more than
# CPU_BLOCK_BYTES run in blocks of CPU_BLOCK worlds (_in_blocks)
CPU_BLOCK = 64
CPU_BLOCK_BYTES = 1 << 18


def _in_blocks(batch_fn):
  """batch_fn(a, *rest) over a batch (leading axis B; a (B, n, n) the matrices) run as blocks
  of CPU_BLOCK worlds in a lax.map on CPU when B is larger and the operands take more than
  CPU_BLOCK_BYTES, the last block padded with identity matrices (and zeros in the other
  arguments): the whole batch at once elsewhere (small systems: the hopper's nv = 6 gains
  nothing; accelerators need the batch's width).

  Each elimination step reads and writes the whole work array: for the batch as a whole,
  (n, n + k, B) floats, 3 MB at nv = 27 and B = 1024, beyond the core's L2 cache, so each step
  streams it from memory; a block of 64 worlds, 190 KB, stays in cache for all n steps.
  Measured (float32, 2-core CPU, FAST_COMPILE, (B, 27, 27) SPD systems, the fastest of 15
  alternating calls): the [a | b] solve at B = 1024 10.55 -> 5.27 ms (blocks of 128: 10.81,
  of 32: 8.45), at B = 512 4.80 -> 2.49 ms, and at nv = 14 (the ant), B = 512, 0.87 -> 0.46
  ms; the same results bit for bit. At nv = 6 (0.11 ms) blocks change nothing.

  The map runs over the block indices, each block a dynamic slice of the batch's arrays. Until
  stop 67 it mapped over the arrays reshaped to (blocks, CPU_BLOCK, ...): the reshaped matrix
  was a second array beside the one the step keeps (qM), and XLA:CPU computed each in a fused
  loop of its own, so qM's whole chain of products from the composite inertias ran twice (the
  ant at batch 1024: two loops of 0.5 ms in each RK4 stage). Rollouts over both cores'
  devices (float32, batch 1024, 20 steps, median / fastest ratio of 9-11 alternating calls,
  results bit for bit the same): the ant 0.957 / 0.945, the humanoid 0.979 / 0.964."""
  def fn(a, *rest):
    B = a.shape[0]
    nbytes = sum(x.size * x.dtype.itemsize for x in (a,) + rest)
    if (B <= CPU_BLOCK or nbytes <= CPU_BLOCK_BYTES or jax.default_backend() != 'cpu'):
      return batch_fn(a, *rest)
    nb = -(-B // CPU_BLOCK)
    pad = nb * CPU_BLOCK - B
    if pad:
      eye = jnp.broadcast_to(jnp.eye(a.shape[-1], dtype=a.dtype), (pad,) + a.shape[1:])
      a = jnp.concatenate([a, eye])
      rest = tuple(jnp.concatenate([x, jnp.zeros((pad,) + x.shape[1:], x.dtype)])
                   for x in rest)
    args = (a,) + rest

    def block(i):
      return batch_fn(*(lax.dynamic_slice_in_dim(x, i * CPU_BLOCK, CPU_BLOCK) for x in args))
    out = lax.map(block, jnp.arange(nb))
    return out.reshape((nb * CPU_BLOCK,) + out.shape[2:])[:B]
  return fn


def _inverse_batch(a):
  """Gauss-Jordan inverses (B, n, n) of a batch of matrices (B, n, n), the batch as the minor
  axis of the loop's work array (see ``inverse``)."""
  w = jnp.moveaxis(a, 0, -1)                                       # (n, n, B)
  n = w.shape[0]
  # row and column indices as small broadcast operands (full-size iotas would be hoisted out
  # of the loop as arrays that every step reads beside w)
  i = lax.broadcasted_iota(jnp.int32, (n, 1, 1), 0)
  j = lax.broadcasted_iota(jnp.int32, (1, n, 1), 1)
  at = lax.broadcasted_iota(jnp.int32, (n, 1), 0)

  def body(k, w):
    # in-place Gauss-Jordan step k as one elementwise expression over the whole array: with
    # p the pivot w[k, k], row' = w[k, :] / p except row'[k] = 1 / p, and col' = w[:, k]
    # except col'[k] = 0, the new array is row' in row k and, elsewhere, w - col' row'' with
    # column k of w taken as zero (the identity's column k takes the place of column k)
    row = lax.dynamic_index_in_dim(w, k, 0, keepdims=False)        # (n, B)
    col = lax.dynamic_index_in_dim(w, k, 1, keepdims=False)        # (n, B)
    pivot = lax.dynamic_index_in_dim(row, k, 0, keepdims=True)     # (1, B)
    row = jnp.where(at == k, 1.0, row) / pivot
    col = jnp.where(at == k, 0.0, col)
    return jnp.where(i == k, row[None], jnp.where(j == k, 0.0, w) - col[:, None] * row[None])
  return jnp.moveaxis(lax.fori_loop(0, n, body, w, unroll=_unroll(n, w.shape[-1])), -1, 0)


_inverse = per_world(_in_blocks(_inverse_batch))


def inverse(a):
  """a^-1 (n, n) by Gauss-Jordan elimination without pivoting, for a with nonzero leading
  minors (symmetric positive definite a, or M - h D of the implicit integrators): one loop of
  n eliminations, each a rank-1 update of the whole matrix. Against a Cholesky factorization
  and two triangular solves (three loops) this has a third of the loop iterations, which is
  what a step of a small model pays for on CPU; the solve is then a matrix product.

  Per world, batched underneath (mjx_py.batching.per_world): under vmap the batch becomes the
  minor axis of the elimination, so each step is one vectorized pass over the worlds, where
  with the batch leading each step runs along rows of length n. Measured on the humanoid
  (nv = 27, float32, 2-core CPU, against the per-world loop of dynamic slices and updates):
  rollouts at batch 1 / 64 / 1024 went from 2,886 / 7,415 / 9,835 to 3,694 / 8,036 / 10,599
  env-steps/s (the qM solve, Euler's damped solve and every Newton iteration factor with it).
  ``a`` carries no derivative (the solves below differentiate implicitly)."""
  return _inverse(a)


# the smallest system size and batch from which the eliminations take two steps a loop trip
UNROLL_MIN_N, UNROLL_MIN_BATCH = 12, 32


def _unroll(n: int, batch: int) -> int:
  """Elimination steps per loop trip (lax.fori_loop's unroll) for a batch of n x n systems: 2
  from n = UNROLL_MIN_N and batch = UNROLL_MIN_BATCH on, else 1. A step reads row and column k
  of the work array while it writes the array, so XLA:CPU cannot update it in place: each trip
  writes a new array and copies it back into the loop's buffer (a copy in the optimized HLO).
  Two steps a trip write the first into a temporary and the second into the loop's buffer, one
  copy instead of two. Measured (float32, 2-core CPU, FAST_COMPILE, the fastest of 15
  alternating calls of 40 solves; results equal bit for bit): 64 systems of n = 27 284 -> 182
  us a direct solve, n = 14 48 -> 42 us, n = 6 5.6 -> 6.2 us (hence not below 12), three steps
  a trip slower (n = 27: 528 us); one system of 27: 8.4 -> 7.5 us, too little for the compile
  time the second copy of each loop body costs a one-world program (the humanoid's step: XLA
  5.5-5.9 -> 6.3-6.7 s), hence not below a batch of 32. In a step the two forms round alike
  up to FMA contraction (qacc 1.3e-6 relative in float32, 8.7e-16 in float64)."""
  return 2 if n >= UNROLL_MIN_N and batch >= UNROLL_MIN_BATCH else 1


def _phases(n: int):
  """Row and column ranges [start, end) of solve_direct's elimination loops: three about equal
  ones (one for n < 12)."""
  if n < 12:
    return [(0, n)]
  cut = [0, n // 3, (2 * n) // 3, n]
  return list(zip(cut[:-1], cut[1:]))


def _eliminate(w, start: int, end: int, n: int):
  """Gaussian elimination steps start..end-1 on the work array w (n - start, n - start + k, B)
  (rows and columns start.. of [a | b] for k right-hand sides, the batch minor): step j
  divides row j by its pivot and takes column j out of the rows below it. Returns the finished
  rows start..end-1 (their unit upper-triangular part and right-hand sides, columns start..)
  and the rows and columns from end on that the next steps work on."""
  m = n - start
  i = lax.broadcasted_iota(jnp.int32, (m, 1, 1), 0)
  at = lax.broadcasted_iota(jnp.int32, (m, 1), 0)

  def body(j, w):
    c = j - start                                                        # row j in w
    row = lax.dynamic_index_in_dim(w, c, 0, keepdims=False)             # (m + k, B)
    row = row / lax.dynamic_index_in_dim(row, c, 0, keepdims=True)
    col = lax.dynamic_index_in_dim(w, c, 1, keepdims=False)             # (m, B)
    col = jnp.where(at <= c, 0.0, col)                                   # rows below j only
    return jnp.where(i == c, row[None], w - col[:, None] * row[None])
  w = lax.fori_loop(start, end, body, w, unroll=_unroll(n, w.shape[-1]))
  done = end - start
  return w[:done], w[done:, done:]


def _eliminate_symmetric(w, start: int, end: int, n: int):
  """_eliminate for a symmetric a: the same steps start..end-1 and the same returns (the
  phase's finished rows, the rows and columns from end on), reading only a's upper triangle.

  Elimination keeps the part of a still to be eliminated symmetric, so the entries of column j
  below the pivot equal those of row j right of it: each step takes its multipliers from row
  j (as read, before the division by the pivot) instead of reading column j, and the rows after
  the phase are updated only on the columns after it (their columns inside the phase, which
  Gaussian elimination would zero, are never read). A phase of L steps over m rows then updates
  L (m + k) + (m - L)(m - L + k) entries a step instead of m (m + k): for n = 27 a fifth less
  work, and no strided column read. The rows after the phase are a second loop carry.
  Measured (float32, 2-core CPU, FAST_COMPILE, 40 chained solves of 64 systems, fastest of 31
  alternating calls, two runs): n = 27 118.9 / 160.1 -> 90.3 / 119.5 us, n = 14 21.9 / 29.8 ->
  16.6 / 23.4 us; 512 systems at once (not a case the CPU blocks leave) were slower (883 ->
  1,251 us). Against float64 LAPACK the errors are those of _eliminate (2.7e-7 relative at n
  = 27, float32)."""
  size = end - start
  m = n - start
  head, tail = w[:size], w[size:, size:]
  i = lax.broadcasted_iota(jnp.int32, (size, 1, 1), 0)
  at = lax.broadcasted_iota(jnp.int32, (size, 1), 0)

  def body(j, carry):
    head, tail = carry
    c = j - start                                                        # row j in head
    raw = lax.dynamic_index_in_dim(head, c, 0, keepdims=False)          # (m + k, B)
    row = raw / lax.dynamic_index_in_dim(raw, c, 0, keepdims=True)
    col = jnp.where(at <= c, 0.0, raw[:size])                           # the phase's rows below j
    head = jnp.where(i == c, row[None], head - col[:, None] * row[None])
    return head, tail - raw[size:m, None] * row[None, size:]           # the rows after the phase
  return lax.fori_loop(start, end, body, (head, tail), unroll=_unroll(n, w.shape[-1]))


def _substitute(U, x):
  """Back substitution for one phase's finished rows U (L, m + k, B) (unit upper-triangular in
  their first L columns, whose entries below the diagonal are never read: _eliminate_symmetric
  leaves them unreduced; then the later rows' columns, then the right-hand sides) given the
  later rows' solution x (m - L, k, B) (None for the last phase): the phase's solution
  (L, k, B), then x below it."""
  size = U.shape[0]
  m = size + (0 if x is None else x.shape[0])      # the matrix's columns in U; then the rhs
  r = U[:, m:]                                                           # (L, k, B)
  if x is not None:
    r = r - jnp.sum(U[:, size:m, None] * x[None], axis=1)
  at = lax.broadcasted_iota(jnp.int32, (size, 1), 0)

  def back(q, r):
    # unknown c = size - 1 - q is final: take it out of the rows above
    c = size - 1 - q
    xc = lax.dynamic_index_in_dim(r, c, 0, keepdims=True)               # (1, k, B)
    uc = lax.dynamic_index_in_dim(U, c, 1, keepdims=False)              # (L, B)
    return r - jnp.where(at < c, uc, 0.0)[:, None] * xc
  r = lax.fori_loop(0, size, back, r)
  return r if x is None else jnp.concatenate([r, x], axis=0)


def _solve_batch_ge(w, n: int, symmetric: bool = False):
  """The solutions (n, k, B) of a batch's systems given as the work array w = [a | b]
  (n, n + k, B) (see _solve_batch), by Gaussian elimination without pivoting and back
  substitution.

  The eliminations run in a few loops (``_phases``), each on static slices that start at its
  first row and column: rows and columns before it are finished (their rows set aside for the
  back substitution, their columns zero below the diagonal), so the work shrinks in both
  directions, about n^3 / 3 multiply-adds against Gauss-Jordan's n^3 / 2 (which takes every
  column out of every row). The back substitution, phase by phase from the last, is n^2 / 2.
  Measured (float32, 2-core CPU, FAST_COMPILE, 40 chained solves, median of 15 alternating
  calls) against the Gauss-Jordan loops that narrowed only the columns, used until stop 67:
  64 systems of n = 27 133 -> 104 us, of n = 14 29 -> 26 us, 512 of n = 27 1.89 -> 1.63 ms,
  one of n = 27 5.6 -> 4.8 us; the errors against float64 LAPACK are alike (2.5e-7 relative
  at n = 27). symmetric: a is symmetric, and only its upper triangle is read
  (_eliminate_symmetric, a fifth less work)."""
  eliminate = _eliminate_symmetric if symmetric else _eliminate
  finished = []
  for start, end in _phases(n):
    U, w = eliminate(w, start, end, n)
    finished.append(U)
  x = None
  for U in reversed(finished):
    x = _substitute(U, x)
  return x


def _solve_batch_gj(w, n: int):
  """The solutions (n, k, B) of a batch's systems given as the work array w = [a | b]
  (n, n + k, B) (see _solve_batch), by Gauss-Jordan elimination without pivoting.

  Step k takes column k out of every row but k. Only the columns from k on take part: columns
  before k are already eliminated (unit vectors) and nothing later reads them. The steps run in
  a few loops (``_phases``), each on a static slice that starts at its first column, so the
  work shrinks as the elimination proceeds: for n = 27 a step touches 28, 19 or 10 columns
  instead of 27 (the inverse's n) plus the right-hand side. Batches below ELIMINATION_MIN_BATCH
  (see _solve_batch)."""
  width = w.shape[1]
  i = lax.broadcasted_iota(jnp.int32, (n, 1, 1), 0)
  at = lax.broadcasted_iota(jnp.int32, (n, 1), 0)
  for start, end in _phases(n):
    w = w[:, start - (width - w.shape[1]):]          # columns start.. (and b) of [a | b]

    def body(k, w, start=start):
      # as in _inverse_batch, without the identity's columns: row k divided by the pivot,
      # every other row less its column-k entry times that row
      c = k - start                                  # column k in this phase's slice
      row = lax.dynamic_index_in_dim(w, k, 0, keepdims=False)           # (m, B)
      col = lax.dynamic_index_in_dim(w, c, 1, keepdims=False)           # (n, B)
      row = row / lax.dynamic_index_in_dim(row, c, 0, keepdims=True)
      col = jnp.where(at == k, 0.0, col)
      return jnp.where(i == k, row[None], w - col[:, None] * row[None])
    w = lax.fori_loop(start, end, body, w, unroll=_unroll(n, w.shape[-1]))
  return w[:, n - width:]


# the smallest batch whose direct solves take Gaussian elimination and back substitution
ELIMINATION_MIN_BATCH = 32


def _solve_batch(a, b, symmetric: bool = False):
  """a^-1 b for a batch (see solve_direct): _solve_batch_ge from ELIMINATION_MIN_BATCH systems
  on, else _solve_batch_gj. Gaussian elimination does a third less arithmetic, but its back
  substitution adds a loop per phase, which a small batch pays for: the humanoid's one-world
  rollout (float32, 2-core CPU, median of 21 alternating calls of 200 steps) ran 8% slower
  with it, against 5% faster at batch 1024 (BENCHMARKS.md, stop 67).

  a (B, n, n), b (B, n) or (B, n, k) -> a^-1 b of b's shape. Both eliminate on the work array
  [a | b] (n, n + k, B), the batch as the minor axis (as _inverse_batch). symmetric (static):
  a is symmetric, and Gaussian elimination reads only its upper triangle (see
  _solve_batch_ge); Gauss-Jordan does not use it."""
  n = a.shape[-1]
  if not n:
    return b
  vector = b.ndim == 2
  b = b[..., None] if vector else b                                      # (B, n, k)
  w = jnp.moveaxis(jnp.concatenate([a, b], axis=-1), 0, -1)             # (n, n + k, B)
  if a.shape[0] >= ELIMINATION_MIN_BATCH:
    x = _solve_batch_ge(w, n, symmetric)
  else:
    x = _solve_batch_gj(w, n)
  x = jnp.moveaxis(x, -1, 0)                                             # (B, n, k)
  return x[..., 0] if vector else x


_solve_direct = per_world(_in_blocks(_solve_batch))
_solve_direct_symmetric = per_world(_in_blocks(functools.partial(_solve_batch, symmetric=True)))


def _solve_lu_batch(a, b):
  """a^-1 b as _solve_batch, by the backend's batched LU factorization with partial pivoting
  and triangular solves (jnp.linalg.solve; on a GPU the solver library's batched kernels)."""
  vector = b.ndim == 2
  x = jnp.linalg.solve(a, b[..., None] if vector else b)
  return x[..., 0] if vector else x


_solve_direct_lu = per_world(_solve_lu_batch)


def solve_direct(a, b, symmetric: bool = False):
  """a^-1 b for a (n, n) with nonzero leading minors and b (n,) or (n, k), without the inverse
  and without derivatives (``a`` and ``b`` carry none: the Newton solver's search direction,
  and the value of the solves below when nothing differentiates them):
  Gaussian elimination on [a | b] in loops that narrow the rows and columns still to
  eliminate, then back substitution, about a third of the inverse's work for n ~ 30, for a
  batch of ELIMINATION_MIN_BATCH systems or more; Gauss-Jordan in loops that narrow the
  columns, about half, for smaller batches (see _solve_batch). Per world, batched underneath
  as ``inverse``. symmetric (static): a is symmetric (the Newton Hessian, qM, M + h D), and
  Gaussian elimination takes its multipliers from the pivot rows, reading only a's upper
  triangle (_eliminate_symmetric: a fifth less work at n = 27).

  On a GPU (JAX's default backend when the step is traced) it is the library's batched LU
  solve instead (_solve_lu_batch): there each Gauss-Jordan step is a kernel of its own that
  reads and writes the whole batch's [a | b] and, since it reads row and column k while it
  writes them, a copy of it besides (the humanoid at batch 8192: 27 steps of 25 MB per solve, a
  third of the step's GPU time). Measured on one H200 (humanoid, float32, a 5-step scan, one
  process, calls alternated, median ratio): batch 8192 396,167 -> 522,841 env-steps/s (0.759;
  a Cholesky solve 0.780), batch 32768 640,384 -> 803,032 (0.798). The CPU keeps Gauss-Jordan
  (LAPACK's batched kernels can hang a vmapped step there, see the module docstring)."""
  if _library_solve():
    return _solve_direct_lu(a, b)
  return _solve_direct_symmetric(a, b) if symmetric else _solve_direct(a, b)


def _library_solve() -> bool:
  """Whether solve_direct takes the batched library solve: on a GPU (see solve_direct)."""
  return jax.default_backend() == 'gpu'


def _solve_spd_implicit(a, b):
  """solve_spd when differentiated: one inverse, and the solution through
  lax.custom_linear_solve (the implicit derivative, any order)."""
  inv = inverse(lax.stop_gradient(a))
  return lax.custom_linear_solve(lambda x: a @ x, b, lambda _, r: inv @ r, symmetric=True)


def _solve_implicit(a, b):
  """solve when differentiated (see _solve_spd_implicit)."""
  inv = inverse(lax.stop_gradient(a))
  return lax.custom_linear_solve(lambda x: a @ x, b, lambda _, r: inv @ r,
                                 transpose_solve=lambda _, r: inv.T @ r)


def _value_by_direct_solve(implicit, symmetric: bool):
  """A solve whose value, when nothing differentiates it, is solve_direct's (about half an
  inverse's work at n ~ 30), and which is ``implicit`` (one inverse shared by the solution, its
  tangent and its transpose) under differentiation: a custom JVP whose rule is implicit's JVP.
  The differentiated program is then the same as with ``implicit`` alone; with solve_direct in
  custom_linear_solve it would eliminate once per solve of the linearized program (measured on
  the humanoid's gradient through 100 steps: XLA compile +1.1-1.6 s, run +3-4 ms). symmetric
  (static): solve_direct's symmetric elimination (solve_spd's)."""
  @jax.custom_jvp
  def solve_fn(a, b):
    return solve_direct(lax.stop_gradient(a), lax.stop_gradient(b), symmetric)

  @solve_fn.defjvp
  @full_precision
  def _jvp(primals, tangents):
    return jax.jvp(implicit, primals, tangents)

  return solve_fn


_solve_spd = _value_by_direct_solve(_solve_spd_implicit, symmetric=True)
_solve = _value_by_direct_solve(_solve_implicit, symmetric=False)


def solve_spd(a, b):
  """Solve a y = b for symmetric positive definite a (n, n), b (n,) or (n, k), with implicit
  gradients (see the module docstring and _value_by_direct_solve)."""
  return _solve_spd(a, b)


def solve(a, b):
  """Solve a y = b for a general a (n, n) with nonzero leading minors (no pivoting, as
  MuJoCo's implicit integrators), b (n,) or (n, k), with implicit gradients."""
  return _solve(a, b)


__all__ = ['inverse', 'solve', 'solve_direct', 'solve_spd']
