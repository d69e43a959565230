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


def _body_frame(parent, inp):
  """Pose of one body from its parent's pose and its joints (MuJoCo's per-body loop).

  parent: dict xpos (3,), xquat (4,) of the parent body.
  inp: the body's constant pose (pos, quat, possibly from mocap), and per joint slot k
    (maxjnt slots, ``valid`` masks padding): type, jnt_pos, jnt_axis, qpos (7 values starting
    at the joint's qpos address), qpos0 (1 value).
  Returns dict xpos, xquat and per-slot xanchor, xaxis (maxjnt, 3).
  """
  is_root_child = inp['parent_is_world']
  xpos = jnp.where(is_root_child, inp['pos'],
                   parent['xpos'] + math.rot_vec_quat(inp['pos'], parent['xquat']))
  xquat = jnp.where(is_root_child, inp['quat'], math.quat_mul(parent['xquat'], inp['quat']))
  anchors, axes = [], []
  for k in range(inp['jtype'].shape[0]):  # joints of this body in order (at most 6)
    jtype, valid = inp['jtype'][k], inp['jvalid'][k]
    q = inp['qpos'][k]
    axis = math.rot_vec_quat(inp['jaxis'][k], xquat)
    anchor = math.rot_vec_quat(inp['jpos'][k], xquat) + xpos
    # hinge: rotation about the joint axis by qpos - qpos0; ball: the joint's quaternion
    angle = q[0] - inp['qpos0'][k]
    qloc = jnp.where(jtype == BALL, math.quat_normalize(q[:4]),
                     math.axis_angle_to_quat(inp['jaxis'][k], angle))
    rot_quat = math.quat_mul(xquat, qloc)
    rot_pos = anchor - math.rot_vec_quat(inp['jpos'][k], rot_quat)
    # slide: translation along the axis by qpos - qpos0
    slide_pos = xpos + axis * angle
    # free: the joint's position and quaternion are the body pose
    free_pos, free_quat = q[:3], math.quat_normalize(q[3:7])
    rotates = (jtype == BALL) | (jtype == HINGE)
    new_pos = jnp.where(jtype == FREE, free_pos,
                        jnp.where(rotates, rot_pos, jnp.where(jtype == SLIDE, slide_pos, xpos)))
    new_quat = jnp.where(jtype == FREE, free_quat, jnp.where(rotates, rot_quat, xquat))
    anchor = jnp.where(jtype == FREE, free_pos, anchor)
    axis = jnp.where(jtype == FREE, inp['jaxis'][k], axis)  # free joints keep the model axis
    xpos = jnp.where(valid, new_pos, xpos)
    xquat = jnp.where(valid, new_quat, xquat)
    anchors.append(anchor)
    axes.append(axis)
  xquat = math.quat_normalize(xquat)
  return {'xpos': xpos, 'xquat': xquat,
          'xanchor': jnp.stack(anchors), 'xaxis': jnp.stack(axes)}


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
    qidx = jnp.minimum(adr[..., None] + jnp.arange(7), max(m.nq - 1, 0))
    qpos = d.qpos[qidx] if m.nq else jnp.zeros(qidx.shape, d.qpos.dtype)
    jtype = jnp.where(valid, m.jnt_type[j], -1)
    jpos, jaxis = m.jnt_pos[j], m.jnt_axis[j]
    qpos0 = m.qpos0[adr]
  else:
    shape = jnt.shape
    qpos = jnp.zeros(shape + (7,), pos.dtype)
    jtype = jnp.full(shape, -1)
    jpos = jaxis = jnp.zeros(shape + (3,), pos.dtype)
    qpos0 = jnp.zeros(shape, pos.dtype)
  return {'pos': pos, 'quat': quat, 'parent_is_world': m.body_parentid == 0, 'jtype': jtype,
          'jvalid': valid, 'qpos': qpos, 'jpos': jpos, 'jaxis': jaxis, 'qpos0': qpos0}


def _local_to_global(xpos, xmat, pos, quat):
  """Pose of an element fixed in a body: (global position, flattened rotation matrix)."""
  rot = xmat.reshape(-1, 3, 3)
  return (xpos + jnp.einsum('nij,nj->ni', rot, pos),
          (rot @ math.quat_to_mat(quat)).reshape(-1, 9))


def kinematics(m, d):
  """Forward kinematics: body, joint, geom and site frames in world coordinates."""
  dtype = d.qpos.dtype
  maxjnt = m.body_jnts.shape[1]
  world = {'xpos': jnp.zeros((m.nbody, 3), dtype),
           'xquat': jnp.zeros((m.nbody, 4), dtype).at[:, 0].set(1.0),
           'xanchor': jnp.zeros((m.nbody, maxjnt, 3), dtype),
           'xaxis': jnp.zeros((m.nbody, maxjnt, 3), dtype)}
  out = tree.forward(m, _body_frame, world, _body_inputs(m, d))
  xpos, xquat = out['xpos'], out['xquat']
  xmat = math.quat_to_mat(xquat).reshape(-1, 9)
  xipos, ximat = _local_to_global(xpos, xmat, m.body_ipos, m.body_iquat)
  # joint anchors/axes: slot (jnt id - first joint of its body) of the joint's body
  slot = jnp.arange(m.njnt) - m.body_jntadr[m.jnt_bodyid]
  xanchor = out['xanchor'][m.jnt_bodyid, slot]
  xaxis = out['xaxis'][m.jnt_bodyid, slot]
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
