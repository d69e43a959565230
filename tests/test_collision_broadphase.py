"""The sort-based broadphase ('sap') of the collision driver, against MuJoCo 3.3.3 (float64).

1. Host counts: without listing the dynamic pairs, the sweep's tables count the same candidates
   as the table path (per geom type pair, in total, contact slots, colliding geoms), keep the
   same explicit rows, and sweep exactly the geoms of the dynamic pairs: on every test model and
   on random models with nested/welded bodies, random masks, <exclude>s and explicit <pair>s.
2. A settled pile of 300 free boxes and spheres in a bin of planes (MuJoCo's own mj_step settles
   it): the sweep's contacts equal MuJoCo's (set, order, values), with no overflow.
3. Overflow: with too small a pair capacity (npairmax, per geom type pair), every
   bounding-overlapping pair either makes its contact or is counted; too small a contact buffer
   keeps the deepest contacts in MuJoCo's order and counts the rest.
4. No quadratic arrays: building a 1000-body model for the sweep never lists the pairs on the
   host, and no array in the traced collision stage is anywhere near ncandidate long.
5. The broadphase keyword: 'auto' picks by the number of dynamic candidate pairs; bad values
   raise.
The collision stage runs on MuJoCo's geom poses (kinematics has its own tests).
"""

from __future__ import annotations

import jax
import mujoco
import numpy as np
import pytest
from oracle import MODELS, model_id, read, with_option
from test_collision_driver import (
  FILTERS,
  NOPARENT,
  _check_deepest,
  _compare,
  _ours,
  _poses,
)

import mjx_py
from mjx_py.collision import driver
from mjx_py.mjcf import compile_file, compile_string


@pytest.fixture(autouse=True, scope='module')
def _x64():
  with jax.enable_x64(True):
    yield


# ---------------------------------------------------------------------------------------------
# 1. host counts

def _check_counts(arrays, label):
  table = driver.pair_tables(arrays, 'table')
  sweep = driver.pair_tables(arrays, 'sap')
  assert sweep['broadphase'] == 'sap' and table['broadphase'] == 'table'
  for k in ('ncandidate', 'ncon_total', 'ngeom_collide', 'ncon_budget', 'ndynamic'):
    assert sweep[k] == table[k], f'{label}: {k}'
  explicit = table['col_pairid'] >= 0
  np.testing.assert_array_equal(sweep['col_geom'], table['col_geom'][explicit], err_msg=label)
  np.testing.assert_array_equal(sweep['col_pairid'], table['col_pairid'][explicit])
  # per type pair: the table's dynamic rows are the sweep's nsweep, its explicit rows its count
  rows = {g[:2]: g for g in table['col_groups']}
  dyn = table['col_geom'][~explicit]
  gtype = np.asarray(arrays['geom_type']).reshape(-1)
  for t1, t2, _, count, ncon, ex1, ex2, nsweep in sweep['col_groups']:
    mask = (gtype[dyn[:, 0]] == t1) & (gtype[dyn[:, 1]] == t2)
    assert nsweep == int(np.sum(mask)), f'{label}: types {t1} {t2}'
    assert count + nsweep == rows[(t1, t2)][3] and ncon == rows[(t1, t2)][4]
    if not count:   # the example pair is a real dynamic candidate
      assert {ex1, ex2} in [set(p) for p in dyn[mask]], f'{label}: example {ex1} {ex2}'
  assert len(sweep['col_groups']) == len(table['col_groups'])
  np.testing.assert_array_equal(sweep['col_sweep'], np.unique(dyn), err_msg=label)
  np.testing.assert_array_equal(sweep['dynamic_geoms'], table['dynamic_geoms'], err_msg=label)
  return table


MODEL_XML = [(model_id(p), p, None) for p in MODELS] + [('noparent', FILTERS, NOPARENT)]


def test_counts_match_the_table_on_every_model():
  checked = 0
  for label, path, option in MODEL_XML:
    arrays = (compile_file(path) if option is None else
              compile_string(with_option(read(path), option)))
    checked += _check_counts(arrays, label)['ncandidate'] > 0
  assert checked >= 8


def _random_tree(rng, nbody):
  """MJCF of a random forest of bodies: free roots, hinged or welded (jointless) children, 1-2
  geoms each of random type and masks, a few <exclude>s and explicit <pair>s."""
  kinds = ('sphere', 'capsule', 'box', 'cylinder', 'ellipsoid')
  children = {i: [] for i in range(-1, nbody)}
  for i in range(nbody):
    children[int(rng.integers(-1, i)) if i else -1].append(i)
  geoms = []

  def body(i, root):
    joint = ('<freejoint/>' if root else
             '' if rng.uniform() < 0.3 else '<joint type="hinge" axis="0 1 0"/>')
    parts = []
    for _ in range(int(rng.integers(1, 3))):
      name = f'g{len(geoms)}'
      geoms.append((name, i))
      parts.append(f'<geom name="{name}" type="{rng.choice(kinds)}" size="0.05 0.04 0.03" '
                   f'contype="{rng.integers(0, 4)}" conaffinity="{rng.integers(0, 4)}" '
                   f'pos="{rng.uniform(-0.1, 0.1):.3f} 0 0"/>')
    kids = ''.join(body(k, False) for k in children[i])
    return (f'<body name="b{i}" pos="{rng.uniform(-1, 1):.3f} {rng.uniform(-1, 1):.3f} 0.2">'
            f'{joint}{"".join(parts)}{kids}</body>')

  world = ''.join(body(k, True) for k in children[-1])
  names = [g for g, _ in geoms]
  pairs = {tuple(sorted(rng.choice(names, 2, replace=False))) for _ in range(4)}
  excludes = {tuple(sorted(rng.choice(nbody, 2, replace=False))) for _ in range(4)}
  contact = (''.join(f'<pair geom1="{a}" geom2="{b}"/>' for a, b in sorted(pairs)) +
             ''.join(f'<exclude body1="b{a}" body2="b{b}"/>' for a, b in sorted(excludes)))
  flag = '<option><flag filterparent="disable"/></option>' if rng.uniform() < 0.5 else ''
  return (f'<mujoco>{flag}<worldbody><geom name="floor" type="plane" size="3 3 .1" '
          f'contype="{rng.integers(0, 4)}"/><geom name="post" type="box" size=".1 .1 .1"/>'
          f'{world}</worldbody><contact>{contact}</contact></mujoco>')


def test_counts_match_the_table_on_random_models():
  rng = np.random.default_rng(11)
  total = 0
  for k in range(25):
    xml = _random_tree(rng, int(rng.integers(2, 30)))
    total += _check_counts(compile_string(xml), f'random model {k}')['ndynamic']
  assert total > 1000


# ---------------------------------------------------------------------------------------------
# 2. the settled pile

def pile_xml(nbody, spheres_only=False, half=0.9, spacing=0.18, seed=0):
  """nbody free spheres (and boxes, every other body, unless spheres_only) of size 0.05 on a
  jittered grid of layers inside a bin: a floor and four walls, all planes."""
  rng = np.random.default_rng(seed)
  n = int(round(2 * half / spacing))
  walls = ''.join(f'<geom type="plane" pos="{x} {y} 0" zaxis="{-np.sign(x)} {-np.sign(y)} 0" '
                  f'size="{half} 0.5 0.1"/>'
                  for x, y in ((half, 0), (-half, 0), (0, half), (0, -half)))
  bodies = []
  for i in range(nbody):
    layer, cell = divmod(i, n * n)
    x = -half + spacing * (cell % n + 0.5) + rng.uniform(-0.02, 0.02)
    y = -half + spacing * (cell // n + 0.5) + rng.uniform(-0.02, 0.02)
    q = rng.standard_normal(4)
    q /= np.linalg.norm(q)
    geom = ('<geom type="box" size="0.05 0.05 0.05"/>' if i % 2 and not spheres_only else
            '<geom type="sphere" size="0.05"/>')
    bodies.append(f'<body pos="{x:.4f} {y:.4f} {0.1 + spacing * layer:.4f}" '
                  f'quat="{q[0]:.4f} {q[1]:.4f} {q[2]:.4f} {q[3]:.4f}"><freejoint/>{geom}</body>')
  return ('<mujoco><option timestep="0.005"/><worldbody>'
          '<geom name="floor" type="plane" size="2 2 0.1"/>' + walls + ''.join(bodies)
          + '</worldbody></mujoco>')


def _settle(xml, nstep):
  """MuJoCo's model and data after nstep steps from rest, then mj_forward."""
  mj = mujoco.MjModel.from_xml_string(xml)
  md = mujoco.MjData(mj)
  for _ in range(nstep):
    mujoco.mj_step(mj, md)
  mujoco.mj_forward(mj, md)
  return mj, md


# (xml, our compiled arrays, MjModel, MjData): the compiler runs once per pile
@pytest.fixture(scope='module')
def pile():
  xml = pile_xml(300)
  return (xml, compile_string(xml)) + _settle(xml, 400)


@pytest.fixture(scope='module')
def sphere_pile():
  xml = pile_xml(150, spheres_only=True, half=0.5, spacing=0.125)
  return (xml, compile_string(xml)) + _settle(xml, 200)


def test_settled_pile_matches_mujoco(pile):
  _, arrays, mj, md = pile
  m = mjx_py.put_model(arrays, nconmax=1200)   # 'auto' takes the sweep
  assert m.broadphase == 'sap' and m.ncandidate == 300 * 299 // 2 + 5 * 300
  assert m.npairmax == 1200 and len(m.col_geom) == 0 and m.col_sweep.shape == (305,)
  assert 800 < md.ncon <= m.nconmax
  d = _ours(m, md)
  _compare(d, md, 'settled pile')
  assert int(d.warning_counts[1]) == 0
  # the pile holds every type pair: plane-sphere, plane-box, sphere-sphere, sphere-box, box-box
  pairs = {tuple(sorted(mj.geom_type[g])) for g in np.asarray(d.contact.geom[:int(d.ncon)])}
  assert pairs == {(0, 2), (0, 6), (2, 2), (2, 6), (6, 6)}


def _bound_overlaps(arrays, md):
  """Dynamic candidate pairs whose bounding spheres (or plane distance) pass MuJoCo's bounding
  test, counted on the host from the table and MuJoCo's poses (all margins are 0)."""
  t = driver.pair_tables(arrays, 'table')
  g1, g2 = t['col_geom'][:, 0], t['col_geom'][:, 1]
  r = np.asarray(arrays['geom_rbound']).reshape(-1)
  p1, p2 = md.geom_xpos[g1], md.geom_xpos[g2]
  both = (r[g1] > 0) & (r[g2] > 0)
  near = np.linalg.norm(p1 - p2, axis=1) <= r[g1] + r[g2]
  normal = md.geom_xmat.reshape(-1, 3, 3)[g1][:, :, 2]
  above = np.sum((p2 - p1) * normal, axis=1) <= r[g2]
  return int(np.sum(np.where(both, near, above)))


def test_pair_overflow_is_counted(sphere_pile):
  _, arrays, mj, md = sphere_pile
  nbound = _bound_overlaps(arrays, md)
  assert nbound == md.ncon > 200        # spheres: a bounding overlap is a contact
  types = np.sort(mj.geom_type[[c.geom for c in md.contact[:md.ncon]]], axis=1)
  per_type = [int(np.sum(types[:, 0] == t)) for t in (0, 2)]   # plane-sphere, sphere-sphere
  cap = min(per_type) - 20              # both type pairs overflow
  m = mjx_py.put_model(arrays, broadphase='sap', nconmax=600, npairmax=cap)
  assert driver.sweep_capacity(m.col_groups, m.npairmax) == 2 * cap
  d = _ours(m, md)
  # each type pair ran at most cap pairs (the buffer, 2 * cap, filled in sweep order, may hold
  # more of one type pair than it runs), each making its contact; the others are counted
  assert cap <= int(d.ncon) <= 2 * cap
  assert int(d.warning_counts[1]) == nbound - int(d.ncon) > 0
  # npairmax = 0: no dynamic pair runs, every one is counted
  m0 = mjx_py.put_model(arrays, broadphase='sap', nconmax=600, npairmax=0)
  d0 = _ours(m0, md)
  assert int(d0.ncon) == 0 and int(d0.warning_counts[1]) == nbound
  # the pairs that ran give exactly MuJoCo's contacts of those pairs
  theirs = {tuple(c.geom): c for c in md.contact[:md.ncon]}
  for i in range(int(d.ncon)):
    c = theirs[tuple(np.asarray(d.contact.geom[i]))]
    np.testing.assert_allclose(float(d.contact.dist[i]), c.dist, atol=1e-9)
    np.testing.assert_allclose(np.asarray(d.contact.pos[i]), c.pos, atol=1e-9)


def test_contact_overflow_keeps_the_deepest(sphere_pile):
  _, arrays, mj, md = sphere_pile
  cap = 100
  m = mjx_py.put_model(arrays, broadphase='sap', nconmax=cap, npairmax=600)
  d = _ours(m, md)
  _check_deepest(d, md, cap, md.ncon - cap)


# ---------------------------------------------------------------------------------------------
# 4. no quadratic arrays

def _max_dim(jaxpr) -> int:
  """The longest axis of any value in a (closed) jaxpr, sub-jaxprs included."""
  out = 0
  for eqn in jaxpr.eqns:
    for v in list(eqn.outvars) + [x for x in eqn.invars if hasattr(x, 'aval')]:
      out = max([out] + list(getattr(v.aval, 'shape', ())))
    for p in eqn.params.values():
      for sub in (p if isinstance(p, (list, tuple)) else [p]):
        inner = getattr(sub, 'jaxpr', sub)
        if hasattr(inner, 'eqns'):
          out = max(out, _max_dim(inner))
  return out


def test_no_quadratic_arrays(monkeypatch):
  # one slide joint per body keeps the (nv, nv) tables of the other stages small
  xml = ('<mujoco><worldbody><geom type="plane" size="9 9 .1"/>' + ''.join(
      f'<body pos="{0.2 * (i % 30)} {0.2 * (i // 30)} 0.05"><joint type="slide" axis="0 0 1"/>'
      '<geom type="sphere" size="0.05"/></body>' for i in range(600)) + '</worldbody></mujoco>')
  arrays = compile_string(xml)

  def forbidden(*args, **kwargs):
    raise AssertionError('the sweep must not list the candidate pairs on the host')
  with monkeypatch.context() as patch:
    patch.setattr(np, 'triu_indices', forbidden)
    m = mjx_py.put_model(arrays)
  assert m.broadphase == 'sap' and m.ncandidate == 600 * 599 // 2 + 600
  assert max(np.size(getattr(m, k)) for k in driver.INDEX_FIELDS) <= m.ngeom
  d = mjx_py.make_data(m)
  longest = _max_dim(jax.make_jaxpr(driver.collision)(m, d).jaxpr)
  assert longest <= 2 * m.nconmax < m.ncandidate / 20
  # the table path of the same model does hold the whole candidate list
  mt = mjx_py.put_model(arrays, broadphase='table')
  assert _max_dim(jax.make_jaxpr(driver.collision)(mt, d).jaxpr) >= mt.ncandidate


# ---------------------------------------------------------------------------------------------
# 5. the keyword

def test_broadphase_keyword():
  small = read(FILTERS)
  m = mjx_py.from_xml_string(small)
  assert m.broadphase == 'table' and m.npairmax == m.nconmax
  m = mjx_py.from_xml_string(small, broadphase='sap')
  assert m.broadphase == 'sap' and m.npairmax == m.nconmax
  assert mjx_py.from_xml_string(small, broadphase='sap', npairmax=7).npairmax == 7
  assert mjx_py.from_xml_path(FILTERS, broadphase='sap', npairmax=9).npairmax == 9
  with pytest.raises(ValueError, match='broadphase'):
    mjx_py.from_xml_string(small, broadphase='grid')
  with pytest.raises(ValueError, match='npairmax'):
    mjx_py.from_xml_string(small, broadphase='sap', npairmax=-1)
  # 'auto': the sweep above SAP_THRESHOLD dynamic candidate pairs
  def spheres(n):
    return compile_string('<mujoco><worldbody>' + ''.join(
        f'<body pos="{i} 0 0"><freejoint/><geom size="0.1"/></body>' for i in range(n))
        + '</worldbody></mujoco>')
  n = int(np.ceil((1 + np.sqrt(1 + 8 * driver.SAP_THRESHOLD)) / 2))   # n(n-1)/2 > threshold
  assert mjx_py.put_model(spheres(n)).broadphase == 'sap'
  assert mjx_py.put_model(spheres(n - 1)).broadphase == 'table'
  assert mjx_py.put_model(spheres(n), broadphase='table').broadphase == 'table'


def test_sweep_on_vmapped_worlds(sphere_pile):
  """vmap over worlds in different states (settled, and the initial grid): each world's sweep
  finds its own pairs, and MuJoCo's contacts without overflow."""
  _, arrays, mj, md = sphere_pile
  m = mjx_py.put_model(arrays, broadphase='sap', nconmax=600, npairmax=600)
  md0 = mujoco.MjData(mj)
  mujoco.mj_forward(mj, md0)
  assert 0 < md0.ncon < md.ncon
  batch = jax.tree_util.tree_map(lambda a, b: np.stack([a, b]), _poses(m, md), _poses(m, md0))
  out = jax.jit(jax.vmap(driver.collision, in_axes=(None, 0)))(m, batch)
  for i, ref in enumerate((md, md0)):
    single = jax.tree_util.tree_map(lambda x, i=i: x[i], out)
    _compare(single, ref, f'world {i}')
    assert int(single.warning_counts[1]) == 0
