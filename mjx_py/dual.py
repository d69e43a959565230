"""The dual constraint solvers of MuJoCo 3.3.3 (engine_solver.c): PGS (mj_solPGS, opt.solver 0)
and the noslip post-processor (mj_solNoSlip, opt.noslip_iterations > 0), on the fixed-capacity
rows of mjx_py.constraint. mjx_py.solver calls them; this module holds their iterations.

The dual problem. With AR = J M^-1 J' + diag(R) (efc_AR, nefc_max x nefc_max, built by
constraint.make_constraint for models that use a dual solver) and b = J qacc_smooth - aref
(efc_b), the constraint forces minimize 0.5 f' AR f + b' f subject to: equality rows free,
friction-loss rows |f| <= frictionloss, limit, frictionless and pyramidal contact rows f >= 0,
and per elliptic contact f_0 >= 0 and sum_j (f_j / friction_j)^2 <= f_0^2. Then
qfrc_constraint = J' f and qacc = qacc_smooth + M^-1 qfrc_constraint (MuJoCo's dualFinish).

PGS: each iteration is one Gauss-Seidel sweep over the rows in order (rows [0, nefc); the unused
tail is skipped). A scalar row moves to its unconstrained minimum f -= res / AR_ii and is
clamped into its set; an elliptic contact (its dim rows as one unit) first updates its normal
force (the unconstrained normal update while the normal force is below mjMINVAL, otherwise an
exact minimization along the ray through its current force, kept non-negative), then its
friction forces with the normal force fixed: the quadratically constrained QP
min 0.5 x' A x + x' b over the ellipse sum (x_j / friction_j)^2 <= f_0^2, solved by MuJoCo's
mju_QCQP Newton iteration on the Lagrange multiplier (20 iterations at most; a failed
factorization gives zero friction) and projected onto the ellipse when the constraint is
active. A unit whose update would raise the dual cost by more than 1e-10 keeps its old force
(costChange). The iteration's improvement is the sum of the units' cost decreases times
scale = 1 / (meaninertia max(1, nv)); PGS stops once it falls below opt.tolerance.

Noslip: run after the main solver (whatever it is) from its forces, for noslip_iterations
sweeps (stopping below noslip_tolerance). It minimizes the same dual cost with R removed from
the friction rows' diagonal blocks (friction without slip), over the friction rows only:
friction-loss rows (scalar, clamped, no cost check), pyramidal contacts as pairs of opposing
edges (rows 2k, 2k+1 of the contact: their sum is fixed and their difference minimizes the
2x2 problem, clamped so both stay non-negative), and elliptic contacts' friction rows (the
QCQP above with the solved normal force). The first sweep's improvement includes
0.5 sum R f^2 (the cost of dropping R). Equality, limit and normal rows keep their forces.

Both: efc_state is MuJoCo's dual state (dualState): equality rows QUADRATIC, friction-loss rows
LINEARPOS at f <= -frictionloss, LINEARNEG at f >= frictionloss (the opposite of the primal
naming), else QUADRATIC; limits and pyramidal rows SATISFIED at f <= 0, else QUADRATIC;
elliptic contacts by their scaled force (N = f_0 / mu, T = |f_j / friction_j|): SATISFIED when
mu N >= T, QUADRATIC when N + mu T <= 0, else CONE, on all their rows.

Layout. Per world, rows are padded by PAD = 5 zero rows (so every unit can read a window of 6
rows with a dynamic slice), forces are (nefc_max + PAD,). Each sweep is a loop over the rows up
to the batch's largest nefc: at row i a world processes the unit that starts there (``code``),
if any; the elliptic branch's QCQPs are skipped by a lax.cond on the whole batch at rows where
no world starts an elliptic contact. The iterations are a loop with a per-world convergence
mask that ends once every world has converged, batched through mjx_py.batching.per_world as the
primal solvers are. Both are while loops (see mjx_py.solver on why): everything here runs on
stop_gradient inputs, and mjx_py.solver differentiates the result implicitly.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from .math import MINVAL

PAD = 5
# mjtConstraint
EQUALITY, FRICTION_DOF, FRICTION_TENDON, LIMIT_JOINT = 0, 1, 2, 3
CONTACT_FRICTIONLESS, CONTACT_PYRAMIDAL, CONTACT_ELLIPTIC = 5, 6, 7
# mjtConstraintState
UNUSED, SATISFIED, QUADRATIC, LINEARNEG, LINEARPOS, CONE = -1, 0, 1, 2, 3, 4
# unit codes at a unit's first row
_SKIP, _FREE, _BOX, _NONNEG, _CONE, _PAIR = 0, 1, 2, 3, 4, 5
# MuJoCo's thresholds: costChange's rejection, the QCQP's and extractBlock's floors
_COST_TOL, _QCQP_TOL, _BLOCK_FLOOR, _QCQP_ITER = 1e-10, 1e-10, 1e-10, 20


class Dual(NamedTuple):
  """The dual problem of one world (rows padded to N + PAD)."""
  AR: jax.Array       # (N+PAD, N+PAD) J M^-1 J' + diag(R), zero on unused rows
  b: jax.Array        # (N+PAD,) J qacc_smooth - aref
  R: jax.Array        # (N+PAD,)
  floss: jax.Array    # (N+PAD,)
  ctype: jax.Array    # (N,) efc_type (-1 unused)
  start: jax.Array    # (N,) int32 first row of the row's contact (the row itself otherwise)
  dim: jax.Array      # (N,) int32 the contact's dim (1 for other rows)
  mu: jax.Array       # (N,) the contact's mu (1 for other rows)
  fric: jax.Array     # (N, 5) the contact's friction (1 for other rows)
  nefc: jax.Array     # () int32


class Params(NamedTuple):
  """Traced settings of one world (no gradient): tolerance and scale."""
  tol: jax.Array
  scale: jax.Array


def problem(d, AR, b):
  """The Dual of one world from Data (efc_type, efc_id, efc_R, efc_frictionloss, nefc,
  contact.efc_address/dim/mu/friction) and AR (N, N), b (N,)."""
  t = jnp.asarray(d.efc_type)
  n = t.shape[0]
  dtype = b.dtype
  rows = jnp.arange(n, dtype=jnp.int32)
  c = d.contact
  ncon = c.dim.shape[0]
  is_con = t >= CONTACT_FRICTIONLESS
  if ncon:
    cid = jnp.clip(jnp.asarray(d.efc_id), 0, ncon - 1)
    start = jnp.where(is_con, c.efc_address[cid], rows).astype(jnp.int32)
    dim = jnp.where(is_con, c.dim[cid], 1).astype(jnp.int32)
    mu = jnp.where(is_con, c.mu[cid], 1.0).astype(dtype)
    fric = jnp.where(is_con[:, None], c.friction[cid], 1.0).astype(dtype)
  else:
    start, dim = rows, jnp.ones((n,), jnp.int32)
    mu, fric = jnp.ones((n,), dtype), jnp.ones((n, 5), dtype)
  pad = lambda x: jnp.pad(x, (0, PAD))  # noqa: E731
  return Dual(jnp.pad(AR, ((0, PAD), (0, PAD))), pad(b), pad(jnp.asarray(d.efc_R, dtype)),
              pad(jnp.asarray(d.efc_frictionloss, dtype)), t, start, dim, mu, fric,
              jnp.asarray(d.nefc, jnp.int32))


def _codes(dp: Dual, noslip: bool):
  """(code, unit width) of the unit starting at each row (N,)."""
  t, rows = dp.ctype, jnp.arange(dp.ctype.shape[0])
  first = rows == dp.start
  if noslip:
    pair = (t == CONTACT_PYRAMIDAL) & ((rows - dp.start) % 2 == 0)
    code = jnp.select([(t == FRICTION_DOF) | (t == FRICTION_TENDON), pair,
                       (t == CONTACT_ELLIPTIC) & first], [_BOX, _PAIR, _CONE], _SKIP)
  else:
    code = jnp.select([t == EQUALITY, (t == FRICTION_DOF) | (t == FRICTION_TENDON),
                       (t >= LIMIT_JOINT) & (t <= CONTACT_PYRAMIDAL),
                       (t == CONTACT_ELLIPTIC) & first], [_FREE, _BOX, _NONNEG, _CONE], _SKIP)
  width = jnp.select([code == _CONE, code == _PAIR], [dp.dim, 2], 1)
  return code.astype(jnp.int32), width.astype(jnp.int32)


# ---------------------------------------------------------------------------------------------
# Small dense pieces

def _gauss_jordan(a):
  """Inverse and pivots of a small SPD matrix a (n, n), unrolled elimination without
  pivoting; the pivots are the diagonal of its LDL' factor (MuJoCo's cholFactor checks them)."""
  n = a.shape[0]
  w = jnp.concatenate([a, jnp.eye(n, dtype=a.dtype)], axis=1)
  pivots = []
  for k in range(n):
    p = w[k, k]
    pivots.append(p)
    row = w[k] / jnp.where(p != 0, p, 1.0)
    w = w - w[:, k:k + 1] * row[None, :]
    w = w.at[k].set(row)
  return w[:, n:], jnp.stack(pivots)


def qcqp(A, b, d, r, n):
  """MuJoCo's mju_QCQP2/3/QCQP: min 0.5 x' A x + x' b s.t. sum (x_j / d_j)^2 <= r^2 over the
  first n (dynamic, 2, 3 or 5) of 5 padded dims; returns (x (5,), active). Newton iterations
  on the multiplier la of (A + la) x = -b, as MuJoCo: stop once |x|^2 - r^2 < 1e-10 (in the
  scaled variables) or the step is below 1e-10; a non-positive-definite A + la (det below
  1e-10 for n <= 3, a pivot below 1e-10 for n = 5) gives x = 0, inactive."""
  dtype = A.dtype
  on = jnp.arange(5) < n
  A = jnp.where(on[:, None] & on[None, :], A, jnp.eye(5, dtype=dtype))
  d = jnp.where(on, d, 1.0)
  bs = jnp.where(on, b, 0.0) * d
  As = A * d[:, None] * d[None, :]
  eye_on = jnp.diag(on.astype(dtype))

  def body(_, c):
    la, v, running, failed = c
    inv, piv = _gauss_jordan(As + la * eye_on)
    fail = jnp.where(n <= 3, jnp.prod(piv) < _QCQP_TOL, jnp.min(piv) < _QCQP_TOL)
    x = -inv @ bs
    val = x @ x - r * r
    conv = val < _QCQP_TOL
    deriv = -2.0 * (x @ (inv @ x))
    delta = -val / jnp.where(deriv != 0, deriv, -1.0)
    stop = fail | conv | (delta < _QCQP_TOL)
    v = jnp.where(running, jnp.where(fail, 0.0, x), v)
    la = jnp.where(running & ~stop, la + delta, la)
    failed = failed | (running & fail)
    return la, v, running & ~stop, failed

  zero = jnp.zeros((), dtype)
  la, v, _, failed = lax.fori_loop(
      0, _QCQP_ITER, body, (zero, jnp.zeros((5,), dtype), jnp.ones((), bool),
                            jnp.zeros((), bool)))
  return jnp.where(on, v * d, 0.0), (la != 0) & ~failed


def _friction_qcqp(A, b, fric, normal, n):
  """The friction forces (5,) of an elliptic contact with normal force ``normal`` (the QCQP,
  put on the ellipse when active; zero when the normal force is below mjMINVAL)."""
  v, active = qcqp(A, b, fric, normal, n)
  on = jnp.arange(5) < n
  s = jnp.sum(jnp.where(on, v * v / (fric * fric), 0.0))
  s = jnp.sqrt(normal * normal / jnp.maximum(MINVAL, s))
  v = jnp.where(active, v * s, v)
  return jnp.where(normal < MINVAL, 0.0, v)


def _cost_change(A, new, old, res, on):
  """costChange: the dual cost change 0.5 dx' A dx + dx' res of a unit's update (rows ``on``);
  an increase above 1e-10 restores the old forces. Returns (forces, change)."""
  delta = jnp.where(on, new - old, 0.0)
  change = 0.5 * delta @ (A @ delta) + delta @ jnp.where(on, res, 0.0)
  reject = change > _COST_TOL
  return jnp.where(reject, old, new), jnp.where(reject, 0.0, change)


def _window(dp: Dual, f, i, sub_r: bool):
  """Rows i .. i+5: (residual b + AR f (minus R f with sub_r), AR block (6, 6), old forces)."""
  A_rows = lax.dynamic_slice_in_dim(dp.AR, i, 6, axis=0)
  res = lax.dynamic_slice_in_dim(dp.b, i, 6) + A_rows @ f
  old = lax.dynamic_slice_in_dim(f, i, 6)
  A = lax.dynamic_slice_in_dim(A_rows, i, 6, axis=1)
  if sub_r:
    r = lax.dynamic_slice_in_dim(dp.R, i, 6)
    res = res - r * old
    A = A - jnp.diag(r)
    A = A.at[jnp.arange(6), jnp.arange(6)].set(jnp.maximum(_BLOCK_FLOOR, jnp.diag(A)))
  return res, A, old


# ---------------------------------------------------------------------------------------------
# The units of a sweep (one world; f (N+PAD,) forces, i the row)

def _pgs_scalar(dp: Dual, ARinv, f, i, code):
  """A scalar row of PGS: (forces, cost change)."""
  res, _, old = _window(dp, f, i, False)
  ainv = ARinv[i]
  x = old[0] - res[0] * ainv
  fl = dp.floss[i]
  x = jnp.where(code == _BOX, jnp.clip(x, -fl, fl), jnp.where(code == _NONNEG,
                                                                jnp.maximum(x, 0.0), x))
  a = 1 / jnp.where(ainv != 0, ainv, 1.0)
  delta = x - old[0]
  change = 0.5 * delta * delta * a + delta * res[0]
  reject = (change > _COST_TOL) | (code == _SKIP)
  x = jnp.where(reject, old[0], x)
  return f.at[i].set(x), jnp.where(reject, 0.0, change)


def _pgs_cone(dp: Dual, ARinv, f, i, code):
  """A unit of PGS that may be an elliptic contact (its normal or ray update, then the
  friction QCQP with the normal force fixed), else a scalar row: (forces, cost change)."""
  f_scalar, ch_scalar = _pgs_scalar(dp, ARinv, f, i, code)
  res, A, old = _window(dp, f, i, False)
  dim = dp.dim[i]
  on = jnp.arange(6) < dim
  A = jnp.where(on[:, None] & on[None, :], A, 0.0)
  v = jnp.where(on, old, 0.0)
  # normal force too small: the normal row's unconstrained minimum, clamped, no friction
  normal = jnp.maximum(old[0] - res[0] * ARinv[i], 0.0)
  small = old[0] < MINVAL
  # otherwise the minimum along the ray through the current force, keeping the normal >= 0
  denom = v @ (A @ v)
  ok = denom >= MINVAL
  x = -(v @ res) / jnp.where(ok, denom, 1.0)
  x = jnp.where(old[0] + x * v[0] < 0, -v[0] / jnp.where(small, 1.0, old[0]), x)
  ray = jnp.where(ok, old + x * v, old)
  f1 = jnp.where(small, jnp.zeros_like(old).at[0].set(normal), ray)
  # friction with the normal fixed: b of the friction rows without their own old forces
  Ac = A[1:, 1:]
  bc = res[1:] - Ac @ jnp.where(on[1:], old[1:], 0.0) + A[1:, 0] * (f1[0] - old[0])
  fr = _friction_qcqp(Ac, bc, dp.fric[i], f1[0], dim - 1)
  new = jnp.where(on, jnp.concatenate([f1[:1], fr]), old)
  new, change = _cost_change(A, new, old, res, on)
  cone = code == _CONE
  f_cone = lax.dynamic_update_slice_in_dim(f, new, i, 0)
  return jnp.where(cone, f_cone, f_scalar), jnp.where(cone, change, ch_scalar)


def _noslip_unit(dp: Dual, ARinv, f, i, code, cones: bool):
  """A unit of the noslip sweep: a friction-loss row, a pyramidal edge pair or (with
  ``cones``) an elliptic contact's friction rows: (forces, improvement decrease)."""
  res, A, old = _window(dp, f, i, True)
  # friction loss: unconstrained minimum clamped to the box, no cost check
  fl = dp.floss[i]
  x = jnp.clip(old[0] - res[0] * ARinv[i], -fl, fl)
  delta = x - old[0]
  a = 1 / jnp.where(ARinv[i] != 0, ARinv[i], 1.0)
  box = (f.at[i].set(x), 0.5 * delta * delta * a + delta * res[0])
  # pyramidal pair: f0 = mid + y, f1 = mid - y with mid fixed, y minimizing the 2x2 problem
  on2 = jnp.arange(6) < 2
  A2 = jnp.where(on2[:, None] & on2[None, :], A, 0.0)
  bc = res[:2] - A2[:2, :2] @ old[:2]
  mid, y = 0.5 * (old[0] + old[1]), 0.5 * (old[0] - old[1])
  k1 = A2[0, 0] + A2[1, 1] - A2[0, 1] - A2[1, 0]
  k0 = mid * (A2[0, 0] - A2[1, 1]) + bc[0] - bc[1]
  y = -k0 / jnp.where(k1 < MINVAL, 1.0, k1)
  p0 = jnp.where(y < -mid, 0.0, jnp.where(y > mid, 2 * mid, mid + y))
  p1 = jnp.where(y < -mid, 2 * mid, jnp.where(y > mid, 0.0, mid - y))
  p0, p1 = jnp.where(k1 < MINVAL, mid, p0), jnp.where(k1 < MINVAL, mid, p1)
  new2, ch2 = _cost_change(A2, old.at[0].set(p0).at[1].set(p1), old, res, on2)
  pair = (lax.dynamic_update_slice_in_dim(f, new2, i, 0), ch2)
  outs = [(code == _BOX, box), (code == _PAIR, pair)]
  if cones:
    # elliptic: the friction rows i+1 .. i+dim-1 with the normal force f_i fixed
    dim = dp.dim[i]
    onf = (jnp.arange(6) >= 1) & (jnp.arange(6) < dim)
    Af = jnp.where(onf[:, None] & onf[None, :], A, 0.0)
    bcf = res[1:] - Af[1:, 1:] @ jnp.where(onf[1:], old[1:], 0.0)
    fr = _friction_qcqp(Af[1:, 1:], bcf, dp.fric[i], old[0], dim - 1)
    newc = jnp.where(onf, jnp.concatenate([old[:1], fr]), old)
    newc, chc = _cost_change(Af, newc, old, res, onf)
    outs.append((code == _CONE, (lax.dynamic_update_slice_in_dim(f, newc, i, 0), chc)))
  f_out, ch = f, jnp.zeros((), f.dtype)
  for flag, (fo, c) in outs:
    f_out = jnp.where(flag, fo, f_out)
    ch = jnp.where(flag, c, ch)
  return f_out, ch


# ---------------------------------------------------------------------------------------------
# Dual state (dualState) and the iterations

def dual_state(dp: Dual, f):
  """efc_state (N,) int32 of forces f (N+PAD,), MuJoCo's dualState; and nactive ()."""
  n = dp.ctype.shape[0]
  t, force = dp.ctype, f[:n]
  fl = dp.floss[:n]
  fric = jnp.where(force <= -fl, LINEARPOS, jnp.where(force >= fl, LINEARNEG, QUADRATIC))
  ineq = jnp.where(force <= 0, SATISFIED, QUADRATIC)
  # elliptic rows: the zone of their contact's scaled force
  j = jnp.arange(6)
  on = j[None, :] < dp.dim[:, None]
  F = jnp.where(on, f[jnp.clip(dp.start[:, None] + j[None, :], 0, f.shape[0] - 1)], 0.0)
  scl = jnp.concatenate([dp.mu[:, None], dp.fric], axis=1)
  F = F / scl
  N = F[:, 0]
  T = jnp.sqrt(jnp.sum(F[:, 1:] * F[:, 1:], axis=1))
  zone = jnp.where(dp.mu * N >= T, SATISFIED, jnp.where(N + dp.mu * T <= 0, QUADRATIC, CONE))
  state = jnp.select([t == EQUALITY, (t == FRICTION_DOF) | (t == FRICTION_TENDON),
                      t == CONTACT_ELLIPTIC, t >= LIMIT_JOINT],
                     [QUADRATIC, fric, zone, ineq], UNUSED).astype(jnp.int32)
  nactive = jnp.sum((state != SATISFIED) & (state != UNUSED), dtype=jnp.int32)
  return state, nactive


def _sweep(DP: Dual, ARinv, F, frozen, unit, cone_unit, code):
  """One Gauss-Seidel sweep for a batch (leading axis B): a loop over the rows up to the
  batch's largest nefc, each row's units (``unit``, or ``cone_unit`` where some world starts an
  elliptic contact there) in the worlds not frozen. Returns (F, cost change summed per
  world)."""
  nmax = jnp.max(DP.nefc)
  B = F.shape[0]
  zero = jnp.zeros((B,), F.dtype)

  def body(i, carry):
    F, change = carry

    def run(F):
      ci = code[:, i]
      go = lambda fn: jax.vmap(lambda dp, a, f, c: fn(dp, a, f, i, c))(  # noqa: E731
          DP, ARinv, F, ci)
      if cone_unit is None:
        newF, ch = go(unit)
      else:
        newF, ch = lax.cond(jnp.any(ci == _CONE), lambda: go(cone_unit), lambda: go(unit))
      keep = frozen | (ci == _SKIP)
      return jnp.where(keep[:, None], F, newF), jnp.where(keep, 0.0, ch)

    F, ch = run(F)
    return F, change + ch

  return lax.fori_loop(0, nmax, body, (F, zero))


class Result(NamedTuple):
  force: jax.Array        # (B, N)
  state: jax.Array        # (B, N) int32
  niter: jax.Array        # (B,) int32
  improvement: jax.Array  # (B, iterations)
  nactive: jax.Array      # (B, iterations) int32
  nchange: jax.Array      # (B, iterations) int32


def _iterations(DP: Dual, F, prm: Params, iterations: int, sweep, first_extra):
  """At most ``iterations`` sweeps with per-world convergence (improvement * scale below tol),
  in a loop that ends once every world of the batch has converged."""
  B = F.shape[0]
  state0, _ = jax.vmap(dual_state)(DP, F)
  dtype = F.dtype
  zeros = (jnp.zeros((B,), dtype), jnp.zeros((B,), jnp.int32), jnp.zeros((B,), jnp.int32))

  def iteration(c, k):
    F, state, done, niter = c
    newF, change = sweep(F, done)
    improvement = -change + jnp.where(k == 0, first_extra, 0.0)
    new_state, nactive = jax.vmap(dual_state)(DP, newF)
    nchange = jnp.sum(new_state != state, axis=1, dtype=jnp.int32)
    improvement = improvement * prm.scale
    out = (newF, jnp.where(done[:, None], state, new_state),
           done | (improvement < prm.tol), niter + jnp.where(done, 0, 1).astype(jnp.int32))
    stats = (jnp.where(done, 0.0, improvement).astype(dtype), jnp.where(done, 0, nactive),
             jnp.where(done, 0, nchange))
    return out, stats

  def more(s):
    k, c, _ = s
    return (k < iterations) & ~jnp.all(c[2])

  def step(s):
    # sweep k's statistics go to row k (rows of sweeps that do not run stay 0)
    k, c, stats = s
    c, st = iteration(c, k)
    return k + 1, c, tuple(lax.dynamic_update_index_in_dim(a, x, k, 0)
                           for a, x in zip(stats, st))

  # no rows: nothing to solve (MuJoCo returns before its solvers), 0 iterations
  c0 = (F, state0, DP.nefc == 0, jnp.zeros((B,), jnp.int32))
  stats = tuple(jnp.zeros((iterations,) + z.shape, z.dtype) for z in zeros)
  if iterations:
    _, (F, state, _, niter), stats = lax.while_loop(more, step, (jnp.int32(0), c0, stats))
  else:
    # opt.iterations = 0: no sweep runs; the start forces and their states stand
    _, state, _, niter = c0
  n = DP.ctype.shape[1]
  stats = tuple(jnp.moveaxis(s, 0, 1) for s in stats)
  return Result(F[:, :n], state, niter, *stats)


def pgs_batch(iterations: int, cones: bool, DP: Dual, F0, prm: Params):
  """mj_solPGS for a batch of worlds (leading axis B) from forces F0 (B, N): a Result."""
  ARinv = jax.vmap(lambda dp: _ar_inv(dp, False))(DP)
  codes = jax.vmap(lambda dp: _codes(dp, False)[0])(DP)
  F = jnp.pad(F0, ((0, 0), (0, PAD)))

  def sweep(F, done):
    return _sweep(DP, ARinv, F, done, _pgs_scalar, _pgs_cone if cones else None, codes)

  return _iterations(DP, F, prm, iterations, sweep, 0.0)


def noslip_batch(iterations: int, cones: bool, DP: Dual, F0, prm: Params):
  """mj_solNoSlip for a batch of worlds from the main solver's forces F0 (B, N): a Result."""
  ARinv = jax.vmap(lambda dp: _ar_inv(dp, True))(DP)
  codes = jax.vmap(lambda dp: _codes(dp, True)[0])(DP)
  F = jnp.pad(F0, ((0, 0), (0, PAD)))
  # the first sweep's improvement also counts dropping R: 0.5 sum R f^2
  extra = 0.5 * jnp.sum(F * F * DP.R, axis=1)

  def unit(dp, ainv, f, i, c):
    return _noslip_unit(dp, ainv, f, i, c, False)

  def cone_unit(dp, ainv, f, i, c):
    return _noslip_unit(dp, ainv, f, i, c, True)

  def sweep(F, done):
    return _sweep(DP, ARinv, F, done, unit, cone_unit if cones else None, codes)

  return _iterations(DP, F, prm, iterations, sweep, extra)


def _ar_inv(dp: Dual, sub_r: bool):
  """1 / diag(AR) (ARdiaginv; with sub_r 1 / max(mjMINVAL, AR_ii - R_i)) on the used rows, 0
  elsewhere (N+PAD,)."""
  diag = jnp.diag(dp.AR)
  if sub_r:
    diag = jnp.maximum(MINVAL, diag - dp.R)
  used = jnp.arange(diag.shape[0]) < dp.nefc
  return jnp.where(used, 1 / jnp.where(used, diag, 1.0), 0.0)


def warm_forces(dp: Dual, force, b, enabled: bool):
  """PGS's warm start (one world): the primal forces at qacc_warmstart (``force`` (N,)) unless
  their dual cost f' b + 0.5 f' AR f is positive (then zero); zero when warmstart is
  disabled."""
  if not enabled:
    return jnp.zeros_like(force)
  n = force.shape[0]
  AR = dp.AR[:n, :n]
  cost = force @ b + 0.5 * force @ (AR @ force)
  return jnp.where(cost > 0, 0.0, force)


__all__ = ['Dual', 'Params', 'Result', 'problem', 'pgs_batch', 'noslip_batch', 'dual_state',
           'warm_forces', 'qcqp', 'PAD']
