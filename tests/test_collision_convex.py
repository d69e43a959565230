"""General convex narrowphase (mjx_py/collision/convex.py) against MuJoCo's mj_collision.

Every pair type MuJoCo 3.3.3 sends to mjc_Convex (the eight primitive pairs of CONVEX_PAIRS and
sphere/capsule/ellipsoid/cylinder/box/mesh against a mesh) is collided in one two-geom model (an
explicit <pair>) per type, over random, deep, axis-aligned and near-touching relative poses
(shifted along MuJoCo's normal to dist 0, +-1e-9, +-1e-6, +-1e-3), about 30% with a margin, plus
hand-made degenerate ones (coincident centres, touching faces, centre inside the other geom).
MuJoCo's geom_xpos / geom_xmat (and mesh_vert for meshes) feed ``convex.collide`` with traced geom
types, so ONE jit(vmap) call compiles and runs every pair type (compiled with XLA:CPU's classic
fusion emitters, which compile it ~40% faster); the ROUTINES entries are that function with
static types (checked by their ``kinds`` and with a stub for ``collide``).

Per case: same contact or none; dist within 1e-4 and the normal within 1e-4 rad of MuJoCo's; pos
within 1e-4 (a GJK distance run stops at a duality gap of tolerance^2, which fixes a witness point
on a curved surface only to ~sqrt(1e-12 * radius) ~ 1e-6; observed errors are below 1e-5). The
search replays MuJoCo's decisions, several of which are exact floating-point ties (a support
point that is already a polytope vertex lies on the visibility boundary of every face around it;
in axis-aligned poses the first GJK directions are rounding noise; a simplex face through the
origin), so the last bit of rounding, which XLA and C do not share, sometimes sends GJK / EPA
another way. Three outcomes are therefore counted rather than failed: another witness point of a
face-face contact (same dist and normal; the witness point is not unique there, so what is
required is that pos lies midway between the two geoms' supporting planes along the normal, at
MuJoCo's depth, at least as well as MuJoCo's own point does); another contact altogether
('diverged'); a contact on one side only, which must be within 2e-6 of the margin (MuJoCo itself
treats gaps below ccd_tolerance as touching and lets EPA decide) except at most once per pair
type. The last two together must stay below 4% of a pair type's cases (observed: at most 3%,
all in axis-aligned, touching or hand-made degenerate poses, plus EPA ties on boxes), and at
least 90% of the contacts must match exactly. Plane-ellipsoid is analytic (1e-9) and plane-mesh
is compared contact by contact, using MuJoCo's mesh graph for the extra contacts.

Gradients: jax.grad of dist and pos (summed over valid contacts) with respect to both poses
(position and quaternion) in float32 at touching, deep and degenerate poses must be finite, and
the translation derivatives must be the envelope ones: d dist / d pos2 = normal, d pos / d pos1 =
I / 2.
"""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from oracle import RUN_OPTIMIZED

from mjx_py import math as mjmath
from mjx_py.collision import convex, primitive
from mjx_py.collision.convex import BOX, CAPSULE, CYLINDER, ELLIPSOID, MESH, PLANE, SPHERE
from mjx_py.errors import NotSupportedError
from mjx_py.xla import compile_options


@pytest.fixture(autouse=True, scope='module')
def _float64():
  """float64 for this module only (the global flag would leak into later test modules)."""
  with jax.enable_x64(True):
    yield


NAMES = {PLANE: 'plane', SPHERE: 'sphere', CAPSULE: 'capsule', ELLIPSOID: 'ellipsoid',
         CYLINDER: 'cylinder', BOX: 'box', MESH: 'mesh'}
# meshes (vertex lists in MuJoCo's <mesh vertex=...> units): a generic convex blob (12 vertices,
# MuJoCo hill-climbs its support) and a box-shaped mesh (8 vertices: exhaustive support, ties)
_BLOB = np.random.default_rng(7).standard_normal((12, 3)) * np.array([0.09, 0.12, 0.1])
_CUBE = np.array([[x, y, z] for z in (-.12, .12) for y in (-.1, .1) for x in (-.08, .08)])
MESHES = {'blob': _BLOB, 'cube': _CUBE}
# pair type -> meshes of geom 1 and geom 2 (None: primitive)
MESH_PAIRS = {(SPHERE, MESH): (None, 'blob'), (CAPSULE, MESH): (None, 'cube'),
              (ELLIPSOID, MESH): (None, 'blob'), (CYLINDER, MESH): (None, 'cube'),
              (BOX, MESH): (None, 'blob'), (MESH, MESH): ('blob', 'cube')}
PAIRS = [(p, (None, None)) for p in convex.CONVEX_PAIRS] + list(MESH_PAIRS.items())
NRANDOM, NDEEP, NALIGNED = 80, 40, 40       # per pair type, plus near-touching copies, specials
TOL_DIST, TOL_POS, TOL_ANGLE = 1e-4, 1e-4, 1e-4
MAX_DIVERGED = 0.04                          # rounding-decided outcomes, fraction per pair type
TOL_MIDWAY = 5e-5                            # pos / dist vs the supporting planes (see _compare)
TOL_TOUCH = 2e-6                             # |dist - margin| below which existence is a tie
NVERT = max(len(v) for v in MESHES.values())


# ---------------------------------------------------------------------------------------------
# MuJoCo side

def _geom_xml(name, t, mesh):
  kind = f'type="mesh" mesh="{mesh}"' if mesh else f'type="{NAMES[t]}" size=".1 .1 .1"'
  return f'<geom name="{name}" {kind} contype="0" conaffinity="0"/>'


def _model(t1, t2, meshes=(None, None)):
  assets = ''.join(f'<mesh name="{k}" vertex="{" ".join(map(str, v.ravel()))}"/>'
                   for k, v in MESHES.items())
  g1 = _geom_xml('g1', t1, meshes[0])
  if t1 != PLANE:
    g1 = f'<body name="b1"><freejoint/>{g1}</body>'
  xml = f"""<mujoco><asset>{assets}</asset><worldbody>{g1}<body name="b2"><freejoint/>
    {_geom_xml('g2', t2, meshes[1])}</body></worldbody>
    <contact><pair geom1="g1" geom2="g2"/></contact></mujoco>"""
  m = mujoco.MjModel.from_xml_string(xml)
  for g in range(2):   # primitive sizes change per case: keep the bounding filter out of play
    if m.geom_type[g] not in (PLANE, MESH):
      m.geom_rbound[g] = 1e3
  return m, mujoco.MjData(m)


def _mesh_verts(m, g):
  """The geom's mesh vertices (MuJoCo's mesh_vert, in the geom frame), padded to NVERT rows by
  repeating the first one; zeros for a primitive."""
  if m.geom_type[g] != MESH:
    return np.zeros((NVERT, 3))
  i = m.geom_dataid[g]
  v = m.mesh_vert[m.mesh_vertadr[i]:m.mesh_vertadr[i] + m.mesh_vertnum[i]].astype(float)
  return np.concatenate([v, np.repeat(v[:1], NVERT - len(v), axis=0)])


def _mujoco(m, d, case):
  """Sets a case (poses, primitive sizes, margin), runs kinematics + collision. Returns our
  inputs (pos1, mat1, size1, pos2, mat2, size2, margin, verts1, verts2) and MuJoCo's contacts
  [(dist, pos, normal)]."""
  for g, (pos, quat, size) in enumerate(case['geoms']):
    if m.geom_type[g] not in (PLANE, MESH):
      m.geom_size[g] = size
    if m.geom_bodyid[g] == 0:
      m.geom_pos[g], m.geom_quat[g] = pos, quat
    else:
      adr = m.jnt_qposadr[m.body_jntadr[m.geom_bodyid[g]]]
      d.qpos[adr:adr + 3], d.qpos[adr + 3:adr + 7] = pos, quat
  m.pair_margin[0] = case['margin']
  mujoco.mj_kinematics(m, d)
  mujoco.mj_collision(m, d)
  inputs = (d.geom_xpos[0].copy(), d.geom_xmat[0].reshape(3, 3).copy(), m.geom_size[0].copy(),
            d.geom_xpos[1].copy(), d.geom_xmat[1].reshape(3, 3).copy(), m.geom_size[1].copy(),
            float(case['margin']), _mesh_verts(m, 0), _mesh_verts(m, 1))
  cons = [(c.dist, c.pos.copy(), c.frame[:3].copy()) for c in d.contact[:d.ncon]]
  return inputs, cons


# ---------------------------------------------------------------------------------------------
# Cases

def _quat(rng):
  q = rng.standard_normal(4)
  return q / np.linalg.norm(q)


def _axis_angle(axis, angle):
  axis = np.asarray(axis, float) / np.linalg.norm(axis)
  return np.concatenate([[np.cos(angle / 2)], np.sin(angle / 2) * axis])


AXIS_QUATS = [np.array([1.0, 0, 0, 0])] + [
    _axis_angle(a, ang) for a in np.eye(3) for ang in (np.pi / 2, np.pi, -np.pi / 2)]
IDENT = np.array([1.0, 0, 0, 0])


def _size(rng, t):
  if t == SPHERE:
    return np.array([rng.uniform(0.03, 0.3), 0, 0])
  if t in (CAPSULE, CYLINDER):
    return np.array([rng.uniform(0.03, 0.2), rng.uniform(0.03, 0.3), 0])
  return rng.uniform(0.03, 0.3, 3)


def _radius(m, g, t, s):
  if t == MESH:
    return m.geom_rbound[g]
  return {SPHERE: s[0], CAPSULE: s[0] + s[1], CYLINDER: np.hypot(s[0], s[1])}.get(
      t, np.linalg.norm(s))


def _case(rng, m, t1, t2, kind):
  s1, s2 = _size(rng, t1), _size(rng, t2)
  if kind == 'aligned':
    q1, q2 = AXIS_QUATS[rng.integers(len(AXIS_QUATS))], AXIS_QUATS[rng.integers(len(AXIS_QUATS))]
    if rng.uniform() < 0.3:   # aligned up to a rotation about the common z axis
      q2 = _axis_angle([0, 0, 1], rng.uniform(-np.pi, np.pi))
    if rng.uniform() < 0.3 and t1 == t2:
      s2 = s1.copy()          # identical sizes: exactly coincident faces / caps
  else:
    q1, q2 = _quat(rng), _quat(rng)
  p1 = rng.uniform(-0.2, 0.2, 3)
  direction = rng.standard_normal(3)
  if kind == 'aligned':
    direction = np.eye(3)[rng.integers(3)] * rng.choice([-1, 1])
    direction = direction + rng.uniform(-0.3, 0.3, 3) * (rng.uniform() < 0.5)
  direction /= np.linalg.norm(direction)
  scale = _radius(m, 0, t1, s1) + _radius(m, 1, t2, s2)
  f = rng.uniform(0.0, 0.35) if kind == 'deep' else rng.uniform(0.3, 1.05)
  margin = rng.uniform(0.001, 0.05) if rng.uniform() < 0.3 else 0.0
  return {'geoms': [(p1, q1, s1), (p1 + direction * scale * f, q2, s2)], 'margin': margin,
          'kind': kind}


def _specials(t1, t2):
  """Degenerate configurations: coincident centres, exactly touching along an axis, one centre
  inside the other geom, stacked aligned geoms."""
  s = {SPHERE: [0.1, 0, 0], CAPSULE: [0.05, 0.1, 0], CYLINDER: [0.1, 0.1, 0],
       ELLIPSOID: [0.1, 0.15, 0.2], BOX: [0.1, 0.15, 0.2], MESH: [0, 0, 0]}
  z = np.zeros(3)
  qx = _axis_angle([1, 0, 0], np.pi / 2)
  out = []

  def add(p2, q2=IDENT, margin=0.0, q1=IDENT):
    out.append({'geoms': [(z, q1, np.array(s[t1], float)), (np.asarray(p2, float), q2,
                                                            np.array(s[t2], float))],
                'margin': margin, 'kind': 'special'})

  add(z)                                  # coincident centres
  add(z, qx)
  add([0, 0, 0.02])                       # one centre (nearly) inside the other geom
  add([0, 0, 0.3])                        # stacked along z: caps / faces meet
  add([0, 0, 0.3], margin=0.02)
  add([0, 0, 0.3], _axis_angle([0, 0, 1], 0.4))
  add([0.2, 0, 0], qx, margin=0.01)       # side by side
  add([0.15, 0.15, 0.3], _axis_angle([1, 1, 0], 0.7))
  return out


def _cases(t1, t2, m, d, rng):
  cases = [_case(rng, m, t1, t2, 'random') for _ in range(NRANDOM)]
  cases += [_case(rng, m, t1, t2, 'deep') for _ in range(NDEEP)]
  cases += [_case(rng, m, t1, t2, 'aligned') for _ in range(NALIGNED)]
  # near-touching copies: move geom 2 along MuJoCo's normal to dist ~ eps
  touching = []
  for case in cases:
    _, cons = _mujoco(m, d, case)
    if not cons:
      continue
    dist, _, normal = cons[0]
    eps = rng.choice([0.0, 1e-9, -1e-9, 1e-6, -1e-6, 1e-3, -1e-3])
    (p1, q1, s1), (p2, q2, s2) = case['geoms']
    touching.append({'geoms': [(p1, q1, s1), (p2 + (eps - dist) * normal, q2, s2)],
                     'margin': case['margin'], 'kind': 'touching'})
  return cases + touching + _specials(t1, t2)


# ---------------------------------------------------------------------------------------------
# Geometry checks (numpy): supporting planes of the true geoms

def _support_np(t, pos, mat, size, verts, n):
  """max over the geom of n . x (exact support functions)."""
  ln = mat.T @ n
  if t == SPHERE:
    h = size[0]
  elif t == CAPSULE:
    h = size[0] + size[1] * abs(ln[2])
  elif t == ELLIPSOID:
    h = np.linalg.norm(ln * size)
  elif t == CYLINDER:
    h = size[0] * np.hypot(ln[0], ln[1]) + size[1] * abs(ln[2])
  elif t == BOX:
    h = np.abs(ln) @ size
  else:
    h = np.max(verts @ ln)
  return n @ pos + h


def _midway_error(t1, t2, inp, dist, pos, normal):
  """How far (dist, pos) are from a contact between the supporting planes along ``normal``:
  (|dist - gap along n|, |n . pos - midplane|)."""
  pos1, mat1, size1, pos2, mat2, size2, _, verts1, verts2 = inp
  top1 = _support_np(t1, pos1, mat1, size1, verts1, normal)       # geom 1's plane facing 2
  bot2 = -_support_np(t2, pos2, mat2, size2, verts2, -normal)     # geom 2's plane facing 1
  return abs(dist - (bot2 - top1)), abs(normal @ pos - 0.5 * (top1 + bot2))


def _angle(a, b):
  return np.arctan2(np.linalg.norm(np.cross(a, b)), np.dot(a, b))


# ---------------------------------------------------------------------------------------------
# Our side: one compiled function for every pair type

def _collide_all(kind1, kind2, pos1, mat1, size1, pos2, mat2, size2, margin, verts1, verts2):
  return convex.collide(kind1, kind2, pos1, mat1, size1, pos2, mat2, size2, margin, verts1,
                        verts2)


# XLA:CPU's default (MLIR) fusion emitters take ~40% longer to compile this search than the
# classic ones (compile time only; compile_options() is None where the option does not exist or
# off CPU)
_FAST = compile_options()
# the search over every case of every pair, with LLVM's optimizations on (RUN_OPTIMIZED)
_COLLIDE = jax.jit(jax.vmap(_collide_all), compiler_options={**(_FAST or {}), **RUN_OPTIMIZED})


@pytest.fixture(scope='module')
def results():
  """All cases of all pair types: MuJoCo's contacts and ours, per pair type."""
  data = {}
  kinds, inputs = [], []
  for pair, meshes in PAIRS:
    m, d = _model(*pair, meshes)
    rng = np.random.default_rng(11 * pair[0] + pair[1])
    ins, refs = zip(*[_mujoco(m, d, c) for c in _cases(*pair, m, d, rng)])
    data[pair] = {'inputs': ins, 'refs': refs, 'start': len(inputs)}
    inputs += ins
    kinds += [pair] * len(ins)
  k = np.array(kinds, np.int32)
  batch = [np.stack(x) for x in zip(*inputs)]
  valid, dist, pos, normal = (np.asarray(x) for x in _COLLIDE(k[:, 0], k[:, 1], *batch))
  for entry in data.values():
    sl = slice(entry['start'], entry['start'] + len(entry['inputs']))
    entry['ours'] = (valid[sl], dist[sl], pos[sl], normal[sl])
  return data


def _compare(pair, entry):
  """Statistics of one pair type (see the module docstring).

  Each contact is 'exact' (dist, pos, normal within tolerance), 'face' (dist and normal within
  tolerance, another witness point of a face contact: it must lie midway between the supporting
  planes at least as well as MuJoCo's, whose EPA answers are off by up to ~1e-4 when the
  iteration limit stops EPA early), else 'diverged' (rounding sent GJK / EPA another way). An
  existence mismatch is 'boundary' within TOL_TOUCH of the margin, else 'lost'. Returns (stats,
  worst errors of the exact contacts, failures).
  """
  stats = collections.Counter()
  worst = np.zeros(3)
  failures = []
  valid, dist, pos, normal = entry['ours']
  for k, (inp, ref) in enumerate(zip(entry['inputs'], entry['refs'])):
    stats['cases'] += 1
    if not valid[k] and not ref:
      continue
    if bool(valid[k]) != bool(ref):
      one = ref[0][0] if ref else float(dist[k])
      stats['boundary' if abs(one - inp[6]) < TOL_TOUCH else 'lost'] += 1
      continue
    stats['contacts'] += 1
    rd, rp, rn = ref[0]
    err = np.array([abs(dist[k] - rd), np.linalg.norm(pos[k] - rp), _angle(normal[k], rn)])
    if err[0] < TOL_DIST and err[1] < TOL_POS and err[2] < TOL_ANGLE:
      stats['exact'] += 1
      worst = np.maximum(worst, err)
    elif err[0] < TOL_DIST and err[2] < TOL_ANGLE:
      stats['face'] += 1
      ours = np.array(_midway_error(*pair, inp, dist[k], pos[k], normal[k]))
      theirs = np.array(_midway_error(*pair, inp, rd, rp, rn))
      if np.any(ours > 2 * np.maximum(theirs, TOL_MIDWAY)):
        failures.append((k, 'face', err, ours, theirs))
    else:
      stats['diverged'] += 1
  return stats, worst, failures


@pytest.mark.parametrize('pair', [p for p, _ in PAIRS],
                         ids=[f'{NAMES[a]}-{NAMES[b]}' for (a, b), _ in PAIRS])
def test_matches_mujoco(results, pair):
  stats, worst, failures = _compare(pair, results[pair])
  assert not failures, failures[:5]
  assert stats['cases'] >= 200, stats
  assert stats['contacts'] >= 100, stats
  assert stats['lost'] <= 1, stats
  assert stats['diverged'] + stats['boundary'] + stats['lost'] <= MAX_DIVERGED * stats['cases'], \
      stats
  assert stats['exact'] >= 0.9 * stats['contacts'], stats
  assert worst[0] < TOL_DIST and worst[1] < TOL_POS and worst[2] < TOL_ANGLE, worst


def test_routine_tables():
  """The primitive pairs MuJoCo 3.3.3 routes to mjc_Convex / mjc_PlaneConvex are registered in
  primitive.ROUTINES with one contact each; with the analytic routines they cover every
  primitive pair; the convex routines are ``collide`` for their types."""
  expected = {(PLANE, ELLIPSOID), (SPHERE, ELLIPSOID), (CAPSULE, ELLIPSOID), (CAPSULE, CYLINDER),
              (ELLIPSOID, ELLIPSOID), (ELLIPSOID, CYLINDER), (ELLIPSOID, BOX),
              (CYLINDER, CYLINDER), (CYLINDER, BOX)}
  assert set(convex.ROUTINES) == expected
  for pair, entry in convex.ROUTINES.items():
    assert primitive.ROUTINES[pair] == entry and entry[1] == 1
    if pair[0] != PLANE:
      assert entry[0].kinds == pair
  prims = (PLANE, SPHERE, CAPSULE, ELLIPSOID, CYLINDER, BOX)
  assert set(primitive.ROUTINES) == {(a, b) for a in prims for b in prims
                                     if a <= b and (a, b) != (PLANE, PLANE)}
  assert set(convex.MESH_ROUTINES) == {(t, MESH) for t in (PLANE,) + prims[1:] + (MESH,)}
  assert convex.MESH_ROUTINES[(PLANE, MESH)][1] == 3
  assert all(convex.MESH_ROUTINES[(t, MESH)][0].kinds == (t, MESH) for t in prims[1:] + (MESH,))


def test_multiccd_refused():
  """multiccd (several contacts for pairs without a sphere or ellipsoid) is refused at trace
  time; pairs with a sphere or ellipsoid are unaffected by the flag."""
  z, eye, s = np.zeros(3), np.eye(3), np.full(3, 0.1)
  for pair in [(CAPSULE, CYLINDER), (CYLINDER, CYLINDER), (CYLINDER, BOX)]:
    with pytest.raises(NotSupportedError, match='multiccd'):
      convex.ROUTINES[pair][0](z, eye, s, z, eye, s, 0.0, multiccd=True)
  with pytest.raises(NotSupportedError, match='multiccd'):
    convex.MESH_ROUTINES[(BOX, MESH)][0](z, eye, s, z, eye, s, 0.0, None, _CUBE, multiccd=True)
  out = jax.eval_shape(lambda *a: convex.ROUTINES[(SPHERE, ELLIPSOID)][0](*a, multiccd=True),
                       z, eye, s, z, eye, s, 0.0)
  assert out.dist.shape == (1,) and out.normal.shape == (1, 3)


def test_routines_wrap_collide(monkeypatch):
  """A registered routine is ``collide`` for its static types, packed into one Contacts slot
  with a completed frame (collide's numerics are what test_matches_mujoco checks)."""
  seen = []

  def fake(kind1, kind2, *args, **kw):
    seen.append((kind1, kind2, len(args), kw))
    return (jnp.asarray(True), jnp.asarray(-0.25), jnp.arange(3.0), jnp.asarray([0.0, 0.6, 0.8]))

  monkeypatch.setattr(convex, 'collide', fake)
  z, eye, s = np.zeros(3), np.eye(3), np.full(3, 0.1)
  out = convex.ROUTINES[(ELLIPSOID, BOX)][0](z, eye, s, z, eye, s, 0.0, tolerance=1e-7,
                                              iterations=20)
  assert seen == [(ELLIPSOID, BOX, 9, {'tolerance': 1e-7, 'iterations': 20})]
  assert out.valid.tolist() == [True] and out.dist.tolist() == [-0.25]
  np.testing.assert_allclose(out.pos[0], [0, 1, 2])
  frame = np.asarray(out.frame[0])
  np.testing.assert_allclose(frame[0], [0, 0.6, 0.8])
  np.testing.assert_allclose(frame @ frame.T, np.eye(3), atol=1e-12)
  convex.MESH_ROUTINES[(MESH, MESH)][0](z, eye, s, z, eye, s, 0.0, _CUBE, _BLOB)
  assert seen[-1][:3] == (MESH, MESH, 9)


# ---------------------------------------------------------------------------------------------
# Plane : ellipsoid and plane : mesh (mjc_PlaneConvex)

def _plane_cases(m, d, t2, rng, n=120):
  out = []
  for k in range(n):
    q1 = _quat(rng) if k % 3 else IDENT
    p1 = rng.uniform(-0.2, 0.2, 3)
    s2 = _size(rng, t2)
    normal = _rotmat(q1)[:, 2]
    r2 = _radius(m, 1, t2, s2)
    h = r2 * rng.uniform(-0.6, 1.1)
    tangent = rng.standard_normal(3) * 0.2
    p2 = p1 + normal * h + tangent - normal * np.dot(tangent, normal)
    margin = rng.uniform(0.001, 0.05) if rng.uniform() < 0.3 else 0.0
    out.append({'geoms': [(p1, q1, np.array([0.0, 0, 1])), (p2, _quat(rng), s2)],
                'margin': margin})
  return out


def _rotmat(q):
  mat = np.zeros(9)
  mujoco.mju_quat2Mat(mat, q)
  return mat.reshape(3, 3)


def _match_in_order(ours, refs, tol):
  """Max error over contacts compared in order; None if the counts differ."""
  if len(ours) != len(refs):
    return None
  err = 0.0
  for (gd, gp, gn), (rd, rp, rn) in zip(ours, refs):
    err = max(err, abs(gd - rd), np.linalg.norm(gp - rp), np.linalg.norm(gn - rn))
  return err


def test_plane_ellipsoid():
  """Analytic: dist, pos and normal equal MuJoCo's to 1e-9."""
  m, d = _model(PLANE, ELLIPSOID)
  cases = _plane_cases(m, d, ELLIPSOID, np.random.default_rng(3))
  inputs, refs = zip(*[_mujoco(m, d, c) for c in cases])
  batch = [np.stack(x) for x in zip(*[i[:7] for i in inputs])]
  out = jax.tree_util.tree_map(np.asarray, jax.jit(jax.vmap(convex.plane_ellipsoid))(*batch))
  frame = np.asarray(out.frame)                # formed once (a property computed in JAX)
  ncon = 0
  for k, ref in enumerate(refs):
    ours = [(out.dist[k, 0], out.pos[k, 0], frame[k, 0, 0])] if out.valid[k, 0] else []
    err = _match_in_order(ours, ref, 1e-9)
    assert err is not None and err < 1e-9, (k, ours, ref)
    ncon += len(ref)
  assert ncon >= 40


def _mesh_neighbors(m, g):
  """Each vertex's hull neighbours (vertex indices) in MuJoCo's mesh_graph order, -1 padded."""
  i = m.geom_dataid[g]
  graph = m.mesh_graph[m.mesh_graphadr[i]:]
  numvert = graph[0]
  edgeadr = graph[2:2 + numvert]
  globalid = graph[2 + numvert:2 + 2 * numvert]
  edges = graph[2 + 2 * numvert:]
  lists = {}
  for local in range(numvert):
    j, nb = edgeadr[local], []
    while edges[j] >= 0:
      nb.append(globalid[edges[j]])
      j += 1
    lists[globalid[local]] = nb
  out = -np.ones((NVERT, max(len(v) for v in lists.values())), np.int32)
  for v, nb in lists.items():
    out[v, :len(nb)] = nb
  return out


@pytest.mark.parametrize('mesh', ['blob', 'cube'])
def test_plane_mesh(mesh):
  """All three contacts equal MuJoCo's (in order) with MuJoCo's hull graph; without it the first
  contact is the same and the others are mesh vertices within the margin."""
  m, d = _model(PLANE, MESH, (None, mesh))
  neighbors = _mesh_neighbors(m, 1)
  rbound = float(m.geom_rbound[1])
  cases = _plane_cases(m, d, MESH, np.random.default_rng(5 + len(mesh)))
  inputs, refs = zip(*[_mujoco(m, d, c) for c in cases])
  batch = [np.stack(x) for x in zip(*inputs)]

  def run(*a, neighbors2=None):
    return convex.plane_mesh(*a, neighbors2=neighbors2)

  # numpy copies: the loops below index them entry by entry
  out, free = jax.tree_util.tree_map(np.asarray, (
      jax.jit(jax.vmap(lambda *a: run(*a, neighbors2=neighbors)))(*batch),
      jax.jit(jax.vmap(run))(*batch)))
  frame, free_frame = np.asarray(out.frame), np.asarray(free.frame)   # formed once each
  counts = collections.Counter()
  for k, ref in enumerate(refs):
    ours = [(out.dist[k, i], out.pos[k, i], frame[k, i, 0]) for i in range(3)
            if out.valid[k, i]]
    err = _match_in_order(ours, ref, 1e-9)
    assert err is not None and err < 1e-9, (k, ours, ref)
    counts[len(ref)] += 1
    assert bool(free.valid[k, 0]) == bool(ref)
    if ref:
      assert abs(free.dist[k, 0] - ref[0][0]) < 1e-12
      for i in np.nonzero(np.asarray(free.valid[k]))[0][1:]:
        assert free.dist[k, i] <= inputs[k][6] + 1e-12
        vertex = free.pos[k, i] + free_frame[k, i, 0] * (0.5 * free.dist[k, i])
        assert np.linalg.norm(vertex - free.pos[k, 0]) >= 0.3 * rbound - 1e-12
  assert counts[3] >= 10 and counts[1] + counts[2] >= 10, counts
  # the default rbound is MuJoCo's geom_rbound of the mesh
  verts = inputs[0][8][:m.mesh_vertnum[m.geom_dataid[1]]]
  assert abs(np.linalg.norm(np.abs(verts).max(axis=0)) - rbound) < 1e-6


# ---------------------------------------------------------------------------------------------
# Gradients (float32)

def _jac_all(kind1, kind2, pos1, quat1, size1, pos2, quat2, size2, margin, verts1, verts2):
  """Jacobians of (dist, sum of pos) (zero without contact) w.r.t. pos1, quat1, pos2, quat2,
  and (values, normal)."""
  def f(pos1, quat1, pos2, quat2):
    mat1, mat2 = mjmath.quat_to_mat(quat1), mjmath.quat_to_mat(quat2)
    valid, dist, pos, normal = convex.collide(kind1, kind2, pos1, mat1, size1, pos2, mat2, size2,
                                              margin, verts1, verts2)
    w = valid.astype(dist.dtype)
    val = jnp.stack([w * dist, w * jnp.sum(pos)])
    return val, (val, normal)
  return jax.jacrev(f, argnums=(0, 1, 2, 3), has_aux=True)(pos1, quat1, pos2, quat2)


def test_gradients_float32():
  """d(dist), d(sum pos) w.r.t. both positions and quaternions at touching, deep and degenerate
  poses of every pair type, in float32: finite, and the translation parts are the envelope
  derivatives (d dist / d pos2 = -d dist / d pos1 = normal, d pos / d pos1 = I / 2)."""
  kinds, args = [], []
  for (pair, meshes) in PAIRS:
    m, d = _model(*pair, meshes)
    cases = [c for c in _cases(*pair, m, d, np.random.default_rng(pair[0] + 7 * pair[1]))
             if c['kind'] in ('touching', 'special')][-12:]
    cases += [_case(np.random.default_rng(k), m, *pair, 'deep') for k in range(6)]
    for c in cases:
      inp, _ = _mujoco(m, d, c)
      (_, q1, _), (_, q2, _) = c['geoms']
      args.append((inp[0], q1, inp[2], inp[3], q2, inp[5], inp[6], inp[7], inp[8]))
      kinds.append(pair)
  k = np.array(kinds, np.int32)
  batch = [np.stack(x).astype(np.float32) for x in zip(*args)]
  jac, (val, normal) = jax.jit(jax.vmap(_jac_all), compiler_options=_FAST)(
      k[:, 0], k[:, 1], *batch)
  for g in jac + (val, normal):
    assert g.dtype == np.float32 and np.all(np.isfinite(np.asarray(g)))
  g_p1, _, g_p2, _ = (np.asarray(g) for g in jac)
  has = np.asarray(val[:, 0]) != 0
  assert has.sum() >= 0.5 * len(kinds)
  n = np.asarray(normal)[has]
  np.testing.assert_allclose(g_p2[has, 0], n, atol=2e-5)
  np.testing.assert_allclose(g_p1[has, 0], -n, atol=2e-5)
  np.testing.assert_allclose(g_p1[has, 1], 0.5, atol=2e-5)
  np.testing.assert_allclose(g_p2[has, 1], 0.5, atol=2e-5)


def test_plane_gradients_float32():
  """Plane-ellipsoid and plane-mesh: finite float32 gradients at touching and deep poses;
  d dist / d pos2 = plane normal."""
  z = np.zeros(3, np.float32)
  up = np.eye(3, dtype=np.float32)
  size = np.full(3, 0.1, np.float32)
  quat2 = np.array([1, 0, 0, 0], np.float32)

  def losses(fn, kw, pos2, quat2):
    c = fn(z, up, z, pos2, mjmath.quat_to_mat(quat2), size, np.float32(0.01), **kw)
    w = c.valid.astype(c.dist.dtype)
    return jnp.stack([jnp.sum(w[:1] * c.dist[:1]), jnp.sum(w[:, None] * c.pos)])

  mesh = {'verts1': None, 'verts2': _CUBE.astype(np.float32)}
  for fn, kw, heights in [(convex.plane_ellipsoid, {}, (0.1, 0.05)),
                          (convex.plane_mesh, mesh, (0.12, 0.05))]:
    jac = jax.jit(jax.jacrev(lambda p, q, fn=fn, kw=kw: losses(fn, kw, p, q), argnums=(0, 1)))
    for h in heights:          # touching (ellipsoid radius / cube half height), then deep
      g = jac(np.array([0.01, 0.02, h], np.float32), quat2)
      assert all(x.dtype == np.float32 and np.all(np.isfinite(np.asarray(x))) for x in g)
      np.testing.assert_allclose(np.asarray(g[0])[0], [0, 0, 1], atol=1e-6)
