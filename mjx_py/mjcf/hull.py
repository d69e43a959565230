"""Convex hull of a 3D point set (quickhull in numpy), for mesh collision and convex inertia.

Host only. MuJoCo builds mesh hulls with qhull ("qhull Qt", plus "TA<n>" for maxhullvert);
this is an independent implementation with the same result where the result is unique: the
hull *vertex set* is the set of extreme points (points inside the hull, on a hull face or on a
hull edge are not vertices, as in qhull's default output), and every hull face is returned as
a triangle, counter-clockwise seen from outside. The triangulation of planar hull faces, and
the order of vertices and faces, are arbitrary (qhull's differ), so hulls compare as sets.

Algorithm: an initial tetrahedron from extreme points, then points are added one at a time:
the oldest face (creation order) that still has points above it gives its furthest point, the
faces that point sees (found by a walk over face neighbours from that face) are replaced by a
fan of new faces joining the apex to the horizon, and the points above the removed faces are
handed to the new faces. A point closer than ``eps`` to a face plane counts as on the face.
With a vertex limit (maxhullvert) the loop stops after that many vertices, which leaves the hull
of the points added so far, like qhull's TA option (qhull may pick a different subset).
"""

from __future__ import annotations

import numpy as np


class DegenerateHull(ValueError):
  """The points span less than three dimensions (coincident, collinear or coplanar)."""


def convex_hull(points, maxvert: int = -1):
  """Hull vertices and triangles of ``points`` (n, 3).

  maxvert: maximum number of hull vertices (-1: unlimited; otherwise at least 4).
  Returns (vertex ids (k,) int, sorted; faces (m, 3) int, ids into ``points``, each triangle
  counter-clockwise seen from outside). Raises DegenerateHull when the points do not span 3D.
  """
  p = np.asarray(points, dtype=float).reshape(-1, 3)
  if len(p) < 4:
    raise DegenerateHull('fewer than 4 points')
  scale = max(float(np.max(np.abs(p))), float(np.max(np.ptp(p, axis=0))), 1e-300)
  eps = 1e-12 * scale
  keep = np.arange(len(p))
  while True:
    faces = keep[_quickhull(p[keep], maxvert, eps)]
    ids = np.unique(faces)
    extreme = ids[_extreme(p, faces, ids, eps)]
    if len(extreme) == len(ids):
      return ids, faces
    # a point that ends up inside a hull face or edge was added before the points around it
    # (the furthest point of one face's outside set need not be extreme overall): hull the
    # extreme vertices again
    keep, maxvert = extreme, -1


def _plane(p, a, b, c):
  """Unit normal and offset of the plane through p[a], p[b], p[c] (normal by the right hand)."""
  n = np.cross(p[b] - p[a], p[c] - p[a])
  norm = np.linalg.norm(n)
  if norm > 0:
    n = n / norm
  return n, float(n @ p[a])


# Ties (points equally far from a face, or equally extreme along an axis) are broken by this
# fixed generic direction: the winner is then a vertex of the face or edge the tied points span,
# so only extreme points are ever added to the hull.
_TIEBREAK = np.array([0.5773502691896257, 0.7071067811865476, 0.4082482904638631]) * [1, -1, 1]


def _best(ids, value, p, eps):
  """The id in ``ids`` with the largest ``value``; near-ties (within eps) go to _TIEBREAK."""
  top = np.max(value)
  tied = ids[value >= top - eps]
  if len(tied) == 1:
    return int(tied[0])
  return int(tied[np.argmax(p[tied] @ _TIEBREAK)])


def _initial_simplex(p, eps):
  """Four affinely independent extreme points (tetrahedron), or DegenerateHull."""
  ids = np.arange(len(p))
  extent = np.ptp(p, axis=0)
  axis = int(np.argmax(extent))
  if extent[axis] <= eps:
    raise DegenerateHull('all points coincide')
  i0, i1 = _best(ids, -p[:, axis], p, eps), _best(ids, p[:, axis], p, eps)
  u = (p[i1] - p[i0]) / np.linalg.norm(p[i1] - p[i0])
  rel = p - p[i0]
  off_line = np.linalg.norm(rel - np.outer(rel @ u, u), axis=1)
  if np.max(off_line) <= eps:
    raise DegenerateHull('all points are collinear')
  i2 = _best(ids, off_line, p, eps)
  n, d = _plane(p, i0, i1, i2)
  height = np.abs(p @ n - d)
  if np.max(height) <= eps:
    raise DegenerateHull('all points are coplanar')
  i3 = _best(ids, height, p, eps)
  return [i0, i1, i2, i3]


class _Faces:
  """Growing face list: vertices, planes, liveness, outside points, and a directed-edge map."""

  def __init__(self, p):
    self.p = p
    self.vert: list[tuple[int, int, int]] = []
    self.normal: list[np.ndarray] = []
    self.offset: list[float] = []
    self.alive: list[bool] = []
    self.outside: list[np.ndarray] = []
    self.edge: dict[tuple[int, int], int] = {}   # directed edge (a, b) -> face holding it

  def add(self, tris):
    """Adds faces (a, b, c) (their planes computed together); returns their ids."""
    t = np.asarray(tris, int).reshape(-1, 3)
    n = np.cross(self.p[t[:, 1]] - self.p[t[:, 0]], self.p[t[:, 2]] - self.p[t[:, 0]])
    norm = np.linalg.norm(n, axis=1)
    n = n / np.where(norm > 0, norm, 1.0)[:, None]
    d = np.einsum('ij,ij->i', n, self.p[t[:, 0]])
    ids = []
    for k, (a, b, c) in enumerate(t.tolist()):
      f = len(self.vert)
      self.vert.append((a, b, c))
      self.normal.append(n[k])
      self.offset.append(float(d[k]))
      self.alive.append(True)
      self.outside.append(np.zeros(0, int))
      for e in ((a, b), (b, c), (c, a)):
        self.edge[e] = f
      ids.append(f)
    return ids

  def kill(self, f):
    self.alive[f] = False
    a, b, c = self.vert[f]
    for e in ((a, b), (b, c), (c, a)):
      if self.edge.get(e) == f:
        del self.edge[e]

  def assign(self, new, pts, eps):
    """Hands each point in ``pts`` to the new face it is furthest above (dropped if none)."""
    if not len(pts) or not new:
      return
    normals = np.array([self.normal[f] for f in new])
    offsets = np.array([self.offset[f] for f in new])
    dist = normals @ self.p[pts].T - offsets[:, None]     # (len(new), len(pts))
    best = np.argmax(dist, axis=0)
    above = dist[best, np.arange(len(pts))] > eps
    for k, f in enumerate(new):
      self.outside[f] = pts[above & (best == k)]


def _quickhull(p, maxvert, eps):
  """Triangles (m, 3) of the hull of p (see the module docstring)."""
  simplex = _initial_simplex(p, eps)
  centre = p[simplex].mean(axis=0)
  faces = _Faces(p)
  tris = []
  for k in range(4):
    a, b, c = [simplex[j] for j in range(4) if j != k]
    n, d = _plane(p, a, b, c)
    if n @ centre - d > 0:   # orient outward: the opposite vertex below the face
      b, c = c, b
    tris.append((a, b, c))
  first = faces.add(tris)
  rest = np.setdiff1d(np.arange(len(p)), simplex)
  faces.assign(first, rest, eps)
  nvert, ptr = 4, 0
  while True:
    while ptr < len(faces.vert) and (not faces.alive[ptr] or not len(faces.outside[ptr])):
      ptr += 1
    if ptr == len(faces.vert) or (maxvert > 0 and nvert >= maxvert):
      break
    pts = faces.outside[ptr]
    apex = _best(pts, p[pts] @ faces.normal[ptr] - faces.offset[ptr], p, eps)
    # faces seen from the apex, connected to the starting face through neighbours
    q = p[apex].tolist()
    visible, stack = {ptr}, [ptr]
    while stack:
      a, b, c = faces.vert[stack.pop()]
      for e in ((b, a), (c, b), (a, c)):
        nb = faces.edge[e]
        if nb not in visible:
          n = faces.normal[nb]
          if n[0] * q[0] + n[1] * q[1] + n[2] * q[2] - faces.offset[nb] > eps:
            visible.add(nb)
            stack.append(nb)
    # horizon: edges of visible faces whose twin lies on a face that stays
    horizon = []
    for f in sorted(visible):
      a, b, c = faces.vert[f]
      for e in ((a, b), (b, c), (c, a)):
        if faces.edge[(e[1], e[0])] not in visible:
          horizon.append(e)
    orphans = np.concatenate([faces.outside[f] for f in sorted(visible)])
    orphans = orphans[orphans != apex]
    for f in visible:
      faces.kill(f)
    new = faces.add([(a, b, apex) for a, b in horizon])
    faces.assign(new, orphans, eps)
    nvert += 1
  return np.array([v for v, alive in zip(faces.vert, faces.alive) if alive], int)


def _extreme(p, faces, ids, eps):
  """Mask over ``ids``: True for extreme points (incident triangles span three planes or more).

  A hull vertex whose incident triangles lie in one plane sits inside a hull face, and one whose
  incident triangles lie in two planes sits on a hull edge: neither is a vertex of the hull.
  Triangles share a plane when all their corners are within eps of it.
  """
  a, b, c = p[faces[:, 0]], p[faces[:, 1]], p[faces[:, 2]]
  normals = np.cross(b - a, c - a)
  normals /= np.maximum(np.linalg.norm(normals, axis=1, keepdims=True), 1e-300)
  offsets = np.einsum('ij,ij->i', normals, a)
  # incident faces of every vertex: face ids grouped by vertex id
  corner_vert = faces.reshape(-1)
  corner_face = np.repeat(np.arange(len(faces)), 3)
  order = np.argsort(corner_vert, kind='stable')
  starts = np.searchsorted(corner_vert[order], ids)
  ends = np.searchsorted(corner_vert[order], ids, side='right')
  out = np.zeros(len(ids), bool)
  for k in range(len(ids)):
    inc = corner_face[order[starts[k]:ends[k]]]
    corners = p[faces[inc]]                      # (m, 3, 3)
    planes = [inc[0]]
    for f, pts in zip(inc[1:], corners[1:]):
      if all(np.max(np.abs(pts @ normals[g] - offsets[g])) > eps for g in planes):
        planes.append(f)
        if len(planes) == 3:
          break
    out[k] = len(planes) >= 3
  return out
