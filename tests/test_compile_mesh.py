"""Mesh and height-field assets in the compiler, against MuJoCo 3.3.3's MjModel.

Every model is compiled by mjx_py and by ``mujoco.MjModel``; every field mjx_py emits is compared
by name (float64, 1e-8 relative; float32 fields such as mesh_vert and hfield_data must agree as
float32), except the engine-only keys (mjx_py.mjcf.ENGINE_ONLY: hull tables, inertia inputs)
and, for meshes whose faces come from the convex hull, mesh_face (qhull's triangulation and
ordering are its own; mesh_hullnbr is checked against mesh_graph's edges where they are unique).
Hulls compare as sets: the hull vertices of mjx_py against the vertices listed in MuJoCo's
mesh_graph, plus the hull volume through the body mass.

Covered: the committed models tests/models/mesh_assets.xml and hfield_assets.xml (OBJ with
quads, every face-entry form, negative indices and an unused vertex; a non-convex L-shaped prism
under inertia legacy/exact/convex/shell; an icosphere from the script below; inline meshes;
refpos/refquat/scale including a mirror; default classes; primitives fitted to meshes; inline
and nrow/ncol height fields, one on a moving body); files generated into tmp_path (binary STL
with repeated vertices, ASCII STL (an mjx_py extension: MuJoCo reads only binary STL, so it is
compared with MuJoCo's compile of the same triangles as binary STL), MSH, binary hfield, PNG
height fields of every color type and bit depth, all five row filters, interlaced or not);
file lookup (meshdir, assetdir, strippath, the assets dict); fitaabb; maxhullvert; error cases
(each must raise MJCFError naming element, attribute, file and line); and put_model / make_data
/ forward on a model with mesh and hfield geoms.
"""

from __future__ import annotations

import os
import struct
import zlib

import jax
import mujoco
import numpy as np
import pytest

import mjx_py
from mjx_py import mjcf
from mjx_py.errors import MJCFError
from mjx_py.mjcf import hull as hullmod

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MESHES = os.path.join(ROOT, 'tests', 'models', 'meshes')
MODELS = ['tests/models/mesh_assets.xml', 'tests/models/hfield_assets.xml']
NOT_COMPARED = mjcf.ENGINE_ONLY
RTOL = 1e-8


# ---------------------------------------------------------------------------------------------
# helpers

def _reference(mj, key):
  if key.startswith('opt_'):
    return getattr(mj.opt, key[4:])
  if key.startswith('stat_'):
    return getattr(mj.stat, key[5:])
  return getattr(mj, key)


def _mismatches(ours: dict, mj, skip=()) -> list[str]:
  """Fields of ``ours`` that differ from MjModel (1e-8 relative, 1e-11 absolute near zero)."""
  out = []
  for key, value in ours.items():
    if key in NOT_COMPARED or key in skip:
      continue
    ref = np.asarray(_reference(mj, key), float)
    got = np.asarray(value, float)
    if got.size == 0 and ref.size == 0:
      continue
    if got.shape != ref.shape:
      if got.size != ref.size:
        out.append(f'{key}: shape {got.shape} != {ref.shape}')
        continue
      got = got.reshape(ref.shape)
    err = np.abs(got - ref)
    bad = err > RTOL * np.maximum(np.abs(ref), 1e-3)
    if np.any(bad):
      i = tuple(np.argwhere(bad)[0])
      out.append(f'{key}{list(i)}: ours {got[i]!r} mujoco {ref[i]!r}')
  return out


def _both(xml=None, path=None, assets=None):
  if path is not None:
    return mjcf.compile_file(path), mujoco.MjModel.from_xml_path(path)
  raw = {k: v.encode() if isinstance(v, str) else v for k, v in (assets or {}).items()}
  return mjcf.compile_string(xml, assets), mujoco.MjModel.from_xml_string(xml, raw)


def _mj_hull(mj, i):
  """Hull vertex coordinates (k, 3) of mesh i in MuJoCo's mesh_graph."""
  adr = mj.mesh_graphadr[i]
  numvert = mj.mesh_graph[adr]
  ids = mj.mesh_graph[adr + 2 + numvert:adr + 2 + 2 * numvert]
  return mj.mesh_vert[mj.mesh_vertadr[i] + ids]


def _our_hull(ours, i):
  n = ours['mesh_hullvertnum'][i]
  return ours['mesh_hullvert'][i][:n]


def _same_rows(a, b):
  a, b = np.asarray(a, float), np.asarray(b, float)
  return a.shape == b.shape and np.array_equal(a[np.lexsort(a.T)], b[np.lexsort(b.T)])


def icosphere_obj() -> str:
  """The committed tests/models/meshes/icosphere.obj: an icosahedron subdivided once (42
  vertices, 80 triangles, outward) on the unit sphere, written with 6 decimals."""
  t = (1 + 5 ** 0.5) / 2
  verts = [(-1, t, 0), (1, t, 0), (-1, -t, 0), (1, -t, 0), (0, -1, t), (0, 1, t), (0, -1, -t),
           (0, 1, -t), (t, 0, -1), (t, 0, 1), (-t, 0, -1), (-t, 0, 1)]
  verts = [tuple(np.array(v, float) / np.linalg.norm(v)) for v in verts]
  faces = [(0, 11, 5), (0, 5, 1), (0, 1, 7), (0, 7, 10), (0, 10, 11), (1, 5, 9), (5, 11, 4),
           (11, 10, 2), (10, 7, 6), (7, 1, 8), (3, 9, 4), (3, 4, 2), (3, 2, 6), (3, 6, 8),
           (3, 8, 9), (4, 9, 5), (2, 4, 11), (6, 2, 10), (8, 6, 7), (9, 8, 1)]
  midpoint = {}

  def mid(a, b):
    key = (min(a, b), max(a, b))
    if key not in midpoint:
      m = np.add(verts[a], verts[b])
      verts.append(tuple(m / np.linalg.norm(m)))
      midpoint[key] = len(verts) - 1
    return midpoint[key]

  fine = []
  for a, b, c in faces:
    ab, bc, ca = mid(a, b), mid(b, c), mid(c, a)
    fine += [(a, ab, ca), (b, bc, ab), (c, ca, bc), (ab, bc, ca)]
  lines = ['# Icosphere (icosahedron subdivided once) written by tests/test_compile_mesh.py']
  lines += [f'v {x:.6f} {y:.6f} {z:.6f}' for x, y, z in verts]
  lines += [f'f {a + 1} {b + 1} {c + 1}' for a, b, c in fine]
  return '\n'.join(lines) + '\n'


def _stl_triangles(path):
  """(m, 3, 3) triangles of an ASCII STL (vertex lines, three per facet)."""
  rows = [line.split()[1:] for line in open(path) if line.split()[:1] == ['vertex']]
  return np.array(rows, np.float32).reshape(-1, 3, 3)


def _binary_stl(tris) -> bytes:
  tris = np.asarray(tris, '<f4')
  rec = b''.join(struct.pack('<3f', 0, 0, 0) + t.tobytes() + b'\0\0' for t in tris)
  return b'solid (binary, despite this word)'.ljust(80, b' ') + struct.pack('<I', len(tris)) + rec


def _mesh_xml(asset: str, geom_type='mesh', extra_geom='', compiler='') -> str:
  return f"""<mujoco>
  <compiler {compiler}/>
  <asset>{asset}</asset>
  <worldbody>
    <body pos="0 0 1"><freejoint/>
      <geom name="g" type="{geom_type}" mesh="m" {extra_geom}/>
    </body>
  </worldbody>
</mujoco>"""


# ---------------------------------------------------------------------------------------------
# committed models

@pytest.mark.parametrize('name', MODELS)
def test_model_files_match_mujoco(name):
  ours, mj = _both(path=os.path.join(ROOT, name))
  assert not _mismatches(ours, mj)
  assert ours['nmesh'] == mj.nmesh and ours['nhfield'] == mj.nhfield
  assert ours['nmesh'] + ours['nhfield'] > 0


def test_icosphere_file_is_reproducible():
  with open(os.path.join(MESHES, 'icosphere.obj')) as f:
    assert f.read() == icosphere_obj()


def test_inertia_modes_on_a_nonconvex_mesh():
  """L-shaped prism: exact = true volume, convex = hull volume, legacy over-counts."""
  ours, mj = _both(path=os.path.join(ROOT, MODELS[0]))
  bodies = dict(ours['names'])['body']
  mass = {k: ours['body_mass'][bodies.index(k)] for k in ('l_legacy', 'l_exact', 'l_convex')}
  height = float(np.float32(0.7))           # vertices are float32
  area_l = 3 * 1 + 1 * 1                    # the L cross-section
  area_hull = 3 * 1 + 1 * 1 + 0.5 * 2 * 1   # its convex hull adds the triangle (3,1)(1,1)(1,2)
  np.testing.assert_allclose(mass['l_exact'], 5 * height * area_l, rtol=1e-12)
  np.testing.assert_allclose(mass['l_convex'], 5 * height * area_hull, rtol=1e-12)
  assert mass['l_legacy'] > mass['l_exact']
  for k, v in mass.items():
    np.testing.assert_allclose(v, mj.body_mass[bodies.index(k)], rtol=1e-12)


# ---------------------------------------------------------------------------------------------
# convex hulls

def _cloud_assets():
  rng = np.random.default_rng(7)
  gauss = rng.normal(size=(40, 3)) * [1.0, 0.6, 0.3]
  sphere = rng.normal(size=(120, 3))
  sphere = np.concatenate([sphere / np.linalg.norm(sphere, axis=1, keepdims=True),
                           0.5 * rng.random((20, 3)) - 0.25])
  # a 3x3x3 grid: 8 corners extreme, the others on faces, edges or inside
  grid = np.stack(np.meshgrid([0, 0.5, 1], [0, 0.65, 1.3], [0, 0.35, 0.7]), -1).reshape(-1, 3)
  # the grid rotated and written with 6 digits: face points a little off their planes
  mat = np.zeros(9)
  mujoco.mju_quat2Mat(mat, np.array([0.8, 0.3, -0.4, 0.34]) / np.linalg.norm([0.8, 0.3, -0.4,
                                                                              0.34]))
  return {'gauss': gauss, 'sphere': sphere, 'grid': grid, 'tilted': grid @ mat.reshape(3, 3).T}


def _vertex_attr(p):
  return ' '.join(f'{x:.6g}' for x in np.asarray(p).ravel())


def test_hulls_match_qhull():
  clouds = _cloud_assets()
  asset = ''.join(f'<mesh name="{k}" vertex="{_vertex_attr(p)}"/>' for k, p in clouds.items())
  bodies = ''.join(f'<body><freejoint/><geom type="mesh" mesh="{k}"/></body>' for k in clouds)
  xml = f'<mujoco><asset>{asset}</asset><worldbody>{bodies}</worldbody></mujoco>'
  ours, mj = _both(xml)
  # mesh_face of a vertex-only mesh is its hull triangulation: compared as counts (below)
  assert not _mismatches(ours, mj, skip={'mesh_face'})
  np.testing.assert_array_equal(ours['mesh_facenum'], mj.mesh_facenum)
  for i, k in enumerate(clouds):
    assert _same_rows(_our_hull(ours, i), _mj_hull(mj, i)), k
    # our faces are the hull: every face vertex is a hull vertex
    face = ours['mesh_face'][ours['mesh_faceadr'][i]:][:ours['mesh_facenum'][i]]
    vert = ours['mesh_vert'][ours['mesh_vertadr'][i]:][:ours['mesh_vertnum'][i]]
    assert _same_rows(np.unique(vert[face.ravel()], axis=0), _our_hull(ours, i))
  assert ours['mesh_hullvertnum'][2] == 8   # the grid: corners only
  # hull-edge neighbours (mesh_hullnbr) against the edges of MuJoCo's mesh_graph, for the
  # clouds in general position (simplicial hulls: the triangulation, hence the edges, is unique)
  for i in (0, 1):
    assert _hull_edges_ours(ours, i) == _hull_edges_mj(mj, i)


def _hull_edges_mj(mj, i):
  """Hull edges of mesh i as a set of coordinate-tuple pairs, from MuJoCo's mesh_graph
  (numvert, numface, vert_edgeadr, vert_globalid, edge_localid (-1 ends a list), faces)."""
  adr = mj.mesh_graphadr[i]
  g = mj.mesh_graph
  n = g[adr]
  edgeadr = g[adr + 2:adr + 2 + n]
  gid = g[adr + 2 + n:adr + 2 + 2 * n]
  local = g[adr + 2 + 2 * n:]
  vert = mj.mesh_vert[mj.mesh_vertadr[i] + gid].astype(float)
  out = set()
  for a in range(n):
    k = edgeadr[a]
    while local[k] >= 0:
      out.add(frozenset((tuple(vert[a]), tuple(vert[local[k]]))))
      k += 1
  return out


def _hull_edges_ours(ours, i):
  n = ours['mesh_hullvertnum'][i]
  vert = ours['mesh_hullvert'][i].astype(np.float32).astype(float)
  nbr = ours['mesh_hullnbr'][i]
  out = set()
  for a in range(n):
    assert list(nbr[a][nbr[a] >= 0]) == sorted(nbr[a][nbr[a] >= 0])
    out |= {frozenset((tuple(vert[a]), tuple(vert[b]))) for b in nbr[a] if b >= 0}
  return out


def test_fitaabb():
  """Primitives fitted to the bounding box; like MuJoCo, each fit moves the mesh offset."""
  p = _vertex_attr(_cloud_assets()['gauss'] + [0.2, -0.1, 0.5])
  geoms = ''.join(f'<geom type="{t}" mesh="m" {extra}/>' for t, extra in (
      ('box', 'pos="1 0 0"'), ('sphere', 'fitscale="1.5"'), ('mesh', ''), ('capsule', ''),
      ('cylinder', 'euler="0 30 0"'), ('ellipsoid', '')))
  for fitaabb in ('false', 'true'):
    xml = (f'<mujoco><compiler fitaabb="{fitaabb}"/><asset><mesh name="m" vertex="{p}"/></asset>'
           f'<worldbody><body><freejoint/>{geoms}</body></worldbody></mujoco>')
    ours, mj = _both(xml)
    assert not _mismatches(ours, mj, skip={'mesh_face'}), fitaabb
    assert ours['geom_dataid'].tolist() == [0] * 6


def test_hull_module_degenerate_and_padding():
  with pytest.raises(hullmod.DegenerateHull, match='coplanar'):
    hullmod.convex_hull(np.c_[np.random.default_rng(0).random((6, 2)), np.zeros(6)])
  with pytest.raises(hullmod.DegenerateHull, match='collinear'):
    hullmod.convex_hull(np.outer(np.arange(5.0), [1, 2, 3]))
  ours = mjcf.compile_string(
      '<mujoco><asset><mesh name="a" vertex="0 0 0 1 0 0 0 1 0 0 0 1"/>'
      f'<mesh name="b" vertex="{_vertex_attr(_cloud_assets()["sphere"])}"/></asset></mujoco>')
  hv, num = ours['mesh_hullvert'], ours['mesh_hullvertnum']
  assert hv.shape == (2, num.max(), 3) and num[0] == 4
  np.testing.assert_array_equal(hv[0, 4:], np.repeat(hv[0, :1], hv.shape[1] - 4, axis=0))
  d = np.random.default_rng(1).normal(size=(20, 3))   # padding leaves support values alone
  np.testing.assert_array_equal((hv[0] @ d.T).max(0), (hv[0, :4] @ d.T).max(0))


def test_maxhullvert():
  p = _cloud_assets()['sphere']
  xml = (f'<mujoco><asset><mesh name="full" vertex="{_vertex_attr(p)}"/>'
         f'<mesh name="cut" vertex="{_vertex_attr(p)}" maxhullvert="10"/>'
         f'<mesh name="loose" vertex="{_vertex_attr(p)}" maxhullvert="500"/></asset></mujoco>')
  ours, mj = _both(xml)
  assert ours['mesh_hullvertnum'][1] == 10 and mj.mesh_graph[mj.mesh_graphadr[1]] <= 10
  # the truncated hull keeps points of the full hull only (qhull may keep other ones)
  raw = np.asarray(p, np.float32).astype(float)
  ids, _ = hullmod.convex_hull(raw)
  cut, _ = hullmod.convex_hull(raw, maxvert=10)
  assert len(cut) == 10 and set(cut) <= set(ids)
  assert ours['mesh_hullvertnum'][0] == len(ids)
  assert _same_rows(_our_hull(ours, 0), _mj_hull(mj, 0))
  assert _same_rows(_our_hull(ours, 2), _mj_hull(mj, 2))   # a loose limit changes nothing


# ---------------------------------------------------------------------------------------------
# mesh files

def test_stl_binary_and_ascii(tmp_path):
  tris = _stl_triangles(os.path.join(MESHES, 'wedge.stl'))
  (tmp_path / 'wedge_bin.stl').write_bytes(_binary_stl(tris))
  (tmp_path / 'wedge_ascii.stl').write_bytes(open(os.path.join(MESHES, 'wedge.stl'), 'rb').read())
  for scale in ('1 1 1', '-1 2 0.5'):
    xml = _mesh_xml(f'<mesh name="m" file="{{}}" scale="{scale}"/>')
    (tmp_path / 'a.xml').write_text(xml.format('wedge_bin.stl'))
    (tmp_path / 'b.xml').write_text(xml.format('wedge_ascii.stl'))
    mj = mujoco.MjModel.from_xml_path(str(tmp_path / 'a.xml'))
    for path in ('a.xml', 'b.xml'):
      ours = mjcf.compile_file(str(tmp_path / path))
      assert not _mismatches(ours, mj), (scale, path)
    # 8 triangles share 6 distinct corners
    assert mj.mesh_vertnum[0] == 6 and ours['mesh_vertnum'][0] == 6
  with pytest.raises(ValueError, match='ASCII'):
    mujoco.MjModel.from_xml_path(str(tmp_path / 'b.xml'))   # MuJoCo reads binary STL only


def _msh(verts, faces=()):
  verts = np.asarray(verts, '<f4').reshape(-1, 3)
  faces = np.asarray(faces, '<i4').reshape(-1, 3)
  return (struct.pack('<4i', len(verts), 0, 0, len(faces)) + verts.tobytes() + faces.tobytes())


def test_msh_obj_and_assets_dict():
  tet = [[0, 0, 0], [1, 0, 0], [0, 1.5, 0], [0.2, 0.3, 0.9]]
  faces = [[0, 2, 1], [0, 1, 3], [0, 3, 2], [1, 2, 3]]
  obj = ('v 0 0 0\nv 1 0 0\nv 0 1.5 0\nv 0.2 0.3 0.9\n'
         'f 1 3 2\nf 1 2 4\nf 1 4 3\ng later\nf 2 3 4\n')  # MuJoCo reads the first group only
  hexagon = ('v 0 0 0\nv 3 0 0\nv 3 1 0\nv 1 1 0\nv 1 2 0\nv 0 2 0\nv 1 0.5 1.5\n'
             'f 6 5 4 3 2 1\nf 1 2 7\nf 2 3 7\nf 3 4 7\nf 4 5 7\nf 5 6 7\nf -2 -7 -1\n')
  assets = {'t.msh': _msh(tet, faces), 'cloud.msh': _msh(tet + [[0.1, 0.1, 0.1]]),
            'open.obj': obj, 'pyramid.obj': hexagon}
  asset = ''.join(f'<mesh name="{k.replace(".", "_")}" file="{k}" inertia="shell"/>'
                  for k in assets)
  bodies = ''.join(f'<body><freejoint/><geom type="mesh" mesh="{k.replace(".", "_")}"/></body>'
                   for k in assets)
  xml = f'<mujoco><asset>{asset}</asset><worldbody>{bodies}</worldbody></mujoco>'
  ours, mj = _both(xml, assets=assets)
  assert not _mismatches(ours, mj, skip={'mesh_face'})
  np.testing.assert_array_equal(ours['mesh_facenum'], mj.mesh_facenum)
  for i in (0, 2, 3):   # meshes with file faces: same triangles in the same order
    a, n = mj.mesh_faceadr[i], mj.mesh_facenum[i]
    np.testing.assert_array_equal(ours['mesh_face'][a:a + n], mj.mesh_face[a:a + n])
  assert mj.mesh_facenum[2] == 3 and mj.mesh_facenum[3] == 10   # 3 of 4; hexagon -> 4 + 6


def test_file_lookup(tmp_path):
  """meshdir (relative, absolute), assetdir, strippath; hfields use meshdir too."""
  (tmp_path / 'sub' / 'assets').mkdir(parents=True)
  obj = open(os.path.join(MESHES, 'box_quads.obj'), 'rb').read()
  (tmp_path / 'sub' / 'assets' / 'b.obj').write_bytes(obj)
  (tmp_path / 'sub' / 'assets' / 'h.bin').write_bytes(
      struct.pack('<ii', 2, 2) + np.array([0, 1, 2, 4], '<f4').tobytes())
  absdir = str(tmp_path / 'sub' / 'assets')
  cases = {'meshdir': 'meshdir="assets"', 'abs': f'meshdir="{absdir}"',
           'assetdir': 'assetdir="assets"', 'strip': 'meshdir="assets" strippath="true"'}
  for label, compiler in cases.items():
    mesh_file = 'somewhere/else/b.obj' if label == 'strip' else 'b.obj'
    xml = f"""<mujoco><compiler {compiler}/>
      <asset><mesh name="m" file="{mesh_file}"/><hfield name="h" file="h.bin" size="1 1 1 1"/>
      </asset><worldbody><geom type="hfield" hfield="h"/>
      <body><freejoint/><geom type="mesh" mesh="m" contype="0" conaffinity="0"/></body>
      </worldbody></mujoco>"""
    path = tmp_path / 'sub' / f'{label}.xml'
    path.write_text(xml)
    ours, mj = _both(path=str(path))
    assert not _mismatches(ours, mj), label


# ---------------------------------------------------------------------------------------------
# height fields

def _png_filter(lines: np.ndarray, bpp: int, kinds) -> bytes:
  """PNG scanlines (h, stride) uint8 with row filters cycling through ``kinds``."""
  out = []
  prev = np.zeros(lines.shape[1], np.int32)
  for y, line in enumerate(lines.astype(np.int32)):
    kind = kinds[y % len(kinds)]
    left = np.concatenate([np.zeros(bpp, np.int32), line[:-bpp]])
    upleft = np.concatenate([np.zeros(bpp, np.int32), prev[:-bpp]])
    if kind == 0:
      pred = np.zeros_like(line)
    elif kind == 1:
      pred = left
    elif kind == 2:
      pred = prev
    elif kind == 3:
      pred = (left + prev) >> 1
    else:
      p = left + prev - upleft
      pa, pb, pc = np.abs(p - left), np.abs(p - prev), np.abs(p - upleft)
      pred = np.where((pa <= pb) & (pa <= pc), left, np.where(pb <= pc, prev, upleft))
    out.append(bytes([kind]) + ((line - pred) & 0xff).astype(np.uint8).tobytes())
    prev = line
  return b''.join(out)


def _png_lines(samples: np.ndarray, depth: int) -> np.ndarray:
  h, w, c = samples.shape
  if depth == 16:
    return samples.astype('>u2').reshape(h, -1).view(np.uint8)
  if depth == 8:
    return samples.astype(np.uint8).reshape(h, -1)
  bits = ((samples.reshape(h, -1)[:, :, None] >> np.arange(depth - 1, -1, -1)) & 1)
  return np.packbits(bits.reshape(h, -1).astype(np.uint8), axis=1)


def _png(samples, ctype, depth, palette=None, interlace=False, kinds=(0, 1, 2, 3, 4)) -> bytes:
  """A PNG file of integer samples (h, w, channels), with our own encoder."""
  samples = np.asarray(samples)
  h, w, c = samples.shape
  bpp = max(1, c * depth // 8)
  if not interlace:
    raw = _png_filter(_png_lines(samples, depth), bpp, kinds)
  else:
    passes = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
              (0, 1, 1, 2))
    raw = b''.join(_png_filter(_png_lines(samples[y0::dy, x0::dx], depth), bpp, kinds)
                   for x0, y0, dx, dy in passes if samples[y0::dy, x0::dx].size)

  def chunk(kind, data):
    return (struct.pack('>I', len(data)) + kind + data
            + struct.pack('>I', zlib.crc32(kind + data) & 0xffffffff))
  out = b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, depth, ctype, 0, 0,
                                                          int(interlace)))
  if palette is not None:
    out += chunk(b'PLTE', np.asarray(palette, np.uint8).tobytes())
  return out + chunk(b'IDAT', zlib.compress(raw)) + chunk(b'IEND', b'')


def _png_cases():
  rng = np.random.default_rng(11)
  h, w = 7, 11
  cases = {}
  for ctype, channels, depths in ((0, 1, (1, 2, 4, 8, 16)), (2, 3, (8, 16)), (4, 2, (8, 16)),
                                  (6, 4, (8, 16)), (3, 1, (1, 2, 4, 8))):
    for depth in depths:
      top = (1 << depth) - 1 if ctype != 3 else min(255, (1 << depth) - 1)
      samples = rng.integers(0, top + 1, size=(h, w, channels))
      palette = rng.integers(0, 256, size=(top + 1, 3)) if ctype == 3 else None
      for interlace in (False, True):
        cases[f'c{ctype}_d{depth}' + ('_adam7' if interlace else '')] = _png(
            samples, ctype, depth, palette, interlace)
  return cases


PNG_CASES = _png_cases()


def test_png_and_binary_hfields():
  assets = dict(PNG_CASES)
  assets['raw.bin'] = struct.pack('<ii', 3, 2) + np.array([1, 2, 3, 4, 5, 7], '<f4').tobytes()
  asset = ''.join(f'<hfield name="{k}" file="{k}.png" size="1 2 0.5 0.1"/>' for k in PNG_CASES)
  asset += '<hfield file="raw.bin" size="1 1 1 1"/>'
  xml = f'<mujoco><asset>{asset}</asset><worldbody><geom type="hfield" hfield="raw"/>' \
        '</worldbody></mujoco>'
  files = {f'{k}.png': v for k, v in PNG_CASES.items()}
  files['raw.bin'] = assets['raw.bin']
  ours, mj = _both(xml, assets=files)
  assert not _mismatches(ours, mj)
  assert ours['nhfield'] == len(PNG_CASES) + 1
  # the binary format keeps its row order, the PNG rows are flipped (MuJoCo's conventions)
  a = ours['hfield_adr'][-1]
  np.testing.assert_allclose(ours['hfield_data'][a:a + 6], np.array([0, 1, 2, 3, 4, 6]) / 6,
                             rtol=1e-7)


# ---------------------------------------------------------------------------------------------
# errors

def _case(name, xml, attribute, element, msg, files=None, oracle=True):
  return pytest.param(xml, attribute, element, msg, files or {}, oracle, id=name)


TET = 'vertex="0 0 0  1 0 0  0 1 0  0 0 1"'
OBJ = 'v 0 0 0\nv 1 0 0\nv 0 1 0\nv 0 0 1\nf 1 3 2\nf 1 2 4\nf 1 4 3\nf 2 3 4\n'
ERRORS = [
    _case('missing_file', '<mesh name="m" file="nope.obj"/>', 'file', 'mesh', 'could not open'),
    _case('unknown_extension', '<mesh name="m" file="m.ply"/>', 'file', 'mesh', 'file type',
          {'m.ply': OBJ}),
    _case('bad_content_type', '<mesh name="m" file="m.obj" content_type="model/ply"/>',
          'content_type', 'mesh', 'content type', {'m.obj': OBJ}),
    _case('coplanar_vertices', '<mesh name="m" vertex="0 0 0 1 0 0 0 1 0 1 1 0"/>', 'vertex',
          'mesh', 'coplanar'),
    _case('three_vertices', '<mesh name="m" vertex="0 0 0 1 0 0 0 1 0"/>', 'vertex', 'mesh',
          'at least 4'),
    _case('zero_volume', '<mesh name="m" vertex="0 0 0 1 0 0 0 1 0 1 1 0" face="0 1 2 2 1 3"/>',
          'inertia', 'mesh', 'volume is too small'),
    _case('negative_volume', f'<mesh name="m" {TET} scale="-1 1 1" inertia="convex"/>', None,
          'mesh', 'negative'),
    _case('face_out_of_range', f'<mesh name="m" {TET} face="0 1 2  0 1 4"/>', 'face', 'mesh',
          'does not exist'),
    _case('face_not_triples', f'<mesh name="m" {TET} face="0 1 2 3"/>', 'face', 'mesh',
          'multiple of 3'),
    _case('repeated_vertices', f'<mesh name="m" file="m.obj" {TET}/>', 'vertex', 'mesh',
          'repeated vertex', {'m.obj': OBJ}),
    _case('maxhullvert_3', f'<mesh name="m" {TET} maxhullvert="3"/>', 'maxhullvert', 'mesh',
          'larger than 3'),
    _case('inconsistent_winding',
          f'<mesh name="m" {TET} face="0 2 1  0 1 3  0 3 2  1 3 2" inertia="exact"/>',
          'inertia', 'mesh', 'orientation'),
    _case('obj_bad_number', '<mesh name="m" file="m.obj"/>', 'file', 'mesh', 'line 2',
          {'m.obj': OBJ.replace('v 1 0 0', 'v 1 0 x')}, oracle=False),
    _case('obj_index_zero', '<mesh name="m" file="m.obj"/>', 'file', 'mesh', 'index 0',
          {'m.obj': OBJ.replace('f 2 3 4', 'f 2 3 0')}),
    _case('obj_short_face', '<mesh name="m" file="m.obj"/>', 'file', 'mesh', 'at least 3',
          {'m.obj': OBJ.replace('f 2 3 4', 'f 2 3')}, oracle=False),
    _case('obj_index_range', '<mesh name="m" file="m.obj"/>', 'file', 'mesh', 'does not exist',
          {'m.obj': OBJ.replace('f 2 3 4', 'f 2 3 9')}),
    _case('stl_wrong_size', '<mesh name="m" file="m.stl"/>', 'file', 'mesh', 'wrong size',
          {'m.stl': _binary_stl(np.eye(3)[None].repeat(4, 0))[:-7]}),
    _case('stl_ascii_garbage', '<mesh name="m" file="m.stl"/>', 'file', 'mesh', 'line 4',
          {'m.stl': b'solid x\nfacet normal 0 0 1\nouter loop\nvertex 0 0\n'}),
    _case('unnamed_mesh', f'<mesh {TET}/>', 'name', 'mesh', 'name'),
    _case('elevation_length',
          '<hfield name="h" nrow="2" ncol="2" elevation="1 2 3" size="1 1 1 1"/>',
          'elevation', 'hfield', 'elevation'),
    _case('hfield_unspecified', '<hfield name="h" size="1 1 1 1"/>', 'nrow', 'hfield', 'nrow'),
    _case('hfield_size', '<hfield name="h" nrow="2" ncol="2" size="1 1 0 1"/>', 'size', 'hfield',
          'positive'),
    _case('hfield_file_and_nrow', '<hfield name="h" file="h.png" nrow="2" size="1 1 1 1"/>',
          'file', 'hfield', 'manually', {'h.png': PNG_CASES['c0_d8']}, oracle=False),
    _case('hfield_binary_size', '<hfield name="h" file="h.bin" size="1 1 1 1"/>', 'file',
          'hfield', 'unexpected size',
          {'h.bin': struct.pack('<ii', 2, 2) + b'\0' * 12}),
    _case('png_crc', '<hfield name="h" file="h.png" size="1 1 1 1"/>', 'file', 'hfield', 'CRC',
          {'h.png': PNG_CASES['c0_d8'][:40] + bytes([PNG_CASES['c0_d8'][40] ^ 1])
           + PNG_CASES['c0_d8'][41:]}),
    _case('png_truncated', '<hfield name="h" file="h.png" size="1 1 1 1"/>', 'file', 'hfield',
          'truncated', {'h.png': PNG_CASES['c2_d8'][:60]}),
    _case('png_not_png', '<hfield name="h" file="h.png" size="1 1 1 1"/>', 'file', 'hfield',
          'signature', {'h.png': OBJ}),
]

@pytest.mark.parametrize('asset, attribute, element, msg, files, oracle', ERRORS)
def test_asset_errors(tmp_path, asset, attribute, element, msg, files, oracle):
  xml = f'<mujoco>\n  <asset>\n    {asset}\n  </asset>\n</mujoco>\n'
  _check_error(tmp_path, xml, files, element, attribute, msg, oracle, line=3)


GEOMS = [
    ('type_mesh_no_mesh', '<geom type="mesh"/>', 'type', "'mesh'"),
    ('unknown_mesh', '<geom type="mesh" mesh="other"/>', 'mesh', 'not found'),
    ('hfield_on_box', '<geom type="box" size="1 1 1" hfield="h"/>', 'hfield', 'hfield'),
    ('type_hfield_no_hfield', '<geom type="hfield"/>', 'type', "'hfield'"),
    ('shellinertia_mesh', '<geom type="mesh" mesh="m" shellinertia="true"/>', 'shellinertia',
     'inertia'),
    ('fromto_mesh', '<geom type="capsule" mesh="m" fromto="0 0 0 0 0 1" size="0.1"/>', 'fromto',
     'fromto'),
    ('plane_fitted', '<geom type="plane" mesh="m" size="1 1 1"/>', 'type', 'fitted'),
    ('flat_colliding', '<geom type="mesh" mesh="flat"/>', 'vertex', 'convex hull'),
]


@pytest.mark.parametrize('geom, attribute, msg', [g[1:] for g in GEOMS],
                         ids=[g[0] for g in GEOMS])
def test_geom_errors(tmp_path, geom, attribute, msg):
  xml = (f'<mujoco>\n  <asset>\n    <mesh name="m" {TET}/>\n'
         '    <mesh name="flat" vertex="0 0 0 1 0 0 0 1 0 1 1 0" face="0 1 2 2 1 3" '
         'inertia="shell"/>\n'
         '    <hfield name="h" nrow="2" ncol="2" size="1 1 1 1"/>\n  </asset>\n'
         f'  <worldbody>\n    {geom}\n  </worldbody>\n</mujoco>\n')
  element = 'mesh' if attribute == 'vertex' else 'geom'
  _check_error(tmp_path, xml, {}, element, attribute, msg, True,
               line=4 if element == 'mesh' else 8)


def _check_error(tmp_path, xml, files, element, attribute, msg, oracle, line):
  for name, data in files.items():
    (tmp_path / name).write_bytes(data.encode() if isinstance(data, str) else data)
  path = tmp_path / 'model.xml'
  path.write_text(xml)
  with pytest.raises(MJCFError) as info:
    mjcf.compile_file(str(path))
  err = info.value
  assert msg in err.message, err
  assert err.element == element and err.attribute == attribute, err
  assert err.file == str(path) and err.line == line, err
  if oracle:
    with pytest.raises(ValueError):
      mujoco.MjModel.from_xml_path(str(path))


# ---------------------------------------------------------------------------------------------
# runtime

RUNTIME_XML = f"""<mujoco>
  <default><geom contype="0" conaffinity="0"/></default>
  <asset>
    <mesh name="m" file="{os.path.join(MESHES, 'lshape.obj')}" scale="0.3 0.2 0.4"/>
    <hfield name="h" nrow="2" ncol="3" elevation="0 1 2 2 1 3" size="1 1 0.2 0.1"/>
  </asset>
  <worldbody>
    <geom type="hfield" hfield="h"/>
    <body pos="0 0 1"><freejoint/>
      <geom type="mesh" mesh="m" pos="0.1 0 0" euler="10 0 20"/>
      <body pos="0.3 0 0"><joint type="hinge" axis="0 1 0"/>
        <geom type="capsule" mesh="m"/>
      </body>
    </body>
  </worldbody>
</mujoco>"""


def test_put_model_and_forward():
  ours, mj = _both(RUNTIME_XML)
  assert not _mismatches(ours, mj)
  with jax.enable_x64(True):
    m = mjx_py.put_model(ours)
    assert m.mesh_vert.dtype == np.float64 and m.hfield_data.dtype == np.float64
    assert m.mesh_face.dtype == np.int32 and m.hfield_adr.dtype == np.int32
    assert m.mesh_hullvert.shape == (1, 10, 3) and m.mesh_hullvertnum.dtype == np.int32
    assert m.geom_dataid.tolist() == [0, 0, 0]
    d = jax.jit(mjx_py.forward)(m, mjx_py.make_data(m))
  md = mujoco.MjData(mj)
  mujoco.mj_forward(mj, md)
  for name in ('xpos', 'xquat', 'xipos', 'geom_xpos', 'geom_xmat', 'qacc'):
    np.testing.assert_allclose(np.asarray(getattr(d, name)).reshape(-1),
                               getattr(md, name).reshape(-1), atol=1e-10, err_msg=name)
  m32 = mjx_py.put_model(ours)
  assert m32.mesh_vert.dtype == np.float32 and m32.mesh_face.dtype == np.int32
