"""Velocity stage: com-based velocities (mj_comVel), bias forces (mj_rne + mj_tendonBias), tendon
and actuator velocities, subtree momenta (mj_subtreeVel).

Motion vectors are (angular, linear) about the subtree centre of mass of each body's root
(``subtree_com[body_rootid]``), force vectors (torque, force) about the same point: MuJoCo's
com-based frame (see ``inertia.py``).

tendon_actuator_velocity(m, d)
  reads  qvel (nv,), ten_J (ntendon,nv), actuator_moment (nu,nv)
  writes ten_velocity (ntendon,), actuator_velocity (nu,) (zero when actuation is disabled)
com_vel(m, d)
  reads  qvel (nv,), cdof (nv,6)
  writes cvel (nbody,6), cdof_dot (nv,6)
rne(m, d)
  reads  qvel (nv,), cdof (nv,6), cdof_dot (nv,6), cinert (nbody,10), cvel (nbody,6); for the
         tendon-armature term also ten_J (ntendon,nv), site_xpos (nsite,3), subtree_com (nbody,3)
  writes qfrc_bias (nv,): Coriolis, centrifugal and gravity forces (mj_rne with flg_acc=0),
         plus MuJoCo's tendon-armature bias ten_J^T armature (d/dt ten_J) qvel
subtree_vel(m, d)
  reads  cvel (nbody,6), xipos (nbody,3), ximat (nbody,9), subtree_com (nbody,3)
  writes subtree_linvel (nbody,3), subtree_angmom (nbody,3)
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from . import math, tree

FREE, BALL, SLIDE, HINGE = 0, 1, 2, 3
WRAP_PULLEY, WRAP_SITE = 2, 3
DSBL_GRAVITY, DSBL_ACTUATION = 1 << 6, 1 << 10

_cross_motion = jax.vmap(math.cross_motion)


def tendon_actuator_velocity(m, d):
  """Tendon and actuator velocities: ten_J qvel and actuator_moment qvel (MuJoCo zeroes the
  actuator velocities when the actuation disable flag is set)."""
  ten_velocity = d.ten_J @ d.qvel if m.ntendon else d.ten_velocity
  if m.opt.disableflags & DSBL_ACTUATION:
    actuator_velocity = jnp.zeros(m.nu, d.qvel.dtype)
  else:
    actuator_velocity = d.actuator_moment @ d.qvel if m.nu else d.actuator_velocity
  return dataclasses.replace(d, ten_velocity=ten_velocity, actuator_velocity=actuator_velocity)


def slot_width(m) -> int:
  """Dof slots per joint in the per-joint tables (static, from the model's joint types): 6
  with a free joint, 3 with a ball joint and no free one, 1 for hinges and slides only (whose
  tables then hold each joint's one dof, six times less work than 6 slots)."""
  if tree.scalar_joints(m):
    return 1
  return 6 if FREE in m.jnt_types else 3


def joint_dofs(m):
  """Dof slots of every joint: ids (njnt, W) clipped to valid indices, and the mask of the
  slots the joint really has (free 6, ball 3, slide/hinge 1); W = slot_width(m)."""
  k = jnp.arange(slot_width(m))
  ndof = jnp.where(m.jnt_type == FREE, 6, jnp.where(m.jnt_type == BALL, 3, 1))
  valid = k[None, :] < ndof[:, None]
  ids = jnp.minimum(m.jnt_dofadr[:, None] + k[None, :], m.nv - 1)
  return ids, valid


def _exclusive_cumsum(x, axis):
  """Sum of the elements before each one along ``axis`` (exact: no subtraction)."""
  pad = [(0, 0)] * x.ndim
  pad[axis] = (1, 0)
  csum = jnp.cumsum(x, axis=axis)
  return jnp.pad(jnp.take(csum, jnp.arange(x.shape[axis] - 1), axis=axis), pad)


def com_vel(m, d):
  """Body velocities cvel and the time derivatives cdof_dot of the motion subspaces.

  cvel(body) = cvel(parent) + sum over the body's dofs of cdof * qvel (a parent-to-child pass).
  cdof_dot = cvel x cdof (spatial motion cross product), where cvel is the velocity reached
  just before the dof's joint within its body; MuJoCo's special cases:
    * ball joint: all 3 dofs use the velocity before the ball (not their partial sums),
    * free joint: the 3 translational dofs have cdof_dot = 0 (fixed world axes), and the 3
      rotational dofs use the velocity after the translational part was added.
  """
  dtype = d.qvel.dtype
  if not m.nv:
    return dataclasses.replace(d, cvel=jnp.zeros((m.nbody, 6), dtype),
                               cdof_dot=jnp.zeros((0, 6), dtype))
  ids, valid = joint_dofs(m)
  is_free = m.jnt_type == FREE
  # velocity contributed by each dof slot of each joint: (njnt, W slots, 6)
  motion = jnp.where(valid[..., None], d.cdof[ids] * d.qvel[ids][..., None], 0.0)
  jnt_vel = jnp.sum(motion, axis=1)                                       # (njnt, 6)
  free_trans = jnp.where(is_free[:, None], jnp.sum(motion[:, :3], axis=1), 0.0)

  # forward pass: cvel = cvel_parent + velocity of the body's own joints, i.e. the sum of
  # cdof qvel over every dof that moves the body
  cvel = tree.dof_path_sum(m, jnp.zeros(6, dtype), d.cdof * d.qvel[:, None])

  # velocity just before each joint: parent velocity + earlier joints of the same body
  slots = jnp.where((m.body_jnts >= 0)[..., None], jnt_vel[jnp.maximum(m.body_jnts, 0)], 0.0)
  before = _exclusive_cumsum(slots, axis=1)                               # (nbody, maxjnt, 6)
  slot = jnp.arange(m.njnt) - m.body_jntadr[m.jnt_bodyid]
  base = cvel[m.body_parentid[m.jnt_bodyid]] + before[m.jnt_bodyid, slot]  # (njnt, 6)

  # per dof (no scatter): its joint's base velocity, its slot k within the joint
  jnt = m.dof_jntid
  k = jnp.arange(m.nv) - m.jnt_dofadr[jnt]
  free = is_free[jnt]
  vel = base[jnt] + jnp.where((free & (k >= 3))[:, None], free_trans[jnt], 0.0)   # (nv, 6)
  cdd = _cross_motion(vel, d.cdof)
  cdof_dot = jnp.where((free & (k < 3))[:, None], 0.0, cdd)
  return dataclasses.replace(d, cvel=cvel, cdof_dot=cdof_dot)


def _gravity(m, dtype):
  """Gravity vector, zero when the gravity disable flag is set."""
  if m.opt.disableflags & DSBL_GRAVITY:
    return jnp.zeros(3, dtype)
  return jnp.asarray(m.opt.gravity, dtype)


def _body_bias_force(cinert, cacc, cvel):
  """cinert * cacc + cvel x* (cinert * cvel): net force on one body for zero qacc."""
  momentum = math.mul_inert_vec(cinert, cvel)
  return math.mul_inert_vec(cinert, cacc) + math.cross_force(cvel, momentum)


def rne(m, d):
  """qfrc_bias = C(qpos, qvel) qvel + gravity (recursive Newton-Euler with qacc = 0).

  Forward pass: cacc(body) = cacc(parent) + sum of cdof_dot * qvel over the body's dofs, with
  the world accelerating at -gravity (so gravity appears as an inertial force). Each body then
  needs cfrc = cinert cacc + cvel x* (cinert cvel); a backward pass sums cfrc over subtrees
  and qfrc_bias(dof) = cdof . cfrc(subtree of the dof's body). MuJoCo then adds the bias of
  tendon armature (mj_tendonBias, see ``_tendon_bias``).
  """
  dtype = d.qvel.dtype
  if not m.nv:
    return d
  world_acc = jnp.concatenate([jnp.zeros(3, dtype), -_gravity(m, dtype)])
  cacc = tree.dof_path_sum(m, world_acc, d.cdof_dot * d.qvel[:, None])
  cfrc = jax.vmap(_body_bias_force)(d.cinert, cacc, d.cvel)
  cfrc = tree.subtree_sum(m, cfrc)
  bias = math.dot_small(d.cdof, cfrc[m.dof_bodyid])
  return dataclasses.replace(d, qfrc_bias=bias + _tendon_bias(m, d))


def _body_bias_acc(m, d):
  """sum over the dofs moving each body of qvel_i * cdd_i: (nbody, 6).

  cdd_i is cdof_dot_i, except for the rotational dofs of ball and free joints, for which
  MuJoCo 3.3.3's mj_jacDot uses cvel(dof's body) x cdof_i.
  """
  jtype = m.jnt_type[m.dof_jntid]
  rot_dof = jnp.arange(m.nv) >= m.jnt_dofadr[m.dof_jntid] + 3
  quat = (jtype == BALL) | ((jtype == FREE) & rot_dof)
  cdd = jnp.where(quat[:, None], _cross_motion(d.cvel[m.dof_bodyid], d.cdof), d.cdof_dot)
  return m.body_dofmask.astype(cdd.dtype) @ (d.qvel[:, None] * cdd)


def _point_bias_acc(m, d, body_acc, point, body):
  """(d/dt jacp) qvel and the velocity of points fixed to bodies (mj_jacDot times qvel).

  jacp_dot column i = cdd_i,lin + cdd_i,ang x (point - com) + cdof_i,ang x v_point, so
  jacp_dot qvel = A_lin + A_ang x (point - com) + omega x v_point with A = ``body_acc``.
  point (n, 3), body (n,) -> (acc (n, 3), v_point (n, 3)).
  """
  acc = body_acc[body]
  cvel = d.cvel[body]
  offset = point - d.subtree_com[m.body_rootid[body]]
  v_point = cvel[:, 3:] - jnp.cross(offset, cvel[:, :3])
  return (acc[:, 3:] + jnp.cross(acc[:, :3], offset) + jnp.cross(cvel[:, :3], v_point),
          v_point)


def _tendon_bias(m, d):
  """Bias force of tendon armature (mj_tendonBias): ten_J^T * armature * (ten_Jdot . qvel).

  Only spatial tendons have a nonzero ten_Jdot (fixed tendons are linear in qpos). For each
  straight segment between two sites on different bodies, with unit direction u, length L and
  endpoint velocities v0, v1 and bias accelerations a0, a1 = (d/dt jacp) qvel (``_point_bias_acc``):
    ten_Jdot . qvel += (u . (a1 - a0) + |(v1 - v0)_perp|^2 / L) / divisor,
  where (.)_perp removes the component along u and divisor is set by the last pulley before
  the segment. MuJoCo's mj_tendonDot refuses (mjERROR) tendons that wrap around geoms, so such
  segments are not handled here (they contribute nothing).
  """
  if not m.ntendon or not m.nsite or m.nwrap < 2 or not m.has_tendon_armature:
    return 0.0  # static: the model has no spatial tendon with armature
  w0 = jnp.arange(m.nwrap - 1)
  w1 = w0 + 1
  ten = jnp.searchsorted(m.tendon_adr, w0, side='right') - 1
  same_tendon = w1 < m.tendon_adr[ten] + m.tendon_num[ten]
  s0 = jnp.clip(m.wrap_objid[w0], 0, m.nsite - 1)
  s1 = jnp.clip(m.wrap_objid[w1], 0, m.nsite - 1)
  b0, b1 = m.site_bodyid[s0], m.site_bodyid[s1]
  segment = (same_tendon & (m.wrap_type[w0] == WRAP_SITE) & (m.wrap_type[w1] == WRAP_SITE)
             & (b0 != b1))
  # divisor: parameter of the last pulley at or before w0 in the same tendon, else 1
  last_pulley = jax.lax.cummax(jnp.where(m.wrap_type == WRAP_PULLEY, jnp.arange(m.nwrap), -1))
  lp = last_pulley[w0]
  divisor = jnp.where(lp >= m.tendon_adr[ten], m.wrap_prm[jnp.maximum(lp, 0)], 1.0)

  p0, p1 = d.site_xpos[s0], d.site_xpos[s1]
  body_acc = _body_bias_acc(m, d)
  a0, v0 = _point_bias_acc(m, d, body_acc, p0, b0)
  a1, v1 = _point_bias_acc(m, d, body_acc, p1, b1)
  dp = p1 - p0
  length = math.safe_norm(dp)
  ok = length > math.MINVAL
  inv_len = jnp.where(ok, 1.0 / jnp.where(ok, length, 1.0), 0.0)
  u = dp * inv_len[:, None]
  dv = v1 - v0
  dv_perp = dv - u * jnp.sum(u * dv, axis=1, keepdims=True)
  jdot_qvel = (jnp.sum(u * (a1 - a0), axis=1)
               + jnp.sum(dv * dv_perp, axis=1) * inv_len) / divisor
  jdot_qvel = jax.ops.segment_sum(jnp.where(segment, jdot_qvel, 0.0), ten,
                                  num_segments=m.ntendon)
  coef = m.tendon_armature * jdot_qvel
  return coef @ d.ten_J


def subtree_vel(m, d):
  """Subtree centre-of-mass linear velocities and angular momenta about the subtree coms.

  Body velocity at its centre of mass (world frame): v_i = cvel_lin - (xipos - com) x omega.
  subtree_linvel = (sum of m_i v_i over the subtree) / subtree mass.
  subtree_angmom(b) = sum over the subtree of [I_i omega_i + (xipos_i - c_i) x m_i (v_i - V_i)]
    + sum over the bodies i != b of the subtree of (c_i - c_parent) x M_i (V_i - V_parent),
  with c, V, M the subtree com, linvel and mass: MuJoCo's backward accumulation, written as one
  subtree sum (the parent-shift term of body i belongs to its parent's subtree only).
  """
  omega = d.cvel[:, :3]
  offset = d.xipos - d.subtree_com[m.body_rootid]
  vel = d.cvel[:, 3:] - jnp.cross(offset, omega)
  mass = m.body_mass[:, None]
  linvel = tree.subtree_sum(m, mass * vel) / jnp.maximum(math.MINVAL, m.body_subtreemass)[:, None]
  ximat = d.ximat.reshape(-1, 3, 3)
  spin = math.matvec_small(ximat, m.body_inertia * math.matvec_small(jnp.swapaxes(ximat, 1, 2),
                                                                     omega))
  own = spin + jnp.cross(d.xipos - d.subtree_com, mass * (vel - linvel))
  parent = m.body_parentid
  shift = jnp.cross(d.subtree_com - d.subtree_com[parent],
                    m.body_subtreemass[:, None] * (linvel - linvel[parent]))
  shift = shift.at[0].set(0.0)                                            # the world has no parent
  angmom = tree.subtree_sum(m, own + shift) - shift
  return dataclasses.replace(d, subtree_linvel=linvel, subtree_angmom=angmom)
