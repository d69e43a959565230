"""Tendons (mj_tendon) and actuator transmissions (mj_transmission) against MuJoCo.

Every model with tendons or actuators (plus an inline model that exercises inside wrapping,
sidesites on both sides and pulley branches that wrap) goes through both engines from random
states in float64: ten_length, ten_J, the path (ten_wrapadr, ten_wrapnum, wrap_xpos, wrap_obj),
actuator_length and actuator_moment must agree to 1e-10 relative. Gradients of the tendon lengths
are checked for finiteness and against ten_J, including at a configuration where a tendon just
starts to touch a wrapping geom.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import oracle
import pytest
from oracle import ROOT, random_state

from mjx_py import inertia, kinematics, tendon, transmission

# Inside wraps (side site inside a sphere and a tilted cylinder), a sidesite outside a sphere,
# and a pulley whose branches both wrap, with geoms and sites on moving bodies.
WRAP_ZOO = """
<mujoco model="wrap_zoo">
  <worldbody>
    <site name="w0" pos="-0.3 0 0.15"/>
    <site name="w1" pos="-0.3 0.5 0.1"/>
    <body name="a">
      <joint name="a1" type="hinge" axis="0 1 0"/>
      <joint name="a2" type="slide" axis="0 0 1"/>
      <geom name="ball" type="sphere" size="0.1"/>
      <geom name="cyl" type="cylinder" size="0.08 0.1" pos="0 0.5 0" euler="10 0 0"/>
      <site name="in_ball" pos="0 0.01 0.02"/>
      <site name="in_cyl" pos="0.01 0.5 0"/>
      <site name="out_ball" pos="0 0 0.3"/>
      <body name="b" pos="0.3 0 0">
        <joint name="b1" type="hinge" axis="0 0 1"/>
        <joint name="b2" type="hinge" axis="1 0 0"/>
        <geom type="capsule" size="0.02" fromto="0 0 0 0.1 0 0"/>
        <site name="b0" pos="0 0 0.15"/>
        <site name="b1" pos="0.05 0.5 0.1"/>
      </body>
    </body>
  </worldbody>
  <tendon>
    <spatial name="inside_sphere">
      <site site="w0"/><geom geom="ball" sidesite="in_ball"/><site site="b0"/>
    </spatial>
    <spatial name="inside_cyl">
      <site site="w1"/><geom geom="cyl" sidesite="in_cyl"/><site site="b1"/>
    </spatial>
    <spatial name="side_sphere">
      <site site="w0"/><geom geom="ball" sidesite="out_ball"/><site site="b0"/>
    </spatial>
    <spatial name="pulley_branches">
      <site site="w0"/><geom geom="ball"/><site site="b0"/>
      <pulley divisor="3"/>
      <site site="w1"/><geom geom="cyl"/><site site="b1"/><site site="b0"/>
    </spatial>
    <fixed name="fixed"><joint joint="a1" coef="0.5"/><joint joint="a2" coef="-2"/></fixed>
  </tendon>
  <actuator>
    <motor tendon="pulley_branches" gear="2"/>
    <motor tendon="fixed"/>
  </actuator>
</mujoco>
"""


def _has_tendon_or_actuator(path):
  mj = mujoco.MjModel.from_xml_path(path)
  return mj.ntendon > 0 or mj.nu > 0


FILES = [p for p in oracle.MODELS if _has_tendon_or_actuator(p)]
PARAMS = [pytest.param(p, id=oracle.model_id(p)) for p in FILES] + [
    pytest.param('wrap_zoo', id='wrap_zoo')]


def _load(path):
  """(our Model, MjModel) of a file path or of the inline 'wrap_zoo' model."""
  return oracle.both(WRAP_ZOO) if path == 'wrap_zoo' else oracle.both(path=path)


def _position(m, d):
  d = kinematics.kinematics(m, d)
  d = inertia.com_pos(m, d)
  d = tendon.tendon(m, d)
  return transmission.transmission(m, d)


_POSITION = jax.jit(_position)


def _close(ours, ref, name):
  np.testing.assert_allclose(np.asarray(ours), np.asarray(ref).reshape(np.shape(ours)),
                             rtol=1e-10, atol=1e-12, err_msg=name)


@pytest.mark.parametrize('path', PARAMS)
def test_tendon_and_transmission_match_mujoco(path):
  rng = np.random.default_rng(0)
  with jax.enable_x64(True):
    m, mj = _load(path)
    # no contacts: the adhesion (body) transmission has no contact Jacobians to average yet
    mj.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_CONTACT
    md = mujoco.MjData(mj)
    for _ in range(6):
      state = random_state(mj, rng)
      oracle.write_state(md, state)
      mujoco.mj_forward(mj, md)
      d = _POSITION(m, oracle.make_data(m, **state.fields()))
      _close(d.ten_length, md.ten_length, 'ten_length')
      _close(d.ten_J, oracle.dense_ten_J(mj, md), 'ten_J')
      np.testing.assert_array_equal(np.asarray(d.ten_wrapadr), md.ten_wrapadr)
      np.testing.assert_array_equal(np.asarray(d.ten_wrapnum), md.ten_wrapnum)
      npnt = int(md.ten_wrapnum.sum())  # MuJoCo leaves the entries past the path stale
      _close(np.asarray(d.wrap_xpos)[:npnt], md.wrap_xpos.reshape(-1, 3)[:npnt], 'wrap_xpos')
      np.testing.assert_array_equal(np.asarray(d.wrap_obj)[:npnt],
                                    md.wrap_obj.reshape(-1)[:npnt])
      _close(d.actuator_length, md.actuator_length, 'actuator_length')
      _close(d.actuator_moment, oracle.dense_moment(mj, md), 'actuator_moment')


def test_wrap_zoo_covers_every_wrap_kind():
  """The inline model really reaches inside wraps (two equal tangent points), outside wraps
  and straight segments at the states the parity test uses."""
  _, mj = _load('wrap_zoo')
  md = mujoco.MjData(mj)
  rng = np.random.default_rng(0)
  inside = outside = straight = 0
  for _ in range(6):
    md.qpos[:] = random_state(mj, rng).qpos
    mujoco.mj_forward(mj, md)
    obj = md.wrap_obj.reshape(-1)
    pts = md.wrap_xpos.reshape(-1, 3)
    for t in range(mj.ntendon):
      adr, num = md.ten_wrapadr[t], md.ten_wrapnum[t]
      for k in range(adr, adr + num - 1):
        if obj[k] >= 0 and obj[k + 1] == obj[k]:
          same = np.allclose(pts[k], pts[k + 1])
          inside += same
          outside += not same
        elif obj[k] == -1 and obj[k + 1] == -1:
          straight += 1
  assert inside and outside and straight


# ---------------------------------------------------------------------------------------------
# Gradients (finger: hinge joints only, so d(ten_length)/d(qpos) is ten_J).

def _grad_and_jacobian(m, weights):
  """Jitted qpos -> (gradient of weights . ten_length, ten_J), one compilation."""
  def weighted(qpos):
    d = _position(m, oracle.make_data(m, qpos=qpos))
    return jnp.dot(weights, d.ten_length), d.ten_J
  return jax.jit(jax.grad(weighted, has_aux=True))


def _touching_qpos(mj, md, rng):
  """Two configurations 1e-13 apart on either side of a point where the flexor's path starts
  to wrap a geom: bisection between two random states whose flexor paths differ in their point
  count. Returns (qpos, qpos) with the wrapped one first."""
  def count(q):
    md.qpos[:] = q
    mujoco.mj_forward(mj, md)
    return md.ten_wrapnum[0]

  while True:
    qa, qb = random_state(mj, rng).qpos, random_state(mj, rng).qpos
    if count(qa) != count(qb):
      break
  na = count(qa)
  lo, hi = 0.0, 1.0
  for _ in range(60):
    mid = 0.5 * (lo + hi)
    if count(qa + mid * (qb - qa)) == na:
      lo = mid
    else:
      hi = mid
  pair = qa + lo * (qb - qa), qa + hi * (qb - qa)
  return pair if count(pair[0]) > count(pair[1]) else pair[::-1]


def _arc_chords(mj, md, qpos):
  """Distances between the two tangent points of every wrapped segment of tendon 0."""
  md.qpos[:] = qpos
  mujoco.mj_forward(mj, md)
  obj = md.wrap_obj.reshape(-1)
  pts = md.wrap_xpos.reshape(-1, 3)
  return [np.linalg.norm(pts[k] - pts[k + 1]) for k in range(md.ten_wrapnum[0] - 1)
          if obj[k] >= 0 and obj[k + 1] == obj[k]]


def test_tendon_length_gradient_finite_and_equal_to_jacobian():
  """Reverse-mode gradients of the tendon lengths (weighted sum) are finite and equal
  w^T ten_J, at random states and on both sides of the onset of a wrap (tangent points
  coinciding: the tendon just touches the geom)."""
  path = os.path.join(ROOT, 'models', 'finger_tendon.xml')
  rng = np.random.default_rng(3)
  with jax.enable_x64(True):
    m, mj = _load(path)
    md = mujoco.MjData(mj)
    weights = jnp.asarray(rng.uniform(0.5, 2.0, mj.ntendon))

    grad = _grad_and_jacobian(m, weights)
    states = [random_state(mj, rng).qpos for _ in range(4)]
    wrapped, straight = _touching_qpos(mj, md, rng)
    assert np.max(np.abs(wrapped - straight)) < 1e-12
    assert min(_arc_chords(mj, md, wrapped)) < 1e-6  # the new wrap starts with a zero arc
    for qpos in states + [wrapped, straight]:
      g, ten_j = grad(jnp.asarray(qpos))
      assert np.all(np.isfinite(np.asarray(g)))
      np.testing.assert_allclose(g, np.asarray(weights @ ten_j), rtol=1e-8, atol=1e-10)


def test_gradients_float32_through_every_wrap_kind():
  """float32: reverse-mode gradients of the tendon lengths on the inline model (hinges only)
  are finite and match w^T ten_J at states with inside, outside and no wraps (the inside wrap's
  Newton solve is differentiated implicitly; its point is only stationary to MuJoCo's 1e-6
  tolerance, hence the loose bound)."""
  m, mj = _load('wrap_zoo')
  rng = np.random.default_rng(4)
  weights = jnp.asarray(rng.uniform(0.5, 2.0, mj.ntendon), jnp.float32)
  grad = _grad_and_jacobian(m, weights)
  for _ in range(6):
    g, ten_j = grad(jnp.asarray(random_state(mj, rng).qpos, jnp.float32))
    assert np.all(np.isfinite(np.asarray(g)))
    ref = np.asarray(weights @ ten_j)
    np.testing.assert_allclose(g, ref, rtol=1e-3, atol=1e-3 * np.max(np.abs(ref)))


def test_transmission_gradients_finite_float32():
  """float32 reverse-mode gradients of every actuator length and moment (joint, ball and free
  with jointinparent, slider-crank, site with and without refsite, tendons) stay finite, also
  at qpos0 where the ball and free quaternions are the identity."""
  m, mj = _load(os.path.join(ROOT, 'tests', 'models', 'actuators_general.xml'))
  rng = np.random.default_rng(5)

  def total(qpos):
    d = _position(m, oracle.make_data(m, qpos=qpos))
    return jnp.sum(d.actuator_length) + jnp.sum(d.actuator_moment)

  grad = jax.jit(jax.grad(total))
  for qpos in [mj.qpos0] + [random_state(mj, rng).qpos for _ in range(4)]:
    assert np.all(np.isfinite(np.asarray(grad(jnp.asarray(qpos, jnp.float32)))))
