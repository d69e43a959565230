"""mj_step's state checks (mjx_py.check) and the constraint-row capacity (njmax), against MuJoCo.

Bad qpos, qvel and qacc (NaN or beyond 1e10) with automatic reset (the world restarts from the
reset state; after a bad qacc the step integrates the reset state) and with the autoreset flag
disabled (the counters grow by 2, the values stay bad): the state after mj_step and the warning
counters are compared with MuJoCo. Under vmap only the bad world is reset. vmap(jax.grad) through
steps stays finite with the checks in the program. njmax: a capacity below what a world needs
gives it no rows in that step and counts mjWARN_CNSTRFULL.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import mjx_py
from mjx_py.forward import step

# a hopper-like planar model with contacts, limits and actuators
XML = """
<mujoco>
  <option timestep="0.005"/>
  <worldbody>
    <geom type="plane" size="2 2 0.1"/>
    <body pos="0 0 0.6">
      <joint name="x" type="slide" axis="1 0 0"/>
      <joint name="z" type="slide" axis="0 0 1"/>
      <joint name="pitch" type="hinge" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 0 0 -0.3" size="0.05"/>
      <body pos="0 0 -0.3">
        <joint name="knee" type="hinge" axis="0 1 0" range="-90 0"/>
        <geom type="capsule" fromto="0 0 0 0.1 0 -0.3" size="0.04"/>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor joint="pitch" gear="10"/>
    <motor joint="knee" gear="10"/>
  </actuator>
</mujoco>
"""
FIELDS = ('qpos', 'qvel', 'ctrl', 'qfrc_applied')


@pytest.fixture(autouse=True, scope='module')
def _float64():
  with jax.enable_x64(True):
    yield


def _run(xml, edit, nstep=2):
  """MuJoCo and our step from the same state, with ``edit`` (field -> (index, value)) applied
  before the last step; returns (MjData, our Data)."""
  mj = mujoco.MjModel.from_xml_string(xml)
  md = mujoco.MjData(mj)
  md.ctrl[:] = [0.3, -0.2]
  m = mjx_py.from_xml_string(xml)
  d = mjx_py.make_data(m)
  d = jax.tree_util.tree_map(jnp.asarray, d)
  one = jax.jit(step)
  d = d.__class__(**{**vars(d), 'ctrl': jnp.asarray(md.ctrl)})
  for k in range(nstep):
    if k == nstep - 1:
      for field, (i, v) in edit.items():
        getattr(md, field)[i] = v
        d = d.__class__(**{**vars(d), field: getattr(d, field).at[i].set(v)})
    mujoco.mj_step(mj, md)
    d = one(m, d)
  return md, d


def _same_state(md, d):
  assert float(d.time) == pytest.approx(md.time)
  for field in ('qpos', 'qvel', 'qacc_warmstart'):
    ours, theirs = np.asarray(getattr(d, field)), getattr(md, field)
    np.testing.assert_allclose(ours, theirs, rtol=1e-8, atol=1e-10, err_msg=field)
  np.testing.assert_array_equal(np.asarray(d.warning_counts),
                                [w.number for w in md.warning])


@pytest.mark.parametrize('edit', [
    {'qpos': (1, np.nan)}, {'qpos': (0, 2e10)}, {'qvel': (2, np.inf)}, {'qvel': (3, -1e11)},
    {'qpos': (1, np.nan), 'qvel': (2, np.inf)}],
    ids=['qpos_nan', 'qpos_huge', 'qvel_inf', 'qvel_huge', 'both'])
def test_bad_state_resets_as_mujoco(edit):
  md, d = _run(XML, edit)
  # the reset world integrated one step from the reset state (time = timestep)
  assert md.time == pytest.approx(0.005)
  _same_state(md, d)


def test_bad_qacc_resets_one_step_behind_mujoco():
  """A bad qacc: MuJoCo resets, runs forward again and integrates the reset state; our world
  ends the step at the reset state, and one more step gives MuJoCo's state."""
  md, d = _run(XML, {'qfrc_applied': (1, np.nan)})
  mj = mujoco.MjModel.from_xml_string(XML)
  reset = mujoco.MjData(mj)
  assert float(d.time) == 0 and md.time == pytest.approx(0.005)
  np.testing.assert_array_equal(np.asarray(d.qpos), reset.qpos)
  np.testing.assert_array_equal(np.asarray(d.qvel), reset.qvel)
  np.testing.assert_array_equal(np.asarray(d.warning_counts), [0, 0, 0, 0, 0, 0, 1, 0])
  m = mjx_py.from_xml_string(XML)
  _same_state(md, jax.jit(step)(m, d))


@pytest.mark.parametrize('edit', [{'qpos': (1, np.nan)}, {'qfrc_applied': (1, np.nan)}],
                         ids=['qpos_nan', 'qacc_nan'])
def test_bad_state_without_autoreset_counts_twice(edit):
  xml = XML.replace('<option timestep="0.005"/>',
                    '<option timestep="0.005"><flag autoreset="disable"/></option>')
  md, d = _run(xml, edit)
  counts = np.asarray(d.warning_counts)
  np.testing.assert_array_equal(counts, [w.number for w in md.warning])
  assert counts.sum() >= 2
  assert not np.all(np.isfinite(np.asarray(d.qpos)))


def test_vmap_resets_only_the_bad_world():
  m = mjx_py.from_xml_string(XML)
  d = mjx_py.make_data(m)
  qvel = jnp.asarray([[0.1, 0.0, 0.2, 0.0], [np.nan, 0.0, 0.0, 0.0], [0.0, -0.3, 0.0, 0.1]])
  batch = jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (3,) + x.shape), d)
  batch = batch.__class__(**{**vars(batch), 'qvel': qvel,
                             'qpos': batch.qpos.at[:, 1].set(0.05)})
  out = jax.jit(jax.vmap(step, in_axes=(None, 0)))(m, batch)
  for i in range(3):
    single = jax.jit(step)(m, jax.tree_util.tree_map(lambda x, i=i: x[i], batch))
    np.testing.assert_allclose(out.qpos[i], single.qpos, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(out.warning_counts[i], single.warning_counts)
  assert int(out.warning_counts[1, 5]) == 1 and int(out.warning_counts[0, 5]) == 0
  np.testing.assert_allclose(out.time, [0.005] * 3)


def test_nested_vmap_resets_only_the_bad_world():
  """Two nested vmaps (a 2 x 2 batch, the Model's timestep batched on the outer axis): only
  the world with the bad qpos is reset, in a step and in a bad qacc's reset after it."""
  m = mjx_py.from_xml_string(XML)
  d = mjx_py.make_data(m)
  qpos = jnp.broadcast_to(d.qpos.at[1].set(0.05), (2, 2, 4))
  qpos = qpos.at[1, 0, 1].set(np.nan)
  frc = jnp.zeros((2, 2, 4)).at[0, 1, 1].set(np.nan)
  batch = jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (2, 2) + x.shape), d)
  batch = batch.__class__(**{**vars(batch), 'qpos': qpos, 'qfrc_applied': frc})
  steps = jnp.asarray([0.005, 0.004])
  models = dataclasses.replace(m, opt=dataclasses.replace(m.opt, timestep=steps))
  axes = mjx_py.model_axes(m, ['opt.timestep'])
  out = jax.jit(jax.vmap(jax.vmap(step, in_axes=(None, 0)), in_axes=(axes, 0)))(models, batch)
  for i in range(2):
    mi = dataclasses.replace(m, opt=dataclasses.replace(m.opt, timestep=steps[i]))
    for j in range(2):
      single = jax.jit(step)(mi, jax.tree_util.tree_map(lambda x, i=i, j=j: x[i, j], batch))
      np.testing.assert_allclose(out.qpos[i, j], single.qpos, rtol=1e-12, atol=1e-12)
      np.testing.assert_array_equal(out.warning_counts[i, j], single.warning_counts)
  counts = np.asarray(out.warning_counts)
  assert counts[1, 0, 4] == 1 and counts[0, 1, 6] == 1
  assert counts[0, 0].sum() == 0 and counts[1, 1].sum() == 0
  np.testing.assert_allclose(out.time, [[0.005, 0.0], [0.004, 0.004]])


def _checked_loss(m, d, qvel):
  x = d.__class__(**{**vars(d), 'qvel': qvel, 'qpos': d.qpos.at[1].set(0.05)})
  x, _ = jax.lax.scan(lambda x, _: (step(m, x), None), x, None, length=3)
  return jnp.sum(x.qpos ** 2)


@functools.cache
def _checked_grad():
  """vmap(grad) of the squared qpos after 3 checked steps with respect to the initial qvel,
  jitted once for the tests below. Vmapped, so that batch_any's batching rule is in the
  program (tests/test_gradients.py takes unbatched gradients through step)."""
  m = mjx_py.from_xml_string(XML)
  d = mjx_py.make_data(m)
  return jax.jit(jax.vmap(jax.grad(functools.partial(_checked_loss, m, d))))


def test_gradient_through_checked_step_is_finite():
  g = _checked_grad()(jnp.asarray([[0.1, 0.0, 0.2, 0.0], [0.0, 0.1, -0.2, 0.3]]))
  assert np.all(np.isfinite(np.asarray(g))) and np.all(np.any(np.asarray(g) != 0, axis=1))


def test_reset_carries_no_derivative():
  """Differentiated, the reset is a select of a state without derivative: a world reset for a
  bad qvel (beyond 1e10) has a zero gradient with respect to that qvel, and a good world in
  the same batch the gradient it has in a batch without a bad world."""
  good = jnp.asarray([0.1, 0.0, 0.2, 0.0])
  mixed = np.asarray(_checked_grad()(jnp.stack([good, jnp.asarray([0.0, 2e10, 0.0, 0.0])])))
  alone = np.asarray(_checked_grad()(jnp.stack([good, good])))
  np.testing.assert_array_equal(mixed[1], 0.0)
  assert np.all(np.isfinite(mixed)) and np.any(mixed[0] != 0)
  np.testing.assert_allclose(mixed[0], alone[0], rtol=1e-5, atol=1e-7)


def test_njmax_overflow_drops_the_rows_and_counts():
  """The model on the floor needs contact and limit rows; with njmax below that count the
  world gets none (qacc = qacc_smooth) and warning_counts[2] grows."""
  full = mjx_py.from_xml_string(XML)
  xml = XML.replace('<option timestep="0.005"/>',
                    '<option timestep="0.005"/><size njmax="3"/>')
  small = mjx_py.from_xml_string(xml)
  assert small.nefc_max == 3 < full.nefc_max
  assert mjx_py.from_xml_string(XML, njmax=5).nefc_max == 5
  assert mjx_py.from_xml_string(XML, njmax=10 ** 6).nefc_max == full.nefc_max
  d = mjx_py.make_data(small)
  d = d.__class__(**{**vars(d), 'qpos': d.qpos.at[1].set(-0.25)})     # pressed into the floor
  assert d.efc_J.shape == (3, small.nv)
  out = jax.jit(mjx_py.forward)(small, d)
  ref = jax.jit(mjx_py.forward)(full, mjx_py.make_data(full).__class__(
      **{**vars(mjx_py.make_data(full)), 'qpos': d.qpos}))
  assert int(ref.nefc) > 3
  assert int(out.nefc) == 0 and int(out.warning_counts[2]) == 1
  np.testing.assert_allclose(out.qacc, out.qacc_smooth, rtol=0, atol=0)
  # a capacity that holds the rows changes nothing
  fits = mjx_py.from_xml_string(XML, njmax=int(ref.nefc))
  d2 = mjx_py.make_data(fits).__class__(**{**vars(mjx_py.make_data(fits)), 'qpos': d.qpos})
  out2 = jax.jit(mjx_py.forward)(fits, d2)
  assert int(out2.warning_counts[2]) == 0
  np.testing.assert_allclose(out2.qacc, ref.qacc, rtol=1e-10, atol=1e-10)
