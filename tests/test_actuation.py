"""Actuation (mj_fwdActuation) and the integrators (mj_Euler, mj_implicit, mj_RungeKutta) against
MuJoCo 3.3.3, float64.

Each stage is fed MuJoCo's own inputs from mj_forward at a random state (actuator lengths,
velocities and moments, qfrc_gravcomp, qM, qfrc_smooth, ...), so these tests check actuation
and integration alone. RK4 runs with a forward function that calls mj_forward on the host
(jax.pure_callback), which checks the Runge-Kutta bookkeeping against mj_RungeKutta exactly.
"""

from __future__ import annotations

import dataclasses
import os
import re

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import oracle
import pytest
from oracle import MODELS, ROOT, both, read, with_option

import mjx_py
from mjx_py import actuation, integrate

# Every actuation feature in one small model: tendon actuator force limits (two motors sharing a
# spatial tendon, one actuator of a fixed tendon in a disabled group), a joint-level actuator
# force limit on a joint with actuator gravity compensation, forcerange, filterexact with actearly
# and actlimited, filter, an integrator with affine gain, muscles (tausmooth, force > 0, and a
# general muscle with its own curve parameters).
FEATURES_XML = """
<mujoco model="act_features">
  <option timestep="0.01" actuatorgroupdisable="2"/>
  <worldbody>
    <body name="arm" pos="0 0 1" gravcomp="1">
      <joint name="hinge" axis="0 1 0" actuatorfrcrange="-0.4 0.4" actuatorgravcomp="true"
             damping="0.1"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03"/>
      <site name="s1" pos="0.1 0 0.03"/>
      <body name="ball_body" pos="0.3 0 0" gravcomp="0.5">
        <joint name="ball" type="ball" actuatorgravcomp="true" damping="0.05"/>
        <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.02"/>
        <site name="s2" pos="0.1 0 0.02"/>
      </body>
    </body>
    <body name="slider" pos="1 0 1">
      <joint name="slide" type="slide" axis="1 0 0"/>
      <geom type="box" size="0.05 0.05 0.05"/>
    </body>
  </worldbody>
  <tendon>
    <spatial name="ten" actuatorfrclimited="true" actuatorfrcrange="-1 0.5">
      <site site="s1"/><site site="s2"/>
    </spatial>
    <fixed name="fix" actuatorfrclimited="true" actuatorfrcrange="-2 2">
      <joint joint="hinge" coef="1"/><joint joint="slide" coef="-0.5"/>
    </fixed>
  </tendon>
  <actuator>
    <motor name="t1" tendon="ten" gear="2" ctrlrange="-3 3"/>
    <motor name="t2" tendon="ten" gear="1"/>
    <motor name="f1" tendon="fix" gear="1"/>
    <motor name="f_disabled" tendon="fix" gear="1" group="2"/>
    <motor name="ballmotor" joint="ball" gear="0 0 1" forcerange="-0.3 0.3"/>
    <general name="filtex" joint="slide" dyntype="filterexact" dynprm="0.02" actearly="true"
             actlimited="true" actrange="-0.5 0.5" gainprm="3" biastype="affine"
             biasprm="0 -1 -0.5"/>
    <general name="filt" joint="slide" dyntype="filter" dynprm="0.05" gainprm="2"/>
    <general name="integ" joint="hinge" dyntype="integrator" actlimited="true" actrange="-1 1"
             gaintype="affine" gainprm="1 0.5 0.2" actearly="true" forcerange="-1 1"/>
    <muscle name="mus" joint="slide" lengthrange="-0.3 0.3" tausmooth="0.2" ctrllimited="true"
            ctrlrange="0 1"/>
    <muscle name="mus_force" joint="hinge" lengthrange="-1 1" force="5" timeconst="0.02 0.05"/>
    <general name="mus_general" joint="slide" dyntype="muscle" dynprm="0.01 0.04 0"
             gaintype="muscle" biastype="muscle" lengthrange="-0.4 0.5"
             gainprm="0.6 1.2 -1 150 0.4 1.7 1.5 1.2 1.3"
             biasprm="0.6 1.2 -1 150 0.4 1.7 1.5 1.2 1.3"/>
  </actuator>
</mujoco>
"""


# ---------------------------------------------------------------------------------------------
# helpers

def set_integrator(m, mj, integrator):
  mj.opt.integrator = integrator
  return dataclasses.replace(m, opt=dataclasses.replace(m.opt, integrator=integrator))


def random_state(mj, md, rng, vel=1.0):
  """A random state and input in md: qpos (unit quaternions), qvel, act (some outside [0, 1]),
  ctrl (some beyond ctrlrange), time."""
  oracle.write_state(md, oracle.random_state(
      mj, rng, qvel_scale=vel, mocap=False, ctrl_frac=(-0.2, 1.2), ctrl_scale=2.0,
      act_range=(-0.3, 1.3), time_range=(0.0, 2.0)))


STATE_FIELDS = ('qpos', 'qvel', 'act', 'ctrl', 'time')
FORWARD_FIELDS = ('act_dot', 'qacc', 'qfrc_smooth', 'qfrc_constraint', 'actuator_length',
                  'actuator_velocity', 'cdof', 'cinert', 'subtree_com', 'xipos', 'ximat',
                  'geom_xpos', 'geom_xmat', 'qfrc_gravcomp', 'sensordata', 'energy')


def inject(m, mj, md, names=STATE_FIELDS + FORWARD_FIELDS, **extra):
  """Our Data holding MuJoCo's values of ``names`` (and the dense matrices) from md."""
  d = mjx_py.make_data(m)
  kw = {n: np.array(getattr(md, n)).reshape(np.shape(getattr(d, n))) for n in names}
  kw.update(actuator_moment=oracle.dense_moment(mj, md), qM=oracle.dense_qM(mj, md),
            ten_J=oracle.dense_ten_J(mj, md))
  kw.update(extra)
  return oracle.replace(d, **kw)


def assert_close(got, ref, rtol, name):
  got, ref = np.asarray(got), np.asarray(ref)
  scale = max(1.0, float(np.max(np.abs(ref)))) if ref.size else 1.0
  np.testing.assert_allclose(got, ref, rtol=rtol, atol=rtol * 1e-2 * scale, err_msg=name)


ACT_FIELDS = ('actuator_force', 'qfrc_actuator', 'act_dot')
actuation_fn = jax.jit(actuation.actuation)


def check_actuation(m, mj, md, rng, nstate=4):
  """Random states: our actuation from MuJoCo's inputs equals MuJoCo's outputs."""
  for _ in range(nstate):
    random_state(mj, md, rng)
    mujoco.mj_forward(mj, md)
    with jax.enable_x64(True):
      d = actuation_fn(m, inject(m, mj, md))
    for name in ACT_FIELDS:
      assert_close(getattr(d, name), getattr(md, name), 1e-8, name)
  return d


# ---------------------------------------------------------------------------------------------
# Actuation

ACTUATED = [p for p in MODELS if mujoco.MjModel.from_xml_path(p).nu]


@pytest.mark.parametrize('path', ACTUATED, ids=oracle.model_id)
def test_actuation_matches_mujoco(path):
  with jax.enable_x64(True):
    m, mj = both(path=path)
  check_actuation(m, mj, mujoco.MjData(mj), np.random.default_rng(0))


FLAG_VARIANTS = {
    'default': '',
    'clampctrl_off': '<option><flag clampctrl="disable"/></option>',
    'gravity_off': '<option><flag gravity="disable"/></option>',
    'groups_0_2_off': '<option actuatorgroupdisable="0 2"/>',
    'zero_gravity': '<option gravity="0 0 0"/>',
}


@pytest.mark.parametrize('variant', list(FLAG_VARIANTS))
def test_actuation_features(variant):
  xml = with_option(FEATURES_XML, FLAG_VARIANTS[variant])
  with jax.enable_x64(True):
    m, mj = both(xml)
  md = mujoco.MjData(mj)
  rng = np.random.default_rng(1)
  check_actuation(m, mj, md, rng, nstate=6)
  if variant in ('gravity_off', 'zero_gravity'):
    # qfrc_gravcomp must be ignored when gravity is off or zero, whatever it holds
    random_state(mj, md, rng)
    mujoco.mj_forward(mj, md)
    with jax.enable_x64(True):
      d = actuation_fn(m, inject(m, mj, md, qfrc_gravcomp=rng.standard_normal(mj.nv)))
    assert_close(d.qfrc_actuator, md.qfrc_actuator, 1e-8, 'qfrc_actuator')


def test_actuation_limits_are_exercised():
  """At a saturating state every clamp of the features model is active, in both engines."""
  with jax.enable_x64(True):
    m, mj = both(FEATURES_XML)
  md = mujoco.MjData(mj)
  md.ctrl[:] = 5.0
  md.act[:] = 0.8
  md.qvel[:] = 5.0
  mujoco.mj_forward(mj, md)
  with jax.enable_x64(True):
    d = actuation_fn(m, inject(m, mj, md))
  for name in ACT_FIELDS:
    assert_close(getattr(d, name), getattr(md, name), 1e-8, name)
  force = np.asarray(d.actuator_force)
  aid = {mujoco.mj_id2name(mj, mujoco.mjtObj.mjOBJ_ACTUATOR, i): i for i in range(mj.nu)}
  # t1 (ctrl clamped to 3, gear 2) and t2 on a tendon limited to 0.5 in total: scaled to it
  assert force[aid['t1']] + force[aid['t2']] == pytest.approx(0.5)
  assert force[aid['t1']] == pytest.approx(0.5 * 3 / 8)
  assert force[aid['f_disabled']] == 0.0                      # disabled group
  assert force[aid['ballmotor']] == pytest.approx(0.3)        # forcerange
  assert abs(force[aid['integ']]) == pytest.approx(1.0)       # forcerange
  assert abs(np.asarray(d.qfrc_actuator)[mj.jnt_dofadr[0]]) == pytest.approx(0.4)  # joint limit
  assert np.any(np.asarray(md.qfrc_gravcomp)[mj.jnt_dofadr[1]:] != 0)  # gravcomp routed


def test_actuation_disabled_leaves_act_dot():
  xml = with_option(FEATURES_XML, '<option><flag actuation="disable"/></option>')
  with jax.enable_x64(True):
    m, mj = both(xml)
  md = mujoco.MjData(mj)
  random_state(mj, md, np.random.default_rng(2))
  mujoco.mj_forward(mj, md)
  stale = np.arange(mj.na, dtype=float)
  with jax.enable_x64(True):
    d = actuation_fn(m, inject(m, mj, md, act_dot=stale))
  assert not np.any(np.asarray(d.actuator_force)) and not np.any(np.asarray(d.qfrc_actuator))
  np.testing.assert_array_equal(np.asarray(d.act_dot), stale)


def test_bad_control_zeroes_all_controls():
  with jax.enable_x64(True):
    m, mj = both(FEATURES_XML)
  md = mujoco.MjData(mj)
  random_state(mj, md, np.random.default_rng(3))
  md.ctrl[4] = np.nan
  md.ctrl[1] = 1e11  # unlimited: stays bad after clamping
  mujoco.mj_forward(mj, md)
  with jax.enable_x64(True):
    d = actuation_fn(m, inject(m, mj, md))
  for name in ACT_FIELDS:
    assert_close(getattr(d, name), getattr(md, name), 1e-8, name)
  assert int(d.warning_counts[actuation.WARN_BADCTRL]) == 1


def test_muscle_curves_match_mujoco():
  """Gain, bias, gain velocity-derivative and activation dynamics on grids through every kink."""
  prm = np.array([0.75, 1.05, -1.0, 200.0, 0.5, 1.6, 1.5, 1.3, 1.2])
  lrange, acc0 = np.array([0.2, 0.5]), 3.0
  # lengths mapping to normalised L in [0.3, 2.3], including the kinks L = lmin, a, 1, b, lmax
  l0 = (lrange[1] - lrange[0]) / (prm[1] - prm[0])
  norm_len = np.concatenate([np.linspace(0.3, 2.3, 41), [0.5, 0.775, 1.0, 1.3, 1.6]])
  lengths = lrange[0] + (norm_len - prm[0]) * l0
  vels = l0 * prm[6] * np.concatenate([np.linspace(-1.5, 0.5, 21), [-1.0, 0.0, 0.2]])
  ll, vv = np.meshgrid(lengths, vels)
  ll, vv = ll.ravel(), vv.ravel()
  for p in (prm, np.r_[prm[:2], 7.0, prm[3:]]):
    ref_gain = [mujoco.mju_muscleGain(a, b, lrange, acc0, p) for a, b in zip(ll, vv)]
    ref_bias = [mujoco.mju_muscleBias(a, lrange, acc0, p) for a in ll]
    with jax.enable_x64(True):
      pj = jnp.asarray(np.broadcast_to(p, (ll.size, 9)))
      lr = jnp.asarray(np.broadcast_to(lrange, (ll.size, 2)))
      gain = actuation.muscle_gain(jnp.asarray(ll), jnp.asarray(vv), lr, acc0, pj)
      bias = actuation.muscle_bias(jnp.asarray(ll), lr, acc0, pj)
      dgain = jax.vmap(jax.grad(lambda v, a, q, r: actuation.muscle_gain(a, v, r, acc0, q)))(
          jnp.asarray(vv), jnp.asarray(ll), pj, lr)
      dgain_mj = actuation.muscle_gain_vel(jnp.asarray(ll), jnp.asarray(vv), lr, acc0, pj)
    np.testing.assert_allclose(np.asarray(gain), ref_gain, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(bias), ref_bias, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(dgain_mj), np.asarray(dgain), rtol=1e-9, atol=1e-9)
  ctrls = np.linspace(-0.2, 1.2, 15)
  acts = np.linspace(-0.2, 1.2, 15)
  cc, aa = np.meshgrid(ctrls, acts)
  for dyn in ([0.01, 0.04, 0.0], [0.01, 0.04, 0.3], [0.02, 0.02, 2.0]):
    ref = [mujoco.mju_muscleDynamics(c, a, np.array(dyn)) for c, a in zip(cc.ravel(), aa.ravel())]
    with jax.enable_x64(True):
      got = actuation.muscle_dynamics(jnp.asarray(cc.ravel()), jnp.asarray(aa.ravel()),
                                      jnp.asarray(dyn))
    np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize('source', ['features', 'muscle_arm.xml', 'actuators_general.xml'])
def test_actuation_gradients_finite(source):
  """grad of sum(actuator_force) w.r.t. ctrl, act and qvel: finite at random states and on the
  kinks (clamp bounds, act in {0, 1}, zero velocity), and equal to finite differences at a
  generic point."""
  if source == 'features':
    xml, path = FEATURES_XML, None
  else:
    path = os.path.join(ROOT, 'models' if source == 'muscle_arm.xml' else 'tests/models', source)
    xml = None
  with jax.enable_x64(True):
    m, mj = both(xml, path)
  md = mujoco.MjData(mj)
  rng = np.random.default_rng(4)
  random_state(mj, md, rng)
  mujoco.mj_forward(mj, md)
  with jax.enable_x64(True):
    d0 = inject(m, mj, md)

    def total_force(ctrl, act, qvel):
      vel = d0.actuator_moment @ qvel
      d = dataclasses.replace(d0, ctrl=ctrl, act=act, actuator_velocity=vel)
      return jnp.sum(actuation.actuation(m, d).actuator_force)

    total_force = jax.jit(total_force)
    grad = jax.jit(jax.grad(total_force, argnums=(0, 1, 2)))
    lo, hi = mj.actuator_ctrlrange.T
    kinks = [
        (d0.ctrl, d0.act, d0.qvel),
        (jnp.asarray(np.where(mj.actuator_ctrllimited, lo, 0.0)), jnp.zeros(mj.na),
         jnp.zeros(mj.nv)),
        (jnp.asarray(np.where(mj.actuator_ctrllimited, hi, 1.0)), jnp.ones(mj.na),
         jnp.zeros(mj.nv)),
    ]
    for args in kinks:
      for g in grad(*args):
        assert np.all(np.isfinite(np.asarray(g)))
    args = (d0.ctrl, d0.act, d0.qvel)
    g = grad(*args)
    for k in range(3):
      direction = jnp.asarray(rng.standard_normal(args[k].shape))
      eps = 1e-6
      plus = list(args)
      minus = list(args)
      plus[k] = args[k] + eps * direction
      minus[k] = args[k] - eps * direction
      fd = (total_force(*plus) - total_force(*minus)) / (2 * eps)
      assert float(jnp.dot(g[k], direction)) == pytest.approx(float(fd), rel=1e-5, abs=1e-7)


# ---------------------------------------------------------------------------------------------
# Integrators

EULER, RK4, IMPLICIT, IMPLICITFAST = 0, 1, 2, 3
INTEGRATORS = {EULER: integrate.euler, IMPLICIT: integrate.implicit,
               IMPLICITFAST: integrate.implicitfast}


def _step_and_deriv(integrator):
  def fn(m, d):
    flg_bias = integrator == IMPLICIT
    qderiv = integrate.deriv_smooth_vel(m, d, flg_bias) if integrator != EULER else d.qM
    return INTEGRATORS[integrator](m, d), qderiv
  return jax.jit(fn)


STEP_FNS = {k: _step_and_deriv(k) for k in INTEGRATORS}

# ball and free joints with damping, tendons with damping, muscles and activation limits,
# position servos (affine bias kv), fluid (both models), simple dofs, disabled groups and flags
INTEGRATOR_MODELS = ['models/humanoid.xml', 'tests/models/joints_all.xml', 'models/muscle_arm.xml',
                     'models/finger_tendon.xml', 'models/arm7.xml',
                     'tests/models/actuators_general.xml', 'tests/models/fluid_ellipsoid.xml',
                     'tests/models/contact_params.xml', 'tests/models/options_flags.xml',
                     'features']
# implicit compiles take seconds: Euler only for these (they add no feature to the implicit
# cases), and implicitfast only where it differs from implicit beyond dropping the RNE term
# (simple dofs, symmetrized fluid blocks, tendons, actuator gains)
EULER_ONLY = {'models/arm7.xml', 'tests/models/options_flags.xml',
              'tests/models/actuators_general.xml'}
NO_IMPLICITFAST = {'tests/models/joints_all.xml', 'models/muscle_arm.xml'}
INTEGRATOR_CASES = [(p, i) for p in INTEGRATOR_MODELS for i in (EULER, IMPLICIT, IMPLICITFAST)
                    if i == EULER or (p not in EULER_ONLY and
                                      (i == IMPLICIT or p not in NO_IMPLICITFAST))]
NAMES = {EULER: 'euler', IMPLICIT: 'implicit', IMPLICITFAST: 'implicitfast'}


@pytest.mark.parametrize('path,integrator', INTEGRATOR_CASES,
                         ids=[f'{p}-{NAMES[i]}' for p, i in INTEGRATOR_CASES])
def test_integrator_matches_mujoco(path, integrator):
  """One step from MuJoCo's forward pass: qpos, qvel, act, time within 1e-10, and (implicit
  integrators) qDeriv against MuJoCo's."""
  with jax.enable_x64(True):
    if path == 'features':
      m, mj = both(FEATURES_XML)
    else:
      m, mj = both(path=os.path.join(ROOT, path))
    m = set_integrator(m, mj, integrator)
  md = mujoco.MjData(mj)
  rng = np.random.default_rng(5)
  for _ in range(3):
    random_state(mj, md, rng, vel=2.0)
    mujoco.mj_forward(mj, md)
    with jax.enable_x64(True):
      d, qderiv = STEP_FNS[integrator](m, inject(m, mj, md))
    if integrator == EULER:
      mujoco.mj_Euler(mj, md)
    else:
      mujoco.mj_implicit(mj, md)
      ref = oracle.dense_qderiv(mj, md)
      scale = max(1.0, np.max(np.abs(oracle.dense_qM(mj, md))) / mj.opt.timestep)
      np.testing.assert_allclose(np.asarray(qderiv), ref, rtol=1e-8, atol=1e-12 * scale,
                                 err_msg='qDeriv')
    for name in ('qpos', 'qvel', 'act', 'time'):
      assert_close(getattr(d, name), getattr(md, name), 1e-10, name)


def test_euler_damping_switches():
  """Implicit joint damping: used with any dof_damping > 0, also when passive forces are
  disabled; not with eulerdamp disabled or without damping. Both with the Model a jit
  argument (the damping's presence a run-time lax.cond) and closed over (known at trace time,
  no conditional)."""
  base = read(os.path.join(ROOT, 'models/humanoid.xml'))
  variants = [with_option(base, '<option><flag passive="disable"/></option>'),
              with_option(base, '<option><flag eulerdamp="disable"/></option>'),
              re.sub(r'\sdamping="[^"]*"', '', base)]
  for xml in variants:
    with jax.enable_x64(True):
      m, mj = both(xml)
    md = mujoco.MjData(mj)
    random_state(mj, md, np.random.default_rng(6), vel=2.0)
    mujoco.mj_forward(mj, md)
    with jax.enable_x64(True):
      d, _ = STEP_FNS[EULER](m, inject(m, mj, md))
      closed = jax.jit(lambda d, m=m: integrate.euler(m, d))(inject(m, mj, md))
    mujoco.mj_Euler(mj, md)
    for name in ('qpos', 'qvel', 'time'):
      assert_close(getattr(d, name), getattr(md, name), 1e-10, name)
      assert_close(getattr(closed, name), getattr(md, name), 1e-10, f'{name} (closed over)')


@pytest.mark.parametrize('name', ['models/humanoid.xml', 'tests/models/joints_all.xml'])
def test_integrate_pos_matches_mujoco(name):
  with jax.enable_x64(True):
    m, mj = both(path=os.path.join(ROOT, name))
  md = mujoco.MjData(mj)
  rng = np.random.default_rng(7)
  fn = jax.jit(lambda m, q, v, dt: integrate.integrate_pos(m, q, v, dt))
  for scale in (0.0, 1e-9, 1.0, 30.0):
    random_state(mj, md, rng)
    qvel = scale * rng.standard_normal(mj.nv)
    ref = md.qpos.copy()
    mujoco.mj_integratePos(mj, ref, qvel, 0.01)
    with jax.enable_x64(True):
      got = fn(m, jnp.asarray(md.qpos), jnp.asarray(qvel), 0.01)
    np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-12, atol=1e-13)


def test_integrate_pos_gradient_at_rest():
  """d qpos'/d qvel at qvel = 0 is exact (quaternion integration has no sqrt at 0)."""
  with jax.enable_x64(True):
    m, mj = both(path=os.path.join(ROOT, 'tests/models/joints_all.xml'))
    qpos = jnp.asarray(mj.qpos0)
    f = jax.jit(lambda v: integrate.integrate_pos(m, qpos, v, 0.01))
    jac = jax.jacfwd(f)(jnp.zeros(mj.nv))
    eps = 1e-7
    fd = np.stack([(f(eps * e) - f(-eps * e)) / (2 * eps) for e in np.eye(mj.nv)], axis=1)
  np.testing.assert_allclose(np.asarray(jac), fd, atol=1e-8)


@pytest.mark.parametrize('integrator', [EULER, IMPLICIT])
def test_integrator_gradients_finite(integrator):
  """grad of the next state w.r.t. qvel at rest and at motion, through quaternions, damping,
  fluid drag derivatives (sqrt at zero velocity) and the RNE derivative."""
  path = os.path.join(ROOT, 'tests/models/fluid_ellipsoid.xml')
  with jax.enable_x64(True):
    m, mj = both(path=path)
    m = set_integrator(m, mj, integrator)
  md = mujoco.MjData(mj)
  mujoco.mj_forward(mj, md)
  with jax.enable_x64(True):
    d0 = inject(m, mj, md)
    step = INTEGRATORS[integrator]

    def loss(qvel):
      d = step(m, dataclasses.replace(d0, qvel=qvel))
      return jnp.sum(d.qpos) + jnp.sum(d.qvel ** 2)

    grad = jax.jit(jax.grad(loss))
    for qvel in (jnp.zeros(mj.nv), jnp.asarray(np.random.default_rng(8).standard_normal(mj.nv))):
      assert np.all(np.isfinite(np.asarray(grad(qvel))))


# ---------------------------------------------------------------------------------------------
# RK4

def mujoco_forward_fn(mj):
  """forward_fn(m, d) for rk4 that runs MuJoCo's mj_forward on the host (qacc, act_dot)."""
  md = mujoco.MjData(mj)

  def host(qpos, qvel, act, ctrl, time):
    md.qpos[:], md.qvel[:], md.act[:], md.ctrl[:] = qpos, qvel, act, ctrl
    md.time = float(time)
    mujoco.mj_forward(mj, md)
    return md.qacc.copy(), md.act_dot.copy()

  def forward_fn(m, d):
    shapes = (jax.ShapeDtypeStruct((mj.nv,), d.qvel.dtype),
              jax.ShapeDtypeStruct((mj.na,), d.qvel.dtype))
    qacc, act_dot = jax.pure_callback(host, shapes, d.qpos, d.qvel, d.act, d.ctrl, d.time)
    return dataclasses.replace(d, qacc=qacc, act_dot=act_dot)

  return forward_fn


RK4_MODELS = ['models/cartpole.xml', 'tests/models/joints_all.xml', 'models/muscle_arm.xml',
              'tests/models/actuators_general.xml', 'features']


@pytest.mark.parametrize('path', RK4_MODELS)
def test_rk4_matches_mujoco(path):
  xml = FEATURES_XML if path == 'features' else read(os.path.join(ROOT, path))
  xml = with_option(xml, '<option integrator="RK4"><flag constraint="disable"/></option>')
  with jax.enable_x64(True):
    m, mj = both(xml)
  md = mujoco.MjData(mj)
  rng = np.random.default_rng(9)
  fn = jax.jit(lambda m, d: integrate.rk4(m, d, mujoco_forward_fn(mj)))
  for _ in range(3):
    random_state(mj, md, rng)
    mujoco.mj_forward(mj, md)
    # global x64: the host callback's results are checked on a thread that does not see the
    # thread-local jax.enable_x64 context
    x64 = jax.config.jax_enable_x64
    jax.config.update('jax_enable_x64', True)
    try:
      d = fn(m, inject(m, mj, md))
    finally:
      jax.config.update('jax_enable_x64', x64)
    sensordata = md.sensordata.copy()
    mujoco.mj_RungeKutta(mj, md, 4)
    for name in ('qpos', 'qvel', 'act', 'time'):
      assert_close(getattr(d, name), getattr(md, name), 1e-10, name)
    np.testing.assert_array_equal(np.asarray(d.sensordata), sensordata)
