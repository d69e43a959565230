"""Shared helpers for the tests that compare mjx_py with MuJoCo (the oracle).

Holds the test model paths, the loader that builds both engines' models from one XML, the random
states the parity tests start from, the writing of a state into MuJoCo's MjData and into our Data,
and the dense forms of MuJoCo's compressed outputs (actuator_moment, ten_J, qM, qDeriv).
"""

from __future__ import annotations

import dataclasses
import glob
import os
import re

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

import mjx_py

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# every test model: the bundled ones and the feature models under tests/models
MODELS = sorted(glob.glob(os.path.join(ROOT, 'models', '*.xml')) +
                glob.glob(os.path.join(ROOT, 'tests', 'models', '*.xml')))
# Compile options for a program that a test runs for long: LLVM's optimizations back on
# (tests/conftest.py turns them off for the session, whose cost is compilation). The convex
# and height-field contact searches' loops run about 6x slower at -O0: the height-field scene's
# collision took 3.3 s a call at -O0 and 0.5 s at -O2, for 4 s more compile (2-core CPU).
# It also gives back XLA's default split of the LLVM code into 32 parts built in parallel
# (the conftest builds one): at -O2 LLVM's time dominates, and a single part compiled slower
# (the gripper's float32 gradient 71 -> 87 s, the quadruped-on-terrain rollout 32 -> 38 s).
RUN_OPTIMIZED = {'xla_backend_optimization_level': 2, 'xla_cpu_parallel_codegen_split_count': 32}


def model_id(path):
  """The test id of a model file: its path relative to the repository root."""
  return os.path.relpath(path, ROOT)


# ---------------------------------------------------------------------------------------------
# models

def read(path):
  with open(path) as f:
    return f.read()


def with_option(xml, option):
  """The model with an <option> section appended (it wins over the model's own)."""
  return re.sub(r'</mujoco>\s*$', option + '</mujoco>', xml)


def both(xml=None, path=None):
  """(our Model, MjModel) from one XML text, or from the file ``path`` (which resolves includes).

  Our Model takes the caller's precision: build it inside ``jax.enable_x64(True)`` for float64.
  """
  if path is not None:
    return mjx_py.from_xml_path(path), mujoco.MjModel.from_xml_path(path)
  return mjx_py.from_xml_string(xml), mujoco.MjModel.from_xml_string(xml)


# ---------------------------------------------------------------------------------------------
# states

@dataclasses.dataclass
class State:
  """A random state; the parts that were not asked for are None."""
  qpos: np.ndarray
  qvel: np.ndarray | None = None
  mocap_pos: np.ndarray | None = None
  mocap_quat: np.ndarray | None = None
  ctrl: np.ndarray | None = None
  act: np.ndarray | None = None
  time: float | None = None

  def fields(self):
    """The parts that were drawn, by Data field name."""
    return {k: v for k, v in vars(self).items() if v is not None}


def random_state(mj, rng, *, qpos_scale=0.3, qvel_scale=None, mocap=True, ctrl_frac=None,
                 ctrl_scale=1.0, act_range=None, time_range=None):
  """A random State of ``mj``, drawn from ``rng`` in a fixed order (qpos, qvel, mocap, ctrl, act,
  time); each part after qpos is drawn only when asked for, so a test's numbers depend only on
  its own options.

  qpos: qpos0 + qpos_scale * normal, free and ball quaternions normalised.
  qvel: qvel_scale * normal (if qvel_scale is given).
  mocap (if mocap): body_pos of the mocap bodies + 0.1 * normal, unnormalised normal quaternions.
  ctrl (if ctrl_frac = (lo, hi) is given): controls with a ctrlrange uniform over that fraction
  of it (lo < 0 or hi > 1 reach beyond the range), the others ctrl_scale * normal.
  act (if act_range is given) uniform over it; time (if time_range is given) uniform over it.
  """
  qpos = mj.qpos0 + qpos_scale * rng.standard_normal(mj.nq)
  for j in range(mj.njnt):
    adr = mj.jnt_qposadr[j]
    if mj.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE:
      qpos[adr + 3:adr + 7] /= np.linalg.norm(qpos[adr + 3:adr + 7])
    elif mj.jnt_type[j] == mujoco.mjtJoint.mjJNT_BALL:
      qpos[adr:adr + 4] /= np.linalg.norm(qpos[adr:adr + 4])
  state = State(qpos)
  if qvel_scale is not None:
    state.qvel = qvel_scale * rng.standard_normal(mj.nv)
  if mocap:
    mocap_pos = mj.body_pos[mj.body_mocapid >= 0] if mj.nmocap else np.zeros((0, 3))
    state.mocap_pos = mocap_pos + 0.1 * rng.standard_normal(mocap_pos.shape)
    state.mocap_quat = rng.standard_normal((mj.nmocap, 4))
  if ctrl_frac is not None:
    lo, hi = mj.actuator_ctrlrange.T
    in_range = lo + (hi - lo) * rng.uniform(*ctrl_frac, mj.nu)
    state.ctrl = np.where(mj.actuator_ctrllimited > 0, in_range,
                          ctrl_scale * rng.standard_normal(mj.nu))
  if act_range is not None:
    state.act = rng.uniform(*act_range, mj.na)
  if time_range is not None:
    state.time = rng.uniform(*time_range)
  return state


def write_state(md, state):
  """Copies the drawn parts of ``state`` into MuJoCo's MjData."""
  for name, value in state.fields().items():
    if name == 'time':
      md.time = value
    else:
      getattr(md, name)[:] = value


def replace(d, **fields):
  """Our Data ``d`` with ``fields`` replaced (as jax arrays of the caller's precision)."""
  return dataclasses.replace(d, **{k: jnp.asarray(v) for k, v in fields.items()})


def make_data(m, **fields):
  """A fresh Data of our Model ``m`` holding ``fields``."""
  return replace(mjx_py.make_data(m), **fields)


# ---------------------------------------------------------------------------------------------
# MuJoCo's compressed outputs as dense arrays

def sparse_rows(mj, vals, rownnz, rowadr, colind, nrow):
  """(nrow, nv) dense form of MuJoCo's row-compressed ``vals``."""
  out = np.zeros((nrow, mj.nv))
  if nrow:
    mujoco.mju_sparse2dense(out, np.asarray(vals).reshape(-1), rownnz, rowadr,
                            np.asarray(colind).reshape(-1))
  return out


def dense_moment(mj, md):
  """actuator_moment as a dense (nu, nv) array (stored compressed in 3.3.3)."""
  return sparse_rows(mj, md.actuator_moment, md.moment_rownnz, md.moment_rowadr,
                     md.moment_colind, mj.nu)


def dense_ten_J(mj, md):
  """ten_J as a dense (ntendon, nv) array (MuJoCo stores it compressed in sparse mode)."""
  if mj.ntendon and mujoco.mj_isSparse(mj):
    return sparse_rows(mj, md.ten_J, md.ten_J_rownnz, md.ten_J_rowadr, md.ten_J_colind,
                       mj.ntendon)
  return np.array(md.ten_J).reshape(mj.ntendon, mj.nv)


def dense_efc_J(mj, md):
  """MuJoCo's constraint Jacobian (nefc, nv), dense (from its sparse form in sparse mode)."""
  n = md.nefc
  if mujoco.mj_isSparse(mj):
    return sparse_rows(mj, md.efc_J, md.efc_J_rownnz, md.efc_J_rowadr, md.efc_J_colind, n)
  return np.asarray(md.efc_J[:n * mj.nv]).reshape(n, mj.nv)


def dense_qM(mj, md):
  """The joint-space inertia qM as a dense (nv, nv) array."""
  full = np.zeros((mj.nv, mj.nv))
  mujoco.mj_fullM(mj, full, md.qM)
  return full


def dense_qderiv(mj, md):
  """qDeriv (d force / d qvel, compressed in the D_ layout) as a dense (nv, nv) array."""
  out = np.zeros((mj.nv, mj.nv))
  for i in range(mj.nv):
    adr = md.D_rowadr[i] + np.arange(md.D_rownnz[i])
    out[i, md.D_colind[adr]] = md.qDeriv[adr]
  return out


def fill_contacts(c, md, names):
  """Our contact buffer ``c`` (host arrays) with MuJoCo's rows md.contact[:md.ncon] in the
  fields ``names`` (exclude 3 is set by the constraint stage: written as 0)."""
  n = md.ncon
  fields = {}
  for name in names:
    blank = np.array(getattr(c, name))
    value = np.array([np.asarray(getattr(md.contact[i], name)) for i in range(n)])
    value = value.reshape((n,) + blank.shape[1:])
    blank[:n] = np.where(value == 3, 0, value) if name == 'exclude' else value
    fields[name] = blank
  return dataclasses.replace(c, **fields)


# ---------------------------------------------------------------------------------------------
# forward() with constraints against mj_forward (test_forward_constraints, test_dual_solvers)

def states(mj, rng):
  """Two (MjData after mj_forward, the warm start it started from) pairs: a random perturbation
  of the reset state (qpos0 or keyframe 0; qpos by 0.05, qvel 0.3 normal, ctrl 0.3 uniform),
  and the state 40 mj_step steps later, with MuJoCo's warm start (mj_forward overwrites
  qacc_warmstart with its solution, so it is saved before)."""
  md = mujoco.MjData(mj)
  if mj.nkey:
    mujoco.mj_resetDataKeyframe(mj, md, 0)
  md.qpos[:] = random_state(mj, rng, qpos_scale=0.05, mocap=False).qpos + (
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


def ours(m, states):
  """Our forward of the MjData ``states`` (pairs of states()), one jit(forward) program run on
  each (one compile: the states share their shapes), the results stacked along a leading axis.
  (A jit(vmap(forward)) of the two states traced and compiled about 7 s slower on the mesh bin;
  batched against per-world programs is tested in test_batch, vmap(step) with constraints, and
  test_collision_driver, the contacts.)"""
  fields = ('qpos', 'qvel', 'act', 'ctrl', 'mocap_pos', 'mocap_quat')
  d0 = mjx_py.make_data(m)
  forward = jax.jit(mjx_py.forward)
  out = []
  for ref, warm in states:
    new = {f: jnp.asarray(getattr(ref, f).reshape(getattr(d0, f).shape), getattr(d0, f).dtype)
           for f in fields}
    new['qacc_warmstart'] = jnp.asarray(warm, d0.qacc_warmstart.dtype)
    new['time'] = jnp.asarray(ref.time, d0.time.dtype)
    out.append(forward(m, replace(d0, **new)))
  return jax.tree_util.tree_map(lambda *x: jnp.stack(x), *out)


def pair_keys(ref, n):
  """Per efc row: (type, geom pair) for contact rows, (type, id) for the others."""
  keys = []
  for r in range(n):
    t, i = int(ref.efc_type[r]), int(ref.efc_id[r])
    keys.append((t,) + (tuple(ref.contact.geom[i]) if t >= 5 else (i,)))
  return keys


def by_pair(values, keys):
  """values grouped by key, each group's entries sorted (lexicographically for rows)."""
  if not keys:
    return np.zeros((0, 1))
  out = []
  for key in sorted(set(keys)):
    group = np.asarray([v for v, k in zip(values, keys) if k == key]).reshape(
        sum(k == key for k in keys), -1)
    out.append(group[np.lexsort(group.T[::-1])])
  return np.concatenate(out)


def assets(path):
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


def forward_case(path, option, seed):
  """The model at ``path`` with ``option`` appended: (MjModel, our Model, states(), our forward
  of them, stacked); asserts that MuJoCo's contacts fit our capacity."""
  xml = with_option(read(path), option)
  files = assets(path)
  mj = mujoco.MjModel.from_xml_string(xml, files)
  m = mjx_py.from_xml_string(xml, files)
  st = states(mj, np.random.default_rng(seed))
  assert all(r.ncon <= m.nconmax for r, _ in st), 'more contacts than the capacity'
  return mj, m, st, ours(m, st)


def case_label(path, option, ref, d, k):
  return (f'{model_id(path)} state {k} ({option}; MuJoCo niter {ref.solver_niter[0]}, ours '
          f'{int(d.solver_niter[k])}, nefc {ref.nefc})')


def assert_solution_close(d, k, ref, where, rtol):
  """qacc and qfrc_constraint within rtol relative (to max(1, |ref|)), efc_force within rtol of
  the largest force up to the order of contacts within one geom pair; returns (our forces,
  force scale)."""
  for field in ('qacc', 'qfrc_constraint'):
    mine, theirs = np.asarray(getattr(d, field)[k]), getattr(ref, field)
    err = np.max(np.abs(mine - theirs), initial=0) / max(1.0, np.abs(theirs).max(initial=0))
    assert err < rtol, f'{where} {field}: relative error {err:.2e}'
  n = ref.nefc
  force = np.asarray(d.efc_force[k, :n])
  scale = max(1.0, np.abs(ref.efc_force).max(initial=0))
  key = pair_keys(ref, n)
  np.testing.assert_allclose(by_pair(force, key), by_pair(ref.efc_force, key),
                             atol=rtol * scale, rtol=0, err_msg=where)
  return force, scale
