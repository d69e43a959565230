"""Constraint rows (mj_makeConstraint + mj_makeImpedance + mj_referenceConstraint) against
MuJoCo 3.3.3's mj_forward, in float64.

The stage runs on MuJoCo's own position-stage results and contacts (copied into our Data), so
that the rows are compared on identical inputs, and only the stage is compiled per model.

1. Random states (and random eq_active switches) of the models with equality constraints, limits
   and friction loss, and of contact models (condim 1, 3, 4, 6, both cones, impratio), in dense
   and sparse Jacobian modes and with refsafe disabled: nefc, ne, nf, nl, efc_type and efc_id
   equal; efc_J, efc_pos, efc_margin, efc_frictionloss, efc_diagApprox, efc_R, efc_D, efc_KBIP,
   efc_vel, efc_aref within 1e-8 relative; contact efc_address, mu and exclude equal. The states
   of one case run in one jit(vmap(...)) call (timings printed with -s). efc_vel is J qvel over
   the largest row bucket when every world of the batch fits it (constraint.rows_product): the
   cases in BUCKET_FITS take that branch, the others (and rows_friction_only, with no bucket)
   the product over every row.
2. With our own collision stage: the same rows per contact (contacts matched by geom pair and
   position, as in the collision tests).
3. Capacity (nefc_max from the model and the disable flags; unused rows hold the sentinel), the
   disable flags against MuJoCo, finite float32 gradients at singular points.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import oracle
import pytest
from oracle import ROOT, dense_efc_J, dense_ten_J, random_state, read, with_option

import mjx_py
from mjx_py import constraint
from mjx_py.collision import collision
from mjx_py.data import EMPTY_DIST, empty_contact

MODELS = os.path.join(ROOT, 'tests', 'models')
ROWS = os.path.join(MODELS, 'constraint_rows.xml')
CONTACTS = os.path.join(MODELS, 'constraint_contacts.xml')
EQUALITY = os.path.join(MODELS, 'equality_all.xml')
JOINTS = os.path.join(MODELS, 'joints_all.xml')
TENDONS = os.path.join(MODELS, 'tendons_spatial.xml')
SCENE = os.path.join(MODELS, 'collision_scene.xml')
DENSE = '<option jacobian="dense"/>'
ELLIPTIC = '<option jacobian="dense" cone="elliptic"/>'
SPARSE = '<option jacobian="sparse" cone="elliptic"><flag refsafe="disable"/></option>'
NOREFSAFE = '<option jacobian="sparse"><flag refsafe="disable"/></option>'
# only the friction-loss rows stay on
FLAGS = ('<option jacobian="dense"><flag equality="disable" limit="disable" contact="disable"/>'
         '</option>')
RTOL = 1e-8
FIELDS = ('efc_J', 'efc_pos', 'efc_margin', 'efc_frictionloss', 'efc_diagApprox', 'efc_R',
          'efc_D', 'efc_KBIP', 'efc_vel', 'efc_aref')
CONTACT_IN = ('dist', 'pos', 'frame', 'includemargin', 'friction', 'solref', 'solreffriction',
              'solimp', 'dim', 'geom1', 'geom2', 'geom', 'exclude')
NSTATE = 5


@pytest.fixture(autouse=True, scope='module')
def _float64():
  """float64 for this module only (the global flag would leak into later test modules)."""
  with jax.enable_x64(True):
    yield


def _rows_collision(m, d):
  """Constraint rows after our collision stage (on MuJoCo's kinematics)."""
  return constraint.make_constraint(m, collision(m, d))


# the stage alone, on MuJoCo's kinematics and contacts (one compile per model, not of the
# whole position stage)
_rows = jax.jit(constraint.make_constraint)
_batch_rows = jax.jit(jax.vmap(constraint.make_constraint, in_axes=(None, 0)))
_batch_rows_collision = jax.jit(jax.vmap(_rows_collision, in_axes=(None, 0)))


def _models(xml):
  return mjx_py.from_xml_string(xml), mujoco.MjModel.from_xml_string(xml)


def _scene_condims():
  """collision_scene with condim 4 by default and 6 for the spheres."""
  xml = read(SCENE).replace('<geom density="500"/>', '<geom density="500" condim="4"/>')
  return xml.replace('<geom type="sphere" conaffinity="3"/>',
                     '<geom type="sphere" conaffinity="3" condim="6"/>')


def _mj_forward(mj, state, eq_active):
  md = mujoco.MjData(mj)
  md.qpos[:] = state.qpos
  md.qvel[:] = state.qvel
  md.eq_active[:] = eq_active
  mujoco.mj_forward(mj, md)
  return md


def _host(tree):
  """A pytree's leaves as numpy arrays (the tests assemble and read Data on the host: eager jax
  ops would compile a small program per field shape and model)."""
  return jax.device_get(tree)


def _zeros(fn, *args):
  """fn(*args) (Data or Contact) with every leaf zero, built on the host from its shapes."""
  return jax.tree_util.tree_map(lambda s: np.zeros(s.shape, s.dtype), jax.eval_shape(fn, *args))


def _empty_contact(m):
  """An unused contact buffer (as data.empty_contact makes it), on the host."""
  c = _zeros(lambda: empty_contact(m.nconmax))
  ids = {k: np.full_like(getattr(c, k), -1) for k in ('geom1', 'geom2', 'geom', 'efc_address')}
  return dataclasses.replace(c, dist=np.full_like(c.dist, EMPTY_DIST), **ids)


def _mj_contacts(m, md):
  """MuJoCo's contacts in our (host) buffer (exclude 3 is set by the constraint stage: 0)."""
  assert md.ncon <= m.nconmax
  return oracle.fill_contacts(_empty_contact(m), md, CONTACT_IN)


def _mj_position(mj, md):
  """What the constraint stage reads from the position stage, from MuJoCo's mj_forward."""
  return {'xpos': md.xpos, 'xquat': md.xquat, 'xmat': md.xmat, 'site_xpos': md.site_xpos,
          'geom_xpos': md.geom_xpos, 'geom_xmat': md.geom_xmat, 'subtree_com': md.subtree_com,
          'cdof': md.cdof, 'ten_length': md.ten_length, 'ten_J': dense_ten_J(mj, md)}


def _base(m):
  """Our Data before the stage: zeros, sentinels in the efc and contact buffers."""
  d = _zeros(mjx_py.make_data, m)
  unused = np.full_like(d.efc_type, -1)
  return dataclasses.replace(d, contact=_empty_contact(m), efc_type=unused, efc_id=unused)


def _world_data(m, mj, md, base=None, contacts=True):
  """Our Data (host arrays) holding MuJoCo's state, position-stage results and contacts."""
  base = _base(m) if base is None else base
  dtype = base.qpos.dtype
  fields = {k: np.asarray(v, dtype) for k, v in _mj_position(mj, md).items()}
  d = dataclasses.replace(base, qpos=np.array(md.qpos, dtype), qvel=np.array(md.qvel, dtype),
                          eq_active=np.array(md.eq_active, np.int32), **fields)
  if contacts:
    d = dataclasses.replace(d, contact=_mj_contacts(m, md), ncon=np.int32(md.ncon))
  return d


def _states(m, mj, n, qpos_scale, seed, contacts=True):
  """n random states (random eq_active after the first; qpos_scale: one scale, or one per
  state) as MuJoCo's MjData and one batched Data of ours (host arrays) holding MuJoCo's
  position-stage results (and contacts, when ``contacts``)."""
  rng = np.random.default_rng(seed)
  scales = np.broadcast_to(qpos_scale, (n,))
  base = _base(m)
  mds, ds = [], []
  for k in range(n):
    state = random_state(mj, rng, qpos_scale=float(scales[k]), qvel_scale=1.0, mocap=False)
    eq_active = mj.eq_active0.copy() if k == 0 else rng.integers(0, 2, mj.neq)
    md = _mj_forward(mj, state, eq_active)
    mds.append(md)
    ds.append(_world_data(m, mj, md, base, contacts))
  return mds, jax.tree_util.tree_map(lambda *x: np.stack(x), *ds)


def _theirs(mj, md):
  """MuJoCo's rows as dense arrays, by our field names."""
  n = md.nefc
  out = {'efc_J': dense_efc_J(mj, md), 'efc_KBIP': np.asarray(md.efc_KBIP).reshape(n, 4)}
  for name in FIELDS[1:]:
    if name != 'efc_KBIP':
      out[name] = np.asarray(getattr(md, name))
  return out


def _close(ours, theirs, what):
  """|ours - theirs| <= RTOL (1 + |theirs|); returns the largest relative error."""
  err = np.abs(ours - theirs) / (1 + np.abs(theirs))
  worst = float(err.max()) if err.size else 0.0
  where = np.unravel_index(np.argmax(err), err.shape) if err.size else ()
  assert worst <= RTOL, f'{what}: error {worst:.3g} at {where}'
  return worst


def _check_unused(d, n):
  """Rows [n, nefc_max) hold the sentinel: type and id -1, every float 0."""
  assert np.all(np.asarray(d.efc_type[n:]) == -1) and np.all(np.asarray(d.efc_id[n:]) == -1)
  for name in FIELDS:
    assert not np.any(np.asarray(getattr(d, name))[n:]), name


def _compare(d, mj, md, label):
  """Our rows (one world) against MuJoCo's; returns the largest relative error."""
  n = int(d.nefc)
  assert n == md.nefc, f'{label}: nefc {n} != {md.nefc}'
  assert (int(d.ne), int(d.nf), int(d.nl)) == (md.ne, md.nf, md.nl), label
  np.testing.assert_array_equal(np.asarray(d.efc_type[:n]), md.efc_type, err_msg=label)
  np.testing.assert_array_equal(np.asarray(d.efc_id[:n]), md.efc_id, err_msg=label)
  worst = 0.0
  for name, value in _theirs(mj, md).items():
    worst = max(worst, _close(np.asarray(getattr(d, name))[:n], value, f'{label}: {name}'))
  nc = md.ncon
  con = md.contact
  np.testing.assert_array_equal(np.asarray(d.contact.efc_address[:nc]),
                                [con[i].efc_address for i in range(nc)], err_msg=label)
  np.testing.assert_array_equal(np.asarray(d.contact.exclude[:nc]),
                                [con[i].exclude for i in range(nc)], err_msg=label)
  worst = max(worst, _close(np.asarray(d.contact.mu[:nc]), np.array([con[i].mu for i in
                                                                     range(nc)]), f'{label}: mu'))
  _check_unused(d, n)
  return worst


def _world(batch, k):
  return jax.tree_util.tree_map(lambda x: x[k], batch)


# label, model (path or XML), option, qpos scales (the contacts are MuJoCo's in every case)
MIXED = (0.3, 1.5, 0.5, 1.0, 0.2)
CASES = [
    ('equality', EQUALITY, DENSE, 0.3),
    ('joints_sparse_norefsafe', JOINTS, NOREFSAFE, MIXED),
    ('tendons', TENDONS, DENSE, 0.5),
    ('rows', ROWS, DENSE, MIXED),
    ('rows_friction_only', ROWS, FLAGS, 1.0),
    ('contacts_pyramidal', CONTACTS, DENSE, 0.02),
    ('contacts_elliptic_sparse_norefsafe', CONTACTS, SPARSE, 0.02),
    ('scene_pyramidal_condim46', None, DENSE, 0.02),
    ('scene_elliptic', SCENE, '<option jacobian="dense" cone="elliptic" impratio="3"/>', 0.02),
]


# the cases whose states have more contacts than the stage's contact bucket (every other case's
# states fit it)
CONTACT_CASES = ('contacts_pyramidal', 'contacts_elliptic_sparse_norefsafe',
                 'scene_pyramidal_condim46', 'scene_elliptic')


# the cases whose batch of states fits the largest row bucket (reference_constraint's J qvel
# then runs over the bucket's rows)
BUCKET_FITS = ('equality', 'joints_sparse_norefsafe', 'tendons', 'rows')


@pytest.mark.parametrize('label,path,option,scale', CASES, ids=[c[0] for c in CASES])
def test_rows_match_mujoco(label, path, option, scale):
  m, mj = _models(with_option(_scene_condims() if path is None else read(path), option))
  mds, batch = _states(m, mj, NSTATE, scale, seed=11)
  bucket = constraint.row_bucket(constraint.model_row_buckets(m), m.nefc_max)
  assert (bucket < m.nefc_max and max(md.nefc for md in mds) <= bucket) == (label in BUCKET_FITS)
  # the stage's contact bucket: the states with few contacts take it, the contact models' (8 to
  # 23 contacts) the stage over every slot (see test_contact_bucket_equals_every_slot)
  k = constraint.contact_bucket(m)
  assert (max(md.ncon for md in mds) <= k) == (label not in CONTACT_CASES), (label, k)
  t0 = time.perf_counter()
  out = _host(_batch_rows(m, batch))
  t1 = time.perf_counter()
  jax.block_until_ready(_batch_rows(m, batch))
  t2 = time.perf_counter()
  worst, rows = 0.0, 0
  for k, md in enumerate(mds):
    d = _world(out, k)
    worst = max(worst, _compare(d, mj, md, f'{label} state {k}'))
    assert int(d.nefc) <= m.nefc_max
    rows += md.nefc
  assert rows > 2 * NSTATE            # the states make rows
  print(f'{label}: {rows} rows in {NSTATE} states, max relative error {worst:.2e}; nefc_max '
        f'{m.nefc_max}, compile + run {t1 - t0:.2f} s, run {(t2 - t1) * 1e3:.2f} ms')
  if option == FLAGS:
    assert m.nefc_max == 14 and all(md.nefc == md.nf for md in mds)


_batch_every_slot = jax.jit(jax.vmap(constraint._make_constraint, in_axes=(None, 0)))


@pytest.mark.parametrize('label,xml', [
    ('scene_pyramidal_condim46', lambda: with_option(_scene_condims(), DENSE)),
    ('contacts_elliptic_sparse', lambda: with_option(read(CONTACTS), SPARSE))])
def test_contact_bucket_equals_every_slot(label, xml):
  """make_constraint works on the first contact_bucket(m) = k contact slots while no world of
  the batch has more contacts (a lax.cond on batch_any(ncon > k)). With a contact buffer four
  times the default (k >= 23; these states have 8 to 23 contacts a world, more than the default
  buffer's bucket) every world fits, and the rows and contact fields equal the stage over
  every slot (constraint._make_constraint) bit for bit, and MuJoCo's. At the default buffer
  these states take the stage over every slot (test_rows_match_mujoco)."""
  xml = xml()
  mj = mujoco.MjModel.from_xml_string(xml)
  default = mjx_py.from_xml_string(xml)
  m = mjx_py.from_xml_string(xml, nconmax=4 * default.nconmax)
  mds, batch = _states(m, mj, NSTATE, 0.02, seed=11)
  k = constraint.contact_bucket(m)
  assert constraint.contact_bucket(default) < max(md.ncon for md in mds) <= k < m.nconmax, k
  ours, every = _host(_batch_rows(m, batch)), _host(_batch_every_slot(m, batch))
  for path, a, b in zip(jax.tree_util.tree_leaves_with_path(ours), jax.tree_util.tree_leaves(ours),
                        jax.tree_util.tree_leaves(every)):
    np.testing.assert_array_equal(a, b, err_msg=f'{label}: {jax.tree_util.keystr(path[0])}')
  for i, md in enumerate(mds):
    _compare(_world(ours, i), mj, md, f'{label} state {i}')


def _count_conds(jaxpr) -> int:
  """The lax.cond equations of a jaxpr, its sub-jaxprs' (loops, conds, custom rules) included."""
  from jax.extend import core as jcore
  n = 0
  for eqn in jaxpr.eqns:
    n += eqn.primitive.name == 'cond'
    for value in eqn.params.values():
      for sub in value if isinstance(value, (tuple, list)) else (value,):
        if isinstance(sub, (jcore.ClosedJaxpr, jcore.Jaxpr)):
          n += _count_conds(getattr(sub, 'jaxpr', sub))
  return n


def test_contact_bucket_differentiated_over_every_slot():
  """Differentiated, make_constraint is the stage over every slot (a custom JVP): its reverse
  derivative's program holds no copy of the contact bucket's lax.cond (as many conds as the
  stage over every slot's), and equals that stage's derivative bit for bit, its value the
  bucket's. The states (the buffer four times the default, as above) take the bucket."""
  xml = with_option(read(CONTACTS), DENSE)
  mj = mujoco.MjModel.from_xml_string(xml)
  m = mjx_py.from_xml_string(xml, nconmax=4 * mjx_py.from_xml_string(xml).nconmax)
  _, batch = _states(m, mj, 1, 0.02, seed=11)
  d = jax.tree_util.tree_map(jnp.asarray, _world(batch, 0))
  assert 0 < int(d.ncon) <= constraint.contact_bucket(m)

  def rows(stage, mass, qvel):
    # efc_J, efc_aref and efc_R as functions of the bodies' masses (efc_R) and qvel (aref)
    out = stage(dataclasses.replace(m, body_mass=mass), dataclasses.replace(d, qvel=qvel))
    return out.efc_J, out.efc_aref, out.efc_R

  args = (m.body_mass, d.qvel + 0.1)
  results = {}
  for name, stage in (('bucket', constraint.make_constraint),
                      ('every', constraint._make_constraint)):
    fn = functools.partial(rows, stage)

    def value_and_vjp(*a, fn=fn):
      value, back = jax.vjp(fn, *a)
      return value, back(jax.tree_util.tree_map(jnp.ones_like, value))
    conds = _count_conds(jax.make_jaxpr(value_and_vjp)(*args).jaxpr)
    results[name] = (_host(jax.jit(value_and_vjp)(*args)), conds)
  assert results['bucket'][1] == results['every'][1]
  for a, b in zip(jax.tree_util.tree_leaves(results['bucket'][0]),
                  jax.tree_util.tree_leaves(results['every'][0])):
    np.testing.assert_array_equal(a, b)
  primal = _host(jax.jit(functools.partial(rows, constraint.make_constraint))(*args))
  for a, b in zip(primal, results['bucket'][0][0]):
    np.testing.assert_array_equal(a, b)


def _with_power(m, mj, power):
  """Both Models with the power of every solimp set to ``power`` (ours as jax arrays)."""
  fields = {}
  for name in constraint.ROW_SOLIMP + constraint.CONTACT_SOLIMP:
    x = np.array(getattr(m, name))
    x[..., 4] = power
    fields[name] = jnp.asarray(x)
    getattr(mj, name)[:, 4] = power
  o_solimp = np.array(m.opt.o_solimp)
  o_solimp[4] = mj.opt.o_solimp[4] = power
  opt = dataclasses.replace(m.opt, o_solimp=jnp.asarray(o_solimp))
  return dataclasses.replace(m, opt=opt, **fields), mj


@pytest.mark.parametrize('power', [1.0, 2.0])
def test_static_solimp_power(power):
  """A Model closed over by jit (concrete) whose every solimp power is 1 (or 2) gives the
  impedance that power as a Python number (constraint._static_power): its rows (limits,
  friction loss, contacts with mixed solimp) equal MuJoCo's and the traced Model's (the array
  power; the impedance to the last bit); other powers or mixed ones, or a traced Model, keep
  the array."""
  for path in (ROWS, CONTACTS):
    m, mj = _with_power(*_models(with_option(read(path), DENSE)), power)
    assert constraint._static_power(m, constraint.ROW_SOLIMP) == power
    assert constraint._static_power(m, constraint.CONTACT_SOLIMP, True) == power
    mds, batch = _states(m, mj, NSTATE, 0.02 if path == CONTACTS else MIXED, seed=5)
    closed = _host(jax.jit(jax.vmap(lambda d, m=m: constraint.make_constraint(m, d)))(batch))
    traced = _host(_batch_rows(m, batch))
    for k, md in enumerate(mds):
      _compare(_world(closed, k), mj, md, f'{os.path.basename(path)} power {power} state {k}')
    for name in ('efc_type', 'efc_id'):
      np.testing.assert_array_equal(getattr(closed, name), getattr(traced, name), err_msg=name)
    for name in FIELDS:   # (closed over, XLA folds the Model's constants: last-bit changes)
      np.testing.assert_allclose(getattr(closed, name), getattr(traced, name), rtol=1e-13,
                                 atol=1e-13, err_msg=name)
  # the impedance itself: the static power gives the array power's values to the last bit
  rng = np.random.default_rng(3)
  imp = np.column_stack([rng.uniform(0.01, 0.99, (200, 2)), rng.uniform(0, 0.02, 200),
                         rng.uniform(0.01, 0.99, 200), np.full(200, power)])
  imp[:20, 1] = imp[:20, 0]                                 # flat
  pos, margin = rng.uniform(-0.03, 0.03, 200), rng.uniform(0, 0.01, 200)
  clean = constraint._clean_solimp(jnp.asarray(imp))
  for a, b in zip(constraint.impedance(clean, pos, margin),
                  constraint.impedance(clean, pos, margin, power)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  m, _ = _models(read(ROWS))
  assert constraint._static_power(m, constraint.ROW_SOLIMP) is None     # powers 1, 2, 2.5, 3
  m2, _ = _with_power(m, mujoco.MjModel.from_xml_string(read(ROWS)), 2.0)
  mixed = dataclasses.replace(m2, geom_solimp=m2.geom_solimp.at[0, 4].set(1.0))
  assert constraint._static_power(mixed, constraint.CONTACT_SOLIMP) is None
  assert constraint._static_power(mixed, constraint.ROW_SOLIMP) == 2.0
  override = dataclasses.replace(m2, opt=dataclasses.replace(
      m2.opt, o_solimp=jnp.array([0.9, 0.95, 0.001, 0.5, 3.0])))
  assert constraint._static_power(override, constraint.CONTACT_SOLIMP, True) is None
  assert jax.jit(lambda m: constraint._static_power(m, constraint.ROW_SOLIMP) is None)(m2)


def test_models_make_every_kind_of_row():
  """The test models' states cover what they are meant to (guards against silent model edits)."""
  m, mj = _models(with_option(read(ROWS), DENSE))
  mds, _ = _states(m, mj, NSTATE, 1.5, seed=11)
  eq_types = {mj.eq_type[md.efc_id[i]] for md in mds for i in range(md.ne)}
  assert eq_types == {0, 1, 2, 3}                                   # connect, weld, joint, tendon
  types = {t for md in mds for t in md.efc_type}
  assert types == {0, 1, 2, 3, 4, 6}                                # and pyramidal contacts
  ball = [md.efc_id[i] for md in mds for i in range(md.nefc)
          if md.efc_type[i] == 3 and mj.jnt_type[md.efc_id[i]] == 1]
  assert len(set(ball)) == 2                                        # both ball joints
  narrow = mujoco.mj_name2id(mj, mujoco.mjtObj.mjOBJ_JOINT, 'narrow')
  assert any(list(md.efc_id[md.efc_type == 3]).count(narrow) == 2 for md in mds)  # both sides
  m, mj = _models(with_option(read(CONTACTS), DENSE))
  mds, _ = _states(m, mj, 1, 0.0, seed=0)
  con = mds[0].contact
  assert {int(c) for c in con.dim} == {1, 3, 4, 6} and 1 in con.exclude
  assert {int(t) for t in mds[0].efc_type} == {5, 6}
  _, mj = _models(_scene_condims())
  md = _mj_forward(mj, random_state(mj, np.random.default_rng(0), qpos_scale=0.0,
                                    qvel_scale=0.0), mj.eq_active0)
  assert {int(c.dim) for c in md.contact[:md.ncon]} == {4, 6}


# spheres on a plane (one narrowphase routine: compiles fast) with condim 1, 3, 4 and 6, a
# margin/gap sphere inside its gap and one paired with the floor with solreffriction
SPHERES = """
<mujoco>
  <option impratio="1.5" cone="elliptic" jacobian="dense"/>
  <worldbody>
    <geom name="floor" type="plane" size="2 2 0.1"/>
    <body pos="0 0 0.048"><freejoint/>
      <geom type="sphere" size="0.05" condim="1" priority="1"/>
    </body>
    <body pos="0.2 0 0.049"><freejoint/><geom type="sphere" size="0.05"/></body>
    <body pos="0.4 0 0.047"><freejoint/>
      <geom type="sphere" size="0.05" condim="4" friction="1 0.02 0.001" solref="-5000 -50"/>
    </body>
    <body pos="0.6 0 0.048"><freejoint/>
      <geom type="sphere" size="0.05" condim="6" friction="1 0.02 0.001"/>
    </body>
    <body pos="0.8 0 0.057"><freejoint/>
      <geom type="sphere" size="0.05" margin="0.01" gap="0.006"/>
    </body>
    <body pos="1 0 0.046"><freejoint/><geom name="paired" type="sphere" size="0.05"/></body>
  </worldbody>
  <contact>
    <pair geom1="paired" geom2="floor" condim="3" friction="0.6 0.4" solreffriction="0.03 0.7"/>
  </contact>
</mujoco>
"""


def test_with_our_collision():
  """Our collision stage (on MuJoCo's kinematics, whose parity the kinematics tests check)
  feeding the rows: MuJoCo's rows per contact (contacts matched by geom pair and position, as in
  the collision tests, which find them equal to ~1e-9: hence the looser tolerance)."""
  m, mj = _models(SPHERES)
  mds, batch = _states(m, mj, NSTATE, 0.004, seed=5, contacts=False)
  out = _host(_batch_rows_collision(m, batch))
  kinds = set()
  for k, md in enumerate(mds):
    d = _world(out, k)
    label = f'state {k}'
    assert int(d.nefc) == md.nefc and int(d.ncon) == md.ncon, label
    theirs = _theirs(mj, md)
    geom = np.asarray(d.contact.geom[:md.ncon])
    pos = np.asarray(d.contact.pos[:md.ncon])
    used = np.zeros(md.ncon, bool)
    for i in range(md.ncon):
      c = md.contact[i]
      same = np.flatnonzero(np.all(geom == c.geom, axis=1) & ~used)
      j = same[np.argmin(np.linalg.norm(pos[same] - c.pos, axis=1))]
      used[j] = True
      a, b = int(d.contact.efc_address[j]), c.efc_address
      assert (a < 0) == (b < 0), f'{label}: contact {i}'
      kinds.add((int(c.dim), b < 0))
      if b < 0:
        continue
      nrow = int(np.sum(md.efc_id == i))
      assert np.all(np.asarray(d.efc_id[a:a + nrow]) == j)
      np.testing.assert_array_equal(np.asarray(d.efc_type[a:a + nrow]), md.efc_type[b:b + nrow])
      for name, value in theirs.items():
        np.testing.assert_allclose(np.asarray(getattr(d, name))[a:a + nrow], value[b:b + nrow],
                                   rtol=1e-6, atol=1e-6, err_msg=f'{label}: contact {i} {name}')
      np.testing.assert_allclose(d.contact.mu[j], c.mu, rtol=1e-9)
    _check_unused(d, int(d.nefc))
  assert {(1, False), (3, False), (4, False), (6, False), (3, True)} <= kinds


def test_capacity_and_disable_flags():
  """nefc_max counts every row a model can make at once, for the parts the flags leave on; the
  flags switch the parts off as in MuJoCo."""
  xml = read(ROWS)
  m = mjx_py.from_xml_string(xml)
  # equality 6 + 6 + 6 + 3 + 1 + 1 + 1 + 1 + 1 = 26; friction loss: free 6, ball 3, hinges and
  # slide 3, tendons 2 = 14; limits: balls 1 + 1, hinges and slides 2 x 4, tendons 2 x 2 = 14;
  # contacts: condim 6, pyramidal: 10 rows per contact slot
  assert m.efc_rows == (26, 14, 14, 10) and m.nefc_max == 54 + 10 * m.nconmax
  assert m.efc_friction == ((12, 13, 14, 15, 16, 17, 18, 19, 20, 24, 25, 27), (0, 2))
  assert m.efc_limit == ((3, 4, 5, 6, 7, 8), (0, 2))
  d = mjx_py.make_data(m)
  assert d.efc_J.shape == (m.nefc_max, m.nv) and d.efc_KBIP.shape == (m.nefc_max, 4)
  assert np.all(np.asarray(d.efc_type) == -1) and int(d.nefc) == 0
  # the flags (their parity with MuJoCo: test_rows_match_mujoco[rows_friction_only])
  con = 10 * m.nconmax
  cases = [('equality="disable" limit="disable"', 14 + con), ('frictionloss="disable"', 40 + con),
           ('contact="disable"', 54), ('constraint="disable"', 0)]
  for flags, cap in cases:
    assert mjx_py.from_xml_string(with_option(xml, f'<option><flag {flags}/></option>')
                                  ).nefc_max == cap, flags
  # constraint disabled: nothing, as in MuJoCo
  m, mj = _models(with_option(xml, '<option><flag constraint="disable"/></option>'))
  mds, batch = _states(m, mj, 2, 1.0, seed=3)
  out = _host(_batch_rows(m, batch))
  for k, md in enumerate(mds):
    assert md.nefc == 0
    _compare(_world(out, k), mj, md, 'constraint disabled')
  # contacts: nconmax slots x rows of the largest condim (6: pyramidal 10, elliptic 6)
  m = mjx_py.from_xml_string(read(CONTACTS))
  assert m.efc_rows == (0, 0, 0, 10) and m.nefc_max == 10 * m.nconmax
  m = mjx_py.from_xml_string(with_option(read(CONTACTS), ELLIPTIC))
  assert m.nefc_max == 6 * m.nconmax
  m = mjx_py.from_xml_string(with_option(read(CONTACTS), '<option><flag contact="disable"/>'
                                                      '</option>'))
  assert m.nefc_max == 0
  # options edited after put_model so that more rows can appear: the buffers keep their size
  # (a world whose rows do not fit gets none and counts mjWARN_CNSTRFULL: tests/test_check.py)
  m = mjx_py.from_xml_string(with_option(xml, '<option><flag limit="disable"/></option>'))
  bad = dataclasses.replace(m, opt=dataclasses.replace(m.opt, disableflags=0))
  assert constraint.rows_needed(bad) == m.nefc_max + 14
  out = jax.eval_shape(constraint.make_constraint, bad, mjx_py.make_data(bad))
  assert out.efc_J.shape == (m.nefc_max, m.nv)


# the stage's float inputs that reach its singular points (the others enter linearly)
GRAD_INPUTS = ('qpos', 'qvel', 'xpos', 'xquat', 'ten_length')
CONTACT_GRAD = ('dist', 'includemargin', 'friction')


def _loss(m, x, base):
  """A smooth function of the stage's inputs x through every row quantity (aref depends on J,
  pos, margin, K, B and imp; R on diagApprox and imp)."""
  contact = dataclasses.replace(base.contact, **x['contact'])
  d = dataclasses.replace(base, contact=contact, **{k: v for k, v in x.items() if k != 'contact'})
  d = constraint.make_constraint(m, d)
  return 1e-3 * jnp.sum(d.efc_aref) + jnp.sum(jnp.log1p(d.efc_R)) + jnp.sum(d.contact.mu)


_grad = jax.jit(jax.grad(_loss, argnums=1))


def test_gradients_finite_float32():
  """Finite float32 gradients at singular points: at qpos0 the weld to the world has a zero
  residual and the ball joints a zero angle; a hinge sits exactly on its limit and another
  exactly at its margin (its row is off); two elliptic contacts (condim 3 and 6) and unused
  contact slots."""
  with jax.enable_x64(False):
    m, mj = _models(with_option(read(ROWS), ELLIPTIC))
    qpos = np.array(mj.qpos0)
    for name, side in (('hinge1', 1), ('narrow', 0)):
      j = mujoco.mj_name2id(mj, mujoco.mjtObj.mjOBJ_JOINT, name)
      qpos[mj.jnt_qposadr[j]] = mj.jnt_range[j, side] + (0.2 if side == 0 else 0.0)
    md = _mj_forward(mj, oracle.State(qpos=qpos, qvel=np.ones(mj.nv)), mj.eq_active0)
    assert sorted(int(c.dim) for c in md.contact[:md.ncon]) == [3, 6]
    base = _world_data(m, mj, md)
    x = {k: getattr(base, k) for k in GRAD_INPUTS}
    x['contact'] = {k: getattr(base.contact, k) for k in CONTACT_GRAD}
    g = _grad(m, x, base)
    for name, value in jax.tree_util.tree_leaves_with_path(g):
      assert value.dtype == jnp.float32
      assert np.all(np.isfinite(np.asarray(value))), name
    assert np.any(np.asarray(g['qvel']) != 0) and np.any(np.asarray(g['xquat']) != 0)
    assert np.any(np.asarray(g['contact']['dist']) != 0)
