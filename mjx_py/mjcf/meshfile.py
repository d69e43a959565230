"""Mesh file readers: OBJ, binary and ASCII STL, MuJoCo's binary MSH (host only: numpy).

Each reader takes the file bytes and returns (vertices (n, 3) float32, faces (m, 3) int32 or
None). They reproduce what MuJoCo 3.3.3 reads from the same file:

- OBJ (MuJoCo uses tinyobjloader): ``v`` lines give the vertices (all of them, referenced or
  not, no de-duplication); ``f`` lines of the *first group* only (a ``g`` or ``o`` line after
  some faces starts a new group, which MuJoCo ignores); face entries ``v``, ``v/vt``,
  ``v//vn``, ``v/vt/vn``, 1-based, negative ones counted back from the last vertex read so far.
  Polygons are triangulated by tinyobjloader's ear clipping (a fan for convex polygons).
- STL: binary (80-byte header, uint32 triangle count, 50 bytes per triangle) as MuJoCo; ASCII
  (``solid``/``facet``/``vertex`` text) is an mjx_py extension (MuJoCo 3.3.3 rejects it) read
  into the same triangles. Repeated vertices are merged, keeping first occurrences in order.
- MSH: int32 counts (vertices, normals, texcoords, faces), then float32 vertices, normals,
  texcoords and int32 faces; no faces means "use the convex hull".

With ``righthand`` False (a mesh scale of negative determinant) the triangle winding is
reversed, as MuJoCo does, so faces stay outward after the mirror.
Malformed files raise MeshFileError with the reason (and the line, for text formats).
"""

from __future__ import annotations

import numpy as np

MAX_STL_FACES = 200000
MAX_STL_COORD = 2.0 ** 30


class MeshFileError(ValueError):
  """A mesh file that cannot be read; the message says why."""


# ---------------------------------------------------------------------------------------------
# OBJ

def _obj_float(word: str, lineno: int) -> float:
  try:
    return float(word)
  except ValueError:
    raise MeshFileError(f"line {lineno}: bad number '{word}'") from None


def _obj_index(word: str, nvert: int, lineno: int) -> int:
  """0-based vertex id of one face entry ('v', 'v/vt', 'v//vn' or 'v/vt/vn')."""
  head = word.split('/')[0]
  try:
    idx = int(head, 10)
  except ValueError:
    raise MeshFileError(f"line {lineno}: bad face entry '{word}'") from None
  if idx == 0:
    raise MeshFileError(f"line {lineno}: face index 0 (OBJ indices start at 1)")
  return idx - 1 if idx > 0 else nvert + idx


def load_obj(data: bytes, righthand: bool = True):
  """(vertices (n, 3) float32, faces (m, 3) int32) of an OBJ file (see the module docstring)."""
  try:
    text = data.decode('utf-8')
  except UnicodeDecodeError:
    text = data.decode('latin-1')
  verts: list[tuple[float, float, float]] = []
  polygons: list[list[int]] = []
  done = False            # the first group with faces is complete
  for lineno, line in enumerate(text.splitlines(), 1):
    words = line.split('#', 1)[0].split()
    if not words:
      continue
    key = words[0]
    if key == 'v':
      if len(words) < 4:
        raise MeshFileError(f'line {lineno}: a vertex needs 3 coordinates')
      verts.append(tuple(_obj_float(w, lineno) for w in words[1:4]))
    elif key in ('g', 'o'):
      done = done or bool(polygons)
    elif key == 'f':
      if len(words) < 4:
        raise MeshFileError(f'line {lineno}: a face needs at least 3 vertices')
      poly = [_obj_index(w, len(verts), lineno) for w in words[1:]]
      if not done:
        polygons.append(poly)
  if not verts:
    raise MeshFileError('no vertices')
  v = np.array(verts, dtype=np.float32)
  tris: list[tuple[int, int, int]] = []
  for poly in polygons:
    for tri in _triangulate(poly, v):
      tris.append(tri if righthand else (tri[0], tri[2], tri[1]))
  faces = np.array(tris, dtype=np.int32).reshape(-1, 3)
  return v, (faces if len(faces) else None)


def _point_in_triangle(vx, vy, tx, ty) -> bool:
  """Even-odd crossing test of (tx, ty) against the triangle (vx, vy) (float32)."""
  inside = False
  j = 2
  for i in range(3):
    if (vy[i] > ty) != (vy[j] > ty):
      if tx < (vx[j] - vx[i]) * (ty - vy[i]) / (vy[j] - vy[i]) + vx[i]:
        inside = not inside
    j = i
  return inside


def _triangulate(poly: list[int], v: np.ndarray):
  """Triangles of one OBJ polygon, in tinyobjloader's order (float32 arithmetic).

  Ear clipping in the plane of the two coordinate axes best aligned with the polygon (chosen at
  its first non-degenerate corner): starting at a guessed corner, a corner whose turn agrees
  with the polygon's signed area and whose triangle holds no other remaining vertex is cut off;
  otherwise the guess moves on. A convex polygon gives the fan (0, 1, 2), (0, 2, 3), ...
  """
  n = len(poly)
  if n == 3:
    return [tuple(poly)]
  f32 = np.float32
  axes = (1, 2)
  for k in range(n):
    p0, p1, p2 = (v[poly[(k + j) % n]] if 0 <= poly[(k + j) % n] < len(v) else None
                  for j in range(3))
    if p0 is None or p1 is None or p2 is None:
      continue
    e0, e1 = p1 - p0, p2 - p1
    cx = abs(e0[1] * e1[2] - e0[2] * e1[1])
    cy = abs(e0[2] * e1[0] - e0[0] * e1[2])
    cz = abs(e0[0] * e1[1] - e0[1] * e1[0])
    tiny = np.finfo(np.float32).eps
    if cx > tiny or cy > tiny or cz > tiny:
      if not (cx > cy and cx > cz):
        axes = (0, 2) if not (cz > cx and cz > cy) else (0, 1)
      break

  def xy(i):
    if 0 <= i < len(v):
      return v[i][axes[0]], v[i][axes[1]]
    return f32(0), f32(0)

  area = f32(0)
  for k in range(n):
    x0, y0 = xy(poly[k])
    x1, y1 = xy(poly[(k + 1) % n])
    area += (x0 * y1 - y0 * x1) * f32(0.5)
  remaining = list(poly)
  out = []
  guess = 0
  iterations = n
  previous = n
  while len(remaining) > 3 and iterations > 0:
    m = len(remaining)
    if guess >= m:
      guess -= m
    if previous != m:
      previous, iterations = m, m
    else:
      iterations -= 1
    ind = [remaining[(guess + k) % m] for k in range(3)]
    pts = [xy(i) for i in ind]
    vx = [q[0] for q in pts]
    vy = [q[1] for q in pts]
    cross = (vx[1] - vx[0]) * (vy[2] - vy[1]) - (vy[1] - vy[0]) * (vx[2] - vx[1])
    if cross * area < 0:     # reflex corner
      guess += 1
      continue
    if any(_point_in_triangle(vx, vy, *xy(remaining[(guess + k) % m])) for k in range(3, m)):
      guess += 1
      continue
    out.append(tuple(ind))
    del remaining[(guess + 1) % m]
  if len(remaining) == 3:
    out.append(tuple(remaining))
  return out


# ---------------------------------------------------------------------------------------------
# STL

def _dedup(tri_verts: np.ndarray):
  """Merged vertices (first occurrences, in order) and faces of (m, 3, 3) float32 triangles.

  Equality is float equality (so -0.0 and 0.0 merge; the first one's sign is kept).
  """
  flat = tri_verts.reshape(-1, 3)
  key = flat + np.float32(0.0)   # -0.0 + 0.0 = +0.0
  _, first, inverse = np.unique(key.view(np.dtype((np.void, 12))), return_index=True,
                                return_inverse=True)
  # renumber the unique vertices by first occurrence
  order = np.argsort(first, kind='stable')
  rank = np.empty(len(first), np.int64)
  rank[order] = np.arange(len(first))
  verts = flat[np.sort(first)]
  faces = rank[inverse.reshape(-1)].reshape(-1, 3).astype(np.int32)
  return verts, faces


def _check_stl(tri: np.ndarray, righthand: bool):
  if not np.all(np.isfinite(tri)):
    raise MeshFileError('vertex coordinate is not finite')
  if np.any(np.abs(tri) > MAX_STL_COORD):
    raise MeshFileError('vertex exceeds maximum bounds')
  verts, faces = _dedup(tri)   # vertices numbered in file order, whatever the winding
  if not righthand:
    faces = faces[:, [0, 2, 1]]
  return verts, faces


def load_stl(data: bytes, righthand: bool = True):
  """(vertices, faces) of a binary or ASCII STL file (repeated vertices merged)."""
  if len(data) >= 84:
    count = int(np.frombuffer(data[80:84], '<u4')[0])
    if 84 + 50 * count == len(data):
      if count < 1 or count > MAX_STL_FACES:
        raise MeshFileError(f'number of faces should be between 1 and {MAX_STL_FACES}')
      rec = np.frombuffer(data[84:], dtype=np.dtype([('n', '<f4', 3), ('v', '<f4', (3, 3)),
                                                     ('attr', '<u2')]))
      return _check_stl(rec['v'].astype(np.float32), righthand)
  if data.lstrip()[:5].lower() == b'solid' and data.isascii() and b'\0' not in data:
    return _check_stl(_ascii_stl(data), righthand)
  if len(data) < 84:
    raise MeshFileError('invalid header (file too short for a binary STL)')
  raise MeshFileError(f'wrong size for a binary STL ({len(data)} bytes, the header announces '
                      f'{count} triangles: {84 + 50 * count} bytes)')


def _ascii_stl(data: bytes) -> np.ndarray:
  """(m, 3, 3) float32 triangles of an ASCII STL ('vertex x y z' lines, three per facet)."""
  text = data.decode('ascii')
  verts, facet = [], []
  infacet = False
  for lineno, line in enumerate(text.splitlines(), 1):
    words = line.split()
    if not words:
      continue
    key = words[0].lower()
    if key == 'facet':
      if infacet:
        raise MeshFileError(f"line {lineno}: 'facet' before 'endfacet'")
      infacet, facet = True, []
    elif key == 'vertex':
      if not infacet or len(words) != 4:
        raise MeshFileError(f'line {lineno}: malformed vertex line')
      try:
        facet.append([float(w) for w in words[1:]])
      except ValueError:
        raise MeshFileError(f'line {lineno}: bad number in vertex line') from None
    elif key == 'endfacet':
      if not infacet or len(facet) != 3:
        raise MeshFileError(f'line {lineno}: a facet needs exactly 3 vertices')
      verts.append(facet)
      infacet = False
    elif key not in ('solid', 'outer', 'endloop', 'endsolid'):
      raise MeshFileError(f"line {lineno}: unexpected '{words[0]}'")
  if infacet:
    raise MeshFileError("missing 'endfacet' at the end of the file")
  if not verts or len(verts) > MAX_STL_FACES:
    raise MeshFileError(f'number of faces should be between 1 and {MAX_STL_FACES}')
  return np.array(verts, dtype=np.float32)


# ---------------------------------------------------------------------------------------------
# MSH

def load_msh(data: bytes, righthand: bool = True):
  """(vertices, faces or None) of a MuJoCo MSH file."""
  if len(data) < 16:
    raise MeshFileError('missing header')
  nv, nn, nt, nf = (int(x) for x in np.frombuffer(data[:16], '<i4'))
  if nv < 4 or nf < 0 or nn < 0 or nt < 0 or (nn > 0 and nn != nv) or (nt > 0 and nt != nv):
    raise MeshFileError('invalid sizes')
  if len(data) != 16 + 12 * nv + 12 * nn + 8 * nt + 12 * nf:
    raise MeshFileError('unexpected file size')
  verts = np.frombuffer(data[16:16 + 12 * nv], '<f4').reshape(-1, 3).astype(np.float32)
  start = 16 + 12 * nv + 12 * nn + 8 * nt
  faces = np.frombuffer(data[start:], '<i4').reshape(-1, 3).astype(np.int32)
  if not righthand:
    faces = faces[:, [0, 2, 1]]
  return verts, (faces if len(faces) else None)


CONTENT_TYPES = {'model/obj': load_obj, 'model/stl': load_stl, 'model/vnd.mujoco.msh': load_msh}
EXTENSIONS = {'.obj': 'model/obj', '.stl': 'model/stl', '.msh': 'model/vnd.mujoco.msh'}
