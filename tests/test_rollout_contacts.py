"""Rollouts with contacts, limits, friction and equality constraints against MuJoCo's mj_step.

Models: models/humanoid.xml (the "stand" keyframe raised 2 cm: it drops onto its feet and falls
under random motor commands), models/box_stack.xml (its "tumbled" keyframe; Newton followed by
the noslip solver, the model's noslip_iterations="2"), and the scenes in tests/models/scenes:
arm_push.xml (a 4-dof arm pushing a free box), quadruped_hfield.xml (a quadruped on a height
field), loops.xml (four-bar closed by a connect, a loop closed by a weld, a polycoef joint
coupling) and hand_grasp.xml (a 2-finger gripper grasping a box, elliptic cone, condim 4/6).

1. Parity (float64): 100 steps of one jitted ``lax.scan`` over ``mjx_py.step`` against 100
   ``mujoco.mj_step`` calls from the same state with the same smooth controls; qpos and qvel
   must agree to 1e-4 relative to max(1, |MuJoCo's value|) at every step.
2. Sanity (float32, the default precision): 5000 steps (with MJX_PY_LONG=1; 300 in CI, on
   two of the models) of the same scan: the state stays
   finite, |qvel| stays under a physical bound, free bodies stay above the ground and no
   warning counter (contact/constraint buffer overflow, bad qacc, bad ctrl) fires.

Each test compiles one jitted scan (one model, one precision, LLVM optimizations off: the compile
dominates) and calls it once. Runtime of the 5000-step version, measured with ``python -m pytest
tests/test_rollout_contacts.py -n 0 --durations=15`` on the 2-core development machine while
another pytest process was running (load ~3.5): 616 s, of which the 6 parity tests 195 s (14-50 s
each, nearly all XLA compilation) and the 6 float32 tests 417 s: quadruped_hfield 199 s (38 ms per
step, nearly all in the height-field collision: GJK/EPA over 8 prism slots for each of 4 shin-
hfield pairs), box_stack 101 s (~12 ms per step), the others 19-38 s (mostly compilation).
"""

from __future__ import annotations

import dataclasses
import os

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from oracle import ROOT, RUN_OPTIMIZED, read, with_option

import mjx_py

SCENES = os.path.join(ROOT, 'tests', 'models', 'scenes')
NSTEPS_PARITY = 100
# 5000 steps with MJX_PY_LONG=1 (the acceptance run); CI runs 300 to stay within its budget
NSTEPS_SANITY = 5000 if os.environ.get('MJX_PY_LONG') else 300
TOL = 1e-4


def _sines(center, amp, seed):
  """Smooth controls: center + amp * sin(2 pi f t) per actuator, with frequencies in
  [0.3, 1.5] Hz and signs drawn from ``seed``; they start at ``center`` (no jump at t = 0)."""
  center, amp = np.asarray(center, float), np.asarray(amp, float)
  rng = np.random.default_rng(seed)
  freq = rng.uniform(0.3, 1.5, center.shape) * rng.choice([-1.0, 1.0], center.shape)

  def controls(t):
    return center + amp * np.sin(2 * np.pi * freq * np.asarray(t)[:, None])
  return controls


def _grasp(t):
  """hand_grasp: close the fingers at once (targets past the object's faces: they squeeze),
  lift the palm 12 cm and put it down again every 2 s, fingers breathing by +-3 mm."""
  t = np.asarray(t)[:, None]
  lift = 0.06 * (1 - np.cos(2 * np.pi * 0.5 * t))
  fingers = 0.04 + 0.003 * np.sin(2 * np.pi * np.array([0.7, 0.9]) * t)
  return np.concatenate([lift, fingers], axis=1)


@dataclasses.dataclass(frozen=True)
class Case:
  path: str
  key: int | None = None    # keyframe of the initial state (None: qpos0)
  dz: float = 0.0           # raise the first free joint by this much
  sink: float = 0.0         # lower free joint k (k = 0, 1, ...) by (k + 1) * sink
  option: str | None = None  # an <option> section appended to the model
  controls: object = None    # t (n,) -> ctrl (n, nu)
  qvel_bound: float = 0.0    # sanity: max |qvel| over 5000 float32 steps (rad/s and m/s)
  z_min: float = 0.0         # sanity: lowest z of every free body's origin
  optimized: bool = False    # parity rollout compiled with LLVM's optimizations (RUN_OPTIMIZED)


# Sanity bounds. qvel_bound: 2.5-20 times the largest |qvel| MuJoCo reaches on the same 5000
# steps with the same controls (measured, quoted per case), and far below a blow-up (which
# passes 1e3 within a few steps). z_min: a free body's resting height of its origin minus
# about half its smallest half-size: lower means it sank into or through the ground.
CASES = {
    # MuJoCo (5000 steps): max |qvel| 40.2 (an arm joint as the falling body slaps the floor,
    # step 1840), torso z >= 0.077 (lying on the floor; the torso capsule has radius 0.07).
    'humanoid': Case(os.path.join(ROOT, 'models', 'humanoid.xml'), key=0, dz=0.02,
                     controls=_sines(np.zeros(21), 0.3 * np.ones(21), seed=0),
                     qvel_bound=100.0, z_min=0.03),
    # The keyframe rests every body exactly on the floor or on the box below it: such contacts
    # have dist = 0 up to rounding (MuJoCo -7e-18 where we compute -4e-17, or 0 where we
    # compute -2e-17), and whether a contact exists (dist < margin = 0) is then decided by
    # rounding. Sinking free body k by (k + 1) * 0.2 mm makes each resting contact penetrate
    # by >= 0.2 mm. MuJoCo: max |qvel| 7.1 (the ball's spin, step 25), min z 0.039 (the capsule
    # of radius 0.04 lying on the floor).
    # Run with the model's own noslip_iterations="2" (Newton, then the noslip solver).
    'box_stack': Case(os.path.join(ROOT, 'models', 'box_stack.xml'), key=0, sink=2e-4,
                      qvel_bound=30.0, z_min=0.02),
    # MuJoCo: max |qvel| 10.7 (the box's spin when the fingertip hits it, step 23); the box
    # (half-size 0.06) rests at z = 0.06.
    'arm_push': Case(os.path.join(SCENES, 'arm_push.xml'), key=0,
                     controls=_sines([0.6, 0.8, 0.3, -0.2], [0.15, 0.12, 0.13, 0.1], seed=1),
                     qvel_bound=40.0, z_min=0.03),
    # MuJoCo: max |qvel| 4.6, torso z 0.31-0.33 (it stays standing); lying on the plane it
    # would be 0.04 (the torso's half-height).
    'quadruped_hfield': Case(os.path.join(SCENES, 'quadruped_hfield.xml'), key=0,
                             controls=_sines(np.zeros(8), 0.3 * np.ones(8), seed=2),
                             qvel_bound=30.0, z_min=0.02, optimized=True),
    # MuJoCo: max |qvel| 7.2 (the four-bar's coupler, step 7); no free bodies, no contacts.
    'loops': Case(os.path.join(SCENES, 'loops.xml'), key=0,
                  controls=_sines([0.0, 0.0], [0.5, 0.5], seed=3), qvel_bound=40.0),
    # MuJoCo: max |qvel| 0.56; the object (half-size 0.025) is lifted to z = 0.136 and put down
    # again every 2 s, resting at z = 0.025.
    'hand_grasp': Case(os.path.join(SCENES, 'hand_grasp.xml'), key=0, controls=_grasp,
                       qvel_bound=10.0, z_min=0.0125),
}


@pytest.fixture(autouse=True, scope='module')
def _float64():
  """float64 for this module only (the global flag would leak into later test modules); the
  float32 sanity rollouts switch it off inside."""
  with jax.enable_x64(True):
    yield


# ---------------------------------------------------------------------------------------------
# rollouts

def _scan(m, d, ctrls):
  """``len(ctrls)`` steps from ``d``, ctrl set before each: (last Data, (qpos, qvel, ncon))."""
  def body(d, ctrl):
    d = mjx_py.step(m, dataclasses.replace(d, ctrl=ctrl))
    return d, (d.qpos, d.qvel, d.ncon)
  return jax.lax.scan(body, d, ctrls)


# one jit for every model and both precisions: its cache holds one executable per (model,
# precision); the scan length is a shape, so 100 and 5000 steps at one precision would share it
_ROLLOUT = jax.jit(_scan)
# the height field's contacts go through the convex search, whose loops run several times slower
# at -O0: 100 steps took about 60 s there (2-core CPU)
_ROLLOUT_OPTIMIZED = jax.jit(_scan, compiler_options=RUN_OPTIMIZED)


def _switch_precision():
  """Clears JAX's caches before tracing in the other precision. JAX 0.10.2 fails to retrace a
  function that indexes with a module-level int64 numpy array (mjx_py's collision tables, e.g.
  primitive._EDGE_ROWS) after it was traced under the other enable_x64 setting ("lax.add
  requires arguments to have the same dtypes, got int32, int64"); int32 tables do not have the
  problem. Nothing compiled is lost: each test compiles its own model."""
  jax.clear_caches()


def _mujoco_model(case):
  if case.option is None:
    return mujoco.MjModel.from_xml_path(case.path)
  return mujoco.MjModel.from_xml_string(with_option(read(case.path), case.option))


def _our_model(case):
  if case.option is None:
    return mjx_py.from_xml_path(case.path)
  return mjx_py.from_xml_string(with_option(read(case.path), case.option))


def _initial(case, mj):
  """MuJoCo's initial MjData: the keyframe, the first free joint raised by ``case.dz``, free
  joint k lowered by (k + 1) * ``case.sink``."""
  md = mujoco.MjData(mj)
  if case.key is not None:
    mujoco.mj_resetDataKeyframe(mj, md, case.key)
  zadr = _free_bodies(mj)
  if case.dz and zadr.size:
    md.qpos[zadr[0]] += case.dz
  md.qpos[zadr] -= case.sink * np.arange(1, zadr.size + 1)
  return md


def _controls(case, mj, nsteps):
  """(nsteps, nu) controls; row i is applied before step i (at time i * timestep)."""
  if case.controls is None or not mj.nu:
    return np.zeros((nsteps, mj.nu))
  return case.controls(np.arange(nsteps) * mj.opt.timestep)


def _our_initial(m, md):
  """Our Data holding MuJoCo's state. The arrays are copied first: jnp.asarray may alias a
  numpy buffer on CPU, and mj_step writes MjData's arrays in place."""
  d = mjx_py.make_data(m)
  fields = {'qpos': md.qpos, 'qvel': md.qvel, 'act': md.act, 'ctrl': md.ctrl}
  return dataclasses.replace(
      d, **{k: jnp.asarray(np.array(v), d.qpos.dtype) for k, v in fields.items()})


def _free_bodies(mj):
  """qpos addresses of the z coordinate of every free joint."""
  free = np.flatnonzero(mj.jnt_type == mujoco.mjtJoint.mjJNT_FREE)
  return mj.jnt_qposadr[free] + 2


# ---------------------------------------------------------------------------------------------
# 1. parity with mj_step, float64

# Measured (float64, 100 steps, max over steps and coordinates of |ours - MuJoCo| /
# max(1, |MuJoCo|); the same contact count as MuJoCo at every step in every model):
#   model             qpos      qvel      contacts (max)  constraint rows (max)
#   humanoid          3.4e-13   6.3e-12    8               33
#   box_stack         1.1e-15   2.1e-14   29              108
#   arm_push          3.1e-14   1.8e-12    6               24
#   quadruped_hfield  8.5e-16   6.4e-14    4               16
#   loops             5.1e-15   9.4e-14    0               11 (equality and limit rows)
#   hand_grasp        4.4e-16   2.2e-14   12               64 (elliptic)
@pytest.mark.parametrize('name', list(CASES))
def test_rollout_matches_mujoco(name):
  _switch_precision()
  case = CASES[name]
  mj = _mujoco_model(case)
  m = _our_model(case)
  md = _initial(case, mj)
  ctrls = _controls(case, mj, NSTEPS_PARITY)
  d0 = _our_initial(m, md)

  ref_qpos, ref_qvel, ref_ncon = [], [], []
  for ctrl in ctrls:
    md.ctrl[:] = ctrl
    mujoco.mj_step(mj, md)
    ref_qpos.append(md.qpos.copy())
    ref_qvel.append(md.qvel.copy())
    ref_ncon.append(md.ncon)
  rollout = _ROLLOUT_OPTIMIZED if case.optimized else _ROLLOUT
  _, (qpos, qvel, ncon) = rollout(m, d0, jnp.asarray(ctrls))
  assert qpos.dtype == jnp.float64

  errors = {}
  for field, ours, ref in (('qpos', qpos, ref_qpos), ('qvel', qvel, ref_qvel)):
    ref = np.asarray(ref)
    err = np.abs(np.asarray(ours) - ref) / np.maximum(1.0, np.abs(ref))
    errors[field] = err
  worst = max(float(e.max()) for e in errors.values())
  if worst > TOL:
    # the first step where either field leaves the tolerance, and where
    step = min(int(np.argmax(e.max(axis=1) > TOL)) for e in errors.values() if e.max() > TOL)
    detail = {f: (int(np.argmax(e[step])), float(e[step].max())) for f, e in errors.items()}
    pytest.fail(f'{name}: max error {worst:.3g} > {TOL}; first bad step {step} '
                f'(ncon ours {int(ncon[step])}, MuJoCo {ref_ncon[step]}); '
                f'field: (index, error) at that step {detail}')
  np.testing.assert_array_equal(np.asarray(ncon), ref_ncon)


# ---------------------------------------------------------------------------------------------
# 2. long float32 rollouts: finite, bounded, above the ground, no warnings

# CI runs the float32 sanity check on the humanoid and the gripper (the others cost 20-75 s
# each of the CI budget; their float64 parity runs stay); MJX_PY_LONG=1 runs every case
SANITY = list(CASES) if os.environ.get('MJX_PY_LONG') else ['humanoid', 'hand_grasp']


@pytest.mark.parametrize('name', SANITY)
def test_rollout_float32_sane(name):
  case = CASES[name]
  mj = _mujoco_model(case)
  md = _initial(case, mj)
  ctrls = _controls(case, mj, NSTEPS_SANITY)
  _switch_precision()
  with jax.enable_x64(False):
    m = _our_model(case)
    d0 = _our_initial(m, md)
    d, (qpos, qvel, ncon) = _ROLLOUT(m, d0, jnp.asarray(ctrls, jnp.float32))
    assert qpos.dtype == jnp.float32
    qpos, qvel, ncon = np.asarray(qpos), np.asarray(qvel), np.asarray(ncon)
    warnings = np.asarray(d.warning_counts)

  assert np.all(np.isfinite(qpos)) and np.all(np.isfinite(qvel)), name
  speed = np.abs(qvel).max()
  assert speed < case.qvel_bound, (name, speed)
  zadr = _free_bodies(mj)
  if zadr.size:
    lowest = qpos[:, zadr].min()
    assert lowest > case.z_min, (name, lowest)
  # mjtWarning: inertia, contactfull, cnstrfull, vgeomfull, badqpos, badqvel, badqacc, badctrl
  assert not warnings.any(), (name, warnings)
  if mj.ngeom > 1 and name != 'loops':
    assert ncon.max() > 0, name   # the rollout exercised contacts
