"""Sensors (mjx_py.sensor) against mj_forward / mj_step, in float64.

Every built-in sensor type appears in the test models: tests/models/sensors_all.xml (every type,
constraints disabled here), sensor_frames.xml (frame sensors over every objtype / reftype pair,
site sensors, subtree sensors, cutoffs that clip, the energy flag), sensor_collision.xml
(distance / normal / fromto over every geom type pair with a distance routine),
sensor_rangefinder.xml (rangefinders against every geom type, tested in tests/test_ray.py) and
sensor_contacts.xml (touch, force, torque, accelerometer and limit sensors on resting and
sliding contacts and active limits). Random states (qpos, qvel, ctrl, act, time, applied forces)
go through one jitted pipeline per model; each sensor's block must match MuJoCo within 1e-8
relative (and 1e-9 absolute).

sensor_contacts runs twice: the sensor stages alone on MuJoCo's pipeline state (its contacts,
efc rows, qacc and efc_force; pyramidal and elliptic cones), and our whole forward pass with our
solver along a MuJoCo rollout, with jax.grad through the constraint-force sensors.
Gradients: jax.grad of a loss on sensordata with respect to qpos and qvel is finite for every
sensor of sensors_all, and its directional derivative agrees with central differences. Also:
RK4 steps, the sensor disable flag, a traced Model, user / plugin sensors refused.
"""

from __future__ import annotations

import dataclasses
import os

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import oracle
import pytest
from oracle import ROOT

import mjx_py
from mjx_py import model as model_module
from mjx_py import sensor
from mjx_py.forward import forward as forward_fn
from mjx_py.forward import step

MODELS = os.path.join(ROOT, 'tests', 'models')
RTOL, ATOL = 1e-8, 1e-9
NSTATE = 4
DSBL_CONSTRAINT = '<option><flag constraint="disable"/></option>'


@pytest.fixture(autouse=True, scope='module')
def _float64():
  """float64 for this module only (the global flag would leak into later test modules)."""
  previous = jax.config.jax_enable_x64
  jax.config.update('jax_enable_x64', True)
  yield
  jax.config.update('jax_enable_x64', previous)


def _xml(name, option=''):
  return oracle.with_option(oracle.read(os.path.join(MODELS, name)), option)


def _states(mj, rng, n=NSTATE):
  """n random states with applied forces, as (oracle.State, qfrc_applied, xfrc_applied)."""
  out = []
  for _ in range(n):
    state = oracle.random_state(mj, rng, qvel_scale=1.0, ctrl_frac=(-0.2, 1.2),
                                act_range=(0.0, 1.0), time_range=(0.0, 3.0))
    qfrc = rng.standard_normal(mj.nv)
    xfrc = np.zeros((mj.nbody, 6))
    xfrc[1:] = rng.standard_normal((mj.nbody - 1, 6))
    out.append((state, qfrc, xfrc))
  return out


def _reference(mj, states):
  """MuJoCo's sensordata and energy after mj_forward at each state."""
  md = mujoco.MjData(mj)
  sdata, energy = [], []
  for state, qfrc, xfrc in states:
    oracle.write_state(md, state)
    md.qfrc_applied[:] = qfrc
    md.xfrc_applied[:] = xfrc
    mujoco.mj_forward(mj, md)
    sdata.append(md.sensordata.copy())
    energy.append(md.energy.copy())
  return np.array(sdata), np.array(energy)


def _batch(m, states):
  """Our Data for each state, stacked on a leading axis."""
  ds = [oracle.make_data(m, **s.fields(), qfrc_applied=q, xfrc_applied=x) for s, q, x in states]
  return jax.tree_util.tree_map(lambda *x: jnp.stack(x), *ds)


def _compare(mj, ours, ref, label):
  """Each sensor's block of sensordata (nstate, nsensordata) against MuJoCo's."""
  for i in range(mj.nsensor):
    adr, dim = mj.sensor_adr[i], mj.sensor_dim[i]
    kind = mujoco.mjtSensor(mj.sensor_type[i]).name
    np.testing.assert_allclose(ours[:, adr:adr + dim], ref[:, adr:adr + dim], rtol=RTOL,
                               atol=ATOL, err_msg=f'{label}: sensor {mj.sensor(i).name} ({kind})')


def _blocks(mj, names):
  """sensordata indices of the named sensors."""
  return np.concatenate([mj.sensor_adr[mj.sensor(n).id] + np.arange(mj.sensor_dim[mj.sensor(n).id])
                         for n in names])


# ---------------------------------------------------------------------------------------------
# Parity with mj_forward

# tendons_spatial: hinges and slides only (tree.scalar_joints), joint and tendon springs with
# springrefs, and the energy flag turned on: the scalar-joint spring energy
PARITY = [('sensor_frames.xml', ''),
          ('tendons_spatial.xml', '<option><flag energy="enable"/></option>')]


def test_every_builtin_type_is_tested():
  types = set()
  for name in ['sensors_all.xml', 'sensor_contacts.xml', 'sensor_rangefinder.xml',
               'sensor_collision.xml'] + [p[0] for p in PARITY]:
    types |= set(mujoco.MjModel.from_xml_path(os.path.join(MODELS, name)).sensor_type.tolist())
  builtin = {int(v) for k, v in mujoco.mjtSensor.__members__.items()
             if k not in ('mjSENS_USER', 'mjSENS_PLUGIN')}
  assert builtin <= types, sorted(builtin - types)


@pytest.mark.parametrize('name,option', PARITY, ids=[p[0] for p in PARITY])
def test_sensors_match_mj_forward(name, option):
  if option:
    xml = _xml(name, option)
    m, mj = mjx_py.from_xml_string(xml), mujoco.MjModel.from_xml_string(xml)
  else:
    m, mj = oracle.both(path=os.path.join(MODELS, name))
  rng = np.random.default_rng(1)
  states = _states(mj, rng)
  ref, energy = _reference(mj, states)
  run = jax.jit(jax.vmap(lambda d: (lambda o: (o.sensordata, o.energy))(forward_fn(m, d))))
  sdata, edata = run(_batch(m, states))
  _compare(mj, np.asarray(sdata), ref, name)
  np.testing.assert_allclose(np.asarray(edata), energy, rtol=RTOL, atol=ATOL)
  if name == 'sensor_frames.xml':
    # the cutoffs of vel_cut (real) and clock really clip in these states
    for sname, cut in (('vel_cut', 0.2), ('clock', 0.5)):
      block = ref[:, _blocks(mj, [sname])]
      assert np.any(np.abs(block) == cut), sname


def _sensor_geoms(mj, kind, ident):
  if kind == mujoco.mjtObj.mjOBJ_BODY:
    return range(mj.body_geomadr[ident], mj.body_geomadr[ident] + mj.body_geomnum[ident])
  return [ident]


def _mujoco_distance(mj, md, i):
  """mj_geomDistance of collision sensor i (the nearest of its pairs, cutoff if none)."""
  cut = mj.sensor_cutoff[i]
  dist = cut
  for g1 in _sensor_geoms(mj, mj.sensor_objtype[i], mj.sensor_objid[i]):
    for g2 in _sensor_geoms(mj, mj.sensor_reftype[i], mj.sensor_refid[i]):
      dist = min(dist, mujoco.mj_geomDistance(mj, md, g1, g2, cut, None))
  return dist


def test_collision_sensors_match_mj_forward():
  """distance / normal / fromto on every pair type. Distances match within 1e-8 relative. The
  segments of pairs found by GJK on curved shapes (ellipsoids, cylinders) match to 1e-7, their
  normals to 1e-4 (GJK stops within ccd_tolerance, so the last bits of its arithmetic move the
  witness points). GJK's convergence test is an exact comparison on discrete shapes (boxes,
  meshes): when rounding makes MuJoCo take one more step, its final simplex is degenerate and
  its segment is no longer as long as its own distance; such rounding-decided cases are
  counted, not failed, when ours has the length of MuJoCo's distance (and must stay rare)."""
  m, mj = oracle.both(path=os.path.join(MODELS, 'sensor_collision.xml'))
  rng = np.random.default_rng(1)
  states = _states(mj, rng, 16)
  ref, _ = _reference(mj, states)
  run = jax.jit(jax.vmap(lambda d: forward_fn(m, d).sensordata))
  ours = np.asarray(run(_batch(m, states)))
  sensor_rows, groups = sensor.distance_plan(m)
  gjk = {sensor_rows[r] for t1, t2, rows, *_ in groups if sensor._uses_ccd(m, (t1, t2))
         for r in rows}
  md = mujoco.MjData(mj)
  rounding = []
  for i in range(mj.nsensor):
    adr, dim = mj.sensor_adr[i], mj.sensor_dim[i]
    kind = mj.sensor_type[i]
    label = f'sensor {mj.sensor(i).name}'
    if i not in gjk or kind == mujoco.mjtSensor.mjSENS_GEOMDIST:
      np.testing.assert_allclose(ours[:, adr:adr + dim], ref[:, adr:adr + dim], rtol=RTOL,
                                 atol=ATOL, err_msg=label)
      continue
    atol = 1e-4 if kind == mujoco.mjtSensor.mjSENS_GEOMNORMAL else 1e-7
    for k, (state, _, _) in enumerate(states):
      a, b = ours[k, adr:adr + dim], ref[k, adr:adr + dim]
      if np.allclose(a, b, rtol=1e-6, atol=atol):
        continue
      # a rounding-decided final GJK step: ours must have MuJoCo's distance as its length
      assert kind == mujoco.mjtSensor.mjSENS_GEOMFROMTO, (label, k, a, b)
      oracle.write_state(md, state)
      mujoco.mj_forward(mj, md)
      dist = _mujoco_distance(mj, md, i)
      np.testing.assert_allclose(np.linalg.norm(a[3:] - a[:3]), abs(dist), rtol=1e-8,
                                 err_msg=f'{label} state {k}')
      rounding.append((mj.sensor(i).name, k))
  assert len(rounding) <= 2, rounding
  # the states reach contact and separation, within and beyond the cutoffs
  dist = ref[:, _blocks(mj, ['d_plane_sphere', 'd_box_ellipsoid', 'd_cylinder_box'])]
  assert np.any(dist < 1) and np.any(dist == 1)


def _sensors_all():
  xml = _xml('sensors_all.xml', DSBL_CONSTRAINT)
  return mjx_py.from_xml_string(xml), mujoco.MjModel.from_xml_string(xml)


def test_sensors_all_values_and_gradients():
  """sensors_all.xml (constraints disabled): every sensor against mj_forward, and jax.grad of
  a weighted square loss on sensordata with respect to qpos and qvel, from one compiled
  function run at random states and at their neighbours +-h along random directions: the
  gradient is finite (every sensor type takes part) and its directional derivative matches
  the central difference of the loss."""
  m, mj = _sensors_all()
  rng = np.random.default_rng(2)
  states = _states(mj, rng)
  ref, energy = _reference(mj, states)
  weights = jnp.asarray(rng.uniform(0.5, 1.5, m.nsensordata))

  def loss(qpos, qvel, d):
    out = forward_fn(m, oracle.replace(d, qpos=qpos, qvel=qvel))
    return jnp.sum(weights * out.sensordata ** 2), (out.sensordata, out.energy)

  grad = jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True))
  h, nfd = 1e-6, 2
  dq, dv = rng.standard_normal((nfd, mj.nq)), rng.standard_normal((nfd, mj.nv))
  batch = _batch(m, states)
  runs = [(k, batch.qpos[k], batch.qvel[k]) for k in range(NSTATE)]
  runs += [(k, batch.qpos[k] + s * h * dq[k], batch.qvel[k] + s * h * dv[k])
           for s in (1, -1) for k in range(nfd)]
  results = [grad(q, v, jax.tree_util.tree_map(lambda x, k=k: x[k], batch)) for k, q, v in runs]
  (value, (sdata, edata)), (gq, gv) = jax.tree_util.tree_map(lambda *x: jnp.stack(x),
                                                              *results)

  _compare(mj, np.asarray(sdata[:NSTATE]), ref, 'sensors_all')
  np.testing.assert_allclose(np.asarray(edata[:NSTATE]), energy, rtol=RTOL, atol=ATOL)
  gq, gv, value = np.asarray(gq), np.asarray(gv), np.asarray(value)
  assert np.all(np.isfinite(gq)) and np.all(np.isfinite(gv))
  fd = (value[NSTATE:NSTATE + nfd] - value[NSTATE + nfd:]) / (2 * h)
  directional = np.sum(gq[:nfd] * dq, axis=1) + np.sum(gv[:nfd] * dv, axis=1)
  np.testing.assert_allclose(directional, fd, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# Constraint forces: MuJoCo's injected, then our solver's

def _pad(x, n, fill=0):
  x = np.asarray(x)
  out = np.full((n,) + x.shape[1:], fill, x.dtype)
  out[:len(x)] = x
  return out


# Data fields the sensor stages read, copied from MuJoCo for the constraint-force test
_UPSTREAM = ('qpos', 'qvel', 'qacc', 'ctrl', 'xpos', 'xquat', 'xmat', 'xipos', 'ximat',
             'geom_xpos', 'geom_xmat', 'site_xpos', 'site_xmat', 'subtree_com', 'cinert', 'cdof',
             'cvel', 'cdof_dot', 'ten_length', 'ten_velocity', 'actuator_length',
             'actuator_velocity', 'actuator_force', 'qfrc_actuator')


def _inject(m, mj, md):
  """Our Data holding MuJoCo's pipeline state: the fields the sensor stages read, the contacts,
  the efc rows; and MuJoCo's efc_force, in our buffers' shapes."""
  nc, ne, ncon = m.nconmax, m.nefc_max, md.ncon
  con = md.contact
  contact = dict(
      pos=_pad(con.pos[:ncon], nc), frame=_pad(con.frame[:ncon], nc),
      dim=_pad(con.dim[:ncon], nc).astype(np.int32),
      friction=_pad(con.friction[:ncon], nc),
      geom1=_pad(con.geom1[:ncon], nc, -1).astype(np.int32),
      geom2=_pad(con.geom2[:ncon], nc, -1).astype(np.int32),
      efc_address=_pad(con.efc_address[:ncon], nc, -1).astype(np.int32))
  d = oracle.make_data(
      m, **{f: getattr(md, f).copy() for f in _UPSTREAM}, qM=oracle.dense_qM(mj, md),
      nefc=np.int32(md.nefc), ne=np.int32(md.ne), nf=np.int32(md.nf),
      efc_type=_pad(md.efc_type, ne, -1).astype(np.int32),
      efc_id=_pad(md.efc_id, ne, -1).astype(np.int32), efc_pos=_pad(md.efc_pos, ne),
      efc_margin=_pad(md.efc_margin, ne), efc_vel=_pad(md.efc_vel, ne),
      ncon=np.int32(ncon))
  d = dataclasses.replace(d, contact=dataclasses.replace(
      d.contact, **{k: jnp.asarray(v) for k, v in contact.items()}))
  return d, jnp.asarray(_pad(md.efc_force, ne))


@pytest.mark.parametrize('cone', ['pyramidal', 'elliptic'])
def test_constraint_force_sensors_with_mujoco_forces(cone):
  """touch, force, torque, accelerometer, frame accelerations and the limit sensors, plus
  cacc / cfrc_ext / cfrc_int, with MuJoCo's pipeline state, contacts, efc rows, efc_force and
  qacc (the three sensor stages alone)."""
  m, mj = oracle.both(_xml('sensor_contacts.xml', f'<option cone="{cone}"/>'))
  md = mujoco.MjData(mj)

  def stages(d, efc_force):
    d = sensor.sensor_vel(m, sensor.sensor_pos(m, d))
    return sensor.sensor_acc(m, d, efc_force)

  run = jax.jit(stages)
  rng = np.random.default_rng(3)
  hinge, extend = mj.jnt_qposadr[mj.joint('hinge').id], mj.jnt_qposadr[mj.joint('extend').id]
  for limits in ((0.0, 0.0), (0.54, 0.06), (-0.36, -0.06)):
    md.qpos[:] = mj.qpos0
    md.qpos[hinge], md.qpos[extend] = limits
    md.qvel[:] = 0.05 * rng.standard_normal(mj.nv)
    md.qvel[mj.jnt_dofadr[mj.joint(1).id]] = 1.0            # the slider slides along x
    md.ctrl[:] = rng.uniform(-2, 2, mj.nu)
    mujoco.mj_forward(mj, md)
    d = run(*_inject(m, mj, md))
    _compare(mj, np.asarray(d.sensordata)[None], md.sensordata[None], f'{cone} {limits}')
    for field in ('cacc', 'cfrc_ext', 'cfrc_int'):
      np.testing.assert_allclose(np.asarray(getattr(d, field)), getattr(md, field), rtol=RTOL,
                                 atol=1e-8, err_msg=field)
    touch = md.sensordata[_blocks(mj, ['touch_box', 'touch_box_top', 'touch_leaner'])]
    assert md.ncon >= 5 and np.all(touch > 0)
    if limits != (0.0, 0.0):
      assert md.sensordata[_blocks(mj, ['lim_tendon_frc'])][0] > 0


@pytest.mark.parametrize('cone', ['pyramidal', 'elliptic'])
def test_constraint_force_sensors_with_our_solver(cone):
  """The same sensors through our whole forward pass (collision, rows and our constraint
  solver), from states along a MuJoCo rollout in which a box rests and a slider slides on the
  floor (resting and sliding contacts, limits reached). Under the pyramidal cone the pass is
  jax.value_and_grad of a weighted square loss on sensordata with respect to qpos and qvel:
  the gradient through touch, force, torque, accelerometer and the limit-force sensors (the
  solver's implicit derivative) must be finite, and nonzero for the touch sensors."""
  m, mj = oracle.both(_xml('sensor_contacts.xml', f'<option cone="{cone}"/>'))
  md = mujoco.MjData(mj)
  with_grad = cone == 'pyramidal'
  touch_ids = _blocks(mj, ['touch_box', 'touch_box_top', 'touch_leaner'])

  def loss(qpos, qvel, d, weights):
    out = forward_fn(m, oracle.replace(d, qpos=qpos, qvel=qvel))
    return jnp.sum(weights * out.sensordata ** 2), out

  grad = jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True))
  fwd = jax.jit(forward_fn)

  def run(m, d):
    if not with_grad:
      return fwd(m, d)
    weights = np.ones(mj.nsensordata)
    (_, out), (gq, gv) = grad(d.qpos, d.qvel, d, jnp.asarray(weights))
    assert np.all(np.isfinite(gq)) and np.all(np.isfinite(gv))
    # the touch sensors alone: their values move with the box's height and tilt
    weights[:] = 0
    weights[touch_ids] = 1
    _, (gq_touch, _) = grad(d.qpos, d.qvel, d, jnp.asarray(weights))
    assert np.all(np.isfinite(gq_touch)) and np.any(np.abs(gq_touch) > 0)
    return out

  rng = np.random.default_rng(4)
  md.qvel[mj.jnt_dofadr[mj.joint(1).id]] = 1.0                # the slider slides along x
  checked = 0
  for k in range(60):
    md.ctrl[:] = rng.uniform(-2, 2, mj.nu)
    if k % 20 == 19:
      ref = mujoco.MjData(mj)
      ref.qpos[:], ref.qvel[:], ref.ctrl[:] = md.qpos, md.qvel, md.ctrl
      ref.qacc_warmstart[:] = md.qacc_warmstart
      mujoco.mj_forward(mj, ref)
      d = run(m, oracle.make_data(m, qpos=ref.qpos.copy(), qvel=ref.qvel.copy(),
                                  ctrl=ref.ctrl.copy(),
                                  qacc_warmstart=md.qacc_warmstart.copy()))
      _compare(mj, np.asarray(d.sensordata)[None], ref.sensordata[None], f'{cone} {k}')
      touch = ref.sensordata[_blocks(mj, ['touch_box'])]
      assert ref.ncon >= 4 and np.all(touch > 0)
      checked += 1
    mujoco.mj_step(mj, md)
  assert checked == 3


# ---------------------------------------------------------------------------------------------
# Flags, stages, errors

SMALL = """
<mujoco>
  <option timestep="0.005" integrator="{integrator}">
    <flag constraint="disable" energy="enable" {flags}/>
  </option>
  <worldbody>
    <body name="link" pos="0 0 1">
      <joint name="hinge" axis="0 1 0" stiffness="2" damping="0.1"/>
      <geom name="link" type="capsule" fromto="0 0 0 0.3 0 0" size="0.04"/>
      <site name="tip" pos="0.3 0 0" zaxis="0 0 -1"/>
      <body name="slider" pos="0.3 0 0">
        <joint name="slide" type="slide" axis="0 0 1" stiffness="5"/>
        <geom name="ball" type="sphere" size="0.05"/>
      </body>
    </body>
  </worldbody>
  <sensor>
    <framepos name="tip_pos" objtype="site" objname="tip"/>
    <gyro name="gyro" site="tip"/>
    <accelerometer name="acc" site="tip"/>
    <jointpos name="hinge_pos" joint="hinge"/>
    <e_potential name="epot"/>
    <e_kinetic name="ekin"/>
    <clock name="clock"/>
  </sensor>
</mujoco>
"""


def _small(integrator='Euler', flags=''):
  xml = SMALL.format(integrator=integrator, flags=flags)
  return mjx_py.from_xml_string(xml), mujoco.MjModel.from_xml_string(xml)


def test_rk4_step_keeps_mujoco_sensordata_and_energy():
  """After mj_step with RK4, sensordata holds the values of the forward pass at the start of
  the step (the intermediate evaluations skip sensors) and energy those of the last one."""
  m, mj = _small('RK4')
  md = mujoco.MjData(mj)
  rng = np.random.default_rng(4)
  state = oracle.random_state(mj, rng, qvel_scale=1.0, time_range=(0.0, 1.0))
  oracle.write_state(md, state)
  # time as a float64 array (a Python float would give a weakly typed input, and the
  # strongly typed output would recompile the step on the second call)
  d = oracle.make_data(m, **{**state.fields(), 'time': np.float64(state.time)})
  run = jax.jit(lambda d: step(m, d))
  for _ in range(3):
    mujoco.mj_step(mj, md)
    d = run(d)
    np.testing.assert_allclose(np.asarray(d.sensordata), md.sensordata, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(np.asarray(d.energy), md.energy, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(np.asarray(d.qpos), md.qpos, rtol=1e-7, atol=1e-9)


def test_sensor_disable_flag_keeps_sensordata():
  m, mj = _small(flags='sensor="disable"')
  md = mujoco.MjData(mj)
  md.sensordata[:] = 7.0
  md.qvel[:] = 0.5
  mujoco.mj_forward(mj, md)
  d = oracle.make_data(m, sensordata=np.full(m.nsensordata, 7.0), qvel=np.full(m.nv, 0.5))
  out = jax.jit(lambda d: forward_fn(m, d))(d)
  np.testing.assert_array_equal(np.asarray(out.sensordata), md.sensordata)
  np.testing.assert_allclose(np.asarray(out.energy), md.energy, rtol=RTOL)   # the flag stays
  assert np.all(md.sensordata == 7.0)


# sensors evaluated through the generic (traced Model) path, added to SMALL
TRACED_SENSORS = """
    <framequat name="quat_ref" objtype="body" objname="slider" reftype="site" refname="tip"/>
    <framexaxis name="x_ref" objtype="geom" objname="ball" reftype="xbody" refname="link"/>
    <framelinvel name="lv_ref" objtype="site" objname="tip" reftype="body" refname="slider"/>
    <frameangacc name="aa" objtype="xbody" objname="slider"/>
    <velocimeter name="vel" site="tip" cutoff="0.1"/>
    <force name="force" site="tip"/>
    <subtreeangmom name="angmom" body="link"/>
    <jointvel name="slide_vel" joint="slide"/>
"""


@pytest.mark.parametrize('snapshot', [True, False])
def test_traced_model_matches_mujoco(snapshot, monkeypatch):
  """A Model passed as a traced jit argument: with put_model's snapshot of the sensor index
  fields, the stages select sensors and addresses on the host as for a closed-over Model (the
  touch sensor's ray test only for its site's shape); without it (snapshot=False: the arrays
  put_model made are not found) the generic path evaluates every sensor for every type, with
  frames gathered by traced rows and traced addresses and cutoffs. Both equal MuJoCo."""
  xml = SMALL.format(integrator='Euler', flags='').replace('</sensor>',
                                                           TRACED_SENSORS + '</sensor>')
  m, mj = oracle.both(xml)
  d0 = mjx_py.make_data(m)
  n_static = len(jax.make_jaxpr(lambda m, d: sensor.sensor_acc(m, d))(m, d0).eqns)
  if not snapshot:
    monkeypatch.setattr(model_module, '_STATIC_LEAVES', {})
    # the generic path is a different (larger) program
    assert len(jax.make_jaxpr(lambda m, d: sensor.sensor_acc(m, d))(m, d0).eqns) > n_static
  rng = np.random.default_rng(5)
  states = _states(mj, rng, 1)
  ref, energy = _reference(mj, states)
  # a fresh function for each case: the two share the Model's static metadata, so jit's
  # cache would otherwise return the first trace
  out = jax.jit(lambda m, d: forward_fn(m, d))(
      m, jax.tree_util.tree_map(lambda x: x[0], _batch(m, states)))
  _compare(mj, np.asarray(out.sensordata)[None], ref, 'traced')
  np.testing.assert_allclose(np.asarray(out.energy)[None], energy, rtol=RTOL, atol=ATOL)


def test_collision_sensors_need_a_concrete_model():
  m = mjx_py.from_xml_string(_xml('sensor_collision.xml'))
  with pytest.raises(mjx_py.NotSupportedError, match='close over the Model'):
    jax.jit(forward_fn).lower(m, mjx_py.make_data(m))


def test_user_and_plugin_sensors_are_refused():
  xml = ('<mujoco><worldbody><body><joint/><geom size=".1"/></body></worldbody><sensor>'
         '<jointpos name="q" joint="0"/></sensor></mujoco>').replace('joint="0"', 'joint="j"')
  xml = xml.replace('<joint/>', '<joint name="j"/>')
  for kind, name in ((sensor.USER, 'user'), (sensor.PLUGIN, 'plugin')):
    arrays = mjx_py.mjcf.compile_string(xml)
    arrays['sensor_type'] = np.array([kind], np.int32)
    m = mjx_py.put_model(arrays)
    with pytest.raises(mjx_py.NotSupportedError, match=f'{name} sensors.*q'):
      sensor.sensor_pos(m, mjx_py.make_data(m))
  # the compiler refuses them in MJCF, naming the sensor
  with pytest.raises(mjx_py.MJCFError, match="user 'u'"):
    mjx_py.from_xml_string(xml.replace('<jointpos name="q" joint="j"/>',
                                       '<user name="u" dim="2"/>'))


EQUALITY_XML = """
<mujoco>
  <option timestep="0.002" tolerance="1e-12"/>
  <default><geom type="capsule" size="0.02" contype="0" conaffinity="0"/></default>
  <worldbody>
    <body name="p1" pos="0 0 1"><joint type="hinge" axis="0 1 0"/>
      <geom fromto="0 0 0 0.2 0 -0.2"/><site name="s1" pos="0.2 0 -0.2"/></body>
    <body name="p2" pos="0.4 0 1"><joint type="hinge" axis="0 1 0"/>
      <geom fromto="0 0 0 -0.15 0 -0.25"/><site name="s2" pos="-0.15 0 -0.25"/></body>
    <body name="p3" pos="1 0 1"><joint type="ball"/>
      <geom fromto="0 0 0 0.1 0.05 -0.25"/><site name="s3" pos="0.1 0.05 -0.25"/></body>
    <body name="p4" pos="1.3 0 1"><joint type="slide" axis="0 0 1"/>
      <joint type="hinge" axis="1 0 0"/>
      <geom fromto="0 0 0 -0.2 0 -0.2"/><site name="s4" pos="-0.2 0 -0.2"/></body>
    <body name="p5" pos="2 0 1"><joint type="hinge" axis="0 1 0"/>
      <geom fromto="0 0 0 0 0 -0.3"/><site name="s5" pos="0 0 -0.3"/></body>
    <body name="p6" pos="3 0 1"><joint type="ball"/>
      <geom fromto="0 0 0 0.1 0 -0.25"/><site name="s6" pos="0.1 0 -0.25"/></body>
    <body name="p7" pos="3.3 0 1"><joint type="hinge" axis="0 1 0"/>
      <joint type="hinge" axis="1 0 0"/>
      <geom fromto="0 0 0 -0.15 0 -0.25"/><site name="s7" pos="-0.15 0 -0.25"/></body>
  </worldbody>
  <equality>
    <connect body1="p1" body2="p2" anchor="0.2 0 -0.2"/>
    <connect site1="s3" site2="s4"/>
    <weld body1="p5" anchor="0 0 -0.3" relpose="0 0 0.7 1 0 0 0" torquescale="0.5"/>
    <weld site1="s6" site2="s7" torquescale="2"/>
  </equality>
  <sensor>
    <accelerometer site="s1"/><force site="s1"/><torque site="s1"/>
    <force site="s2"/><torque site="s2"/><force site="s3"/><torque site="s4"/>
    <force site="s5"/><torque site="s5"/><accelerometer site="s6"/><force site="s6"/>
    <torque site="s7"/><framelinacc objtype="body" objname="p4"/>
    <frameangacc objtype="body" objname="p7"/>
  </sensor>
</mujoco>
"""


def test_equality_forces_in_cfrc_ext():
  """Connect and weld forces (body and site forms, a weld to the world) enter cfrc_ext as
  MuJoCo's mj_rnePostConstraint adds them: force / torque / accelerometer / frame-acceleration
  sensors, cacc, cfrc_ext and cfrc_int through our whole forward pass against mj_forward."""
  m, mj = oracle.both(EQUALITY_XML)
  run = jax.jit(forward_fn)
  rng = np.random.default_rng(7)
  for k in range(3):
    md = mujoco.MjData(mj)
    md.qpos[:] = oracle.random_state(mj, rng, qpos_scale=0.1, mocap=False).qpos
    md.qvel[:] = 0.3 * rng.standard_normal(mj.nv)
    mujoco.mj_forward(mj, md)
    mujoco.mj_rnePostConstraint(mj, md)
    d = run(m, oracle.make_data(m, qpos=md.qpos.copy(), qvel=md.qvel.copy()))
    assert md.ne == 18
    _compare(mj, np.asarray(d.sensordata)[None], md.sensordata[None], f'state {k}')
    for field in ('cacc', 'cfrc_ext', 'cfrc_int'):
      np.testing.assert_allclose(np.asarray(getattr(d, field)), getattr(md, field), rtol=RTOL,
                                 atol=1e-8, err_msg=f'state {k} {field}')
