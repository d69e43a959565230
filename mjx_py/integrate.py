"""Integrators (mj_Euler, mj_implicit, mj_RungeKutta) and their building blocks.

Every integrator reads the Data of a finished forward pass and returns the Data of the next
step: act, qvel, qpos and time advanced (MuJoCo's mj_advance order: activations first, then
velocities, then positions with the new velocities, then time). The other fields keep the values
of the forward pass, as in MuJoCo.

euler(m, d)          semi-implicit Euler (mj_Euler). With any dof_damping > 0 and eulerdamp not
                     disabled, the joint damping is integrated implicitly:
                     (qM + h diag(dof_damping)) qacc' = qfrc_smooth + qfrc_constraint.
  reads  qpos, qvel, act, act_dot, qacc, qM, qfrc_smooth, qfrc_constraint, time
implicit(m, d)       implicit in velocity (mj_implicit, integrator="implicit"):
                     (qM - h qDeriv) qacc' = qfrc_smooth + qfrc_constraint, with qDeriv the
                     velocity derivative of actuator, passive and bias (RNE) forces.
implicitfast(m, d)   the same without the RNE derivative, qDeriv used symmetrically: its lower
                     triangle where qM stores entries (only the diagonal in the rows of
                     "simple" dofs, dof_simplenum > 0), as MuJoCo's integrator="implicitfast".
  reads  (both) the Euler inputs and ctrl, actuator_length, actuator_velocity,
         actuator_moment (nu, nv), ten_J (ntendon, nv), cdof, cinert, subtree_com, xipos,
         ximat, geom_xpos, geom_xmat
rk4(m, d, forward_fn) 4th-order Runge-Kutta (mj_RungeKutta, MuJoCo's tableau). forward_fn(m, d)
                     -> d is the forward dynamics to call at the three intermediate stages
                     (MuJoCo skips sensors there: sensordata of the input d is kept).
rk4_step(m, d, forward_fn, sensors_fn)  the same from a state whose forward has not run, all
                     four evaluations in one scan (what step uses; see its docstring)
  writes (all) qpos (nq,), qvel (nv,), act (na,), time (), qacc_warmstart (nv,) = the qacc of
         the forward pass (the last RK4 stage's for RK4), as mj_advance saves it

Helpers: integrate_pos(m, qpos, qvel, dt) (mj_integratePos, quaternion integration for ball
and free joints), next_activation(m, act, act_dot) (activation step with filterexact and
actrange clamping), deriv_smooth_vel(m, d, flg_bias) (mjd_smooth_vel as a dense (nv, nv)
matrix restricted to the sparsity of qM).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from . import actuation, linalg, math, support, tree
from .actuation import next_activation
from .math import MINVAL

__all__ = ['euler', 'implicit', 'implicitfast', 'rk4', 'rk4_step', 'integrate_pos',
           'next_activation', 'deriv_smooth_vel']

FREE, BALL, SLIDE, HINGE = 0, 1, 2, 3
GEOM_SPHERE, GEOM_CAPSULE, GEOM_CYLINDER = 2, 3, 5
DSBL_PASSIVE, DSBL_EULERDAMP = 1 << 5, 1 << 14
ENBL_ENERGY = 1 << 1
INT_IMPLICITFAST = 3

RK4_A = np.array([[0.5, 0.0, 0.0], [0.0, 0.5, 0.0], [0.0, 0.0, 1.0]])
RK4_B = np.array([1.0 / 6.0, 1.0 / 3.0, 1.0 / 3.0, 1.0 / 6.0])


# ---------------------------------------------------------------------------------------------
# Positions

def _quat_integrate(quat, omega, dt):
  """normalize(quat) * exp(omega dt / 2) (mju_quatIntegrate), with exact gradients at omega = 0.

  The rotation quaternion is (cos|x|, sinc|x| x), x = omega dt / 2, with sinc and cos written
  as series for tiny |x| so that no sqrt is taken at 0.
  """
  half = 0.5 * dt * omega
  s2 = jnp.dot(half, half)
  small = s2 < 1e-8
  n = jnp.sqrt(jnp.where(small, 1.0, s2))
  c = jnp.where(small, 1 - s2 / 2 + s2 * s2 / 24, jnp.cos(n))
  sinc = jnp.where(small, 1 - s2 / 6 + s2 * s2 / 120, jnp.sin(n) / n)
  qrot = jnp.concatenate([c[None], sinc * half])
  return math.quat_mul(math.quat_normalize(quat), qrot)


def integrate_pos(m, qpos, qvel, dt):
  """qpos (nq,) advanced by velocity qvel (nv,) over dt (mj_integratePos).

  Hinge and slide: q += dt v. Ball: quaternion times exp(omega dt / 2), omega in the child frame.
  Free: position += dt * (world-frame linear velocity), quaternion as ball.
  """
  if not m.njnt or not m.nq:
    return qpos
  if tree.scalar_joints(m):
    # hinges and slides only (static): qpos and qvel both in joint order, one entry each
    return qpos + dt * qvel
  qadr, vadr = m.jnt_qposadr, m.jnt_dofadr
  qwin = qpos[jnp.clip(qadr[:, None] + jnp.arange(7), 0, m.nq - 1)]
  vwin = qvel[jnp.clip(vadr[:, None] + jnp.arange(6), 0, m.nv - 1)]

  def one(jtype, q, v):
    free = jnp.concatenate([q[:3] + dt * v[:3], _quat_integrate(q[3:7], v[3:6], dt)])
    ball = jnp.concatenate([_quat_integrate(q[:4], v[:3], dt), q[4:]])
    scalar = q.at[0].add(dt * v[0])
    return jnp.where(jtype == FREE, free, jnp.where(jtype == BALL, ball, scalar))

  new = jax.vmap(one)(m.jnt_type, qwin, vwin)                      # (njnt, 7)
  idx = jnp.arange(m.nq)
  jnt = jnp.searchsorted(qadr, idx, side='right') - 1               # joint owning each qpos
  return new[jnt, idx - qadr[jnt]]


# ---------------------------------------------------------------------------------------------
# State advance

def _advance(m, d, act_dot, qacc, qvel=None):
  """act, qvel, qpos and time after one step (mj_advance).

  act_dot (na,), qacc (nv,); qvel (nv,) if given is the velocity that moves qpos (RK4's
  weighted velocity), else the new velocity (semi-implicit).
  """
  h = m.opt.timestep
  act = d.act
  if m.na and not m.opt.disableflags & actuation.DSBL_ACTUATION:
    owner = actuation.act_owner(m)
    act_dot = jnp.where(actuation.actuator_disabled(m)[owner], 0.0, act_dot)
    act = actuation.step_activation(m, owner, act, act_dot)
  qvel_new = d.qvel + h * qacc
  qpos = integrate_pos(m, d.qpos, qvel_new if qvel is None else qvel, h)
  # the solver's warm start for the next step: Data's qacc (not the integrator's qacc)
  return dataclasses.replace(d, qpos=qpos, qvel=qvel_new, act=act, time=d.time + h,
                             qacc_warmstart=d.qacc)


def euler(m, d):
  """Semi-implicit Euler with implicit joint damping (mj_Euler); see the module docstring."""
  qacc = d.qacc
  if m.nv and not m.opt.disableflags & DSBL_EULERDAMP:
    def damped(_):
      qh = d.qM + jnp.diag(m.opt.timestep * m.dof_damping)
      return linalg.solve_spd(qh, d.qfrc_smooth + d.qfrc_constraint)

    damping = math.concrete(m.dof_damping)
    if damping is None:
      # a traced Model (a jit argument, batched or differentiated): known at run time
      qacc = jax.lax.cond(jnp.any(m.dof_damping > 0), damped, lambda _: d.qacc, None)
    elif np.any(damping > 0):
      # a concrete Model: the branch is known, and the program holds no conditional
      qacc = damped(None)
  return _advance(m, d, d.act_dot, qacc)


def _implicit(m, d, fast):
  qacc = d.qacc
  if m.nv:
    qderiv = deriv_smooth_vel(m, d, flg_bias=not fast)
    if fast:
      # MuJoCo gathers qDeriv into the storage of qM (the lower triangle, and only the
      # diagonal in rows of "simple" dofs) and uses it as a symmetric matrix
      eye = jnp.eye(m.nv, dtype=bool)
      stored = (m.dof_ancestor > 0) & ((m.dof_simplenum == 0)[:, None] | eye)
      lower = jnp.where(stored, qderiv, 0.0)
      qderiv = lower + jnp.where(eye, 0.0, lower).T
    # LU without pivoting, as MuJoCo's mju_factorLUSparse (M - h D is near-SPD for small h)
    qacc = linalg.solve(d.qM - m.opt.timestep * qderiv, d.qfrc_smooth + d.qfrc_constraint)
  return _advance(m, d, d.act_dot, qacc)


def implicit(m, d):
  """Implicit-in-velocity step with the full qDeriv, RNE included (integrator="implicit")."""
  return _implicit(m, d, fast=False)


def implicitfast(m, d):
  """Implicit-in-velocity step without RNE derivatives, symmetric (integrator="implicitfast")."""
  return _implicit(m, d, fast=True)


# MuJoCo's tableau with a zero row on top: stage 0 evaluates at the state itself
_RK4_A0 = np.vstack([np.zeros((1, 3)), RK4_A])


def _rk4_scan(m, d, forward_fn, first_stage: int, vel, acc, adot, sensors_fn=None):
  """RK4's evaluations ``first_stage`` .. 3 as one lax.scan (forward_fn traced once).

  Stage i sets qpos = qpos0 (+) h sum_j A[i,j] qvel_j (stage 0: qpos0 itself), qvel, act and
  time likewise, and calls forward_fn; vel, acc, adot (4, n) collect each stage's qvel, qacc
  and act_dot. Returns (last stage's Data, the FIRST_FIELDS of stage 0's Data after
  ``sensors_fn`` (a dict; d's when first_stage > 0), vel, acc, adot).

  Stage 0's sensors run inside the scan, under a lax.cond on the (unbatched) stage index, and
  the scan carries only those fields of stage 0: it used to carry the whole of stage 0's Data,
  selected from each stage's by a jnp.where per field (every stage reading and writing two
  copies of Data; the hopper's is 12.8 KB a world)."""
  h = m.opt.timestep
  dtype = d.qvel.dtype
  a_tab = jnp.asarray(_RK4_A0, dtype)
  c_tab = jnp.sum(a_tab, axis=1)
  qpos0, qvel0, act0, t0 = d.qpos, d.qvel, d.act, d.time

  def stage(carry, i):
    dd, first, vel, acc, adot = carry
    w = a_tab[i]
    dvel, dacc, dadot = w @ vel[:3], w @ acc[:3], w @ adot[:3]
    qvel_i = qvel0 + h * dacc
    qpos_i = integrate_pos(m, qpos0, dvel, h)
    if first_stage == 0:      # (integrate_pos would renormalize the quaternions)
      qpos_i = jnp.where(i == 0, qpos0, qpos_i)
    di = dataclasses.replace(dd, qpos=qpos_i, qvel=qvel_i, act=act0 + h * dadot,
                             time=t0 + c_tab[i] * h)
    di = forward_fn(m, di)
    vel, acc, adot = vel.at[i].set(qvel_i), acc.at[i].set(di.qacc), adot.at[i].set(di.act_dot)
    if first_stage == 0:
      first = jax.lax.cond(i == 0, lambda di, _: _first_fields(m, di, sensors_fn),
                           lambda _, first: first, di, first)
    return (di, first, vel, acc, adot), None

  first = _first_fields(m, d, None)
  (last, first, vel, acc, adot), _ = jax.lax.scan(stage, (d, first, vel, acc, adot),
                                                  jnp.arange(first_stage, 4))
  return last, first, vel, acc, adot


def _first_fields(m, d, sensors_fn):
  """{FIRST_FIELDS of d after sensors_fn (None: of d itself)}."""
  if sensors_fn is not None:
    d = sensors_fn(m, d)
  return {f: getattr(d, f) for f in FIRST_FIELDS}


def _rk4_advance(m, last, state, vel, acc, adot, keep):
  """The step from the stages: (qpos0, qvel0, act0, t0) of ``state`` advanced with the
  B-weighted act_dot, qacc and qvel; the derived fields are the last stage's, except the
  fields named in ``keep`` (a dict), which MuJoCo does not recompute in the stages."""
  b_tab = jnp.asarray(RK4_B, state.qvel.dtype)
  base = dataclasses.replace(last, qpos=state.qpos, qvel=state.qvel, act=state.act,
                             time=state.time, **keep)
  return _advance(m, base, b_tab @ adot, b_tab @ acc, qvel=b_tab @ vel)


def rk4(m, d, forward_fn):
  """Classic Runge-Kutta step (mj_RungeKutta with N=4); see the module docstring.

  d must hold a finished forward pass at the current state. Stage i (i = 1, 2, 3) sets
  qpos = qpos0 (+) h sum_j A[i,j] qvel_j (mj_integratePos), qvel = qvel0 + h sum_j A[i,j] qacc_j,
  act = act0 + h sum_j A[i,j] act_dot_j (no clamping), time = t0 + C_i h, and calls
  forward_fn(m, d). The step then advances (qpos0, qvel0, act0, t0) with the B-weighted
  act_dot, qacc and qvel (positions move with the weighted velocity). The stages are one
  lax.scan, so forward_fn is traced once. The returned Data carries the last stage's derived
  fields, as MuJoCo's does, except sensordata, which MuJoCo does not recompute in the stages.
  """
  dtype = d.qvel.dtype
  vel = jnp.zeros((4, m.nv), dtype).at[0].set(d.qvel)
  acc = jnp.zeros((4, m.nv), dtype).at[0].set(d.qacc)
  adot = jnp.zeros((4, m.na), dtype).at[0].set(d.act_dot)
  last, _, vel, acc, adot = _rk4_scan(m, d, forward_fn, 1, vel, acc, adot)
  return _rk4_advance(m, last, d, vel, acc, adot, {'sensordata': d.sensordata})


# Data fields that only the sensor stages write (and energy, which they write when the energy
# flag is off): an RK4 step keeps those of its first evaluation
SENSOR_FIELDS = ('sensordata', 'subtree_linvel', 'subtree_angmom', 'cacc', 'cfrc_int',
                 'cfrc_ext')

# what a step keeps of RK4's stage 0 (see rk4_step): the sensor stages' fields, energy, and
# the qacc and warning counts that the step's qacc check reads
FIRST_FIELDS = SENSOR_FIELDS + ('energy', 'qacc', 'warning_counts')


def rk4_step(m, d, forward_fn, sensors_fn):
  """rk4 from a state whose forward pass has not run: the first evaluation (stage 0) joins the
  three stages in the one lax.scan, so that a step's program holds a single copy of forward
  (RK4 models then compile about as fast as the other integrators). forward_fn skips the
  sensors; sensors_fn(m, d) -> d then runs them on stage 0's pass (they read only fields
  that forward's later stages leave unchanged, so they equal what forward computes in place).

  Returns (the Data after the step, d with stage 0's FIRST_FIELDS: its sensors, energy, qacc
  and warning counts, what the step's qacc check reads): the step's Data is what forward
  followed by rk4 gives. The sensors run inside the scan (see _rk4_scan). Measured against
  carrying all of stage 0's Data (one process, alternating calls, batch 1024 over the 2
  cores): see BENCHMARKS.md (stop 49)."""
  dtype = d.qvel.dtype
  vel = jnp.zeros((4, m.nv), dtype)
  acc = jnp.zeros((4, m.nv), dtype)
  adot = jnp.zeros((4, m.na), dtype)
  last, first, vel, acc, adot = _rk4_scan(m, d, forward_fn, 0, vel, acc, adot, sensors_fn)
  keep = {f: first[f] for f in SENSOR_FIELDS}
  if not m.opt.enableflags & ENBL_ENERGY:    # else the stages recompute it, as MuJoCo's
    keep['energy'] = first['energy']
  return _rk4_advance(m, last, d, vel, acc, adot, keep), dataclasses.replace(d, **first)


# ---------------------------------------------------------------------------------------------
# Velocity derivatives of the smooth forces (mjd_smooth_vel), dense (nv, nv)

def deriv_smooth_vel(m, d, flg_bias=True):
  """qDeriv = d(qfrc_actuator + qfrc_passive - [qfrc_bias]) / d qvel, MuJoCo's analytic form.

  Actuators: moment^T diag(b) moment with b the affine bias kv plus the affine or muscle gain
  derivative times ctrl (raw, as MuJoCo) or act. Passive: -dof_damping on the diagonal,
  -tendon_damping through ten_J, fluid drag (inertia-box and ellipsoid models; the ellipsoid
  blocks symmetrized for implicitfast). Bias (flg_bias): the exact derivative of the RNE
  Coriolis/centrifugal forces. Entries outside the sparsity of qM (dofs that are not in an
  ancestor-descendant relation) are dropped, as MuJoCo does.
  """
  flags = m.opt.disableflags
  qderiv = jnp.zeros((m.nv, m.nv), d.qvel.dtype)
  if m.nu and not flags & actuation.DSBL_ACTUATION:
    qderiv = qderiv + _actuator_vel(m, d)
  if not flags & DSBL_PASSIVE:
    qderiv = qderiv - jnp.diag(m.dof_damping)
    if m.ntendon:
      b = jnp.where(m.tendon_damping > 0, m.tendon_damping, 0.0)
      qderiv = qderiv - d.ten_J.T @ (b[:, None] * d.ten_J)
    if m.nbody > 1 and m.has_fluid:  # static: fluid terms are only built when present
      qderiv = qderiv + _fluid_vel(m, d)
  if flg_bias:
    qderiv = qderiv - _rne_vel(m, d)
  sparsity = (m.dof_ancestor + m.dof_ancestor.T) > 0
  return jnp.where(sparsity, qderiv, 0.0)


def _actuator_vel(m, d):
  """d qfrc_actuator / d qvel (mjd_actuator_vel)."""
  length, velocity = d.actuator_length, d.actuator_velocity
  bias_vel = jnp.where(m.actuator_biastype == actuation.BIAS_AFFINE, m.actuator_biasprm[:, 2], 0.0)
  gain_vel = jnp.where(
      m.actuator_gaintype == actuation.GAIN_AFFINE, m.actuator_gainprm[:, 2],
      jnp.where(m.actuator_gaintype == actuation.GAIN_MUSCLE,
                actuation.muscle_gain_vel(length, velocity, m.actuator_lengthrange, m.actuator_acc0,
                                m.actuator_gainprm), 0.0))
  if m.na:
    act = d.act[jnp.clip(m.actuator_actadr + m.actuator_actnum - 1, 0, m.na - 1)]
  else:
    act = jnp.zeros((m.nu,), d.qvel.dtype)
  inp = jnp.where(m.actuator_dyntype == actuation.DYN_NONE, d.ctrl, act)
  b = jnp.where(actuation.actuator_disabled(m), 0.0, bias_vel + gain_vel * inp)
  return d.actuator_moment.T @ (b[:, None] * d.actuator_moment)


def _rne_vel(m, d):
  """d qfrc_bias / d qvel (mjd_rne_vel): Jacobian of the velocity-product RNE terms."""
  return jax.jacfwd(lambda v: _bias_vel(m, d.cdof, d.cinert, v))(d.qvel)


def _bias_vel(m, cdof, cinert, qvel):
  """The velocity-dependent part of qfrc_bias (mj_comVel then mj_rne without gravity), (nv,).

  cvel of each body sums cdof * qvel over the dofs that move it; cdof_dot of a dof is
  cvel x cdof with the velocity accumulated before its own joint (ball: before all three dofs;
  free: after the translations, zero for the translations themselves), as in mj_comVel.
  """
  nv = m.nv
  dofmask = m.body_dofmask.astype(qvel.dtype)                       # (nbody, nv)
  cvel = (dofmask * qvel) @ cdof                                     # (nbody, 6)
  jnt = m.dof_jntid
  jtype = m.jnt_type[jnt]
  k = jnp.arange(nv) - m.jnt_dofadr[jnt]                             # index within the joint
  same = jnt[:, None] == jnt[None, :]
  exclude = same & ((jtype[:, None] == BALL) |
                    ((jtype[:, None] == FREE) & (k[:, None] >= 3) & (k[None, :] >= 3)))
  before = (m.dof_ancestor > 0) & ~jnp.eye(nv, dtype=bool) & ~exclude
  cvel_dof = (before.astype(qvel.dtype) * qvel) @ cdof               # (nv, 6)
  cdof_dot = jax.vmap(math.cross_motion)(cvel_dof, cdof)
  cdof_dot = jnp.where(((jtype == FREE) & (k < 3))[:, None], 0.0, cdof_dot)
  cacc = (dofmask * qvel) @ cdof_dot                                 # (nbody, 6)

  def body_force(inert, acc, vel):
    return math.mul_inert_vec(inert, acc) + math.cross_force(vel, math.mul_inert_vec(inert, vel))

  cfrc = tree.subtree_sum(m, jax.vmap(body_force)(cinert, cacc, cvel))
  return jnp.sum(cdof * cfrc[m.dof_bodyid], axis=1)


# ---------------------------------------------------------------------------------------------
# Fluid force derivatives (mjd_inertiaBoxFluid, mjd_ellipsoidFluid)

def _sqrt(x):
  """sqrt with a zero gradient at 0 instead of inf (keeps gradients of qDeriv finite)."""
  pos = x > 0
  return jnp.where(pos, jnp.sqrt(jnp.where(pos, x, 1.0)), 0.0)


def _local_jac(m, d, point, body, rot):
  """6 x nv Jacobian (rotation; translation) of a point on a body, in the frame ``rot``."""
  jacp, jacr = support.jac(m, d, point, body)
  return jnp.concatenate([rot.T @ jacr, rot.T @ jacp])


def _local_vel(m, d, jac6, rot):
  """Local 6-velocity of a frame (mj_objectVelocity, flg_local) minus the wind."""
  return jac6 @ d.qvel - jnp.concatenate([jnp.zeros(3, rot.dtype), rot.T @ m.opt.wind])


def _skew(v):
  return jnp.array([[0.0, -v[2], v[1]], [v[2], 0.0, -v[0]], [-v[1], v[0], 0.0]], v.dtype)


def _cross_derivs(a, b):
  """(d(a x b)/da, d(a x b)/db) (mjd_cross)."""
  return -_skew(b), _skew(a)


def _box_fluid_B(m, body, lvel):
  """Diagonal of d(local force)/d(local velocity) of the inertia-box model, (6,)."""
  inertia, mass = m.body_inertia[body], m.body_mass[body]
  i0, i1, i2 = inertia[0], inertia[1], inertia[2]
  safe_mass = jnp.where(mass < MINVAL, 1.0, mass)
  box = _sqrt(jnp.maximum(MINVAL, jnp.stack([i1 + i2 - i0, i0 + i2 - i1, i0 + i1 - i2]))
              / safe_mass * 6.0)
  density, viscosity = m.opt.density, m.opt.viscosity
  diam = (box[0] + box[1] + box[2]) / 3.0
  visc_ang = -jnp.pi * diam ** 3 * viscosity
  visc_lin = -3.0 * jnp.pi * diam * viscosity
  b4 = box ** 4
  ang = -density * box * jnp.stack([b4[1] + b4[2], b4[0] + b4[2], b4[0] + b4[1]]) * 2 * \
      jnp.abs(lvel[:3]) / 64.0
  lin = -0.5 * density * jnp.stack([box[1] * box[2], box[0] * box[2], box[0] * box[1]]) * 2 * \
      jnp.abs(lvel[3:])
  vis = jnp.where(viscosity > 0, jnp.concatenate([jnp.full(3, visc_ang), jnp.full(3, visc_lin)]),
                  0.0)
  den = jnp.where(density > 0, jnp.concatenate([ang, lin]), 0.0)
  return vis + den


def _ellipsoid_fluid_B(m, geom, lvel):
  """d(local force)/d(local velocity) of the ellipsoid model for one geom, (6, 6).

  Blocks (rows: torque, force; columns: angular, linear velocity) of mjd_ellipsoidFluid:
  Magnus and Kutta lift, viscous drag and torque, added-mass gyroscopic terms.
  """
  gtype, size = m.geom_type[geom], m.geom_size[geom]
  s0, s1 = size[0], size[1]
  s = jnp.where(gtype == GEOM_SPHERE, jnp.stack([s0, s0, s0]),
                jnp.where(gtype == GEOM_CAPSULE, jnp.stack([s0, s0, s1 + s0]),
                          jnp.where(gtype == GEOM_CYLINDER, jnp.stack([s0, s0, s1]), size)))
  coef = m.geom_fluid[geom]
  blunt, slender, ang_drag, kutta, magnus = coef[1], coef[2], coef[3], coef[4], coef[5]
  virtual_mass, virtual_inertia = coef[6:9], coef[9:12]
  density, viscosity = m.opt.density, m.opt.viscosity
  ang, lin = lvel[:3], lvel[3:]
  eye = jnp.eye(3, dtype=lvel.dtype)

  # Magnus force: coef * (omega x v)
  magnus_coef = magnus * density * 4.0 / 3.0 * jnp.pi * s[0] * s[1] * s[2]
  bl, br = _cross_derivs(magnus_coef * ang, magnus_coef * lin)

  # Kutta lift
  abc = jnp.roll(s, -1) ** 2 * jnp.roll(s, -2) ** 2         # (s1 s2)^2, (s2 s0)^2, (s0 s1)^2
  vv = lin * lin
  proj_denom = jnp.dot(abc * abc, vv)
  proj_num = jnp.dot(abc, vv)
  norm2 = jnp.sum(vv)
  df_denom = jnp.pi * kutta * density / jnp.maximum(MINVAL, _sqrt(proj_denom * proj_num * norm2))
  diff = abc[None, :] - abc[:, None]                         # [r, c] = abc[c] - abc[r]
  df_coef = -diff @ vv                                       # yy (a - b) + zz (a - c), ...
  proj_term = proj_num / jnp.maximum(MINVAL, proj_denom)
  cos_term = proj_num / jnp.maximum(MINVAL, norm2)
  kmat = diff * 2 * proj_num + df_coef[:, None] * (abc * abc * proj_term - abc + cos_term)
  br = br + (kmat * jnp.outer(lin, lin) - jnp.diag(df_coef * proj_num)) * df_denom

  # viscous drag
  d_max, d_min = jnp.max(s), jnp.min(s)
  d_mid = jnp.sum(s) - d_max - d_min
  eq_sphere_d = 2.0 / 3.0 * jnp.sum(s)
  a_max = jnp.pi * d_max * d_mid
  da_coef = jnp.pi / jnp.maximum(MINVAL, _sqrt(proj_num ** 3 * proj_denom))
  a_proj = jnp.pi * _sqrt(proj_denom / jnp.maximum(MINVAL, proj_num))
  norm = _sqrt(norm2)
  quad_coef = density * (a_proj * blunt + slender * (a_max - a_proj))
  aproj_coef = density * norm * (blunt - slender)
  daproj = -aproj_coef * da_coef * abc * lin * (diff @ (vv * abc))
  br = br + (jnp.outer(lin, lin) + norm2 * eye) * (-quad_coef / jnp.maximum(MINVAL, norm))
  br = br - jnp.outer(lin, daproj) - viscosity * 3.0 * jnp.pi * eq_sphere_d * eye

  # viscous torque
  i_max = 8.0 / 15.0 * jnp.pi * d_mid * d_max ** 4
  ii = 8.0 / 15.0 * jnp.pi * s * jnp.maximum(jnp.roll(s, -1), jnp.roll(s, -2)) ** 4
  mom_coef = ang_drag * ii + slender * (i_max - ii)
  mom_visc = ang * mom_coef
  mom_sq = -density / jnp.maximum(MINVAL, _sqrt(jnp.dot(mom_visc, mom_visc))) * ang * mom_coef ** 2
  tl = (jnp.dot(ang, mom_sq) - viscosity * jnp.pi * eq_sphere_d ** 3) * eye + jnp.outer(ang, mom_sq)

  # added mass: torque += (rho I_v w) x w + (rho m_v v) x v, force += (rho m_v v) x w
  vm, vi = density * virtual_mass, density * virtual_inertia
  da, db = _cross_derivs(vi * ang, ang)
  tl = tl + db + da * vi[None, :]
  da, db = _cross_derivs(vm * lin, lin)
  tr = db + da * vm[None, :]
  da, db = _cross_derivs(vm * lin, ang)
  bl = bl + db
  br = br + da * vm[None, :]

  bmat = jnp.block([[tl, tr], [bl, br]])
  if m.opt.integrator == INT_IMPLICITFAST:
    bmat = 0.5 * (bmat + bmat.T)
  return bmat


def _fluid_vel(m, d):
  """d qfrc_fluid / d qvel: J^T B J per body (inertia box) or per geom (ellipsoid)."""
  bodies = jnp.arange(1, m.nbody)
  massive = m.body_mass >= MINVAL
  if m.ngeom:
    uses = (m.geom_fluid[:, 0] > 0).astype(jnp.int32)
    ellipsoid = jnp.zeros(m.nbody, jnp.int32).at[m.geom_bodyid].max(uses) > 0
  else:
    ellipsoid = jnp.zeros(m.nbody, bool)

  def box_term(body):
    rot = d.ximat[body].reshape(3, 3)
    jac6 = _local_jac(m, d, d.xipos[body], body, rot)
    bdiag = _box_fluid_B(m, body, _local_vel(m, d, jac6, rot))
    on = massive[body] & ~ellipsoid[body]
    return jnp.where(on, jac6.T @ (bdiag[:, None] * jac6), 0.0)

  total = jnp.sum(jax.vmap(box_term)(bodies), axis=0)
  if m.ngeom:
    def geom_term(geom):
      body = m.geom_bodyid[geom]
      rot = d.geom_xmat[geom].reshape(3, 3)
      jac6 = _local_jac(m, d, d.geom_xpos[geom], body, rot)
      bmat = _ellipsoid_fluid_B(m, geom, _local_vel(m, d, jac6, rot))
      on = (body > 0) & massive[body] & ellipsoid[body] & (m.geom_fluid[geom, 0] != 0)
      return jnp.where(on, jac6.T @ bmat @ jac6, 0.0)

    total = total + jnp.sum(jax.vmap(geom_term)(jnp.arange(m.ngeom)), axis=0)
  return total
