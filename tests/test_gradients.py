"""Reverse-mode gradients through mjx_py.step with contacts, default solver options.

jax.grad of a scalar of the state after 100 steps (one lax.scan) with respect to the initial
qvel, a control sequence, a geom's friction and a body's mass:

1. A box pushed along a plane by a motor (slide x / slide z joints, so its four contacts stay
   put) while it slides: float64 gradients against central finite differences within 1e-2
   relative (steady sliding contact: the dynamics are smooth), and finite in float32.
2. A ball: over 100 contact-free steps the gradients match finite differences; over 100
   steps with a bounce (timestep 0.01) they are finite in float32.
3. The humanoid falling onto the plane (models/humanoid.xml) and a gripper grasping and lifting
   a box (tests/models/scenes/hand_grasp.xml): finite in float32.
"""

from __future__ import annotations

import dataclasses
import os

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from oracle import ROOT, RUN_OPTIMIZED

import mjx_py
from mjx_py.xla import fast_compile_supported

BOX = """
<mujoco>
  <option timestep="{dt}"/>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 .1" friction="0.5"/>
    <body name="box" pos="0 0 0.1">
      <joint name="x" type="slide" axis="1 0 0"/>
      <joint name="z" type="slide" axis="0 0 1"/>
      <geom name="box" type="box" size="0.1 0.1 0.1" mass="1" friction="0.5"/>
    </body>
  </worldbody>
  <actuator><motor joint="x" gear="1"/></actuator>
</mujoco>
"""

BALL = """
<mujoco>
  <option timestep="{dt}"/>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 .1"/>
    <body name="ball" pos="0 0 {z}">
      <freejoint/>
      <geom name="ball" type="sphere" size="0.1" mass="1" solref="0.01 0.5"/>
    </body>
  </worldbody>
</mujoco>
"""
NSTEP = 100


def _rollout(m, d, ctrls):
  def body(d, ctrl):
    return mjx_py.step(m, dataclasses.replace(d, ctrl=ctrl)), None
  return jax.lax.scan(body, d, ctrls)[0]


def _settle(m, xml, n=50):
  """Our Data at MuJoCo's state after n mj_steps at zero control (the box's contacts settle):
  qpos, qvel, the warm start and time, which is all a step reads of it (no forward rollout
  compiled for it)."""
  mj = mujoco.MjModel.from_xml_string(xml)
  md = mujoco.MjData(mj)
  for _ in range(n):
    mujoco.mj_step(mj, md)
  d = mjx_py.make_data(m)
  def put(x):
    return jnp.asarray(x, d.qpos.dtype)
  return dataclasses.replace(d, qpos=put(md.qpos), qvel=put(md.qvel),
                             qacc_warmstart=put(md.qacc_warmstart), time=put(md.time))


def _losses(m, d0, body, aux=False):
  """Loss functions of (qvel0, ctrls, friction, mass): the final x + z of ``body``; with aux,
  (that loss, the final ncon and height of ``body``), for jax.grad's has_aux."""
  def run(qvel, ctrls, friction, mass):
    mm = dataclasses.replace(m, geom_friction=friction, body_mass=mass)
    d = _rollout(mm, dataclasses.replace(d0, qvel=qvel), ctrls)
    loss = d.xpos[body, 0] + d.xpos[body, 2]
    return (loss, (d.ncon, d.xpos[body, 2])) if aux else loss
  return run


def _args(m, d0, ctrl):
  ctrls = jnp.broadcast_to(jnp.asarray(ctrl, d0.qvel.dtype), (NSTEP, m.nu))
  return (d0.qvel, ctrls, m.geom_friction, m.body_mass)


def _fd(f, args, which, index, eps):
  """Central difference of f along one entry of argument ``which``."""
  def shifted(h):
    a = list(args)
    a[which] = a[which].at[index].add(h)
    return f(*a)
  return (shifted(eps) - shifted(-eps)) / (2 * eps)


def _check_fd(f, args, probes, rtol=1e-2):
  grads = jax.jit(jax.grad(f, argnums=(0, 1, 2, 3)))(*args)
  jf = jax.jit(f)
  for which, index, eps in probes:
    g = float(grads[which][index])
    fd = float(_fd(jf, args, which, index, eps))
    assert abs(g - fd) <= rtol * max(abs(fd), 1e-3), (which, index, g, fd)
  return grads


def _finite(f, args, optimized=False):
  """jax.grad of f at args, asserted finite; f returns (loss, aux) (_losses with aux=True), and
  so does this (the gradients, aux: the final state seen by the same program). optimized:
  compile with LLVM's optimizations on (RUN_OPTIMIZED) and XLA:CPU's default fusion emitters,
  as users run it (tests/conftest.py turns both off for the session); float32 rounding differs
  between the builds (fused multiply-adds), and so do the configurations reached."""
  grad = jax.jit(jax.grad(f, argnums=(0, 1, 2, 3), has_aux=True))
  if optimized:
    options = dict(RUN_OPTIMIZED)
    if fast_compile_supported():           # an XLA:CPU with both emitters: the default ones
      options['xla_cpu_use_fusion_emitters'] = True
    grad = grad.lower(*args).compile(options)
  grads, aux = grad(*args)
  for g in grads:
    assert np.all(np.isfinite(np.asarray(g)))
  return grads, aux


def test_box_sliding_matches_finite_differences():
  with jax.enable_x64(True):
    xml = BOX.format(dt=0.002)
    m = mjx_py.from_xml_string(xml)
    d0 = dataclasses.replace(_settle(m, xml), qvel=jnp.array([1.5, 0.0]))
    f = _losses(m, d0, 1)
    box = 1                                     # geom id of the box
    # qvel_x, the control at step 10, the box's sliding friction, the box's mass
    grads = _check_fd(f, _args(m, d0, 2.0), [(0, 0, 1e-5), (1, (10, 0), 1e-3),
                                             (2, (box, 0), 1e-5), (3, 1, 1e-5)])
    assert abs(float(grads[2][box, 0])) > 0.01   # friction matters while it slides


def test_box_sliding_float32_finite():
  xml = BOX.format(dt=0.002)
  m = mjx_py.from_xml_string(xml)
  d0 = dataclasses.replace(_settle(m, xml), qvel=jnp.array([1.5, 0.0]))
  _finite(_losses(m, d0, 1, aux=True), _args(m, d0, 2.0))


def test_ball_contact_free_matches_finite_differences_and_bounce_is_finite():
  with jax.enable_x64(True):
    m = mjx_py.from_xml_string(BALL.format(dt=0.002, z=1.0))
    d0 = dataclasses.replace(mjx_py.make_data(m), qvel=jnp.array([0.3, 0, 0.5, 0, 0, 0.0]))
    _check_fd(_losses(m, d0, 1), _args(m, d0, 0.0), [(0, 0, 1e-5), (0, 2, 1e-5)])
  m = mjx_py.from_xml_string(BALL.format(dt=0.01, z=0.5))
  d0 = dataclasses.replace(mjx_py.make_data(m), qvel=jnp.array([0.3, 0, 0.5, 0, 0, 0.0]))
  _, (_, z) = _finite(_losses(m, d0, 1, aux=True), _args(m, d0, 0.0))
  assert float(z) < 0.5                         # it bounced (or came to rest) on the floor


# The gripper closes on the box and lifts (its fingers are capsules along the box's edges: the
# float32 gradient used to turn NaN there, see test_collision_primitive's capsule-box cases).
@pytest.mark.parametrize('path, body, ctrl', [
    ('models/humanoid.xml', 1, 0.1),
    ('tests/models/scenes/hand_grasp.xml', 4, [0.05, 0.04, 0.04])])
def test_float32_gradients_are_finite(path, body, ctrl):
  m = mjx_py.from_xml_path(os.path.join(ROOT, path))
  d0 = mjx_py.make_data(m)
  if m.nkey:
    d0 = mjx_py.reset_data(m, d0, 0)
  grads, (ncon, _) = _finite(_losses(m, d0, body, aux=True), _args(m, d0, ctrl), optimized=True)
  assert int(ncon) > 0                         # the segment ends in contact
  assert np.any(np.asarray(grads[1]) != 0)     # the controls move the body
