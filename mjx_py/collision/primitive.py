"""Narrowphase for MuJoCo's primitive geom pairs (engine_collision_primitive.c / _box.c, 3.3.3).

Every routine collides ONE pair of geoms and has the signature

  fn(pos1 (3,), mat1 (3, 3), size1 (3,), pos2 (3,), mat2 (3, 3), size2 (3,), margin ()) -> Contacts

where ``pos``/``mat`` are the geoms' world position and rotation (``geom_xpos`` and ``geom_xmat``
reshaped to 3x3: column k is the geom's local axis k), ``size`` is ``geom_size`` and ``margin`` the
pair's detection margin (MuJoCo passes max(geom_margin) or ``pair_margin``). Geom 1 has the lower
geom type (plane 0 < sphere 2 < capsule 3 < cylinder 5 < box 6), as in MuJoCo's dispatch table.

``Contacts`` holds ``n`` slots, ``n`` being the most contacts MuJoCo's routine can produce for the
pair type (the second entry of ``ROUTINES``):
  dist  (n,)       signed distance (negative: penetration), exactly as MuJoCo reports it
  pos   (n, 3)     contact position (MuJoCo's convention: midway between the surfaces)
  normal (n, 3)    contact normal, from geom 1 to geom 2
  tangent (n, 3)   the routine's tangent hint (zero: none)
  valid (n,) bool  which slots MuJoCo would emit; the others hold finite values of no meaning.
and ``Contacts.frame`` (n, 3, 3) forms the frames from normal and hint: rows the unit normal,
then the two tangents, completed the way mj_collideGeoms does (mju_makeFrame). The collision
driver forms them only for the contacts it keeps.

Routines are written for one pair (callers vmap), contain no jax.jit and no model-dependent
Python loops, and branch with ``jnp.where`` so every branch stays finite: gradients of dist and
pos are finite (never NaN) at touching, grazing and coincident configurations.

Where MuJoCo 3.3.3 has quirks they are reproduced on purpose, because the reference is the C
engine, not the geometry: e.g. the box-box face path reports half the penetration depth, and its
edge path reuses a variable (the 2x2 determinant is overwritten by a squared distance after the
first accepted face corner). These are noted where they occur.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..math import MINVAL, cumsum_int, safe_norm

PLANE, HFIELD, SPHERE, CAPSULE, ELLIPSOID, CYLINDER, BOX, MESH = range(8)
_SQRT3 = float(np.sqrt(3.0))


class Contacts(NamedTuple):
  """Fixed-size contact slots of one geom pair (see the module docstring).

  The contact frame is kept as its inputs, the normal and make_frame's tangent hint (zero:
  none), and formed on demand (``frame``): the collision driver forms it only for the contacts
  it keeps (nconmax), not for every slot of every pair tested (185 slots for the humanoid's
  54; the frames of all slots were 3-4 ms of a humanoid step at batch 1024 on CPU)."""
  dist: jax.Array     # (..., n)
  pos: jax.Array      # (..., n, 3)
  normal: jax.Array   # (..., n, 3) contact normal (frame row 0 before normalization)
  tangent: jax.Array  # (..., n, 3) make_frame's tangent hint
  valid: jax.Array    # (..., n) bool

  @property
  def frame(self):
    """(..., n, 3, 3) contact frames (make_frame of normal and tangent)."""
    return frames(self.normal, self.tangent)


# ---------------------------------------------------------------------------------------------
# Small helpers

def _unit(i, dtype):
  """The i-th standard basis vector (3,)."""
  return jnp.zeros(3, dtype).at[i].set(1)


def _normalize(v, fallback=None):
  """(v / |v|, |v|), with ``fallback`` (default x-axis, as mju_normalize3) when |v| < MINVAL.

  The norm and the division are double-where guarded, so the gradient is finite at v = 0.
  """
  n = safe_norm(v)
  ok = n >= MINVAL
  if fallback is None:
    fallback = _unit(0, v.dtype)
  return jnp.where(ok, v / jnp.where(ok, n, 1.0), fallback), n


def _sqrt(x):
  """sqrt(max(x, 0)) with a finite gradient at 0."""
  pos = x > 0
  return jnp.where(pos, jnp.sqrt(jnp.where(pos, x, 1.0)), 0.0)


def _recip(x):
  """1 / x, with 0 for |x| < MINVAL (used only where MuJoCo never divides by such x, or where
  the quotient is discarded; keeps values and gradients finite in the unused branches)."""
  ok = jnp.abs(x) >= MINVAL
  return jnp.where(ok, 1.0 / jnp.where(ok, x, 1.0), 0.0)


def _div_or(num, den, fill):
  """num / den where |num / den| <= 1e6, else ``fill``. The callers (capsule : box) compare the
  quotient, a segment parameter, only against values in [-2, 2], and ``fill`` is chosen to fail
  those comparisons as a huge quotient (or MuJoCo's inf / nan at den = 0) does, so the decisions
  are MuJoCo's. Cutting huge quotients off also keeps the derivative -num / den**2 finite: a
  near-zero den (an axis component of 1e-30) would otherwise overflow it and turn the zero
  cotangent of the discarded branch into NaN."""
  ok = (den != 0) & (jnp.abs(num) <= 1e6 * jnp.abs(den))
  return jnp.where(ok, num / jnp.where(ok, den, 1.0), fill)


def _first(valid, n):
  """Indices (n,) of the first n True entries of ``valid`` in order (then the False ones), and
  their validity (n,): MuJoCo's "append while there is room" for a fixed candidate order."""
  # each entry's place in the stable order (True entries first): a rank, then the entry of
  # each of the first n ranks picked by a one-hot sum. The candidate lists are short (2 to a
  # few hundred), and this is a few fused elementwise passes where a sort is a slow kernel
  # per world (6 ms of a humanoid step at batch 1024, on CPU)
  before = cumsum_int(valid) - valid
  nvalid = jnp.sum(valid, dtype=jnp.int32)
  i = jnp.arange(valid.shape[0], dtype=jnp.int32)
  rank = jnp.where(valid, before, nvalid + i - before)
  hit = rank[None, :] == jnp.arange(n, dtype=jnp.int32)[:, None]
  idx = jnp.sum(jnp.where(hit, i[None, :], 0), axis=1)
  return idx, valid[idx]


def make_frame(normal, tangent):
  """Contact frame (3, 3) from a normal and a tangent hint, as mju_makeFrame.

  Row 0 is the normalized normal. Row 1 is the hint made orthogonal to it; a hint shorter than
  0.5 (routines leave it zero) is replaced by (0, 1, 0), or (0, 0, 1) when |normal_y| >= 0.5.
  Row 2 is row 0 x row 1.
  """
  dt = normal.dtype
  x, _ = _normalize(normal)
  default = jnp.where(jnp.abs(x[1]) < 0.5, _unit(1, dt), _unit(2, dt))
  y = jnp.where(safe_norm(tangent) < 0.5, default, tangent)
  y, _ = _normalize(y - jnp.dot(x, y) * x)
  return jnp.stack([x, y, jnp.cross(x, y)])


def frames(normal, tangent):
  """make_frame over any leading axes: normal, tangent (..., 3) -> (..., 3, 3)."""
  lead = normal.shape[:-1]
  out = jax.vmap(make_frame)(normal.reshape(-1, 3), tangent.reshape(-1, 3))
  return out.reshape(lead + (3, 3))


def _contacts(dist, pos, normal, valid, tangent=None):
  """Packs per-slot arrays (n,), (n, 3), (n, 3), (n,) into Contacts (the frames are formed
  later, see Contacts)."""
  normal = jnp.broadcast_to(normal, pos.shape)
  tangent = jnp.zeros_like(normal) if tangent is None else jnp.broadcast_to(tangent, pos.shape)
  return Contacts(dist, pos, normal, tangent, valid)


# ---------------------------------------------------------------------------------------------
# Shared cores (MuJoCo's mjraw_* helpers), one contact each

def _plane_sphere(ppos, normal, spos, radius, margin):
  """Plane (point ``ppos``, unit ``normal``) against a sphere: (dist, pos, valid).

  The contact sits halfway between the sphere's lowest point and the plane.
  """
  cdist = jnp.dot(spos - ppos, normal)
  dist = cdist - radius
  pos = spos + normal * (-dist / 2 - radius)
  return dist, pos, cdist <= margin + radius


def _sphere_sphere(pos1, z1, r1, pos2, z2, r2, margin):
  """Sphere against sphere: (dist, pos, normal, valid).

  The normal points from centre 1 to centre 2; for coincident centres MuJoCo uses the cross
  product of the two geoms' z axes (z1, z2), and the x axis when those are parallel.
  """
  dif = pos2 - pos1
  cdist = safe_norm(dif)
  dist = cdist - r1 - r2
  degenerate, _ = _normalize(jnp.cross(z1, z2))
  normal, _ = _normalize(dif, degenerate)
  pos = pos1 + normal * (r1 + dist / 2)
  return dist, pos, normal, _spheres_touch(dif, r1, r2, margin)


def _spheres_touch(dif, r1, r2, margin):
  """Whether two spheres whose centres are ``dif`` apart are within ``margin`` of touching (the
  squared centre distance against the squared sum)."""
  min_dist = margin + r1 + r2
  return jnp.dot(dif, dif) <= min_dist * min_dist


def _sphere_box(spos, radius, bpos, bmat, bsize, margin):
  """Sphere against box (mjraw_SphereBox): (dist, pos, normal, valid).

  Outside the box the nearest box point is the sphere centre clamped to the box; inside, the
  nearest face (first of -x, +x, -y, +y, -z, +z on ties) gives the normal and depth.
  """
  center = bmat.T @ (spos - bpos)                 # sphere centre in the box frame
  clamped = jnp.clip(center, -bsize, bsize)
  direction, dist = _normalize(clamped - center)  # from the centre towards the box
  inside = dist <= MINVAL
  # centre inside: distance of the centre to each face, nearest face wins
  face = jnp.abs(jnp.stack([-bsize, bsize], axis=1).reshape(6) - jnp.repeat(center, 2))
  k = jnp.argmin(face)
  closest = face[k]
  nearest = jnp.zeros(3, bsize.dtype).at[k // 2].set(jnp.where(k % 2 == 1, -1.0, 1.0))
  pos_in = center + nearest * ((radius - closest) / 2)
  # centre outside: midpoint of the clamped point and the sphere's deepest point
  deepest = center + direction * radius
  pos_out = clamped * 0.5 + deepest * 0.5
  local_pos = jnp.where(inside, pos_in, pos_out)
  normal = bmat @ jnp.where(inside, nearest, direction)
  d = jnp.where(inside, -closest, dist) - radius
  return d, bmat @ local_pos + bpos, normal, dist - radius <= margin


# ---------------------------------------------------------------------------------------------
# Plane pairs (geom 1 is the plane; its normal is its z axis)

def plane_sphere(pos1, mat1, size1, pos2, mat2, size2, margin):
  """Plane : sphere, 1 contact."""
  normal = mat1[:, 2]
  dist, pos, valid = _plane_sphere(pos1, normal, pos2, size2[0], margin)
  return _contacts(dist[None], pos[None], normal[None], valid[None])


def plane_capsule(pos1, mat1, size1, pos2, mat2, size2, margin):
  """Plane : capsule, 2 contacts: the two end spheres; the capsule axis is the tangent hint."""
  normal, axis = mat1[:, 2], mat2[:, 2]
  ends = pos2 + jnp.stack([1.0, -1.0]).astype(pos2.dtype)[:, None] * (axis * size2[1])
  dist, pos, valid = jax.vmap(_plane_sphere, (None, None, 0, None, None))(
      pos1, normal, ends, size2[0], margin)
  n2 = jnp.broadcast_to(normal, (2, 3))
  return _contacts(dist, pos, n2, valid, jnp.broadcast_to(axis, (2, 3)))


def plane_cylinder(pos1, mat1, size1, pos2, mat2, size2, margin):
  """Plane : cylinder, up to 4 contacts (mjc_PlaneCylinder).

  1: the rim point nearest the plane on the cap nearest the plane; 2: the same rim point on the
  other cap; 3, 4: two more points of the nearest cap's rim, 120 degrees either side of point 1
  (an inscribed triangle). Nothing is reported unless point 1 is within the margin.
  """
  normal = mat1[:, 2]
  axis = mat2[:, 2]
  radius, half = size2[0], size2[1]
  # make the axis point towards the plane
  prjaxis = jnp.dot(normal, axis)
  flip = prjaxis > 0
  axis = jnp.where(flip, -axis, axis)
  prjaxis = jnp.where(flip, -prjaxis, prjaxis)
  dist0 = jnp.dot(pos2 - pos1, normal)            # height of the centre above the plane
  # radial direction towards the plane: -normal without its axial component
  vec = axis * prjaxis - normal
  len_sqr = jnp.dot(vec, vec)
  general = len_sqr >= MINVAL * MINVAL
  vec = jnp.where(general, vec * (radius / _sqrt(jnp.where(general, len_sqr, 1.0))),
                  mat2[:, 0] * radius)            # disk parallel to the plane: use the x axis
  prjvec = jnp.dot(vec, normal)
  axis = axis * half
  prjaxis = prjaxis * half

  d1 = dist0 + prjaxis + prjvec
  d2 = dist0 - prjaxis + prjvec
  d3 = dist0 + prjaxis - prjvec * 0.5
  valid1 = d1 <= margin
  side, _ = _normalize(jnp.cross(vec, axis))
  side = side * (radius * _SQRT3 / 2)
  pos1_ = pos2 + vec + axis - normal * (d1 * 0.5)
  pos2_ = pos2 + vec - axis - normal * (d2 * 0.5)
  tri = pos2 + axis - vec * 0.5 - normal * (d3 * 0.5)
  dist = jnp.stack([d1, d2, d3, d3])
  pos = jnp.stack([pos1_, pos2_, tri + side, tri - side])
  valid = jnp.stack([valid1, valid1 & (d2 <= margin), valid1 & (d3 <= margin),
                     valid1 & (d3 <= margin)])
  return _contacts(dist, pos, jnp.broadcast_to(normal, (4, 3)), valid)


# box corner sign patterns in MuJoCo's order: bit 0 -> x, bit 1 -> y, bit 2 -> z
_CORNERS = np.array([[1 if i & (1 << k) else -1 for k in range(3)] for i in range(8)], float)


def plane_box(pos1, mat1, size1, pos2, mat2, size2, margin):
  """Plane : box, up to 4 contacts: the first 4 corners (MuJoCo's order) that are on the
  plane side of the box centre and within the margin."""
  normal = mat1[:, 2]
  dist0 = jnp.dot(pos2 - pos1, normal)
  corners = (jnp.asarray(_CORNERS, size2.dtype) * size2) @ mat2.T   # (8, 3) relative, world
  ldist = corners @ normal
  ok = (dist0 + ldist <= margin) & (ldist <= 0)
  dist = dist0 + ldist
  pos = corners + pos2 + normal * (-dist / 2)[:, None]
  idx, valid = _first(ok, 4)
  return _contacts(dist[idx], pos[idx], jnp.broadcast_to(normal, (4, 3)), valid)


# ---------------------------------------------------------------------------------------------
# Sphere and capsule pairs

def sphere_sphere(pos1, mat1, size1, pos2, mat2, size2, margin):
  """Sphere : sphere, 1 contact."""
  dist, pos, normal, valid = _sphere_sphere(pos1, mat1[:, 2], size1[0], pos2, mat2[:, 2],
                                            size2[0], margin)
  return _contacts(dist[None], pos[None], normal[None], valid[None])


def sphere_capsule(pos1, mat1, size1, pos2, mat2, size2, margin):
  """Sphere : capsule, 1 contact: the sphere against the nearest point of the capsule segment."""
  axis = mat2[:, 2]
  x = jnp.clip(jnp.dot(axis, pos1 - pos2), -size2[1], size2[1])
  dist, pos, normal, valid = _sphere_sphere(pos1, mat1[:, 2], size1[0], pos2 + axis * x,
                                            axis, size2[0], margin)
  return _contacts(dist[None], pos[None], normal[None], valid[None])


def sphere_cylinder(pos1, mat1, size1, pos2, mat2, size2, margin):
  """Sphere : cylinder, 1 contact (mjc_SphereCylinder).

  The sphere centre's axial coordinate x and radial offset decide the feature: the side
  (sphere against the axis point), a cap (sphere against the cap plane) or the rim (sphere
  against the nearest rim point). A centre inside the cylinder uses the shallower of side/cap.
  """
  radius, height = size2[0], size2[1]
  axis = mat2[:, 2]
  z1 = mat1[:, 2]
  vec = pos1 - pos2
  x = jnp.dot(axis, vec)
  a_proj = axis * x
  p_proj = vec - a_proj
  p_proj_sqr = jnp.dot(p_proj, p_proj)
  p_len = _sqrt(p_proj_sqr)
  side = jnp.abs(x) < height
  cap = p_proj_sqr < radius * radius
  deep = side & cap
  cap_shallower = (height - jnp.abs(x)) < (radius - p_len)
  side = side & ~(deep & cap_shallower)
  cap = cap & ~(deep & ~cap_shallower)
  top = x > 0
  sgn = jnp.where(top, 1.0, -1.0)

  # side: sphere against the sphere of the cylinder's radius on the axis
  ds, ps, ns, vs = _sphere_sphere(pos1, z1, size1[0], pos2 + a_proj, axis, radius, margin)
  # cap: plane (cap centre, outward axis) against the sphere; normal flipped to point from
  # the sphere (geom 1) to the cylinder
  cap_normal = axis * sgn
  dc, pc, vc = _plane_sphere(pos2 + cap_normal * height, cap_normal, pos1, size1[0], margin)
  # rim: sphere against the nearest rim point (a sphere of radius 0)
  rim = pos2 + axis * (sgn * height) + p_proj * (radius * _recip(p_len))
  dr, pr, nr, vr = _sphere_sphere(pos1, z1, size1[0], rim, axis, 0.0 * radius, margin)

  dist = jnp.where(side, ds, jnp.where(cap, dc, dr))
  pos = jnp.where(side, ps, jnp.where(cap, pc, pr))
  normal = jnp.where(side, ns, jnp.where(cap, -cap_normal, nr))
  valid = jnp.where(side, vs, jnp.where(cap, vc, vr))
  return _contacts(dist[None], pos[None], normal[None], valid[None])


def sphere_box(pos1, mat1, size1, pos2, mat2, size2, margin):
  """Sphere : box, 1 contact."""
  dist, pos, normal, valid = _sphere_box(pos1, size1[0], pos2, mat2, size2, margin)
  return _contacts(dist[None], pos[None], normal[None], valid[None])


def capsule_capsule(pos1, mat1, size1, pos2, mat2, size2, margin):
  """Capsule : capsule, up to 2 contacts (mjc_CapsuleCapsule).

  Non-parallel axes: one contact between the nearest points of the two segments. Parallel
  axes (|det| < MINVAL): the first two hits among four sphere tests (each end of segment 1
  against segment 2, then each end of segment 2 against segment 1).
  """
  a1 = mat1[:, 2] * size1[1]
  a2 = mat2[:, 2] * size2[1]
  dif = pos1 - pos2
  ma = jnp.dot(a1, a1)
  mb = -jnp.dot(a1, a2)
  mc = jnp.dot(a2, a2)
  u = -jnp.dot(a1, dif)
  v = jnp.dot(a2, dif)
  det = ma * mc - mb * mb
  general = jnp.abs(det) >= MINVAL
  ima, imc = _recip(ma), _recip(mc)

  # general configuration: segment parameters x1, x2 in [-1, 1], clipped one after the other
  idet = _recip(det)
  x1 = (mc * u - mb * v) * idet
  x2 = (ma * v - mb * u) * idet
  x2 = jnp.where(x1 > 1, (v - mb) * imc, jnp.where(x1 < -1, (v + mb) * imc, x2))
  x1 = jnp.clip(x1, -1, 1)
  x1 = jnp.where(x2 > 1, jnp.clip((u - mb) * ima, -1, 1),
                 jnp.where(x2 < -1, jnp.clip((u + mb) * ima, -1, 1), x1))
  x2 = jnp.clip(x2, -1, 1)

  # parallel axes: four end-point candidates, in MuJoCo's order
  one = jnp.ones((), a1.dtype)
  s1 = jnp.stack([one, -one, jnp.clip((u - mb) * ima, -1, 1), jnp.clip((u + mb) * ima, -1, 1)])
  s2 = jnp.stack([jnp.clip((v - mb) * imc, -1, 1), jnp.clip((v + mb) * imc, -1, 1), one, -one])
  p1 = pos1 + jnp.concatenate([x1[None], s1])[:, None] * a1     # (5, 3): general + 4
  p2 = pos2 + jnp.concatenate([x2[None], s2])[:, None] * a2
  # which candidates touch (_sphere_sphere's test: centre distance within the radii and the
  # margin), then the sphere test's contact for the two kept ones only: the general point and
  # (unused) the first parallel one, or the first two parallel hits
  ok = jax.vmap(_spheres_touch, (0, None, None, None))(p2 - p1, size1[0], size2[0], margin)
  pidx, pvalid = _first(ok[1:], 2)
  pidx = pidx + 1
  sel = jnp.where(general, jnp.array([0, 1]), pidx)
  valid = jnp.where(general, jnp.stack([ok[0], False]), pvalid)
  dist, pos, normal, _ = jax.vmap(_sphere_sphere, (0, None, None, 0, None, None, None))(
      p1[sel], mat1[:, 2], size1[0], p2[sel], mat2[:, 2], size2[0], margin)
  return _contacts(dist, pos, normal, valid)


# ---------------------------------------------------------------------------------------------
# Capsule : box (mjraw_CapsuleBox)

def _bit(x, k):
  """Bit k of int32 array x, as bool."""
  return (jnp.right_shift(x, k) & 1) == 1


# the 12 box edges in MuJoCo's order (edge axis j, then corner index i with bit j clear): axis,
# corner index, centre sign pattern (0 along the edge), one-hot of the axis
_EDGES = [(j, i) for j in range(3) for i in range(8) if not i & (1 << j)]
_EDGE_AXIS = np.array([j for j, _ in _EDGES]).astype(np.int32)
_EDGE_CORNER = np.array([i for _, i in _EDGES]).astype(np.int32)
_EDGE_SIGN = np.array([[0.0 if k == j else _CORNERS[i, k] for k in range(3)] for j, i in _EDGES])
_EDGE_ONEHOT = np.eye(3)[_EDGE_AXIS]
_EDGE_ROWS = np.arange(12).astype(np.int32)


def capsule_box(pos1, mat1, size1, pos2, mat2, size2, margin):
  """Capsule : box, up to 2 contacts (mjraw_CapsuleBox).

  Works in the box frame. First the capsule segment point nearest the box is found among:
  each segment end against the box (when it lies outside at most one slab), and the segment
  against each of the 12 box edges (clamped line-line distance). That point, as a sphere of
  the capsule's radius, gives contact 1 (sphere : box). A second sphere is placed further along
  the segment when the capsule lies along a face or an edge (MuJoCo's corner / edge / face
  heuristics, reproduced branch for branch), giving contact 2.
  """
  dt = pos1.dtype
  radius, hl = size1[0], size1[1]
  s = size2
  pos = mat2.T @ (pos1 - pos2)        # capsule centre in the box frame
  axis = mat2.T @ mat1[:, 2]          # capsule axis in the box frame
  halfaxis = axis * hl
  axisdir = jnp.sum(jnp.where(halfaxis > 0, jnp.array([1, 2, 4]), 0))

  bestdistmax = margin + 2 * (radius + hl + s[0] + s[1] + s[2])
  best = bestdistmax
  bsp = jnp.zeros((), dt)             # best segment position in [-1, 1]
  bbp = jnp.zeros((), dt)             # best box-edge position in [-1, 1]
  cltype = jnp.int32(-4)              # -3/-1: segment end vs face; 0..8: edge (clamp code)
  clface = jnp.int32(-1)
  clcorner = jnp.int32(0)
  cledge = jnp.int32(0)

  # segment ends against the box (only if outside at most one pair of faces)
  for i in (-1, 1):
    pt = pos + halfaxis * i
    out = (pt < -s) | (pt > s)
    cnt = jnp.sum(out)
    last = jnp.max(jnp.where(out, jnp.arange(3), -1))
    d = jnp.sum((jnp.clip(pt, -s, s) - pt) ** 2)
    upd = (cnt <= 1) & (d < best)
    best = jnp.where(upd, d, best)
    bsp = jnp.where(upd, float(i), bsp)
    cltype = jnp.where(upd, -2 + i, cltype)
    clface = jnp.where(upd, last, clface)

  # segment against each box edge (edge axis j through the centre of 4 parallel edges), all 12
  # at once: edge parameter x1 and segment parameter x2 in [-1, 1], clamped one after the other
  ej = jnp.asarray(_EDGE_AXIS)
  sj = s[ej]
  corner = jnp.asarray(_EDGE_SIGN, dt) * s             # (12, 3) edge centres
  dif = corner - pos
  mc = size1[1] * size1[1]
  ma = sj * sj
  mb = -sj * halfaxis[ej]
  u = -sj * dif[_EDGE_ROWS, ej]
  v = dif @ halfaxis
  det = ma * mc - mb * mb
  idet, ima, imc = _recip(det), _recip(ma), _recip(mc)
  x1 = (mc * u - mb * v) * idet
  x2 = (ma * v - mb * u) * idet
  hi1, lo1 = x1 > 1, x1 < -1
  c1 = jnp.where(hi1, 2, jnp.where(lo1, 0, 1))
  x2 = jnp.where(hi1, (v - mb) * imc, jnp.where(lo1, (v + mb) * imc, x2))
  x1 = jnp.clip(x1, -1, 1)
  hi2, lo2 = x2 > 1, x2 < -1
  x1b = jnp.where(hi2, (u - mb) * ima, (u + mb) * ima)
  # MuJoCo keeps the earlier clamp code of x1 unless x1 is clamped again here
  c1b = jnp.where(x1b > 1, 2, jnp.where(x1b < -1, 0, c1))
  x1 = jnp.where(hi2 | lo2, jnp.clip(x1b, -1, 1), x1)
  c1 = jnp.where(hi2 | lo2, c1b, c1)
  c2 = jnp.where(hi2, 2, jnp.where(lo2, 0, 1))
  x2 = jnp.clip(x2, -1, 1)
  dd = dif - x2[:, None] * halfaxis + jnp.asarray(_EDGE_ONEHOT, dt) * (sj * x1)[:, None]
  d = jnp.sum(dd * dd, axis=1)
  code = c1 * 3 + c2
  okdet = jnp.abs(det) >= MINVAL
  # MuJoCo scans the edges in order and takes one only if it is closer by more than MINVAL
  sel = jnp.int32(-1)
  for e in range(12):
    upd = okdet[e] & (d[e] < best - MINVAL)
    best = jnp.where(upd, d[e], best)
    sel = jnp.where(upd, e, sel)
  edge = sel >= 0
  sel = jnp.maximum(sel, 0)
  bsp = jnp.where(edge, x2[sel], bsp)
  bbp = jnp.where(edge, x1[sel], bbp)
  clcorner = jnp.where(edge, jnp.asarray(_EDGE_CORNER)[sel] +
                       jnp.left_shift(1, ej[sel]) * (code[sel] // 6), clcorner)
  cledge = jnp.where(edge, ej[sel], cledge)
  cltype = jnp.where(edge, code[sel], cltype)

  # Second sphere: an offset ``second`` (in segment parameter) from the first point, chosen by
  # MuJoCo's heuristics on sign patterns: axisdir (signs of the capsule axis in the box frame)
  # XOR the nearest corner's pattern says which box axes the capsule runs towards / away from.
  absha = jnp.abs(halfaxis)
  inf = jnp.asarray(jnp.inf, dt)
  reach = _div_or(2 * s, absha, inf)  # segment-parameter span crossing the box along each axis

  # A: nearest box feature is a corner (an edge end). No second point if the capsule points
  # straight at or away from the corner (pattern 0 or 7); otherwise one axis ``ax`` differs:
  # if the capsule runs mostly along it, go along that edge, else across the face, in both
  # cases no further than the segment end or the far side of the box
  cA = jnp.bitwise_xor(axisdir, clcorner)
  flip = (cA == 3) | (cA == 5) | (cA == 6)
  mulA = jnp.where(flip, -1.0, 1.0)
  cA = jnp.where(flip, 7 - cA, cA)
  de = jnp.where(flip, 1 + bsp, 1 - bsp)
  dp = jnp.where(flip, 1 - bsp, 1 + bsp)
  ax = jnp.where(cA == 1, 0, jnp.where(cA == 2, 1, 2))
  spA = jnp.where(axis[ax] * axis[ax] > 0.5,
                  jnp.minimum(de, reach[ax]) * mulA,
                  jnp.minimum(jnp.minimum(dp, reach[(ax + 1) % 3]), reach[(ax + 2) % 3]) * -mulA)
  doA = (cltype >= 0) & (cltype // 3 != 1) & (cA != 0) & (cA != 7)

  # B: nearest box feature is the middle of an edge. A capsule crossing the edge in a T gets no
  # second point; one lying across it (X) walks along the segment over the face it is flatter
  # to, stopping at the segment end, the far side of that face, or the end of the edge
  cB = jnp.bitwise_and(jnp.bitwise_xor(axisdir, clcorner), 7 - jnp.left_shift(1, cledge))
  bx1 = (cledge + 1) % 3
  bx2 = (cledge + 2) % 3
  bx1 = jnp.where(jnp.abs(axis[bx1]) > jnp.abs(axis[bx2]), bx2, bx1)
  bx2 = 3 - cledge - bx1
  bit = _bit(cB, bx2)
  spB = jnp.minimum(jnp.where(bit, 1 - bsp, 1 + bsp), reach[bx2])
  e2 = jnp.where(_bit(axisdir, cledge) == bit, 1 - bbp, 1 + bbp)
  spB = jnp.minimum(spB, _div_or(s[cledge] * e2, absha[cledge], inf))
  spB = spB * jnp.where(bit, 1.0, -1.0)
  doB = (cltype >= 0) & (cltype // 3 == 1) & ((cB == 1) | (cB == 2) | (cB == 4))

  # C: nearest is a segment end against a face (none if that end is inside the box): walk from
  # that end along the segment until it leaves one of the other two slabs (at most the other end)
  mulC = jnp.where(cltype == -3, 1.0, -1.0)
  end = pos - halfaxis * mulC
  spC = jnp.asarray(2.0, dt)
  for i in range(3):
    for bound in (s[i], -s[i]):
      # (MuJoCo divides by a zero component too; the inf / nan never passes the test)
      e = _div_or(bound - end[i], halfaxis[i], 0.0) * mulC
      ok = (i != clface) & (halfaxis[i] != 0) & (e > 0) & (e < spC)
      spC = jnp.where(ok, e, spC)
  spC = spC * mulC
  doC = (cltype < 0) & (cltype != -4) & (clface != -1)

  second = jnp.where(doA, spA, jnp.where(doB, spB, jnp.where(doC, spC, -4.0)))
  has2 = second > -3
  ts = jnp.stack([bsp, jnp.where(has2, second + bsp, bsp)])
  centers = (pos + ts[:, None] * halfaxis) @ mat2.T + pos2          # (2, 3) world
  dist, cpos, normal, ok = jax.vmap(_sphere_box, (0, None, None, None, None, None))(
      centers, radius, pos2, mat2, s, margin)
  found = cltype != -4
  valid = jnp.stack([ok[0] & found, ok[1] & found & has2])
  return _contacts(dist, cpos, normal, valid)


# ---------------------------------------------------------------------------------------------
# Box : box (mjc_BoxBox: the raw routine, then the 3.3.3 filters)

# face f (axis f % 3, negative side when f >= 3) -> signed permutation P with P's last row the
# face's outward normal: row k of P is _FSIGN[f, k] * e_{_FPERM[f, k]} (MuJoCo's "rotmore")
_FPERM = np.array([[2, 1, 0], [0, 2, 1], [0, 1, 2], [2, 1, 0], [0, 2, 1], [0, 1, 2]], np.int32)
_FSIGN = np.array([[-1, 1, 1], [1, -1, 1], [1, 1, 1], [1, 1, -1], [1, 1, -1], [-1, 1, -1]], float)
# the two axes other than k, in MuJoCo's (edge-edge) order
_OTHER = np.array([[1, 2], [0, 2], [1, 0]], np.int32)
_OTHER_ASC = np.array([[1, 2], [0, 2], [0, 1]]).astype(np.int32)   # ascending
# edge-edge separating axes in MuJoCo's order: box 1 axis i, box 2 axis j
_SAT_I = np.repeat(np.arange(3), 3).astype(np.int32)
_SAT_J = np.tile(np.arange(3), 3).astype(np.int32)
_SAT_ROWS = np.arange(9).astype(np.int32)
# rect corner signs (i // 2 -> x, i % 2 -> y), i = 0..3
_RECT = np.array([[-1, -1], [-1, 1], [1, -1], [1, 1]], float)
NBOXBOX = 24     # candidate points of each path
NBOXBOXCON = 9   # contact slots (see box_box)


# crossing candidates of 4 segments with the rectangle's lines, in MuJoCo's order: segment,
# then the crossed coordinate q (x = +-lx or y = +-ly), then the side j
_XSEG = np.repeat(np.arange(4), 4).astype(np.int32)
_XQ = np.tile(np.repeat(np.arange(2), 2), 4).astype(np.int32)
_XJ = np.tile(np.array([-1.0, 1.0]), 8)


def _segment_rect(starts, dirs, ok_line, half):
  """Crossings of 4 segments (start + t dir, t in [0,1], xy only) with the lines x = +-half[0]
  and y = +-half[1] inside the rectangle, in MuJoCo's order (_XSEG, _XQ, _XJ).

  Returns t (16,), the crossing's other coordinate c2 (16,), ok (16,).
  """
  a = starts[_XSEG, _XQ]
  b = dirs[_XSEG, _XQ]
  c = starts[_XSEG, 1 - _XQ]
  d = dirs[_XSEG, 1 - _XQ]
  bok = jnp.abs(b) > MINVAL
  ib = 1.0 / jnp.where(bok, b, 1.0)
  t = (half[_XQ] * jnp.asarray(_XJ, half.dtype) - a) * ib
  c2 = c + d * t
  ok = ok_line[_XSEG] & bok & (t >= 0) & (t <= 1) & (jnp.abs(c2) <= half[1 - _XQ])
  return t, c2, ok


def _boxbox_face(q1, q2, pos1, mat1, size1, pos2, mat2, size2, rot, pos21, pos12, margin):
  """Face path of mjc_BoxBox: box (q2 ? 2 : 1) face q1 is the reference face.

  In the face's frame (z = outward normal, origin on the face), the other box's lowest corner
  and the (at most two) edges from it within 30 degrees of the face plane span a parallelogram;
  candidates are its crossings with the face rectangle, the rectangle corners inside it and its
  own corners inside the rectangle (the lowest one always). Returns dist (24,), pos (24, 3),
  normal (3,), ok (24,). MuJoCo 3.3.3 reports HALF the depth here (dist = z / 2).
  """
  dt = pos1.dtype
  perm = jnp.asarray(_FPERM)[q1]
  sign = jnp.asarray(_FSIGN, dt)[q1]
  is2 = q2 == 1
  r = sign[:, None] * jnp.where(is2, rot.T, rot)[perm]      # other box's axes: columns
  p = sign * jnp.where(is2, pos12, pos21)[perm]              # other box's centre
  ss = jnp.abs(sign * jnp.where(is2, size2, size1)[perm])    # reference half-sizes (face frame)
  s = jnp.where(is2, size1, size2)                           # other box's half-sizes
  rt = r.T
  lx, ly, hz = ss[0], ss[1], ss[2]
  p = p.at[2].add(-hz)

  # lowest corner of the other box, and its edge vectors away from it
  neg = r[2] < 0
  lp = p
  for i in range(3):
    lp = lp + rt[i] * (s[i] * jnp.where(neg[i], 1.0, -1.0))
  edges = rt * (s * jnp.where(neg, -2.0, 2.0))[:, None]
  flat = jnp.abs(r[2]) < 0.5
  m = 1 + jnp.sum(flat)
  order = jnp.argsort(jnp.logical_not(flat), stable=True)
  pts0, pts1, pts2 = lp, edges[order[0]], edges[order[1]]
  pts3 = pts0 + pts1
  pts4 = pts0 + pts2
  pts5 = pts3 + pts2

  # 16 crossings of the parallelogram's edges with the rectangle's edges
  starts = jnp.stack([pts0, pts0, pts3, pts4])
  dirs = jnp.stack([pts1, pts2, pts2, pts1])
  t, _, ok_l = _segment_rect(starts, dirs, jnp.stack([m > 1, m > 2, m > 2, m > 2]), ss)
  pl = starts[_XSEG] + dirs[_XSEG] * t[:, None]

  # 4 rectangle corners strictly inside the parallelogram
  a, b, c, d = pts1[0], pts2[0], pts1[1], pts2[1]
  idet = _recip(a * d - b * c)
  rect = jnp.asarray(_RECT, dt) * jnp.stack([lx, ly])
  x = rect[:, 0] - pts0[0]
  y = rect[:, 1] - pts0[1]
  u = (x * d - y * b) * idet
  v = (y * a - x * c) * idet
  ok_r = (m > 2) & (u > 0) & (v > 0) & (u < 1) & (v < 1)
  pr = jnp.concatenate([rect, (pts0[2] + u * pts1[2] + v * pts2[2])[:, None]], axis=1)

  # 4 parallelogram corners strictly inside the rectangle (the lowest corner always)
  pc = jnp.stack([pts0, pts3, pts4, pts5])
  inside = (pc[:, 0] > -lx) & (pc[:, 0] < lx) & (pc[:, 1] > -ly) & (pc[:, 1] < ly)
  ok_c = jnp.arange(4) < jnp.left_shift(1, m - 1)
  ok_c = ok_c & (inside | (jnp.arange(4) == 0))

  pts = jnp.concatenate([pl, pr, pc])
  ok = jnp.concatenate([ok_l, ok_r, ok_c]) & (pts[:, 2] <= margin)
  dist = pts[:, 2] * 0.5
  local = pts.at[:, 2].set(dist + hz)
  # back to world: R = mat @ P^T, origin at the reference box centre
  rmat = jnp.where(is2, mat2, mat1)[:, perm] * sign
  origin = jnp.where(is2, pos2, pos1)
  normal = jnp.where(is2, -1.0, 1.0) * rmat[:, 2]
  return dist, local @ rmat.T + origin, normal, ok


def _boxbox_edge(code, cle1, cle2, clnorm, inn, pos1, mat1, size1, pos2, mat2, size2, rot,
                 pos21, margin):
  """Edge-edge path of mjc_BoxBox: edge (box 1 axis q1) x edge (box 2 axis q2) is the
  separating axis ``clnorm``; box 1's face ``clface`` most aligned with it is the reference.

  Box 2's face containing its nearest edge (4 corners ``pu``) is projected along clnorm onto the
  reference face plane; candidates are the projected quad's crossings with the face rectangle,
  rectangle corners inside it and its corners inside the rectangle, each placed midway between
  the two boxes. Returns dist (24,), pos (24, 3), normal (3,), ok (24,).
  """
  dt = pos1.dtype
  q1 = code // 3
  q2 = code % 3
  other = jnp.asarray(_OTHER)
  rotabs = jnp.abs(rot)
  ax1, ax2 = other[q2, 0], other[q2, 1]
  pax1, pax2 = other[q1, 0], other[q1, 1]
  sw = rotabs[q1, ax1] < rotabs[q1, ax2]
  ax1 = jnp.where(sw, ax2, ax1)
  ax2 = jnp.where(sw, 3 - q2 - ax1, ax2)
  sw = rotabs[pax1, q2] < rotabs[pax2, q2]
  pax1 = jnp.where(sw, pax2, pax1)
  pax2 = jnp.where(sw, 3 - q1 - pax1, pax2)
  clface = jnp.where(_bit(cle1, pax2), pax2, pax2 + 3)

  perm = jnp.asarray(_FPERM)[clface]
  sign = jnp.asarray(_FSIGN, dt)[clface]
  p = sign * pos21[perm]
  rnorm = sign * clnorm[perm]
  r = sign[:, None] * rot[perm]
  s = jnp.abs(size1[perm])
  rt = r.T
  lx, ly, hz = s[0], s[1], s[2]
  p = p.at[2].add(-hz)

  # the 4 corners of box 2's face through its nearest edge (edge direction q2)
  sg1 = jnp.where(_bit(cle2, ax1), 1.0, -1.0)
  sg2 = jnp.where(_bit(cle2, ax2), 1.0, -1.0)
  along = rt[q2] * size2[q2]
  base0 = p + rt[ax1] * (size2[ax1] * sg1)
  base0 = base0 + rt[ax2] * (size2[ax2] * sg2)
  base2 = p + rt[ax1] * (size2[ax1] * -sg1)
  base2 = base2 + rt[ax2] * (size2[ax2] * sg2)
  pu = jnp.stack([base0 + along, base0 - along, base2 + along, base2 - along])
  axi0, axi1, axi2 = pu[0], pu[1] - pu[0], pu[2] - pu[0]

  rz_ok = jnp.abs(rnorm[2]) >= MINVAL
  irz = _recip(rnorm[2])
  innorm = irz * jnp.where(inn, -1.0, 1.0)
  proj = pu + rnorm[None, :] * (-pu[:, 2] * irz)[:, None]   # projected onto the face plane
  ppts = proj[:, :2]
  pts0, pts1, pts2 = proj[0], proj[1] - proj[0], proj[2] - proj[0]

  # crossings of the projected quad's edges with the rectangle: midpoint between the
  # rectangle-plane point and the corresponding point of the unprojected edge
  starts = jnp.stack([pts0, pts0, pts0 + pts1, pts0 + pts2])
  dirs = jnp.stack([pts1, pts2, pts2, pts1])
  ustarts = jnp.stack([axi0, axi0, axi0 + axi1, axi0 + axi2])
  udirs = jnp.stack([axi1, axi2, axi2, axi1])
  t, c2, ok_l = _segment_rect(starts, dirs, jnp.ones(4, bool), s)
  us, ud = ustarts[_XSEG], udirs[_XSEG]
  ok_l = ok_l & ((us[:, 2] + ud[:, 2] * t) * innorm <= margin)
  pl = us * 0.5 + ud * (0.5 * t)[:, None]
  onehot = jnp.asarray(np.eye(3)[_XQ], dt)
  other_hot = jnp.asarray(np.eye(3)[1 - _XQ], dt)
  side = s[_XQ] * jnp.asarray(_XJ, dt)
  pl = pl + onehot * (0.5 * side)[:, None] + other_hot * (0.5 * c2)[:, None]
  depth_l = pl[:, 2] * innorm * 2
  nl = jnp.sum(ok_l)

  # rectangle corners inside the projected quad (clamped barycentrics): midpoint between the
  # corner and the quad's point. MuJoCo overwrites the determinant with the squared distance of
  # the last corner that passed the inside test; the following corners use that value.
  a, b, c, d = pts1[0], pts2[0], pts1[1], pts2[1]
  cur = a * d - b * c
  rect = jnp.asarray(_RECT, dt) * jnp.stack([lx, ly])
  margin2 = margin * margin
  pf, depth_f, ok_f = [], [], []
  for i in range(4):
    x = rect[i, 0] - pts0[0]
    y = rect[i, 1] - pts0[1]
    icur = _recip(cur)
    u = (x * d - y * b) * icur
    v = (y * a - x * c) * icur
    uout = (u < 0) | (u > 1)
    vout = (v < 0) | (v > 1)
    skip = jnp.where(nl == 0, uout & vout, uout | vout)
    u = jnp.clip(u, 0, 1)
    v = jnp.clip(v, 0, 1)
    quad = pu[0] * (1 - u - v) + pu[1] * u + pu[2] * v
    corner = jnp.concatenate([rect[i], jnp.zeros(1, dt)])
    dd = jnp.sum((corner - quad) ** 2)
    cur = jnp.where(skip, cur, dd)
    ok_f.append(~skip & ~((quad[2] > 0) & (dd > margin2)))
    pf.append((corner + quad) * 0.5)
    depth_f.append(_sqrt(dd) * jnp.where(quad[2] < 0, -1.0, 1.0))
  ok_f = jnp.stack(ok_f)
  nf = nl + jnp.sum(ok_f)

  # the quad's corners inside the rectangle: midpoint of the clamped projection and the corner
  outx = (ppts[:, 0] < -lx) | (ppts[:, 0] > lx)
  outy = (ppts[:, 1] < -ly) | (ppts[:, 1] > ly)
  skip = jnp.where(nl == 0, jnp.where(nf == 0, False, outx & outy), outx | outy)
  excess = ppts - jnp.clip(ppts, -s[:2], s[:2])
  cq = jnp.sum(excess * excess, axis=1) + pu[:, 2] * innorm * pu[:, 2] * innorm
  ok_p = ~skip & ~((pu[:, 2] > 0) & (cq > margin2))
  half = jnp.where(ppts < -s[:2], -s[:2] * 0.5, jnp.where(ppts > s[:2], s[:2] * 0.5, ppts * 0.5))
  pp = jnp.concatenate([half, jnp.zeros((4, 1), dt)], axis=1) + pu * 0.5
  depth_p = _sqrt(cq) * jnp.where(pu[:, 2] < 0, -1.0, 1.0)

  pts = jnp.concatenate([pl, jnp.stack(pf), pp])
  dist = jnp.concatenate([depth_l, jnp.stack(depth_f), depth_p])
  ok = jnp.concatenate([ok_l, ok_f, ok_p]) & rz_ok
  rmat = mat1[:, perm] * sign
  normal = (rmat @ rnorm) * jnp.where(inn, -1.0, 1.0)
  local = pts.at[:, 2].add(hz)
  return dist, local @ rmat.T + pos1, normal, ok


def _outside_box(point, pos, mat, size):
  """mju_outsideBox with inflation 1.01: 1 outside the inflated box, -1 inside the deflated
  box, 0 in between. point (n, 3) -> (n,) int."""
  vec = (point - pos) @ mat
  big = size * 1.01
  small = size / 1.01
  out = jnp.any((vec > big) | (vec < -big), axis=-1)
  ins = jnp.all((vec < small) & (vec > -small), axis=-1)
  return jnp.where(out, 1, jnp.where(ins, -1, 0))


def box_box(pos1, mat1, size1, pos2, mat2, size2, margin):
  """Box : box, up to 9 contacts (mjc_BoxBox).

  Separating-axis test over the 6 face normals and 9 edge-edge cross products picks the axis
  of least penetration (sequentially, with MuJoCo's tie rules); the face path or the edge path
  then generates candidate points (24 each). MuJoCo 3.3.3 finally drops points that lie outside
  one box (inflated by the margin and 1%) without being inside the other, and exact duplicates.

  Nine, not eight, slots: 3.3.3 does not cap box-box contacts. The face path always keeps the
  other box's lowest corner, which survives the outside filter when it lies just outside the
  reference face (within the margin and the 1% band), next to up to 8 vertices of the face
  overlap polygon. More than 9 needs exactly coincident features (near-duplicate points); the
  first 9 candidates in MuJoCo's order are kept then.
  """
  dt = pos1.dtype
  pos21 = mat1.T @ (pos2 - pos1)
  pos12 = mat2.T @ (pos1 - pos2)
  rot = mat1.T @ mat2                 # rot[i, j] = box1 axis i . box2 axis j
  rotabs = jnp.abs(rot)
  plen2 = rotabs @ size2              # box 2's half-extent along box 1's axes
  plen1 = rotabs.T @ size1

  # face axes: box 1's (c1) and box 2's (c2) face normals, scanned in MuJoCo's order
  c1 = -jnp.abs(pos21) + size1 + plen2
  c2 = -jnp.abs(pos12) + size2 + plen1
  sep = jnp.any(c1 < -margin) | jnp.any(c2 < -margin)
  pen = margin + 3 * jnp.sum(size1) + 3 * jnp.sum(size2)
  code = jnp.int32(-1)
  for i in range(3):
    upd = c1[i] < pen
    pen = jnp.where(upd, c1[i], pen)
    code = jnp.where(upd, i + 3 * (pos21[i] < 0), code)
    upd = c2[i] < pen
    pen = jnp.where(upd, c2[i], pen)
    code = jnp.where(upd, i + 3 * (pos12[i] < 0) + 6, code)

  # edge-edge axes (box 1 axis i) x (box 2 axis j), all 9 at once, in box 1's frame
  ei, ej = _SAT_I, _SAT_J
  ax = jnp.cross(jnp.asarray(np.eye(3)[ei], dt), rot[:, ej].T)
  ax, nrm = jax.vmap(_normalize)(ax)
  ok = nrm >= MINVAL
  nrm = jnp.where(ok, nrm, 1.0)
  dep = jnp.einsum('ek,k->e', ax, pos21)   # centre offset along the axis
  ka, kb = _OTHER_ASC[ei, 0], _OTHER_ASC[ei, 1]
  la, lb = _OTHER_ASC[ej, 0], _OTHER_ASC[ej, 1]
  c3 = size1[ka] * jnp.abs(ax[_SAT_ROWS, ka]) + size1[kb] * jnp.abs(ax[_SAT_ROWS, kb])
  c3 = c3 + size2[la] * rotabs[ei, 3 - la - ej] / nrm
  c3 = c3 + size2[lb] * rotabs[ei, 3 - lb - ej] / nrm
  c3 = c3 - jnp.abs(dep)
  sep = sep | jnp.any(ok & (c3 < -margin))
  # which edges: cle1 over box 1's axes k != i, cle2 over box 2's axes k != j (bit masks)
  neg = dep < 0
  cle1 = sum(jnp.where((k != ei) & ((ax[:, k] > 0) ^ neg), 1 << k, 0) for k in range(3))
  cle2 = sum(jnp.where((k != ej) & ((rot[ei, (3 - k - ej) % 3] > 0) ^ neg ^ ((k - ej) % 3 == 1)),
                       1 << k, 0) for k in range(3))
  sel = jnp.int32(-1)
  for e in range(9):
    upd = ok[e] & (c3[e] < pen * (1 - 1e-12))
    pen = jnp.where(upd, c3[e], pen)
    sel = jnp.where(upd, e, sel)
  code = jnp.where(sel >= 0, 12 + sel, code)
  sel = jnp.maximum(sel, 0)
  cle1, cle2, clnorm, inn = cle1[sel], cle2[sel], ax[sel], neg[sel]

  face = code < 12
  fd, fp, fn, fok = _boxbox_face(jnp.clip(code, 0, 11) % 6, jnp.clip(code, 0, 11) // 6, pos1,
                                 mat1, size1, pos2, mat2, size2, rot, pos21, pos12, margin)
  ed, ep, en, eok = _boxbox_edge(jnp.clip(code - 12, 0, 8), cle1, cle2, clnorm, inn, pos1, mat1,
                                 size1, pos2, mat2, size2, rot, pos21, margin)
  dist = jnp.where(face, fd, ed)
  pos = jnp.where(face, fp, ep)
  normal = jnp.where(face, fn, en)
  ok = jnp.where(face, fok, eok) & ~sep & (code >= 0)

  # 3.3.3 post-filter: outside one box and not inside the other -> dropped; then duplicates
  out1 = _outside_box(pos, pos1, mat1, size1 + margin)
  out2 = _outside_box(pos, pos2, mat2, size2 + margin)
  bad = ((out1 == 1) & (out2 != -1)) | ((out2 == 1) & (out1 != -1))
  good = ok & ~bad
  same = jnp.all(pos[:, None, :] == pos[None, :, :], axis=-1)
  later = jnp.triu(jnp.ones((NBOXBOX, NBOXBOX), bool), 1)
  dup = jnp.any(same & later & good[None, :], axis=1)
  idx, valid = _first(good & ~dup, NBOXBOXCON)
  return _contacts(dist[idx], pos[idx], jnp.broadcast_to(normal, (NBOXBOXCON, 3)), valid)


ROUTINES = {
    (PLANE, SPHERE): (plane_sphere, 1),
    (PLANE, CAPSULE): (plane_capsule, 2),
    (PLANE, CYLINDER): (plane_cylinder, 4),
    (PLANE, BOX): (plane_box, 4),
    (SPHERE, SPHERE): (sphere_sphere, 1),
    (SPHERE, CAPSULE): (sphere_capsule, 1),
    (SPHERE, CYLINDER): (sphere_cylinder, 1),
    (SPHERE, BOX): (sphere_box, 1),
    (CAPSULE, CAPSULE): (capsule_capsule, 2),
    (CAPSULE, BOX): (capsule_box, 2),
    (BOX, BOX): (box_box, NBOXBOXCON),
}

# pairs MuJoCo sends to its general convex collider (mjc_Convex / mjc_PlaneConvex)
from .convex import ROUTINES as _CONVEX_ROUTINES  # noqa: E402  (convex.py imports nothing here)

ROUTINES.update(_CONVEX_ROUTINES)
