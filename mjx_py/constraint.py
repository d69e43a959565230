"""Constraint rows: MuJoCo's mj_makeConstraint, mj_diagApprox, mj_makeImpedance and
mj_referenceConstraint (engine_core_constraint.c, 3.3.3) for one world, in fixed-capacity buffers.

make_constraint(m, d)
  reads  qpos, qvel, eq_active, xpos, xquat, xmat, site_xpos, subtree_com, cdof, ten_length,
         ten_J, contact, ncon (after kinematics, com_pos, tendon and collision)
  writes efc_type, efc_id (nefc_max,) int32; efc_J (nefc_max, nv); efc_pos, efc_margin,
         efc_frictionloss, efc_diagApprox, efc_D, efc_R, efc_vel, efc_aref (nefc_max,);
         efc_KBIP (nefc_max, 4); nefc, ne, nf, nl () int32; contact.efc_address,
         contact.mu (and contact.exclude = 3 for a contact that moves no dof, sparse mode only)
reference_constraint(m, d)
  reads  efc_J, efc_KBIP, efc_pos, efc_margin, qvel
  writes efc_vel = J qvel, efc_aref = -B vel - K imp (pos - margin)   (nefc_max,)
project_constraint(m, d)  (called by make_constraint; models with a dual solver only)
  reads  efc_J, efc_R, qM
  writes efc_AR = J M^-1 J' + diag(R) (nefc_max, nefc_max) (mj_projectConstraint)

Rows, in MuJoCo's order (types are mjtConstraint):
  equality (0)        connect 3 rows (anchor 1 - anchor 2), weld 6 rows (positions, then the
                      rotation error: imaginary part of conj(q2) q1 relpose, times torquescale),
                      joint / tendon 1 row (y - y0 - poly(x - x0), poly from polycoef); only
                      equalities with eq_active set
  friction loss       dofs (1), then tendons (2), with frictionloss > 0; pos 0
  limits              joints in joint order: hinge and slide a lower (dist = q - range0, J = +1)
                      and an upper (dist = range1 - q, J = -1) row, ball one row (dist = range
                      max - rotation angle, J = -rotation axis); then tendons (lower, upper on
                      the length, J = +-ten_J); a row exists while dist < margin
  contacts            per contact of d.contact[:ncon] with exclude == 0: condim 1 one row (5);
                      pyramidal (6) 2 (dim - 1) rows, J_normal +- friction_k J_k; elliptic (7)
                      dim rows (normal, tangents, then the torsional / rolling rows); J is the
                      contact frame times the Jacobian difference (geom2's body - geom1's body)
                      at the contact point
A non-contact constraint whose Jacobian is all zero is skipped (MuJoCo's dense-mode rule). In
sparse mode (opt.jacobian sparse, or auto with nv >= 60) MuJoCo decides by structure instead:
a connect / weld is skipped when no dof moves either body, and a contact between two bodies that
no dof moves gets no rows and exclude = 3 (in dense mode it gets zero rows), both followed here;
for tendon rows the structural non-zeros of ten_J are approximated by its values. The Jacobian
is dense in both modes.

Impedance and reference (per constraint; a connect / weld uses the norm of its 3 / 6 residuals,
a contact its normal distance, for all its rows): solimp (d0, dwidth, width, midpoint, power),
clamped as MuJoCo does, gives imp(|pos - margin| / width) and its derivative; solref is either
(timeconst, dampratio) > 0, with timeconst >= 2 timestep unless the refsafe flag is disabled,
giving K = 1 / (dwidth^2 timeconst^2 dampratio^2), B = 2 / (dwidth timeconst), or (-stiffness,
-damping): K = stiffness / dwidth^2, B = damping / dwidth (a mixed-sign solref becomes the default
0.02 1). Friction-loss rows and the friction rows of elliptic contacts have K = 0; the latter use
solreffriction when it is non-zero. R = max(1e-15, (1 - imp) / imp * diagApprox), diagApprox from
the qpos0 inverse weights (body_invweight0 for connect / weld / contacts, dof_invweight0 for joint
rows, tendon_invweight0 for tendon rows). Frictional contacts: R_1 = R_0 / impratio, mu =
friction_0 sqrt(R_1 / R_0) (into contact.mu); elliptic R_j = R_1 friction_0^2 / friction_{j-1}^2
for j >= 2; pyramidal: every row 2 mu^2 R_0. Then D = 1 / R and diagApprox = R imp / (1 - imp).

Fixed capacity. Every element that can produce rows has *candidate* rows at static places: every
equality a block of as many rows as the largest equality type of the model, each friction-loss dof
and tendon one row, each limited hinge / slide / ball joint and tendon two rows (lower, upper; a
ball joint uses one), each contact slot of d.contact (nconmax of them) as many rows as the largest
condim among the model's candidate geom pairs can give. The stage computes all candidates at once
(vmap), marks the active ones and compacts them, in order, into rows [0, nefc) of the efc_*
buffers. Their capacity ``m.nefc_max`` (static, from ``row_tables`` at put_model) is the number of
rows the model can produce at once: the equality rows of every equality, every friction-loss
row, both sides of every limit and nconmax times the rows of the largest contact, for the parts
that the disable flags leave on, so by default no world can overflow. A smaller capacity can be
asked for (put_model's njmax, or ``<size njmax>``): then a world whose active rows do not fit
gets no rows in that step and warning_counts[2] (mjWARN_CNSTRFULL) grows by 1, as MuJoCo
drops a step's constraints when its arena is full (MuJoCo sizes its arena in bytes, so the
row count at which it overflows is not the same). Unused rows have efc_type = efc_id = -1 and
every float 0 (D = 0, so a solver that reads the whole buffer gives them no weight).

Compaction. The non-contact rows (equality, friction loss, limits) and the contact rows are two
groups (``Part``); each computes its rows' impedance, K, B and R and writes them as a
row-major table (TABLE_COLUMNS: 10 float columns, then efc_type / efc_id carried as floats),
one entry per row,
or for pyramidal contacts one per contact: every row of a pyramidal contact has its contact's
dist, margin, impedance, K, B and R (R of every row is 2 mu^2 R_0, from the first row's
diagApprox), so those columns are computed once per contact (the humanoid: 54 entries instead of
216). The active rows' indices (math.nonzero_first) gather the Jacobian rows and each row's
table entry into the efc buffers: two gathers, their indices computed once (an optimization
barrier, which XLA:CPU removes before fusing: there only src's last few integer operations
are recomputed per element, after nonzero_first's scatter).
The hopper's make_constraint at batch 512 on one core went from 4.1 to 2.0 ms of profiled busy
time (see BENCHMARKS.md, stop 49).

Gradients: the selection (which rows are active, their order) carries none; the values do, and
stay finite at singular points (zero residual norms, zero ball-joint angles, saturated or flat
impedance, unused contact slots): every branch is evaluated at safe arguments.

The elements that can produce rows are fixed by the Model at put_model (as the static type sets
are): a dof or tendon whose frictionloss is 0 there never gets a row, whatever value it is given
later (a positive value that is set to 0 later does drop its row); jnt_limited / tendon_limited
edited after put_model have no effect. Rebuild the Model with put_model after such edits.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from . import inertia, math, support
from .check import batch_any
from .data import EFC_UNUSED, dual_rows
from .errors import NotSupportedError
from .math import MINVAL
from .xla import full_precision

# mjtConstraint
EQUALITY, FRICTION_DOF, FRICTION_TENDON, LIMIT_JOINT, LIMIT_TENDON = 0, 1, 2, 3, 4
CONTACT_FRICTIONLESS, CONTACT_PYRAMIDAL, CONTACT_ELLIPTIC = 5, 6, 7
# mjtEq, and the rows each type makes
EQ_CONNECT, EQ_WELD, EQ_JOINT, EQ_TENDON, EQ_FLEX = 0, 1, 2, 3, 4
EQ_ROWS = {EQ_CONNECT: 3, EQ_WELD: 6, EQ_JOINT: 1, EQ_TENDON: 1}
OBJ_SITE = 6                      # mjOBJ_SITE (otherwise connect / weld name bodies)
FREE, BALL, SLIDE, HINGE = 0, 1, 2, 3
PYRAMIDAL, ELLIPTIC = 0, 1
DSBL_CONSTRAINT, DSBL_EQUALITY, DSBL_FRICTIONLOSS, DSBL_LIMIT, DSBL_CONTACT = 1, 2, 4, 8, 16
DSBL_REFSAFE = 1 << 11
ENBL_OVERRIDE = 1                 # mjENBL_OVERRIDE (contacts take opt.o_solimp)
WARN_CNSTRFULL = 2                # mjtWarning
JAC_SPARSE, JAC_AUTO = 1, 2
MINIMP, MAXIMP = 0.0001, 0.9999   # mjMINIMP, mjMAXIMP
DEFAULT_SOLREF = (0.02, 1.0)      # replaces a mixed-sign solref


# ---------------------------------------------------------------------------------------------
# Host side: candidate tables and capacity

def _contact_rows(cmax: int, cone: int) -> int:
  """Rows of a contact with condim ``cmax`` (1 for a frictionless one, whatever the cone)."""
  if cmax <= 1:
    return 1
  return 2 * (cmax - 1) if cone == PYRAMIDAL else cmax


def row_tables(arrays: dict, tables: dict, nconmax: int, njmax: int | None = None) -> dict:
  """Static constraint-row tables of a compiled model (numpy, host only; see module docstring).

  arrays: the compiler's dict of MuJoCo-named arrays; tables: the collision candidate tables
  (``mjx_py.collision.driver.pair_tables``); nconmax: the contact buffer's capacity; njmax:
  the efc buffers' capacity asked for (put_model's njmax, else ``<size njmax>``; None or -1:
  the most rows the model can produce; a larger value is lowered to that).
  Returns the Model's static fields ``nefc_max`` (the efc buffers' capacity), ``efc_friction``
  ((dof ids, tendon ids) with frictionloss > 0), ``efc_limit`` ((limited hinge / slide / ball
  joint ids, limited tendon ids)) and ``efc_rows``: the most rows each part can hold at once,
  before the disable flags (equality, friction loss, limits, rows per contact slot).
  """
  def ints(name):
    return np.asarray(arrays[name], np.int64).reshape(-1)

  def floats(name):
    return np.asarray(arrays[name], np.float64).reshape(-1)

  fric = (tuple(int(i) for i in np.flatnonzero(floats('dof_frictionloss') > 0)),
          tuple(int(i) for i in np.flatnonzero(floats('tendon_frictionloss') > 0)))
  jtype = ints('jnt_type')
  jlim = (ints('jnt_limited') != 0) & (jtype != FREE)
  limit = (tuple(int(i) for i in np.flatnonzero(jlim)),
           tuple(int(i) for i in np.flatnonzero(ints('tendon_limited') != 0)))
  ne = sum(EQ_ROWS.get(int(t), 0) for t in ints('eq_type'))
  nf = len(fric[0]) + len(fric[1])
  nl = 2 * int(np.sum(jlim & (jtype != BALL))) + int(np.sum(jlim & (jtype == BALL))) + 2 * len(
      limit[1])
  # the largest condim a contact can have: mixing always picks one of the two geoms' condims,
  # an explicit pair has its own; the candidates are the table's rows (col_geom, col_pairid)
  # and, with the sort-based broadphase, pairs of the geoms it sweeps (col_sweep)
  geom = np.asarray(tables['col_geom'], np.int64).reshape(-1, 2)
  pairid = np.asarray(tables['col_pairid'], np.int64).reshape(-1)
  sweep = np.asarray(tables.get('col_sweep', ()), np.int64).reshape(-1)
  condim = ints('geom_condim')
  dims = [1, int(np.max(condim[sweep], initial=1))]
  if geom.size:
    dyn = pairid < 0
    dims += [int(np.max(condim[geom[dyn]], initial=1)),
             int(np.max(ints('pair_dim')[pairid[~dyn]], initial=1))]
  conrows = _contact_rows(max(dims), int(arrays['opt_cone']))
  rows = (ne, nf, nl, conrows)
  nefc_max = capacity(rows, nconmax if tables['ncandidate'] else 0,
                      int(arrays['opt_disableflags']), int(arrays['nv']))
  if njmax is None:
    njmax = int(arrays.get('njmax', -1))
  if njmax >= 0:
    nefc_max = min(nefc_max, njmax)
  return {'nefc_max': nefc_max, 'efc_friction': fric, 'efc_limit': limit, 'efc_rows': rows}


def capacity(rows, nconmax: int, disableflags: int, nv: int) -> int:
  """Rows the model can produce at once with these disable flags (see module docstring)."""
  if disableflags & DSBL_CONSTRAINT or nv == 0:
    return 0
  ne, nf, nl, conrows = rows
  return ((0 if disableflags & DSBL_EQUALITY else ne)
          + (0 if disableflags & DSBL_FRICTIONLOSS else nf)
          + (0 if disableflags & DSBL_LIMIT else nl)
          + (0 if disableflags & DSBL_CONTACT else nconmax * conrows))


# ---------------------------------------------------------------------------------------------
# Impedance and reference: MuJoCo's getsolparam / getimpedance / mj_makeImpedance, elementwise

def _clean_solref(ref, timestep, refsafe: bool, friction: bool = False):
  """solref (..., 2) as MuJoCo uses it, as its two columns (timeconst, dampratio) (...): a
  mixed-sign pair becomes the default (solreffriction: zero), then timeconst >= 2 timestep for
  the standard form (refsafe). Columns, not a stacked pair: under vmap a (..., 2) array is a
  strided layout whose writes cost a pass of their own."""
  tc, dr = ref[..., 0], ref[..., 1]
  mixed = (tc > 0) ^ (dr > 0)
  fallback = (0.0, 0.0) if friction else DEFAULT_SOLREF
  tc, dr = jnp.where(mixed, fallback[0], tc), jnp.where(mixed, fallback[1], dr)
  if refsafe:
    tc = jnp.where(tc > 0, jnp.maximum(tc, 2 * timestep), tc)
  return tc, dr


def _clean_solimp(imp):
  """solimp (..., 5) clamped as MuJoCo does (d0, dwidth, midpoint in [1e-4, 0.9999], width >=
  0, power >= 1), as its five columns (d0, dwidth, width, midpoint, power) (...)."""
  clamp = lambda x: jnp.clip(x, MINIMP, MAXIMP)  # noqa: E731
  return (clamp(imp[..., 0]), clamp(imp[..., 1]), jnp.maximum(imp[..., 2], 0.0),
          clamp(imp[..., 3]), jnp.maximum(imp[..., 4], 1.0))


def _power(a, b):
  """a ** b with MuJoCo's exact shortcuts for b = 1 and b = 2 (a > 0 wherever it is used); b
  a Python number (a static power, see _static_power) gives only the form it needs."""
  if isinstance(b, (int, float)):
    return jnp.ones_like(a) if b == 0 else a if b == 1 else a * a if b == 2 else a ** b
  return jnp.where(b == 1, a, jnp.where(b == 2, a * a, a ** b))


# the Model fields whose solimp power reaches each group's impedance: the non-contact rows'
# (limits, friction loss, equality) and the contacts' (mixed from the geoms', or a pair's, or
# the override's)
ROW_SOLIMP = ('jnt_solimp', 'dof_solimp', 'eq_solimp', 'tendon_solimp_lim', 'tendon_solimp_fri')
CONTACT_SOLIMP = ('geom_solimp', 'pair_solimp')


def _static_power(m, names, override: bool = False):
  """The solimp power (after _clean_solimp's clamp to >= 1) every row of a group has, as a
  Python float, when the Model's fields ``names`` are concrete (closed over by jit, not traced)
  and all hold the same power 1 or 2; else None (the power stays an array). Exact for the
  contacts too: solimp mixes as mix p + (1 - mix) p, which is p exactly for p = 1 and p = 2
  (mix + fl(1 - mix) == 1 in binary floating point, and doubling is exact). With it the
  impedance's two a ** b (exp and log on XLA:CPU, computed for every row even where MuJoCo's
  shortcuts apply) become the shortcut itself: make_constraint alone, hopper at batch 512, one
  device, 10 alternating runs, about 0.9 of the time."""
  values = set()
  for name in names + (('opt.o_solimp',) if override else ()):
    x = math.concrete(m.opt.o_solimp if name == 'opt.o_solimp' else getattr(m, name))
    if x is None:
      return None
    values.update(np.maximum(np.asarray(x, np.float64).reshape(-1, 5)[:, 4], 1.0).tolist())
  return values.pop() if len(values) == 1 and values <= {1.0, 2.0} else None


def impedance(solimp, pos, margin, power=None):
  """(imp, imp') of constraints at ``pos - margin`` (elementwise; solimp (..., 5) clamped, or
  its five columns as _clean_solimp gives them; ``power``: a static power every row has, see
  _static_power, in place of solimp's).

  imp = d0 + y(x) (dwidth - d0), x = |pos - margin| / width: the sigmoid y made of a power
  curve below the midpoint, y = x^p / mid^(p-1), and its mirror above, y = 1 - (1 - x)^p /
  (1 - mid)^(p-1), saturated at x >= 1; flat (the mean of d0 and dwidth) when d0 == dwidth or
  width is ~0. Only the side x is on is evaluated, as MuJoCo's branch does: with u = x or
  1 - x and c = 1 / mid^(p-1) or 1 / (1 - mid)^(p-1), u^p = u^(p-1) u and y' = p c u^(p-1),
  two powers per row instead of six (exact for MuJoCo's p = 1 and p = 2 shortcuts; one
  rounding apart from pow(u, p) otherwise). The unused branches are evaluated at x = 0.5, so
  gradients stay finite.
  """
  d0, dw, width, mid, p = solimp if isinstance(solimp, tuple) else (solimp[..., k]
                                                                      for k in range(5))
  if power is not None:
    p = power
  flat = (d0 == dw) | (width <= MINVAL)
  w = jnp.where(flat, 1.0, width)
  x = (pos - margin) / w
  sgn = jnp.where(x < 0, -1.0, 1.0)
  x = jnp.abs(x)
  sat = (x >= 1) | (x <= 0)
  xs = jnp.where(sat | flat, 0.5, x)
  low = xs <= mid
  u = jnp.where(low, xs, 1 - xs)
  c = 1 / _power(jnp.where(low, mid, 1 - mid), p - 1)
  up = _power(u, p - 1)                       # u^(p-1)
  cup = c * (up * u)                          # c u^p: y below the midpoint, 1 - y above
  y = jnp.where(low, cup, 1 - cup)
  yp = p * c * up
  if power is None:
    y = jnp.where(p == 1, xs, y)
    yp = jnp.where(p == 1, 1.0, yp)
  elif power == 1:
    y, yp = xs, jnp.ones_like(xs)
  imp = d0 + y * (dw - d0)
  impp = yp * sgn * (dw - d0) / w
  imp = jnp.where(flat, 0.5 * (d0 + dw), jnp.where(sat, jnp.where(x >= 1, dw, d0), imp))
  impp = jnp.where(flat | sat, 0.0, impp)
  return imp, impp


def _stiffness_damping(ref, dmax):
  """(K, B) from a cleaned solref's columns (timeconst, dampratio) and dwidth (...): standard
  or direct form."""
  tc, dr = ref
  k = jnp.where(tc > 0, 1 / jnp.maximum(MINVAL, dmax * dmax * tc * tc * dr * dr),
                -tc / jnp.maximum(MINVAL, dmax * dmax))
  b = jnp.where(dr > 0, 2 / jnp.maximum(MINVAL, dmax * tc), -dr / jnp.maximum(MINVAL, dmax))
  return k, b


def _regularizer(imp, diag):
  """R = max(1e-15, (1 - imp) diagApprox / imp)."""
  return jnp.maximum(MINVAL, (1 - imp) * diag / imp)


class Rows(NamedTuple):
  """Candidate rows of one part (n rows), before compaction: what the row is, and the inputs of
  its impedance and regularizer."""
  J: jax.Array             # (n, nv)
  pos: jax.Array           # (n,)
  margin: jax.Array        # (n,)
  frictionloss: jax.Array  # (n,)
  type: jax.Array          # (n,) int32
  id: jax.Array            # (n,) int32
  active: jax.Array        # (n,) bool
  diag: jax.Array          # (n,) diagApprox before the impedance
  solref: jax.Array        # (n, 2) as given (cleaned once for all rows)
  solimp: jax.Array        # (n, 5) as given
  imp_pos: jax.Array       # (n,) position of the constraint the row belongs to ...
  imp_margin: jax.Array    # (n,) ... and its margin, for the impedance
  friction: jax.Array      # (n,) bool: K = 0 (friction loss, elliptic friction rows)


def _scalar_rows(J, pos, margin, frictionloss, ctype, cid, active, diag, solref, solimp,
                 friction: bool):
  """Rows whose impedance uses their own pos and margin (friction loss, limits)."""
  n = pos.shape[0]
  return Rows(J, pos, margin, frictionloss, jnp.full((n,), ctype, jnp.int32),
              cid.astype(jnp.int32), active, diag, solref, solimp, pos, margin,
              jnp.full((n,), friction))


def _refsafe(m) -> bool:
  return not m.opt.disableflags & DSBL_REFSAFE


def _sparse(m) -> bool:
  """MuJoCo's mj_isSparse: which of its Jacobian paths (and their row rules) applies."""
  return m.opt.jacobian == JAC_SPARSE or (m.opt.jacobian == JAC_AUTO and m.nv >= 60)


# ---------------------------------------------------------------------------------------------
# The four parts

# quaternion product as a bilinear form: (a b)_i = sum_jk _QMUL[i, j, k] a_j b_k (one einsum
# instead of component slices: a smaller program to compile and differentiate)
_QMUL = np.zeros((4, 4, 4))
for _i, _j, _k, _sgn in ((0, 0, 0, 1), (0, 1, 1, -1), (0, 2, 2, -1), (0, 3, 3, -1),
                         (1, 0, 1, 1), (1, 1, 0, 1), (1, 2, 3, 1), (1, 3, 2, -1),
                         (2, 0, 2, 1), (2, 1, 3, -1), (2, 2, 0, 1), (2, 3, 1, 1),
                         (3, 0, 3, 1), (3, 1, 2, 1), (3, 2, 1, -1), (3, 3, 0, 1)):
  _QMUL[_i, _j, _k] = _sgn


def _quat_mul(a, b):
  """Hamilton products a b of quaternions (n, 4)."""
  return jnp.einsum('ijk,nj,nk->ni', jnp.asarray(_QMUL, a.dtype), a, b)


def _jac_dif(m, d, p1, b1, p2, b2):
  """Jacobian differences (point p1 on body b1) - (point p2 on body b2), translational and
  rotational, (n, 3, nv) each, for n pairs (one vmapped mj_jac over both sides)."""
  n = p1.shape[0]
  jp, jr = jax.vmap(lambda p, b: support.jac(m, d, p, b))(
      jnp.concatenate([p1, p2]), jnp.concatenate([b1, b2]))
  return jp[:n] - jp[n:], jr[:n] - jr[n:]


def _contact_jac(m, d, pos, frame, b1, b2, nrow: int = 6):
  """The contact Jacobians (n, nrow, nv): the Jacobian difference body b2 - body b1 at the
  contact point ``pos`` (n, 3), in the contact frame (rows of ``frame`` (n, 3, 3)): rows
  normal, tangent1, tangent2 of the translation, then the same axes of the rotation (torsion,
  rolling), the first ``nrow`` (static) of those six: a contact of condim c uses its first c,
  so a model whose contacts have condim 3 at most computes no rotation rows.

  mj_jac of a point p on body b is, per dof v that moves b, lin_v + ang_v x (p - com_b) for
  the translation and ang_v for the rotation (cdof = [ang, lin], com_b the subtree com of b's
  root). Projected on a frame axis F: F . lin_v + ang_v . ((p - com_b) x F) and F . ang_v (the
  triple product rotated), so with the dof masks s_1, s_2 of the two bodies:
    translation  (s_2 - s_1) F . lin_v + s_2 ang_v . a_2 - s_1 ang_v . a_1,  a_k = (p - com_k) x F
    rotation     (s_2 - s_1) F . ang_v
  Every term is a 3-term dot of a per-contact vector with a per-dof vector: one fused
  elementwise pass over (n, 6, nv), with no per-side (n, 3, nv) Jacobians and no small
  batched matrix products."""
  s1 = support.dof_moves(m, b1).astype(pos.dtype)                   # (n, nv)
  s2 = support.dof_moves(m, b2).astype(pos.dtype)
  ang, lin = d.cdof[:, :3], d.cdof[:, 3:]                           # (nv, 3)
  off1 = pos - d.subtree_com[m.body_rootid[b1]]                     # (n, 3)
  off2 = pos - d.subtree_com[m.body_rootid[b2]]
  ntran = min(nrow, 3)
  axes = frame[:, :ntran]                                           # (n, ntran, 3)
  a1 = jnp.cross(off1[:, None, :], axes)                            # (n, ntran, 3)
  a2 = jnp.cross(off2[:, None, :], axes)

  # (n, i, 3) . (nv, 3) -> (n, i, nv), written out as three products (math.matmul_small)
  ang_t, lin_t = ang.T, lin.T
  ds = (s2 - s1)[:, None, :]
  tran = (ds * math.matmul_small(axes, lin_t) + s2[:, None, :] * math.matmul_small(a2, ang_t)
          - s1[:, None, :] * math.matmul_small(a1, ang_t))
  if nrow <= 3:
    return tran
  rot = ds * math.matmul_small(frame[:, :nrow - 3], ang_t)
  return jnp.concatenate([tran, rot], axis=1)


def _equality(m, d) -> Rows:
  """Equality rows: a block of ``nb`` candidate rows per equality (nb: the largest type's)."""
  types = [t for t in m.eq_types if t in EQ_ROWS]
  if len(types) != len(m.eq_types):
    raise NotSupportedError('flex equality constraints are not implemented; disable equality '
                            'constraints with <option><flag equality="disable"/></option>')
  nb = max(EQ_ROWS[t] for t in types)
  nv, dtype = m.nv, d.qpos.dtype
  site = m.eq_objtype == OBJ_SITE
  id1, id2 = m.eq_obj1id, m.eq_obj2id
  data = m.eq_data
  cpos, jac, diag, ipos = {}, {}, {}, {}

  def pad(x, axis_rows):
    """(neq, r, ...) -> (neq, nb, ...) with zero rows."""
    extra = nb - axis_rows
    if not extra:
      return x
    return jnp.concatenate([x, jnp.zeros((x.shape[0], extra) + x.shape[2:], x.dtype)], axis=1)

  if EQ_CONNECT in types or EQ_WELD in types:
    s1, s2 = jnp.clip(id1, 0, max(m.nsite - 1, 0)), jnp.clip(id2, 0, max(m.nsite - 1, 0))
    bo1, bo2 = jnp.clip(id1, 0, m.nbody - 1), jnp.clip(id2, 0, m.nbody - 1)
    if m.nsite:
      b1 = jnp.where(site, m.site_bodyid[s1], bo1)
      b2 = jnp.where(site, m.site_bodyid[s2], bo2)
    else:
      b1, b2 = bo1, bo2
    iw = m.body_invweight0
    xmat = d.xmat.reshape(-1, 3, 3)

    # world points of the two sides (connect: anchor data[0:3] on body 1, data[3:6] on body 2;
    # weld: data[3:6] on body 1, data[0:3] on body 2; site forms: the sites), and the Jacobian
    # differences side 1 - side 2 at them, translational and rotational (neq, 3, nv)
    weld = (m.eq_type == EQ_WELD)[:, None]
    a1 = jnp.where(weld, data[:, 3:6], data[:, 0:3])
    a2 = jnp.where(weld, data[:, 0:3], data[:, 3:6])
    p1 = d.xpos[bo1] + jnp.einsum('nij,nj->ni', xmat[bo1], a1)
    p2 = d.xpos[bo2] + jnp.einsum('nij,nj->ni', xmat[bo2], a2)
    if m.nsite:
      p1 = jnp.where(site[:, None], d.site_xpos[s1], p1)
      p2 = jnp.where(site[:, None], d.site_xpos[s2], p2)
    jp, jr = _jac_dif(m, d, p1, b1, p2, b2)
    tran = iw[b1, 0] + iw[b2, 0]

    if EQ_CONNECT in types:
      cpos[EQ_CONNECT] = pad(p1 - p2, 3)
      jac[EQ_CONNECT] = pad(jp, 3)
      diag[EQ_CONNECT] = pad(jnp.repeat(tran[:, None], 3, axis=1), 3)
      ipos[EQ_CONNECT] = math.safe_norm(p1 - p2)
    if EQ_WELD in types:
      # rotation error Im(conj(q2) q1 relpose) (relpose data[6:10]; site form: the sites'
      # frames), times torquescale data[10]
      q1 = _quat_mul(d.xquat[bo1], data[:, 6:10])
      q2 = d.xquat[bo2]
      if m.nsite:
        q1 = jnp.where(site[:, None], _quat_mul(d.xquat[b1], m.site_quat[s1]), q1)
        q2 = jnp.where(site[:, None], _quat_mul(d.xquat[b2], m.site_quat[s2]), q2)
      # conj(q2) (0, w) q1 = R(q1) L(conj(q2)) (0, w): the error's Jacobian is 0.5 torquescale
      # times the imaginary 3x3 block of that product, applied to the rotational Jacobian
      qmul = jnp.asarray(_QMUL, dtype)
      left = jnp.einsum('ijk,nj->nik', qmul, math.quat_conj(q2))         # L(conj(q2)) (neq,4,4)
      right = jnp.einsum('ijk,nk->nij', qmul, q1)                        # R(q1)
      scale = data[:, 10]
      rot = jnp.einsum('nij,nj->ni', left, q1)[:, 1:] * scale[:, None]
      block = jnp.einsum('nij,njk->nik', right, left)[:, 1:, 1:]
      jrot = 0.5 * scale[:, None, None] * jnp.einsum('nij,njv->niv', block, jr)
      cpos[EQ_WELD] = pad(jnp.concatenate([p1 - p2, rot], axis=1), 6)
      jac[EQ_WELD] = pad(jnp.concatenate([jp, jrot], axis=1), 6)
      rotw = iw[b1, 1] + iw[b2, 1]
      diag[EQ_WELD] = pad(jnp.stack([tran] * 3 + [rotw] * 3, axis=1), 6)
      ipos[EQ_WELD] = math.safe_norm(jnp.concatenate([p1 - p2, rot], axis=1))

  def coupling(y, y0, x, x0, j1, j2, w1, w2):
    """y - y0 - poly(x - x0) (only y - y0 - a0 without a second object), its Jacobian j1 -
    poly'(x - x0) j2 and diagApprox w1 + w2."""
    has2 = id2 >= 0
    dif = x - x0
    poly = (data[:, 1] * dif + data[:, 2] * dif * dif + data[:, 3] * dif * dif * dif
            + data[:, 4] * dif * dif * dif * dif)
    deriv = (data[:, 1] + 2 * data[:, 2] * dif + 3 * data[:, 3] * dif * dif
             + 4 * data[:, 4] * dif * dif * dif)
    err = y - y0 - data[:, 0] - jnp.where(has2, poly, 0.0)
    j = j1 - jnp.where(has2, deriv, 0.0)[:, None] * j2
    w = w1 + jnp.where(has2, w2, 0.0)
    return pad(err[:, None], 1), pad(j[:, None], 1), pad(w[:, None], 1), err

  if EQ_JOINT in types:
    j1 = jnp.clip(id1, 0, max(m.njnt - 1, 0))
    j2 = jnp.clip(id2, 0, max(m.njnt - 1, 0))
    a1, a2 = m.jnt_qposadr[j1], m.jnt_qposadr[j2]
    v1, v2 = m.jnt_dofadr[j1], m.jnt_dofadr[j2]
    eye = jnp.eye(nv, dtype=dtype)
    cpos[EQ_JOINT], jac[EQ_JOINT], diag[EQ_JOINT], ipos[EQ_JOINT] = coupling(
        d.qpos[a1], m.qpos0[a1], d.qpos[a2], m.qpos0[a2], eye[v1], eye[v2],
        m.dof_invweight0[v1], m.dof_invweight0[v2])
  if EQ_TENDON in types:
    t1 = jnp.clip(id1, 0, max(m.ntendon - 1, 0))
    t2 = jnp.clip(id2, 0, max(m.ntendon - 1, 0))
    cpos[EQ_TENDON], jac[EQ_TENDON], diag[EQ_TENDON], ipos[EQ_TENDON] = coupling(
        d.ten_length[t1], m.tendon_length0[t1], d.ten_length[t2], m.tendon_length0[t2],
        d.ten_J[t1], d.ten_J[t2], m.tendon_invweight0[t1], m.tendon_invweight0[t2])

  def select(values):
    """The value of each equality's own type."""
    out = values[types[0]]
    for t in types[1:]:
      sel = (m.eq_type == t).reshape((-1,) + (1,) * (out.ndim - 1))
      out = jnp.where(sel, values[t], out)
    return out

  cpos, jac, diag, ipos = select(cpos), select(jac), select(diag), select(ipos)
  size = jnp.asarray([EQ_ROWS.get(t, 0) for t in range(EQ_FLEX + 1)], jnp.int32)[m.eq_type]
  in_block = jnp.arange(nb)[None, :] < size[:, None]                      # (neq, nb)
  if _sparse(m) and (EQ_CONNECT in types or EQ_WELD in types):
    # sparse mode: a connect / weld is empty when no dof moves either body
    moved = jnp.any(support.dof_moves(m, b1) | support.dof_moves(m, b2), axis=1)
    nonempty = jnp.where((m.eq_type == EQ_CONNECT) | (m.eq_type == EQ_WELD), moved,
                         jnp.any(jac != 0, axis=(1, 2)))
  else:
    nonempty = jnp.any((jac != 0) & in_block[:, :, None], axis=(1, 2))
  active = in_block & ((d.eq_active != 0) & nonempty)[:, None]

  # one impedance per equality (from the norm of its residuals), shared by its rows
  n = m.neq * nb
  zeros = jnp.zeros((n,), dtype)
  return Rows(jac.reshape(n, nv), cpos.reshape(n), zeros, zeros,
              jnp.full((n,), EQUALITY, jnp.int32),
              jnp.repeat(jnp.arange(m.neq, dtype=jnp.int32), nb), active.reshape(n),
              diag.reshape(n), jnp.repeat(m.eq_solref, nb, axis=0),
              jnp.repeat(m.eq_solimp, nb, axis=0), jnp.repeat(ipos, nb), zeros,
              jnp.zeros((n,), bool))


def _friction(m, d) -> list:
  """Friction-loss rows: the candidate dofs, then the candidate tendons (one row each)."""
  dofs, tendons = m.efc_friction
  dtype = d.qpos.dtype
  parts = []
  if dofs:
    ids = jnp.asarray(dofs, jnp.int32)
    fl = m.dof_frictionloss[ids]
    zero = jnp.zeros_like(fl)
    parts.append(_scalar_rows(
        jnp.eye(m.nv, dtype=dtype)[ids], zero, zero, fl, FRICTION_DOF, ids, fl > 0,
        m.dof_invweight0[ids], m.dof_solref[ids], m.dof_solimp[ids], friction=True))
  if tendons:
    ids = jnp.asarray(tendons, jnp.int32)
    fl = m.tendon_frictionloss[ids]
    jac = d.ten_J[ids]
    zero = jnp.zeros_like(fl)
    parts.append(_scalar_rows(
        jac, zero, zero, fl, FRICTION_TENDON, ids, (fl > 0) & jnp.any(jac != 0, axis=1),
        m.tendon_invweight0[ids], m.tendon_solref_fri[ids], m.tendon_solimp_fri[ids],
        friction=True))
  return parts


def _ball_angle(q):
  """(rotation angle >= 0, unit axis) of a ball joint's quaternion as MuJoCo takes it
  (mju_quat2Vel, then normalized; angle in [0, pi], axis (1, 0, 0) at a zero angle)."""
  q = math.quat_normalize(q)
  v = q[1:]
  s = math.safe_norm(v)
  ex = jnp.asarray([1.0, 0.0, 0.0], q.dtype)
  axis = jnp.where(s < MINVAL, ex, v / jnp.where(s < MINVAL, 1.0, s))
  speed = 2 * jnp.arctan2(s, q[0])
  speed = jnp.where(speed > jnp.pi, speed - 2 * jnp.pi, speed)
  angle = jnp.abs(speed)
  axis = jnp.where(angle < MINVAL, ex, jnp.where(speed < 0, -axis, axis))
  return angle, axis


def _limit(m, d) -> list:
  """Limit rows: two candidates per limited joint (hinge / slide: lower, upper; ball: its row
  and an unused one), in joint order, then two per limited tendon."""
  joints, tendons = m.efc_limit
  dtype = d.qpos.dtype
  nv = m.nv
  parts = []
  if joints:
    ids = jnp.asarray(joints, jnp.int32)
    jtype = m.jnt_type[ids]
    qadr, vadr = m.jnt_qposadr[ids], m.jnt_dofadr[ids]
    rng, margin = m.jnt_range[ids], m.jnt_margin[ids]
    value = d.qpos[qadr]
    # side -1 (lower): dist = -(range0 - q), J = +1; side +1 (upper): dist = range1 - q, J = -1
    dist = jnp.stack([-(rng[:, 0] - value), rng[:, 1] - value], axis=1)
    unit = jax.nn.one_hot(vadr, nv, dtype=dtype)                            # (n, nv) 0/1
    jac = jnp.stack([unit, -unit], axis=1)                                  # (n, 2, nv)
    valid = jnp.ones((len(joints), 2), bool)
    if BALL in m.jnt_types:
      quat = d.qpos[jnp.minimum(qadr[:, None] + jnp.arange(4), m.nq - 1)]
      angle, axis = jax.vmap(_ball_angle)(quat)
      ball = jtype == BALL
      bdist = jnp.maximum(rng[:, 0], rng[:, 1]) - angle
      bjac = jnp.zeros((len(joints), nv), dtype).at[
          jnp.arange(len(joints))[:, None], vadr[:, None] + jnp.arange(3)].set(-axis, mode='drop')
      dist = jnp.where(ball[:, None], jnp.stack([bdist, jnp.zeros_like(bdist)], axis=1), dist)
      jac = jnp.where(ball[:, None, None], jnp.stack([bjac, jnp.zeros_like(bjac)], axis=1), jac)
      valid = valid & ~(ball[:, None] & (jnp.arange(2) == 1))
    margin2 = jnp.repeat(margin, 2)
    pos = dist.reshape(-1)
    parts.append(_scalar_rows(
        jac.reshape(-1, nv), pos, margin2, jnp.zeros_like(pos), LIMIT_JOINT,
        jnp.repeat(ids, 2), valid.reshape(-1) & (pos < margin2),
        jnp.repeat(m.dof_invweight0[vadr], 2), jnp.repeat(m.jnt_solref[ids], 2, axis=0),
        jnp.repeat(m.jnt_solimp[ids], 2, axis=0), friction=False))
  if tendons:
    ids = jnp.asarray(tendons, jnp.int32)
    value = d.ten_length[ids]
    rng, margin = m.tendon_range[ids], m.tendon_margin[ids]
    dist = jnp.stack([-(rng[:, 0] - value), rng[:, 1] - value], axis=1).reshape(-1)
    tj = d.ten_J[ids]
    jac = jnp.stack([tj, -tj], axis=1).reshape(-1, nv)
    margin2 = jnp.repeat(margin, 2)
    nonempty = jnp.repeat(jnp.any(tj != 0, axis=1), 2)
    parts.append(_scalar_rows(
        jac, dist, margin2, jnp.zeros_like(dist), LIMIT_TENDON, jnp.repeat(ids, 2),
        (dist < margin2) & nonempty, jnp.repeat(m.tendon_invweight0[ids], 2),
        jnp.repeat(m.tendon_solref_lim[ids], 2, axis=0),
        jnp.repeat(m.tendon_solimp_lim[ids], 2, axis=0), friction=False))
  return parts


def _contact(m, d):
  """Contact rows: ``nr`` candidate rows per contact slot. Returns (Part, mu (nconmax,): the
  cones' mu, no_dofs (nconmax,) bool: used contacts that no dof moves, sparse mode only)."""
  nc, nr, nv = m.nconmax, m.efc_rows[3], m.nv
  c = d.contact
  dtype = d.qpos.dtype
  used = jnp.arange(nc) < d.ncon
  g1, g2 = jnp.maximum(c.geom1, 0), jnp.maximum(c.geom2, 0)
  b1, b2 = m.geom_bodyid[g1], m.geom_bodyid[g2]
  dim = jnp.where(used, c.dim, 1)
  frame = c.frame.reshape(nc, 3, 3)
  fr = jnp.where(used[:, None], c.friction, 1.0)                 # unused slots: finite math
  pyramidal = m.opt.cone == PYRAMIDAL

  # the frame rows the largest condim uses (pyramidal: nr = 2 (condim - 1) rows; elliptic: nr)
  cmax = (nr // 2 + 1 if nr > 1 else 1) if pyramidal else nr
  rows6 = _contact_jac(m, d, c.pos, frame, b1, b2, cmax)                # (nc, cmax, nv)
  r = jnp.arange(nr)
  if pyramidal:
    # rows 2(k-1), 2(k-1)+1: J_normal +- friction[k-1] J_k, k = 1 .. dim-1
    k = jnp.minimum(r // 2 + 1, cmax - 1)
    sgn = jnp.where(r % 2 == 0, 1.0, -1.0).astype(dtype)
    edge = rows6[:, :1] + (sgn * fr[:, k - 1])[:, :, None] * rows6[:, k]
    jac = jnp.where((dim == 1)[:, None, None], rows6[:, :1], edge)
    nrow = jnp.where(dim == 1, 1, 2 * (dim - 1))
    ctype = jnp.where(dim == 1, CONTACT_FRICTIONLESS, CONTACT_PYRAMIDAL)
  else:
    jac = rows6[:, :nr]
    nrow = dim
    ctype = jnp.where(dim == 1, CONTACT_FRICTIONLESS, CONTACT_ELLIPTIC)
    first = (r == 0)[None, :]
    pos = jnp.where(first, c.dist[:, None], 0.0)
    margin = jnp.where(first, c.includemargin[:, None], 0.0)

  active = used & (c.exclude == 0)
  no_dofs = jnp.zeros((nc,), bool)
  if _sparse(m):
    moved = jnp.any(support.dof_moves(m, b1) | support.dof_moves(m, b2), axis=1)
    no_dofs = active & ~moved
    active = active & moved
  row_active = active[:, None] & (r[None, :] < nrow[:, None])

  # impedance per contact (its dist, margin and solimp are its rows'), cleaned solimp columns
  solimp = _clean_solimp(jnp.where(used[:, None], c.solimp, 0.5))   # unused slots: finite math
  power = _static_power(m, CONTACT_SOLIMP, bool(m.opt.enableflags & ENBL_OVERRIDE))
  imp, impp = impedance(solimp, c.dist, c.includemargin, power)
  # R: every row's follows from the first row's R_0 = (1 - imp) / imp diagApprox_0, the bodies'
  # qpos0 inverse weights (translation; a pyramidal frictional contact's first row adds
  # friction_0^2 times it), see _contact_regularizer
  iw = m.body_invweight0
  tran = iw[b1, 0] + iw[b2, 0]
  diag0 = tran * (1 + fr[:, 0] * fr[:, 0]) if pyramidal else tran
  diag0 = jnp.where(dim == 1, tran, diag0)
  reg, mu = _contact_regularizer(m, _regularizer(imp, diag0), fr, dim, nr)

  if pyramidal:
    # every row of a pyramidal contact has its contact's values: one table entry per contact
    tc, dr = _clean_solref(c.solref, m.opt.timestep, _refsafe(m))
    k, b = _stiffness_damping((tc, dr), solimp[1])
    table = _table(k, b, imp, impp, c.dist, c.includemargin, jnp.zeros_like(imp), reg, ctype,
                   jnp.arange(nc))
  else:
    # elliptic: the friction rows use solreffriction when it is non-zero (after its own
    # cleaning: a mixed-sign one becomes zero) and have K = 0; one table entry per row
    fric_row = (r[None, :] > 0) & (dim > 1)[:, None]
    tc, dr = _clean_solref(c.solref, m.opt.timestep, _refsafe(m))
    ftc, fdr = _clean_solref(c.solreffriction, m.opt.timestep, _refsafe(m), friction=True)
    own = ((ftc != 0) | (fdr != 0))[:, None] & fric_row
    tc = jnp.where(own, ftc[:, None], tc[:, None])
    dr = jnp.where(own, fdr[:, None], dr[:, None])
    k, b = _stiffness_damping((tc, dr), solimp[1][:, None])
    k = jnp.where(fric_row, 0.0, k)
    table = _table(k, b, jnp.broadcast_to(imp[:, None], (nc, nr)),
                   jnp.broadcast_to(impp[:, None], (nc, nr)), pos, margin,
                   jnp.zeros((nc, nr), dtype), reg, jnp.broadcast_to(ctype[:, None], (nc, nr)),
                   jnp.broadcast_to(jnp.arange(nc)[:, None], (nc, nr)))
    table = table.reshape(nc * nr, len(TABLE_COLUMNS))
  n = nc * nr
  return Part(jac.reshape(n, nv), row_active.reshape(n), table), mu, no_dofs


def _contact_regularizer(m, r0, fr, dim, nr: int):
  """The contacts' R from their first row's R_0 (nconmax,): frictionless R_0; frictional R_1 =
  R_0 / impratio, then elliptic R_j = R_1 friction_0^2 / friction_{j-1}^2 (j >= 2) (nconmax,
  nr), pyramidal 2 mu^2 R_0 on every row (nconmax,); and the cone's mu = friction_0 sqrt(R_1 /
  R_0) (nconmax,). fr: the contacts' friction (nconmax, 5); dim their condim (1 for unused
  slots)."""
  r1 = r0 / jnp.maximum(MINVAL, m.opt.impratio)
  mu = fr[:, 0] * jnp.sqrt(r1 / r0)
  frictional = dim > 1
  if m.opt.cone == PYRAMIDAL:
    return jnp.where(frictional, 2 * mu * mu * r0, r0), mu
  r = jnp.arange(nr)
  fj = fr[:, jnp.clip(r - 1, 0, 4)]
  later = r1[:, None] * fr[:, :1] * fr[:, :1] / (fj * fj)
  adjusted = jnp.where(r == 0, r0[:, None], jnp.where(r == 1, r1[:, None], later))
  return jnp.where(frictional[:, None], adjusted, r0[:, None]), mu


# ---------------------------------------------------------------------------------------------
# The stage

# the columns of a Part's table, in order: the float values, then the row's type and id (small
# integers, exact in the float dtype), so that compacting the rows is one gather of the table
TABLE_COLUMNS = ('K', 'B', 'imp', 'impp', 'efc_pos', 'efc_margin', 'efc_frictionloss', 'efc_R',
                 'efc_D', 'efc_diagApprox', 'efc_type', 'efc_id')
NFLOAT = 10   # the float columns


class Part(NamedTuple):
  """Candidate rows of a group after their impedance and regularizer (n rows; t table entries:
  one per row, or for pyramidal contacts one per contact, shared by its rows). Tables are
  row-major (an entry's values contiguous), so that compacting them gathers whole rows."""
  J: jax.Array             # (n, nv)
  active: jax.Array        # (n,) bool
  table: jax.Array         # (t, 12) TABLE_COLUMNS


def _table(k, b, imp, impp, pos, margin, frictionloss, reg, efc_type, efc_id):
  """A Part's table (..., 12) in TABLE_COLUMNS order, D = 1 / R and diagApprox = R imp /
  (1 - imp) from R; efc_type and efc_id as floats. Built by one stack: a concatenation along
  the short minor axis of tables built apart costs XLA:CPU about 10 ns an element."""
  dtype = k.dtype
  return jnp.stack([k, b, imp, impp, pos, margin, frictionloss, reg, 1 / reg,
                    reg * imp / (1 - imp), efc_type.astype(dtype), efc_id.astype(dtype)],
                   axis=-1)


def _finish(m, rows: Rows) -> Part:
  """Impedance, stiffness, damping and regularizer of the non-contact rows (each row its own
  table entry)."""
  ref = _clean_solref(rows.solref, m.opt.timestep, _refsafe(m))
  solimp = _clean_solimp(rows.solimp)
  imp, impp = impedance(solimp, rows.imp_pos, rows.imp_margin, _static_power(m, ROW_SOLIMP))
  k, b = _stiffness_damping(ref, solimp[1])
  k = jnp.where(rows.friction, 0.0, k)
  reg = _regularizer(imp, rows.diag)
  return Part(rows.J, rows.active,
              _table(k, b, imp, impp, rows.pos, rows.margin, rows.frictionloss, reg, rows.type,
                     rows.id))


def rows_needed(m, nconmax: int | None = None) -> int:
  """The most rows this Model can produce at once (static), with ``nconmax`` contact slots
  (None: m.nconmax)."""
  nconmax = m.nconmax if nconmax is None else nconmax
  return capacity(m.efc_rows, nconmax if m.ncandidate else 0, m.opt.disableflags, m.nv)


def _overflow(m, active, d):
  """MuJoCo's mjWARN_CNSTRFULL: when a world's active rows do not fit the capacity, it gets no
  constraint rows this step (MuJoCo's mj_makeConstraint sets nefc = 0 when the arena cannot
  hold the rows) and warning_counts[2] grows by 1. Returns (active, d)."""
  if rows_needed(m) <= m.nefc_max:
    return active, d                  # cannot overflow: skip the test
  full = jnp.sum(active, dtype=jnp.int32) > m.nefc_max
  counts = d.warning_counts.at[WARN_CNSTRFULL].add(full.astype(jnp.int32))
  return active & ~full, dataclasses.replace(d, warning_counts=counts)


# the bucket of a cut capacity n (row_buckets): CUT_BUCKET[0] / CUT_BUCKET[1] of n, about the
# most rows that fit_capacity's probe saw. The worlds whose rows fit the smallest bucket k0
# iterate in chunks that carry only k0 rows (see the module docstring), so the small buckets of
# a full capacity would leave every chunk of a fitted one on all rows: the humanoid fitted to
# 17 contacts and 53 rows has buckets of 8 and 16 rows by the full capacity's rule and uses 20-35.
# Measured (float32, 20-step rollouts at batch 1024 over both cores from a state after 150
# steps, the programs alternating in one process, 11 pairs, time ratio to the 8 and 16 buckets
# by the median pair / the fastest runs): one bucket of 40 rows 0.952 / 0.940, of 32 0.949 /
# 0.932, buckets of 8, 16 and 40 0.976 / 0.990; the ant fitted to 8 and 30 (bucket 8 by the
# full rule) with one of 24: 0.995 / 1.003, of 16: 1.024 / 1.004.
CUT_BUCKET = (2, 3)


def _up8(x: int) -> int:
  """x rounded up to a multiple of 8."""
  return -(-x // 8) * 8


def row_buckets(n: int, full: int | None = None) -> tuple:
  """The smaller row counts the solver's row work also runs at (mjx_py.solver's _on_rows),
  ascending, for the capacity ``n`` of a Model that can produce ``full`` rows at once
  (rows_needed; None: n).

  A capacity of every row the model can produce (put_model's default, n = full) is far above
  what its worlds use (the humanoid's 262 rows against 20-35): an eighth and a quarter of n,
  each rounded up to a multiple of 8 (so at least 8), keeping those at most half of n (none
  below 16 rows). A capacity cut below that (fit_capacity's, whose margin makes it 1.5 times
  the most rows its probe saw, or an njmax given) was sized to the use: one bucket of two
  thirds of n, rounded up to a multiple of 8, when that is below n (see CUT_BUCKET)."""
  if full is not None and n < full:
    k = _up8(-(-CUT_BUCKET[0] * n // CUT_BUCKET[1]))
    return (k,) if k < n else ()
  sizes = sorted({max(8, _up8(-(-n // q))) for q in (8, 4)})
  return tuple(k for k in sizes if 2 * k <= n)


def model_row_buckets(m) -> tuple:
  """row_buckets of the Model m's row capacity (m.nefc_max, of rows_needed(m) at once)."""
  return row_buckets(m.nefc_max, rows_needed(m))


def row_bucket(buckets: tuple, n: int) -> int:
  """The largest of the row ``buckets`` of the capacity ``n``, or ``n`` when there are none:
  the rows that efc_vel, efc_b and qfrc_constraint are summed over when the batch fits them
  (rows_product)."""
  return max(buckets, default=n)


def rows_product(J, v, nefc, k, transpose=False, full=None):
  """J v (N,), or J' v (nv,) with ``transpose``, for the efc Jacobian J (N, nv): over its first
  k rows (row_bucket) when no world of the batch uses more (a lax.cond on the whole batch, as
  the solver's row buckets), since the rows beyond nefc are zero and add nothing; ``full(J, v)``
  (None: a dot) is the product over every row, taken otherwise. The bucket's product is a
  multiply and a sum over J's leading rows, which XLA fuses with the slice: a dot cannot read
  the strided rows and needs a copy of them first (the humanoid's 72 of 262 rows at batch 512:
  one copy a solve, 1.2-1.6 ms of its profile's 28-30 ms).

  Differentiated, the product is linear in each of J and v: its tangent is full(dJ, v) +
  full(J, dv) over every row (a custom JVP), so that a gradient's backward pass has no
  conditional to transpose (the cond stays in the value's computation)."""
  n = J.shape[0]
  if full is None:
    def full(J, v):
      return J.T @ v if transpose else J @ v

  if k >= n:
    return full(J, v)

  @jax.custom_jvp
  def product(J, v, nefc):
    def small():
      Jk = J[:k]
      if transpose:
        return jnp.sum(Jk * v[:k, None], axis=0)
      return jnp.pad(jnp.sum(Jk * v[None, :], axis=1), (0, n - k))
    return lax.cond(batch_any(nefc > k), lambda: full(J, v), small)

  @product.defjvp
  @full_precision
  def _product_jvp(primals, tangents):
    J, v, nefc = primals
    dJ, dv, _ = tangents
    return product(J, v, nefc), full(dJ, v) + full(J, dv)

  return product(J, v, nefc)


def contact_bucket(m) -> int | None:
  """The contact slots make_constraint works on while no world of the batch has more contacts
  (static): a quarter of nconmax rounded up to a multiple of 4, at least 8, when that is at most
  half of nconmax; None (every slot, always) otherwise. See make_constraint."""
  quarter = -(-m.nconmax // 4)
  k = max(8, -(-quarter // 4) * 4)
  return k if 2 * k <= m.nconmax and m.ncandidate else None


def make_constraint(m, d):
  """Constraint rows, impedance and reference acceleration (mj_makeConstraint and
  mj_referenceConstraint); see the module docstring for what is read and written.

  A contact slot past ncon produces no row, so while no world of the batch uses more than
  contact_bucket(m) = k slots (a lax.cond on batch_any(ncon > k), unbatched under vmap, as the
  solver's row buckets), the rows are built from the first k slots only (the Model's nconmax
  cut to k, d.contact to its first k rows) and the contact fields written back to those
  slots; the rows are the same. Each per-contact array of the stage (Jacobians, frames,
  impedance, regularizers, the rows' tables and compaction) is then k / nconmax of its size:
  the ant's default buffer has 38 slots (k = 12) and uses 4 to 8.

  Differentiated (forward or reverse mode), the stage is the one over every slot, value and
  derivative (a custom JVP, _bucketed): the two give the same rows, and a gradient's program
  then holds one copy of the stage's derivative and no conditional to transpose, where a
  differentiated cond keeps both branches forward and backward."""
  if contact_bucket(m) is None:
    return _make_constraint(m, d)
  traced, model = math.split_traced(m)
  return _bucketed(model, traced, d)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _bucketed(model, traced, d):
  """make_constraint with the contact bucket (contact_bucket(m) is not None) for the Model
  model(traced) (math.split_traced)."""
  m = model(traced)
  k = contact_bucket(m)
  mk = dataclasses.replace(m, nconmax=k)
  names = {}

  def written(d, out):
    # the Data fields (and contact fields) the stage wrote: those not passed through unchanged;
    # only they leave the cond (a passed-through field would be copied out of it). The first
    # branch traced sets the list; the other writes the same fields (the same code).
    new = (tuple(f.name for f in dataclasses.fields(d) if f.name != 'contact'
                 and getattr(out, f.name) is not getattr(d, f.name)),
           tuple(f.name for f in dataclasses.fields(d.contact)
                 if getattr(out.contact, f.name) is not getattr(d.contact, f.name)))
    if 'data' not in names:
      names['data'], names['contact'] = new
    elif not (set(new[0]) <= set(names['data']) and set(new[1]) <= set(names['contact'])):
      raise AssertionError('make_constraint: the contact bucket wrote other fields')
    return ({f: getattr(out, f) for f in names['data']},
            {f: getattr(out.contact, f) for f in names['contact']})

  def every(d):
    return written(d, _make_constraint(m, d))

  def first(d):
    dk = dataclasses.replace(d, contact=jax.tree_util.tree_map(lambda x: x[:k], d.contact))
    fields, con = written(dk, _make_constraint(mk, dk))
    # the slots past k: as the full stage leaves an unused slot (efc_address -1, the rest kept)
    unused = dataclasses.replace(d.contact, efc_address=jnp.full_like(d.contact.efc_address, -1))
    return fields, {f: getattr(unused, f).at[:k].set(x) for f, x in con.items()}

  fields, con = lax.cond(batch_any(d.ncon > k), every, first, d)
  return dataclasses.replace(d, contact=dataclasses.replace(d.contact, **con), **fields)


@functools.partial(_bucketed.defjvp, symbolic_zeros=True)
def _bucketed_jvp(model, primals, tangents):
  # the stage over every slot, differentiated in the inputs that carry a derivative
  return math.jvp_live(lambda traced, d: _make_constraint(model(traced), d), primals, tangents)


def _make_constraint(m, d):
  """make_constraint over every contact slot of m.nconmax (d.contact's rows)."""
  flags = m.opt.disableflags
  cap = m.nefc_max
  zero = jnp.zeros((), jnp.int32)
  contact = dataclasses.replace(d.contact, efc_address=jnp.full_like(d.contact.efc_address, -1))
  parts, counts = [], {'ne': zero, 'nf': zero, 'nl': zero}
  con = None
  if not flags & DSBL_CONSTRAINT and m.nv and cap:
    if not flags & DSBL_EQUALITY and m.neq:
      parts.append(('ne', _equality(m, d)))
    if not flags & DSBL_FRICTIONLOSS:
      parts += [('nf', p) for p in _friction(m, d)]
    if not flags & DSBL_LIMIT:
      parts += [('nl', p) for p in _limit(m, d)]
    if not flags & DSBL_CONTACT and m.nconmax and m.ncandidate:
      con = _contact(m, d)
  if not parts and con is None:
    return project_constraint(m, reference_constraint(m, _write(m, d, None, cap, contact,
                                                                counts)))
  for name in counts:
    active = [p.active for key, p in parts if key == name]
    if active:
      counts[name] = jnp.sum(jnp.concatenate(active), dtype=jnp.int32)

  groups = []
  if parts:
    groups.append(_finish(m, Rows(*(jnp.concatenate(f) for f in zip(*(p for _, p in parts))))))
  con_start = groups[0].active.shape[0] if parts else 0
  if con is not None:
    con_part, mu, no_dofs = con
    groups.append(con_part)
  active, d = _overflow(m, jnp.concatenate([g.active for g in groups]), d)
  if con is not None:
    # per contact: its first row's place after compaction, the cone's mu, exclude = 3 when it
    # moves no dof (sparse mode)
    nc, nr = m.nconmax, m.efc_rows[3]
    dest = math.cumsum_int(active) - 1
    first = con_start + nr * jnp.arange(nc)
    has_rows = active[first]
    contact = dataclasses.replace(
        contact, efc_address=jnp.where(has_rows, dest[first], -1).astype(jnp.int32),
        mu=jnp.where(has_rows & (contact.dim > 1), mu, contact.mu),
        exclude=jnp.where(no_dofs, 3, contact.exclude).astype(jnp.int32))
  d = reference_constraint(m, _write(m, d, (groups, active, con_start), cap, contact, counts))
  return project_constraint(m, d)


def _write(m, d, rows, cap, contact, counts):
  """Compacts the active candidate rows, in order, into the efc buffers (rows: (the Parts,
  their rows' active (n,), the first contact row), or None when the model has none)."""
  if rows is None:
    dtype = d.qpos.dtype
    fields = {'efc_J': jnp.zeros((cap, m.nv), dtype), 'efc_KBIP': jnp.zeros((cap, 4), dtype),
              'efc_type': jnp.full((cap,), EFC_UNUSED, jnp.int32),
              'efc_id': jnp.full((cap,), EFC_UNUSED, jnp.int32)}
    for name in TABLE_COLUMNS[4:NFLOAT]:
      fields[name] = jnp.zeros((cap,), dtype)
    return dataclasses.replace(d, contact=contact, nefc=jnp.zeros((), jnp.int32), **counts,
                               **fields)
  groups, active, con_start = rows
  n = active.shape[0]
  # the active rows' indices in order, then n (the fill row) for the unused buffer rows. At
  # most n rows can be active: a buffer larger than the candidate rows (the contact bucket's
  # first k slots in a buffer sized for nconmax) gathers its first n rows and pads the rest
  size = min(cap, n)
  sel = math.nonzero_first(active, size, n)
  # each row's table entry: the non-contact rows' own; a contact row's, its row or (pyramidal
  # tables, one entry per contact) its contact's; the fill entry (zeros, EFC_UNUSED) last
  entries = sum(g.table.shape[0] for g in groups)
  src = sel
  if groups[-1].table.shape[0] != groups[-1].active.shape[0]:
    # (a truncating division of a clamped difference: floor division's sign corrections
    # are not needed, and both where branches are computed)
    nr = m.efc_rows[3]
    src = jnp.where(sel < con_start, sel, con_start + lax.div(jnp.maximum(sel - con_start, 0),
                                                              jnp.int32(nr)))
  src = jnp.where(sel >= n, entries, src)
  # the barrier keeps the index arithmetic out of the gathers (fused, it runs once per element
  # gathered) where XLA honours it through fusion (GPU); XLA:CPU drops barriers before fusing,
  # so there src's few integer operations run per element, from nonzero_first's output (a
  # scatter, which ends the chain: the prefix sums are not recomputed)
  sel, src = lax.optimization_barrier((sel, src))
  # two row gathers (each table padded by its fill row, which fuses into the gather): the
  # Jacobian rows and the table entries (row-major tables' gathers copy contiguous rows, where
  # a column-major one's, along its minor axis, cost 2 ns an element on XLA:CPU; humanoid
  # make_constraint at batch 1024 25.7 -> 19.5 ms)
  dtype = groups[0].table.dtype
  jac = jnp.concatenate([g.J for g in groups] + [jnp.zeros((1, m.nv), groups[0].J.dtype)])
  fill = jnp.array([[0.0] * NFLOAT + [EFC_UNUSED] * 2], dtype)
  table = jnp.concatenate([g.table for g in groups] + [fill])[src]
  ints = table[:, NFLOAT:].astype(jnp.int32)
  fields = {'efc_type': ints[:, 0], 'efc_id': ints[:, 1], 'efc_J': jac[sel],
            'efc_KBIP': table[:, :4]}
  for k, name in enumerate(TABLE_COLUMNS[4:NFLOAT]):
    fields[name] = table[:, 4 + k]
  if size < cap:
    # the buffer rows no candidate can reach: the fill row's values (0, EFC_UNUSED ids)
    # (a buffer of fill values updated in place: a pad fused with the gather ran 1.6 times the
    # full-size gather's time on XLA:CPU)
    fields = {name: jnp.full((cap,) + x.shape[1:], EFC_UNUSED if name in ('efc_type', 'efc_id')
                             else 0, x.dtype).at[:size].set(x)
              for name, x in fields.items()}
  nefc = jnp.sum(active, dtype=jnp.int32)
  return dataclasses.replace(d, contact=contact, nefc=nefc, **counts, **fields)


# the most dofs for which J v is written as nv broadcast products summed (math.matvec_small)
# rather than a dot: under vmap on CPU a batched dot of (nefc, nv) by (nv,) runs one small
# matrix kernel per world, where the products fuse into one loop across the batch with the use
# of the result. make_constraint alone, one device, 8 alternating runs in one process (min):
# the ant (nv 14) at batch 512 2.79 -> 2.45 us a world, the humanoid (nv 27) at 256 6.2 ->
# 7.1 us (slower: kept as a dot)
SMALL_NV = 16


def _jv(m, J, v):
  """J v for constraint rows J (n, nv) and v (nv,) -> (n,) (see SMALL_NV)."""
  return math.matvec_small(J, v) if m.nv <= SMALL_NV else J @ v


def reference_constraint(m, d):
  """efc_vel = efc_J qvel and efc_aref = -B vel - K imp (pos - margin) (mj_referenceConstraint).

  reads  efc_J (nefc_max, nv), efc_KBIP (nefc_max, 4), efc_pos, efc_margin (nefc_max,), qvel,
         nefc
  writes efc_vel, efc_aref (nefc_max,); unused rows stay 0

  J qvel runs over the first row_bucket rows when every world of the batch fits them
  (rows_product; the rows past nefc are zero), as the solver's efc_b. Measured (float32,
  20-step rollouts at batch 1024 over both cores from a state after 150 steps, alternating in
  one process, time ratio to J qvel over every row by the median pair / the fastest runs): the
  ant at put_model's 168 rows (its bucket 48) 0.988 / 0.982, the humanoid at 262 (bucket 72)
  1.011 / 0.997.
  """
  bucket = row_bucket(model_row_buckets(m), m.nefc_max)
  vel = rows_product(d.efc_J, d.qvel, d.nefc, bucket, full=lambda J, v: _jv(m, J, v))
  k, b, imp = d.efc_KBIP[:, 0], d.efc_KBIP[:, 1], d.efc_KBIP[:, 2]
  aref = -b * vel - k * imp * (d.efc_pos - d.efc_margin)
  return dataclasses.replace(d, efc_vel=vel, efc_aref=aref)


def project_constraint(m, d):
  """efc_AR = J M^-1 J' + diag(R), the dual solvers' matrix (mj_projectConstraint), for models
  with a dual solver (data.dual_rows); unused rows and columns are 0 (their J and R are 0)."""
  if not dual_rows(m):
    return d
  minv_jt = inertia.solve_m(m, d, d.efc_J.T)                    # (nv, nefc_max)
  return dataclasses.replace(d, efc_AR=d.efc_J @ minv_jt + jnp.diag(d.efc_R))


__all__ = ['make_constraint', 'reference_constraint', 'project_constraint', 'row_tables',
           'row_buckets', 'model_row_buckets', 'row_bucket', 'rows_product', 'CUT_BUCKET',
           'capacity', 'rows_needed', 'impedance']
