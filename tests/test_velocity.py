"""Velocity stage against MuJoCo: com_vel, passive, rne, tendon/actuator velocity, subtree_vel.

For every test model, random positions and velocities go through both engines in float64. The
tendon Jacobian/length and the actuator moments come from MuJoCo (tendon.py and transmission.py
are separate stages); everything else is computed here from qpos and qvel. Also: disable flags
(passive, gravity), and finite gradients of qfrc_bias + qfrc_passive, including at qvel = 0.
"""

from __future__ import annotations

import dataclasses
import glob
import os

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import mjx_py
from mjx_py import inertia, kinematics, passive, velocity

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = sorted(glob.glob(os.path.join(ROOT, 'models', '*.xml')) +
                glob.glob(os.path.join(ROOT, 'tests', 'models', '*.xml')))
FIELDS = ('cvel', 'cdof_dot', 'qfrc_bias', 'qfrc_spring', 'qfrc_damper', 'qfrc_gravcomp',
          'qfrc_fluid', 'qfrc_passive', 'ten_velocity', 'actuator_velocity', 'subtree_linvel',
          'subtree_angmom')
DSBL_PASSIVE, DSBL_GRAVITY = 1 << 5, 1 << 6


def random_state(mj, rng, vel_scale=1.0):
  qpos = mj.qpos0 + 0.3 * rng.standard_normal(mj.nq)
  for j in range(mj.njnt):
    adr = mj.jnt_qposadr[j]
    if mj.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE:
      qpos[adr + 3:adr + 7] /= np.linalg.norm(qpos[adr + 3:adr + 7])
    elif mj.jnt_type[j] == mujoco.mjtJoint.mjJNT_BALL:
      qpos[adr:adr + 4] /= np.linalg.norm(qpos[adr:adr + 4])
  qvel = vel_scale * rng.standard_normal(mj.nv)
  mocap_pos = mj.body_pos[mj.body_mocapid >= 0] if mj.nmocap else np.zeros((0, 3))
  mocap_pos = mocap_pos + 0.1 * rng.standard_normal(mocap_pos.shape)
  mocap_quat = rng.standard_normal((mj.nmocap, 4))
  return qpos, qvel, mocap_pos, mocap_quat


def _dense(mj, md, name):
  """MuJoCo's ten_J / actuator_moment as dense (rows, nv) arrays."""
  if name == 'ten_J':
    if not mujoco.mj_isSparse(mj) or not mj.ntendon:
      return md.ten_J.reshape(mj.ntendon, mj.nv).copy()
    rows, nnz, adr, col = mj.ntendon, md.ten_J_rownnz, md.ten_J_rowadr, md.ten_J_colind
    values = md.ten_J
  else:
    rows, nnz, adr, col = mj.nu, md.moment_rownnz, md.moment_rowadr, md.moment_colind
    values = md.actuator_moment
  out = np.zeros((rows, mj.nv))
  for i in range(rows):
    sl = slice(adr[i], adr[i] + nnz[i])
    out[i, col[sl]] = values[sl]
  return out


def _velocity_pipeline(m, d):
  d = kinematics.kinematics(m, d)
  d = inertia.com_pos(m, d)
  d = inertia.crb(m, d)
  d = velocity.tendon_actuator_velocity(m, d)
  d = velocity.com_vel(m, d)
  d = passive.passive(m, d)
  d = velocity.rne(m, d)
  return velocity.subtree_vel(m, d)


_PIPELINE = jax.jit(_velocity_pipeline)


def _replace(d, **kw):
  return dataclasses.replace(d, **{k: jnp.asarray(v) for k, v in kw.items()})


def _inputs(m, mj, md, state):
  """Our Data at ``state``, with MuJoCo's tendon and transmission outputs injected."""
  qpos, qvel, mpos, mquat = state
  d = mjx_py.make_data(m)
  return _replace(d, qpos=qpos, qvel=qvel, mocap_pos=mpos, mocap_quat=mquat,
                  ten_J=_dense(mj, md, 'ten_J'), ten_length=md.ten_length.copy(),
                  actuator_moment=_dense(mj, md, 'actuator_moment'))


def _reference(mj, md, state):
  qpos, qvel, mpos, mquat = state
  md.qpos[:], md.qvel[:], md.mocap_pos[:], md.mocap_quat[:] = qpos, qvel, mpos, mquat
  mujoco.mj_forward(mj, md)
  mujoco.mj_subtreeVel(mj, md)   # only run by mj_forward when a sensor needs it


def _compare(d, md, fields=FIELDS, rtol=1e-8):
  for name in fields:
    got = np.asarray(getattr(d, name))
    ref = getattr(md, name).reshape(got.shape)
    # absolute floor relative to the field's scale: forces of 1e3 next to zeros
    atol = 1e-10 * max(1.0, float(np.max(np.abs(ref), initial=0.0)))
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol, err_msg=name)


def _check_model(path, flags_on=0, flags_off=0, nstate=3, seed=0, **opt):
  """Compares from random states; ``opt`` overrides real-valued options in both engines."""
  rng = np.random.default_rng(seed)
  mj = mujoco.MjModel.from_xml_path(path)
  mj.opt.disableflags = (mj.opt.disableflags | flags_on) & ~flags_off
  for name, value in opt.items():
    setattr(mj.opt, name, value)
  md = mujoco.MjData(mj)
  with jax.enable_x64(True):
    m = mjx_py.from_xml_path(path)
    opt = {k: jnp.asarray(v, jnp.float64) for k, v in opt.items()}
    m = dataclasses.replace(m, opt=dataclasses.replace(
        m.opt, disableflags=int(mj.opt.disableflags), **opt))
    for _ in range(nstate):
      state = random_state(mj, rng)
      _reference(mj, md, state)
      d = _PIPELINE(m, _inputs(m, mj, md, state))
      _compare(d, md)


@pytest.mark.parametrize('path', MODELS, ids=[os.path.relpath(p, ROOT) for p in MODELS])
def test_velocity_stage_matches_mujoco(path):
  _check_model(path)


# (model, disable flags switched on): passive zeroes every part, gravity removes gravcomp and the
# gravity term of qfrc_bias
FLAG_CASES = [('tests/models/fluid_ellipsoid.xml', DSBL_PASSIVE),
              ('tests/models/tendons_spatial.xml', DSBL_PASSIVE),
              ('tests/models/fluid_ellipsoid.xml', DSBL_GRAVITY),
              ('tests/models/mocap_gravcomp.xml', DSBL_GRAVITY),
              ('tests/models/joints_all.xml', DSBL_GRAVITY | DSBL_PASSIVE)]


@pytest.mark.parametrize('name,flags', FLAG_CASES)
def test_disable_flags(name, flags):
  _check_model(os.path.join(ROOT, name), flags_on=flags, nstate=1, seed=1)


def test_flags_off_model_with_flags_cleared():
  """options_flags_off.xml disables passive and gravity: also check it with them on."""
  _check_model(os.path.join(ROOT, 'tests/models/options_flags_off.xml'),
               flags_off=DSBL_PASSIVE | DSBL_GRAVITY, nstate=1)


@pytest.mark.parametrize('density,viscosity', [(0.0, 0.0), (0.0, 0.2), (3.0, 0.0)])
def test_fluid_options_changed_after_compile(density, viscosity):
  """Fluid parameters are traced: changing them on a compiled fluid model (as vmap over
  options would) switches the terms on and off like MuJoCo."""
  _check_model(os.path.join(ROOT, 'tests/models/fluid_ellipsoid.xml'), nstate=1, seed=6,
               density=density, viscosity=viscosity, wind=np.array([0.0, 1.0, -0.5]))


def test_fluid_model_exercises_both_fluid_models():
  mj = mujoco.MjModel.from_xml_path(os.path.join(ROOT, 'tests/models/fluid_ellipsoid.xml'))
  ell = mj.geom_fluid[:, 0] > 0
  assert ell.any() and (~ell).any()
  assert mj.opt.density > 0 and mj.opt.viscosity > 0 and np.any(mj.opt.wind)


def test_unnormalized_quaternions():
  """Ball/free springs and kinematics normalise the joint quaternions, as MuJoCo does."""
  path = os.path.join(ROOT, 'tests/models/fluid_ellipsoid.xml')
  rng = np.random.default_rng(3)
  mj = mujoco.MjModel.from_xml_path(path)
  md = mujoco.MjData(mj)
  with jax.enable_x64(True):
    m = mjx_py.from_xml_path(path)
    qpos, qvel, mpos, mquat = random_state(mj, rng)
    for j in range(mj.njnt):
      adr = mj.jnt_qposadr[j] + (3 if mj.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE else 0)
      if mj.jnt_type[j] in (mujoco.mjtJoint.mjJNT_FREE, mujoco.mjtJoint.mjJNT_BALL):
        qpos[adr:adr + 4] *= 1.7
    state = (qpos, qvel, mpos, mquat)
    _reference(mj, md, state)
    d = _PIPELINE(m, _inputs(m, mj, md, state))
    _compare(d, md, fields=('qfrc_spring', 'qfrc_bias', 'qfrc_passive'))


GRAD_MODELS = ['tests/models/fluid_ellipsoid.xml', 'tests/models/tendons_spatial.xml',
               'tests/models/mocap_gravcomp.xml']


@pytest.mark.parametrize('name', GRAD_MODELS)
def test_gradients_are_finite(name):
  path = os.path.join(ROOT, name)
  rng = np.random.default_rng(2)
  mj = mujoco.MjModel.from_xml_path(path)
  md = mujoco.MjData(mj)
  with jax.enable_x64(True):
    m = mjx_py.from_xml_path(path)
    state = random_state(mj, rng)
    _reference(mj, md, state)
    d0 = _inputs(m, mj, md, state)

    def total(qpos, qvel):
      d = _velocity_pipeline(m, dataclasses.replace(d0, qpos=qpos, qvel=qvel))
      return jnp.sum(d.qfrc_bias + d.qfrc_passive)

    grad = jax.jit(jax.grad(total, argnums=(0, 1)))
    qpos = jnp.asarray(state[0])
    for qvel in (jnp.asarray(state[1]), jnp.zeros(mj.nv)):
      gq, gv = grad(qpos, qvel)
      assert np.all(np.isfinite(gq)) and np.all(np.isfinite(gv)), name
    # also with the qpos at the spring reference (zero spring displacement, identity quats)
    gq, gv = grad(jnp.asarray(mj.qpos_spring), jnp.zeros(mj.nv))
    assert np.all(np.isfinite(gq)) and np.all(np.isfinite(gv)), name


def test_fluid_gradient_matches_finite_differences():
  """d(qfrc_fluid)/d(qvel) by autodiff against central differences (smooth away from 0)."""
  path = os.path.join(ROOT, 'tests/models/fluid_ellipsoid.xml')
  rng = np.random.default_rng(4)
  mj = mujoco.MjModel.from_xml_path(path)
  md = mujoco.MjData(mj)
  with jax.enable_x64(True):
    m = mjx_py.from_xml_path(path)
    state = random_state(mj, rng)
    _reference(mj, md, state)
    d0 = _inputs(m, mj, md, state)

    def fluid(qvel):
      return _velocity_pipeline(m, dataclasses.replace(d0, qvel=qvel)).qfrc_fluid

    qvel = jnp.asarray(state[1])
    jac = jax.jit(jax.jacfwd(fluid))(qvel)
    f = jax.jit(fluid)
    eps = 1e-6
    fd = np.stack([(f(qvel.at[i].add(eps)) - f(qvel.at[i].add(-eps))) / (2 * eps)
                   for i in range(mj.nv)], axis=1)
    np.testing.assert_allclose(np.asarray(jac), fd, rtol=1e-5, atol=1e-6)


def test_float32():
  """Default precision: the fluid model agrees with MuJoCo to float32 accuracy, and the
  gradients stay finite at qvel = 0."""
  path = os.path.join(ROOT, 'tests/models/fluid_ellipsoid.xml')
  rng = np.random.default_rng(5)
  mj = mujoco.MjModel.from_xml_path(path)
  md = mujoco.MjData(mj)
  m = mjx_py.from_xml_path(path)
  state = random_state(mj, rng)
  _reference(mj, md, state)
  d0 = _inputs(m, mj, md, state)
  d = _PIPELINE(m, d0)
  for name in FIELDS:
    got = np.asarray(getattr(d, name))
    assert got.dtype == np.float32, name
    ref = getattr(md, name).reshape(got.shape)
    scale = max(1.0, float(np.max(np.abs(ref), initial=0.0)))
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5 * scale, err_msg=name)

  def total(qpos, qvel):
    d = _velocity_pipeline(m, dataclasses.replace(d0, qpos=qpos, qvel=qvel))
    return jnp.sum(d.qfrc_bias + d.qfrc_passive)

  gq, gv = jax.jit(jax.grad(total, argnums=(0, 1)))(d0.qpos, jnp.zeros(mj.nv, jnp.float32))
  assert np.all(np.isfinite(gq)) and np.all(np.isfinite(gv))
