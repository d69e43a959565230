"""Collision driver (mj_collision) against MuJoCo 3.3.3, in float64, with both broadphases (the
host candidate table and the sort-based sweep, see tests/test_collision_broadphase.py).

1. Random states near contact of the scene models (every primitive pair type; filters and
   parameter mixing; the override and filterparent flags): our contact list equals mj_forward's
   d.contact: the same geom pairs in the same order, and per contact (matched by position within
   its geom pair) dist and pos to 1e-6, frame to 1e-4 and every mixed parameter (friction,
   solref, solreffriction, solimp, includemargin, dim, exclude) to 1e-12; and the sweep's
   contacts equal the table's (every field, 1e-12).
2. Candidate pairs: with all free bodies piled up (everything overlaps), the geom pairs that touch
   are MuJoCo's; ncandidate counts the candidate pairs.
3. Capacity: the default rule, <size nconmax>, the nconmax override; when more contacts exist
   than fit, the deepest are kept (in MuJoCo's order) and warning_counts[1] counts the overflow.
4. Disable flags, unsupported pair types (NotSupportedError), make_data's empty buffer,
   vmap and finite gradients, and a 300-body scene under jit (timings printed with -s).

The collision stage runs on MuJoCo's geom poses (the kinematics stage has its own tests), except
in test_vmap_and_gradients, which differentiates through both.
"""

from __future__ import annotations

import dataclasses
import os
import time

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from oracle import ROOT, random_state, read, with_option

import mjx_py
from mjx_py import kinematics
from mjx_py.collision import driver
from mjx_py.collision.driver import collision, pair_tables
from mjx_py.mjcf import compile_string

SCENE = os.path.join(ROOT, 'tests', 'models', 'collision_scene.xml')
FILTERS = os.path.join(ROOT, 'tests', 'models', 'collision_filters.xml')
MESH_BIN = os.path.join(ROOT, 'tests', 'models', 'scenes', 'mesh_bin.xml')
OVERRIDE = ('<option o_margin="0.012" o_solref="0.03 1.1" o_solimp="0.8 0.9 0.002 0.5 2" '
            'o_friction="0.7 0.6 0.004 0.0002 0.000001"><flag override="enable"/></option>')
NOPARENT = '<option><flag filterparent="disable"/></option>'
PARAMS = ('friction', 'solref', 'solreffriction', 'solimp', 'includemargin', 'dim')
PATHS = ('table', 'sap')
BIG = 1000   # nconmax of the scene and filter models: every test compiles them with this one

_collision = jax.jit(collision)   # shared: one trace per model and broadphase


@pytest.fixture(autouse=True)
def _x64():
  with jax.enable_x64(True):
    yield


def _models(xml, nconmax=None, broadphase='table'):
  return (mjx_py.put_model(compile_string(xml), nconmax=nconmax, broadphase=broadphase),
          mujoco.MjModel.from_xml_string(xml))


def _poses(m, md):
  """Our Data holding MuJoCo's geom poses (md after mj_forward)."""
  d = mjx_py.make_data(m)
  return dataclasses.replace(d, geom_xpos=jnp.asarray(md.geom_xpos, d.geom_xpos.dtype),
                             geom_xmat=jnp.asarray(md.geom_xmat, d.geom_xmat.dtype))


def _ours(m, md):
  """Our collision stage on MuJoCo's geom poses: the kinematics stage has its own tests (and
  runs before collision in test_vmap_and_gradients); skipping it here saves a compilation per
  model and broadphase."""
  return _collision(m, _poses(m, md))


def _theirs(mj, qpos):
  md = mujoco.MjData(mj)
  md.qpos[:] = qpos
  mujoco.mj_forward(mj, md)
  return md


def _contacts(d):
  """Our used contact rows as a dict of numpy arrays."""
  n = int(d.ncon)
  return {f.name: np.asarray(getattr(d.contact, f.name))[:n]
          for f in dataclasses.fields(d.contact)}


def _compare(d, md, label, pos_tol=1e-6, loose=(), ccd_frame_tol=None):
  """Our contacts against MuJoCo's. ``loose``: mesh geoms whose plane-mesh extra contacts
  (after the deepest vertex) are compared by count and depth bound only: MuJoCo picks them
  among the deepest vertex's neighbours in qhull's triangulation of the hull, which for a hull
  with non-triangular faces (a cube) differs from ours in the diagonals and their order.
  ``ccd_frame_tol``: (geom types of the pairs that go through the convex search, tolerance) for
  their contact frames."""
  ours = _contacts(d)
  n = md.ncon
  assert len(ours['dist']) == n, f'{label}: ncon {len(ours["dist"])} != {n}'
  theirs = {k: np.array([np.asarray(getattr(md.contact[i], k)) for i in range(n)]).reshape(
      (n,) + ours[k].shape[1:]) for k in ours}
  # same geom pairs in the same order
  np.testing.assert_array_equal(ours['geom'], theirs['geom'], err_msg=label)
  np.testing.assert_array_equal(ours['geom1'], ours['geom'][:, 0])
  np.testing.assert_array_equal(ours['geom2'], ours['geom'][:, 1])
  # within a geom pair, match contacts by position
  used = np.zeros(n, bool)
  for i in range(n):
    same = np.flatnonzero(np.all(ours['geom'] == theirs['geom'][i], axis=1) & ~used)
    j = same[np.argmin(np.linalg.norm(ours['pos'][same] - theirs['pos'][i], axis=1))]
    where = f'{label}: contact {i} geoms {theirs["geom"][i]}'
    if theirs['geom'][i][1] in loose and i > 0 and np.array_equal(theirs['geom'][i - 1],
                                                                  theirs['geom'][i]):
      # an extra plane-mesh contact: a vertex within the margin (no gap in these models), not
      # deeper than the pair's first contact
      j = same[0]
      first = np.flatnonzero(np.all(ours['geom'] == theirs['geom'][i], axis=1))[0]
      assert ours['dist'][first] <= ours['dist'][j] <= ours['includemargin'][j], where
      used[j] = True
      continue
    used[j] = True
    np.testing.assert_allclose(ours['dist'][j], theirs['dist'][i], atol=1e-6, err_msg=where)
    np.testing.assert_allclose(ours['pos'][j], theirs['pos'][i], atol=pos_tol, err_msg=where)
    frame_tol = 1e-4
    if ccd_frame_tol and tuple(md.model.geom_type[theirs['geom'][i]]) in ccd_frame_tol[0]:
      frame_tol = ccd_frame_tol[1]
    np.testing.assert_allclose(ours['frame'][j], theirs['frame'][i], atol=frame_tol,
                               err_msg=where)
    for k in PARAMS:
      np.testing.assert_allclose(ours[k][j], theirs[k][i], rtol=0, atol=1e-12,
                                 err_msg=f'{where}: {k}')
    # exclude: dist >= includemargin (rounding decides exact ties)
    if abs(theirs['dist'][i] - theirs['includemargin'][i]) > 1e-9:
      assert ours['exclude'][j] == theirs['exclude'][i], f'{where}: exclude'
  _check_unused(d)


def _same(a, b, label):
  """Two of our contact buffers hold the same contacts (the sweep against the table)."""
  assert int(a.ncon) == int(b.ncon), label
  assert int(a.warning_counts[1]) == int(b.warning_counts[1]), label
  for f in dataclasses.fields(a.contact):
    np.testing.assert_allclose(np.asarray(getattr(a.contact, f.name)),
                               np.asarray(getattr(b.contact, f.name)), rtol=0, atol=1e-12,
                               err_msg=f'{label}: {f.name}')


def _check_unused(d):
  n = int(d.ncon)
  c = d.contact
  assert np.all(np.asarray(c.geom[n:]) == -1) and np.all(np.asarray(c.geom1[n:]) == -1)
  assert np.all(np.asarray(c.geom2[n:]) == -1)
  assert np.all(np.asarray(c.dist[n:]) == 1e10)
  assert np.all(np.asarray(c.efc_address) == -1)
  assert np.all(np.asarray(c.H) == 0) and np.all(np.asarray(c.mu) == 0)


CASES = [('scene', SCENE, None), ('filters', FILTERS, None), ('override', FILTERS, OVERRIDE),
         ('noparent', FILTERS, NOPARENT)]


@pytest.mark.parametrize('label,path,option', CASES, ids=[c[0] for c in CASES])
def test_random_states_match_mujoco(label, path, option):
  xml = read(path) if option is None else with_option(read(path), option)
  m, mj = _models(xml, nconmax=BIG)
  ms, _ = _models(xml, nconmax=BIG, broadphase='sap')
  assert ms.broadphase == 'sap' and ms.nconmax == m.nconmax and ms.npairmax > 0
  rng = np.random.default_rng(7)
  states = [mj.qpos0.copy()] + [random_state(mj, rng, qpos_scale=0.02, mocap=False).qpos
                                for _ in range(6)]
  total = 0
  for k, qpos in enumerate(states):
    md = _theirs(mj, qpos)
    d = _ours(m, md)
    assert md.ncon <= m.nconmax
    _compare(d, md, f'{label} state {k}')
    assert int(d.warning_counts[1]) == 0
    ds = _ours(ms, md)
    _compare(ds, md, f'{label} state {k} (sap)')
    _same(ds, d, f'{label} state {k}: sap vs table')
    total += md.ncon
  assert total > 5 * len(states)   # the states are near contact


@pytest.mark.parametrize('broadphase', PATHS)
def test_filters_features_at_qpos0(broadphase):
  """The filter model's nominal state shows each feature (guards against a silent model edit)."""
  m, mj = _models(read(FILTERS), nconmax=BIG, broadphase=broadphase)
  d = _ours(m, _theirs(mj, mj.qpos0))
  c = _contacts(d)
  names = dict(m.names)['geom']
  pairs = {(names[a], names[b]) for a, b in c['geom']}
  assert ('floor', 'ghost') in pairs                       # explicit pair, contype 0
  assert ('mix_c', 'masked') not in pairs                  # masks
  assert ('ex1', 'ex2') not in pairs                       # exclude
  assert ('upper', 'lower') not in pairs and ('base', 'upper') not in pairs   # parent-child
  assert ('base', 'lower') in pairs                        # grandparent
  sled = [i for i, (a, b) in enumerate(c['geom']) if names[b] == 'sled']
  assert len(sled) == 2 and np.allclose(c['includemargin'][sled], 0.003)   # pair, not dynamic
  soft = [i for i, (a, b) in enumerate(c['geom']) if 'soft' in (names[a], names[b])
          and 'floor' in (names[a], names[b])]
  assert len(soft) == 1 and c['exclude'][soft[0]] == 1    # soft sphere inside its gap
  assert np.min(c['friction']) == 1e-5                     # mjMINMU
  mn, mjn = _models(with_option(read(FILTERS), NOPARENT), nconmax=BIG, broadphase=broadphase)
  c = _contacts(_ours(mn, _theirs(mjn, mjn.qpos0)))
  pairs = {(names[a], names[b]) for a, b in c['geom']}
  assert ('upper', 'lower') in pairs and ('base', 'upper') in pairs


def _piled(mj, rng, center=(0.0, 0.0, 0.04), spread=0.01):
  """Every free body moved near one point (so every candidate pair overlaps)."""
  qpos = mj.qpos0.copy()
  for j in range(mj.njnt):
    if mj.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE:
      adr = mj.jnt_qposadr[j]
      qpos[adr:adr + 3] = np.asarray(center) + spread * rng.standard_normal(3)
      q = rng.standard_normal(4)
      qpos[adr + 3:adr + 7] = q / np.linalg.norm(q)
  return qpos


@pytest.mark.parametrize('broadphase', PATHS)
@pytest.mark.parametrize('path', [SCENE, FILTERS], ids=['scene', 'filters'])
def test_candidate_pairs_match_mujoco(path, broadphase):
  xml = read(path)
  m, mj = _models(xml, nconmax=BIG, broadphase=broadphase)
  tables = pair_tables(compile_string(xml))
  assert m.ncandidate == tables['ncandidate'] == sum(g[3] + g[7] for g in m.col_groups)
  # the table lists every candidate; the sweep's table only the explicit pairs
  assert len(m.col_geom) == sum(g[3] for g in m.col_groups) == (
      m.ncandidate if broadphase == 'table' else np.sum(np.asarray(m.col_pairid) >= 0))
  rng = np.random.default_rng(3)
  for _ in range(2):
    md = _theirs(mj, _piled(mj, rng))
    d = _ours(m, md)
    ours = {tuple(g) for g in _contacts(d)['geom']}
    theirs = {tuple(c.geom) for c in md.contact[:md.ncon]}
    assert ours == theirs
    assert len(ours) > 10


def test_mesh_bin_matches_mujoco():
  """Convex meshes among primitives in a bin: every mesh pair type (plane-mesh with its extra
  contacts, primitive-mesh and mesh-mesh through GJK / EPA) and the convex primitive pairs,
  which share one compiled search. EPA's contact point moves with the last polytope face, so
  positions are compared to 2e-4; EPA stops once the depth is within ccd_tolerance (1e-6), and
  for a curved surface pressed deep into another shape the depth is flat in the direction to
  second order, so the normal is fixed only to about sqrt(tol / radius) ~ 6e-3 here: convex-
  search frames are compared to 1e-2 (tests/test_collision_convex.py has the per-pair figures
  at 1e-4 over random poses)."""
  m, mj = _models(read(MESH_BIN), nconmax=BIG)
  cube = mujoco.mj_name2id(mj, mujoco.mjtObj.mjOBJ_BODY, 'cube')
  cube = int(np.flatnonzero(mj.geom_bodyid == cube)[0])
  ccd = {k for k, (fn, _) in driver._routines().items() if driver._is_ccd(fn)}
  rng = np.random.default_rng(11)
  states = ([random_state(mj, rng, qpos_scale=0.03, mocap=False).qpos for _ in range(4)] +
            [_piled(mj, rng, center=(0.0, 0.0, 0.05), spread=0.04) for _ in range(4)])
  kinds = set()
  for k, qpos in enumerate(states):
    md = _theirs(mj, qpos)
    _compare(_ours(m, md), md, f'mesh bin state {k}', pos_tol=2e-4, loose=(cube,),
             ccd_frame_tol=(ccd, 1e-2))
    kinds |= {tuple(sorted(mj.geom_type[c.geom])) for c in md.contact[:md.ncon]}
  mesh = int(mujoco.mjtGeom.mjGEOM_MESH)
  assert {(0, mesh), (2, mesh), (6, mesh), (mesh, mesh)} <= kinds, kinds


def _settled_states(mj, nstep, every, qpos=None, seed=0):
  """States along a MuJoCo rollout (mj_step, zero controls) from qpos (default qpos0) with a
  small random velocity: every ``every`` steps after the first ``every``."""
  md = mujoco.MjData(mj)
  if qpos is not None:
    md.qpos[:] = qpos
  md.qvel[:] = 0.1 * np.random.default_rng(seed).standard_normal(mj.nv)
  out = []
  for k in range(1, nstep + 1):
    mujoco.mj_step(mj, md)
    if k % every == 0:
      out.append(md.qpos.copy())
  return out


@pytest.mark.parametrize('name', ['box_stack', 'humanoid'])
def test_scene_models_match_mujoco(name):
  """Whole contact sets along MuJoCo rollouts of two bundled scene models: the box stack (boxes,
  sphere, cylinder, capsule on a plane and on each other, with cylinder-box through the convex
  search) settling from rest, and the humanoid falling from a tilted start onto the plane and
  lying there."""
  path = os.path.join(ROOT, 'models', f'{name}.xml')
  m, mj = _models(read(path), nconmax=BIG)
  qpos = None
  if name == 'humanoid':
    qpos = mj.qpos0.copy()
    qpos[2] = 0.6
    qpos[3:7] = [np.cos(0.7), np.sin(0.7), 0.0, 0.0]     # tipped over 80 degrees about x
  ccd = {k for k, (fn, _) in driver._routines().items() if driver._is_ccd(fn)}
  total = 0
  for k, q in enumerate(_settled_states(mj, 600, 100, qpos)):
    md = _theirs(mj, q)
    _compare(_ours(m, md), md, f'{name} state {k}', pos_tol=2e-4, ccd_frame_tol=(ccd, 1e-2))
    total += md.ncon
  assert total >= 12, total


def test_default_capacity_rule():
  for path in (SCENE, FILTERS):
    arrays = compile_string(read(path))
    t = pair_tables(arrays)
    for broadphase in PATHS:   # the sweep counts the same candidates without listing them
      m = mjx_py.put_model(arrays, broadphase=broadphase)
      types = np.asarray(arrays['geom_type'], int)[np.unique(t['col_geom'])]
      budget = sum(driver.NCON_BUDGET[k] for k in types)
      if driver.HFIELD in types:
        budget += driver.HFIELD_EXTRA * int(np.sum(types != driver.HFIELD))
      assert budget > 0 and len(types) == t['ngeom_collide']
      assert m.nconmax == min(t['ncon_total'], max(driver.MIN_NCONMAX, budget))
      assert mjx_py.make_data(m).contact.dist.shape == (m.nconmax,)


SPHERES = """
<mujoco>
  {size}
  <worldbody>
    <geom name="floor" type="plane" size="3 3 0.1"/>
    {bodies}
  </worldbody>
</mujoco>
"""
DEPTHS = [0.003, 0.011, 0.001, 0.008, 0.013, 0.002, 0.006, 0.009]


def _spheres(size=''):
  bodies = ''.join(f'<body pos="{0.3 * i} 0 {0.05 - z}"><freejoint/><geom type="sphere" '
                   f'size="0.05"/></body>' for i, z in enumerate(DEPTHS))
  return SPHERES.format(size=size, bodies=bodies)


@pytest.mark.parametrize('broadphase', PATHS)
def test_size_nconmax_and_override(broadphase):
  def load(xml, **kw):
    return mjx_py.from_xml_string(xml, broadphase=broadphase, **kw)
  assert load(_spheres('<size nconmax="5"/>')).nconmax == 5
  assert load(_spheres('<size nconmax="5"/>'), nconmax=7).nconmax == 7
  assert load(_spheres()).nconmax == 16       # the budget: 2 per sphere (8 + 28 slots exist)
  with pytest.raises(ValueError):
    load(_spheres(), nconmax=-1)
  # nconmax = 0: no collision detection at all, as in MuJoCo
  xml = _spheres('<size nconmax="0"/>')
  m, mj = _models(xml, broadphase=broadphase)
  md = _theirs(mj, mj.qpos0)
  d = _ours(m, md)
  assert m.nconmax == 0 and int(d.ncon) == 0 and md.ncon == 0


def _deepest_in_order(md, k):
  """MuJoCo's contacts restricted to the k deepest, in MuJoCo's order."""
  dist = np.array([c.dist for c in md.contact[:md.ncon]])
  keep = np.sort(np.argsort(dist, kind='stable')[:k])
  return [md.contact[i] for i in keep]


def _check_deepest(d, md, k, overflow):
  c = _contacts(d)
  want = _deepest_in_order(md, k)
  assert int(d.ncon) == k
  np.testing.assert_array_equal(c['geom'], [w.geom for w in want])
  np.testing.assert_allclose(c['dist'], [w.dist for w in want], atol=1e-9)
  np.testing.assert_allclose(c['pos'], [w.pos for w in want], atol=1e-9)
  assert int(d.warning_counts[1]) == overflow
  _check_unused(d)


@pytest.mark.parametrize('broadphase', PATHS)
def test_capacity_keeps_deepest_pairs(broadphase):
  """More sphere-plane pairs pass the broadphase than fit: the deepest pairs run."""
  xml = _spheres()
  m, mj = _models(xml, nconmax=5, broadphase=broadphase)
  md = _theirs(mj, mj.qpos0)
  d = _ours(m, md)
  assert md.ncon == len(DEPTHS)
  _check_deepest(d, md, 5, len(DEPTHS) - 5)
  # under vmap, a batch in which one world's pairs fit and the other's do not (the pair
  # selection's top_k runs for the batch, each world keeps its own choice) equals the worlds
  # alone
  q = np.array(mj.qpos0)
  q[2:7 * 5:7] += 0.1                     # lift five spheres: three pairs are left
  md2 = _theirs(mj, q)
  assert md2.ncon == 3
  _check_vmap_equals_alone(m, (md, md2), (d, _ours(m, md2)))


def _check_vmap_equals_alone(m, mds, alone):
  """The vmapped collision of the worlds at MuJoCo's poses ``mds`` equals ``alone``, each
  world's own result."""
  poses = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *[_poses(m, md) for md in mds])
  batch = jax.jit(jax.vmap(collision, in_axes=(None, 0)))(m, poses)
  for i, own in enumerate(alone):
    for x, y in zip(jax.tree_util.tree_leaves(batch), jax.tree_util.tree_leaves(own)):
      np.testing.assert_array_equal(np.asarray(x)[i], np.asarray(y))


CAPSULES = """
<mujoco>
  <worldbody>
    <geom name="floor" type="plane" size="3 3 0.1"/>
    {bodies}
  </worldbody>
</mujoco>
""".format(bodies=''.join(
    f'<body pos="0 {y} {z}" euler="0 {tilt} 0"><freejoint/><geom type="capsule" '
    'size="0.05 0.2"/></body>'
    for y, z, tilt in ((0, 0.046, 90.5), (0.3, 0.047, 89.5), (0.6, 0.045, 90.3),
                       (0.9, 0.048, 89.6))))


@pytest.mark.parametrize('broadphase', PATHS)
def test_capacity_keeps_deepest_contacts(broadphase):
  """All pairs run, but their contacts do not all fit: the deepest contacts are kept."""
  m, mj = _models(CAPSULES, nconmax=5, broadphase=broadphase)
  md = _theirs(mj, mj.qpos0)
  d = _ours(m, md)
  assert md.ncon == 8
  _check_deepest(d, md, 5, 3)
  # under vmap, with a world whose contacts fit beside this one: each world as alone
  q = np.array(mj.qpos0)
  q[2 + 7 * 2::7] += 0.1                  # lift two capsules: four contacts are left
  md2 = _theirs(mj, q)
  assert md2.ncon == 4
  _check_vmap_equals_alone(m, (md, md2), (d, _ours(m, md2)))
  # the counter accumulates over calls
  d2 = _collision(m, d)
  assert int(d2.warning_counts[1]) == 6


@pytest.mark.parametrize('broadphase', PATHS)
def test_capacity_exact_when_survivors_fit(broadphase):
  """More candidate pairs of a type than the capacity, but few pass the broadphase: exact."""
  xml = SPHERES.format(size='', bodies=''.join(
      f'<body pos="{x} 0 {z}"><freejoint/><geom type="sphere" size="0.05"/></body>'
      for x, z in ((0, 0.049), (0.099, 0.049), (0.4, 0.049), (0.7, 0.049))))
  m, mj = _models(xml, nconmax=5, broadphase=broadphase)
  assert [g[3] + g[7] for g in m.col_groups] == [4, 6]
  md = _theirs(mj, mj.qpos0)
  d = _ours(m, md)
  assert md.ncon == 5
  _compare(d, md, 'spheres')
  assert int(d.warning_counts[1]) == 0


@pytest.mark.parametrize('broadphase', PATHS)
def test_disabled_contacts_and_empty_buffer(broadphase):
  for option in ('<option><flag contact="disable"/></option>',
                 '<option><flag constraint="disable"/></option>'):
    xml = with_option(read(SCENE), option)
    m, mj = _models(xml, broadphase=broadphase)
    md = _theirs(mj, mj.qpos0)
    d = _ours(m, md)
    assert md.ncon == 0 and int(d.ncon) == 0
    _check_unused(d)
  d0 = mjx_py.make_data(m)
  assert int(d0.ncon) == 0 and d0.contact.frame.shape == (m.nconmax, 9)
  assert d0.contact.H.shape == (m.nconmax, 36) and d0.contact.geom.dtype == jnp.int32
  _check_unused(d0)


UNSUPPORTED = """
<mujoco>
  {option}
  <worldbody>
    <geom name="floor" type="plane" size="3 3 0.1"/>
    <body pos="0 0 0.1"><freejoint/><geom name="rod" type="capsule" size="0.05 0.1"/></body>
    <body pos="1 0 0.1"><freejoint/><geom name="ball" type="sphere" size="0.1"/></body>
  </worldbody>
</mujoco>
"""


@pytest.mark.parametrize('broadphase', PATHS)
def test_unsupported_pair_type_raises_at_trace_time(broadphase, monkeypatch):
  """A type pair without a routine (here plane-sphere, taken out of the routine table, so that
  the test does not depend on which routines exist) raises when traced, naming an example."""
  from mjx_py.collision import primitive
  monkeypatch.delitem(primitive.ROUTINES, (0, 2))
  m = mjx_py.from_xml_string(UNSUPPORTED.format(option=''), broadphase=broadphase)
  d = mjx_py.make_data(m)
  with pytest.raises(mjx_py.NotSupportedError, match=r"plane and sphere.*'floor' and 'ball'"):
    jax.eval_shape(collision, m, d)
  off = mjx_py.from_xml_string(
      UNSUPPORTED.format(option='<option><flag contact="disable"/></option>'),
      broadphase=broadphase)
  assert int(collision(off, mjx_py.make_data(off)).ncon) == 0


SMALL = """
<mujoco>
  <worldbody>
    <geom name="floor" type="plane" size="3 3 0.1"/>
    <body pos="0 0 0.049"><freejoint/><geom type="sphere" size="0.05"/></body>
    <body pos="0.04 0.01 0.145"><freejoint/><geom type="sphere" size="0.05" margin="0.01"/></body>
    <body pos="0.3 0 0.045" euler="0 90 0"><freejoint/><geom type="capsule" size="0.05 0.1"/></body>
  </worldbody>
</mujoco>
"""


@pytest.mark.parametrize('broadphase', PATHS)
def test_vmap_and_gradients(broadphase):
  """vmap equals single worlds; gradients are finite (the sweep's while_loop carries only
  stop_gradient'ed index arithmetic). The sweep's vmap over distinct worlds is tested in
  tests/test_collision_broadphase.py."""
  m, mj = _models(SMALL, broadphase=broadphase)
  rng = np.random.default_rng(1)
  qs = np.stack([mj.qpos0] + [random_state(mj, rng, qpos_scale=0.01, mocap=False).qpos
                              for _ in range(2)])

  def run(q):
    d = dataclasses.replace(mjx_py.make_data(m), qpos=q)
    return collision(m, kinematics.kinematics(m, d))

  if broadphase == 'table':
    batch = jax.jit(jax.vmap(run))(jnp.asarray(qs))
    for i, q in enumerate(qs):
      single = _ours(m, _theirs(mj, q))
      np.testing.assert_array_equal(batch.ncon[i], single.ncon)
      np.testing.assert_allclose(batch.contact.dist[i], single.contact.dist, atol=1e-12)
      _compare(single, _theirs(mj, q), f'small {i}')

  def depth(q):
    d = run(q)
    used = jnp.arange(m.nconmax) < d.ncon
    return jnp.sum(jnp.where(used, d.contact.dist + d.contact.pos[:, 2], 0.0))

  for q in qs:   # qpos0 holds a sphere touching another one exactly at its margin
    g = jax.jit(jax.grad(depth))(jnp.asarray(q))
    assert np.all(np.isfinite(np.asarray(g)))
    assert np.any(np.asarray(g) != 0)


def _pile_xml(nbody, rng):
  """A plane and nbody free boxes and spheres on a 10 x 10 grid, in layers; only the bottom
  layer touches the floor."""
  bodies = []
  for i in range(nbody):
    layer, cell = divmod(i, 100)
    x, y = 0.3 * (cell % 10), 0.3 * (cell // 10)
    z = 0.05 + 0.3 * layer - (0.004 * rng.uniform() if layer == 0 else 0.0)
    geom = ('<geom type="box" size="0.05 0.05 0.05"/>' if i % 2 else
            '<geom type="sphere" size="0.05"/>')
    bodies.append(f'<body pos="{x:.3f} {y:.3f} {z:.4f}"><freejoint/>{geom}</body>')
  return ('<mujoco><worldbody><geom name="floor" type="plane" size="5 5 0.1"/>'
          + ''.join(bodies) + '</worldbody></mujoco>')


def test_300_bodies_under_jit():
  """Both broadphases on 300 free bodies (45,150 candidate pairs); 'auto' takes the sweep."""
  rng = np.random.default_rng(0)
  xml = _pile_xml(300, rng)
  arrays = compile_string(xml)   # once: the compiler's qpos0 constants take seconds here
  m = mjx_py.put_model(arrays, nconmax=400, broadphase='table')
  mj = mujoco.MjModel.from_xml_string(xml)
  assert m.nconmax == 400 and m.ncandidate == 300 + 300 * 299 // 2
  qpos = random_state(mj, rng, qpos_scale=0.002, mocap=False).qpos
  md = _theirs(mj, qpos)
  d = _poses(m, md)
  assert 100 < md.ncon < m.nconmax
  ms = mjx_py.put_model(arrays, nconmax=400)
  assert ms.broadphase == 'sap' and ms.ncandidate == m.ncandidate and ms.npairmax == 400
  out = {}
  for model in (m, ms):
    t0 = time.perf_counter()
    compiled = jax.jit(collision).lower(model, d).compile()
    t1 = time.perf_counter()
    res = jax.block_until_ready(compiled(model, d))
    t2 = time.perf_counter()
    for _ in range(10):
      res = jax.block_until_ready(compiled(model, d))
    t3 = time.perf_counter()
    print(f'\n300 bodies, {model.broadphase}: compile {t1 - t0:.2f} s, first run '
          f'{t2 - t1:.4f} s, run {(t3 - t2) / 10 * 1e3:.2f} ms, ncon {int(res.ncon)}, '
          f'capacity {model.nconmax}')
    _compare(res, md, f'300 bodies ({model.broadphase})')
    assert int(res.warning_counts[1]) == 0
    out[model.broadphase] = res
  _same(out['sap'], out['table'], '300 bodies: sap vs table')


@pytest.mark.parametrize('broadphase', PATHS)
def test_float32(broadphase):
  with jax.enable_x64(False):
    m, mj = _models(SMALL, broadphase=broadphase)
    md = _theirs(mj, mj.qpos0)
    d = _ours(m, md)
    assert d.contact.dist.dtype == jnp.float32 and d.contact.friction.dtype == jnp.float32
    assert int(d.ncon) == md.ncon == 4
    np.testing.assert_allclose(np.asarray(d.contact.dist[:4]),
                               [c.dist for c in md.contact[:4]], atol=1e-5)
    np.testing.assert_allclose(np.asarray(d.contact.solimp[:4]),
                               [c.solimp for c in md.contact[:4]], atol=1e-6)


def test_lex_order_combined_key_equals_lexicographic():
  """_lex_order with static key bounds (one combined int32 key) gives the stable
  lexicographic order numpy's lexsort gives, as the per-key comparisons do, with ties and the
  sort fallback above PAIRWISE_SORT entries."""
  rng = np.random.default_rng(3)
  bounds = (2, 37, 4)
  for n in (1, 7, 54, driver.PAIRWISE_SORT + 9):
    keys = [rng.integers(0, b, n).astype(np.int32) for b in bounds]
    want = np.lexsort(keys[::-1])   # lexsort: the last key most significant; stable
    jkeys = [jnp.asarray(k) for k in keys]
    for b in (bounds, None):
      got = jax.jit(lambda *k, b=b: driver._lex_order(list(k), b))(*jkeys)
      np.testing.assert_array_equal(np.asarray(got), want)
