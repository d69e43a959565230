"""Height-field collisions: MuJoCo 3.3.3's ``mjc_ConvexHField`` (engine_collision_convex.c).

MuJoCo sends every (hfield, t) pair with t in sphere, capsule, ellipsoid, cylinder, box, mesh to
``mjc_ConvexHField``, which works in the height field's frame:

1. geom 2's pose is expressed in the hfield frame; its axis-aligned bounding box there comes from
   its support points along +-x, +-y, +-z (no margin). A box that misses the hfield's extent
   [-size0, size0] x [-size1, size1] x [-size3, size2], widened by the margin, ends the pair
   (MuJoCo's earlier bounding-sphere test is implied by this one: the box lies inside the sphere).
2. The grid lines the box overlaps: columns cmin = floor((xmin + size0) / (2 size0) (ncol - 1)),
   cmax = ceil(...xmax...), rows likewise from y, clamped to the grid. Column c sits at
   x = dx c - size0 (dx = 2 size0 / (ncol - 1)), row r at y = dy r - size1.
3. Every grid cell (r, c), r in [rmin, rmax), c in [cmin, cmax), in row-major order, is split into
   two triangular prisms whose top triangle lies on the elevation data (raised by the margin)
   and whose bottom is at -size3: first the prism over the grid points (r+1, c), (r, c),
   (r+1, c+1), then the one over (r, c), (r+1, c+1), (r, c+1). A prism whose three top points all
   lie below the bounding box's zmin is skipped.
4. Each prism is collided with geom 2 by the native GJK / EPA (``mjc_ccd``) with the prism as
   object 1 (margin 0, centre = mean of its six vertices) and geom 2 as object 2 (inflated by
   margin / 2). A negative distance is a contact: dist as returned (NOT shifted by the margin),
   normal = normalize(x1 - x2), pos = (x1 + x2) / 2, mapped to world coordinates.
5. At most mjMAXCONPAIR = 50 contacts are kept (the first ones in prism order). Then
   ``mjc_fixNormal`` replaces the normal of a sphere / capsule / ellipsoid / cylinder geom 2 by
   its surface normal at the contact point (see ``_fix_normal``).

Prisms are given to convex.py's search as MESH-kind objects with their six vertices (top triangle
first). MuJoCo's prism support picks the best of the bottom triangle when dir_z < 0, else of the
top triangle (first strictly best); since the top lies strictly above the bottom this is the best
of all six, so the two agree except on exact floating-point ties (dir_z == 0 exactly, or two
vertices with equal projections), where the mesh support's warm start may pick another vertex of
the same supporting plane.

Fixed-size JAX form: the number of prisms depends on the pose, so the routine visits a STATIC
block of ``ncell = (ny, nx)`` grid cells starting at (rmin, cmin), i.e. 2 ny nx prism slots in
MuJoCo's order, masks the slots outside [rmin, rmax) x [cmin, cmax) and runs the convex search
vmapped over all slots. ``cell_bound`` computes the block on the host from the largest bounding
radius R of the geoms that can touch the hfield: the bounding box is at most 2R wide, so it
spans at most floor(2R / dx) + 2 column intervals (ceil(w / dx) + 1 <= floor(w / dx) + 2), and
likewise rows; the block can therefore never be too small for geoms within R (a geom larger
than the R it was built for would lose its last rows / columns of prisms: the driver must take
R over every geom that can be paired with the hfield). The contacts come in MuJoCo's prism
order; the first min(2 ny nx, 50) valid ones are kept (``max_contacts``).

Gradients: the search runs on stop_gradient inputs (convex.py); dist and pos get the envelope
derivatives (witness points moved rigidly with the hfield and the geom, dist = n . (x2 - x1) at
the fixed search normal), the frame carries none.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..math import MINVAL
from . import convex, primitive

PLANE, HFIELD, SPHERE, CAPSULE, ELLIPSOID, CYLINDER, BOX, MESH = range(8)
MAXCONPAIR = 50            # mjMAXCONPAIR: contacts kept per hfield pair
GEOM_TYPES = (SPHERE, CAPSULE, ELLIPSOID, CYLINDER, BOX, MESH)
_FIX_ITER, _FIX_TOL = 30, 1e-6   # mjc_fixNormal's ellipsoid solvers: iterations, tolerance

# prism vertices by triangle: (row, column) offsets from the cell's corner (r, c), in MuJoCo's
# prism order (the grid points enter the prism constructor as (r+1, c), (r, c), (r+1, c+1), ...)
_TRI = np.array([[[1, 0], [0, 0], [1, 1]],
                 [[0, 0], [1, 1], [0, 1]]]).astype(np.int32)


class HField(NamedTuple):
  """One height field as the routines use it (arrays only: vmap-able; nrow, ncol are static).

  elev: (nrow, ncol) top heights hfield_data * size[2], row r at y = -size1 + r dy (MuJoCo's
        hfield_data layout, row-major, reshaped)
  size: (4,) hfield_size (x half-extent, y half-extent, z top scale, z bottom depth)
  """
  elev: jax.Array
  size: jax.Array


def make_hfield(data, adr, size, nrow: int, ncol: int) -> HField:
  """HField of one height field from the Model's ``hfield_data`` (all fields), its address
  ``hfield_adr`` (may be traced), ``hfield_size`` (4,) and its static nrow / ncol."""
  flat = lax.dynamic_slice(jnp.asarray(data), (adr,), (nrow * ncol,))
  size = jnp.asarray(size)
  return HField(flat.reshape(nrow, ncol).astype(size.dtype) * size[2], size)


def cell_bound(nrow: int, ncol: int, size, rbound: float) -> tuple:
  """Host side: the static cell block (ny, nx) that covers every geom of bounding radius <=
  ``rbound`` (the largest geom_rbound among the geoms that can collide with this hfield)."""
  dx = 2.0 * float(size[0]) / (ncol - 1)
  dy = 2.0 * float(size[1]) / (nrow - 1)
  nx = min(ncol - 1, math.floor(2.0 * float(rbound) / dx) + 2)
  ny = min(nrow - 1, math.floor(2.0 * float(rbound) / dy) + 2)
  return (max(ny, 1), max(nx, 1))


def max_contacts(ncell) -> int:
  """Contact slots of a routine built for the cell block ``ncell``: min(prisms, 50)."""
  return min(2 * ncell[0] * ncell[1], MAXCONPAIR)


# ---------------------------------------------------------------------------------------------
# mjc_fixNormal for geom 2 (the hfield side is never processed)

def _normalize(v):
  """mju_normalize3: v / |v|, or the x axis when |v| < MINVAL (NaN-free)."""
  n = jnp.sqrt(jnp.sum(v * v))
  ok = n >= MINVAL
  return jnp.where(ok, v / jnp.where(ok, n, 1.0), jnp.zeros_like(v).at[0].set(1.0))


def _ellipsoid_ray(nrm, pos, size):
  """Normal for a point inside the ellipsoid by ray projection (MuJoCo's
  mjc_ellipsoidInside): (processed, normal)."""
  s2inv = 1 / (size * size)
  c = jnp.sum(pos * pos * s2inv) - 1
  nrm = _normalize(nrm)

  def body(it, st):
    nrm, done, ok = st
    a = jnp.sum(nrm * nrm * s2inv)
    b = jnp.sum(pos * nrm * s2inv)
    det = b * b - a * c
    stop = (det < MINVAL) | (a < MINVAL)
    x = (-b + jnp.sqrt(jnp.maximum(det, 0.0))) / jnp.where(stop, 1.0, a)
    stop = stop | (x < 0)
    new = _normalize((pos + x * nrm) * s2inv)
    change = jnp.sqrt(jnp.sum((nrm - new) ** 2))
    go = ~done & ~stop
    return (jnp.where(go, new, nrm), done | stop | (go & (change < _FIX_TOL)),
            jnp.where(done, ok, jnp.where(stop, it > 0, True)))

  nrm, _, ok = lax.fori_loop(0, _FIX_ITER, body, (nrm, c > 0, c <= 0))
  return ok, nrm


def _ellipsoid_qcqp(pos, size):
  """Normal for a point outside the ellipsoid by the diagonal QCQP (MuJoCo's
  mjc_ellipsoidOutside)."""
  s2 = size * size
  ps2 = pos * pos * s2

  def body(_, st):
    la, done = st
    r = 1 / (s2 + la)
    val = jnp.sum(ps2 * r * r) - 1
    deriv = -2 * jnp.sum(ps2 * r * r * r)
    delta = -val / jnp.where(deriv > -MINVAL, -1.0, deriv)
    stop = (val < _FIX_TOL) | (deriv > -MINVAL) | (delta < _FIX_TOL)
    return jnp.where(done | stop, la, la + delta), done | stop

  la, _ = lax.fori_loop(0, _FIX_ITER, body, (jnp.zeros((), pos.dtype), jnp.zeros((), bool)))
  return _normalize(pos / (s2 + la))


def _fix_normal(kind, normal, cpos, pos2, mat2, size2):
  """mjc_fixNormal with geom 1 an hfield: the contact normal (3,) (world, from the hfield to
  geom 2) replaced by minus geom 2's surface normal at the contact point for a sphere (radial),
  capsule (radial from its axis segment), ellipsoid (ray projection inside / QCQP outside) or
  cylinder (radial, only if the point is within 95% of the half-height and at least 4x closer to
  the round wall than... by MuJoCo's test, see below); other types keep the normal."""
  pos = mat2.T @ (cpos - pos2)
  nrm0 = mat2.T @ -normal
  out = {}
  if convex._is(kind, SPHERE) is not False:
    out[SPHERE] = (jnp.ones((), bool), pos)
  if convex._is(kind, CAPSULE) is not False:
    h = size2[1]
    z = jnp.where(pos[2] < -h, pos[2] + h, jnp.where(pos[2] > h, pos[2] - h, 0.0))
    out[CAPSULE] = (jnp.ones((), bool), jnp.stack([pos[0], pos[1], z]))
  if convex._is(kind, ELLIPSOID) is not False:
    good = jnp.all(size2 >= MINVAL)
    s = jnp.where(good, size2, 1.0)
    dst = pos[0] * pos[0] / (s[0] * s[0]) + pos[1] * pos[1] / (s[1] * s[1]) \
        + pos[2] * pos[2] / (s[2] * s[2])
    ok_in, n_in = _ellipsoid_ray(nrm0, pos, s)
    n_out = _ellipsoid_qcqp(pos, s)
    inside = dst <= 1
    out[ELLIPSOID] = (good & (~inside | ok_in), jnp.where(inside, n_in, n_out))
  if convex._is(kind, CYLINDER) is not False:
    # skipped near the flat caps, and unless the round wall is at most 4x farther than the flat
    dst1 = jnp.abs(size2[1] - jnp.abs(pos[2]))
    dst2 = jnp.abs(size2[0] - jnp.sqrt(pos[0] * pos[0] + pos[1] * pos[1]))
    ok = (jnp.abs(pos[2]) <= 0.95 * size2[1]) & ~(dst1 < 0.25 * dst2)
    out[CYLINDER] = (ok, jnp.stack([pos[0], pos[1], jnp.zeros_like(pos[0])]))
  done = jnp.zeros((), bool)
  nrm = nrm0
  for t, (ok, v) in out.items():
    sel = ok & (kind == t) if not convex._static(kind) else ok
    if convex._static(kind) and int(kind) != t:
      continue
    done = done | sel
    nrm = jnp.where(sel, v, nrm)
  return jnp.where(done, -(mat2 @ _normalize(nrm)), normal)


# ---------------------------------------------------------------------------------------------
# The search: convex.py's mjc_ccd with MuJoCo's EPA stop for discrete pairs

def _ccd(g1, g2, margin, tol, kmax, nsteps):
  """convex._ccd (mjc_ccd) for prism g1 (MESH kind, margin 0) and geom g2 (margin ``margin``),
  with convex._epa's discrete rules: (valid, dist, x1, x2), dist the signed distance of the
  inflated shapes."""
  dt = g1.pos.dtype
  nvmax = 5 + kmax
  discrete = jnp.asarray(convex._is(g2.kind, BOX, MESH)) & (margin == 0)
  eps = jnp.where(discrete, 0.0, tol * tol).astype(dt)
  shrink = convex._is(g2.kind, SPHERE, CAPSULE)
  fm2 = jnp.where(shrink, g2.size[0] + 0.5 * g2.margin, 0.0).astype(dt)
  hmargins = (jnp.zeros((), dt), jnp.where(shrink, 0.0, g2.margin).astype(dt))
  g = convex._gjk(g1, g2, eps, tol, kmax, shrink, fm2, hmargins)
  poly, ok, vidx = convex._polytope(g1, g2, g, nvmax, 2 * nvmax)
  face, fail, poly = convex._epa(g1, g2, poly, vidx, tol, kmax, nsteps, discrete)
  x1, x2 = convex._epa_witness(poly, face)
  dist = -face.d
  valid = (g.dist <= tol) & (g.n > 1) & ok & ~fail & (dist < 0)
  # shallow contact (sphere / capsule): witness points pushed out by geom 2's radius
  nrm = convex._normalize3(g.sh_x2 - g.sh_x1)
  sdist = g.sh_dist - fm2
  valid = jnp.where(g.shallow, sdist < 0, valid)
  dist = jnp.where(g.shallow, sdist, dist)
  x2 = jnp.where(g.shallow, g.sh_x2 - nrm * fm2, x2)
  x1 = jnp.where(g.shallow, g.sh_x1, x1)
  finite = jnp.isfinite(dist) & jnp.all(jnp.isfinite(x1)) & jnp.all(jnp.isfinite(x2))
  return (valid & finite, jnp.where(finite, dist, 0.0), jnp.where(finite, x1, g1.pos),
          jnp.where(finite, x2, g2.pos))


# ---------------------------------------------------------------------------------------------
# The routine

def _slots(ncell):
  """Static slot tables of a (ny, nx) cell block in MuJoCo's prism order: cell row and column
  offsets (P,) and the prisms' grid-point offsets (P, 3, 2)."""
  ny, nx = ncell
  k = np.arange(2 * ny * nx)
  row, rest = np.divmod(k, 2 * nx)
  col, tri = np.divmod(rest, 2)
  return row, col, _TRI[tri]


def collide(kind2, pos1, mat1, hfield, pos2, mat2, size2, margin, verts2=None, *, ncell,
            tolerance=convex.TOLERANCE, iterations=convex.ITERATIONS):
  """mjc_ConvexHField for one (hfield, geom) pair: Contacts with max_contacts(ncell) slots.

  kind2: geom 2's type (Python int, or int32 () to serve every type with one compiled search).
  pos1 (3,), mat1 (3, 3): the hfield geom's pose; hfield: HField; pos2, mat2, size2: geom 2;
  margin (); verts2 (nv, 3): geom 2's vertex set if it is a mesh (any (nv, 3) otherwise);
  ncell: static (ny, nx) cell block (``cell_bound``).
  """
  if int(iterations) != iterations or iterations < 1:
    raise ValueError(f'ccd iterations must be a positive integer, got {iterations!r}')
  sg = lax.stop_gradient
  dt = pos1.dtype
  margin = jnp.asarray(margin, dt)
  if verts2 is None:
    if convex._is(kind2, MESH) is True:
      raise ValueError('mesh geoms need their vertex set (verts2)')
    verts2 = jnp.zeros((1, 3), dt)
  verts2 = sg(jnp.asarray(verts2, dt).reshape(-1, 3))
  kind2 = kind2 if convex._static(kind2) else jnp.asarray(kind2, jnp.int32)
  p1, m1, p2, m2, s2, mg = (sg(x) for x in (pos1, mat1, pos2, mat2, size2, margin))
  elev, hsize = sg(hfield.elev), sg(hfield.size)
  nrow, ncol = elev.shape

  # geom 2 in the hfield frame, its bounding box there (support along +-x, +-y, +-z)
  rpos = m1.T @ (p2 - p1)
  rmat = m1.T @ m2
  geom2 = convex._Geom(kind2, rpos, rmat, s2, verts2, mg)
  dirs = jnp.concatenate([jnp.eye(3, dtype=dt), -jnp.eye(3, dtype=dt)])[jnp.array(
      [0, 3, 1, 4, 2, 5])]
  sup, _ = convex._support_geom(geom2._replace(margin=jnp.zeros((), dt)), dirs,
                                jnp.asarray(-1, jnp.int32), False)
  xmax, xmin, ymax, ymin, zmax, zmin = (sup[0, 0], sup[1, 0], sup[2, 1], sup[3, 1], sup[4, 2],
                                        sup[5, 2])
  miss = ((xmin - mg > hsize[0]) | (xmax + mg < -hsize[0]) | (ymin - mg > hsize[1])
          | (ymax + mg < -hsize[1]) | (zmin - mg > hsize[2]) | (zmax + mg < -hsize[3]))

  # sub-grid: cells [rmin, rmax) x [cmin, cmax)
  def grid(lo, hi, half, n):
    a = jnp.floor((lo + half) / (2 * half) * (n - 1))
    b = jnp.ceil((hi + half) / (2 * half) * (n - 1))
    a = jnp.clip(jnp.where(jnp.isfinite(a), a, 0), 0, n - 1).astype(jnp.int32)
    b = jnp.clip(jnp.where(jnp.isfinite(b), b, 0), 0, n - 1).astype(jnp.int32)
    return a, b
  cmin, cmax = grid(xmin, xmax, hsize[0], ncol)
  rmin, rmax = grid(ymin, ymax, hsize[1], nrow)

  # prism slots: grid points, vertices (top triangle first, then the bottom), centre
  drow, dcol, off = _slots(ncell)
  r, c = rmin + drow, cmin + dcol                              # (P,) cell corners
  active = (r < rmax) & (c < cmax) & ~miss
  gr = jnp.minimum(r[:, None] + off[..., 0], nrow - 1)         # (P, 3) grid points
  gc = jnp.minimum(c[:, None] + off[..., 1], ncol - 1)
  dx = (2.0 * hsize[0]) / (ncol - 1)
  dy = (2.0 * hsize[1]) / (nrow - 1)
  x = dx * gc.astype(dt) - hsize[0]
  y = dy * gr.astype(dt) - hsize[1]
  ztop = elev[gr, gc] + mg
  zbot = jnp.broadcast_to(-hsize[3], ztop.shape)
  top = jnp.stack([x, y, ztop], axis=-1)                       # (P, 3, 3)
  bot = jnp.stack([x, y, zbot], axis=-1)
  active = active & ~jnp.all(ztop < zmin, axis=1)              # prism height test
  # mjc_prism_center: the six vertices summed in MuJoCo's order (bottom, top), times 1/6
  ctr = bot[:, 0]
  for v in (bot[:, 1], bot[:, 2], top[:, 0], top[:, 1], top[:, 2]):
    ctr = ctr + v
  ctr = ctr * (1.0 / 6.0)
  verts = jnp.concatenate([top, bot], axis=1) - ctr[:, None]   # (P, 6, 3) in the prism frame

  def search(center, pverts):
    prism = convex._Geom(MESH, center, jnp.eye(3, dtype=dt), jnp.zeros(3, dt), pverts,
                         jnp.zeros((), dt))
    return _ccd(prism, geom2, mg, tolerance, int(iterations), convex.HORIZON_STEPS)

  valid, dist, x1, x2 = jax.vmap(search)(ctr, verts)
  valid = valid & active
  nrm_h = jax.vmap(convex._normalize3)(x1 - x2)
  normal = nrm_h @ m1.T                                        # (P, 3) world
  cpos = (0.5 * (x1 + x2)) @ m1.T + p1

  # keep the first MAXCONPAIR contacts in prism order
  nslot = max_contacts(ncell)
  if nslot < valid.shape[0]:
    idx, valid = primitive._first(valid, nslot)
    dist, cpos, normal, x1, x2 = dist[idx], cpos[idx], normal[idx], x1[idx], x2[idx]
  frame_n = jax.vmap(lambda n, p: _fix_normal(kind2, n, p, p2, m2, s2))(normal, cpos)

  # envelope gradients: witness points move rigidly with their geoms
  w1 = x1 @ mat1.T + pos1
  l2 = (x2 @ m1.T + p1 - p2) @ m2                              # geom 2's frame
  w2 = l2 @ mat2.T + pos2
  ddist = jnp.sum(normal * (w2 - w1), axis=-1)
  dpos = 0.5 * (w1 + w2)
  dist = dist + ddist - sg(ddist)
  cpos = cpos + dpos - sg(dpos)
  return primitive._contacts(dist, cpos, frame_n, valid)


def _routine(kind2):
  """The driver-form routine of (HFIELD, kind2)."""

  def fn(pos1, mat1, size1, pos2, mat2, size2, margin, hfield, verts2=None, *, ncell,
         tolerance=convex.TOLERANCE, iterations=convex.ITERATIONS):
    del size1  # the hfield's extent is hfield.size (MuJoCo ignores geom_size here)
    return collide(kind2, pos1, mat1, hfield, pos2, mat2, size2, margin, verts2, ncell=ncell,
                   tolerance=tolerance, iterations=iterations)

  name = convex.TYPE_NAMES[kind2]
  fn.__name__ = fn.__qualname__ = f'hfield_{name}'
  fn.__doc__ = (f'Hfield : {name}, up to max_contacts(ncell) contacts (mjc_ConvexHField): '
                '``collide`` for this type.')
  fn.kinds = (HFIELD, kind2)
  return fn


# (HFIELD, t) -> routine fn(pos1, mat1, size1, pos2, mat2, size2, margin, hfield, verts2=None,
# *, ncell, tolerance, iterations); contact slots: max_contacts(ncell)
ROUTINES = {(HFIELD, t): _routine(t) for t in GEOM_TYPES}

__all__ = ['GEOM_TYPES', 'HField', 'MAXCONPAIR', 'ROUTINES', 'cell_bound', 'collide',
           'make_hfield', 'max_contacts']
