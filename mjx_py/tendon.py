"""Position stage, part 3: tendon lengths, Jacobians and paths (mj_tendon), tendon armature.

tendon(m, d)
  reads  qpos (nq,), site_xpos (nsite,3), geom_xpos (ngeom,3), geom_xmat (ngeom,9),
         cdof (nv,6), subtree_com (nbody,3)
  writes ten_length (ntendon,), ten_J (ntendon,nv) dense, ten_wrapadr (ntendon,) int32,
         ten_wrapnum (ntendon,) int32, wrap_xpos (2*nwrap,3), wrap_obj (2*nwrap,) int32
tendon_armature(m, d)  (after inertia.crb, MuJoCo's mj_tendonArmature)
  reads  ten_J (ntendon,nv), qM (nv,nv)
  writes qM (nv,nv): qM += sum_t armature_t J_t^T J_t, kept only on the tree sparsity pattern
         of qM (entries (i, j) where dof j is dof i or one of its ancestors, and the mirror)

Fixed tendons: length = sum coef * qpos[joint], Jacobian row = coef at the joint's dof.

Spatial tendons are a path of sites, optionally wrapping around a sphere or cylinder geom
between two sites, with pulleys that start a new branch whose length is divided by the pulley's
divisor. The path is fixed by the model, so it is cut on the host into *segments*
(site -> [geom] -> site, with the divisor of the branch it lies in) and into the *slots* of the
points MuJoCo writes to wrap_xpos; at run time every segment is evaluated at once (vmap) and the
results are summed per tendon. Tables (int32 Model leaves built by ``path_indices``):

  wrap_tendonid  (nwrap,)    tendon of each wrap object
  tendon_seg     (nseg, 5)   per segment: tendon, wrap index of the first site, of the geom
                             (-1: straight segment), of the second site, of the governing pulley
                             (-1: divisor 1)
  tendon_wrapseg (nwseg,)    the segments that have a geom (only those run the wrap geometry)
  tendon_slot    (nslot, 3)  per potential path point, in MuJoCo's order: tendon, segment
                             (-1 for a pulley), kind (PULLEY, FIRST, TANGENT0, TANGENT1, LAST)

A segment that wraps contributes its first site and two tangent points; one that does not
contributes its first site only (TANGENT slots are dropped, which is why the points' addresses
in wrap_xpos depend on the state). The last site of each branch ends it. wrap_xpos/wrap_obj
entries past the last point of the last tendon are zero (MuJoCo leaves them stale).

Wrapping (mju_wrap) is computed in the geom frame, in a 2D plane: the plane through the
centre and both sites for a sphere, the xy plane for a cylinder (whose height is then
interpolated along the unrolled path). The wrapped path leaves the first site along a tangent
to the circle, follows the arc, and reaches the second site along the other tangent; of the
two turning directions, the one closer to the side site (or the shorter one) is used. A side
site inside the circle forces the path through a single contact point on the inside.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from . import math, support

# mjtWrap
WRAP_NONE, WRAP_JOINT, WRAP_PULLEY, WRAP_SITE, WRAP_SPHERE, WRAP_CYLINDER = 0, 1, 2, 3, 4, 5
# kinds of path points (tendon_slot[:, 2])
PULLEY, FIRST, TANGENT0, TANGENT1, LAST = 0, 1, 2, 3, 4

MINVAL = math.MINVAL
_NEWTON_ITERS = 20        # wrap_inside: MuJoCo's maxiter
_NEWTON_TOL = 1e-6        # wrap_inside: MuJoCo's tolerance
_NEWTON_ZINIT = 1 - 1e-7  # wrap_inside: MuJoCo's initial point


# ---------------------------------------------------------------------------------------------
# Host side: the path tables.

def path_indices(arrays: dict) -> dict:
  """Host-side (numpy) path tables of the tendons (see module docstring), from the compiler's
  arrays. Mirrors the loop of MuJoCo's mj_tendon over each tendon's wrap objects."""
  adrs = np.asarray(arrays['tendon_adr'], np.int64).reshape(-1)
  nums = np.asarray(arrays['tendon_num'], np.int64).reshape(-1)
  wtype = np.asarray(arrays['wrap_type'], np.int64).reshape(-1)
  nwrap = wtype.size
  wrap_tendon = np.zeros(nwrap, np.int32)
  segs, slots = [], []
  for t, (adr, num) in enumerate(zip(adrs, nums, strict=True)):
    wrap_tendon[adr:adr + num] = t
    if num == 0 or wtype[adr] == WRAP_JOINT:
      continue
    pulley, j = -1, 0
    while j < num - 1:
      t0, t1 = wtype[adr + j], wtype[adr + j + 1]
      if WRAP_PULLEY in (t0, t1):
        if t0 == WRAP_PULLEY:
          pulley = adr + j
          slots.append((t, -1, PULLEY))
        j += 1
        continue
      geom = adr + j + 1 if t1 in (WRAP_SPHERE, WRAP_CYLINDER) else -1
      site1 = adr + j + (2 if geom >= 0 else 1)
      seg = len(segs)
      segs.append((t, adr + j, geom, site1, pulley))
      slots.append((t, seg, FIRST))
      if geom >= 0:
        slots += [(t, seg, TANGENT0), (t, seg, TANGENT1)]
      j += 2 if geom >= 0 else 1
      if j == num - 1 or wtype[adr + j + 1] == WRAP_PULLEY:
        slots.append((t, seg, LAST))
  segs = np.asarray(segs, np.int32).reshape(-1, 5)
  return {'wrap_tendonid': wrap_tendon, 'tendon_seg': segs,
          'tendon_wrapseg': np.nonzero(segs[:, 2] >= 0)[0].astype(np.int32),
          'tendon_slot': np.asarray(slots, np.int32).reshape(-1, 3)}


# ---------------------------------------------------------------------------------------------
# NaN-safe scalar helpers (MuJoCo's conventions for degenerate input).

def _sqrt0(x):
  """sqrt(max(x, 0)) with a finite gradient everywhere (0 at x <= 0)."""
  pos = x > 0
  return jnp.where(pos, jnp.sqrt(jnp.where(pos, x, 1.0)), 0.0)


def _unit(v):
  """v / |v|, or the first basis vector below MINVAL (mju_normalize / mju_normalize3)."""
  n = math.safe_norm(v)
  small = n < MINVAL
  e0 = jnp.zeros_like(v).at[0].set(1.0)
  return jnp.where(small, e0, v / jnp.where(small, 1.0, n))


def _acos(x):
  """acos(clip(x, -1, 1)); the gradient is finite at +-1 (taken from the equivalent atan2 form,
  the value stays acos's, as in MuJoCo)."""
  x = jnp.clip(x, -1.0, 1.0)
  smooth = jnp.arctan2(_sqrt0(1.0 - x * x), x)
  return smooth + jax.lax.stop_gradient(jnp.arccos(x) - smooth)


def _cross2(a, b):
  return a[0] * b[1] - a[1] * b[0]


# ---------------------------------------------------------------------------------------------
# 2D wrapping around the circle of radius ``rad`` centred at the origin (engine_util_misc.c).
# Every function is evaluated whether its result is used or not; inputs for which a branch does
# not apply are replaced by a harmless stand-in so that neither values nor gradients turn NaN.

_DUMMY_D = (2.0, 0.0, 0.0, 2.0)  # two points well outside the unit circle, 90 degrees apart


def _segments_intersect(p1, p2, p3, p4):
  """Whether 2D segments p1-p2 and p3-p4 intersect (near-parallel ones never do)."""
  det = (p4[1] - p3[1]) * (p2[0] - p1[0]) - (p4[0] - p3[0]) * (p2[1] - p1[1])
  ok = jnp.abs(det) >= MINVAL
  det = jnp.where(ok, det, 1.0)
  a = ((p4[0] - p3[0]) * (p1[1] - p3[1]) - (p4[1] - p3[1]) * (p1[0] - p3[0])) / det
  b = ((p2[0] - p1[0]) * (p1[1] - p3[1]) - (p2[1] - p1[1]) * (p1[0] - p3[0])) / det
  return ok & (a >= 0) & (a <= 1) & (b >= 0) & (b <= 1)


def _arc_length(t0, t1, ind, rad):
  """Length of the arc from tangent point t0 to t1; ``ind`` (the chosen solution) sets the
  turning direction, so the arc may be the long way round."""
  angle = _acos(jnp.dot(_unit(t0), _unit(t1)))
  cross = t0[1] * t1[0] - t0[0] * t1[1]
  flip = ((cross > 0) & ind) | ((cross < 0) & ~ind)
  return rad * jnp.where(flip, 2 * jnp.pi - angle, angle)


def _wrap_circle(d, sd, has_side, rad):
  """Outside wrap of the 2D segment d[0:2]-d[2:4]; ``sd`` the side point on the circle.

  Returns (length of the arc, or -1 for a straight segment; tangent points (4,)).
  """
  p0, p1 = d[:2], d[2:]
  sqrad = rad * rad
  dif = p1 - p0
  dd = jnp.dot(dif, dif)
  early = ((jnp.dot(p0, p0) < sqrad) | (jnp.dot(p1, p1) < sqrad) | (rad < MINVAL)
           | (dd < MINVAL))
  # stand-in input where the computation below does not apply
  d = jnp.where(early, jnp.asarray(_DUMMY_D, d.dtype), d)
  rad = jnp.where(early, 1.0, rad)
  p0, p1 = d[:2], d[2:]
  sqrad = rad * rad
  sq0, sq1 = jnp.dot(p0, p0), jnp.dot(p1, p1)
  dif = p1 - p0
  dd = jnp.dot(dif, dif)
  # the segment misses the circle (or passes on the far side of the side point): straight
  a = jnp.clip(-jnp.dot(dif, p0) / dd, 0.0, 1.0)
  near = a * dif + p0
  straight = (jnp.dot(near, near) > sqrad) & (~has_side | (jnp.dot(sd, near) >= 0))
  # tangent points from each site, for both turning directions (sgn = +1, -1)
  r0, r1 = _sqrt0(sq0 - sqrad), _sqrt0(sq1 - sqrad)
  sols, goods = [], []
  for sgn in (1.0, -1.0):
    t0 = jnp.stack([p0[0] * sqrad + sgn * rad * p0[1] * r0,
                    p0[1] * sqrad - sgn * rad * p0[0] * r0]) / sq0
    t1 = jnp.stack([p1[0] * sqrad - sgn * rad * p1[1] * r1,
                    p1[1] * sqrad + sgn * rad * p1[0] * r1]) / sq1
    # goodness: close to the side point, else the shorter chord; crossing paths are penalised
    good = jnp.where(has_side, jnp.dot(_unit(t0 + t1), sd), -jnp.dot(t0 - t1, t0 - t1))
    good = jnp.where(_segments_intersect(p0, t0, p1, t1), -10000.0, good)
    sols.append(jnp.concatenate([t0, t1]))
    goods.append(good)
  second = ~(goods[0] > goods[1])
  pnt = jnp.where(second, sols[1], sols[0])
  crossing = _segments_intersect(p0, pnt[:2], p1, pnt[2:])
  wlen = _arc_length(pnt[:2], pnt[2:], second, rad)
  return jnp.where(early | straight | crossing, -1.0, wlen), pnt


def _asin(x):
  return jnp.arcsin(jnp.clip(x, -1.0, 1.0))


def _inside_fun(z, a, b, g):
  """The inside-wrap equation asin(a z) + asin(b z) - 2 asin(z) + g."""
  return _asin(a * z) + _asin(b * z) - 2 * _asin(z) + g


def _inside_dfun(z, a, b):
  """Its derivative in z, each 1 / sqrt(1 - x^2) capped at 1 / MINVAL as in MuJoCo."""
  def inv_sqrt(x):
    return 1.0 / jnp.maximum(MINVAL, _sqrt0(1 - x * x))
  return a * inv_sqrt(z * a) + b * inv_sqrt(z * b) - 2 * inv_sqrt(z)


def _inside_newton(a, b, g):
  """MuJoCo's Newton iteration for the inside wrap from z = 1 - 1e-7: at most 20 steps, each
  frozen once |F| <= 1e-6 or failed. Returns (z, converged); not converged (any sanity check
  failed, or all 20 steps used) means MuJoCo's fallback point."""
  def step(carry, _):
    z, f, iters, failed = carry
    running = ~failed & (jnp.abs(f) > _NEWTON_TOL)
    df = _inside_dfun(z, a, b)
    bad_df = df > -MINVAL
    z1 = z - f / jnp.where(bad_df, -1.0, df)
    in_range = jnp.abs(z1) <= 1   # never feed asin outside [-1, 1]
    f1 = _inside_fun(jnp.where(running & in_range, z1, z), a, b, g)
    bad = bad_df | (z1 > z) | (f1 > _NEWTON_TOL) | ~in_range
    ok = running & ~bad
    return (jnp.where(ok, z1, z), jnp.where(ok, f1, f), iters + running.astype(jnp.int32),
            failed | (running & bad)), None

  z0 = jnp.asarray(_NEWTON_ZINIT, g.dtype)
  f0 = _inside_fun(z0, a, b, g)
  (z, _, iters, failed), _ = jax.lax.scan(step, (z0, f0, jnp.int32(0), f0 > 0), None,
                                          length=_NEWTON_ITERS)
  return z, ~failed & (iters < _NEWTON_ITERS)


def _wrap_inside(d, rad):
  """Inside wrap (side site inside the circle): the path touches the circle from the inside at
  one point. Solves asin(A z) + asin(B z) - 2 asin(z) + G = 0 by MuJoCo's Newton iteration
  (values as MuJoCo's; gradients by implicit differentiation at the solution).

  Returns (0, or -1 for no wrap; the contact point twice (4,)).
  """
  p0, p1 = d[:2], d[2:]
  len0, len1 = math.safe_norm(p0), math.safe_norm(p1)
  dif = p1 - p0
  dd = jnp.dot(dif, dif)
  a = -jnp.dot(dif, p0) / jnp.where(dd > MINVAL, dd, 1.0)
  hits = (dd > MINVAL) & (a > 0) & (a < 1) & (math.safe_norm(p0 + a * dif) <= rad)
  fail = ((len0 <= rad) | (len1 <= rad) | (rad < MINVAL) | (len0 < MINVAL) | (len1 < MINVAL)
          | hits)
  # fallback for numerical failure: the direction of the midpoint
  fallback = _unit(0.5 * (p0 + p1)) * rad

  d = jnp.where(fail, jnp.asarray(_DUMMY_D, d.dtype), d)
  rad = jnp.where(fail, 1.0, rad)
  p0, p1 = d[:2], d[2:]
  len0, len1 = math.safe_norm(p0), math.safe_norm(p1)
  dif = p1 - p0
  big_a, big_b = rad / len0, rad / len1
  cos_g = (len0 * len0 + len1 * len1 - jnp.dot(dif, dif)) / (2 * len0 * len1)
  fail = fail | (cos_g < -1 + MINVAL)
  use_fallback = cos_g > 1 - MINVAL
  g = _acos(jnp.clip(cos_g, -1 + MINVAL, 1 - MINVAL))

  # MuJoCo's Newton iterates carry no gradient; the root's gradient comes from the implicit
  # function theorem (dz = -dF / F'(z)), added as a term whose value is exactly zero
  z, converged = _inside_newton(*jax.lax.stop_gradient((big_a, big_b, g)))
  fz = _inside_fun(z, big_a, big_b, g)
  dfz = _inside_dfun(z, *jax.lax.stop_gradient((big_a, big_b)))
  z = z - (fz - jax.lax.stop_gradient(fz)) / jnp.where(dfz < -MINVAL, dfz, -1.0)
  use_fallback = use_fallback | ~converged
  # rotate the direction of one site by the solved angle
  first = _cross2(p0, p1) > 0
  vec = _unit(jnp.where(first, p0, p1))
  ang = _asin(z) - _asin(jnp.where(first, big_a, big_b) * z)
  c, s = jnp.cos(ang), jnp.sin(ang)
  pnt = rad * jnp.stack([c * vec[0] - s * vec[1], s * vec[0] + c * vec[1]])
  pnt = jnp.where(use_fallback, fallback, pnt)
  return jnp.where(fail, -1.0, 0.0), jnp.concatenate([pnt, pnt])


def wrap(x0, x1, gpos, gmat, radius, is_sphere, side, has_side):
  """Wraps the segment x0-x1 (world (3,)) around a sphere or cylinder (mju_wrap).

  gpos (3,), gmat (3, 3): the geom frame; radius: geom_size[0]; side (3,): side site position,
  used where ``has_side``. Returns (wrapped length, or -1 for a straight segment; tangent points
  (2, 3) in world coordinates, meaningful only when the length is >= 0).
  """
  p0, p1 = gmat.T @ (x0 - gpos), gmat.T @ (x1 - gpos)
  too_close = (math.safe_norm(p0) < MINVAL) | (math.safe_norm(p1) < MINVAL)

  # 2D frame: sphere -> first axis towards p0, in the plane of (centre, p0, p1); if p0 and p1
  # are parallel, any plane containing them (normal built from the largest component of p0)
  ax0 = _unit(p0)
  normal = jnp.cross(p0, p1)
  parallel = math.safe_norm(normal) < MINVAL
  mag = jnp.abs(ax0)
  imax = jnp.where((mag[1] > mag[0]) & (mag[1] > mag[2]), 1,
                   jnp.where((mag[2] > mag[0]) & (mag[2] > mag[1]), 2, 0))
  other = jnp.where(jnp.arange(3) == imax, 0.0, 1.0).astype(p0.dtype)
  normal = _unit(jnp.where(parallel, jnp.cross(ax0, other), normal))
  ax1 = _unit(jnp.cross(normal, ax0))
  eye = jnp.eye(3, dtype=p0.dtype)
  ax0 = jnp.where(is_sphere, ax0, eye[0])   # cylinder: the geom's xy plane
  ax1 = jnp.where(is_sphere, ax1, eye[1])
  d = jnp.stack([p0 @ ax0, p0 @ ax1, p1 @ ax0, p1 @ ax1])

  # side point: projected like the sites, moved onto the circle, or (0, 0) when inside it
  s = gmat.T @ (side - gpos)
  sd = jnp.stack([s @ ax0, s @ ax1])
  sd = jnp.where(math.safe_norm(sd) >= radius, _unit(sd) * radius, 0.0)
  inside = has_side & (sd[0] == 0) & (sd[1] == 0)

  wlen_in, pnt_in = _wrap_inside(d, radius)
  wlen_out, pnt_out = _wrap_circle(d, sd, has_side, radius)
  wlen = jnp.where(inside, wlen_in, wlen_out)
  pnt = jnp.where(inside, pnt_in, pnt_out)
  res = jnp.stack([ax0 * pnt[0] + ax1 * pnt[1], ax0 * pnt[2] + ax1 * pnt[3]])

  # cylinder: heights interpolated along the unrolled path (straight, arc, straight), and the
  # arc becomes a helix
  len0 = math.safe_norm(p0[:2] - res[0, :2])
  len1 = math.safe_norm(p1[:2] - res[1, :2])
  total = len0 + wlen + len1
  total = jnp.where(jnp.abs(total) > MINVAL, total, 1.0)
  z0 = p0[2] + (p1[2] - p0[2]) * len0 / total
  z1 = p0[2] + (p1[2] - p0[2]) * (len0 + wlen) / total
  helix = math.safe_norm(jnp.stack([wlen, z1 - z0]))
  res = jnp.where(is_sphere, res, res.at[:, 2].set(jnp.stack([z0, z1])))
  wlen = jnp.where(is_sphere | (wlen < 0), wlen, helix)
  wlen = jnp.where(too_close, -1.0, wlen)
  return wlen, res @ gmat.T + gpos


# ---------------------------------------------------------------------------------------------
# Tendons.

def _fixed(m, d):
  """Fixed tendons: (lengths (ntendon,), Jacobians (ntendon, nv)); zero rows for spatial ones."""
  dtype = d.qpos.dtype
  length = jnp.zeros(m.ntendon, dtype)
  jac = jnp.zeros((m.ntendon, m.nv), dtype)
  if not m.nwrap or not m.njnt:
    return length, jac
  is_joint = m.wrap_type == WRAP_JOINT
  jnt = jnp.where(is_joint, m.wrap_objid, 0).clip(0, m.njnt - 1)
  coef = jnp.where(is_joint, m.wrap_prm, 0.0)
  # sums over each tendon's wraps as products with (ntendon, nwrap) and (nwrap, nv) 0/1
  # matches (XLA:CPU runs a scatter-add as a loop over its entries)
  onto = jax.nn.one_hot(m.wrap_tendonid, m.ntendon, dtype=dtype).T
  dof = jax.nn.one_hot(m.jnt_dofadr[jnt], m.nv, dtype=dtype)
  hi = jax.lax.Precision.HIGHEST
  length = jnp.dot(onto, coef * d.qpos[m.jnt_qposadr[jnt]], precision=hi)
  jac = jnp.dot(onto, coef[:, None] * dof, precision=hi)
  return length, jac


def _piece_jac(m, d, pa, ba, pb, bb):
  """d|pb - pa|/dqvel (nv,) of a straight piece between points on bodies ba and bb (zero when
  both points are on the same body, as in MuJoCo)."""
  jac_a, _ = support.jac(m, d, pa, ba)
  jac_b, _ = support.jac(m, d, pb, bb)
  row = (jac_b - jac_a).T @ _unit(pb - pa)
  return jnp.where(ba != bb, row, 0.0)


def _segment_wrap(m, d, seg):
  """Wrapping of one segment site -> geom -> site: (wrapped length, or -1 for a straight
  segment; tangent points (2, 3))."""
  w0, wg, w1 = seg[1], seg[2], seg[3]
  geom = m.wrap_objid[wg]
  side = jnp.round(m.wrap_prm[wg]).astype(jnp.int32)   # side site id, -1: none
  return wrap(d.site_xpos[m.wrap_objid[w0]], d.site_xpos[m.wrap_objid[w1]], d.geom_xpos[geom],
              d.geom_xmat[geom].reshape(3, 3), m.geom_size[geom, 0],
              m.wrap_type[wg] == WRAP_SPHERE, d.site_xpos[jnp.maximum(side, 0)], side >= 0)


def _segment(m, d, seg, wlen, tang):
  """Length () and Jacobian row (nv,) of one segment, both divided by its branch's divisor.

  wlen, tang: the segment's wrap (wlen < 0: straight, also for segments without a geom).
  Straight: x0 -> x1. Wrapped: x0 -> tangent 0, the arc (fixed to the geom's body, so no
  Jacobian term), tangent 1 -> x1.
  """
  w0, wg, w1, wp = seg[1], seg[2], seg[3], seg[4]
  s0, s1 = m.wrap_objid[w0], m.wrap_objid[w1]
  x0, x1 = d.site_xpos[s0], d.site_xpos[s1]
  b0, b1 = m.site_bodyid[s0], m.site_bodyid[s1]
  divisor = jnp.where(wp >= 0, m.wrap_prm[jnp.maximum(wp, 0)], 1.0)
  wrapped = wlen >= 0
  bg = b0
  if m.ngeom:
    geom = m.wrap_objid[jnp.maximum(wg, 0)]
    bg = m.geom_bodyid[geom]
    # The wrapped path is the shortest path over the geom (an inside wrap: a stationary one),
    # so by the envelope theorem the length's derivative is that of the path with its tangent
    # points held fixed on the geom: they move with the geom's frame, and the arc (or helix)
    # between them is constant. Differentiating the tangent-point construction instead fails at
    # the onset of a wrap, where the arc is zero and its angle sits on acos's singularity. The
    # values are unchanged; ten_J below is built the same way (MuJoCo's moment arms).
    sg = jax.lax.stop_gradient
    gpos, gmat = d.geom_xpos[geom], d.geom_xmat[geom].reshape(3, 3)
    tang = gpos + sg((tang - gpos) @ gmat) @ gmat.T
    wlen = sg(wlen)
  first_end = jnp.where(wrapped, tang[0], x1)
  first_body = jnp.where(wrapped, bg, b1)
  length = (math.safe_norm(first_end - x0)
            + jnp.where(wrapped, wlen + math.safe_norm(x1 - tang[1]), 0.0))
  row = _piece_jac(m, d, x0, b0, first_end, first_body)
  row = row + jnp.where(wrapped, _piece_jac(m, d, tang[1], bg, x1, b1), 0.0)
  return length / divisor, row / divisor


def _path_points(m, d, wrapped, tang):
  """wrap_xpos (2*nwrap, 3), wrap_obj (2*nwrap,), ten_wrapadr, ten_wrapnum (ntendon,) from
  the per-segment results, compacting the slots in MuJoCo's order."""
  dtype = d.qpos.dtype
  nout = 2 * m.nwrap
  slot_t, slot_seg, kind = m.tendon_slot[:, 0], m.tendon_slot[:, 1], m.tendon_slot[:, 2]
  seg = jnp.maximum(slot_seg, 0)
  w0, wg, w1 = m.tendon_seg[seg, 1], m.tendon_seg[seg, 2], m.tendon_seg[seg, 3]
  seg_wrapped = wrapped[seg]
  valid = ((kind != TANGENT0) & (kind != TANGENT1)) | seg_wrapped
  xfirst = d.site_xpos[m.wrap_objid[w0]]
  xlast = d.site_xpos[m.wrap_objid[w1]]
  k = kind[:, None]
  point = jnp.select([k == PULLEY, k == FIRST, k == TANGENT0, k == TANGENT1],
                     [jnp.zeros_like(xfirst), xfirst, tang[seg, 0], tang[seg, 1]], xlast)
  geom = m.wrap_objid[jnp.maximum(wg, 0)]
  obj = jnp.select([kind == PULLEY, (kind == TANGENT0) | (kind == TANGENT1)], [-2, geom], -1)
  # compact: address of each kept point
  adr = math.cumsum_int(valid) - 1
  adr = jnp.where(valid, adr, nout)  # dropped slots scatter out of range
  wrap_xpos = jnp.zeros((nout, 3), dtype).at[adr].set(point, mode='drop')
  wrap_obj = jnp.zeros(nout, jnp.int32).at[adr].set(obj.astype(jnp.int32), mode='drop')
  wrapnum = jnp.zeros(m.ntendon, jnp.int32).at[slot_t].add(valid.astype(jnp.int32))
  wrapadr = math.cumsum_int(wrapnum) - wrapnum
  return wrap_xpos, wrap_obj, wrapadr.astype(jnp.int32), wrapnum


def tendon(m, d):
  """Tendon lengths, dense Jacobians and path points (MuJoCo's mj_tendon)."""
  if not m.ntendon:
    return d
  length, jac = _fixed(m, d)
  dtype = d.qpos.dtype
  nseg = m.tendon_seg.shape[0]
  if nseg:
    # wrap geometry only for the segments that have a geom (static subset)
    wlen = -jnp.ones(nseg, dtype)
    tang = jnp.zeros((nseg, 2, 3), dtype)
    if m.tendon_wrapseg.shape[0]:
      wseg = m.tendon_seg[m.tendon_wrapseg]
      wl, tg = jax.vmap(lambda s: _segment_wrap(m, d, s))(wseg)
      wlen, tang = wlen.at[m.tendon_wrapseg].set(wl), tang.at[m.tendon_wrapseg].set(tg)
    seg_len, seg_row = jax.vmap(lambda s, w, t: _segment(m, d, s, w, t))(m.tendon_seg, wlen,
                                                                          tang)
    length = length.at[m.tendon_seg[:, 0]].add(seg_len)
    jac = jac.at[m.tendon_seg[:, 0]].add(seg_row)
    wrap_xpos, wrap_obj, wrapadr, wrapnum = _path_points(m, d, wlen >= 0, tang)
  else:
    wrap_xpos = jnp.zeros((2 * m.nwrap, 3), dtype)
    wrap_obj = jnp.zeros(2 * m.nwrap, jnp.int32)
    wrapadr = wrapnum = jnp.zeros(m.ntendon, jnp.int32)
  return dataclasses.replace(d, ten_length=length, ten_J=jac, ten_wrapadr=wrapadr,
                             ten_wrapnum=wrapnum, wrap_xpos=wrap_xpos, wrap_obj=wrap_obj)


def tendon_armature(m, d):
  """Adds the tendon armature to qM (MuJoCo's mj_tendonArmature, after mj_crb).

  MuJoCo accumulates armature * J[i] * J[j] only for dof j equal to dof i or one of its
  ancestors (the entries its sparse qM stores), so couplings between dofs on different
  branches of the tree are dropped; the dense qM here keeps the same pattern.
  """
  if not m.ntendon or not m.nv:
    return d
  armature = math.concrete(m.tendon_armature)
  if armature is not None and not np.any(armature):
    return d  # a closed-over Model without tendon armature: nothing to add
  full = (d.ten_J.T * m.tendon_armature) @ d.ten_J
  lower = jnp.where(m.dof_ancestor > 0, full, 0.0)
  return dataclasses.replace(d, qM=d.qM + lower + lower.T - jnp.diag(jnp.diag(lower)))
