"""Ray casting against geoms: MuJoCo 3.3.3's mj_ray (engine_ray.c) for one ray.

ray(m, d, pnt, vec, geomgroup=None, flg_static=True, bodyexclude=-1) -> (dist, geomid)
  reads  geom_xpos, geom_xmat (after kinematics)
  pnt (3,), vec (3,): the ray pnt + x vec, x >= 0 (vec need not be a unit vector: dist is in
  units of |vec|). Returns dist () (-1: nothing hit) and geomid () int32 (-1: nothing hit).
  Batch rays with ``jax.vmap(lambda p, v: ray(m, d, p, v))``.

Which geoms are tested (MuJoCo's ray_eliminate): not on body ``bodyexclude``; visible (rgba alpha
> 0: geom_rgba, or the material's mat_rgba when the Model carries geom_matid / mat_rgba); with
``flg_static`` false, not on a body welded to the world; with ``geomgroup`` (6 flags, one per
geom group; groups outside 0..5 use the nearest), only geoms whose group flag is set. Among the
geoms hit, the nearest wins; on ties, the lowest geom id (MuJoCo's loop keeps the first).

Per geom type, as MuJoCo computes it (all in the geom frame, ``lpnt``/``lvec`` the ray there):
  plane      the front face only (lvec_z < 0), inside the rendered rectangle (size <= 0:
             infinite in that direction)
  sphere     the quadratic |pnt + x vec - pos|^2 = r^2, smallest root >= 0
  capsule    bounding sphere (r + h), then the side (|z| <= h) and the two hemispherical caps
  ellipsoid  the quadratic of the scaled sphere
  cylinder   bounding sphere, the two flat caps (inside the radius) and the side (|z| <= h)
  box        bounding sphere, then each of the 6 faces (within its rectangle)
  mesh       the box of geom_size first, then every triangle of the mesh (MuJoCo walks its BVH;
             testing all triangles gives the same nearest hit)
  hfield     the base box (below the surface) and the top box; inside the top box every
             triangle of the grid and the four sides (the surface profile along the side's
             border), MuJoCo's rules including its indexing of the side profiles
Triangles use MuJoCo's test: the triangle's vertices projected on a plane normal to the ray
(basis b0, b1) must surround the ray, then the ray meets the triangle's plane.

Vectorization: per geom type present in the model (``m.geom_types``, static) the distances of
all geoms are computed at once (vmap) and selected by type; when the Model's arrays are concrete
(the Model is closed over, not a traced argument) only the geoms of that type are computed.
Meshes and height fields are tested against a padded set of triangles per geom (the largest
mesh / grid when the arrays are concrete, else every triangle of the model), so their cost
grows with the triangle count.

Gradients: dist is differentiable in pnt, vec and the geom poses where a surface is hit (every
division and square root is guarded), and has zero gradient where nothing is hit.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .math import MINVAL, concrete, dot_small, matvec_small

PLANE, HFIELD, SPHERE, CAPSULE, ELLIPSOID, CYLINDER, BOX, MESH = range(8)
NGROUP = 6  # mjNGROUP


# ---------------------------------------------------------------------------------------------
# Helpers

def _div(num, den):
  """num / den with den = 0 replaced by 1 (for quotients that are discarded there)."""
  return num / jnp.where(den == 0, 1.0, den)


def _sqrt(x):
  """sqrt(x) for x >= 0 with a finite gradient at 0 (negative x: 0)."""
  pos = x > 0
  return jnp.where(pos, jnp.sqrt(jnp.where(pos, x, 1.0)), 0.0)


def _map(pos, mat, pnt, vec):
  """The ray in a frame at ``pos`` with rotation ``mat`` (3, 3): (lpnt, lvec) (ray_map;
  mat.T @ v written term by term, see math.dot_small)."""
  return matvec_small(mat.T, pnt - pos), matvec_small(mat.T, vec)


def _quad(a, b, c):
  """Roots of a x^2 + 2 b x + c = 0 (ray_quad): (x, (x0, x1)).

  x0 <= x1 are the two roots, both -1 when the discriminant is below MINVAL; x is the smallest
  root >= 0, or -1.
  """
  det = b * b - a * c
  ok = det >= MINVAL
  root = _sqrt(jnp.where(ok, det, 1.0))
  x0 = jnp.where(ok, _div(-b - root, a), -1.0)
  x1 = jnp.where(ok, _div(-b + root, a), -1.0)
  x = jnp.where(x0 >= 0, x0, jnp.where(x1 >= 0, x1, -1.0))
  return jnp.where(ok, x, -1.0), (x0, x1)


def _nearer(x, sol, ok):
  """MuJoCo's update rule: take ``sol`` where ok and (nothing yet or sol < x)."""
  return jnp.where(ok & ((x < 0) | (sol < x)), sol, x)


def _sphere_hit(pos, dist_sqr, pnt, vec):
  """ray_sphere: nearest x >= 0 with |pnt + x vec - pos|^2 = dist_sqr, or -1."""
  dif = pnt - pos
  x, _ = _quad(dot_small(vec, vec), dot_small(vec, dif), dot_small(dif, dif) - dist_sqr)
  return x


# ---------------------------------------------------------------------------------------------
# Primitive geoms (mju_rayGeom). Each takes the geom pose pos (3,), mat (3, 3), size (3,) and the
# ray pnt (3,), vec (3,); returns the distance () or -1.

def ray_plane(pos, mat, size, pnt, vec):
  """Front face of a plane, inside its rendered rectangle."""
  lpnt, lvec = _map(pos, mat, pnt, vec)
  front = lvec[2] <= -MINVAL
  x = -_div(lpnt[2], jnp.where(front, lvec[2], -1.0))
  p = lpnt[:2] + x * lvec[:2]
  inside = jnp.all((size[:2] <= 0) | (jnp.abs(p) <= size[:2]))
  return jnp.where(front & (x >= 0) & inside, x, -1.0)


def ray_sphere(pos, mat, size, pnt, vec):
  del mat
  return _sphere_hit(pos, size[0] * size[0], pnt, vec)


def ray_capsule(pos, mat, size, pnt, vec):
  """Side between the caps, then the two hemispheres, after a bounding-sphere test."""
  r, h = size[0], size[1]
  bound = _sphere_hit(pos, (r + h) * (r + h), pnt, vec) >= 0
  lpnt, lvec = _map(pos, mat, pnt, vec)
  # side: (lpnt + x lvec)_xy^2 = r^2, with |z| <= h
  sol, _ = _quad(dot_small(lvec[:2], lvec[:2]), dot_small(lvec[:2], lpnt[:2]),
                dot_small(lpnt[:2], lpnt[:2]) - r * r)
  x = jnp.where((sol >= 0) & (jnp.abs(lpnt[2] + sol * lvec[2]) <= h), sol, -1.0)
  a = dot_small(lvec, lvec)
  for side in (1.0, -1.0):
    # cap sphere centred at z = side * h, only its outer half counts
    ldif = lpnt - jnp.array([0.0, 0.0, side * h], lpnt.dtype)
    _, roots = _quad(a, dot_small(lvec, ldif), dot_small(ldif, ldif) - r * r)
    for xx in roots:
      z = lpnt[2] + xx * lvec[2]
      outer = z >= h if side > 0 else z <= -h
      x = _nearer(x, xx, (xx >= 0) & outer)
  return jnp.where(bound, x, -1.0)


def ray_ellipsoid(pos, mat, size, pnt, vec):
  """The unit-sphere quadratic in coordinates scaled by 1 / size."""
  lpnt, lvec = _map(pos, mat, pnt, vec)
  s = 1.0 / (size * size)
  x, _ = _quad(dot_small(s * lvec, lvec), dot_small(s * lvec, lpnt), dot_small(s * lpnt, lpnt) - 1)
  return x


def ray_cylinder(pos, mat, size, pnt, vec):
  """Flat caps inside the radius, then the side between them, after a bounding sphere."""
  r, h = size[0], size[1]
  bound = _sphere_hit(pos, r * r + h * h, pnt, vec) >= 0
  lpnt, lvec = _map(pos, mat, pnt, vec)
  x = jnp.asarray(-1.0, lpnt.dtype)
  axial = jnp.abs(lvec[2]) > MINVAL
  for side in (-1.0, 1.0):
    sol = _div(side * h - lpnt[2], jnp.where(axial, lvec[2], 1.0))
    p = lpnt[:2] + sol * lvec[:2]
    x = _nearer(x, sol, axial & (sol >= 0) & (dot_small(p, p) <= r * r))
  sol, _ = _quad(dot_small(lvec[:2], lvec[:2]), dot_small(lvec[:2], lpnt[:2]),
                dot_small(lpnt[:2], lpnt[:2]) - r * r)
  x = _nearer(x, sol, (sol >= 0) & (jnp.abs(lpnt[2] + sol * lvec[2]) <= h))
  return jnp.where(bound, x, -1.0)


_FACE_AXES = ((1, 2), (0, 2), (0, 1))


def ray_box_all(pos, mat, size, pnt, vec):
  """ray_box with its per-face hits: (x, all (6,)), all[2 i + (side + 1) / 2] the distance to
  face (axis i, side -1 / +1) where the ray meets it inside its rectangle, else -1."""
  bound = _sphere_hit(pos, dot_small(size, size), pnt, vec) >= 0
  lpnt, lvec = _map(pos, mat, pnt, vec)
  x = jnp.asarray(-1.0, lpnt.dtype)
  hits = []
  for i in range(3):
    j, k = _FACE_AXES[i]
    along = jnp.abs(lvec[i]) > MINVAL
    for side in (-1.0, 1.0):
      sol = _div(side * size[i] - lpnt[i], jnp.where(along, lvec[i], 1.0))
      inside = ((jnp.abs(lpnt[j] + sol * lvec[j]) <= size[j])
                & (jnp.abs(lpnt[k] + sol * lvec[k]) <= size[k]))
      ok = bound & along & (sol >= 0) & inside
      x = _nearer(x, sol, ok)
      hits.append(jnp.where(ok, sol, -1.0))
  return jnp.where(bound, x, -1.0), jnp.stack(hits)


def ray_box(pos, mat, size, pnt, vec):
  return ray_box_all(pos, mat, size, pnt, vec)[0]


PRIMITIVES = {PLANE: ray_plane, SPHERE: ray_sphere, CAPSULE: ray_capsule,
              ELLIPSOID: ray_ellipsoid, CYLINDER: ray_cylinder, BOX: ray_box}


def ray_geom(pos, mat, size, pnt, vec, geomtype: int):
  """mju_rayGeom: the distance along the ray to a primitive geom (static ``geomtype``: plane,
  sphere, capsule, ellipsoid, cylinder or box), or -1."""
  if geomtype not in PRIMITIVES:
    raise ValueError(f'ray_geom: geom type {geomtype} is not a primitive (mesh and hfield need '
                     'the model: use ray)')
  return PRIMITIVES[geomtype](pos, mat, size, pnt, vec)


# ---------------------------------------------------------------------------------------------
# Triangles (meshes, height fields)

def _basis(lvec):
  """Two unit vectors spanning the plane normal to lvec (MuJoCo's construction: start from
  (1, 1, 1) with the component of lvec's largest axis zeroed, orthogonalize, cross)."""
  a = jnp.abs(lvec)
  first = jnp.where((a[0] >= a[1]) & (a[0] >= a[2]), 0, jnp.where(a[1] >= a[2], 1, 2))
  b0 = jnp.where(jnp.arange(3) == first, 0.0, 1.0).astype(lvec.dtype)
  b1 = b0 - lvec * _div(lvec @ b0, lvec @ lvec)
  b1 = normalize3(b1)
  return normalize3(jnp.cross(b1, lvec)), b1


def normalize3(v):
  """mju_normalize3: v / |v|, the x axis when |v| < MINVAL."""
  n = _sqrt(v @ v)
  ok = n >= MINVAL
  return jnp.where(ok, v / jnp.where(ok, n, 1.0), jnp.zeros_like(v).at[0].set(1.0))


def _triangles(v, lpnt, lvec, b0, b1):
  """ray_triangle for triangles v (n, 3 vertices, 3): distances (n,), -1 where missed."""
  dif = v - lpnt                                               # (n, 3, 3)
  planar = jnp.stack([dif @ b0, dif @ b1], axis=-1)            # (n, 3 vertices, 2)
  same = jnp.any(jnp.all(planar > 0, axis=1) | jnp.all(planar < 0, axis=1), axis=-1)
  # origin inside the projected triangle: solve [p0 - p2, p1 - p2] t = -p2
  a00 = planar[:, 0, 0] - planar[:, 2, 0]
  a01 = planar[:, 1, 0] - planar[:, 2, 0]
  a10 = planar[:, 0, 1] - planar[:, 2, 1]
  a11 = planar[:, 1, 1] - planar[:, 2, 1]
  r0, r1 = -planar[:, 2, 0], -planar[:, 2, 1]
  det = a00 * a11 - a01 * a10
  flat = jnp.abs(det) < MINVAL
  t0 = _div(a11 * r0 - a01 * r1, jnp.where(flat, 1.0, det))
  t1 = _div(-a10 * r0 + a00 * r1, jnp.where(flat, 1.0, det))
  outside = (t0 < 0) | (t1 < 0) | (t0 + t1 > 1)
  # the ray meets the triangle's plane
  nrm = jnp.cross(v[:, 0] - v[:, 2], v[:, 1] - v[:, 2])
  denom = nrm @ lvec
  parallel = jnp.abs(denom) < MINVAL
  sol = -_div(jnp.sum((lpnt - v[:, 2]) * nrm, axis=-1), jnp.where(parallel, 1.0, denom))
  return jnp.where(same | flat | outside | parallel, -1.0, sol)


def _nearest(sol):
  """Smallest non-negative entry of sol, or -1."""
  hit = sol >= 0
  return jnp.where(jnp.any(hit), jnp.min(jnp.where(hit, sol, jnp.inf)), -1.0)


def ray_mesh(m, geom, pos, mat, size, pnt, vec, nface):
  """Mesh geom ``geom``: the box of geom_size, then the mesh triangles (the first ``nface``
  faces of its mesh, static; faces beyond the mesh's count are ignored)."""
  mesh = jnp.maximum(m.geom_dataid[geom], 0)
  inbox = ray_box(pos, mat, size, pnt, vec) >= 0
  lpnt, lvec = _map(pos, mat, pnt, vec)
  b0, b1 = _basis(lvec)
  k = jnp.arange(nface)
  face = jnp.minimum(m.mesh_faceadr[mesh] + k, m.mesh_face.shape[0] - 1)
  verts = m.mesh_vert[m.mesh_vertadr[mesh] + m.mesh_face[face]]       # (nface, 3, 3)
  sol = jnp.where(k < m.mesh_facenum[mesh], _triangles(verts, lpnt, lvec, b0, b1), -1.0)
  return jnp.where(inbox, _nearest(sol), -1.0)


def ray_hfield(m, geom, pos, mat, pnt, vec, ncell):
  """Height-field geom ``geom`` (mj_rayHfield); ``ncell`` (static) bounds its grid cells."""
  dt = pos.dtype
  hid = jnp.maximum(m.geom_dataid[geom], 0)
  nrow, ncol = m.hfield_nrow[hid], m.hfield_ncol[hid]
  size = m.hfield_size[hid]
  adr = m.hfield_adr[hid]
  data = m.hfield_data
  top_data = data.shape[0] - 1

  def elev(i):
    return data[jnp.clip(adr + i, 0, top_data)]

  zaxis = mat[:, 2]
  # the base box below z = 0 and the top box holding the surface
  base = ray_box(pos - zaxis * (0.5 * size[3]), mat, jnp.stack([size[0], size[1],
                                                                0.5 * size[3]]), pnt, vec)
  top, hits = ray_box_all(pos + zaxis * (0.5 * size[2]), mat,
                          jnp.stack([size[0], size[1], 0.5 * size[2]]), pnt, vec)
  lpnt, lvec = _map(pos, mat, pnt, vec)
  b0, b1 = _basis(lvec)
  dx = 2.0 * size[0] / (ncol - 1).astype(dt)
  dy = 2.0 * size[1] / (nrow - 1).astype(dt)

  # every triangle of the grid: cell (r, c) holds (00, 11, 10) and (00, 11, 01)
  k = jnp.arange(ncell)
  cols = jnp.maximum(ncol - 1, 1)
  r, c = k // cols, k % cols
  valid = r < nrow - 1
  x0, x1 = dx * c - size[0], dx * (c + 1) - size[0]
  y0, y1 = dy * r - size[1], dy * (r + 1) - size[1]
  z00 = elev(r * ncol + c) * size[2]
  z11 = elev((r + 1) * ncol + c + 1) * size[2]
  z10 = elev(r * ncol + c + 1) * size[2]
  z01 = elev((r + 1) * ncol + c) * size[2]
  p00 = jnp.stack([x0, y0, z00], -1)
  p11 = jnp.stack([x1, y1, z11], -1)
  tri_a = jnp.stack([p00, p11, jnp.stack([x1, y0, z10], -1)], axis=1)
  tri_b = jnp.stack([p00, p11, jnp.stack([x0, y1, z01], -1)], axis=1)
  sol = jnp.concatenate([_triangles(tri_a, lpnt, lvec, b0, b1),
                         _triangles(tri_b, lpnt, lvec, b0, b1)])
  sol = jnp.where(jnp.concatenate([valid, valid]), sol, -1.0)
  nearest = _nearest(sol)
  x = _nearer(base, nearest, nearest >= 0)

  # the four sides of the top box: hit where below the border's elevation profile
  for i in range(4):
    hit = hits[i]
    z = (lpnt[2] + hit * lvec[2]) / size[2]
    if i < 2:
      y = (lpnt[1] + hit * lvec[1] + size[1]) / dy
      yy = jnp.clip(jnp.floor(y), 0, (nrow - 2).astype(dt))
      col = ncol - 1 if i == 1 else 0
      # MuJoCo indexes these rows with nrow (not ncol): same for square grids
      iy = jnp.round(yy).astype(jnp.int32)
      za, zb = elev(iy * nrow + col), elev((iy + 1) * nrow + col)
    else:
      y = (lpnt[0] + hit * lvec[0] + size[0]) / dx
      yy = jnp.clip(jnp.floor(y), 0, (ncol - 2).astype(dt))
      row = (nrow - 1) * ncol if i == 3 else 0
      iy = jnp.round(yy).astype(jnp.int32)
      za, zb = elev(iy + row), elev(iy + 1 + row)
    below = z < za * (yy + 1 - y) + zb * (y - yy)
    x = jnp.where((hit >= 0) & ((hit < x) | (x < 0)) & below, hit, x)
  return jnp.where(top >= 0, x, base)


# ---------------------------------------------------------------------------------------------
# mj_ray

def _type_ids(m, geomtype):
  """Geoms that may have type ``geomtype``: exactly those (static) when the Model's geom_type is
  concrete, else every geom (the caller selects by type)."""
  gtype = concrete(m.geom_type)
  if gtype is None:
    return np.arange(m.ngeom)
  return np.nonzero(gtype == geomtype)[0]


def _mesh_width(m, ids):
  """Faces to test per mesh geom (static): the largest mesh among ``ids`` if known."""
  facenum, dataid = concrete(m.mesh_facenum), concrete(m.geom_dataid)
  if facenum is None or dataid is None:
    return max(m.nmeshface, 1)
  used = dataid[ids]
  used = used[used >= 0]
  return max(int(facenum[used].max()) if used.size else 1, 1)


def _hfield_width(m, ids):
  """Grid cells to test per height-field geom (static): the largest grid among ``ids`` if
  known."""
  nrow, ncol, dataid = (concrete(m.hfield_nrow), concrete(m.hfield_ncol),
                        concrete(m.geom_dataid))
  if nrow is None or ncol is None or dataid is None:
    return max(m.nhfielddata, 1)
  used = dataid[ids]
  used = used[used >= 0]
  if not used.size:
    return 1
  return max(int(np.max((nrow[used] - 1) * (ncol[used] - 1))), 1)


def eliminated(m, geomgroup=None, flg_static=True, bodyexclude=-1):
  """(ngeom,) bool: geoms mj_ray skips (ray_eliminate, see the module docstring)."""
  body = m.geom_bodyid
  out = body == bodyexclude
  alpha = m.geom_rgba[:, 3]
  matid, mat_rgba = getattr(m, 'geom_matid', None), getattr(m, 'mat_rgba', None)
  if matid is not None and mat_rgba is not None and mat_rgba.shape[0]:
    mat_alpha = mat_rgba.reshape(-1, 4)[jnp.maximum(matid, 0), 3]
    alpha = jnp.where(matid >= 0, mat_alpha, alpha)
  out = out | (alpha == 0)
  out = out | (~jnp.asarray(flg_static, bool) & (m.body_weldid[body] == 0))
  if geomgroup is not None:
    group = jnp.clip(m.geom_group, 0, NGROUP - 1)
    out = out | (jnp.asarray(geomgroup)[group] == 0)
  return out


def geom_distances(m, d, pnt, vec):
  """(ngeom,) distance along the ray to every geom (-1: missed), before any elimination."""
  dt = d.geom_xpos.dtype
  pnt, vec = jnp.asarray(pnt, dt), jnp.asarray(vec, dt)
  xmat = d.geom_xmat.reshape(-1, 3, 3)
  dist = -jnp.ones(m.ngeom, dt)
  for t in m.geom_types:
    ids = _type_ids(m, t)
    if not ids.size:
      continue
    pos, mat, size = d.geom_xpos[ids], xmat[ids], m.geom_size[ids]
    if t in PRIMITIVES:
      fn = PRIMITIVES[t]
      val = jax.vmap(lambda p, r, s, fn=fn: fn(p, r, s, pnt, vec))(pos, mat, size)
    elif t == MESH:
      width = _mesh_width(m, ids)
      val = jax.vmap(lambda g, p, r, s, w=width: ray_mesh(m, g, p, r, s, pnt, vec, w))(
          jnp.asarray(ids), pos, mat, size)
    elif t == HFIELD:
      width = _hfield_width(m, ids)
      val = jax.vmap(lambda g, p, r, w=width: ray_hfield(m, g, p, r, pnt, vec, w))(
          jnp.asarray(ids), pos, mat)
    else:
      from .errors import NotSupportedError
      raise NotSupportedError(f'ray casting against geom type {t} is not supported')
    dist = dist.at[ids].set(jnp.where(m.geom_type[ids] == t, val, dist[ids]))
  return dist


def ray(m, d, pnt, vec, geomgroup=None, flg_static=True, bodyexclude=-1):
  """Nearest geom hit by the ray pnt + x vec, x >= 0 (mj_ray): (dist (), geomid () int32).

  dist = -1 and geomid = -1 when nothing is hit (also for a zero ``vec``, where MuJoCo raises an
  error). ``geomgroup``: None (every group) or 6 flags (geoms of groups whose flag is 0 are
  skipped); ``flg_static``: test geoms of bodies welded to the world; ``bodyexclude``: a body
  whose geoms are skipped (-1: none). All three may be traced.
  """
  dist = geom_distances(m, d, pnt, vec)
  ok = (dist >= 0) & ~eliminated(m, geomgroup, flg_static, bodyexclude)
  vec = jnp.asarray(vec, dist.dtype)
  ok = ok & (vec @ vec >= MINVAL * MINVAL)
  best = jnp.argmin(jnp.where(ok, dist, jnp.inf))
  hit = jnp.any(ok)
  return jnp.where(hit, dist[best], -1.0), jnp.where(hit, best, -1).astype(jnp.int32)
