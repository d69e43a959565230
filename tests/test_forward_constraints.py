"""forward() with the constraint solver on, against mj_forward, on every test model.

Every bundled model (models/), the scenes of tests/models/scenes/ and the feature models of
tests/models/ that have constraints (FEATURES) run with one of the four solver
/ cone settings (Newton or CG, pyramidal or elliptic, in turn over the sorted model list, so each
setting covers a quarter of the models), noslip off (not implemented yet) and a tighter tolerance
(1e-10, so that both sides are converged). States: a random perturbation of the reset state (qpos0
or keyframe 0), and the state 40 mj_step steps later, with MuJoCo's warm start on both sides.
Compared in float64: ncon and nefc equal, efc_type / efc_id equal (the same rows in MuJoCo's
order), the solver statistics written into Data (solver_niter > 0 when there are rows), and our
qacc's total cost (Gauss + constraint cost, evaluated by MuJoCo's mj_constraintUpdate) no larger
than MuJoCo's own (to 1e-10 relative). Where the problem is reasonably conditioned (every efc_D
below 1e12; a row whose regularizer R sits at MuJoCo's floor has D up to 1e15, and then two correct
solvers agree on the cost but not on qacc), also qacc and qfrc_constraint within 1e-6 relative (to
max(1, |ref|)), efc_force on the used rows within 1e-6 of the largest force, and efc_state equal
where the row's force is not at a state boundary. Both states run in one jit(vmap(forward)) call
per model.
"""

from __future__ import annotations

import copy
import glob
import os

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import oracle
import pytest
from oracle import ROOT

import mjx_py
from mjx_py.forward import forward

SCENES = sorted(glob.glob(os.path.join(ROOT, 'tests', 'models', 'scenes', '*.xml')))
# the test models that exercise constraints (the others add compile time, not coverage)
FEATURES = ('constraint_rows', 'constraint_contacts', 'equality_all', 'contact_params',
            'collision_scene', 'actuators_general', 'joints_all', 'tendons_spatial',
            'sensor_contacts', 'pairs_excludes', 'mesh_assets', 'hfield_assets')
MODELS = ([p for p in oracle.MODELS if os.path.dirname(p).endswith('models')
           and (os.path.basename(os.path.dirname(os.path.dirname(p))) != 'tests'
                or os.path.basename(p)[:-4] in FEATURES)] + SCENES)
SETTINGS = [('Newton', 'pyramidal'), ('CG', 'elliptic'), ('Newton', 'elliptic'),
            ('CG', 'pyramidal')]
RTOL = 1e-6


@pytest.fixture(autouse=True, scope='module')
def _float64():
  with jax.enable_x64(True):
    yield


def _states(mj, rng):
  """Two (MjData after mj_forward, the warm start it started from) pairs (see the module
  docstring; mj_forward overwrites qacc_warmstart with its solution)."""
  md = mujoco.MjData(mj)
  if mj.nkey:
    mujoco.mj_resetDataKeyframe(mj, md, 0)
  md.qpos[:] = oracle.random_state(mj, rng, qpos_scale=0.05, mocap=False).qpos + (
      md.qpos - mj.qpos0)
  for j in range(mj.njnt):                                  # renormalise quaternions
    adr = mj.jnt_qposadr[j]
    if mj.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE:
      md.qpos[adr + 3:adr + 7] /= np.linalg.norm(md.qpos[adr + 3:adr + 7])
    elif mj.jnt_type[j] == mujoco.mjtJoint.mjJNT_BALL:
      md.qpos[adr:adr + 4] /= np.linalg.norm(md.qpos[adr:adr + 4])
  md.qvel[:] = 0.3 * rng.standard_normal(mj.nv)
  if mj.nu:
    md.ctrl[:] = 0.3 * rng.uniform(-1, 1, mj.nu)
  out = []
  for k in range(41):
    if k in (0, 40):
      ref = mujoco.MjData(mj)
      for f in ('qpos', 'qvel', 'act', 'ctrl', 'mocap_pos', 'mocap_quat', 'qacc_warmstart'):
        getattr(ref, f)[:] = getattr(md, f)
      ref.time = md.time
      warm = md.qacc_warmstart.copy()
      mujoco.mj_forward(mj, ref)
      out.append((ref, warm))
    mujoco.mj_step(mj, md)
  return out


def _ours(m, states):
  fields = ('qpos', 'qvel', 'act', 'ctrl', 'mocap_pos', 'mocap_quat')
  d = mjx_py.make_data(m)
  refs = [r for r, _ in states]
  batch = {f: jnp.asarray(np.stack([getattr(r, f).reshape(getattr(d, f).shape)
                                    for r in refs])) for f in fields}
  batch['qacc_warmstart'] = jnp.asarray(np.stack([w for _, w in states]))
  batch['time'] = jnp.asarray([r.time for r in refs])
  d = jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (len(refs),) + x.shape), d)
  d = oracle.replace(d, **batch)
  # LLVM optimizations off: the compile dominates this test, the run is short
  return jax.jit(jax.vmap(forward, in_axes=(None, 0)),
                 compiler_options={'xla_backend_optimization_level': 0})(m, d)


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


def _pair_keys(ref, n):
  """Per efc row: (type, geom pair) for contact rows, (type, id) for the others."""
  keys = []
  for r in range(n):
    t, i = int(ref.efc_type[r]), int(ref.efc_id[r])
    keys.append((t,) + (tuple(ref.contact.geom[i]) if t >= 5 else (i,)))
  return keys


def _by_pair(values, keys):
  """values grouped by key, each group's entries sorted (lexicographically for rows)."""
  if not keys:
    return np.zeros((0, 1))
  out = []
  for key in sorted(set(keys)):
    group = np.asarray([v for v, k in zip(values, keys) if k == key]).reshape(
        sum(k == key for k in keys), -1)
    out.append(group[np.lexsort(group.T[::-1])])
  return np.concatenate(out)


def _reordered(ours, theirs, tol):
  return not np.allclose(ours, theirs, atol=tol, rtol=0)


def _setting(i):
  solver, cone = SETTINGS[i % len(SETTINGS)]
  return (f'<option solver="{solver}" cone="{cone}" noslip_iterations="0" '
          'tolerance="1e-10"/>')


@pytest.mark.parametrize('i,path', list(enumerate(MODELS)),
                         ids=[oracle.model_id(p) for p in MODELS])
def test_forward_with_constraints_matches_mujoco(i, path):
  xml = oracle.with_option(oracle.read(path), _setting(i))
  try:
    mj = mujoco.MjModel.from_xml_string(xml, _assets(path))
  except ValueError:
    mj = None
  if mj is None:
    pytest.skip('MuJoCo does not load this model from a string (includes / asset paths)')
  m = mjx_py.from_xml_string(xml, _assets(path))
  states = _states(mj, np.random.default_rng(i))
  if any(r.ncon > m.nconmax for r, _ in states):
    pytest.skip('more contacts than the default capacity')
  d = _ours(m, states)
  for k, (ref, _) in enumerate(states):
    where = (f'{oracle.model_id(path)} state {k} ({_setting(i)}; MuJoCo niter '
             f'{ref.solver_niter[0]}, ours {int(d.solver_niter[k])}, nefc {ref.nefc})')
    assert int(d.ncon[k]) == ref.ncon, where
    assert int(d.nefc[k]) == ref.nefc, where
    n = ref.nefc
    np.testing.assert_array_equal(np.asarray(d.efc_type[k, :n]), ref.efc_type, where)
    np.testing.assert_array_equal(np.asarray(d.efc_id[k, :n]), ref.efc_id, where)
    assert np.all(np.asarray(d.efc_force[k, n:]) == 0), where
    assert np.all(np.asarray(d.efc_state[k, n:]) == -1), where
    if n:
      assert int(d.solver_niter[k]) >= 1, where
      eig = np.linalg.eigvalsh(oracle.dense_qM(mj, ref))
      if eig.min() < 1e-9 * eig.max():
        continue   # (near-)singular mass matrix: MuJoCo clamps its factor (mjWARN_INERTIA)
      ours, theirs = _cost(mj, ref, np.asarray(d.qacc[k])), _cost(mj, ref, ref.qacc)
      assert ours <= theirs + 1e-10 * max(1.0, abs(theirs)), f'{where}: cost {ours} > {theirs}'
      if np.max(ref.efc_D) > 1e12:
        continue
    for field in ('qacc', 'qfrc_constraint'):
      ours, theirs = np.asarray(getattr(d, field)[k]), getattr(ref, field)
      err = np.max(np.abs(ours - theirs), initial=0) / max(1.0, np.abs(theirs).max(initial=0))
      assert err < RTOL, f'{where} {field}: relative error {err:.2e}'
    # rows and contact forces up to the order of the contacts within one geom pair (plane-mesh
    # contacts come in another order than qhull's faces give MuJoCo)
    force = np.asarray(d.efc_force[k, :n])
    scale = max(1.0, np.abs(ref.efc_force).max(initial=0))
    key = _pair_keys(ref, n)
    np.testing.assert_allclose(_by_pair(force, key), _by_pair(ref.efc_force, key),
                               atol=RTOL * scale, rtol=0, err_msg=where)
    # mjx_py.contact_force (mj_contactForce of every contact)
    dk = jax.tree_util.tree_map(lambda x, k=k: x[k], d)
    ours_cf = np.asarray(mjx_py.contact_force(m, dk))[:ref.ncon]
    theirs_cf = np.zeros((ref.ncon, 6))
    for c in range(ref.ncon):
      mujoco.mj_contactForce(mj, ref, c, theirs_cf[c])
    ckey = [tuple(ref.contact.geom[c]) for c in range(ref.ncon)]
    np.testing.assert_allclose(_by_pair(ours_cf, ckey), _by_pair(theirs_cf, ckey),
                               atol=RTOL * scale, rtol=0, err_msg=where)
    if _reordered(force, ref.efc_force, RTOL * scale):
      continue
    # a row whose force is within rounding of a state boundary may be classified either way
    settled = np.abs(ref.efc_force) > 1e-9 * scale
    np.testing.assert_array_equal(np.asarray(d.efc_state[k, :n])[settled],
                                  ref.efc_state[settled], where)


def _assets(path):
  """The files a model refers to (meshes, hfields, includes), by the names it uses."""
  folder = os.path.dirname(path)
  assets = {}
  for root, _, files in os.walk(folder):
    for f in files:
      if not f.endswith('.xml') or root != folder:
        full = os.path.join(root, f)
        with open(full, 'rb') as fh:
          assets[os.path.relpath(full, folder)] = fh.read()
  return assets
