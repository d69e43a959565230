"""Velocity stage against MuJoCo: com_vel, passive, rne, tendon/actuator velocity, subtree_vel.

For every test model, random positions and velocities go through both engines in float64. The
tendon Jacobian/length and the actuator moments come from MuJoCo (tendon.py and transmission.py
are separate stages); everything else is computed here from qpos and qvel. Also: disable flags
(passive, gravity), and finite gradients of qfrc_bias + qfrc_passive, including at qvel = 0.
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
from oracle import MODELS, ROOT

from mjx_py import inertia, kinematics, passive, velocity

FIELDS = ('cvel', 'cdof_dot', 'qfrc_bias', 'qfrc_spring', 'qfrc_damper', 'qfrc_gravcomp',
          'qfrc_fluid', 'qfrc_passive', 'ten_velocity', 'actuator_velocity', 'subtree_linvel',
          'subtree_angmom')
DSBL_PASSIVE, DSBL_GRAVITY = 1 << 5, 1 << 6


def _random_state(mj, rng):
  """Random qpos, qvel and mocap poses."""
  return oracle.random_state(mj, rng, qvel_scale=1.0)


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


def _inputs(m, mj, md, state):
  """Our Data at ``state``, with MuJoCo's tendon and transmission outputs injected."""
  return oracle.make_data(m, **state.fields(), ten_J=oracle.dense_ten_J(mj, md),
                          ten_length=md.ten_length.copy(),
                          actuator_moment=oracle.dense_moment(mj, md))


def _reference(mj, md, state):
  oracle.write_state(md, state)
  mujoco.mj_forward(mj, md)
  mujoco.mj_subtreeVel(mj, md)   # only run by mj_forward when a sensor needs it


def _at_random_state(name, seed):
  """(our Model, MjModel, MjData, state, our Data) at a random state of the model ``name``,
  with MuJoCo's forward pass done; our Model takes the caller's precision."""
  m, mj = oracle.both(path=os.path.join(ROOT, name))
  md = mujoco.MjData(mj)
  state = _random_state(mj, np.random.default_rng(seed))
  _reference(mj, md, state)
  return m, mj, md, state, _inputs(m, mj, md, state)


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
  with jax.enable_x64(True):
    m, mj = oracle.both(path=path)
    mj.opt.disableflags = (mj.opt.disableflags | flags_on) & ~flags_off
    for name, value in opt.items():
      setattr(mj.opt, name, value)
    md = mujoco.MjData(mj)
    opt = {k: jnp.asarray(v, jnp.float64) for k, v in opt.items()}
    m = dataclasses.replace(m, opt=dataclasses.replace(
        m.opt, disableflags=int(mj.opt.disableflags), **opt))
    for _ in range(nstate):
      state = _random_state(mj, rng)
      _reference(mj, md, state)
      d = _PIPELINE(m, _inputs(m, mj, md, state))
      _compare(d, md)


@pytest.mark.parametrize('path', MODELS, ids=[oracle.model_id(p) for p in MODELS])
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
  rng = np.random.default_rng(3)
  with jax.enable_x64(True):
    m, mj = oracle.both(path=os.path.join(ROOT, 'tests/models/fluid_ellipsoid.xml'))
    md = mujoco.MjData(mj)
    state = _random_state(mj, rng)
    for j in range(mj.njnt):
      adr = mj.jnt_qposadr[j] + (3 if mj.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE else 0)
      if mj.jnt_type[j] in (mujoco.mjtJoint.mjJNT_FREE, mujoco.mjtJoint.mjJNT_BALL):
        state.qpos[adr:adr + 4] *= 1.7
    _reference(mj, md, state)
    d = _PIPELINE(m, _inputs(m, mj, md, state))
    _compare(d, md, fields=('qfrc_spring', 'qfrc_bias', 'qfrc_passive'))


GRAD_MODELS = ['tests/models/fluid_ellipsoid.xml', 'tests/models/tendons_spatial.xml',
               'tests/models/mocap_gravcomp.xml']


@pytest.mark.parametrize('name', GRAD_MODELS)
def test_gradients_are_finite(name):
  with jax.enable_x64(True):
    m, mj, _, state, d0 = _at_random_state(name, 2)

    def total(qpos, qvel):
      d = _velocity_pipeline(m, dataclasses.replace(d0, qpos=qpos, qvel=qvel))
      return jnp.sum(d.qfrc_bias + d.qfrc_passive)

    grad = jax.jit(jax.grad(total, argnums=(0, 1)))
    qpos = jnp.asarray(state.qpos)
    for qvel in (jnp.asarray(state.qvel), jnp.zeros(mj.nv)):
      gq, gv = grad(qpos, qvel)
      assert np.all(np.isfinite(gq)) and np.all(np.isfinite(gv)), name
    # also with the qpos at the spring reference (zero spring displacement, identity quats)
    gq, gv = grad(jnp.asarray(mj.qpos_spring), jnp.zeros(mj.nv))
    assert np.all(np.isfinite(gq)) and np.all(np.isfinite(gv)), name


def test_fluid_gradient_matches_finite_differences():
  """d(qfrc_fluid)/d(qvel) by autodiff against central differences (smooth away from 0)."""
  with jax.enable_x64(True):
    m, mj, _, state, d0 = _at_random_state('tests/models/fluid_ellipsoid.xml', 4)

    def fluid(qvel):
      return _velocity_pipeline(m, dataclasses.replace(d0, qvel=qvel)).qfrc_fluid

    qvel = jnp.asarray(state.qvel)
    jac = jax.jit(jax.jacfwd(fluid))(qvel)
    f = jax.jit(fluid)
    eps = 1e-6
    fd = np.stack([(f(qvel.at[i].add(eps)) - f(qvel.at[i].add(-eps))) / (2 * eps)
                   for i in range(mj.nv)], axis=1)
    np.testing.assert_allclose(np.asarray(jac), fd, rtol=1e-5, atol=1e-6)


def test_float32():
  """Default precision: the fluid model agrees with MuJoCo to float32 accuracy, and the
  gradients stay finite at qvel = 0."""
  m, mj, md, _, d0 = _at_random_state('tests/models/fluid_ellipsoid.xml', 5)
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
