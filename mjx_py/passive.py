"""Velocity stage: passive forces (mj_passive).

passive(m, d)
  reads  qpos (nq,), qvel (nv,), ten_length (ntendon,), ten_velocity (ntendon,),
         ten_J (ntendon,nv), xipos (nbody,3), ximat (nbody,9), geom_xpos (ngeom,3),
         geom_xmat (ngeom,9), subtree_com (nbody,3), cvel (nbody,6), cdof (nv,6)
  writes qfrc_spring (nv,)    joint springs (hinge/slide, and ball/free via qpos_spring's
                              quaternion) and tendon springs with a dead band
         qfrc_damper (nv,)    dof damping and tendon damping
         qfrc_gravcomp (nv,)  body gravity compensation (all dofs, see below)
         qfrc_fluid (nv,)     fluid forces: inertia-box model per body, ellipsoid model per geom
         qfrc_passive (nv,)   spring + damper + fluid + gravcomp of the dofs whose joint does not
                              route gravity compensation through actuators

MuJoCo 3.3.3 semantics kept here:
  * The ``passive`` disable flag (1<<5) zeroes all five outputs. 3.3.3 has no separate spring or
    damper disable flags (mjtDisableBit ends with nativeccd).
  * Gravity compensation is skipped when the ``gravity`` disable flag (1<<6) is set (a zero
    gravity vector gives zero force anyway). qfrc_gravcomp holds the compensation of every dof;
    qfrc_passive only takes the dofs of joints with ``jnt_actgravcomp == 0``. For the other
    dofs MuJoCo's mj_fwdActuation adds qfrc_gravcomp to qfrc_actuator (before clamping by
    jnt_actfrcrange), under the same gravity conditions: actuation must do that, not this stage.
  * Fluid forces exist only when ``opt.density > 0`` or ``opt.viscosity > 0``: they are not
    even built when the compiled model has neither (static ``m.has_fluid``), and a traced
    check keeps them zero when both are vmapped/set to 0 later. Bodies lighter
    than mjMINVAL are skipped; a body with any geom whose ``geom_fluid[0]`` (fluidshape=
    "ellipsoid") is nonzero uses the ellipsoid model for its geoms, the others the inertia box.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from . import math, tree

FREE, BALL = 0, 1
GEOM_SPHERE, GEOM_CAPSULE, GEOM_CYLINDER = 2, 3, 5
DSBL_PASSIVE, DSBL_GRAVITY = 1 << 5, 1 << 6


# ---------------------------------------------------------------------------------------------
# Small NaN-safe helpers.

def _safe_sqrt(x):
  """sqrt with a zero (not infinite) gradient at 0."""
  pos = x > 0
  return jnp.where(pos, jnp.sqrt(jnp.where(pos, x, 1.0)), 0.0)


def _quat_to_vel(q):
  """Rotation vector (axis * angle, angle wrapped to (-pi, pi]) of a unit quaternion
  (mju_quat2Vel with dt = 1), smooth through the identity."""
  v, w = q[..., 1:], q[..., 0]
  s = math.safe_norm(v)
  small = s < math.MINVAL
  s_safe = jnp.where(small, 1.0, s)          # keeps atan2 away from (0, 0) in both branches
  angle = 2.0 * jnp.arctan2(s_safe, w)
  angle = jnp.where(angle > jnp.pi, angle - 2.0 * jnp.pi, angle)
  # angle / s -> 2 / w as s -> 0 (for either sign of w, after wrapping)
  ratio = jnp.where(small, 2.0 / jnp.where(jnp.abs(w) > math.MINVAL, w, 1.0), angle / s_safe)
  return v * ratio[..., None]


def _sub_quat(qa, qb):
  """Rotation vector taking qb to qa, in qb's frame (mju_subQuat): vel(qb^-1 qa)."""
  return _quat_to_vel(math.quat_mul(math.quat_conj(qb), qa))


def _to_dofs(m, values, dtype):
  """Per-joint 6-slot values (njnt, 6) as a dof vector (nv,): each dof takes its joint's
  slot (dof - jnt_dofadr), a gather (XLA:CPU runs a scatter into the dofs serially)."""
  if not m.nv:
    return jnp.zeros((0,), dtype)
  jnt = m.dof_jntid
  return values[jnt, jnp.arange(m.nv) - m.jnt_dofadr[jnt]].astype(dtype)


def _wrench_to_qfrc(m, d, wrench):
  """Generalized forces of com-frame spatial forces (nbody, ..., 6) = (torque about the root's
  subtree com, force) applied to each body: sum over bodies of J_body^T wrench (mj_applyFT).
  Returns (nv, ...).

  A dof feels the wrenches of every body it moves, i.e. of its body's subtree.
  """
  cfrc = tree.subtree_sum(m, wrench)
  return jnp.einsum('i...j,ij->i...', cfrc[m.dof_bodyid], d.cdof)


def _com_wrench(m, d, body, point, force, torque):
  """(torque + (point - com) x force, force): a force at ``point`` and a torque, expressed
  about the subtree com of ``body``'s root (arrays with a leading element axis)."""
  arm = point - d.subtree_com[m.body_rootid[body]]
  return jnp.concatenate([torque + jnp.cross(arm, force), force], axis=-1)


def _local_velocity(m, d, body, pos, rot):
  """6D velocity (angular, linear) of a frame at ``pos`` with orientation ``rot`` (3, 3) moving
  with ``body``, expressed in that frame (mj_objectVelocity with flg_local=1)."""
  cvel = d.cvel[body]
  omega = cvel[:3]
  lin = cvel[3:] - jnp.cross(pos - d.subtree_com[m.body_rootid[body]], omega)
  return rot.T @ omega, rot.T @ lin


# ---------------------------------------------------------------------------------------------
# Springs and dampers.

def _joint_springs(m, d):
  """-stiffness * (qpos - qpos_spring) per joint; ball and free rotations use the rotation
  vector between the (normalised) joint quaternion and the spring quaternion."""
  dtype = d.qpos.dtype
  if tree.scalar_joints(m):
    # hinges and slides only (static): joint j has the one qpos and dof j (MuJoCo numbers
    # them in joint order), so no quaternion work and no scatter
    return -m.jnt_stiffness * (d.qpos - m.qpos_spring)
  qidx = jnp.minimum(m.jnt_qposadr[:, None] + jnp.arange(7), m.nq - 1)
  q, q0 = d.qpos[qidx], m.qpos_spring[qidx]
  free = (m.jnt_type == FREE)[:, None]
  ball = (m.jnt_type == BALL)[:, None]
  # free joints: translation in slots 0-2, quaternion at qpos 3-6; ball: quaternion at qpos 0-3
  quat, quat0 = jnp.where(free, q[:, 3:7], q[:, :4]), jnp.where(free, q0[:, 3:7], q0[:, :4])
  rot = _sub_quat(math.quat_normalize(quat), quat0)
  lin = q[:, :3] - q0[:, :3]
  scalar = jnp.zeros((m.njnt, 6), dtype).at[:, 0].set(q[:, 0] - q0[:, 0])
  dif = jnp.where(free, jnp.concatenate([lin, rot], axis=1),
                  jnp.where(ball, jnp.pad(rot, ((0, 0), (0, 3))), scalar))
  return _to_dofs(m, -m.jnt_stiffness[:, None] * dif, dtype)


def _tendon_spring_force(m, d):
  """Tendon spring force along each tendon: zero inside [lower, upper] (tendon_lengthspring),
  stiffness * (bound - length) outside."""
  length = d.ten_length
  lower, upper = m.tendon_lengthspring[:, 0], m.tendon_lengthspring[:, 1]
  k = m.tendon_stiffness
  return jnp.where(length > upper, k * (upper - length),
                   jnp.where(length < lower, k * (lower - length), 0.0))


def _springs_dampers(m, d):
  """(qfrc_spring, qfrc_damper)."""
  spring = _joint_springs(m, d) if m.njnt else jnp.zeros(m.nv, d.qvel.dtype)
  damper = -m.dof_damping * d.qvel
  if m.ntendon:
    spring = spring + _tendon_spring_force(m, d) @ d.ten_J
    damper = damper - (m.tendon_damping * d.ten_velocity) @ d.ten_J
  return spring, damper


# ---------------------------------------------------------------------------------------------
# Gravity compensation.

def _gravcomp_wrench(m, d):
  """Com-frame wrench (nbody, 6) of the force -gravity * mass * gravcomp at each body's centre
  of mass."""
  force = -m.opt.gravity[None, :] * (m.body_mass * m.body_gravcomp)[:, None]
  body = jnp.arange(m.nbody)
  wrench = _com_wrench(m, d, body, d.xipos, force, jnp.zeros_like(force))
  return wrench.at[0].set(0.0)


# ---------------------------------------------------------------------------------------------
# Fluid forces.

def _inertia_box_force(m, d, body):
  """World (torque, force) of the inertia-box fluid model on one body (applied at xipos).

  The body is replaced by the box with its mass and inertia (full side lengths
  box_i = sqrt(6 (I_j + I_k - I_i) / mass)); with v, w its linear (minus wind) and angular
  velocity in the inertial frame:
    viscous (Stokes, sphere of diameter D = mean side):  f = -3 pi D mu v,  g = -pi D^3 mu w
    quadratic drag:  f_i = -rho/2 box_j box_k |v_i| v_i,
                     g_i = -rho/64 box_i (box_j^4 + box_k^4) |w_i| w_i
  """
  mass = m.body_mass[body]
  mass = jnp.where(mass >= math.MINVAL, mass, 1.0)            # skipped bodies: keep finite
  inertia = m.body_inertia[body]
  others = jnp.roll(inertia, -1) + jnp.roll(inertia, -2)      # I_j + I_k for each i
  box = jnp.sqrt(jnp.maximum(math.MINVAL, others - inertia) / mass * 6.0)
  rot = d.ximat[body].reshape(3, 3)
  ang, lin = _local_velocity(m, d, body, d.xipos[body], rot)
  lin = lin - rot.T @ m.opt.wind
  visc, rho = m.opt.viscosity, m.opt.density
  diam = jnp.mean(box)
  use_visc = visc > 0
  torque = jnp.where(use_visc, -jnp.pi * diam ** 3 * visc * ang, 0.0)
  force = jnp.where(use_visc, -3.0 * jnp.pi * diam * visc * lin, 0.0)
  b1, b2 = jnp.roll(box, -1), jnp.roll(box, -2)               # (box_j, box_k) for each i
  force = force - 0.5 * rho * b1 * b2 * jnp.abs(lin) * lin
  torque = torque - rho * box * (b1 ** 4 + b2 ** 4) * jnp.abs(ang) * ang / 64.0
  return rot @ torque, rot @ force


def _semi_axes(geom_type, size):
  """Semi-axes of the equivalent ellipsoid of a geom (mju_geomSemiAxes)."""
  r = size[0]
  return jnp.where(geom_type == GEOM_SPHERE, jnp.stack([r, r, r]),
                   jnp.where(geom_type == GEOM_CAPSULE, jnp.stack([r, r, size[1] + r]),
                             jnp.where(geom_type == GEOM_CYLINDER,
                                       jnp.stack([r, r, size[1]]), size)))


def _added_mass_force(ang, lin, rho, virtual_mass, virtual_inertia):
  """Gyroscopic forces of the fluid moving with the body (mj_addedMassForces, no qacc term):
  with p = rho m_v v and L = rho I_v w:  torque = p x v + L x w,  force = p x w."""
  p = rho * virtual_mass * lin
  l_ang = rho * virtual_inertia * ang
  return jnp.cross(p, lin) + jnp.cross(l_ang, ang), jnp.cross(p, ang)


def _viscous_force(ang, lin, rho, mu, s, coef):
  """Drag, lift and viscous forces on an ellipsoid with semi-axes s (mj_viscousForces).

  coef = (blunt drag, slender drag, angular drag, Kutta lift, Magnus lift). Returns local
  (torque, force).
  """
  blunt, slender, ang_drag, kutta, magnus = coef
  volume = 4.0 / 3.0 * jnp.pi * s[0] * s[1] * s[2]
  d_max, d_min = jnp.max(s), jnp.min(s)
  d_mid = jnp.sum(s) - d_max - d_min
  a_max = jnp.pi * d_max * d_mid
  speed = math.safe_norm(lin)

  # Magnus lift: rho V (w x v)
  magnus_force = magnus * rho * volume * jnp.cross(ang, lin)

  # projected area of the ellipsoid normal to v, and the (unnormalised) normal of that section
  s_yz = jnp.stack([s[1] * s[2], s[2] * s[0], s[0] * s[1]])     # products of the other two
  proj_denom = jnp.sum(s_yz ** 4 * lin ** 2)
  proj_num = jnp.sum((s_yz * lin) ** 2)
  a_proj = jnp.pi * _safe_sqrt(proj_denom / jnp.maximum(math.MINVAL, proj_num))
  normal = s_yz ** 2 * lin
  cos_alpha = proj_num / jnp.maximum(math.MINVAL, speed * proj_denom)

  # Kutta-Joukowski lift: ((n x v) rho cos(alpha) A_proj) x v
  circulation = kutta * rho * cos_alpha * a_proj * jnp.cross(normal, lin)
  kutta_force = jnp.cross(circulation, lin)

  # Stokes viscous drag of the sphere of equal mean diameter, plus quadratic drag
  eq_diam = 2.0 / 3.0 * jnp.sum(s)
  i_max = 8.0 / 15.0 * jnp.pi * d_mid * d_max ** 4
  others = jnp.maximum(jnp.roll(s, -1), jnp.roll(s, -2))
  moment = 8.0 / 15.0 * jnp.pi * s * others ** 4
  mom_visc = ang * (ang_drag * moment + slender * (i_max - moment))
  drag_lin = (mu * 3.0 * jnp.pi * eq_diam
              + rho * speed * (a_proj * blunt + slender * (a_max - a_proj)))
  drag_ang = mu * jnp.pi * eq_diam ** 3 + rho * math.safe_norm(mom_visc)
  return -drag_ang * ang, magnus_force + kutta_force - drag_lin * lin


def _ellipsoid_force(m, d, geom):
  """World (torque, force) of the ellipsoid fluid model on one geom (applied at geom_xpos)."""
  body = m.geom_bodyid[geom]
  fluid = m.geom_fluid[geom]
  rot = d.geom_xmat[geom].reshape(3, 3)
  ang, lin = _local_velocity(m, d, body, d.geom_xpos[geom], rot)
  lin = lin - rot.T @ m.opt.wind
  rho, mu = m.opt.density, m.opt.viscosity
  s = _semi_axes(m.geom_type[geom], m.geom_size[geom])
  t_add, f_add = _added_mass_force(ang, lin, rho, fluid[6:9], fluid[9:12])
  t_visc, f_visc = _viscous_force(ang, lin, rho, mu, s, fluid[1:6])
  scale = fluid[0]
  return rot @ (scale * (t_add + t_visc)), rot @ (scale * (f_add + f_visc))


def _fluid_wrench(m, d):
  """Com-frame wrench (nbody, 6) of the fluid forces: inertia-box model on bodies without
  ellipsoid geoms, ellipsoid model on the geoms of the others; zero unless density or
  viscosity is positive."""
  body = jnp.arange(m.nbody)
  active = (m.body_mass >= math.MINVAL) & (body > 0)
  if m.ngeom:
    ellipsoid = jax.ops.segment_max((m.geom_fluid[:, 0] > 0).astype(jnp.int32), m.geom_bodyid,
                                    num_segments=m.nbody) > 0
  else:
    ellipsoid = jnp.zeros(m.nbody, bool)

  torque, force = jax.vmap(lambda b: _inertia_box_force(m, d, b))(body)
  box = _com_wrench(m, d, body, d.xipos, force, torque)
  wrench = jnp.where((active & ~ellipsoid)[:, None], box, 0.0)

  if m.ngeom:
    gbody = m.geom_bodyid
    torque, force = jax.vmap(lambda g: _ellipsoid_force(m, d, g))(jnp.arange(m.ngeom))
    ell = _com_wrench(m, d, gbody, d.geom_xpos, force, torque)
    use = active[gbody] & ellipsoid[gbody] & (m.geom_fluid[:, 0] != 0)
    wrench = wrench + jax.ops.segment_sum(jnp.where(use[:, None], ell, 0.0), gbody,
                                          num_segments=m.nbody)

  has_fluid = (m.opt.viscosity > 0) | (m.opt.density > 0)
  return jnp.where(has_fluid, wrench, 0.0)


# ---------------------------------------------------------------------------------------------

def passive(m, d):
  """Passive forces: springs, dampers, gravity compensation and fluid forces (mj_passive)."""
  zeros = jnp.zeros(m.nv, d.qvel.dtype)
  if m.opt.disableflags & DSBL_PASSIVE or not m.nv:
    return dataclasses.replace(d, qfrc_spring=zeros, qfrc_damper=zeros, qfrc_gravcomp=zeros,
                               qfrc_fluid=zeros, qfrc_passive=zeros)
  spring, damper = _springs_dampers(m, d)
  # gravity compensation and fluid forces are body wrenches: one subtree pass maps both
  wrenches = []
  if m.has_fluid:              # static: density or viscosity positive in the compiled model
    wrenches.append(_fluid_wrench(m, d))
  has_gravcomp = m.ngravcomp and not m.opt.disableflags & DSBL_GRAVITY
  if has_gravcomp:
    wrenches.append(_gravcomp_wrench(m, d))
  qfrc = _wrench_to_qfrc(m, d, jnp.stack(wrenches, axis=1)) if wrenches else None  # (nv, k)
  fluid = qfrc[:, 0] if m.has_fluid else zeros
  gravcomp = qfrc[:, -1] if has_gravcomp else zeros
  # gravity compensation of joints with actuatorgravcomp="true" goes to qfrc_actuator instead
  via_passive = m.jnt_actgravcomp[m.dof_jntid] == 0
  total = spring + damper + fluid + jnp.where(via_passive, gravcomp, 0.0)
  return dataclasses.replace(d, qfrc_spring=spring, qfrc_damper=damper, qfrc_gravcomp=gravcomp,
                             qfrc_fluid=fluid, qfrc_passive=total)
