"""Mesh assets: loading, MuJoCo's mesh processing, and geoms fitted to meshes (host only).

``compile_mesh`` turns one ``<mesh>`` element into a :class:`Mesh` the way MuJoCo 3.3.3's
mjCMesh::Compile does:

1. vertices (float32) and faces from the file (meshfile.py) or the vertex/face attributes;
2. with inertia="exact", a check that no directed edge appears twice (consistent winding);
3. the convex hull (hull.py) of the raw vertices; a mesh without faces takes the hull's;
4. the user transform: subtract refpos, rotate by the conjugate of refquat, scale per axis;
5. the area-weighted centroid of the faces, then volume and centre of mass of the union of
   pyramids from that centroid to each face (signed; its absolute value per face for "legacy";
   over the hull's faces for "convex"), or surface area and centre for "shell";
6. the inertia of the pyramids (or of the surface) about the centre of mass, its principal axes
   (mjuu_eig3), and the half-sizes of the box with the same volume and inertia;
7. vertices moved to the centre of mass and rotated into the principal frame; that offset is
   kept in ``pos``/``quat`` (mjModel.mesh_pos/mesh_quat) and composed into referencing geoms.

Sums over faces run in MuJoCo's order (sequential accumulation, the same expression trees), so
results agree with MjModel to rounding even where principal axes are not unique.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

from . import hull as hullmod
from . import meshfile, orient
from .xmlnode import Node

MINVAL = 1e-15   # mjMINVAL
INERTIA_TYPES = ('convex', 'exact', 'legacy', 'shell')


@dataclass
class Mesh:
  """A compiled mesh asset (arrays in the mesh frame: centred, principal axes).

  vert (n, 3) float64 (the float32 input, transformed in double as MuJoCo does);
  face (m, 3) int; hull_ids (k,) hull vertex ids into ``vert``; pos (3,), quat (4,): the offset
  applied to the vertices (mesh_pos/mesh_quat; pos is changed by fitaabb fitting, as in
  MuJoCo); scale (3,); volume: volume, or surface area for inertia "shell"; boxsz (3,):
  half-sizes of the equivalent inertia box; aamm (6,): (min, max) corners of the vertices.
  needhull: the hull must exist (no faces, or inertia "convex"); hull_error: why it could not
  be built (then hull_ids lists every vertex); hull_faces (h, 3) int: the hull's triangles
  (ids into ``vert``), None without a hull.
  """

  name: str
  node: Node
  vert: np.ndarray
  face: np.ndarray
  hull_ids: np.ndarray
  pos: np.ndarray
  quat: np.ndarray
  scale: np.ndarray
  inertia: str
  volume: float
  boxsz: np.ndarray
  aamm: np.ndarray
  hull_error: str | None = None
  hull_faces: np.ndarray | None = None


# ---------------------------------------------------------------------------------------------
# Files

def find_file(ctx, node: Node, file: str, what: str) -> bytes:
  """Bytes of a mesh/hfield file: the assets dict first, then disk.

  Path rule (MuJoCo's): an absolute file is used as is; otherwise meshdir (or assetdir) is
  prepended, and a still relative path is taken from the main model file's folder.
  """
  if ctx.compiler['strippath'] == 'true':
    file = os.path.basename(file.replace('\\', '/'))
  meshdir = ctx.compiler.get('meshdir') or ctx.compiler.get('assetdir') or ''
  rel = file if os.path.isabs(file) else os.path.join(meshdir, file)
  assets = getattr(ctx, 'assets', None) or {}
  for key in (rel, os.path.normpath(rel), file):
    if key in assets:
      value = assets[key]
      return value.encode() if isinstance(value, str) else bytes(value)
  path = rel
  main = ctx.root.file
  if not os.path.isabs(path) and main and main != '<string>':
    path = os.path.join(os.path.dirname(main), path)
  try:
    with open(path, 'rb') as f:
      return f.read()
  except OSError as e:
    raise node.error(f"could not open {what} file '{file}' ({path}): {e.strerror}",
                     'file') from None


def _content_type(node: Node, vals: dict, table: dict, what: str) -> str:
  ctype = vals.get('content_type')
  if ctype:
    if ctype not in table.values():
      raise node.error(f"invalid content type '{ctype}' in {what}", 'content_type')
    return ctype
  ext = os.path.splitext(vals['file'])[1].lower()
  if ext not in table:
    raise node.error(f"unknown {what} file type '{ext}' of '{vals['file']}' "
                     f"(expected {', '.join(sorted(table))})", 'file')
  return table[ext]


def _load(ctx, node: Node, vals: dict, righthand: bool):
  """(vertices float32 (n, 3), faces (m, 3) or None) from file and/or attributes."""
  verts = faces = None
  if vals.get('file'):
    ctype = _content_type(node, vals, meshfile.EXTENSIONS, 'mesh')
    data = find_file(ctx, node, vals['file'], 'mesh')
    try:
      verts, faces = meshfile.CONTENT_TYPES[ctype](data, righthand)
    except meshfile.MeshFileError as e:
      raise node.error(f"could not read mesh file '{vals['file']}': {e}", 'file') from None
  if vals.get('vertex') is not None:
    if verts is not None:
      raise node.error('repeated vertex specification', 'vertex')
    raw = vals['vertex']
    if len(raw) % 3:
      raise node.error('vertex data must be a multiple of 3', 'vertex')
    verts = np.array(raw, dtype=np.float32).reshape(-1, 3)
  if vals.get('face') is not None:
    if faces is not None:
      raise node.error('repeated face specification', 'face')
    raw = vals['face']
    if len(raw) % 3:
      raise node.error('face data must be a multiple of 3', 'face')
    faces = np.array(raw, dtype=np.int64).reshape(-1, 3)
  for attr, k in (('normal', 3), ('texcoord', 2)):
    if vals.get(attr) is not None and len(vals[attr]) % k:
      raise node.error(f'{attr} data must be a multiple of {k}', attr)
  if verts is None or not len(verts):
    raise node.error('mesh has no vertices (give file or vertex)',
                     'file' if vals.get('file') else 'vertex')
  if not np.all(np.isfinite(verts)):
    raise node.error('vertex coordinate is not finite', 'vertex')
  if len(verts) < 4:
    raise node.error('at least 4 vertices required',
                     'file' if vals.get('file') else 'vertex')
  if faces is not None:
    faces = np.asarray(faces, dtype=np.int64)
    bad = np.argwhere((faces < 0) | (faces >= len(verts)))
    if len(bad):
      f, k = bad[0]
      raise node.error(f'in face {f}, vertex index {faces[f, k]} does not exist',
                       'face' if vals.get('face') is not None else 'file')
  return verts, faces


# ---------------------------------------------------------------------------------------------
# Processing (the steps of the module docstring; float64 throughout)

def _triangles(v, f):
  """Per face: area (m,), unit normal (m, 3), centre (m, 3), as MuJoCo's triangle().

  The normal is the cross product (v1 - v0) x (v2 - v0) divided by its length; faces with a
  length below mjMINVAL get area 0 (and an unnormalised normal, which then does not matter).
  """
  a, b, c = v[f[:, 0]], v[f[:, 1]], v[f[:, 2]]
  centre = np.stack([(a[:, k] + b[:, k] + c[:, k]) / 3 for k in range(3)], axis=1)
  e1, e2 = b - a, c - a
  n = np.stack([e1[:, 1] * e2[:, 2] - e1[:, 2] * e2[:, 1],
                e1[:, 2] * e2[:, 0] - e1[:, 0] * e2[:, 2],
                e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0]], axis=1)
  length = np.sqrt(n[:, 0] * n[:, 0] + n[:, 1] * n[:, 1] + n[:, 2] * n[:, 2])
  small = length < MINVAL
  unit = np.where(small[:, None], n, n / np.where(small, 1.0, length)[:, None])
  area = np.where(small, 0.0, 0.5 * length)
  return area, unit, centre


def _seqsum(x):
  """Left-to-right sum over axis 0 (C's loop order; np.sum would sum pairwise)."""
  x = np.asarray(x)
  if not len(x):
    return np.zeros(x.shape[1:])
  return np.add.accumulate(x, axis=0)[-1]


def _dot3(a, b):
  return a[:, 0] * b[:, 0] + a[:, 1] * b[:, 1] + a[:, 2] * b[:, 2]


def _face_centroid(v, f):
  area, _, centre = _triangles(v, f)
  total = float(_seqsum(area))
  cen = _seqsum(area[:, None] * centre)
  if total >= MINVAL:
    cen = cen / total
  return total, cen


def _volume_com(v, f, facecen, legacy):
  """Signed volume of the pyramids (apex facecen) and their centre of mass."""
  area, normal, centre = _triangles(v, f)
  vol = _dot3(centre - facecen, normal) * area / 3
  if legacy:
    vol = np.abs(vol)
  total = float(_seqsum(vol))
  com = _seqsum(vol[:, None] * (centre * 3.0 / 4.0 + facecen / 4.0))
  if total >= MINVAL:
    com = com / total
  return total, com


def _surface_com(v, f, facecen):
  area, _, centre = _triangles(v, f)
  total = float(_seqsum(area))
  com = _seqsum(area[:, None] * (centre * 3.0 / 4.0 + facecen / 4.0))
  if total >= MINVAL:
    com = com / total
  return total, com


_PAIRS = ((0, 0), (1, 1), (2, 2), (0, 1), (0, 2), (1, 2))


def _inertia(v, f, com, kind):
  """(volume or area, inertia (xx, yy, zz, xy, xz, yz)) about com, per unit density."""
  vc = v - com
  d, e, g = vc[f[:, 0]], vc[f[:, 1]], vc[f[:, 2]]
  area, normal, centre = _triangles(vc, f)
  if kind == 'shell':
    vol = area
  else:
    vol = _dot3(centre, normal) * area / 3
  if kind == 'legacy':
    vol = np.abs(vol)
  denom = 12 if kind == 'shell' else 20
  prods = []
  for a, b in _PAIRS:
    s = (2 * (d[:, a] * d[:, b] + e[:, a] * e[:, b] + g[:, a] * g[:, b])
         + d[:, a] * e[:, b] + d[:, b] * e[:, a] + d[:, a] * g[:, b] + d[:, b] * g[:, a]
         + e[:, a] * g[:, b] + e[:, b] * g[:, a])
    prods.append(vol / denom * s)
  p = _seqsum(np.stack(prods, axis=1))
  return float(_seqsum(vol)), [p[1] + p[2], p[0] + p[2], p[0] + p[1], -p[3], -p[4], -p[5]]


def _transform(v, vals):
  """refpos, refquat (its conjugate rotates) and scale, in MuJoCo's order."""
  refpos = np.asarray(vals['refpos'], float)
  if np.any(refpos != 0):
    v = v - refpos
  rq = [float(x) for x in vals['refquat']]
  if rq != [1.0, 0.0, 0.0, 0.0]:
    mat = orient.quat2mat_c(orient.normvec(list(rq)))
    # vertex <- mat^T vertex (mjuu_mulvecmatT)
    v = np.stack([mat[0] * v[:, 0] + mat[3] * v[:, 1] + mat[6] * v[:, 2],
                  mat[1] * v[:, 0] + mat[4] * v[:, 1] + mat[7] * v[:, 2],
                  mat[2] * v[:, 0] + mat[5] * v[:, 1] + mat[8] * v[:, 2]], axis=1)
  scale = np.asarray(vals['scale'], float)
  if np.any(scale != 1):
    v = v * scale
  return v


def _check_winding(node, v, f):
  """inertia="exact" needs consistently wound faces: no directed edge may appear twice."""
  area, _, _ = _triangles(v, f)
  keep = f[area > math.sqrt(MINVAL)]
  edges = np.concatenate([keep[:, [0, 1]], keep[:, [1, 2]], keep[:, [2, 0]]])
  if not len(edges):
    return
  uniq, counts = np.unique(edges, axis=0, return_counts=True)
  if np.any(counts > 1):
    a, b = uniq[np.argmax(counts > 1)]
    raise node.error(f'faces have inconsistent orientation (check the faces containing vertices '
                     f'{a + 1} and {b + 1}); inertia="exact" needs a well-oriented mesh',
                     'inertia')


def compile_mesh(ctx, node: Node, vals: dict, name: str, needhull: bool) -> Mesh:
  """One <mesh> element (resolved attribute values ``vals``) -> Mesh. See the module docstring.

  needhull: a geom collides with this mesh (MuJoCo then needs the hull: a degenerate one is an
  error).
  """
  kind = vals['inertia']
  maxhullvert = int(vals['maxhullvert'])
  if maxhullvert != -1 and maxhullvert < 4:
    raise node.error('maxhullvert must be larger than 3', 'maxhullvert')
  scale = np.asarray(vals['scale'], float)
  righthand = scale[0] * scale[1] * scale[2] > 0
  verts32, faces = _load(ctx, node, vals, righthand)
  v = verts32.astype(np.float64)
  if kind == 'exact' and faces is not None and len(faces):
    _check_winding(node, v, faces)
  # convex hull of the raw vertices (the hull of the transformed ones has the same vertices)
  hull_faces, hull_error = None, None
  try:
    hull_ids, hull_faces = hullmod.convex_hull(v, maxhullvert)
  except hullmod.DegenerateHull as e:
    hull_ids, hull_error = np.arange(len(v)), str(e)
  nofaces = faces is None or not len(faces)
  if hull_error and (nofaces or kind == 'convex' or needhull):
    why = ('a mesh without faces is its convex hull' if nofaces else
           'inertia="convex" uses the convex hull' if kind == 'convex' else
           'a colliding geom uses the convex hull')
    raise node.error(f'cannot build the convex hull of mesh ({hull_error}); {why}',
                     'vertex' if vals.get('vertex') is not None else 'file')
  if nofaces:
    faces = hull_faces
  v = _transform(v, vals)
  area, facecen = _face_centroid(v, faces)
  if area < MINVAL:
    raise node.error(f"mesh surface area is too small: {name}")
  if kind == 'shell':
    total, com = _surface_com(v, faces, facecen)
    if total < MINVAL:
      raise node.error(f"mesh surface area is too small: {name}")
  else:
    total, com = _volume_com(v, hull_faces if kind == 'convex' else faces, facecen,
                             kind == 'legacy')
    if total < MINVAL:
      if total < 0:
        raise node.error(f'mesh volume is negative (misoriented triangles): {name}')
      raise node.error(f'mesh volume is too small: {name}; try inertia="shell"', 'inertia')
  volume, inert = _inertia(v, hull_faces if kind == 'convex' else faces, com, kind)
  full = [[inert[0], inert[3], inert[4]], [inert[3], inert[1], inert[5]],
          [inert[4], inert[5], inert[2]]]
  eigval, quat = orient.eig3(full)
  if eigval[2] <= 0:
    raise node.error(f'eigenvalue of mesh inertia must be positive: {name}')
  atol, rtol = 1e-9, 1e-6
  e0, e1, e2 = eigval
  if (e0 + e1 < e2 * (1.0 - rtol) - atol or e0 + e2 < e1 * (1.0 - rtol) - atol
      or e1 + e2 < e0 * (1.0 - rtol) - atol):
    raise node.error(f'eigenvalues of mesh inertia violate A + B >= C: {name}')
  boxsz = np.array([0.5 * math.sqrt(6 * (e1 + e2 - e0) / volume),
                    0.5 * math.sqrt(6 * (e0 + e2 - e1) / volume),
                    0.5 * math.sqrt(6 * (e0 + e1 - e2) / volume)])
  # centre and rotate: vertex <- R(quat)^T (vertex - com)
  v = v - com
  mat = orient.quat2mat_c([quat[0], -quat[1], -quat[2], -quat[3]])
  v = np.stack([mat[0] * v[:, 0] + mat[1] * v[:, 1] + mat[2] * v[:, 2],
                mat[3] * v[:, 0] + mat[4] * v[:, 1] + mat[5] * v[:, 2],
                mat[6] * v[:, 0] + mat[7] * v[:, 1] + mat[8] * v[:, 2]], axis=1)
  aamm = np.concatenate([np.minimum(v.min(axis=0), 1e10), np.maximum(v.max(axis=0), -1e10)])
  return Mesh(name=name, node=node, vert=v, face=np.asarray(faces, np.int64),
              hull_ids=np.asarray(hull_ids, np.int64), pos=np.array(com, float),
              quat=np.array(quat, float), scale=scale, inertia=kind, volume=volume,
              boxsz=boxsz, aamm=aamm, hull_error=hull_error,
              hull_faces=None if hull_faces is None else np.asarray(hull_faces, np.int64))


# ---------------------------------------------------------------------------------------------
# Geoms

def fit_geom(mesh: Mesh, gtype: str, fitaabb: bool, fitscale: float, node: Node):
  """Size (3,) of a primitive geom fitted to ``mesh`` and the mesh offset to apply to it.

  Without fitaabb the primitive matches the equivalent inertia box; with it, the bounding box of
  the vertices (its centre shifts the offset). As in MuJoCo, the shifted offset is written back
  into ``mesh.pos`` (so mesh_pos, and later geoms using the mesh, see it).
  """
  meshpos = mesh.pos.copy()
  size = np.zeros(3)
  if not fitaabb:
    b = mesh.boxsz
    if gtype == 'sphere':
      size[0] = (b[0] + b[1] + b[2]) / 3
    elif gtype == 'capsule':
      size[0] = (b[0] + b[1]) / 2
      size[1] = max(0.0, b[2] - size[0] / 2)
    elif gtype == 'cylinder':
      size[0] = (b[0] + b[1]) / 2
      size[1] = b[2]
    elif gtype in ('ellipsoid', 'box'):
      size[:] = b
    else:
      raise node.error(f"geom type '{gtype}' cannot be fitted to a mesh", 'type')
  else:
    aamm = mesh.aamm
    cen = np.array([(aamm[0] + aamm[3]) / 2, (aamm[1] + aamm[4]) / 2, (aamm[2] + aamm[5]) / 2])
    meshpos = meshpos + cen
    v = mesh.vert
    if gtype == 'sphere':
      d = v - cen
      size[0] = max(0.0, float(np.max(np.sqrt(d[:, 0] * d[:, 0] + d[:, 1] * d[:, 1]
                                              + d[:, 2] * d[:, 2]))))
    elif gtype in ('capsule', 'cylinder'):
      dx, dy = v[:, 0] - cen[0], v[:, 1] - cen[1]
      radial = np.sqrt(dx * dx + dy * dy)
      size[0] = max(0.0, float(radial.max()))
      size[1] = max(0.0, float(np.abs(v[:, 2] - cen[2]).max()))
      if gtype == 'capsule':
        # the half-length that keeps every vertex under the spherical caps
        size[1] = 0.0
        for r, z in zip(radial.tolist(), np.abs(v[:, 2] - cen[2]).tolist()):
          ratio = r / size[0] if size[0] > 0 else math.nan
          h = size[0] * math.sin(math.acos(ratio)) if -1 <= ratio <= 1 else math.nan
          cand = z - h
          if size[1] < cand:   # as std::max in MuJoCo: a NaN candidate never wins
            size[1] = cand
    elif gtype in ('ellipsoid', 'box'):
      size[:] = aamm[3:] - cen
    else:
      raise node.error(f"geom type '{gtype}' cannot be fitted to a mesh", 'type')
  mesh.pos = meshpos
  return size * fitscale


def geom_rbound_aabb(mesh: Mesh):
  """(size (3,), rbound, aabb (6,)) of a mesh geom, from the vertex bounding box."""
  a = mesh.aamm
  half = np.array([max(abs(a[0]), abs(a[3])), max(abs(a[1]), abs(a[4])),
                   max(abs(a[2]), abs(a[5]))])
  rbound = math.sqrt(half[0] * half[0] + half[1] * half[1] + half[2] * half[2])
  aabb = np.array([(a[3] + a[0]) / 2, (a[4] + a[1]) / 2, (a[5] + a[2]) / 2,
                   (a[3] - a[0]) / 2, (a[4] - a[1]) / 2, (a[5] - a[2]) / 2])
  return half, rbound, aabb


def unit_inertia(mesh: Mesh):
  """Diagonal inertia per unit mass of a mesh geom: the equivalent box's."""
  b = mesh.boxsz
  return np.array([(b[1] * b[1] + b[2] * b[2]) / 3, (b[0] * b[0] + b[2] * b[2]) / 3,
                   (b[0] * b[0] + b[1] * b[1]) / 3])


def model_fields(meshes: list[Mesh]) -> dict:
  """mesh_* arrays (MuJoCo's, plus the engine's padded hull table) and their sizes."""
  nmesh = len(meshes)
  nvert = [len(m.vert) for m in meshes]
  nface = [len(m.face) for m in meshes]
  out = {
      'nmesh': nmesh, 'nmeshvert': int(sum(nvert)), 'nmeshface': int(sum(nface)),
      'mesh_vertadr': np.array(np.cumsum([0] + nvert)[:-1], np.int32),
      'mesh_vertnum': np.array(nvert, np.int32),
      'mesh_faceadr': np.array(np.cumsum([0] + nface)[:-1], np.int32),
      'mesh_facenum': np.array(nface, np.int32),
      'mesh_vert': np.concatenate([m.vert.astype(np.float32) for m in meshes]
                                  or [np.zeros((0, 3), np.float32)]),
      'mesh_face': np.concatenate([m.face.astype(np.int32) for m in meshes]
                                  or [np.zeros((0, 3), np.int32)]),
      'mesh_scale': np.array([m.scale for m in meshes], float).reshape(-1, 3),
      'mesh_pos': np.array([m.pos for m in meshes], float).reshape(-1, 3),
      'mesh_quat': np.array([m.quat for m in meshes], float).reshape(-1, 4),
  }
  # hull vertices in the mesh frame, padded by repeating each mesh's first hull vertex
  width = max((len(m.hull_ids) for m in meshes), default=0)
  hullvert = np.zeros((nmesh, width, 3))
  for i, m in enumerate(meshes):
    hv = m.vert[m.hull_ids].astype(np.float32).astype(float)
    hullvert[i] = np.concatenate([hv, np.repeat(hv[:1], width - len(hv), axis=0)])
  out['mesh_hullvert'] = hullvert
  out['mesh_hullvertnum'] = np.array([len(m.hull_ids) for m in meshes], np.int32)
  out['mesh_hullnbr'] = _hull_neighbours(meshes, width)
  return out


def _hull_neighbours(meshes: list[Mesh], width: int) -> np.ndarray:
  """(nmesh, width, maxnbr) int32: for each hull vertex (its position in mesh_hullvert), the
  positions of the vertices it shares a hull edge with, ascending, -1 padded (padding rows: all
  -1). The engine's stand-in for MuJoCo's mesh_graph, which lists the same edges of qhull's
  triangulation in qhull's order (mjc_PlaneConvex walks the deepest vertex's neighbours). Where
  a hull face is not a triangle, the diagonals chosen to triangulate it may differ from qhull's.
  A mesh without a hull (fewer than 4 points or flat) gets no neighbours."""
  lists = []
  for m in meshes:
    pos = {int(v): k for k, v in enumerate(m.hull_ids)}
    nbr = [set() for _ in m.hull_ids]
    for face in (m.hull_faces if m.hull_faces is not None else ()):
      for a, b in ((face[0], face[1]), (face[1], face[2]), (face[2], face[0])):
        nbr[pos[int(a)]].add(pos[int(b)])
        nbr[pos[int(b)]].add(pos[int(a)])
    lists.append([sorted(n) for n in nbr])
  maxnbr = max((len(n) for ls in lists for n in ls), default=0)
  out = np.full((len(meshes), width, maxnbr), -1, np.int32)
  for i, ls in enumerate(lists):
    for k, n in enumerate(ls):
      out[i, k, :len(n)] = n
  return out
