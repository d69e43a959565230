"""mjx_py.fit_capacity against MuJoCo: the probe's peak contact and row counts are MuJoCo's over
the same rollouts, and the Model at the fitted capacities gives mj_forward's accelerations and
forces on the probe's states.

Model: tests/models/scenes/arm_push.xml (a 4-dof arm pushing a free box from its keyframe:
box-plane, sphere-box and capsule-box contacts, condim 3, pyramidal rows, joint limits; at
most 6 contacts and 24 rows under these random position targets, of the default capacities'
23 contacts and 100 rows). Float64; the probe compiles twice (the default capacities and the
fitted ones), the overflow test a third time at nconmax 2.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from oracle import ROOT

import mjx_py
from mjx_py import capacity, constraint

PATH = f'{ROOT}/tests/models/scenes/arm_push.xml'
NSTEP, BATCH = 120, 3


def _controls(mj, seed=3):
  """(NSTEP, BATCH, nu) random position targets, uniform in the control ranges."""
  lo, hi = mj.actuator_ctrlrange.T
  rng = np.random.default_rng(seed)
  return lo + (hi - lo) * rng.random((NSTEP, BATCH, mj.nu))


def _mujoco_rollouts(mj, ctrl):
  """MuJoCo's rollouts of each world's controls from keyframe 0: per world the most contacts
  and rows after each mj_step, and the (qpos, qvel, ctrl, qacc_warmstart) before every 10th
  step."""
  md = mujoco.MjData(mj)
  peaks, states = [], []
  for w in range(ctrl.shape[1]):
    mujoco.mj_resetDataKeyframe(mj, md, 0)
    ncon = nefc = 0
    for t in range(ctrl.shape[0]):
      md.ctrl[:] = ctrl[t, w]
      if t % 10 == 5:
        states.append((md.qpos.copy(), md.qvel.copy(), md.ctrl.copy(),
                       md.qacc_warmstart.copy()))
      mujoco.mj_step(mj, md)
      ncon, nefc = max(ncon, md.ncon), max(nefc, md.nefc)
    peaks.append((ncon, nefc))
  return np.max(peaks, axis=0), states


@pytest.fixture(scope='module')
def case():
  mj = mujoco.MjModel.from_xml_path(PATH)
  ctrl = _controls(mj)
  peak, states = _mujoco_rollouts(mj, ctrl)
  with jax.enable_x64(True):
    m = mjx_py.from_xml_path(PATH)
    d = mjx_py.reset_data(m, key=0)
    fit = mjx_py.fit_capacity(m, d, batch=BATCH, nstep=NSTEP, ctrl=ctrl)
  return mj, m, d, ctrl, peak, states, fit


def test_probe_peaks_are_mujocos(case):
  mj, m, _, _, peak, _, fit = case
  assert (fit.ncon, fit.nefc) == tuple(int(x) for x in peak)
  assert fit.ncon >= 4 and fit.probed == NSTEP * BATCH and fit.pairs_cut == 0
  # the fit: max(peak + 4, ceil(1.5 peak)), within the defaults
  assert fit.nconmax == min(m.nconmax, max(fit.ncon + 4, math.ceil(1.5 * fit.ncon)))
  assert fit.njmax == min(m.nefc_max, max(fit.nefc + 4, math.ceil(1.5 * fit.nefc)))
  assert fit.nconmax < m.nconmax and fit.njmax < m.nefc_max and fit.npairmax == m.npairmax
  assert fit.kwargs() == {'nconmax': fit.nconmax, 'njmax': fit.njmax, 'npairmax': m.npairmax}


def test_fitted_model_matches_mj_forward(case):
  """At the fitted capacities: the probe again sees the same peaks and no overflow, and
  forward on MuJoCo's states gives mj_forward's qacc and constraint forces."""
  mj, _, _, ctrl, peak, states, fit = case
  md = mujoco.MjData(mj)
  with jax.enable_x64(True):
    m = fit.apply(mjx_py.from_xml_path(PATH))
    assert (m.nconmax, m.nefc_max, m.npairmax) == (fit.nconmax, fit.njmax, fit.npairmax)
    # a capacity cut below every row the model can produce has one row bucket, two thirds of
    # it (constraint.row_buckets), which the probe's most rows fit: the iterations below run on it
    bucket = -(-math.ceil(2 * m.nefc_max / 3) // 8) * 8
    assert constraint.rows_needed(m) > m.nefc_max and constraint.model_row_buckets(m) == (bucket,)
    assert fit.nefc <= bucket < m.nefc_max
    again = mjx_py.fit_capacity(m, mjx_py.reset_data(m, key=0), batch=BATCH, nstep=NSTEP,
                                ctrl=ctrl)
    assert (again.ncon, again.nefc) == tuple(int(x) for x in peak)
    d0 = mjx_py.make_data(m)
    batch = {k: jnp.asarray(np.stack([s[i] for s in states]))
             for i, k in enumerate(('qpos', 'qvel', 'ctrl', 'qacc_warmstart'))}
    d = jax.vmap(lambda x: d0.__class__(**{**vars(d0), **x}))(batch)
    out = jax.jit(jax.vmap(lambda d: mjx_py.forward(m, d)))(d)
  for k, (qpos, qvel, u, warm) in enumerate(states):
    md.qpos[:], md.qvel[:], md.ctrl[:], md.qacc_warmstart[:] = qpos, qvel, u, warm
    mujoco.mj_forward(mj, md)
    assert int(out.ncon[k]) == md.ncon and int(out.nefc[k]) == md.nefc
    np.testing.assert_allclose(out.qacc[k], md.qacc, rtol=1e-8, atol=1e-8 * (
        1 + np.abs(md.qacc).max()))
    force = np.asarray(out.efc_force[k])
    np.testing.assert_allclose(force[:md.nefc], md.efc_force, rtol=1e-7,
                               atol=1e-7 * (1 + np.abs(md.efc_force).max()))
    assert not force[md.nefc:].any()


def test_probe_that_fills_the_capacity_raises(case):
  _, _, _, ctrl, _, _, _ = case
  with jax.enable_x64(True):
    m = mjx_py.from_xml_path(PATH, nconmax=2)
    with pytest.raises(mjx_py.CapacityError, match='nconmax=2'):
      mjx_py.fit_capacity(m, mjx_py.reset_data(m, key=0), batch=BATCH, nstep=NSTEP,
                          ctrl=ctrl)


def test_bad_arguments_raise(case):
  _, m, d, ctrl, _, _, _ = case
  with pytest.raises(ValueError, match='ctrl has shape'):
    mjx_py.fit_capacity(m, d, batch=BATCH, nstep=NSTEP + 1, ctrl=ctrl)
  with pytest.raises(ValueError, match='margin'):
    mjx_py.fit_capacity(m, d, margin=0.5)
  with pytest.raises(ValueError, match='positive'):
    mjx_py.fit_capacity(m, d, nstep=0)


@pytest.mark.parametrize('kw', [{'nconmax': 7, 'njmax': 25, 'npairmax': 12}, {'nconmax': 3},
                                {'njmax': 10}, {}])
def test_with_capacity_is_put_models(kw):
  """with_capacity(m, ...) is the Model put_model builds from the MJCF with those capacities
  (its pair capacity kept when not given), leaf for leaf and in its static fields."""
  arrays = mjx_py.mjcf.compile_file(PATH)
  m = mjx_py.put_model(arrays)
  got = mjx_py.with_capacity(m, **kw)
  want = mjx_py.put_model(arrays, **{'npairmax': m.npairmax, **kw})
  leaves, tree = jax.tree_util.tree_flatten(got)
  ref_leaves, ref_tree = jax.tree_util.tree_flatten(want)
  assert tree == ref_tree
  assert all(np.array_equal(a, b) for a, b in zip(leaves, ref_leaves))
  fit = capacity.Capacity(4, 9, 2, 0, 0, 0, 0)
  assert (fit.apply(m).nconmax, fit.apply(m).nefc_max, fit.apply(m).npairmax) == (4, 9, 2)
  with pytest.raises(ValueError, match='njmax'):
    mjx_py.with_capacity(m, njmax=-1)
  with pytest.raises(ValueError, match='nconmax'):
    mjx_py.with_capacity(m, nconmax=2.5)


def test_fitted_rule():
  assert capacity.fitted(0, 54) == 4
  assert capacity.fitted(11, 54) == 17
  assert capacity.fitted(35, 262) == 53
  assert capacity.fitted(40, 50) == 50
  assert capacity.fitted(3, 54, margin=1.0, extra=0) == 3
