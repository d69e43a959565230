"""The constraint solver (mjx_py.solver: mj_fwdConstraint's Newton and CG) against MuJoCo 3.3.3's
mj_forward, in float64, and its implicit gradients.

States come from MuJoCo rollouts (mj_step, some with random controls); for each, MuJoCo's
mj_forward from the state and the warm start it had gives the reference. Our side gets
MuJoCo's position-stage results, contacts, qM, qfrc_smooth, qacc_smooth and qacc_warmstart,
builds the rows with make_constraint (their parity is tests/test_constraint_rows.py's) and
solves; all states of a case run in one jit(vmap(...)) call.

1. Newton (constraint_rows.xml: equality, friction loss, limits and contacts, pyramidal and
   elliptic cones; box_stack.xml: elliptic cones of condim 3, 4 and 6) and CG (humanoid.xml
   falling, with random controls and warm start disabled): qacc, efc_force (used rows),
   qfrc_constraint within 1e-6 relative (measured: ~1e-13); efc_state equal; the same
   iteration count, line-search evaluations and active rows per iteration as MuJoCo (the
   exact algorithm); states without rows;
   contact.H of the cones in the middle zone; extra states whose warm start is perturbed, so
   that both branches of the warm-start choice are taken.
2. vmap equals a loop of single-world calls.
3. Gradients of a scalar of qacc with respect to qvel and to a geom's friction, through our
   whole pipeline up to the solve: finite in float32, equal to central finite differences in
   float64 where the active set does not change (both cones; sliding and sticking contacts, a
   limit and a friction-loss row).
   The same with PGS (iterated to convergence): its gradients are the same implicit ones.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import time

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from oracle import ROOT, dense_qM, dense_ten_J, fill_contacts, read, with_option

import mjx_py
from mjx_py import actuation, constraint, solver
from mjx_py.data import EMPTY_DIST
from mjx_py.forward import fwd_acceleration, fwd_position, fwd_velocity

MODELS = os.path.join(ROOT, 'models')
ROWS = os.path.join(ROOT, 'tests', 'models', 'constraint_rows.xml')
BOX = os.path.join(MODELS, 'box_stack.xml')
HUMANOID = os.path.join(MODELS, 'humanoid.xml')
RTOL = 1e-6
CONTACT_IN = ('dist', 'pos', 'frame', 'includemargin', 'friction', 'solref', 'solreffriction',
              'solimp', 'dim', 'geom1', 'geom2', 'geom', 'exclude')


@pytest.fixture(autouse=True, scope='module')
def _float64():
  """float64 for this module only (the global flag would leak into later test modules)."""
  with jax.enable_x64(True):
    yield


# ---------------------------------------------------------------------------------------------
# MuJoCo states in our Data

def _zeros(fn, *args):
  """fn(*args) with every leaf zero, built on the host from its shapes."""
  return jax.tree_util.tree_map(lambda s: np.zeros(s.shape, s.dtype), jax.eval_shape(fn, *args))


def _base(m):
  """Our Data before the rows: zeros, sentinels in the efc and contact buffers (host)."""
  d = _zeros(mjx_py.make_data, m)
  c = d.contact
  ids = {k: np.full_like(getattr(c, k), -1) for k in ('geom1', 'geom2', 'geom', 'efc_address')}
  c = dataclasses.replace(c, dist=np.full_like(c.dist, EMPTY_DIST), **ids)
  unused = np.full_like(d.efc_type, -1)
  return dataclasses.replace(d, contact=c, efc_type=unused, efc_id=unused)


def _world(m, mj, md, warm, base):
  """Our Data (host arrays) holding MuJoCo's state, position-stage results, contacts and
  smooth dynamics after mj_forward, and the warm start ``warm`` it started from."""
  assert md.ncon <= m.nconmax
  c = fill_contacts(base.contact, md, CONTACT_IN)
  values = dict(xpos=md.xpos, xquat=md.xquat, xmat=md.xmat, site_xpos=md.site_xpos,
                subtree_com=md.subtree_com, cdof=md.cdof, ten_length=md.ten_length,
                ten_J=dense_ten_J(mj, md), qM=dense_qM(mj, md), qfrc_smooth=md.qfrc_smooth,
                qacc_smooth=md.qacc_smooth, qacc_warmstart=warm, qpos=md.qpos, qvel=md.qvel,
                eq_active=md.eq_active)
  values = {k: np.array(v, getattr(base, k).dtype).reshape(getattr(base, k).shape)
            for k, v in values.items()}
  return dataclasses.replace(base, contact=c, ncon=np.int32(md.ncon), **values)


def _forward_from(mj, md, warm):
  """MuJoCo's mj_forward from md's state with the warm start ``warm``."""
  out = mujoco.MjData(mj)
  out.qpos[:], out.qvel[:], out.act[:], out.ctrl[:] = md.qpos, md.qvel, md.act, md.ctrl
  out.qacc_warmstart[:] = warm
  out.time = md.time
  mujoco.mj_forward(mj, out)
  return out


def _rollout(mj, nsteps, every, key=None, ctrl=0.0, perturb=(), seed=0):
  """States every ``every`` steps of an mj_step rollout (random controls of scale ``ctrl``):
  a list of (mj_forward result, warm start). For the snapshot indices in ``perturb`` a second
  state starts from a perturbed warm start (zero for even indices, far off for odd ones)."""
  rng = np.random.default_rng(seed)
  md = mujoco.MjData(mj)
  if key is not None:
    mujoco.mj_resetDataKeyframe(mj, md, key)
  out = []
  for k in range(nsteps):
    if ctrl and mj.nu:
      md.ctrl[:] = ctrl * rng.uniform(-1, 1, mj.nu)
    if k % every == every - 1:
      warm = md.qacc_warmstart.copy()
      out.append((_forward_from(mj, md, warm), warm))
      if len(out) - 1 in perturb:
        far = warm + 50 * (1 + np.abs(warm)) * rng.standard_normal(warm.shape)
        bad = np.zeros_like(warm) if len(out) % 2 else far
        out.append((_forward_from(mj, md, bad), bad))
    mujoco.mj_step(mj, md)
  return out


def _models(path, option):
  xml = with_option(read(path), option)
  return mjx_py.from_xml_string(xml), mujoco.MjModel.from_xml_string(xml)


def _batch(m, mj, states):
  base = _base(m)
  worlds = [_world(m, mj, md, warm, base) for md, warm in states]
  return jax.tree_util.tree_map(lambda *x: np.stack(x), *worlds)


def _rows_solve(m, d):
  d = constraint.make_constraint(m, d)
  return solver.solve_info(m, d)


def _pick(tree, k):
  return jax.tree_util.tree_map(lambda x: x[k], tree)


def _rel(ours, theirs):
  """max |ours - theirs| / max(1, max |theirs|)."""
  ours, theirs = np.asarray(ours), np.asarray(theirs)
  if not theirs.size:
    return 0.0
  return float(np.max(np.abs(ours - theirs)) / max(1.0, float(np.max(np.abs(theirs)))))


def _compare(m, mj, md, d, sol, label):
  """One world against MuJoCo; returns (largest relative error, iterations)."""
  n = md.nefc
  assert int(d.nefc) == n, label
  errs = [_rel(d.qacc, md.qacc), _rel(sol.efc_force[:n], md.efc_force),
          _rel(d.qfrc_constraint, md.qfrc_constraint)]
  for name, e in zip(('qacc', 'efc_force', 'qfrc_constraint'), errs):
    assert e <= RTOL, f'{label}: {name} error {e:.3g}'
  np.testing.assert_array_equal(sol.efc_state[:n], md.efc_state, err_msg=label)
  assert np.all(np.asarray(sol.efc_state[n:]) == -1) and not np.any(sol.efc_force[n:]), label
  niter = int(sol.solver_niter)
  assert niter == md.solver_niter[0], f'{label}: {niter} iterations, MuJoCo {md.solver_niter[0]}'
  neval = [md.solver[i].neval for i in range(niter)]
  np.testing.assert_array_equal(sol.solver_neval[:niter], neval, err_msg=f'{label}: neval')
  nactive = [md.solver[i].nactive for i in range(niter)]
  np.testing.assert_array_equal(sol.solver_nactive[:niter], nactive, err_msg=f'{label}: nactive')
  assert not np.any(sol.solver_neval[niter:]), label
  # the cone Hessians of the contacts in the middle zone (MuJoCo leaves the others stale)
  for i in range(md.ncon):
    adr, dim = md.contact[i].efc_address, md.contact[i].dim
    if adr >= 0 and md.efc_state[adr] == mujoco.mjtConstraintState.mjCNSTRSTATE_CONE:
      errs.append(_rel(d.contact.H[i, :dim * dim], md.contact[i].H[:dim * dim]))
      assert errs[-1] <= RTOL, f'{label}: contact {i} H'
  return max(errs), niter


PERTURB = (0, 1, 3)
NEWTON_ELLIPTIC = '<option noslip_iterations="0"/>'  # box_stack: elliptic, impratio 5
# label, model, option, rollout (steps, every, keyframe, control scale)
CASES = [
    ('rows_newton_pyramidal', ROWS, '<option jacobian="dense"/>', (60, 10, None, 0.0)),
    ('rows_newton_elliptic', ROWS, '<option jacobian="dense" cone="elliptic" impratio="2"/>',
     (60, 10, None, 0.0)),
    ('box_newton_elliptic', BOX, NEWTON_ELLIPTIC, (100, 20, 0, 0.0)),
    ('humanoid_cg_coldstart', HUMANOID,
     '<option solver="CG"><flag warmstart="disable"/></option>', (400, 50, None, 0.5)),
]
_CACHE = {}


def _case(label, path, option, roll):
  """(Model, MjModel, states, batched Data, results of the jit(vmap) solve, its timings), built
  once per case and shared by the tests of this module."""
  if label not in _CACHE:
    m, mj = _models(path, option)
    nsteps, every, key, ctrl = roll
    states = _rollout(mj, nsteps, every, key, ctrl, perturb=PERTURB)
    batch = _batch(m, mj, states)
    fn = jax.jit(jax.vmap(lambda d: _rows_solve(m, d)))
    t0 = time.perf_counter()
    out = jax.device_get(fn(batch))
    t1 = time.perf_counter()
    jax.block_until_ready(fn(batch))
    t2 = time.perf_counter()
    _CACHE[label] = (m, mj, states, batch, out, (t1 - t0, t2 - t1))
  return _CACHE[label]


@pytest.mark.parametrize('label,path,option,roll', CASES, ids=[c[0] for c in CASES])
def test_solver_matches_mujoco(label, path, option, roll):
  m, mj, states, _, (out, sol), (first, again) = _case(label, path, option, roll)
  worst, iters, rows = 0.0, [], 0
  for k, (md, _) in enumerate(states):
    err, niter = _compare(m, mj, md, _pick(out, k), _pick(sol, k), f'{label} state {k}')
    worst = max(worst, err)
    iters.append(niter)
    rows += md.nefc
  assert rows > 4 * len(states) and max(iters) >= 2
  if label == 'rows_newton_elliptic' or label == 'box_newton_elliptic':
    assert any(mujoco.mjtConstraintState.mjCNSTRSTATE_CONE in md.efc_state for md, _ in states)
  print(f'{label}: {len(states)} states, {rows} rows, iterations {iters}, max relative error '
        f'{worst:.2e}; compile + run {first:.2f} s, run {again * 1e3:.1f} ms')


def _mj_starts_from_smooth(mj, md, warm):
  """MuJoCo's warm-start choice, recomputed with its own mj_constraintUpdate: True when the
  total cost at the warm start exceeds the constraint cost at qacc_smooth."""
  scratch = copy.copy(md)
  jac = np.asarray(md.efc_J).reshape(md.nefc, mj.nv)
  costs = []
  for qacc in (warm, md.qacc_smooth):
    cost = np.zeros((1, 1))
    mujoco.mj_constraintUpdate(mj, scratch, jac @ qacc - md.efc_aref, cost, 0)
    costs.append(float(cost[0, 0]))
  full = np.zeros((mj.nv, mj.nv))
  mujoco.mj_fullM(mj, full, md.qM)
  costs[0] += 0.5 * (full @ warm - md.qfrc_smooth) @ (warm - md.qacc_smooth)
  return costs[0] > costs[1]


def test_warmstart_choice_takes_both_branches():
  """The states of the warm-started cases (with their perturbed warm starts) make MuJoCo start
  from qacc_smooth in some and from qacc_warmstart in others, so that the iteration counts
  compared in test_solver_matches_mujoco check both branches of our choice."""
  for label, path, option, roll in CASES:
    if 'warmstart' in option:
      continue
    m, mj = _models(path, option)
    if mujoco.mj_isSparse(mj):
      continue
    nsteps, every, key, ctrl = roll
    states = _rollout(mj, nsteps, every, key, ctrl, perturb=PERTURB)
    choice = {_mj_starts_from_smooth(mj, md, warm) for md, warm in states if md.nefc}
    assert choice == {True, False}, label


def test_vmap_equals_loop():
  """One jit(vmap) call over the states equals single-world calls state by state (up to
  rounding: the batched program sums in another order; the rows model is ill-conditioned)."""
  m, _, states, batch, (out, sol), _ = _case(*CASES[0])
  one = jax.jit(lambda d: _rows_solve(m, d))
  for k in range(len(states)):
    o, s = jax.device_get(one(_pick(batch, k)))
    assert int(s.solver_niter) == int(sol.solver_niter[k])
    np.testing.assert_array_equal(s.efc_state, sol.efc_state[k])
    np.testing.assert_array_equal(s.solver_neval, sol.solver_neval[k])
    for a, b in ((o.qacc, out.qacc[k]), (s.efc_force, sol.efc_force[k]),
                 (o.qfrc_constraint, out.qfrc_constraint[k])):
      assert _rel(a, b) < 1e-9


@pytest.mark.parametrize('case', [CASES[1], CASES[3]], ids=[CASES[1][0], CASES[3][0]])
def test_chunks_give_the_iterates_of_the_whole_batch(case, monkeypatch):
  """With chunks of 3 worlds (solver.CPU_CHUNK; solver._iterate_batch gathers the worlds still
  iterating, runs them 3 at a time, the last chunk padded, and scatters them back), the batch
  gets the solutions, constraint states and iteration counts of the whole-batch iterations."""
  m, _, states, batch, (out, sol), _ = _case(*case)
  assert len(states) >= 8 and len(set(np.asarray(sol.solver_niter).tolist())) > 2
  monkeypatch.setattr(solver, 'CPU_CHUNK', 3)
  assert solver._chunk_size(len(states)) == 3
  o, s = jax.device_get(jax.jit(jax.vmap(lambda d: _rows_solve(m, d)))(batch))
  np.testing.assert_array_equal(s.solver_niter, sol.solver_niter)
  np.testing.assert_array_equal(s.solver_neval, sol.solver_neval)
  np.testing.assert_array_equal(s.efc_state, sol.efc_state)
  for k in range(len(states)):
    for a, b in ((o.qacc[k], out.qacc[k]), (s.efc_force[k], sol.efc_force[k])):
      assert _rel(a, b) < 1e-9


@pytest.mark.parametrize('solver_name', ['Newton', 'CG', 'PGS'])
def test_zero_iterations_keep_the_start_point(solver_name):
  """opt.iterations = 0 (MuJoCo accepts it): no iteration runs, qacc is the start point of
  MuJoCo's warm-start choice (Newton, CG) or the warm-started forces (PGS), solver_niter 0 and
  the iteration statistics empty; the step used to fail to trace (an empty statistics row)."""
  m, mj = _models(ROWS, f'<option jacobian="dense" solver="{solver_name}" iterations="0"/>')
  assert m.opt.iterations == 0 and mj.opt.iterations == 0
  states = _rollout(mj, 30, 10, perturb=(0,))
  out, sol = jax.device_get(jax.jit(jax.vmap(lambda d: _rows_solve(m, d)))(_batch(m, mj, states)))
  assert sum(md.nefc for md, _ in states) > 4 * len(states)
  for k, (md, _) in enumerate(states):
    _compare(m, mj, md, _pick(out, k), _pick(sol, k), f'{solver_name} iterations 0 state {k}')
    assert int(sol.solver_niter[k]) == 0 and float(out.solver_improvement[k]) == 0.0


# ---------------------------------------------------------------------------------------------
# Gradients through the whole pipeline up to the solve

GRAD_XML = """
<mujoco>
  <option timestep="0.002" cone="{cone}" impratio="{impratio}" {solver}/>
  <worldbody>
    <geom name="floor" type="plane" size="3 3 0.1" friction="0.3 0.005 0.0001"/>
    <body name="slider" pos="0 0 0.0495">
      <freejoint/>
      <geom name="slider" type="sphere" size="0.05" friction="0.5 0.01 0.001" condim="3"/>
    </body>
    <body name="sticker" pos="0.4 0 0.0496">
      <freejoint/>
      <geom name="sticker" type="sphere" size="0.05" friction="1.2 0.01 0.001" condim="3"/>
    </body>
    <body name="arm" pos="-0.5 0 0.5">
      <joint name="hinge" axis="0 1 0" range="-20 20" frictionloss="0.05" damping="0.1"/>
      <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.02" contype="0" conaffinity="0"/>
    </body>
  </worldbody>
</mujoco>
"""


def _pipeline(m, d):
  """Our pipeline from the state up to the rows (forward without sensors)."""
  d = fwd_position(m, d)
  d = fwd_velocity(m, d)
  d = actuation.actuation(m, d)
  d = fwd_acceleration(m, d)
  return constraint.make_constraint(m, d)


def _grad_setup(cone, pgs=False):
  # PGS: iterated to convergence, so that finite differences of its output see the optimum
  solver_opt = 'solver="PGS" iterations="2000" tolerance="1e-14"' if pgs else ''
  xml = GRAD_XML.format(cone=cone, impratio=1.0 if cone == 'pyramidal' else 1.5,
                        solver=solver_opt)
  m = mjx_py.from_xml_string(xml)
  d = mjx_py.make_data(m)
  qvel = np.zeros(m.nv)
  qvel[0] = 1.0        # the slider slides along x (kinetic friction)
  qvel[6 + 1] = 0.002  # the sticker creeps (static friction holds it)
  qpos = np.array(d.qpos)
  qpos[-1] = np.deg2rad(25.0)  # the hinge beyond its upper limit
  qvel[-1] = 0.3
  d = dataclasses.replace(d, qpos=jnp.asarray(qpos), qvel=jnp.asarray(qvel))
  w = np.random.default_rng(0).standard_normal(m.nv)
  return m, d, jnp.asarray(w)


def _loss_fns(m, d, w):
  """w . qacc as a function of qvel and the slider's friction, with (efc_state, the Data that
  the solver read, its output Data) as auxiliary outputs."""
  slider = 1  # geom id of the slider (its friction's first component)

  def loss(qvel, friction):
    mm = dataclasses.replace(m, geom_friction=m.geom_friction.at[slider, 0].set(friction))
    rows = _pipeline(mm, dataclasses.replace(d, qvel=qvel))
    out, sol = solver.solve_info(mm, rows)
    return w @ out.qacc, (sol.efc_state, rows, out)

  return loss


SOLVE_INPUTS = ('qM', 'qfrc_smooth', 'qacc_smooth', 'efc_J', 'efc_aref', 'efc_D', 'efc_R',
                'efc_frictionloss')


@pytest.mark.parametrize('cone,pgs', [('pyramidal', False), ('elliptic', False),
                                      ('pyramidal', True)], ids=['pyramidal', 'elliptic', 'pgs'])
def test_gradients_match_finite_differences(cone, pgs):
  m, d, w = _grad_setup(cone, pgs)
  loss = _loss_fns(m, d, w)
  fr0 = m.geom_friction[1, 0]
  # one compiled function: the loss, its gradient and the constraint states (the finite
  # differences reuse it)
  vg = jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True))
  qvel = d.qvel
  (_, (st0, rows, out)), (gq, gf) = vg(qvel, fr0)
  st0 = np.asarray(st0)
  # the state is the one described: rows of both contacts, the limit and the friction loss;
  # elliptic: the slider in the cone's middle zone
  assert np.count_nonzero(st0 >= 0) >= 8
  if cone == 'elliptic':
    assert solver.CONE in st0

  def value(q, f):
    (v, (st, _, _)), _ = vg(q, f)
    np.testing.assert_array_equal(st, st0)  # the active set does not change
    return float(v)

  h = 1e-6
  fd_q = np.zeros(m.nv)
  for i in range(m.nv):
    e = np.zeros(m.nv)
    e[i] = h
    fd_q[i] = (value(qvel + e, fr0) - value(qvel - e, fr0)) / (2 * h)
  fd_f = (value(qvel, fr0 + h) - value(qvel, fr0 - h)) / (2 * h)
  scale = max(1.0, float(np.max(np.abs(fd_q))))
  err_q = float(np.max(np.abs(np.asarray(gq) - fd_q))) / scale
  err_f = abs(float(gf) - float(fd_f)) / max(1.0, abs(float(fd_f)))
  assert err_q < 1e-5 and err_f < 1e-5, (err_q, err_f, np.asarray(gq), fd_q, gf, fd_f)
  assert abs(float(gf)) > 1e-3 and np.max(np.abs(np.asarray(gq))) > 1e-3
  print(f'{cone} {"PGS" if pgs else ""}: gradient vs central differences: qvel {err_q:.2e}, '
        f'friction {err_f:.2e}')
  if cone == 'elliptic':
    _check_float32(m, rows, out, st0, w)


def _check_float32(m, rows, out, st, w):
  """The solver alone in float32 at the elliptic state: the gradient of w . qacc with respect
  to all its float inputs is finite; with respect to qfrc_smooth it is H^-1 w, H the Hessian
  at the solution (M + J' D J on the QUADRATIC rows + J_c' H_c J_c on the cones in the middle
  zone), computed here in float64 from our outputs."""
  rows, out = jax.device_get((rows, out))
  quad = st == solver.QUADRATIC
  jac = np.asarray(rows.efc_J)
  hess = np.asarray(rows.qM) + jac[quad].T @ (np.asarray(rows.efc_D)[quad, None] * jac[quad])
  c = out.contact
  ncone = 0
  for i in range(int(rows.ncon)):
    adr, dim = int(c.efc_address[i]), int(c.dim[i])
    if adr >= 0 and st[adr] == solver.CONE:
      jc = jac[adr:adr + dim]
      hess += jc.T @ np.asarray(c.H[i, :dim * dim]).reshape(dim, dim) @ jc
      ncone += 1
  assert ncone
  expect = np.linalg.solve(hess, np.asarray(w))
  with jax.enable_x64(False):
    m32 = jax.tree_util.tree_map(
        lambda x: x.astype(np.float32) if x.dtype == np.float64 else x, m)
    d32 = jax.tree_util.tree_map(
        lambda x: np.asarray(x).astype(np.float32) if x.dtype == np.float64 else x, rows)
    x0 = {k: getattr(d32, k) for k in SOLVE_INPUTS}
    x0['friction'], x0['mu'] = d32.contact.friction, d32.contact.mu

    def loss32(x):
      con = dataclasses.replace(d32.contact, friction=x['friction'], mu=x['mu'])
      dd = dataclasses.replace(d32, contact=con, **{k: x[k] for k in SOLVE_INPUTS})
      return jnp.asarray(w, jnp.float32) @ solver.solve(m32, dd).qacc

    g = jax.device_get(jax.jit(jax.grad(loss32))(x0))
  for name, value in g.items():
    assert value.dtype == np.float32 and np.all(np.isfinite(value)), name
  for name in ('efc_J', 'efc_aref', 'efc_D', 'friction', 'mu', 'qM'):
    assert np.any(g[name] != 0), name
  err = float(np.max(np.abs(g['qfrc_smooth'] - expect)) / np.max(np.abs(expect)))
  assert err < 1e-4, err
  print(f'float32 solver gradient: finite; d/dqfrc_smooth vs H^-1 w {err:.2e}')


def test_row_buckets_give_the_iterates_of_all_rows(monkeypatch):
  """The primal iterations' row work runs on the first k rows for the smallest k of
  row_buckets(N) that every world of the batch (or of a CPU chunk) fits, else on all N rows
  (solver._on_rows). On the box stack (elliptic cones; buckets of 32 and 64 of its 234 rows),
  settled by MuJoCo, then given random velocities: with every body but the base lifted clear it
  uses 12 rows (the small bucket), with the lowest three bodies left in place 51 (the large
  bucket), as it rests 108 (all rows). A world solved alone, beside a world of the next size
  and beside a world over every bucket gets MuJoCo's solution, constraint states and iteration
  count (_compare), the same in every batch, and so does every world of a batch run in chunks
  of 2 worlds whose buckets differ chunk by chunk (a chunk gathers the small bucket's rows of
  J; a chunk over it gathers its bucket's rows, or all rows, in each row-work use). (The
  Newton Hessian sums blocks of solver.ROW_BLOCK rows in every case, the 234 rows' last block
  clamped.) The states are MuJoCo's (the module's other cases' way), so that no step or forward
  pass is compiled."""
  m, mj = _models(BOX, NEWTON_ELLIPTIC)
  sizes = constraint.model_row_buckets(m)
  assert sizes == (32, 64) and constraint.row_bucket(sizes, m.nefc_max) == 64
  md = mujoco.MjData(mj)
  for _ in range(100):                         # settled: every body rests on another
    mujoco.mj_step(mj, md)

  # random velocities within +-1, so that each solve takes several iterations (MuJoCo: 5, 7
  # and 9 for the three states below)
  qvel = md.qvel + np.random.default_rng(0).uniform(-1, 1, mj.nv)

  def lifted(k):
    # MuJoCo's mj_forward with the free bodies from the k-th on lifted clear of the stack and
    # of each other (the settled warm start)
    out = mujoco.MjData(mj)
    out.qpos[:], out.qvel[:] = md.qpos, qvel
    for j in range(k, mj.njnt):
      out.qpos[mj.jnt_qposadr[j] + 2] += 1.0 * j
    warm = md.qacc_warmstart.copy()
    return _forward_from(mj, out, warm), warm

  states = {'low': lifted(1), 'mid': lifted(3), 'big': lifted(mj.njnt)}
  low, mid, big = (states[k][0].nefc for k in ('low', 'mid', 'big'))
  assert 0 < low <= sizes[0] < mid <= sizes[1] < big
  assert min(states[k][0].solver_niter[0] for k in states) > 3

  def batch(*names):
    return _batch(m, mj, [states[k] for k in names])

  def check(names, out, sol, label):
    # every world against MuJoCo, and against the same world in the batches before
    for i, name in enumerate(names):
      o, s = _pick(out, i), _pick(sol, i)
      _compare(m, mj, states[name][0], o, s, f'{label} world {i} ({name})')
      if name in first:
        o0, s0 = first[name]
        np.testing.assert_allclose(o.qacc, o0.qacc, rtol=1e-9, atol=1e-9)
        np.testing.assert_array_equal(s.efc_state, s0.efc_state)
        assert int(s.solver_niter) == int(s0.solver_niter)
      else:
        first[name] = o, s

  first = {}
  # batches of three (one compile): low alone, beside mid, beside mid and big
  solve = jax.jit(jax.vmap(lambda d: _rows_solve(m, d)))
  for names in (('low',) * 3, ('low', 'mid', 'mid'), ('low', 'mid', 'big')):
    check(names, *jax.device_get(solve(batch(*names))), str(names))
  # chunks of 2: (low, low) small bucket, (mid, low) large, (big, low) all rows, (mid, mid)
  monkeypatch.setattr(solver, 'CPU_CHUNK', 2)
  names = ('low', 'low', 'mid', 'low', 'big', 'low', 'mid', 'mid')
  check(names, *jax.device_get(jax.jit(jax.vmap(lambda d: _rows_solve(m, d)))(batch(*names))),
        'chunks of 2')


@pytest.mark.parametrize('n, last', [(4 * solver.ROW_BLOCK, 3), (4 * solver.ROW_BLOCK - 3, 4)])
def test_hessian_row_blocks_equal_the_sum_over_all_rows(n, last):
  """solver._hessian over the first nblock blocks of ROW_BLOCK rows (the batch's rows in use,
  solver._row_blocks) equals the sum over every row, for worlds using different row counts
  (the rows past a world's count are unused, as mjx_py.constraint writes them). With N not a
  multiple of ROW_BLOCK the last block is clamped to end at row N and overlaps the one before
  it (its overlapping rows must count once): the second case's busiest world uses all N rows."""
  rng = np.random.default_rng(5)
  nw, nv = 3, 7
  used = np.array([5, 2 * solver.ROW_BLOCK + 3 if last == 3 else n, 0])
  live = np.arange(n)[None, :] < used[:, None]
  a = rng.normal(size=(nw, nv, nv))
  M = a @ np.swapaxes(a, 1, 2) + nv * np.eye(nv)
  J = np.where(live[:, :, None], rng.normal(size=(nw, n, nv)), 0.0)
  kind = np.where(live, rng.choice([1, 2, 3], size=(nw, n)), 0).astype(np.int32)
  state = np.where(live, rng.choice([solver.SATISFIED, solver.QUADRATIC], size=(nw, n)),
                   solver.UNUSED).astype(np.int32)
  D = np.where(live, rng.uniform(0.5, 2.0, size=(nw, n)), 0.0)
  zeros = np.zeros((nw, n))
  P = solver._Problem(M, zeros[:, :nv], zeros[:, :nv], J, zeros, D, zeros, zeros, kind,
                      np.zeros((nw, 0, 1), np.int32), np.zeros((nw, 0, 1), bool),
                      np.zeros((nw, 0, 1)), np.zeros((nw, 0)))
  up = solver._Update(zeros, state, np.zeros(nw), np.zeros((nw, 0, 1, 1)))
  nblock = solver._row_blocks(P)
  assert int(nblock) == last
  dense = jax.vmap(solver._hessian)(P, up)
  blocked = jax.jit(jax.vmap(solver._hessian, in_axes=(0, 0, None)))(P, up, nblock)
  np.testing.assert_allclose(blocked, dense, rtol=1e-12, atol=1e-12)
  expect = M + np.einsum('wri,wr,wrj->wij', J, np.where(state == solver.QUADRATIC, D, 0.0), J)
  np.testing.assert_allclose(dense, expect, rtol=1e-12, atol=1e-12)


def test_chunk_gathers_equal_fancy_indexing():
  """The CPU chunks' gathers (solver._take_worlds, solver._take_rows) from the worlds' flattened
  entries give x[take] and J[take, :k], the padding's clamped index included."""
  rng = np.random.default_rng(7)
  B, n, nv = 6, 10, 4
  J = jnp.asarray(rng.normal(size=(B, n, nv)))
  take = jnp.asarray([5, 0, 3, 5], jnp.int32)
  for x in (J, J[:, :, 0], J[:, 0, 0], J[:, :0]):
    np.testing.assert_array_equal(solver._take_worlds(x, take), np.asarray(x)[np.asarray(take)])
  for k in (1, 4, n):
    np.testing.assert_array_equal(solver._take_rows(J, take, k),
                                  np.asarray(J)[np.asarray(take), :k])
