"""forward() with the constraint solver on, against mj_forward, on every test model.

Four bundled models (BUNDLED), the scenes of tests/models/scenes/ and five feature models of
tests/models/ with constraints (FEATURES) run with one of the four solver / cone settings
(Newton or CG, pyramidal or elliptic, in turn over the sorted model list, so each setting covers a
quarter of the models), noslip off (tests/test_dual_solvers.py covers PGS and noslip) and a tighter
tolerance (1e-10, so that both sides are converged). States: a random perturbation of the reset
state (qpos0 or keyframe 0), and the state 40 mj_step steps later, with MuJoCo's warm start on both
sides. Compared in float64: ncon and nefc equal, efc_type / efc_id equal (the same rows in MuJoCo's
order), the solver statistics written into Data (solver_niter > 0 when there are rows, unless
MuJoCo's first iteration starts at the optimum: improvement and gradient exactly 0), and our qacc's
total cost (Gauss + constraint cost, evaluated by MuJoCo's mj_constraintUpdate) no larger
than MuJoCo's own (to 1e-10 relative). Where the problem is reasonably conditioned (every efc_D
below 1e12; a row whose regularizer R sits at MuJoCo's floor has D up to 1e15, and then two correct
solvers agree on the cost but not on qacc), also qacc and qfrc_constraint within 1e-6 relative (to
max(1, |ref|)), efc_force on the used rows within 1e-6 of the largest force, and efc_state equal
where the row's force is not at a state boundary. Both states run through one compiled
jit(forward) per model (oracle.ours).
"""

from __future__ import annotations

import copy
import glob
import os

import jax
import mujoco
import numpy as np
import oracle
import pytest
from oracle import ROOT

import mjx_py

SCENES = sorted(glob.glob(os.path.join(ROOT, 'tests', 'models', 'scenes', '*.xml')))
# the test models that exercise constraints (the others add compile time, not coverage)
# Left out to keep CI within its budget (each passed here before): the feature models joints_all,
# pairs_excludes, sensor_contacts, mesh_assets, hfield_assets, contact_params, collision_scene
# (the collision and sensor tests cover their contacts) and the bundled cartpole, chain20,
# finger_tendon, hopper and muscle_arm (limits and tendons: covered by the feature models)
FEATURES = ('constraint_rows', 'constraint_contacts', 'equality_all', 'actuators_general',
            'tendons_spatial')
BUNDLED = ('ant', 'arm7', 'box_stack', 'humanoid')
_OLD_FEATURES = FEATURES + ('contact_params', 'collision_scene', 'joints_all', 'sensor_contacts',
                            'pairs_excludes', 'mesh_assets', 'hfield_assets')
# every model keeps the index (so the setting and the random states) it had in the full list
_ALL = ([p for p in oracle.MODELS if os.path.dirname(p).endswith('models')
         and (os.path.basename(os.path.dirname(os.path.dirname(p))) != 'tests'
              or os.path.basename(p)[:-4] in _OLD_FEATURES)] + SCENES)
# with MJX_PY_LONG=1 only: the models whose contacts the CI already solves against MuJoCo in
# tests/test_rollout_contacts.py (and the box stack also in tests/test_dual_solvers.py)
LONG = ('box_stack', 'quadruped_hfield', 'arm_push')
CASES = [(i, p) for i, p in enumerate(_ALL)
         if (os.path.basename(p)[:-4] in (BUNDLED + FEATURES) or p in SCENES)
         and (os.environ.get('MJX_PY_LONG') or os.path.basename(p)[:-4] not in LONG)]
SETTINGS = [('Newton', 'pyramidal'), ('CG', 'elliptic'), ('Newton', 'elliptic'),
            ('CG', 'pyramidal')]
RTOL = 1e-6


@pytest.fixture(autouse=True, scope='module')
def _float64():
  with jax.enable_x64(True):
    yield


def _cost(mj, ref, qacc):
  """MuJoCo's total cost (Gauss + constraint) of qacc for the rows of ``ref``."""
  work = copy.copy(ref)
  n = ref.nefc
  jar = (oracle.dense_efc_J(mj, ref) @ qacc - ref.efc_aref[:n]).reshape(-1, 1)
  cost = np.zeros((1, 1))
  mujoco.mj_constraintUpdate(mj, work, jar, cost, 0)
  M = oracle.dense_qM(mj, ref)
  gauss = 0.5 * (M @ qacc - ref.qfrc_smooth) @ (qacc - ref.qacc_smooth)
  return gauss + cost[0, 0]


def _reordered(ours, theirs, tol):
  return not np.allclose(ours, theirs, atol=tol, rtol=0)


def _setting(i):
  solver, cone = SETTINGS[i % len(SETTINGS)]
  return (f'<option solver="{solver}" cone="{cone}" noslip_iterations="0" '
          'tolerance="1e-10"/>')


@pytest.mark.parametrize('i,path', CASES, ids=[oracle.model_id(p) for _, p in CASES])
def test_forward_with_constraints_matches_mujoco(i, path):
  mj, m, states, d = oracle.forward_case(path, _setting(i), i)
  for k, (ref, _) in enumerate(states):
    where = oracle.case_label(path, _setting(i), ref, d, k)
    assert int(d.ncon[k]) == ref.ncon, where
    assert int(d.nefc[k]) == ref.nefc, where
    n = ref.nefc
    np.testing.assert_array_equal(np.asarray(d.efc_type[k, :n]), ref.efc_type, where)
    np.testing.assert_array_equal(np.asarray(d.efc_id[k, :n]), ref.efc_id, where)
    assert np.all(np.asarray(d.efc_force[k, n:]) == 0), where
    assert np.all(np.asarray(d.efc_state[k, n:]) == -1), where
    # MuJoCo's first iteration can be a move of rounding size from a start that is already
    # optimal (every row satisfied at qacc_smooth: that iteration's improvement and gradient are
    # exactly 0); there its line search returning alpha 0 (no iteration) is as correct, and which
    # of the two happens is decided by the last bits of the start point's gradient
    at_optimum = ref.solver[0].improvement == 0 and ref.solver[0].gradient == 0
    if n and ref.solver_niter[0] >= 1 and not at_optimum:
      assert int(d.solver_niter[k]) >= 1, where
    if n:
      eig = np.linalg.eigvalsh(oracle.dense_qM(mj, ref))
      if eig.min() < 1e-9 * eig.max():
        continue   # (near-)singular mass matrix: MuJoCo clamps its factor (mjWARN_INERTIA)
      ours, theirs = _cost(mj, ref, np.asarray(d.qacc[k])), _cost(mj, ref, ref.qacc)
      assert ours <= theirs + 1e-10 * max(1.0, abs(theirs)), f'{where}: cost {ours} > {theirs}'
      if np.max(ref.efc_D) > 1e12:
        continue
    # rows and contact forces up to the order of the contacts within one geom pair (plane-mesh
    # contacts come in another order than qhull's faces give MuJoCo)
    force, scale = oracle.assert_solution_close(d, k, ref, where, RTOL)
    # mjx_py.contact_force (mj_contactForce of every contact)
    dk = jax.tree_util.tree_map(lambda x, k=k: x[k], d)
    ours_cf = np.asarray(mjx_py.contact_force(m, dk))[:ref.ncon]
    theirs_cf = np.zeros((ref.ncon, 6))
    for c in range(ref.ncon):
      mujoco.mj_contactForce(mj, ref, c, theirs_cf[c])
    ckey = [tuple(ref.contact.geom[c]) for c in range(ref.ncon)]
    np.testing.assert_allclose(oracle.by_pair(ours_cf, ckey), oracle.by_pair(theirs_cf, ckey),
                               atol=RTOL * scale, rtol=0, err_msg=where)
    if _reordered(force, ref.efc_force, RTOL * scale):
      continue
    # a row whose force is within rounding of a state boundary may be classified either way
    settled = np.abs(ref.efc_force) > 1e-9 * scale
    np.testing.assert_array_equal(np.asarray(d.efc_state[k, :n])[settled],
                                  ref.efc_state[settled], where)
