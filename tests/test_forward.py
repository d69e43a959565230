"""forward() and step() against mj_forward / mj_step with constraints disabled (the smooth
dynamics; tests/test_forward_constraints.py and tests/test_rollout_contacts.py run them with
constraints).

Per-stage fields after forward() from random states on every bundled model, then 1000-step
rollouts with random controls for each integrator. float64 throughout.
"""

from __future__ import annotations

import os

import jax
import mujoco
import numpy as np
import oracle
import pytest
from oracle import ROOT

import mjx_py
from mjx_py.forward import forward, step

BUNDLED = ['humanoid.xml', 'ant.xml', 'arm7.xml', 'finger_tendon.xml', 'muscle_arm.xml',
           'cartpole.xml', 'hopper.xml', 'box_stack.xml', 'chain20.xml']
INTEGRATORS = ['Euler', 'implicit', 'implicitfast', 'RK4']


def smooth_xml(name, integrator=None):
  """The bundled model with the constraint solver disabled (and an integrator forced)."""
  option = '<option{}><flag constraint="disable"/></option>'.format(
      f' integrator="{integrator}"' if integrator else '')
  # put our option last so that it wins over the model's own <option> sections
  return oracle.with_option(oracle.read(os.path.join(ROOT, 'models', name)), option)


def random_state(mj, rng):
  """Random qpos, qvel, ctrl (within ctrlrange where limited) and act in [0, 1)."""
  return oracle.random_state(mj, rng, qpos_scale=0.2, qvel_scale=0.5, mocap=False,
                             ctrl_frac=(0.0, 1.0), act_range=(0.0, 1.0))


FORWARD_FIELDS = (
    ('xpos', 1e-10), ('qM', 1e-10), ('ten_length', 1e-10), ('actuator_length', 1e-10),
    ('actuator_velocity', 1e-8), ('cvel', 1e-8), ('qfrc_bias', 1e-8), ('qfrc_passive', 1e-8),
    ('actuator_force', 1e-8), ('qfrc_actuator', 1e-8), ('act_dot', 1e-8),
    ('qfrc_smooth', 1e-8), ('qacc_smooth', 1e-8), ('qacc', 1e-8))


@pytest.mark.parametrize('name', BUNDLED)
def test_forward_matches_mujoco(name):
  rng = np.random.default_rng(0)
  with jax.enable_x64(True):
    m, mj = oracle.both(smooth_xml(name))
    md = mujoco.MjData(mj)
    f = jax.jit(forward)
    for _ in range(3):
      state = random_state(mj, rng)
      oracle.write_state(md, state)
      md.qfrc_applied[:] = rng.standard_normal(mj.nv)
      md.xfrc_applied[1:] = rng.standard_normal((mj.nbody - 1, 6))
      mujoco.mj_forward(mj, md)
      d = f(m, oracle.make_data(m, **state.fields(), qfrc_applied=md.qfrc_applied.copy(),
                                xfrc_applied=md.xfrc_applied.copy()))
      for field, rtol in FORWARD_FIELDS:
        ref = oracle.dense_qM(mj, md) if field == 'qM' else getattr(md, field)
        np.testing.assert_allclose(np.asarray(getattr(d, field)), ref, rtol=rtol,
                                   atol=1e-10, err_msg=f'{name} {field}')


ROLLOUT_MODELS = ['humanoid.xml', 'arm7.xml', 'muscle_arm.xml', 'chain20.xml']


@pytest.mark.parametrize('integrator', INTEGRATORS)
@pytest.mark.parametrize('name', ROLLOUT_MODELS)
def test_rollout_matches_mj_step(name, integrator):
  with jax.enable_x64(True):
    m, mj = oracle.both(smooth_xml(name, integrator))
  md = mujoco.MjData(mj)
  rng = np.random.default_rng(1)
  nstep = 1000
  lo, hi = mj.actuator_ctrlrange.T
  ctrls = np.where(mj.actuator_ctrllimited, lo + (hi - lo) * rng.random((nstep, mj.nu)),
                   rng.standard_normal((nstep, mj.nu)))
  qpos_ref = np.zeros((nstep, mj.nq))
  for t in range(nstep):
    md.ctrl[:] = ctrls[t]
    mujoco.mj_step(mj, md)
    qpos_ref[t] = md.qpos
  with jax.enable_x64(True):
    def body(d, ctrl):
      d = step(m, oracle.replace(d, ctrl=ctrl))
      return d, d.qpos
    _, qpos = jax.jit(lambda d, c: jax.lax.scan(body, d, c))(mjx_py.make_data(m), ctrls)
  np.testing.assert_allclose(np.asarray(qpos), qpos_ref, atol=1e-6, rtol=1e-6)
