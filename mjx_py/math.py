"""Rotation and spatial algebra in JAX, with NaN-safe helpers (quaternions are (w, x, y, z)).

Spatial vectors follow MuJoCo: 6-vectors are (angular(3), linear(3)); a body's ``cinert`` is the
10-vector (Ixx, Iyy, Izz, Ixy, Ixz, Iyz, m*c(3), m) of its inertia about a point ``c`` away from
its centre of mass. Every function acts on one element; batching is the caller's ``vmap``.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.custom_batching import custom_vmap

from .batching import per_world

MINVAL = 1e-15  # mjMINVAL


def concrete(x):
  """x as a numpy array when it is concrete (not traced: a Model closed over by jit), else
  None. Lets a stage skip work whose inputs are known zeros without changing a traced or
  batched Model's program. A tracer is answered without trying the conversion: JAX's error for
  it walks the jaxpr to name the value's origin, which cost 1.8 of 10.8 s (profiled) of tracing
  the humanoid's step with the Model as a jit argument."""
  if isinstance(x, jax.core.Tracer):
    return None
  try:
    return np.asarray(x)
  except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
    return None


def safe_norm(x, axis=-1, keepdims=False):
  """Euclidean norm with a finite gradient at 0 (double-where)."""
  sq = jnp.sum(x * x, axis=axis, keepdims=True)
  nonzero = sq > 0
  n = jnp.where(nonzero, jnp.sqrt(jnp.where(nonzero, sq, 1.0)), 0.0)
  return n if keepdims else jnp.squeeze(n, axis=axis)


def matmul_small(a, b):
  """a @ b for a small contracted axis: a (..., i, k), b (..., k, j) -> (..., i, j), written
  as k broadcast products summed term by term (no dot or reduce operation). Under vmap on CPU,
  XLA fuses these into loops that run across the batch, where a batched dot of tiny matrices
  runs as one small matrix kernel (YNNPACK or Eigen) per world. Measured in the step's 3x3 and
  6-long contractions (kinematics' frame products, the composite inertia's cdof products, the
  bodies' rotated inertias; float32, 2-core CPU, rollouts in one process, best of 5): hopper
  at batch 1024 22,206 -> 24,635 env-steps/s and at batch 64 16,335 -> 17,118, the ant at
  batch 1024 9,353 -> 9,434 (median 8,988 -> 9,418), the humanoid at batch 1024 13,677 ->
  14,026, batch 1 unchanged. For k of a few dozen or more use a dot."""
  return sum(a[..., :, k, None] * b[..., None, k, :] for k in range(a.shape[-1]))


def matvec_small(a, x):
  """a @ x for a small contracted axis: a (..., i, k), x (..., k) -> (..., i) (see
  matmul_small)."""
  return sum(a[..., :, k] * x[..., None, k] for k in range(a.shape[-1]))


def dot_small(x, y):
  """x . y over a short last axis, (...), as products summed term by term in index order (see
  matmul_small). Beside the batch layouts, it keeps reductions out of fused loops: XLA:CPU's
  classic emitters emit a reduce fused into a loop again at each of its uses there, which in
  the ray primitives' chains of selects (mjx_py.ray._nearer) made the hopper's step one kernel
  of 53,000 lines of LLVM IR and 23 s of its 34 s compile."""
  return sum(x[..., k] * y[..., k] for k in range(x.shape[-1]))


def _cumsum_loop(x):
  """Inclusive prefix sum of one int32 vector (n,) by a loop of n additions."""
  def body(i, out):
    prev = lax.dynamic_index_in_dim(out, jnp.maximum(i - 1, 0), keepdims=False)
    here = lax.dynamic_index_in_dim(x, i, keepdims=False)
    return lax.dynamic_update_index_in_dim(out, jnp.where(i > 0, prev, 0) + here, i, 0)
  return lax.fori_loop(0, x.shape[0], body, jnp.zeros_like(x))


@custom_vmap
def _cumsum(x):
  # one world: the loop on CPU (one kernel there); an accelerator would launch a kernel per
  # trip, so it keeps the scan
  if jax.default_backend() == 'cpu':
    return _cumsum_loop(x)
  return lax.associative_scan(jnp.add, x)


@_cumsum.def_vmap
def _cumsum_rule(axis_size, in_batched, x):
  del axis_size, in_batched
  # a batch (B, n): the log-depth scan over the last axis, whose every level is one vectorized
  # pass over the batch (nested vmaps reach here as plain operations)
  return lax.associative_scan(jnp.add, x, axis=x.ndim - 1), True


def cumsum_int(x):
  """Inclusive prefix sum of a 1-D integer or bool array, as int32 (n,). Batched (vmap): a
  log-depth scan of slices and adds (lax.associative_scan) over the batch. jnp.cumsum lowers
  to a windowed reduction, which XLA:CPU runs as a generic kernel (batch 512, 64 entries: 486
  against 204 us per call; 300 entries: 2.6 against 1.1 ms). One world on CPU: a loop of n
  additions (a custom_vmap function; integers carry no derivative), which XLA:CPU compiles into
  one kernel, where the scan's levels are some six kernels a call (elsewhere the scan: a GPU
  would run the loop's trips as kernels of their own). The entries are integers, so
  the order of the sums changes nothing."""
  return _cumsum(jnp.asarray(x).astype(jnp.int32))


# nonzero_first's direct count: up to this many (mask entries x size) comparisons
NONZERO_DIRECT = 1 << 16


def _slots_batch(pos, size: int, fill_value: int):
  """For a batch of slot positions pos (B, n): out (B, size) with out[b, pos[b, i]] = i, the
  other entries fill_value (pos >= size dropped). One scatter into the batch's flattened slots
  (b size + pos): XLA:CPU runs a scatter as a loop over its updates, and a batched scatter
  (vmap's) indexes each update through the batch dimension besides."""
  B, n = pos.shape
  flat = jnp.where(pos < size, pos + size * jnp.arange(B, dtype=pos.dtype)[:, None], B * size)
  out = jnp.full((B * size,), fill_value, jnp.int32)
  ids = jnp.broadcast_to(jnp.arange(n, dtype=jnp.int32), (B, n))
  return out.at[flat.reshape(-1)].set(ids.reshape(-1), mode='drop').reshape(B, size)


def nonzero_first(mask, size: int, fill_value: int):
  """jnp.nonzero(mask, size=size, fill_value=fill_value)[0] for a 1-D mask, int32 (size,):
  the first ``size`` indices where mask holds, in order, then fill_value. From the prefix sums
  (cumsum_int) count of set entries: a set entry i goes to slot count[i] - 1.

  Small masks count directly (below); larger ones scatter each set entry's index into its
  slot (slots past ``size`` dropped, slots past the count keep fill_value), batched underneath
  (mjx_py.batching.per_world, the indices carry no derivative) as one scatter over the
  flattened worlds. Until stop 60 it was jnp.nonzero's own counting, a scatter-add of ones at
  count and a second prefix sum over the slots; measured on the humanoid's make_constraint
  (its 262 row slots; batch 512, one device, profiled in a loop of 10): the compaction's prefix
  sums and scatter 17.5 -> 10.1 ms of busy time, make_constraint 0.92 of its time (median of
  21 alternating calls), the same rows."""
  count = cumsum_int(mask)                                  # (n,) set entries up to i
  if mask.shape[0] * size <= NONZERO_DIRECT:
    # entry j directly as the number of indices with count <= j: one fused compare-and-sum
    # over (size, n) instead of the scatter (a while loop on XLA:CPU). The hopper's 62
    # constraint rows at batch 512, make_constraint alone (one device, 8 alternating runs in
    # one process): with SMALL_NV's products 2.2 -> 1.6-1.7 us a world
    total = count[-1] if mask.shape[0] else jnp.int32(0)
    idx = jnp.sum(count[None, :] <= jnp.arange(size)[:, None], axis=1, dtype=jnp.int32)
    return jnp.where(jnp.arange(size) < total, idx, fill_value).astype(jnp.int32)
  pos = jnp.where(mask, count - 1, size)
  slots = per_world(functools.partial(_slots_batch, size=size, fill_value=fill_value))
  return slots(pos)


def safe_div(num, den, eps=MINVAL):
  """num / den, with den replaced by eps where |den| < eps (keeps gradients finite)."""
  small = jnp.abs(den) < eps
  return num / jnp.where(small, jnp.where(den < 0, -eps, eps), den)


def normalize(x, axis=-1):
  """x / |x|; a zero vector stays zero (finite gradients)."""
  n = safe_norm(x, axis=axis, keepdims=True)
  return x / jnp.where(n > MINVAL, n, 1.0)


def quat_normalize(q):
  """Unit quaternion; a zero quaternion becomes the identity (MuJoCo's mju_normalize4)."""
  n = safe_norm(q, keepdims=True)
  ident = jnp.zeros_like(q).at[..., 0].set(1.0)
  return jnp.where(n > MINVAL, q / jnp.where(n > MINVAL, n, 1.0), ident)


def _quat_mul_table():
  """(16, 4) table: the Hamilton product's 4 components are linear in the 16 products
  a_i b_j (sign of each term; MuJoCo's mju_mulQuat)."""
  t = np.zeros((4, 4, 4))
  terms = {0: [(0, 0, 1), (1, 1, -1), (2, 2, -1), (3, 3, -1)],
           1: [(0, 1, 1), (1, 0, 1), (2, 3, 1), (3, 2, -1)],
           2: [(0, 2, 1), (1, 3, -1), (2, 0, 1), (3, 1, 1)],
           3: [(0, 3, 1), (1, 2, 1), (2, 1, -1), (3, 0, 1)]}
  for k, row in terms.items():
    for i, j, sign in row:
      t[i, j, k] = sign
  return t.reshape(16, 4)


_QUAT_MUL = _quat_mul_table()


def _outer(a, b):
  """The 16 products a_i b_j (index 4 i + j) of two quaternions: a, b (..., 4) -> (..., 16)."""
  a, b = jnp.broadcast_arrays(a, b)
  return (a[..., :, None] * b[..., None, :]).reshape(a.shape[:-1] + (16,))


def _contract(ab, table):
  """sum_k ab_k table[k]: ab (..., 16), table (16, k) -> (..., k), as one dot."""
  return jnp.einsum('...k,kr->...r', ab, jnp.asarray(table, ab.dtype),
                    precision=jax.lax.Precision.HIGHEST)


def _bilinear(a, b, table):
  """sum_ij a_i b_j table[4 i + j]: a, b (..., 4), table (16, k) -> (..., k). A bilinear form
  of two quaternions as one contraction (3 program operations instead of ~30 per form)."""
  return _contract(_outer(a, b), table)


def _bilinear_terms(a, b, table):
  """The same form as _bilinear written term by term: each output the sum of its nonzero
  products a_i b_j times their coefficients (elementwise operations only, no dot)."""
  a, b = jnp.broadcast_arrays(a, b)
  t = np.asarray(table).reshape(4, 4, -1)
  # each component sliced once and each product a_i b_j formed once (quat_to_mat's 9 entries
  # share theirs), so the trace holds 8 slices per form instead of two per term
  ac = [a[..., i] for i in range(4)]
  bc = [b[..., j] for j in range(4)]
  prods = {}

  def product(i, j):
    if (i, j) not in prods:
      prods[(i, j)] = ac[i] * bc[j]
    return prods[(i, j)]

  outs = []
  for r in range(t.shape[-1]):
    out = None
    for i, j in zip(*np.nonzero(t[:, :, r])):
      c, term = float(t[i, j, r]), product(int(i), int(j))
      term = term if c == 1 else (-term if c == -1 else c * term)
      out = term if out is None else out + term
    outs.append(jnp.zeros(a.shape[:-1], a.dtype) if out is None else out)
  return jnp.stack(outs, axis=-1)


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def _bilinear_in_loop(a, b, form):
  """The bilinear form ``form`` ('mul': quat_mul, 'mat': quat_to_mat) of a and b for use inside
  a loop: term by term when nothing differentiates it, the contraction under differentiation.

  Why: XLA:CPU compiles a while loop whose buffers are small (mjx_py.xla's threshold) into one
  kernel, but not a loop that holds a matrix-matrix product, and the contraction is one (a
  (n, 16) by (16, k) dot). The kinematics' joint loop and tree pass held the step's only such
  products: with their forms term by term every loop of the humanoid's one-world step compiles
  to one kernel (59 of 59 instead of 57). Under differentiation the rule below takes the
  contraction for the value and the derivative, so a gradient's program is the one the
  contraction gives (term by term, the humanoid's gradient through 100 steps compiled 9-23 s
  longer in XLA). The value then differs from the undifferentiated one by rounding."""
  return _bilinear_terms(a, b, _FORMS[form])


@functools.partial(_bilinear_in_loop.defjvp, symbolic_zeros=True)
def _bilinear_in_loop_jvp(form, primals, tangents):
  a, b = primals
  da, db = tangents
  table = _FORMS[form]
  value = _contract(_outer(a, b), table)
  # the value restacked output by output: this gives it the batch axis JAX's batching of the
  # custom function's own value has (without it, the rule's value under vmap of a scan's
  # linearization came out with its batch axis elsewhere and broke a later broadcast)
  value = jnp.stack([value[..., r] for r in range(value.shape[-1])], axis=-1)
  parts = [_outer(da, b) if not is_symbolic_zero(da) else None,
           _outer(a, db) if not is_symbolic_zero(db) else None]
  parts = [x for x in parts if x is not None]
  if not parts:
    return value, jnp.zeros_like(value)
  return value, _contract(sum(parts[1:], parts[0]), table)


def is_symbolic_zero(t) -> bool:
  """Whether a custom JVP rule's tangent is a symbolic zero (no derivative flows in)."""
  return isinstance(t, jax.custom_derivatives.SymbolicZero)


def zero_tangent(x):
  """The zero tangent of an array x: zeros of its dtype, float0 ones for integer or bool x."""
  if jnp.issubdtype(x.dtype, jnp.inexact):
    return jnp.zeros_like(x)
  return np.zeros(x.shape, jax.dtypes.float0)


def _with_leaves(leaves: list, treedef, where, new):
  """The tree of ``leaves`` (treedef) with leaves[i] replaced by new's, for i in ``where``."""
  out = list(leaves)
  for i, x in zip(where, new):
    out[i] = x
  return jax.tree_util.tree_unflatten(treedef, out)


def jvp_live(fn, primals, tangents):
  """jax.jvp(fn, primals, tangents) for a custom JVP rule whose tangents may hold symbolic
  zeros (``symbolic_zeros=True``): fn is differentiated only in the leaves with a tangent (the
  others are closed over, so no zero tangent is multiplied through), and an output leaf that
  is an input leaf passed through keeps that input's tangent, a symbolic zero staying one (the
  stages downstream then carry no derivative for it, where jax.jvp would give instantiated
  zeros that they would differentiate). Returns (fn's value, its tangent)."""
  leaves, treedef = jax.tree_util.tree_flatten(primals)
  tleaves = jax.tree_util.tree_leaves(tangents)
  live = [i for i, t in enumerate(tleaves) if not is_symbolic_zero(t)]

  def fixed(*xs):
    return fn(*_with_leaves(leaves, treedef, live, xs))

  if live:
    out, tout = jax.jvp(fixed, [leaves[i] for i in live], [tleaves[i] for i in live])
    touts = jax.tree_util.tree_leaves(tout)
  else:
    out = fixed()
    touts = [None] * len(jax.tree_util.tree_leaves(out))
  # the symbolic-zero tangents of the input leaves, by the leaf's identity
  symbolic = {id(x): t for x, t in zip(leaves, tleaves) if is_symbolic_zero(t)}
  outs, otree = jax.tree_util.tree_flatten(out)
  result = [symbolic[id(x)] if id(x) in symbolic else (zero_tangent(x) if t is None else t)
            for x, t in zip(outs, touts)]
  return out, jax.tree_util.tree_unflatten(otree, result)


def split_traced(tree):
  """(the traced leaves of a pytree (a tuple), rebuild): rebuild(leaves) is the tree with its
  traced leaves replaced by ``leaves`` and its other leaves as they were. For a Model given to
  a custom JVP function: passed whole, every leaf would be traced inside (a custom rule traces
  its function on abstract arguments), and the stages' static specializations on a concrete
  Model (``concrete``) would be lost; closed over whole, its traced leaves could not be
  differentiated (a custom JVP rule only differentiates its arguments). So the function closes
  over rebuild and takes the traced leaves as arguments."""
  leaves, treedef = jax.tree_util.tree_flatten(tree)
  where = [i for i, x in enumerate(leaves) if isinstance(x, jax.core.Tracer)]
  return tuple(leaves[i] for i in where), lambda traced: _with_leaves(leaves, treedef, where,
                                                                       traced)


def quat_mul(a, b, in_loop: bool = False):
  """Hamilton product a * b; a, b (..., 4) -> (..., 4). ``in_loop``: term by term unless
  differentiated, for use inside a loop (see _bilinear_in_loop)."""
  return _bilinear_in_loop(a, b, 'mul') if in_loop else _bilinear(a, b, _QUAT_MUL)


def quat_conj(q):
  return q * jnp.array([1.0, -1.0, -1.0, -1.0], dtype=q.dtype)


# quat_to_mat as one contraction: the 9 matrix entries are linear in the 16 products
# q_i q_j of the quaternion (w, x, y, z) (for a unit q, 1 - 2 (y^2 + z^2) = w^2 + x^2 - y^2 - z^2,
# MuJoCo's mju_quat2Mat form), so R = _bilinear(q, q, _QUAT_MAT) with a constant (16, 9) table.
def _quat_mat_table():
  t = np.zeros((4, 4, 3, 3))
  w, x, y, z = range(4)
  for (a, b), coef, r, c in [
      ((w, w), 1, 0, 0), ((x, x), 1, 0, 0), ((y, y), -1, 0, 0), ((z, z), -1, 0, 0),
      ((w, w), 1, 1, 1), ((x, x), -1, 1, 1), ((y, y), 1, 1, 1), ((z, z), -1, 1, 1),
      ((w, w), 1, 2, 2), ((x, x), -1, 2, 2), ((y, y), -1, 2, 2), ((z, z), 1, 2, 2),
      ((x, y), 2, 0, 1), ((w, z), -2, 0, 1), ((x, z), 2, 0, 2), ((w, y), 2, 0, 2),
      ((x, y), 2, 1, 0), ((w, z), 2, 1, 0), ((y, z), 2, 1, 2), ((w, x), -2, 1, 2),
      ((x, z), 2, 2, 0), ((w, y), -2, 2, 0), ((y, z), 2, 2, 1), ((w, x), 2, 2, 1)]:
    t[a, b, r, c] += coef
  return t.reshape(16, 9)


_QUAT_MAT = _quat_mat_table()
# the forms _bilinear_in_loop takes by name (a hashable static argument)
_FORMS = {'mul': _QUAT_MUL, 'mat': _QUAT_MAT}


def quat_to_mat(q, in_loop: bool = False):
  """3x3 rotation matrix of a unit quaternion (w, x, y, z); q (..., 4) -> (..., 3, 3).
  ``in_loop``: as quat_mul's."""
  form = _bilinear_in_loop(q, q, 'mat') if in_loop else _bilinear(q, q, _QUAT_MAT)
  return form.reshape(q.shape[:-1] + (3, 3))


@jax.custom_jvp
def rot_vec_quat(v, q):
  """Rotates vector v (..., 3) by unit quaternion q (..., 4) (either may lack the leading
  axes), MuJoCo's mju_rotVecQuat: t = w v + u x v, v + 2 u x t for q = (w, u). Elementwise
  products of the components (18 products, no rotation matrix and no dot), which also serves
  inside loops (the kinematics' joint loop and tree pass, see _bilinear_in_loop). Against the
  rotation matrix's product (the quat_to_mat form, a batched matrix-vector dot under vmap):
  kinematics alone, one device, 8 alternating runs in one process, hopper at batch 512 0.79 ->
  0.58 us a world, humanoid at batch 256 3.8 -> 2.5 us.

  Differentiated, it is the rotation matrix's product (value and derivative, the rule below):
  the components' derivative made the humanoid's gradient through 100 steps compile 4.5 s
  longer and run 1.3x slower (one world, float32). The two agree on unit quaternions, so their
  derivatives agree along the unit sphere (the callers' quaternions are normalized), and the
  differentiated value differs from the undifferentiated one by rounding."""
  v = jnp.broadcast_arrays(v, q[..., :3])[0]
  w, x, y, z = (q[..., k] for k in range(4))
  a, b, c = (v[..., k] for k in range(3))
  t0 = w * a + y * c - z * b
  t1 = w * b + z * a - x * c
  t2 = w * c + x * b - y * a
  return jnp.stack([a + 2 * (y * t2 - z * t1), b + 2 * (z * t0 - x * t2),
                    c + 2 * (x * t1 - y * t0)], axis=-1)


@functools.partial(rot_vec_quat.defjvp, symbolic_zeros=True)
def _rot_vec_quat_jvp(primals, tangents):
  v, q = primals
  dv, dq = tangents
  mat = quat_to_mat(q)
  value = matvec_small(mat, v)
  out = None
  if not is_symbolic_zero(dv):
    out = matvec_small(mat, dv)
  if not is_symbolic_zero(dq):
    dmat = _contract(_outer(dq, q) + _outer(q, dq), _QUAT_MAT).reshape(dq.shape[:-1] + (3, 3))
    term = matvec_small(dmat, v)
    out = term if out is None else out + term
  if out is None:
    out = jnp.zeros_like(value)
  # restacked component by component, as _bilinear_in_loop_jvp's value (the batch axis under
  # vmap of a scan's linearization)
  restack = lambda x: jnp.stack([x[..., k] for k in range(3)], axis=-1)  # noqa: E731
  return restack(value), restack(jnp.broadcast_to(out, value.shape))


def axis_angle_to_quat(axis, angle):
  """Quaternion of a rotation by ``angle`` about unit ``axis``."""
  half = 0.5 * angle
  return jnp.concatenate([jnp.cos(half)[..., None], axis * jnp.sin(half)[..., None]], axis=-1)


def quat_integrate(q, omega, dt):
  """q * exp(omega * dt / 2): integrates a body-frame angular velocity (mju_quatIntegrate).

  exp is written as (cos(a/2), sin(a/2)/a * omega dt) with a = |omega| dt, using the series
  of sin(x)/x near 0, so the gradient with respect to omega is exact at omega = 0.
  """
  v = omega * dt
  sq = jnp.sum(v * v, axis=-1, keepdims=True)
  small = sq < 1e-8
  a = jnp.sqrt(jnp.where(small, 1.0, sq))
  sinc = jnp.where(small, 0.5 - sq / 48.0, jnp.sin(0.5 * a) / jnp.where(small, 1.0, a))
  cos = jnp.where(small, 1.0 - sq / 8.0, jnp.cos(0.5 * a))
  return quat_normalize(quat_mul(q, jnp.concatenate([cos, sinc * v], axis=-1)))


def cross(a, b):
  return jnp.cross(a, b)


# ---------------------------------------------------------------------------------------------
# Spatial algebra (MuJoCo's com-based motion and force vectors).

def dof_com(axis, offset):
  """Motion of a unit rotation about ``axis`` through a point that is ``offset`` away from the
  frame origin (offset = origin - point): (axis, axis x offset)."""
  return jnp.concatenate([axis, jnp.cross(axis, offset)])


def inert_com(inertia, imat, dif, mass):
  """cinert 10-vector of a body: principal ``inertia`` (3,) in frame ``imat`` (3, 3), centre of
  mass at ``dif`` from the reference point (MuJoCo's mju_inertCom)."""
  full = matmul_small(imat * inertia[None, :], imat.T)
  # parallel-axis shift: I + m (|d|^2 1 - d d^T)
  sq = dif[0] * dif[0] + dif[1] * dif[1] + dif[2] * dif[2]
  full = full + mass * (sq * jnp.eye(3, dtype=dif.dtype) - dif[:, None] * dif[None, :])
  return jnp.concatenate([
      jnp.stack([full[0, 0], full[1, 1], full[2, 2], full[0, 1], full[0, 2], full[1, 2]]),
      mass * dif, mass[None]])


def mul_inert_vec(cinert, vec):
  """Spatial inertia times motion vector (mju_mulInertVec): momentum (angular, linear);
  cinert (..., 10), vec (..., 6) -> (..., 6).

  cinert i = (I_xx, I_yy, I_zz, I_xy, I_xz, I_yz, m c_x, m c_y, m c_z, m) is the 6x6 matrix
    [ I      [mc]x ]      [mc]x = [[0, -mc_z, mc_y], [mc_z, 0, -mc_x], [-mc_y, mc_x, 0]]
    [-[mc]x  m 1   ]
  Written out term by term as MuJoCo does: one elementwise fusion, where forming the
  (..., 6, 6) matrix and a batched 6x6 dot cost a gather, a transposing copy and a slow
  small-matrix kernel (1.5 ms + 3 dots per humanoid step at batch 1024).
  """
  i = [cinert[..., k] for k in range(10)]
  v = [vec[..., k] for k in range(6)]
  return jnp.stack([
      i[0] * v[0] + i[3] * v[1] + i[4] * v[2] - i[8] * v[4] + i[7] * v[5],
      i[3] * v[0] + i[1] * v[1] + i[5] * v[2] + i[8] * v[3] - i[6] * v[5],
      i[4] * v[0] + i[5] * v[1] + i[2] * v[2] - i[7] * v[3] + i[6] * v[4],
      i[8] * v[1] - i[7] * v[2] + i[9] * v[3],
      i[6] * v[2] - i[8] * v[0] + i[9] * v[4],
      i[7] * v[0] - i[6] * v[1] + i[9] * v[5]], axis=-1)


def cross_motion(v, u):
  """Spatial motion cross product v x u (mju_crossMotion)."""
  w, vl = v[:3], v[3:]
  return jnp.concatenate([jnp.cross(w, u[:3]), jnp.cross(w, u[3:]) + jnp.cross(vl, u[:3])])


def cross_force(v, f):
  """Spatial force cross product v x* f (mju_crossForce)."""
  w, vl = v[:3], v[3:]
  return jnp.concatenate([jnp.cross(w, f[:3]) + jnp.cross(vl, f[3:]), jnp.cross(w, f[3:])])
