"""Position stage, part 1: forward kinematics (mj_kinematics) and cameras/lights (mj_camlight).

kinematics(m, d)
  reads  qpos, mocap_pos, mocap_quat
  writes xpos (nbody,3), xquat (nbody,4), xmat (nbody,9), xipos (nbody,3), ximat (nbody,9),
         xanchor (njnt,3), xaxis (njnt,3), geom_xpos (ngeom,3), geom_xmat (ngeom,9),
         site_xpos (nsite,3), site_xmat (nsite,9)
camlight(m, d)  (needs subtree_com from inertia.com_pos)
  reads  xpos, xmat, subtree_com
  writes cam_xpos (ncam,3), cam_xmat (ncam,9), light_xpos (nlight,3), light_xdir (nlight,3)
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from . import math, tree

FREE, BALL, SLIDE, HINGE = 0, 1, 2, 3
TRACK, TRACKCOM, TARGETBODY, TARGETBODYCOM = 1, 2, 3, 4


def _joint_pose(pos, quat, jtype, jaxis, jpos, q, q0, types):
  """Applies one joint to a frame (MuJoCo's per-joint step of mj_kinematics).

  pos (3,), quat (4,): the frame before the joint; jtype: joint type (-1: no joint, the frame
  is kept); jaxis, jpos (3,): the joint's axis and position in the body frame; q (7,): qpos
  from the joint's address ((1,) when the model has hinges and slides only); q0: its qpos0
  (hinge and slide). ``types``: the joint types the model has (static), so only their
  branches are traced.
  Returns (pos, quat, anchor, axis) after the joint, all in the frame's own reference frame.
  """
  # the quaternion forms term by term: this runs inside the joints' loop (math.quat_mul)
  axis = math.rot_vec_quat(jaxis, quat)
  anchor = math.rot_vec_quat(jpos, quat) + pos
  new_pos, new_quat = pos, quat
  angle = q[0] - q0
  if BALL in types or HINGE in types:
    # rotation about the anchor: hinge by qpos - qpos0 about its axis, ball by its quaternion
    if BALL in types and HINGE in types:
      qloc = jnp.where(jtype == BALL, math.quat_normalize(q[:4]),
                       math.axis_angle_to_quat(jaxis, angle))
    elif BALL in types:
      qloc = math.quat_normalize(q[:4])
    else:
      qloc = math.axis_angle_to_quat(jaxis, angle)
    rot_quat = math.quat_mul(quat, qloc, in_loop=True)
    rotates = (jtype == BALL) | (jtype == HINGE)
    new_pos = jnp.where(rotates, anchor - math.rot_vec_quat(jpos, rot_quat),
                        new_pos)
    new_quat = jnp.where(rotates, rot_quat, new_quat)
  if SLIDE in types:  # translation along the axis by qpos - qpos0
    new_pos = jnp.where(jtype == SLIDE, pos + axis * angle, new_pos)
  if FREE in types:
    # the joint's position and quaternion are the body pose (free joints only sit in bodies
    # whose parent is the world, so the local frame is the world frame); anchor = position,
    # and the axis is the model's
    free = jtype == FREE
    new_pos = jnp.where(free, q[:3], new_pos)
    new_quat = jnp.where(free, math.quat_normalize(q[3:7]), new_quat)
    anchor = jnp.where(free, q[:3], anchor)
    axis = jnp.where(free, jaxis, axis)
  return new_pos, new_quat, anchor, axis


def _body_local(m, inp):
  """Pose of one body relative to its parent after its joints, and its joints' anchors and
  axes, all in the parent's frame. These depend on qpos only, not on the parent's pose, so
  they are computed for all bodies at once, outside the tree pass.

  inp: the body's constant pose (pos, quat, possibly from mocap), and per joint slot k
    (maxjnt slots, padded with type -1): jtype, jpos, jaxis, qpos (7 values from the joint's
    qpos address, 1 when the model has hinges and slides only), qpos0 (1 value).
  """
  def slot(frame, j):
    pos, quat, anchor, axis = _joint_pose(frame[0], frame[1], j['jtype'], j['jaxis'],
                                          j['jpos'], j['qpos'], j['qpos0'], m.jnt_types)
    return (pos, quat), (anchor, axis)

  joints = {k: inp[k] for k in ('jtype', 'jaxis', 'jpos', 'qpos', 'qpos0')}
  if inp['jtype'].shape[0] == 1:
    (pos, quat), (anchor, axis) = slot((inp['pos'], inp['quat']),
                                       jax.tree_util.tree_map(lambda x: x[0], joints))
    anchors, axes = anchor[None], axis[None]
  else:  # joints of the body in order: a scan over the slots, traced once
    (pos, quat), (anchors, axes) = jax.lax.scan(slot, (inp['pos'], inp['quat']), joints)
  return {'pos': pos, 'quat': quat, 'anchor': anchors, 'axis': axes}


def _compose(parent, local):
  """World pose of a body from its parent's world pose and its pose in the parent frame (in
  the tree pass's loop: the quaternion forms term by term, see math.quat_mul)."""
  return {'xpos': parent['xpos'] + math.rot_vec_quat(local['pos'], parent['xquat']),
          'xquat': math.quat_normalize(math.quat_mul(parent['xquat'], local['quat'],
                                                     in_loop=True))}


def _body_inputs(m, d):
  """Per-body inputs of the kinematics pass (leading axis nbody)."""
  mocap = m.body_mocapid >= 0
  mocap_id = jnp.maximum(m.body_mocapid, 0)
  if m.nmocap:
    pos = jnp.where(mocap[:, None], d.mocap_pos[mocap_id], m.body_pos)
    quat = jnp.where(mocap[:, None], math.quat_normalize(d.mocap_quat[mocap_id]), m.body_quat)
  else:
    pos, quat = m.body_pos, m.body_quat
  jnt = m.body_jnts                       # (nbody, maxjnt), -1 padded
  valid = jnt >= 0
  j = jnp.maximum(jnt, 0)
  if m.njnt:
    adr = m.jnt_qposadr[j]
    # the joint's qpos from its address: 7 values (a free joint's), 1 for hinges and slides
    width = 1 if tree.scalar_joints(m) else 7
    qidx = jnp.minimum(adr[..., None] + jnp.arange(width), max(m.nq - 1, 0))
    qpos = d.qpos[qidx] if m.nq else jnp.zeros(qidx.shape, d.qpos.dtype)
    jtype = jnp.where(valid, m.jnt_type[j], -1)
    jpos, jaxis = m.jnt_pos[j], m.jnt_axis[j]
    qpos0 = m.qpos0[adr]
  else:
    shape = jnt.shape
    qpos = jnp.zeros(shape + (1,), pos.dtype)
    jtype = jnp.full(shape, -1)
    jpos = jaxis = jnp.zeros(shape + (3,), pos.dtype)
    qpos0 = jnp.zeros(shape, pos.dtype)
  return {'pos': pos, 'quat': quat, 'jtype': jtype, 'qpos': qpos, 'jpos': jpos, 'jaxis': jaxis,
          'qpos0': qpos0}


def _local_to_global(xpos, xmat, pos, quat):
  """Pose of an element fixed in a body: (global position, flattened rotation matrix)."""
  rot = xmat.reshape(-1, 3, 3)
  return (xpos + math.matvec_small(rot, pos),
          math.matmul_small(rot, math.quat_to_mat(quat)).reshape(-1, 9))


def kinematics(m, d):
  """Forward kinematics: body, joint, geom and site frames in world coordinates.

  Each body's pose in its parent's frame (after its joints) is computed for all bodies at
  once; the tree pass then only composes rigid transforms, parent to child.
  """
  dtype = d.qpos.dtype
  local = jax.vmap(lambda inp: _body_local(m, inp))(_body_inputs(m, d))
  world = {'xpos': jnp.zeros((m.nbody, 3), dtype),
           'xquat': jnp.zeros((m.nbody, 4), dtype).at[:, 0].set(1.0)}
  out = tree.forward(m, _compose, world, local)
  xpos, xquat = out['xpos'], out['xquat']
  xmat = math.quat_to_mat(xquat).reshape(-1, 9)
  xipos, ximat = _local_to_global(xpos, xmat, m.body_ipos, m.body_iquat)
  # joint anchors/axes: slot (jnt id - first joint of its body) of the joint's body, moved from
  # the parent's frame to the world
  slot = jnp.arange(m.njnt) - m.body_jntadr[m.jnt_bodyid]
  parent = m.body_parentid[m.jnt_bodyid]
  prot = math.quat_to_mat(xquat[parent])
  xanchor = xpos[parent] + math.matvec_small(prot, local['anchor'][m.jnt_bodyid, slot])
  xaxis = math.matvec_small(prot, local['axis'][m.jnt_bodyid, slot])
  geom_xpos, geom_xmat = _local_to_global(xpos[m.geom_bodyid], xmat[m.geom_bodyid],
                                          m.geom_pos, m.geom_quat)
  site_xpos, site_xmat = _local_to_global(xpos[m.site_bodyid], xmat[m.site_bodyid],
                                          m.site_pos, m.site_quat)
  return dataclasses.replace(
      d, xpos=xpos, xquat=xquat, xmat=xmat, xipos=xipos, ximat=ximat, xanchor=xanchor,
      xaxis=xaxis, geom_xpos=geom_xpos, geom_xmat=geom_xmat, site_xpos=site_xpos,
      site_xmat=site_xmat)


def _look_at(pos, target):
  """Rotation (flattened) of a camera/light at ``pos`` whose -Z axis points at ``target``,
  keeping +Y as close to world +Z as possible (mj_camlight's targetbody rule)."""
  z = math.normalize(pos - target)
  x = math.normalize(jnp.cross(jnp.array([0.0, 0.0, 1.0], pos.dtype), z))
  y = math.normalize(jnp.cross(z, x))
  return jnp.stack([x, y, z], axis=1).reshape(9)


def camlight(m, d):
  """Camera and light poses for every tracking mode."""
  def place(bodyid, mode, target, pos, quat_or_dir, pos0, poscom0, rot0, is_cam):
    xpos_b = d.xpos[bodyid]
    xmat_b = d.xmat[bodyid].reshape(3, 3)
    com = d.subtree_com[bodyid]
    fixed_pos = xpos_b + xmat_b @ pos
    out_pos = jnp.where(mode == TRACK, xpos_b + pos0,
                        jnp.where(mode == TRACKCOM, com + poscom0, fixed_pos))
    tgt = jnp.maximum(target, 0)
    tgt_point = jnp.where(mode == TARGETBODYCOM, d.subtree_com[tgt], d.xpos[tgt])
    if is_cam:
      fixed_rot = (xmat_b @ math.quat_to_mat(quat_or_dir)).reshape(9)
      rot = jnp.where((mode == TRACK) | (mode == TRACKCOM), rot0, fixed_rot)
      look = _look_at(out_pos, tgt_point)
      return out_pos, jnp.where((mode >= TARGETBODY) & (target >= 0), look, rot)
    fixed_dir = xmat_b @ quat_or_dir
    direction = jnp.where((mode == TRACK) | (mode == TRACKCOM), rot0, fixed_dir)
    look = math.normalize(tgt_point - out_pos)
    return out_pos, jnp.where((mode >= TARGETBODY) & (target >= 0), look, direction)

  cam = jax.vmap(lambda *a: place(*a, True))(
      m.cam_bodyid, m.cam_mode, m.cam_targetbodyid, m.cam_pos, m.cam_quat, m.cam_pos0,
      m.cam_poscom0, m.cam_mat0) if m.ncam else (d.cam_xpos, d.cam_xmat)
  light = jax.vmap(lambda *a: place(*a, False))(
      m.light_bodyid, m.light_mode, m.light_targetbodyid, m.light_pos, m.light_dir,
      m.light_pos0, m.light_poscom0, m.light_dir0) if m.nlight else (d.light_xpos,
                                                                     d.light_xdir)
  return dataclasses.replace(d, cam_xpos=cam[0], cam_xmat=cam[1], light_xpos=light[0],
                             light_xdir=light[1])
