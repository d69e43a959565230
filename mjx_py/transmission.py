"""Position stage, last part: actuator lengths and moment arms (MuJoCo's mj_transmission).

transmission(m, d)  (after tendon.tendon)
  reads  qpos (nq,), site_xpos (nsite,3), site_xmat (nsite,9), xquat (nbody,4),
         cdof (nv,6), subtree_com (nbody,3), ten_length (ntendon,), ten_J (ntendon,nv)
         contact, ncon, efc_J (nefc_max, nv) (body transmissions)
  writes actuator_length (nu,), actuator_moment (nu,nv) dense (MuJoCo 3.3.3 stores it sparse)

Every actuator is evaluated by every transmission formula (vmap over actuators) and the one of
its ``actuator_trntype`` is kept; ``gear`` (6,) scales or orients each:

  joint / jointinparent  hinge, slide: length = gear[0] qpos, moment = gear[0] at the dof.
                         ball: gear[:3] is a torque axis in the child frame (jointinparent: in the
                         parent frame, rotated back by the joint's quaternion); length = axis .
                         expmap(quat). free: translation gear[:3], rotation gear[3:] as for a
                         ball; length 0.
  slidercrank            crank site (trnid[0]) and slider site (trnid[1]), slider along the
                         slider site's z axis; length = a.v - sqrt((a.v)^2 + r^2 - v.v).
  tendon                 length = gear[0] ten_length, moment = gear[0] ten_J.
  site                   no refsite: gear is a wrench in the site frame, length 0. With refsite:
                         length = gear . (position, expmap rotation) of the site relative to the
                         refsite, in the refsite's frame; dofs moving both sites are left out.
  body (adhesion)        length 0; moment = -(the average over the body's contacts of their
                         normal Jacobians): a contact with efc rows contributes J' w, w = 1 on
                         its normal row (condim 1, elliptic cones) or 0.5 / (dim - 1) on each
                         of its pyramid rows; a contact inside its gap (exclude 1) the contact
                         normal times the Jacobian difference at the contact point; 0 without
                         contacts. Reads contact, ncon, efc_J (after make_constraint).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from . import math, support, tree

# mjtTrn
TRN_JOINT, TRN_JOINTINPARENT, TRN_SLIDERCRANK, TRN_TENDON, TRN_SITE, TRN_BODY = range(6)
# mjtJoint
FREE, BALL, SLIDE, HINGE = 0, 1, 2, 3


def quat_to_vel(q):
  """Exponential map angle * axis (3,) of a unit quaternion, angle in (-pi, pi]
  (mju_quat2Vel with dt = 1). Smooth through the identity (finite gradients)."""
  v = q[1:]
  s = math.safe_norm(v)             # sin(angle / 2)
  angle = 2 * jnp.arctan2(s, q[0])
  angle = jnp.where(angle > jnp.pi, angle - 2 * jnp.pi, angle)
  # angle / s -> 2 / w as s -> 0 (the relative error of the limit is s^2 / 3 < 1e-13 there)
  small = s < 1e-7
  w = jnp.where(jnp.abs(q[0]) > math.MINVAL, q[0], 1.0)
  return v * jnp.where(small, 2.0 / w, angle / jnp.where(small, 1.0, s))


def sub_quat(qa, qb):
  """Rotation from qb to qa as an exponential-map vector (mju_subQuat: qb^-1 * qa)."""
  return quat_to_vel(math.quat_mul(math.quat_conj(qb), qa))


def _scatter_row(nv, adr, vals, count):
  """Row (nv,) with vals[k] at dof adr + k for k < count (count is traced): a sum of the
  values over a (width, nv) match of slots to dofs (a handful of slots; a scatter-add would be
  a loop over them on XLA:CPU)."""
  k = jnp.arange(vals.shape[0])
  vals = jnp.where(k < count, vals, 0.0)
  hit = jax.nn.one_hot(adr + k, nv, dtype=bool)                           # (width, nv)
  return jnp.sum(jnp.where(hit, vals[:, None], 0.0), axis=0)


def _joint(m, d, kind, jnt, gear):
  """Joint and jointinparent transmissions: (length, moment (nv,))."""
  jnt = jnp.clip(jnt, 0, m.njnt - 1)
  jtype, qadr, dadr = m.jnt_type[jnt], m.jnt_qposadr[jnt], m.jnt_dofadr[jnt]
  if tree.scalar_joints(m):   # static: hinge and slide only
    return d.qpos[qadr] * gear[0], jnp.zeros(m.nv, gear.dtype).at[dadr].set(gear[0])
  q = d.qpos[jnp.minimum(qadr + jnp.arange(7), m.nq - 1)]
  in_parent = kind == TRN_JOINTINPARENT
  # ball: quaternion at qadr; free: at qadr + 3. The torque axis rotates back to the parent
  # frame for jointinparent.
  quat = math.quat_normalize(jnp.where(jtype == FREE, q[3:7], q[:4]))
  rot_gear = jnp.where(jtype == FREE, gear[3:], gear[:3])
  gear_axis = jnp.where(in_parent, math.rot_vec_quat(rot_gear, math.quat_conj(quat)), rot_gear)
  scalar = (jtype == HINGE) | (jtype == SLIDE)
  length = jnp.where(scalar, q[0] * gear[0],
                     jnp.where(jtype == BALL, jnp.dot(quat_to_vel(quat), gear_axis), 0.0))
  vals = jnp.where(scalar, jnp.concatenate([gear[:1], jnp.zeros(5, gear.dtype)]),
                   jnp.where(jtype == BALL, jnp.concatenate([gear_axis, jnp.zeros(3, gear.dtype)]),
                             jnp.concatenate([gear[:3], gear_axis])))
  count = jnp.where(scalar, 1, jnp.where(jtype == BALL, 3, 6))
  return length, _scatter_row(m.nv, dadr, vals, count)


def _slidercrank(m, d, crank_site, slider_site, rod, gear):
  """Slider-crank: (length, moment (nv,))."""
  crank_site = jnp.clip(crank_site, 0, m.nsite - 1)
  slider_site = jnp.clip(slider_site, 0, m.nsite - 1)
  axis = d.site_xmat[slider_site].reshape(3, 3)[:, 2]
  vec = d.site_xpos[crank_site] - d.site_xpos[slider_site]
  av = jnp.dot(vec, axis)
  det = av * av + rod * rod - jnp.dot(vec, vec)
  ok = det > 0
  sdet = jnp.sqrt(jnp.where(ok, det, 1.0))
  length = jnp.where(ok, av - sdet, av)
  # derivatives of the length w.r.t. vec and axis (det <= 0: those of a.v)
  dldv = jnp.where(ok, axis * (1 - av / sdet) + vec / sdet, axis)
  dlda = jnp.where(ok, vec * (1 - av / sdet), vec)
  jac_s, jacr_s = support.jac(m, d, d.site_xpos[slider_site], m.site_bodyid[slider_site])
  jac_c, _ = support.jac(m, d, d.site_xpos[crank_site], m.site_bodyid[crank_site])
  jac_axis = jnp.cross(jacr_s.T, axis).T      # (3, nv): d(axis)/dq, column by column
  moment = dlda @ jac_axis + dldv @ (jac_c - jac_s)
  return length * gear[0], moment * gear[0]


def _site(m, d, site, ref, gear):
  """Site transmission, with refsite where ref >= 0: (length, moment (nv,))."""
  site = jnp.clip(site, 0, m.nsite - 1)
  has_ref = ref >= 0
  ref = jnp.clip(ref, 0, m.nsite - 1)
  body, rbody = m.site_bodyid[site], m.site_bodyid[ref]
  jacp, jacr = support.jac(m, d, d.site_xpos[site], body)
  rot = d.site_xmat[site].reshape(3, 3)
  # no refsite: the gear is a wrench in the site frame
  moment_free = jacp.T @ (rot @ gear[:3]) + jacr.T @ (rot @ gear[3:])
  if not m.trn_refsite:   # static: no site transmission of the model has a refsite
    return jnp.zeros((), moment_free.dtype), moment_free
  # refsite: pose relative to the reference, in its frame; the dofs moving both sites (the
  # common ancestral chain) are cleared from the Jacobian differences, as MuJoCo does
  rrot = d.site_xmat[ref].reshape(3, 3)
  jacp_ref, jacr_ref = support.jac(m, d, d.site_xpos[ref], rbody)
  common = support.dof_moves(m, body) & support.dof_moves(m, rbody)
  dpos = jnp.where(common, 0.0, jacp - jacp_ref)
  drot = jnp.where(common, 0.0, jacr - jacr_ref)
  vec = rrot.T @ (d.site_xpos[site] - d.site_xpos[ref])
  # site orientations as MuJoCo forms them here: site_quat * xquat (sic)
  quat = math.quat_mul(m.site_quat[site], d.xquat[body])
  rquat = math.quat_mul(m.site_quat[ref], d.xquat[rbody])
  length_ref = jnp.dot(vec, gear[:3]) + jnp.dot(sub_quat(quat, rquat), gear[3:])
  moment_ref = dpos.T @ (rrot @ gear[:3]) + drot.T @ (rrot @ gear[3:])
  return (jnp.where(has_ref, length_ref, 0.0),
          jnp.where(has_ref, moment_ref, moment_free))


def _contact_normals(m, d):
  """Per contact slot: (body1, body2, counted (nconmax,) bool, normal Jacobian (nconmax, nv)),
  the terms of the adhesion (body) transmission, see the module docstring."""
  con = d.contact
  n = m.nconmax
  ok = (jnp.arange(n) < d.ncon) & (con.geom1 >= 0) & (con.geom2 >= 0)
  b1 = jnp.where(ok, m.geom_bodyid[jnp.maximum(con.geom1, 0)], -1)
  b2 = jnp.where(ok, m.geom_bodyid[jnp.maximum(con.geom2, 0)], -1)
  active = ok & (con.exclude == 0) & (con.efc_address >= 0)
  gap = ok & (con.exclude == 1)
  jn = jnp.zeros((n, m.nv), d.qpos.dtype)
  if m.nefc_max:
    # rows of a contact: normal (condim 1 / elliptic) or the 2 (dim - 1) pyramid directions
    k = jnp.arange(max(int(m.efc_rows[3]), 1) if m.opt.cone == 0 else 1)
    npyr = jnp.where(con.dim == 1, 1, 2 * (con.dim - 1))
    w = jnp.where(con.dim[:, None] == 1, (k == 0) * 1.0,
                  jnp.where(k[None, :] < npyr[:, None], 1.0 / jnp.maximum(npyr, 1)[:, None], 0.0))
    if m.opt.cone == 1:
      w = jnp.ones((n, 1))
    rows = d.efc_J[jnp.clip(con.efc_address[:, None] + k[None, :], 0, m.nefc_max - 1)]
    jn = jnp.where(active[:, None], jnp.einsum('ck,ckv->cv', w.astype(rows.dtype), rows), jn)
  # contacts in their gap: normal . (Jacobian of body2 - Jacobian of body1) at the point
  jp = jax.vmap(lambda p, b: support.jac(m, d, p, b)[0])(
      jnp.concatenate([con.pos, con.pos]), jnp.concatenate([jnp.maximum(b2, 0),
                                                            jnp.maximum(b1, 0)]))
  jdif = jp[:n] - jp[n:]
  jn = jnp.where(gap[:, None], jnp.einsum('ci,civ->cv', con.frame[:, :3], jdif), jn)
  return b1, b2, active | gap, jn


def _body(normals, body):
  """Adhesion moment (nv,) of the actuator on ``body``: minus the average contact normal
  Jacobian of the body's counted contacts (0 without contacts)."""
  b1, b2, counted, jn = normals
  mine = counted & ((b1 == body) | (b2 == body))
  count = jnp.sum(mine)
  total = jnp.sum(jnp.where(mine[:, None], jn, 0.0), axis=0)
  return jnp.where(count > 0, -total / jnp.maximum(count, 1), 0.0)


def _actuator(m, d, kind, trnid, gear, crank, normals=None):
  """Length and moment (nv,) of one actuator: the formulas of the transmission types the model
  has (static ``m.trn_types``), the one of ``kind`` kept."""
  types = m.trn_types
  conds, outs = [], []
  if m.njnt and (TRN_JOINT in types or TRN_JOINTINPARENT in types):
    conds.append((kind == TRN_JOINT) | (kind == TRN_JOINTINPARENT))
    outs.append(_joint(m, d, kind, trnid[0], gear))
  if m.nsite and TRN_SLIDERCRANK in types:
    conds.append(kind == TRN_SLIDERCRANK)
    outs.append(_slidercrank(m, d, trnid[0], trnid[1], crank, gear))
  if m.ntendon and TRN_TENDON in types:
    tid = jnp.clip(trnid[0], 0, m.ntendon - 1)
    conds.append(kind == TRN_TENDON)
    outs.append((d.ten_length[tid] * gear[0], d.ten_J[tid] * gear[0]))
  if m.nsite and TRN_SITE in types:
    conds.append(kind == TRN_SITE)
    outs.append(_site(m, d, trnid[0], trnid[1], gear))
  if normals is not None:
    conds.append(kind == TRN_BODY)
    outs.append((jnp.zeros((), d.qpos.dtype), _body(normals, trnid[0])))
  if not outs:
    return jnp.zeros((), d.qpos.dtype), jnp.zeros(m.nv, d.qpos.dtype)
  length = jnp.select(conds, [o[0] for o in outs], 0.0)
  moment = jnp.select(conds, [o[1] for o in outs], 0.0)
  return length, moment


def transmission(m, d):
  """Actuator lengths and dense moment arms (MuJoCo's mj_transmission)."""
  if not m.nu:
    return d
  normals = None
  if TRN_BODY in m.trn_types and m.nconmax and m.nv:
    normals = _contact_normals(m, d)
  length, moment = jax.vmap(lambda *a: _actuator(m, d, *a, normals=normals))(
      m.actuator_trntype, m.actuator_trnid, m.actuator_gear, m.actuator_cranklength)
  return dataclasses.replace(d, actuator_length=length, actuator_moment=moment)
