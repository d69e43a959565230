"""step() under jax transformations: vmap equals a loop, gradients, compile time vs depth."""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import mjx_py
from mjx_py.forward import step

PENDULUM = """
<mujoco>
  <option timestep="0.01" integrator="{integrator}"><flag constraint="disable"/></option>
  <worldbody>
    <body name="a" pos="0 0 1">
      <joint name="h1" axis="0 1 0" damping="0.1" stiffness="0.5"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.04"/>
      <body pos="0.3 0 0">
        <joint name="h2" type="ball" damping="0.05"/>
        <geom type="capsule" fromto="0 0 0 0 0 -0.3" size="0.03"/>
        <body pos="0 0 -0.3">
          <joint name="s" type="slide" axis="1 0 0" damping="0.2"/>
          <geom type="box" size="0.05 0.05 0.05"/>
        </body>
      </body>
    </body>
    <body name="free" pos="1 0 1">
      <freejoint/>
      <geom type="sphere" size="0.1"/>
    </body>
  </worldbody>
  <actuator>
    <motor joint="h1" gear="2"/>
    <position joint="s" kp="20" kv="1"/>
  </actuator>
</mujoco>
"""


def chain(n):
  body = ''.join('<body pos="0 0 -0.1"><joint axis="0 1 0" damping="0.1"/>'
                 '<geom type="capsule" fromto="0 0 0 0 0 -0.1" size="0.02"/>' for _ in range(n))
  return ('<mujoco><option><flag constraint="disable"/></option><worldbody>'
          f'{body}{"</body>" * n}</worldbody></mujoco>')


def _state(m, seed):
  rng = np.random.default_rng(seed)
  qpos = np.asarray(m.qpos0) + 0.1 * rng.standard_normal(m.nq)
  for adr in (1, 8):  # ball quaternion of h2 and the free body's quaternion
    qpos[adr:adr + 4] /= np.linalg.norm(qpos[adr:adr + 4])
  return qpos, 0.3 * rng.standard_normal(m.nv), rng.standard_normal(m.nu)


# vmap(step) against one world's step: the batched and the one-world programs are fused
# differently, so float32 results differ by rounding (jax 0.12.1: 3.3e-6 in a qvel of
# magnitude 3.4, about 8 ulps; jax 0.10.2: 2.4e-7); in float64 they agree to 7e-16
@pytest.mark.parametrize('x64, tol', [(False, 1e-5), (True, 1e-12)])
def test_vmap_step_equals_loop(x64, tol):
  with jax.enable_x64(x64):
    m = mjx_py.from_xml_string(PENDULUM.format(integrator='Euler'))
    d0 = mjx_py.make_data(m)
    states = [_state(m, s) for s in range(4)]
    batch = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *[
        d0.__class__(**{**vars(d0), 'qpos': jnp.asarray(q, d0.qpos.dtype),
                        'qvel': jnp.asarray(v, d0.qvel.dtype),
                        'ctrl': jnp.asarray(c, d0.ctrl.dtype)}) for q, v, c in states])
    step_one = jax.jit(lambda d: step(m, d))
    out = jax.jit(jax.vmap(lambda d: step(m, d)))(batch)
    assert out.qvel.dtype == (jnp.float64 if x64 else jnp.float32)
    for i in range(len(states)):
      single = step_one(jax.tree_util.tree_map(lambda x, i=i: x[i], batch))
      np.testing.assert_allclose(out.qpos[i], single.qpos, rtol=tol, atol=tol)
      np.testing.assert_allclose(out.qvel[i], single.qvel, rtol=tol, atol=tol)


@pytest.mark.parametrize('integrator', ['Euler', 'implicitfast', 'RK4'])
def test_step_gradients_match_finite_differences(integrator):
  with jax.enable_x64(True):
    m = mjx_py.from_xml_string(PENDULUM.format(integrator=integrator))
    d0 = mjx_py.make_data(m)
    qpos, qvel, ctrl = _state(m, 0)

    def f(qvel, ctrl):
      d = d0.__class__(**{**vars(d0), 'qpos': jnp.asarray(qpos), 'qvel': qvel, 'ctrl': ctrl})
      return step(m, d).qvel

    # jitted: check_grads evaluates f, its jvp and its vjp many times (eagerly: minutes)
    check_grads(jax.jit(f), (jnp.asarray(qvel), jnp.asarray(ctrl)), order=1,
                modes=('fwd', 'rev'), atol=1e-6, rtol=1e-6)


def test_step_gradients_finite_in_float32_from_rest():
  m = mjx_py.from_xml_string(PENDULUM.format(integrator='Euler'))
  d0 = mjx_py.make_data(m)

  def loss(ctrl):
    d = d0.__class__(**{**vars(d0), 'ctrl': ctrl})
    d, _ = jax.lax.scan(lambda d, _: (step(m, d), None), d, None, length=5)
    return jnp.sum(d.qpos ** 2) + jnp.sum(d.qvel ** 2)

  g = jax.jit(jax.grad(loss))(jnp.zeros(m.nu, jnp.float32))
  assert g.dtype == jnp.float32 and np.all(np.isfinite(np.asarray(g)))


def test_compile_time_does_not_grow_with_depth():
  times = {}
  for n in (5, 40, 200):
    m = mjx_py.from_xml_string(chain(n))
    d = mjx_py.make_data(m)
    t0 = time.perf_counter()
    jax.jit(step).lower(m, d).compile()
    times[n] = time.perf_counter() - t0
  # generous bound against machine noise; the acceptance target is 3x (see the README)
  assert times[200] < 3 * times[5] + 2.0, times
