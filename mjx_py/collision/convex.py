"""General convex narrowphase: MuJoCo 3.3.3's native GJK / EPA (``nativeccd``) and plane-convex.

MuJoCo routes every geom pair without an analytic routine to ``mjc_Convex`` (engine_collision_
convex.c), which with the default ``nativeccd`` runs its own GJK + EPA (engine_collision_gjk.c);
plane-ellipsoid and plane-mesh go to ``mjc_PlaneConvex``. This module reproduces both for ONE pair
(callers vmap), step for step, because MuJoCo's answer is not the exact geometric one: EPA stops
once its lower and upper depth bounds are ``ccd_tolerance`` apart, which for curved shapes leaves
the normal off by up to ~1e-2 rad, and the engine's reference is that answer, not the geometry.

The search (what MuJoCo computes):

- Support functions per geom type, in MuJoCo's arithmetic (sphere, capsule, ellipsoid, cylinder,
  box, mesh vertex set; sign ties go to the positive side, a mesh keeps its previous vertex unless
  another is strictly better), inflated by margin/2 along the query direction. The Minkowski
  difference A - B is searched with S(d) = S_A(d) - S_B(-d).
- Pairs with a sphere or capsule first shrink it to its centre point / axis segment (margin moved
  into its radius) and run GJK for the distance, cut off beyond the summed radii; if that distance
  exceeds the tolerance, the witness points are pushed out by the radii (a "shallow" contact).
  Otherwise, and for all other pairs, GJK runs on the full shapes only to decide intersection
  (switching to the tetrahedron walk ``gjkIntersect`` once its simplex is a tetrahedron), an
  initial polytope is built from the final simplex (``polytope2/3/4``) and EPA expands it.
- EPA keeps MuJoCo's data structures: vertices, faces with adjacency, and the "map" of candidate
  faces whose order decides ties (a deleted face is replaced by the map's last entry). The horizon
  is the same depth-first search from the expanded face, so faces are deleted and created in
  MuJoCo's order; a new face enters the map only if its distance lies between the current lower
  and upper depth bounds. The contact is the witness pair of the last face taken.

Fixed-size, jit/vmap-friendly form: every loop is a ``lax.fori_loop`` with a static trip count
(GJK ``iterations + 3`` steps, EPA ``iterations`` steps each with a ``HORIZON_STEPS``-step
horizon search), finished lanes are frozen with ``jnp.where``. Face slots freed by a horizon are
reused (a polytope with V vertices has at most 2V - 4 faces), which renumbers faces but changes
neither the map order nor any geometry, so buffers hold ``5 + iterations`` vertices and twice as
many faces. A horizon needing more than ``HORIZON_STEPS`` steps drops the contact rather than go on
with a wrong polytope: random poses need at most 19 steps, the worst seen (41) is a fan of faces
on a cylinder cap in coaxial cylinder-cylinder contact. The horizon search dominates the run time
(linear in HORIZON_STEPS). The numerics are written on small batched arrays (no nested vmaps),
and geom types may be Python ints (routines: the code specialises) or traced int32 (one compiled
function for every pair type, see ``collide``).

Gradients: the search runs on ``lax.stop_gradient`` inputs. Its witness points are expressed in
each geom's frame and moved back with the (differentiable) poses: ``pos`` is their midpoint and
``dist = margin + n . (x2 - x1)`` at the fixed normal n, the envelope-theorem derivative of the
support-function depth. Forward values stay exactly the search's (straight-through), gradients of
dist and pos are finite at touching, grazing and deep configurations.

Routines (``primitive.py``'s signature and ``Contacts`` result; geom 1 has the lower type):

  ROUTINES       fn(pos1, mat1, size1, pos2, mat2, size2, margin) for the primitive pairs MuJoCo
                 3.3.3 sends to mjc_Convex / mjc_PlaneConvex (merged into primitive.ROUTINES)
  MESH_ROUTINES  fn(pos1, mat1, size1, pos2, mat2, size2, margin, verts1, verts2) with convex
                 vertex sets ``verts (nv, 3)`` in the geom frame (MuJoCo's mesh_vert, already
                 centred / aligned; pad by repeating a vertex); a non-mesh side's verts are
                 ignored (None).

The convex routines take keyword options ``tolerance`` (opt.ccd_tolerance), ``iterations``
(opt.ccd_iterations, static) and ``multiccd`` (the enable flag). Multi-point convex collision is
not implemented: a pair for which MuJoCo would then return several contacts raises
NotSupportedError at trace time when ``multiccd`` is true. Disabling ``nativeccd`` (libccd's MPR)
is not supported either; the driver has to refuse it.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..errors import NotSupportedError
from ..math import MINVAL, cumsum_int, nonzero_first, safe_norm

PLANE, HFIELD, SPHERE, CAPSULE, ELLIPSOID, CYLINDER, BOX, MESH = range(8)
TYPE_NAMES = ('plane', 'hfield', 'sphere', 'capsule', 'ellipsoid', 'cylinder', 'box', 'mesh')
TOLERANCE = 1e-6        # opt.ccd_tolerance default
ITERATIONS = 50         # opt.ccd_iterations default
HORIZON_STEPS = 64      # horizon search steps per EPA iteration (one polytope edge per step)
MAXVAL = 1e10           # mjMAXVAL
FLT_MAX = float(np.finfo(np.float32).max)
NPLANEMESH = 3          # mjc_PlaneConvex: at most 3 plane-mesh contacts ...
PLANEMESH_TOL = 0.3     # ... the extra ones at least 0.3 * rbound from the first


def _primitive():
  # deferred import: primitive.py imports this module at its end to register the routines
  from . import primitive
  return primitive


# ---------------------------------------------------------------------------------------------
# Small helpers (search side: values only, inputs under stop_gradient). Vectors are (..., 3).

def _dot(a, b):
  return jnp.sum(a * b, axis=-1)


def _cross(a, b):
  return jnp.cross(a, b)


def _where_vec(c, a, b):
  """jnp.where with a (...,) condition on (..., 3) vectors."""
  return jnp.where(c[..., None], a, b)


def _den(x):
  """x with zeros replaced by 1 (for quotients the caller discards there)."""
  return jnp.where(x == 0, 1.0, x)


def _xaxis(like):
  return jnp.zeros_like(like).at[..., 0].set(1)


def _normalize3(v):
  """mju_normalize3: v / |v|, or the x axis when |v| < MINVAL."""
  n = jnp.sqrt(_dot(v, v))
  ok = n >= MINVAL
  return _where_vec(ok, v / jnp.where(ok, n, 1.0)[..., None], _xaxis(v))


def _same_sign(a, b):
  """MuJoCo's sameSign2 as a bool: both strictly positive or both strictly negative."""
  return ((a > 0) & (b > 0)) | ((a < 0) & (b < 0))


def _det3(a, b, c):
  """Determinant of the matrix with columns a, b, c: a . (b x c), MuJoCo's expansion."""
  return (a[..., 0] * (b[..., 1] * c[..., 2] - b[..., 2] * c[..., 1])
          + a[..., 1] * (b[..., 2] * c[..., 0] - b[..., 0] * c[..., 2])
          + a[..., 2] * (b[..., 0] * c[..., 1] - b[..., 1] * c[..., 0]))


def _static(x):
  """True if x is a Python value (static), False for a traced array."""
  return isinstance(x, (bool, int, np.integer, np.bool_))


def _is(kind, *types):
  """kind in types, as a Python bool for a static kind, else a traced bool."""
  if _static(kind):
    return int(kind) in types
  out = jnp.zeros((), bool)
  for t in types:
    out = out | (kind == t)
  return out


def _sel(flag, a, b):
  """flag ? a : b for a static or traced flag (a, b arrays of one shape)."""
  if _static(flag):
    return a if flag else b
  return jnp.where(flag, a, b)


# ---------------------------------------------------------------------------------------------
# Geoms and support functions

class _Geom(NamedTuple):
  """One side of the pair for the search."""
  kind: object       # geom type: Python int (static) or int32 ()
  pos: jax.Array     # (3,)
  mat: jax.Array     # (3, 3)
  size: jax.Array    # (3,)
  verts: jax.Array   # (nv, 3) mesh vertices in the geom frame ((1, 3) zeros if not a mesh)
  margin: jax.Array  # () the support is inflated by margin / 2 (0 for a shrunk sphere / capsule)


def _support_geom(g, d, vidx, shrunk):
  """Support points (m, 3) of one geom for world directions d (m, 3) (unit), before margin
  inflation, and the mesh warm-start index after the m calls (MuJoCo's obj->vertindex).

  Follows MuJoCo's native support functions (mjc_*Support). ``shrunk`` (bool, static or traced):
  the shallow phase, in which a sphere is its centre and a capsule its axis segment.
  """
  pos, mat, size, kind = g.pos, g.mat, g.size, g.kind
  ld = d @ mat                                         # (m, 3) directions in the geom frame
  up = ld[:, 2] >= 0
  zero = jnp.zeros_like(ld[:, 0])
  half = jnp.where(up, size[1], -size[1])
  out = {}

  def local(tmp):
    return tmp @ mat.T + pos

  if _is(kind, SPHERE) is not False:
    out[SPHERE] = _sel(shrunk, jnp.broadcast_to(pos, d.shape), size[0] * d + pos)
  if _is(kind, CAPSULE) is not False:
    seg = jnp.stack([zero, zero, half], axis=1)
    out[CAPSULE] = local(_sel(shrunk, seg, ld * size[0] + seg))
  if _is(kind, ELLIPSOID) is not False:
    tmp = ld * size
    norm = jnp.sqrt(_dot(tmp, tmp))
    ok = norm >= MINVAL
    scaled = tmp * ((1 / jnp.where(ok, norm, 1.0))[:, None] * size)
    out[ELLIPSOID] = local(_where_vec(ok, scaled, jnp.stack([zero + size[0], zero, zero], 1)))
  if _is(kind, CYLINDER) is not False:
    nxy = ld[:, 0] * ld[:, 0] + ld[:, 1] * ld[:, 1]
    ok = nxy > MINVAL * MINVAL
    scale = jnp.where(ok, size[0] / jnp.sqrt(jnp.where(ok, nxy, 1.0)), 0.0)
    out[CYLINDER] = local(jnp.stack([ld[:, 0] * scale, ld[:, 1] * scale, half], axis=1))
  if _is(kind, BOX) is not False:
    out[BOX] = local(jnp.where(ld >= 0, size, -size))
  new_vidx = vidx
  if _is(kind, MESH) is not False:
    dots = ld @ g.verts.T                              # (m, nv)
    best = jnp.argmax(dots, axis=1).astype(jnp.int32)  # first maximum, as the strict > scan
    top = jnp.max(dots, axis=1)
    idx = []
    prev = vidx
    for i in range(d.shape[0]):                        # warm start chains through the calls
      start = jnp.where(prev >= 0, dots[i, jnp.maximum(prev, 0)], -FLT_MAX)
      prev = jnp.where(top[i] > start, best[i], jnp.maximum(prev, 0))
      idx.append(prev)
    out[MESH] = local(g.verts[jnp.stack(idx)])
    new_vidx = _sel(_is(kind, MESH), prev, vidx)
  if _static(kind):
    return out[int(kind)], new_vidx
  res = jnp.zeros_like(d)
  for t, v in out.items():
    res = jnp.where(kind == t, v, res)
  return res, new_vidx


def _support(g1, g2, d, vidx, shrunk=False, margins=None):
  """Support of the Minkowski difference for directions d (m, 3): (vert, vert1, vert2) (m, 3)
  each and the warm-start indices (2,). vert1 = S_1(d) + d margin1 / 2, vert2 = S_2(-d) -
  d margin2 / 2 (each margin only when > 0), as MuJoCo's support(). ``margins`` overrides the
  geoms' (m1, m2)."""
  m1, m2 = (g1.margin, g2.margin) if margins is None else margins
  s1, i1 = _support_geom(g1, d, vidx[0], shrunk)
  s2, i2 = _support_geom(g2, -d, vidx[1], shrunk)
  s1 = s1 + jnp.where(m1 > 0, d * (0.5 * m1), 0.0)
  s2 = s2 + jnp.where(m2 > 0, -d * (0.5 * m2), 0.0)
  return s1 - s2, s1, s2, jnp.stack([i1, i2])


# ---------------------------------------------------------------------------------------------
# GJK's distance subalgorithm (Montanari et al. 2017, as in MuJoCo), batched over leading axes

def _project_origin_line(a, b):
  """Origin projected onto the line through a, b (projectOriginLine)."""
  diff = b - a
  scl = -_dot(b, diff) / _den(_dot(diff, diff))
  return b + scl[..., None] * diff


def _project_origin_plane(a, b, c):
  """Origin projected onto the plane through a, b, c: (failed, point) (projectOriginPlane).

  Three normals are tried in MuJoCo's order: a zero normal fails; a squared norm <= MINVAL or a
  plane through the origin moves on to the next formula; the third is used as it is.
  """
  d21, d31, d32 = b - a, c - a, c - b
  n = jnp.stack([_cross(d32, d21), _cross(d21, d31), _cross(d31, d32)], axis=-2)
  v = jnp.stack([b, a, c], axis=-2)
  nv, nn = _dot(n, v), _dot(n, n)                     # (..., 3)
  zero = nn == 0
  good = ~zero & (nv != 0) & (nn > MINVAL)
  proj = n * (nv / _den(nn))[..., None]
  z0, z1, g0, g1 = zero[..., 0], zero[..., 1], good[..., 0], good[..., 1]
  failed = z0 | (~g0 & z1)
  res = _where_vec(g0, proj[..., 0, :], _where_vec(g1, proj[..., 1, :], proj[..., 2, :]))
  return failed, res


def _s1d(a, b):
  """Barycentric coordinates (..., 2) of the point of segment ab nearest the origin (S1D)."""
  p = _project_origin_line(a, b)
  mu = a - b
  # axis of largest |mu|, the last one on ties (MuJoCo's >= scan)
  sel1 = jnp.abs(mu[..., 1]) >= jnp.abs(mu[..., 0])
  mu01 = jnp.where(sel1, mu[..., 1], mu[..., 0])
  sel2 = jnp.abs(mu[..., 2]) >= jnp.abs(mu01)
  mu_max = jnp.where(sel2, mu[..., 2], mu01)

  def pick(v):
    return jnp.where(sel2, v[..., 2], jnp.where(sel1, v[..., 1], v[..., 0]))

  pi = pick(p)
  c1 = pi - pick(b)
  c2 = pick(a) - pi
  inside = _same_sign(mu_max, c1) & _same_sign(mu_max, c2)
  den = jnp.where(inside, mu_max, 1.0)
  return jnp.stack([jnp.where(inside, c1 / den, 0.0), jnp.where(inside, c2 / den, 1.0)], -1)


def _tri_coords(a, b, c, p):
  """(M_max, cofactors (..., 3)) of point p in triangle abc (S2D / triAffineCoord): the
  triangle's largest 2D projection (minors M_14, M_24, M_34; first on ties) and the signed areas
  of (p, b, c), (p, c, a), (p, a, b) in it."""
  def m(i, j):
    return (b[..., i] * c[..., j] - b[..., j] * c[..., i] - a[..., i] * c[..., j]
            + a[..., j] * c[..., i] + a[..., i] * b[..., j] - a[..., j] * b[..., i])
  m14, m24, m34 = m(1, 2), m(0, 2), m(0, 1)
  mu1, mu2, mu3 = jnp.abs(m14), jnp.abs(m24), jnp.abs(m34)
  k0 = (mu1 >= mu2) & (mu1 >= mu3)
  k2 = ~k0 & ~(mu2 >= mu3)
  mmax = jnp.where(k0, m14, jnp.where(k2, m34, m24))

  def xy(v):   # kept axes: (1, 2), (0, 2) or (0, 1)
    return jnp.where(k0, v[..., 1], v[..., 0]), jnp.where(k2, v[..., 1], v[..., 2])

  (px, py), (ax, ay), (bx, by), (cx, cy) = xy(p), xy(a), xy(b), xy(c)

  def area(ux, uy, wx, wy):
    return px * uy + py * wx + ux * wy - px * wy - py * ux - wx * uy

  return mmax, jnp.stack([area(bx, by, cx, cy), area(cx, cy, ax, ay), area(ax, ay, bx, by)], -1)


def _s2d(a, b, c):
  """Barycentric coordinates (..., 3) of the point of triangle abc nearest the origin (S2D), and
  those of edge ab alone (..., 2) (the 2-simplex case)."""
  failed, p = _project_origin_plane(a, b, c)
  mmax, cof = _tri_coords(a, b, c, p)
  comp = _same_sign(mmax[..., None], cof)
  lam_in = cof / _den(mmax)[..., None]
  # outside: nearest of the edges opposite the failing vertices, first on ties
  ea = jnp.stack([b, a, a], axis=-2)
  eb = jnp.stack([c, c, b], axis=-2)
  le = _s1d(ea, eb)                                          # (..., 3, 2)
  pts = le[..., :1] * ea + le[..., 1:] * eb
  dd = jnp.where(comp, jnp.inf, _dot(pts, pts))
  e = jnp.argmin(dd, axis=-1)
  e0, e1, e2 = e == 0, e == 1, e == 2
  zero = jnp.zeros_like(mmax)
  lam_out = jnp.stack([
      jnp.where(e1, le[..., 1, 0], jnp.where(e2, le[..., 2, 0], zero)),
      jnp.where(e0, le[..., 0, 0], jnp.where(e2, le[..., 2, 1], zero)),
      jnp.where(e0, le[..., 0, 1], jnp.where(e1, le[..., 1, 1], zero))], -1)
  lam_ab = le[..., 2, :]
  lam_fail = jnp.concatenate([lam_ab, zero[..., None]], -1)
  lam = jnp.where(failed[..., None], lam_fail,
                  jnp.where(jnp.all(comp, -1)[..., None], lam_in, lam_out))
  return lam, lam_ab


# the faces of a tetrahedron in S3D's order (vertex i left out)
_TET_FACES = np.array([[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2]], np.int32)


def _subdistance(n, s):
  """Barycentric coordinates (4,) of the point of the n-simplex s[:n] (4, 3) nearest the origin
  (S3D, S2D, S1D; unused entries 0)."""
  f = _TET_FACES
  lam3, lam_ab = _s2d(s[f[:, 0]], s[f[:, 1]], s[f[:, 2]])   # (4, 3), (4, 2)
  c = jnp.stack([-_det3(s[1], s[2], s[3]), _det3(s[0], s[2], s[3]),
                 -_det3(s[0], s[1], s[3]), _det3(s[0], s[1], s[2])])
  mdet = jnp.sum(c)
  comp = _same_sign(mdet, c)
  pts = jnp.einsum('fk,fkd->fd', lam3, s[f])
  dd = jnp.where(comp, jnp.inf, _dot(pts, pts))
  i = jnp.argmin(dd)
  # scatter face i's coordinates into the tetrahedron's (static face tables, one-hot select)
  onehot = jnp.asarray(np.eye(4)[f], s.dtype)               # (4 faces, 3, 4)
  lam_out = jnp.einsum('k,kj->j', lam3[i], onehot[i])
  lam4 = jnp.where(jnp.all(comp), c / _den(mdet), lam_out)
  zero = jnp.zeros((), s.dtype)
  lam3_ = jnp.stack([lam3[3, 0], lam3[3, 1], lam3[3, 2], zero])
  lam2_ = jnp.stack([lam_ab[3, 0], lam_ab[3, 1], zero, zero])
  lam1_ = jnp.stack([zero + 1, zero, zero, zero])
  return jnp.where(n == 4, lam4, jnp.where(n == 3, lam3_, jnp.where(n == 2, lam2_, lam1_)))


# ---------------------------------------------------------------------------------------------
# GJK

class _GjkState(NamedTuple):
  k: jax.Array       # iteration counter (shared with gjkIntersect)
  n: jax.Array       # simplex size
  x: jax.Array       # (3,) current point of the Minkowski difference
  lam: jax.Array     # (4,) its barycentric coordinates
  sv: jax.Array      # (4, 3) simplex: Minkowski vertices
  s1: jax.Array      # (4, 3) their points on geom 1
  s2: jax.Array      # (4, 3) and on geom 2
  vidx: jax.Array    # (2,) mesh warm-start indices
  mode: jax.Array    # 0 GJK, 1 gjkIntersect, 2 finished
  backup: jax.Array  # gjkIntersect still allowed
  end: jax.Array     # 0 converged / stopped, 1 separated, 2 intersecting (origin enclosed)
  iv: jax.Array      # (4, 3) gjkIntersect's tetrahedron (vertices, geom 1, geom 2)
  i1: jax.Array
  i2: jax.Array
  perm: jax.Array    # (4,) its vertex order
  phase: jax.Array   # 0 shallow (distance) run, 1 intersection run, 2 done (shallow contact)
  sh: jax.Array      # (7,) shallow run's result: distance, witness 1, witness 2


class _GjkResult(NamedTuple):
  dist: jax.Array    # () intersection run: 0 intersecting, MAXVAL separated, else distance
  n: jax.Array       # () simplex size
  sv: jax.Array      # (4, 3) simplex
  s1: jax.Array
  s2: jax.Array
  vidx: jax.Array
  shallow: jax.Array  # () bool: the shallow run decided (no intersection run)
  sh_dist: jax.Array  # () its distance between the shrunk geoms
  sh_x1: jax.Array    # (3,) and witness points
  sh_x2: jax.Array


# gjkIntersect's faces of the tetrahedron (positions in its vertex order)
_INT_FACES = np.array([[2, 1, 3], [0, 2, 3], [1, 0, 3], [0, 1, 2]], np.int32)


def _signed_distance(a, b, c):
  """Normals (..., 3) of faces abc ((c - a) x (b - a), normalized when the squared norm lies in
  (MINVAL^2, MAXVAL^2)) and the origin's signed distances (MAXVAL otherwise): signedDistance."""
  n = _cross(c - a, b - a)
  nn = _dot(n, n)
  ok = (nn > MINVAL * MINVAL) & (nn < MAXVAL * MAXVAL)
  n = _where_vec(ok, n / jnp.sqrt(jnp.where(ok, nn, 1.0))[..., None], n)
  return n, jnp.where(ok, _dot(n, a), MAXVAL)


def _gjk(g1, g2, eps, tol, kmax, shrink, cutoff, hmargins):
  """MuJoCo's gjk() runs of mjc_ccd, both in one loop (see the module docstring).

  With ``shrink`` (bool, static or traced: geom 1 or 2 is a sphere / capsule) a shallow run comes
  first: shrunk geoms (margins ``hmargins``), distance mode (never calls gjkIntersect; stops as
  separated once the distance provably exceeds ``cutoff``). If its distance exceeds ``tol`` it
  decides the contact; otherwise the loop restarts from the centres for the intersection run:
  full geoms, stops as separated at the first separating support plane, hands a tetrahedron to
  gjkIntersect. The mesh warm-start indices carry over, as in MuJoCo.

  One support call per step: part A (new support point, stopping tests) or one gjkIntersect step,
  then part B (nearest simplex point) when A continues or gjkIntersect gives up. Entering
  gjkIntersect takes effect at the next step (same iteration count), so ``kmax + 3`` steps cover
  a run of MuJoCo's ``kmax`` iterations.
  """
  x0 = g1.pos - g2.pos
  dt = x0.dtype
  z = jnp.zeros((4, 3), dt)
  two = shrink if _static(shrink) else True          # static: does a shallow run exist at all
  phase0 = jnp.where(jnp.asarray(shrink), 0, 1).astype(jnp.int32)

  def fresh(phase, vidx):
    return _GjkState(
        k=jnp.zeros((), jnp.int32), n=jnp.zeros((), jnp.int32), x=x0,
        lam=jnp.zeros(4, dt).at[0].set(1), sv=z, s1=z, s2=z, vidx=vidx,
        mode=jnp.zeros((), jnp.int32), backup=phase == 1, end=jnp.zeros((), jnp.int32),
        iv=z, i1=z, i2=z, perm=jnp.arange(4, dtype=jnp.int32), phase=phase,
        sh=jnp.zeros(7, dt))

  st = fresh(phase0, jnp.full(2, -1, jnp.int32))
  f = _INT_FACES

  def step(_, st):
    shallow_run = st.phase == 0
    # gjkIntersect's closest face of its tetrahedron
    pv = st.iv[st.perm]
    nrm, dist = _signed_distance(pv[f[:, 0]], pv[f[:, 1]], pv[f[:, 2]])
    i = jnp.where(dist[0] < dist[1], 0, 1)
    j = jnp.where(dist[2] < dist[3], 2, 3)
    idx = jnp.where(dist[i] < dist[j], i, j)
    run_i = st.mode == 1
    # the one support call: along -x (GJK) or the closest face's normal (gjkIntersect)
    xx = _dot(st.x, st.x)
    big = xx > MINVAL * MINVAL
    dneg = jnp.where(big, st.x * (1 / jnp.sqrt(jnp.where(big, xx, 1.0))), _xaxis(st.x))
    d = jnp.where(run_i, nrm[idx], -dneg)
    if two is False:
      v, v1, v2, vidx = _support(g1, g2, d[None], st.vidx)
    else:
      margins = (jnp.where(shallow_run, hmargins[0], g1.margin),
                 jnp.where(shallow_run, hmargins[1], g2.margin))
      v, v1, v2, vidx = _support(g1, g2, d[None], st.vidx, shallow_run, margins)
    v, v1, v2 = v[0], v1[0], v2[0]

    # -- part A: stopping tests, hand-over to gjkIntersect
    run_a = (st.mode == 0) & (st.k < kmax) & (st.phase < 2)
    conv = 2 * _dot(st.x, st.x - v) < eps
    vs = _dot(st.x, v)
    sep = vs > 0
    if two is not False:
      sep = sep & (~shallow_run | (vs * vs / _den(xx) >= cutoff * cutoff))
    a_conv = run_a & conv
    a_sep = run_a & ~conv & sep
    a_enter = run_a & ~conv & ~sep & (st.n == 3) & st.backup
    do_b = run_a & ~conv & ~sep & ~a_enter
    sv = st.sv.at[st.n].set(v)
    s1 = st.s1.at[st.n].set(v1)
    s2 = st.s2.at[st.n].set(v2)

    # -- one gjkIntersect step
    i_fail = run_i & ((st.k >= kmax) | jnp.any(dist == 0))   # inconclusive: back to GJK
    inside = dist[idx] > 0
    i_hit = run_i & ~i_fail & inside
    i_walk = run_i & ~i_fail & ~inside
    i_miss = i_walk & (_dot(nrm[idx], v) < 0)
    i_next = i_walk & ~i_miss
    slot = st.perm[idx]
    a1, a2 = (idx + 1) & 3, (idx + 2) & 3
    perm_sw = st.perm.at[a1].set(st.perm[a2]).at[a2].set(st.perm[a1])

    st = st._replace(
        k=st.k + i_next.astype(jnp.int32), n=jnp.where(a_conv & (st.k == 0), 1,
                                                       jnp.where(i_hit, 4, st.n)),
        sv=jnp.where(run_a, sv, jnp.where(i_hit, pv, st.sv)),
        s1=jnp.where(run_a, s1, jnp.where(i_hit, st.i1[st.perm], st.s1)),
        s2=jnp.where(run_a, s2, jnp.where(i_hit, st.i2[st.perm], st.s2)),
        vidx=jnp.where(run_a | i_walk, vidx, st.vidx),
        mode=jnp.where(a_conv | a_sep | i_hit | i_miss, 2,
                       jnp.where(a_enter, 1, jnp.where(i_fail, 0, st.mode))),
        backup=st.backup & ~i_fail,
        end=jnp.where(a_sep | i_miss, 1, jnp.where(i_hit, 2, st.end)),
        iv=jnp.where(a_enter, sv, jnp.where(i_walk, st.iv.at[slot].set(v), st.iv)),
        i1=jnp.where(a_enter, s1, jnp.where(i_walk, st.i1.at[slot].set(v1), st.i1)),
        i2=jnp.where(a_enter, s2, jnp.where(i_walk, st.i2.at[slot].set(v2), st.i2)),
        perm=jnp.where(a_enter, jnp.arange(4, dtype=jnp.int32),
                       jnp.where(i_next, perm_sw, st.perm)))
    do_b = do_b | i_fail

    # -- part B: nearest point of the simplex, drop unused vertices, convergence
    lam = _subdistance(st.n + 1, st.sv)
    keep = lam != 0
    order = jnp.argsort(~keep, stable=True)
    n_new = jnp.sum(keep).astype(jnp.int32)
    lam = lam[order]
    sv, s1, s2 = st.sv[order], st.s1[order], st.s2[order]
    x_next = lam @ sv
    same = jnp.all(jnp.abs(x_next - st.x) < MINVAL)
    b_stop = do_b & (same | (n_new == 4))      # converged, or origin enclosed (x kept)
    b_go = do_b & ~b_stop
    st = st._replace(
        lam=jnp.where(do_b, lam, st.lam), sv=jnp.where(do_b, sv, st.sv),
        s1=jnp.where(do_b, s1, st.s1), s2=jnp.where(do_b, s2, st.s2),
        n=jnp.where(do_b, n_new, st.n), x=jnp.where(b_go, x_next, st.x),
        k=st.k + b_go.astype(jnp.int32), mode=jnp.where(b_stop, 2, st.mode))
    if two is False:
      return st

    # end of the shallow run: keep its result; a distance above tol decides, else restart
    ended = shallow_run & ((st.mode == 2) | (st.k >= kmax))
    hdist = jnp.where(st.end == 1, MAXVAL, jnp.sqrt(_dot(st.x, st.x)))
    sh = jnp.concatenate([hdist[None], st.lam @ st.s1, st.lam @ st.s2])
    restart = fresh(jnp.where(hdist > tol, 2, 1).astype(jnp.int32), st.vidx)._replace(sh=sh)
    return jax.tree_util.tree_map(lambda a, b: jnp.where(ended, a, b), restart, st)

  st = lax.fori_loop(0, kmax + 3 + (kmax + 1 if two is not False else 0), step, st)
  dist = jnp.where(st.end == 1, MAXVAL, jnp.where(st.end == 2, 0.0, jnp.sqrt(_dot(st.x, st.x))))
  return _GjkResult(dist=dist.astype(dt), n=jnp.where(st.end == 1, 0, st.n), sv=st.sv, s1=st.s1,
                    s2=st.s2, vidx=st.vidx, shallow=st.phase == 2, sh_dist=st.sh[0],
                    sh_x1=st.sh[1:4], sh_x2=st.sh[4:7])


# ---------------------------------------------------------------------------------------------
# EPA: initial polytopes

class _Poly(NamedTuple):
  v: jax.Array       # (NV, 3) Minkowski vertices
  v1: jax.Array      # (NV, 3) their points on geom 1
  v2: jax.Array      # (NV, 3) and on geom 2
  nv: jax.Array      # () vertices in use
  fvert: jax.Array   # (NF, 3) int face vertices
  fadj: jax.Array    # (NF, 3) int adjacent face across edges (v0 v1), (v1 v2), (v2 v0)
  fp: jax.Array      # (NF, 3) origin projected on the face plane
  fd: jax.Array      # (NF,) its norm (the face distance)
  fidx: jax.Array    # (NF,) int position in the map; -1 not in the map; -2 deleted / free
  fmap: jax.Array    # (NF,) int the map: face slots, MuJoCo's order
  nmap: jax.Array    # () faces in the map


def _face_proj(v, tris):
  """attachFace's projection for faces (a, b, c) (m, 3): projectOriginPlane(v[c], v[b], v[a]).
  Returns (failed (m,), proj (m, 3), dist (m,))."""
  failed, p = _project_origin_plane(v[tris[:, 2]], v[tris[:, 1]], v[tris[:, 0]])
  return failed, p, jnp.sqrt(_dot(p, p))


def _new_poly(verts, v1, v2, tris, adjs, nvmax, nfmax):
  """A polytope with the given vertices (k, 3) and faces (static tables), all faces in the map
  in order. Returns (poly, small (nf,) bool: attachFace < MINVAL, in attachment order)."""
  dt = verts.dtype
  k = verts.shape[0]
  pad = jnp.zeros((nvmax - k, 3), dt)
  tris = np.asarray(tris, np.int32)
  nf = tris.shape[0]
  failed, p, d = _face_proj(verts, tris)
  r = np.arange(nf, dtype=np.int32)
  padf = nfmax - nf
  poly = _Poly(
      v=jnp.concatenate([verts, pad]), v1=jnp.concatenate([v1, pad]),
      v2=jnp.concatenate([v2, pad]), nv=jnp.asarray(k, jnp.int32),
      fvert=jnp.asarray(np.concatenate([tris, np.zeros((padf, 3), np.int32)])),
      fadj=jnp.asarray(np.concatenate([np.asarray(adjs, np.int32), np.zeros((padf, 3), np.int32)])),
      fp=jnp.concatenate([p, jnp.zeros((padf, 3), dt)]),
      fd=jnp.concatenate([d, jnp.zeros(padf, dt)]),
      fidx=jnp.asarray(np.concatenate([r, np.full(padf, -2, np.int32)])),
      fmap=jnp.asarray(np.concatenate([r, np.zeros(padf, np.int32)])),
      nmap=jnp.asarray(nf, jnp.int32))
  return poly, failed | (d < MINVAL)


def _epa_dir(d, dnorm):
  """epaSupport's direction: d / dnorm, or the x axis when dnorm <= MINVAL."""
  ok = dnorm > MINVAL
  return _where_vec(ok, d / jnp.where(ok, dnorm, 1.0)[..., None], _xaxis(d))


def _test_tetra(p):
  """True if the origin is inside the tetrahedron p (4, 3) (testTetra's four sameSide tests)."""
  q = p[np.array([[0, 1, 2, 3], [1, 2, 3, 0], [2, 3, 0, 1], [3, 0, 1, 2]])]  # (4, 4, 3)
  n = _cross(q[:, 1] - q[:, 0], q[:, 2] - q[:, 0])
  d1 = _dot(n, q[:, 3] - q[:, 0])
  d2 = _dot(n, -q[:, 0])
  return jnp.all(((d1 > 0) & (d2 > 0)) | ((d1 < 0) & (d2 < 0)))


def _tri_affine(a, b, c, p):
  """Affine coordinates (..., 3) of p in triangle abc (triAffineCoord)."""
  mmax, cof = _tri_coords(a, b, c, p)
  return cof / _den(mmax)[..., None]


def _rot120(axis):
  """Rotation matrix of 120 degrees about ``axis`` (MuJoCo's rotmat, with its sin constant)."""
  n = jnp.sqrt(_dot(axis, axis))
  u = axis / _den(n)
  s, c = 0.86602540378, -0.5
  uu = u[:, None] * u[None, :] * (1 - c)
  skew = jnp.stack([jnp.stack([0 * u[0], -u[2], u[1]]), jnp.stack([u[2], 0 * u[0], -u[0]]),
                    jnp.stack([-u[1], u[0], 0 * u[0]])])
  return uu + c * jnp.eye(3, dtype=axis.dtype) + s * skew


# hexahedra of polytope2 and polytope3 and the tetrahedron of polytope4: faces, adjacency
_P2_FACES = np.array([[0, 2, 3], [0, 4, 2], [0, 3, 4], [1, 3, 2], [1, 2, 4], [1, 4, 3]], np.int32)
_P3_FACES = np.array([[4, 0, 1], [4, 2, 0], [4, 1, 2], [3, 1, 0], [3, 0, 2], [3, 2, 1]], np.int32)
_HEX_ADJ = np.array([[1, 3, 2], [2, 4, 0], [0, 5, 1], [5, 0, 4], [3, 1, 5], [4, 2, 3]], np.int32)
_P4_FACES = np.array([[0, 1, 2], [0, 3, 1], [0, 2, 3], [3, 2, 1]], np.int32)
_P4_ADJ = np.array([[1, 3, 2], [2, 3, 0], [0, 3, 1], [2, 0, 1]], np.int32)


def _polytope(g1, g2, gjk, nvmax, nfmax):
  """MuJoCo's polytope2 / polytope3 / polytope4 for GJK's final simplex.

  A segment gets three support points at 120 degrees around it (hexahedron), a triangle the
  support points along both of its normals (hexahedron), a tetrahedron is used as is. If a face of
  polytope2's hexahedron or of the tetrahedron passes (numerically) through the origin, polytope3
  is built on that face instead. Returns (poly, ok, vidx).
  """
  n = gjk.n
  sv, s1, s2 = gjk.sv, gjk.s1, gjk.s2
  vidx = gjk.vidx

  # polytope4: the tetrahedron
  p4, small4 = _new_poly(sv, s1, s2, _P4_FACES, _P4_ADJ, nvmax, nfmax)
  bad4 = jnp.argmax(small4)
  ok4 = _test_tetra(sv)

  # polytope2: three support points around the segment
  diff = sv[1] - sv[0]
  adiff = jnp.abs(diff)
  e = jnp.where(adiff[0] <= jnp.minimum(adiff[1], adiff[2]), 0,
                jnp.where(adiff[1] <= adiff[2], 1, 2))     # first smallest component
  d1 = _cross(jnp.zeros_like(diff).at[e].set(1), diff)
  rot = _rot120(diff)
  d2 = rot @ d1
  d3 = rot @ d2
  dirs = jnp.stack([d1, d2, d3])
  w, w1, w2, vidx2 = _support(g1, g2, _epa_dir(dirs, jnp.sqrt(_dot(dirs, dirs))), vidx)
  p2, small2 = _new_poly(jnp.concatenate([sv[:2], w]), jnp.concatenate([s1[:2], w1]),
                         jnp.concatenate([s2[:2], w2]), _P2_FACES, _HEX_ADJ, nvmax, nfmax)
  bad2 = jnp.argmax(small2)

  # polytope3 on GJK's triangle, or on the face that failed above
  is2, is3 = n == 2, n == 3
  use3 = is3 | (is2 & jnp.any(small2)) | (~is2 & ~is3 & jnp.any(small4))
  tri = jnp.where(is2, jnp.asarray(_P2_FACES)[bad2], jnp.asarray(_P4_FACES)[bad4])
  t_v = jnp.where(is3, sv[:3], jnp.where(is2, p2.v[tri], p4.v[tri]))
  t_1 = jnp.where(is3, s1[:3], jnp.where(is2, p2.v1[tri], p4.v1[tri]))
  t_2 = jnp.where(is3, s2[:3], jnp.where(is2, p2.v2[tri], p4.v2[tri]))
  nrm = _cross(t_v[1] - t_v[0], t_v[2] - t_v[0])
  nnorm = jnp.sqrt(_dot(nrm, nrm))
  dirs = _epa_dir(jnp.stack([-nrm, nrm]), nnorm)         # index 3: along -n, 4: along +n
  u, u1, u2, vidx3 = _support(g1, g2, dirs, jnp.where(is2, vidx2, vidx))
  p3, small3 = _new_poly(jnp.concatenate([t_v, u]), jnp.concatenate([t_1, u1]),
                         jnp.concatenate([t_2, u2]), _P3_FACES, _HEX_ADJ, nvmax, nfmax)
  lam = _tri_affine(t_v[0], t_v[1], t_v[2], u)             # u[1] (+n) tested first, as MuJoCo
  pr = lam @ t_v
  on_tri = jnp.all(lam >= 0, axis=-1) & (jnp.sqrt(_dot(pr - u, pr - u)) < MINVAL)
  ok3 = (nnorm >= MINVAL) & ~jnp.any(on_tri) & ~jnp.any(small3)

  ok = jnp.where(use3, ok3, jnp.where(is2, True, ok4))
  poly = jax.tree_util.tree_map(lambda a, b, c: jnp.where(use3, a, jnp.where(is2, b, c)),
                                p3, p2, p4)
  vidx = jnp.where(use3, vidx3, jnp.where(is2, vidx2, vidx))
  return poly, ok, vidx


# ---------------------------------------------------------------------------------------------
# EPA: expansion

def _delete_face(poly, f, on):
  """deleteFace (when ``on``): the map's last entry takes the face's map position."""
  nf = poly.fidx.shape[0]
  idx = poly.fidx[f]
  inmap = on & (idx >= 0)
  last = poly.fmap[jnp.maximum(poly.nmap - 1, 0)]
  fmap = poly.fmap.at[jnp.where(inmap, idx, nf)].set(last, mode='drop')
  fidx = poly.fidx.at[jnp.where(inmap, last, nf)].set(idx, mode='drop')
  fidx = fidx.at[jnp.where(on, f, nf)].set(-2, mode='drop')
  return poly._replace(fmap=fmap, fidx=fidx, nmap=poly.nmap - inmap.astype(jnp.int32))


class _Dfs(NamedTuple):
  fmap: jax.Array   # the polytope's map and face states, updated by deletions
  fidx: jax.Array
  nmap: jax.Array
  sf: jax.Array     # (S,) stack: face slot
  s0: jax.Array     # (S,) its first edge to visit
  sj: jax.Array     # (S,) edges visited (a face on the stack has 3 - (S != 0) edges to visit)
  sc: jax.Array     # (S,) edges to visit: 3 for the start face, 2 for the others
  sp: jax.Array     # () stack size
  hf: jax.Array     # (S,) horizon: face slot
  he: jax.Array     # (S,) horizon: edge of that face
  ne: jax.Array     # () horizon edges
  over: jax.Array   # () bool: ran out of stack / steps


def _horizon(poly, root, w, nsteps):
  """MuJoCo's horizon(): deletes the faces visible from w that are reachable from face ``root``
  and lists the horizon edges in the order its depth-first recursion finds them.

  Explicit stack; each step visits one edge of the top face: a deleted neighbour is skipped, a
  visible one (fp . w >= fd^2) is deleted and pushed (its two other edges come next), an
  invisible one gives a horizon edge (neighbour, edge index in it). Finished faces are popped.
  """
  s = nsteps
  zi = jnp.zeros(s, jnp.int32)
  poly = _delete_face(poly, root, jnp.asarray(True))
  st = _Dfs(fmap=poly.fmap, fidx=poly.fidx, nmap=poly.nmap, sf=zi.at[0].set(root), s0=zi,
            sj=zi, sc=zi.at[0].set(3), sp=jnp.asarray(1, jnp.int32), hf=zi, he=zi,
            ne=jnp.zeros((), jnp.int32), over=jnp.zeros((), bool))
  rng = jnp.arange(s)
  # visibility of every face from w, and its vertices / adjacency, are fixed during the search
  visible_all = _dot(poly.fp, w) >= poly.fd * poly.fd

  def step(_, st):
    active = st.sp > 0
    top = jnp.maximum(st.sp - 1, 0)
    f = st.sf[top]
    i = (st.s0[top] + st.sj[top]) % 3
    a = poly.fadj[f, i]
    vert = poly.fvert[f, (i + 1) % 3]
    av = poly.fvert[a]
    edge = jnp.where(av[0] == vert, 0, jnp.where(av[1] == vert, 1, 2)).astype(jnp.int32)
    alive = st.fidx[a] > -2
    push = active & alive & visible_all[a]
    add = active & alive & ~visible_all[a]
    sub = _delete_face(poly._replace(fmap=st.fmap, fidx=st.fidx, nmap=st.nmap), a, push)
    sj = st.sj.at[top].add(active.astype(jnp.int32))
    at = jnp.where(push, st.sp, s)
    sf = st.sf.at[at].set(a, mode='drop')
    s0 = st.s0.at[at].set(edge + 1, mode='drop')
    sc = st.sc.at[at].set(2, mode='drop')
    sj = sj.at[at].set(0, mode='drop')
    sp = st.sp + push.astype(jnp.int32)
    ah = jnp.where(add, st.ne, s)
    over = st.over | (push & (st.sp >= s)) | (add & (st.ne >= s))
    # pop finished faces from the top
    open_ = (rng < sp) & (sj < sc)
    sp = jnp.where(jnp.any(open_), s - jnp.argmax(open_[::-1]), 0).astype(jnp.int32)
    return _Dfs(sub.fmap, sub.fidx, sub.nmap, sf, s0, sj, sc, sp,
                st.hf.at[ah].set(a, mode='drop'), st.he.at[ah].set(edge, mode='drop'),
                st.ne + add.astype(jnp.int32), over)

  st = lax.fori_loop(0, nsteps, step, st)
  poly = poly._replace(fmap=st.fmap, fidx=st.fidx, nmap=st.nmap)
  return poly, st.hf, st.he, st.ne, st.over | (st.sp > 0)


class _Face(NamedTuple):
  vert: jax.Array   # (3,) int
  p: jax.Array      # (3,)
  d: jax.Array      # ()


class _EpaState(NamedTuple):
  poly: _Poly
  face: _Face       # the face closest to the origin (a copy: its slot may be reused)
  upper: jax.Array
  done: jax.Array
  fail: jax.Array
  vidx: jax.Array


def _epa(g1, g2, poly, vidx, tol, kmax, nsteps, discrete=False):
  """MuJoCo's epa(): returns (face, fail, poly).

  ``discrete`` (bool () or Python False): the two rules MuJoCo 3.3.3's epa() adds for a
  discrete pair, which hfield.py applies to its prisms (a prism against a box or mesh, zero
  margin): the stopping tolerance is MINVAL instead of ccd_tolerance, and the expansion stops
  when the new support point repeats a polytope vertex, judged by the support vertex indices.
  The prism's support never records an index, so the test is whether geom 2's support vertex
  (a box corner or mesh vertex) is already one of the polytope's: compared by the point on
  geom 2, which is computed identically for the same vertex."""
  dt = poly.v.dtype
  nf = poly.fidx.shape[0]
  if discrete is not False:
    tol = jnp.where(discrete, MINVAL, tol).astype(dt)
  face0 = _Face(jnp.zeros(3, jnp.int32), jnp.zeros(3, dt), jnp.zeros((), dt))
  st = _EpaState(poly, face0, jnp.asarray(FLT_MAX, dt), jnp.zeros((), bool),
                 jnp.zeros((), bool), vidx)
  rng_f = jnp.arange(nf)
  rng_h = jnp.arange(nsteps)

  def body(_, st):
    poly = st.poly
    run = ~st.done
    # closest face in the map, first on ties (none below FLT_MAX keeps the previous face)
    md = jnp.where(rng_f < poly.nmap, poly.fd[poly.fmap], jnp.inf)
    mi = jnp.argmin(md)
    lower = md[mi]
    found = lower < FLT_MAX
    f = poly.fmap[mi]
    cur = _Face(jnp.where(found, poly.fvert[f], st.face.vert),
                jnp.where(found, poly.fp[f], st.face.p), jnp.where(found, poly.fd[f], st.face.d))
    lower = jnp.where(found, lower, FLT_MAX)
    stale = lower > st.upper                  # keep the previous face and stop
    go = run & ~stale & (lower > 0)           # lower <= 0: origin on a face's plane, stop
    # support along the face normal, bounds
    v, v1, v2, vidx = _support(g1, g2, _epa_dir(cur.p, lower)[None], st.vidx)
    wi = poly.nv
    poly2 = poly._replace(v=poly.v.at[wi].set(v[0], mode='drop'),
                          v1=poly.v1.at[wi].set(v1[0], mode='drop'),
                          v2=poly.v2.at[wi].set(v2[0], mode='drop'), nv=wi + 1)
    upper = jnp.minimum(st.upper, _dot(cur.p, v[0]) / _den(lower))
    expand = go & ~(upper - lower < tol)
    if discrete is not False:
      seen = jnp.arange(poly.v.shape[0]) < wi
      expand = expand & ~(discrete & jnp.any(seen & jnp.all(poly.v2 == v2[0], axis=1)))
    # horizon, then one new face per horizon edge in the freed / free slots
    p3, hf, he, ne, over = _horizon(poly2, f, v[0], nsteps)
    act = rng_h < ne
    slot = nonzero_first(p3.fidx == -2, nsteps, nf)
    ne1 = jnp.maximum(ne, 1)
    e1 = p3.fvert[hf, he]
    e2 = p3.fvert[hf, (he + 1) % 3]
    tris = jnp.stack([jnp.broadcast_to(wi, (nsteps,)), e2, e1], axis=1)
    pfail, pp, pd = _face_proj(p3.v, tris)
    bad = jnp.any(act & (pfail | (pd == 0) | (slot >= nf)))
    into = act & (pd >= lower) & (pd <= upper)
    mpos = p3.nmap + cumsum_int(into) - 1
    tgt = jnp.where(act, slot, nf)
    fadj = p3.fadj.reshape(-1).at[jnp.where(act, hf * 3 + he, 3 * nf)].set(slot, mode='drop')
    adj_new = jnp.stack([slot[(rng_h - 1) % ne1], hf, slot[(rng_h + 1) % ne1]], axis=1)
    poly3 = p3._replace(
        fvert=p3.fvert.at[tgt].set(tris, mode='drop'),
        fadj=fadj.reshape(nf, 3).at[tgt].set(adj_new, mode='drop'),
        fp=p3.fp.at[tgt].set(pp, mode='drop'), fd=p3.fd.at[tgt].set(pd, mode='drop'),
        fidx=p3.fidx.at[tgt].set(jnp.where(into, mpos, -1), mode='drop'),
        fmap=p3.fmap.at[jnp.where(into, mpos, nf)].set(slot, mode='drop'),
        nmap=p3.nmap + jnp.sum(into).astype(jnp.int32))
    fail = expand & ((ne < 3) | over | bad)
    empty = expand & ~fail & (poly3.nmap == 0)

    # commit: the vertex is added whenever the support ran, the faces only when expanding
    new = jax.tree_util.tree_map(lambda a, b, c: jnp.where(expand, a, jnp.where(go, b, c)),
                                 poly3, poly2, poly)
    face = jax.tree_util.tree_map(lambda a, b: jnp.where(run & ~stale, a, b), cur, st.face)
    return _EpaState(poly=new, face=face, upper=jnp.where(go, upper, st.upper),
                     done=st.done | (run & ~expand) | fail | empty, fail=st.fail | fail,
                     vidx=jnp.where(go, vidx, st.vidx))

  st = lax.fori_loop(0, kmax, body, st)
  return st.face, st.fail, st.poly


def _epa_witness(poly, face):
  """Witness points (x1, x2) of the face's projection of the origin (epaWitness)."""
  tri = face.vert
  lam = _tri_affine(poly.v[tri[0]], poly.v[tri[1]], poly.v[tri[2]], face.p)
  return lam @ poly.v1[tri], lam @ poly.v2[tri]


# ---------------------------------------------------------------------------------------------
# mjc_ccd + mjc_CCDIteration for one pair

def _ccd(g1, g2, margin, tol, kmax, nsteps):
  """The search: (valid, dist, x1, x2) with dist MuJoCo's contact distance (margin + signed
  distance of the margin-inflated geoms) and x1, x2 the witness points on the inflated geoms."""
  dt = g1.pos.dtype
  nvmax = 5 + kmax
  nfmax = 2 * nvmax
  both_discrete = _is(g1.kind, BOX, MESH)
  if _static(both_discrete):
    both_discrete = both_discrete and _is(g2.kind, BOX, MESH)
  else:
    both_discrete = both_discrete & _is(g2.kind, BOX, MESH)
  eps = jnp.where(jnp.asarray(both_discrete) & (margin == 0), 0.0, tol * tol).astype(dt)

  shrink1, shrink2 = _is(g1.kind, SPHERE, CAPSULE), _is(g2.kind, SPHERE, CAPSULE)
  # shallow run: sphere -> centre, capsule -> segment, their radius + margin / 2 added afterwards
  fm1 = jnp.where(shrink1, g1.size[0] + 0.5 * g1.margin, 0.0).astype(dt)
  fm2 = jnp.where(shrink2, g2.size[0] + 0.5 * g2.margin, 0.0).astype(dt)
  hmargins = (jnp.where(shrink1, 0.0, g1.margin).astype(dt),
              jnp.where(shrink2, 0.0, g2.margin).astype(dt))
  g = _gjk(g1, g2, eps, tol, kmax, shrink1 | shrink2, fm1 + fm2, hmargins)
  poly, ok, vidx = _polytope(g1, g2, g, nvmax, nfmax)
  face, fail, poly = _epa(g1, g2, poly, vidx, tol, kmax, nsteps)
  x1, x2 = _epa_witness(poly, face)
  dist = -face.d
  valid = (g.dist <= tol) & (g.n > 1) & ok & ~fail & (dist < 0)
  # shallow contact: witness points pushed out by the radii along their difference
  nrm = _normalize3(g.sh_x2 - g.sh_x1)
  sdist = g.sh_dist - (fm1 + fm2)
  valid = jnp.where(g.shallow, sdist < 0, valid)
  dist = jnp.where(g.shallow, sdist, dist)
  x1 = jnp.where(g.shallow, g.sh_x1 + nrm * fm1, x1)
  x2 = jnp.where(g.shallow, g.sh_x2 - nrm * fm2, x2)
  finite = jnp.isfinite(dist) & jnp.all(jnp.isfinite(x1)) & jnp.all(jnp.isfinite(x2))
  return (valid & finite, margin + jnp.where(finite, dist, 0.0), jnp.where(finite, x1, g1.pos),
          jnp.where(finite, x2, g2.pos))


def _reattach(dist, x1, x2, normal, margin, pos1, mat1, pos2, mat2):
  """Straight-through gradients: forward values are the search's; derivatives move the witness
  points rigidly with their geoms, with dist = margin + n . (x2 - x1) at the fixed normal n."""
  sg = lax.stop_gradient
  w1 = mat1 @ (sg(mat1).T @ (x1 - sg(pos1))) + pos1
  w2 = mat2 @ (sg(mat2).T @ (x2 - sg(pos2))) + pos2
  ddist = margin + _dot(normal, w2 - w1)
  dpos = 0.5 * (w1 + w2)
  return dist + ddist - sg(ddist), 0.5 * (x1 + x2) + dpos - sg(dpos)


def collide(kind1, kind2, pos1, mat1, size1, pos2, mat2, size2, margin, verts1=None, verts2=None,
            *, tolerance=TOLERANCE, iterations=ITERATIONS):
  """mjc_Convex (native, single contact) for one pair: (valid, dist, pos, normal).

  kind1, kind2: geom types, Python ints or int32 () (then every support function is evaluated
  and selected, so one compiled function serves all pair types). verts1 / verts2 (nv, 3): mesh
  vertex sets (any shape (nv, 3) for other types). dist and pos carry envelope gradients.
  """
  if int(iterations) != iterations or iterations < 1:
    raise ValueError(f'ccd iterations must be a positive integer, got {iterations!r}')
  sg = lax.stop_gradient
  dt = pos1.dtype
  margin = jnp.asarray(margin, dt)

  def geom(kind, pos, mat, size, verts):
    if verts is None:
      if _is(kind, MESH) is True:
        raise ValueError('mesh geoms need their vertex set (verts)')
      verts = jnp.zeros((1, 3), dt)
    verts = jnp.asarray(verts, dt).reshape(-1, 3)
    kind = kind if _static(kind) else jnp.asarray(kind, jnp.int32)
    return _Geom(kind, sg(pos), sg(mat), sg(size), sg(verts), sg(margin))

  g1 = geom(kind1, pos1, mat1, size1, verts1)
  g2 = geom(kind2, pos2, mat2, size2, verts2)
  valid, dist, x1, x2 = jax.tree_util.tree_map(
      sg, _ccd(g1, g2, sg(margin), tolerance, int(iterations), HORIZON_STEPS))
  normal = _normalize3(x1 - x2)
  dist, pos = _reattach(dist, x1, x2, normal, margin, pos1, mat1, pos2, mat2)
  return valid, dist, pos, normal


def _convex_routine(kind1, kind2):
  """The Contacts routine (one contact) of a pair MuJoCo sends to mjc_Convex."""
  multi = not ({kind1, kind2} & {SPHERE, ELLIPSOID})

  def fn(pos1, mat1, size1, pos2, mat2, size2, margin, verts1=None, verts2=None, *,
         tolerance=TOLERANCE, iterations=ITERATIONS, multiccd=False):
    if multiccd and multi:
      raise NotSupportedError(
          f'multi-point convex collision (multiccd) between {TYPE_NAMES[kind1]} and '
          f'{TYPE_NAMES[kind2]} geoms is not implemented; remove <flag multiccd="enable"/>')
    valid, dist, pos, normal = collide(kind1, kind2, pos1, mat1, size1, pos2, mat2, size2,
                                       margin, verts1, verts2, tolerance=tolerance,
                                       iterations=iterations)
    return _primitive()._contacts(dist[None], pos[None], normal[None], valid[None])

  fn.__name__ = fn.__qualname__ = f'{TYPE_NAMES[kind1]}_{TYPE_NAMES[kind2]}'
  fn.__doc__ = (f'{TYPE_NAMES[kind1].capitalize()} : {TYPE_NAMES[kind2]}, 1 contact (mjc_Convex,'
                ' native GJK / EPA): ``collide`` for these types.')
  fn.kinds = (kind1, kind2)
  return fn


# ---------------------------------------------------------------------------------------------
# Plane : convex (mjc_PlaneConvex)

def plane_ellipsoid(pos1, mat1, size1, pos2, mat2, size2, margin):
  """Plane : ellipsoid, 1 contact (mjc_PlaneConvex): the ellipsoid's support point along the
  plane's inward normal (mju_normalize3 fallback for a degenerate direction); the contact lies
  midway between it and the plane. Analytic and differentiable."""
  normal = mat1[:, 2]
  tmp = (mat2.T @ -normal) * size2
  n = jnp.sqrt(jnp.maximum(_dot(tmp, tmp), MINVAL * MINVAL))
  ok = n >= MINVAL
  tmp = jnp.where(ok, tmp / jnp.where(ok, n, 1.0), _xaxis(tmp)) * size2
  v = mat2 @ tmp + pos2
  dist = _dot(normal, v - pos1)
  pos = v - normal * (0.5 * dist)
  return _primitive()._contacts(dist[None], pos[None], normal[None], (dist <= margin)[None])


def plane_mesh(pos1, mat1, size1, pos2, mat2, size2, margin, verts1=None, verts2=None, *,
               neighbors2=None, rbound2=None, tolerance=TOLERANCE, iterations=ITERATIONS,
               multiccd=False):
  """Plane : mesh, up to 3 contacts (mjc_PlaneConvex).

  1: the mesh vertex deepest below the plane (first one on ties), if within the margin. 2, 3:
  further vertices within the margin and at least 0.3 * rbound2 from the first contact point, in
  MuJoCo's search order: with ``neighbors2`` ((nv, K) int: each vertex's hull neighbours in
  MuJoCo's mesh_graph order, -1 padded) the neighbours of the first vertex, without it every
  vertex in order, repeated (padding) vertices once (MuJoCo's path for a mesh without graph).
  ``rbound2``: geom_rbound of the mesh, by default MuJoCo's value |max_i |v_i|| (per-axis
  extents). Each contact lies midway between its vertex and the plane.
  """
  del verts1, tolerance, iterations, multiccd
  dt = pos1.dtype
  verts = jnp.asarray(verts2, dt).reshape(-1, 3)
  normal = mat1[:, 2]
  dots = lax.stop_gradient(verts @ -(mat2.T @ normal))
  best = jnp.argmax(dots)
  world = verts @ mat2.T + pos2                               # (nv, 3)
  height = (world - pos1) @ normal                            # (nv,) signed distances
  dist0 = height[best]
  pos0 = world[best] - normal * (0.5 * dist0)
  valid0 = dist0 <= margin
  if rbound2 is None:
    rbound2 = safe_norm(jnp.max(jnp.abs(verts), axis=0))
  threshold = lax.stop_gradient(_dot(normal, pos2 - pos1) - margin)
  below = dots > threshold
  far = lax.stop_gradient(safe_norm(world - pos0) >= PLANEMESH_TOL * rbound2)
  if neighbors2 is None:
    order = jnp.arange(verts.shape[0])
    # padding repeats a vertex: only a vertex's first occurrence is one of MuJoCo's vertices
    same = jnp.all(verts[:, None, :] == verts[None, :, :], axis=-1)
    first = ~jnp.any(same & (order[None, :] < order[:, None]), axis=1)
    cand = below & (order != best) & far & first
  else:
    nb = jnp.asarray(neighbors2, jnp.int32)[best]             # (K,)
    order = jnp.maximum(nb, 0)
    cand = (nb >= 0) & below[order] & far[order]
  idx = jnp.argsort(~cand, stable=True)[:NPLANEMESH - 1]
  sel = order[idx]
  dist = jnp.concatenate([dist0[None], height[sel]])
  pos = jnp.concatenate([pos0[None], world[sel] - normal * (0.5 * height[sel])[:, None]])
  valid = jnp.concatenate([valid0[None], cand[idx] & valid0])
  return _primitive()._contacts(dist, pos, jnp.broadcast_to(normal, (NPLANEMESH, 3)), valid)


# ---------------------------------------------------------------------------------------------
# Tables

# primitive pairs that MuJoCo 3.3.3 sends to mjc_Convex (mjCOLLISIONFUNC)
CONVEX_PAIRS = ((SPHERE, ELLIPSOID), (CAPSULE, ELLIPSOID), (CAPSULE, CYLINDER),
                (ELLIPSOID, ELLIPSOID), (ELLIPSOID, CYLINDER), (ELLIPSOID, BOX),
                (CYLINDER, CYLINDER), (CYLINDER, BOX))

ROUTINES = {(PLANE, ELLIPSOID): (plane_ellipsoid, 1)}
ROUTINES.update({p: (_convex_routine(*p), 1) for p in CONVEX_PAIRS})

MESH_ROUTINES = {(PLANE, MESH): (plane_mesh, NPLANEMESH)}
MESH_ROUTINES.update({(t, MESH): (_convex_routine(t, MESH), 1)
                      for t in (SPHERE, CAPSULE, ELLIPSOID, CYLINDER, BOX, MESH)})

__all__ = ['CONVEX_PAIRS', 'ITERATIONS', 'MESH_ROUTINES', 'ROUTINES', 'TOLERANCE', 'collide',
           'plane_ellipsoid', 'plane_mesh']
