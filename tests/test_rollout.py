"""mjx_py.rollout: nstep steps in one lax.scan with per-step inputs and recorded outputs.

1. Its final Data and recorded trajectory equal a hand-written lax.scan of mjx_py.step (bit for
   bit, float64, a box, a ball and a motor-driven arm on a plane: contacts every step), and
   both equal MuJoCo's mj_step sequence.
2. Its gradient with remat=True (jax.grad of the final qpos with respect to the initial qvel,
   the controls and a Model field) equals the hand-written scan's to 1e-9 relative, from a
   program with under a quarter of the temporary buffers. (This also checks the tangent seed
   that rollout gives the initial Data, with or without remat. The plain rollout's gradient,
   compared bit for bit with the scan's until stop 40, is no longer compiled here, to save a
   third gradient compile of about a minute in CI.)
3. Under jax.vmap over controls only (one initial Data for every world) it equals per-world
   rollouts; per-step qfrc_applied / xfrc_applied inputs act as set before each step.
4. Bad arguments raise ValueError naming the problem.
7. A step reads only the state (mjx_py.rollout.state_fields): on every bundled model and three
   feature models, after 40 steps, a step from the Data equals, bit for bit, a step from a fresh
   Data given only that Data's state fields. rollout(state_only=True) (which carries only the
   state) gives the whole-Data rollout's state, recorded outputs and forward-mode derivative
   bit for bit, and the Data passed in for every other field.
5. examples/trajectory_optimization.py: Adam on the gradient through a short cart-pole
   rollout lowers its cost, and its loss equals the cost recomputed from MuJoCo's mj_step
   sequence under the same controls.
6. examples/system_identification.py: Levenberg-Marquardt with forward-mode Jacobians through
   a 150-step rollout and set_const recovers a box's mass and friction from MuJoCo's
   trajectory to 1e-6 (float64), and at the true values the residuals vanish (our trajectory
   equals MuJoCo's).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from oracle import ROOT

import mjx_py

SCENE = """
<mujoco>
  <option timestep="0.004"/>
  <worldbody>
    <geom name="floor" type="plane" size="2 2 0.1"/>
    <body name="box" pos="0.3 0 0.1">
      <freejoint/>
      <geom name="box" type="box" size="0.1 0.08 0.1" density="300"/>
    </body>
    <body name="ball" pos="-0.3 0 0.07">
      <freejoint/>
      <geom name="ball" type="sphere" size="0.07" density="500"/>
    </body>
    <body name="arm" pos="0 0 0.3">
      <joint name="swing" axis="0 1 0" damping="0.5"/>
      <geom name="arm" type="capsule" fromto="0 0 0 0.25 0 -0.15" size="0.03"/>
    </body>
  </worldbody>
  <actuator><motor joint="swing" gear="1"/></actuator>
</mujoco>
"""
NSTEP = 25


@pytest.fixture(scope='module')
def setup():
  with jax.enable_x64(True):
    m = mjx_py.from_xml_string(SCENE)
    d = mjx_py.make_data(m)
    ctrl = jnp.asarray(np.sin(np.arange(NSTEP) * 0.3)[:, None] * 0.8)
    yield m, d, ctrl


def _record(d):
  return d.qpos, d.ncon


def _scan(m, d, ctrl):
  """The hand-written rollout rollout() replaces."""
  def body(d, c):
    d = mjx_py.step(m, dataclasses.replace(d, ctrl=c))
    return d, _record(d)
  return jax.lax.scan(body, d, ctrl)


def _same(a, b):
  for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_rollout_equals_scan_and_mujoco(setup):
  m, d, ctrl = setup
  with jax.enable_x64(True):
    ours = jax.jit(lambda d, c: mjx_py.rollout(m, d, c, record=_record))(d, ctrl)
    ref = jax.jit(lambda d, c: _scan(m, d, c))(d, ctrl)
  _same(ours, ref)
  qpos, ncon = ours[1]
  assert qpos.shape == (NSTEP, m.nq) and ncon.shape == (NSTEP,)
  assert int(np.min(ncon)) > 0, 'the scene should be in contact every step'
  mm = mujoco.MjModel.from_xml_string(SCENE)
  md = mujoco.MjData(mm)
  for t in range(NSTEP):
    md.ctrl[:] = np.asarray(ctrl[t])
    mujoco.mj_step(mm, md)
    np.testing.assert_allclose(np.asarray(qpos[t]), md.qpos, atol=1e-8, err_msg=f'step {t}')
  np.testing.assert_allclose(np.asarray(ours[0].qvel), md.qvel, atol=1e-7)


def _remat_rollout(m, d, ctrl):
  return mjx_py.rollout(m, d, ctrl, remat=True)


def _loss(setup, run, qvel, ctrl, mass):
  m, d, _ = setup
  mm = dataclasses.replace(m, body_mass=m.body_mass.at[1].set(mass))
  dd = dataclasses.replace(d, qvel=qvel)
  return jnp.sum(run(mm, dd, ctrl)[0].qpos ** 2)


def _loss_args(setup):
  m, d, ctrl = setup
  return d.qvel + 0.1, ctrl, m.body_mass[1]


@pytest.fixture(scope='module')
def grad_programs(setup):
  """run -> (its compiled float64 gradient of _loss in qvel, ctrl and a body mass, the
  gradient at _loss_args), for the hand-written scan and rollout with remat."""
  out = {}
  with jax.enable_x64(True):
    args = _loss_args(setup)
    for run in (_scan, _remat_rollout):
      fn = jax.jit(jax.grad(lambda *a, run=run: _loss(setup, run, *a), argnums=(0, 1, 2)))
      fn = fn.lower(*args).compile()
      out[run] = fn, fn(*args)
  return out


def test_remat_gradient_equals_scan_and_stores_less(grad_programs):
  """remat=True: each step recomputed in the backward pass from its input Data and the
  solver's saved solution. The hand-written scan's gradient up to rounding, in a program whose
  temporary buffers (the residuals stacked over the steps) are a fraction of the scan's."""
  plain, grad = grad_programs[_scan]
  remat, grad_remat = grad_programs[_remat_rollout]
  assert all(np.all(np.isfinite(g)) and np.any(g != 0) for g in grad_remat)
  for a, b in zip(grad, grad_remat):
    np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-9,
                               atol=1e-9 * float(np.max(np.abs(np.asarray(a)))))
  temp = [fn.memory_analysis().temp_size_in_bytes for fn in (plain, remat)]
  assert temp[1] < 0.25 * temp[0], temp


def test_vmap_over_controls_and_inputs(setup):
  m, d, ctrl = setup
  nworld = 3
  scale = jnp.asarray([0.5, 1.0, -1.0])
  ctrls = ctrl[None] * scale[:, None, None]                     # (nworld, NSTEP, nu)
  push = np.zeros((NSTEP, m.nbody, 6))
  push[:, 1, 0] = 2.0                                           # push the box along +x
  qfrc = np.zeros((NSTEP, m.nv))
  qfrc[:, 6 + 5] = 0.3                                          # spin the ball about z

  def run(c, push):
    return mjx_py.rollout(m, d, c, inputs={'xfrc_applied': push, 'qfrc_applied': qfrc},
                          record=lambda d: d.qpos)
  with jax.enable_x64(True):
    batched = jax.jit(jax.vmap(run, in_axes=(0, None)))(ctrls, push)
    one = jax.jit(run)
    single = [one(ctrls[i], push) for i in range(nworld)]
    free = one(ctrls[0], np.zeros_like(push))
  for i in range(nworld):
    np.testing.assert_allclose(np.asarray(batched[1][i]), np.asarray(single[i][1]),
                               rtol=0, atol=1e-12)
  # the applied force moved the box further along x than without it
  assert float(batched[1][0][-1, 0]) > float(free[1][-1, 0]) + 1e-3


@pytest.mark.parametrize('kwargs, match', [
    (dict(inputs={'qpos': np.zeros((3, 21))}), "'qpos' is not an input field"),
    (dict(inputs={'ctrl': np.zeros((3, 2))}), r"has shape \(3, 2\)"),
    (dict(ctrl=np.zeros((3, 1)), nstep=4), 'has 3 steps, nstep is 4'),
    (dict(ctrl=np.zeros((3, 1)), inputs={'ctrl': np.zeros((3, 1))}), 'both'),
    (dict(), 'give nstep'),
])
def test_bad_arguments(setup, kwargs, match):
  m, d, _ = setup
  with pytest.raises(ValueError, match=match):
    mjx_py.rollout(m, d, **kwargs)


def _example(name):
  spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, 'examples', name + '.py'))
  example = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(example)
  return example


def test_trajectory_optimization_example():
  example = _example('trajectory_optimization')
  horizon = 40
  with jax.enable_x64(True):
    m = mjx_py.from_xml_path(example.MODEL)
    d0 = mjx_py.make_data(m)
    d0 = dataclasses.replace(d0, qpos=d0.qpos.at[1].set(np.pi))
    loss = example.make_loss(m, d0, horizon)
    values = []
    params, _, _ = example.adam(loss, jnp.zeros((horizon, m.nu)), 25, 0.1,
                                lambda i, v: values.append(v))
    final = float(jax.jit(loss)(params))
  assert np.isfinite(final) and final < values[0] - 0.01
  # the loss from MuJoCo's states under the same controls
  ctrl = np.tanh(np.asarray(params))
  mm = mujoco.MjModel.from_xml_path(example.MODEL)
  md = mujoco.MjData(mm)
  md.qpos[1] = np.pi
  cost, weight = 0.0, 0.0
  for t in range(horizon):
    md.ctrl[:] = ctrl[t]
    mujoco.mj_step(mm, md)
    w = 4.0 if t >= 3 * horizon // 4 else 1.0
    cost += w * ((1 - np.cos(md.qpos[1])) + 0.05 * md.qpos[0] ** 2 + 0.01 * np.sum(ctrl[t] ** 2))
    weight += w
  assert abs(cost / weight - final) < 1e-8


def test_system_identification_example():
  example = _example('system_identification')
  ctrl = example.controls()
  observed = example.observe(ctrl)
  with jax.enable_x64(True):
    m = mjx_py.from_xml_string(example.XML.format(**example.GUESS))
    residuals = example.make_residuals(m, ctrl, observed)
    truth = np.log([example.TRUE['mass'], example.TRUE['friction']])
    assert float(jnp.max(jnp.abs(jax.jit(residuals)(jnp.asarray(truth))))) < 1e-9
    start = jnp.log(jnp.asarray([example.GUESS['mass'], example.GUESS['friction']]))
    fitted, _, _ = example.fit(residuals, start, 8, lambda *a: None)
  np.testing.assert_allclose(np.exp(np.asarray(fitted)), np.exp(truth), rtol=1e-6)


STATE_MODELS = [os.path.join('models', f) for f in sorted(os.listdir(os.path.join(ROOT, 'models')))
                if f.endswith('.xml')] + [
    os.path.join('tests', 'models', f) for f in ('equality_all.xml', 'mocap_gravcomp.xml',
                                                  'sensors_all.xml')]


NSTATE = 40   # steps before the compared one (the humanoid stands on its feet by then)


@pytest.mark.parametrize('path', STATE_MODELS)
def test_step_reads_only_the_state(path):
  """step(d) and step(fresh Data with d's state fields) give the same Data bit for bit (a field
  that step passes through unchanged keeps each input's own value)."""
  from mjx_py.rollout import state_fields, state_of
  with jax.enable_x64(True):
    m = mjx_py.from_xml_path(os.path.join(ROOT, path))
    fresh = mjx_py.make_data(m)
    step = jax.jit(lambda d: mjx_py.step(m, d))
    rng = np.random.default_rng(1)
    d = fresh
    for _ in range(NSTATE):
      d = step(dataclasses.replace(d, ctrl=jnp.asarray(rng.uniform(-1, 1, m.nu))))
    d = dataclasses.replace(d, ctrl=jnp.asarray(rng.uniform(-1, 1, m.nu)))
    full = step(d)
    part = step(dataclasses.replace(fresh, **state_of(d)))
  names = state_fields(d)
  assert 'qpos' in names and 'qacc_warmstart' in names
  for f in dataclasses.fields(d):
    a, b = getattr(full, f.name), getattr(part, f.name)
    passed = (jax.tree_util.tree_all(jax.tree_util.tree_map(
        lambda x, y: bool(np.array_equal(np.asarray(x), np.asarray(y))), a, getattr(d, f.name)))
              and jax.tree_util.tree_all(jax.tree_util.tree_map(
                  lambda x, y: bool(np.array_equal(np.asarray(x), np.asarray(y))), b,
                  getattr(fresh, f.name))))
    if f.name in names or not passed:
      for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=f'{path} {f.name}')


def test_rollout_state_only(setup):
  """rollout(state_only=True): the whole-Data rollout's state fields and records bit for bit,
  the input Data's other fields, and the same forward-mode derivative of the final qpos."""
  from mjx_py.rollout import state_fields
  m, d, ctrl = setup
  d = dataclasses.replace(d, qvel=d.qvel + 0.1)
  with jax.enable_x64(True):
    full = jax.jit(lambda d, c: mjx_py.rollout(m, d, c, record=_record))(d, ctrl)
    mine = jax.jit(lambda d, c: mjx_py.rollout(m, d, c, record=_record, state_only=True))(
        d, ctrl)
    tangent = jnp.ones_like(d.qvel)

    def jvp(state_only):
      def final_qpos(qvel):
        dd = dataclasses.replace(d, qvel=qvel)
        return mjx_py.rollout(m, dd, ctrl[:5], state_only=state_only)[0].qpos
      return jax.jit(lambda v, t: jax.jvp(final_qpos, (v,), (t,)))(d.qvel, tangent)
    jvps = [jvp(False), jvp(True)]
  _same(full[1], mine[1])
  names = state_fields(d)
  for f in dataclasses.fields(d):
    want = getattr(full[0] if f.name in names else d, f.name)
    _same(getattr(mine[0], f.name), want)
  assert int(np.max(np.asarray(full[0].ncon))) > 0 and int(np.max(np.asarray(mine[0].ncon))) == 0
  _same(jvps[0], jvps[1])
  assert float(jnp.max(jnp.abs(jvps[1][1]))) > 0
