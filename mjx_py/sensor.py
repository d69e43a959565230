"""Sensors, energy and mj_rnePostConstraint: MuJoCo 3.3.3's engine_sensor.c for one world.

sensor_pos(m, d)   (mj_sensorPos, end of the position stage)
  reads  qpos, time, xpos, xquat, xmat, xipos, ximat, geom_xpos/_xmat, site_xpos/_xmat,
         cam_xpos/_xmat, subtree_com, ten_length, actuator_length, qM, qvel, efc_* (limits)
  writes sensordata (nsensordata,) for the position-stage sensors: magnetometer,
         rangefinder, camprojection, jointpos, tendonpos, actuatorpos, ballquat,
         jointlimitpos, tendonlimitpos, framepos, framequat, framexaxis/yaxis/zaxis,
         subtreecom, distance, normal, fromto, e_potential, e_kinetic, clock;
         energy[0] (2,) with an e_potential sensor, energy[1] with an e_kinetic sensor
sensor_vel(m, d)   (mj_sensorVel, end of the velocity stage)
  reads  qvel, cvel, subtree_com, ten_velocity, actuator_velocity, efc_vel and the frames
  writes sensordata: velocimeter, gyro, jointvel, tendonvel, actuatorvel, ballangvel,
         jointlimitvel, tendonlimitvel, framelinvel, frameangvel, subtreelinvel,
         subtreeangmom; subtree_linvel, subtree_angmom (nbody, 3) when a subtree sensor needs
         them (mj_subtreeVel)
sensor_acc(m, d)   (mj_sensorAcc, after the constraint stage)
  reads  qacc, actuator_force, qfrc_actuator, xfrc_applied, contact, efc_* and the frames
  writes sensordata: touch, accelerometer, force, torque, actuatorfrc, jointactuatorfrc,
         tendonactuatorfrc, jointlimitfrc, tendonlimitfrc, framelinacc, frameangacc;
         cacc, cfrc_int, cfrc_ext (nbody, 6) when a sensor needs them (mj_rnePostConstraint)
energy_pos(m, d), energy_vel(m, d)   (mj_energyPos / mj_energyVel, the energy enable flag)
  write  energy[0] (potential: gravity and joint / tendon springs), energy[1] (kinetic,
         qvel' qM qvel / 2)
rne_post_constraint(m, d, contact_force=None)   (mj_rnePostConstraint)
  writes cacc (body accelerations with qacc, the world accelerating at -gravity),
         cfrc_ext (xfrc_applied, contact and connect / weld forces as com-based wrenches),
         cfrc_int (the
         interaction wrench between each body and its parent)

Sensor outputs go to sensordata[sensor_adr : sensor_adr + dim] in the sensor's frame
conventions (site sensors in the site frame; frame sensors in the world frame or in the frame
of reftype/refid). After each stage, MuJoCo's cutoff: REAL outputs are clipped to [-cutoff,
cutoff], POSITIVE ones to <= cutoff (0: off; fromto is never clipped, its cutoff is the search
distance). noise is never applied (as in MuJoCo since 3.1.4). With the ``sensor`` disable flag
no stage writes anything (sensordata keeps its values). user and plugin sensors are refused.

Sensors that read constraint forces (touch, jointlimitfrc, tendonlimitfrc) need ``efc_force``
in Data (the constraint solver); without it they are 0 when their constraints are disabled and
raise NotSupportedError when traced otherwise. The limit position / velocity sensors read the
efc rows when the model has them (0 for an inactive limit, as in MuJoCo).

Collision sensors (distance, normal, fromto) run MuJoCo's mj_geomDistance on every geom pair of
their two objects with margin = cutoff and keep the nearest (pairs in MuJoCo's loop order, the
first on ties): pairs with an analytic collision function use it (plane : sphere / capsule /
cylinder / box / ellipsoid / mesh, sphere : sphere / capsule / cylinder / box, capsule : capsule
/ box); box : box and the pairs MuJoCo sends to its convex collider (ellipsoids, cylinders
against capsules / cylinders / boxes, meshes) use native GJK in distance mode, as MuJoCo
3.3.3 does by default. Their geom pairs are a static table (``distance_plan``) built from the
Model's index arrays, so the Model must be concrete (closed over, not a traced jit argument)
when a model with collision sensors is traced, unless put_model stored the table as the static
field ``sensor_distance_plan``. Height fields and pairs without a collision function give the
cutoff (nothing found). GJK pairs that touch to within ccd_tolerance, where MuJoCo goes on to
EPA, keep GJK's result (it differs from EPA's depth by about the tolerance).

Vectorization: each stage gathers the frames of every sensor's object and reference at once
(one gather from the stacked body / geom / site / camera frames) and derives their velocities
and accelerations in bulk; every sensor type the model has (``m.sensor_types``, static) is then
a few array operations over its sensors, scattered into sensordata. The sensors of each type
and their sensordata addresses are static index arrays: from the Model's arrays when it is
concrete (closed over), else from put_model's snapshot of the sensors' index fields
(``Model.sensor_static``: types, objects, references, addresses, dims, stages, datatypes and
site types, which are structural and fixed by put_model, like the type sets). Only a traced
Model without that snapshot evaluates every sensor for every type present and selects by type.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from . import math, tree, velocity
from .errors import NotSupportedError
from .math import MINVAL, concrete
from .model import static_leaf
from .passive import _sub_quat
from .ray import PRIMITIVES as RAY_PRIMITIVES
from .ray import normalize3
from .ray import ray as cast_ray

(TOUCH, ACCELEROMETER, VELOCIMETER, GYRO, FORCE, TORQUE, MAGNETOMETER, RANGEFINDER,
 CAMPROJECTION, JOINTPOS, JOINTVEL, TENDONPOS, TENDONVEL, ACTUATORPOS, ACTUATORVEL,
 ACTUATORFRC, JOINTACTFRC, TENDONACTFRC, BALLQUAT, BALLANGVEL, JOINTLIMITPOS, JOINTLIMITVEL,
 JOINTLIMITFRC, TENDONLIMITPOS, TENDONLIMITVEL, TENDONLIMITFRC, FRAMEPOS, FRAMEQUAT,
 FRAMEXAXIS, FRAMEYAXIS, FRAMEZAXIS, FRAMELINVEL, FRAMEANGVEL, FRAMELINACC, FRAMEANGACC,
 SUBTREECOM, SUBTREELINVEL, SUBTREEANGMOM, GEOMDIST, GEOMNORMAL, GEOMFROMTO, E_POTENTIAL,
 E_KINETIC, CLOCK, PLUGIN, USER) = range(46)
POS, VEL, ACC = 1, 2, 3                                     # mjtStage
REAL, POSITIVE, AXIS, QUATERNION = 0, 1, 2, 3               # mjtDataType
OBJ_BODY, OBJ_XBODY, OBJ_GEOM, OBJ_SITE, OBJ_CAMERA = 1, 2, 5, 6, 7
CNSTR_LIMIT_JOINT, CNSTR_LIMIT_TENDON = 3, 4
TRN_TENDON = 3
FREE, BALL = 0, 1
DSBL_CONSTRAINT, DSBL_EQUALITY, DSBL_LIMIT, DSBL_CONTACT = 1, 2, 8, 16
EFC_EQUALITY = 0                     # mjCNSTR_EQUALITY
EQ_CONNECT, EQ_WELD = 0, 1           # mjtEq
DSBL_PASSIVE, DSBL_GRAVITY, DSBL_SENSOR, DSBL_NATIVECCD = 1 << 5, 1 << 6, 1 << 12, 1 << 16
MAXVAL = 1e10

# type -> (stage, dim) of every built-in sensor
_INFO = {
    TOUCH: (ACC, 1), ACCELEROMETER: (ACC, 3), VELOCIMETER: (VEL, 3), GYRO: (VEL, 3),
    FORCE: (ACC, 3), TORQUE: (ACC, 3), MAGNETOMETER: (POS, 3), RANGEFINDER: (POS, 1),
    CAMPROJECTION: (POS, 2), JOINTPOS: (POS, 1), JOINTVEL: (VEL, 1), TENDONPOS: (POS, 1),
    TENDONVEL: (VEL, 1), ACTUATORPOS: (POS, 1), ACTUATORVEL: (VEL, 1), ACTUATORFRC: (ACC, 1),
    JOINTACTFRC: (ACC, 1), TENDONACTFRC: (ACC, 1), BALLQUAT: (POS, 4), BALLANGVEL: (VEL, 3),
    JOINTLIMITPOS: (POS, 1), JOINTLIMITVEL: (VEL, 1), JOINTLIMITFRC: (ACC, 1),
    TENDONLIMITPOS: (POS, 1), TENDONLIMITVEL: (VEL, 1), TENDONLIMITFRC: (ACC, 1),
    FRAMEPOS: (POS, 3), FRAMEQUAT: (POS, 4), FRAMEXAXIS: (POS, 3), FRAMEYAXIS: (POS, 3),
    FRAMEZAXIS: (POS, 3), FRAMELINVEL: (VEL, 3), FRAMEANGVEL: (VEL, 3), FRAMELINACC: (ACC, 3),
    FRAMEANGACC: (ACC, 3), SUBTREECOM: (POS, 3), SUBTREELINVEL: (VEL, 3),
    SUBTREEANGMOM: (VEL, 3), GEOMDIST: (POS, 1), GEOMNORMAL: (POS, 3), GEOMFROMTO: (POS, 6),
    E_POTENTIAL: (POS, 1), E_KINETIC: (POS, 1), CLOCK: (POS, 1),
}
_COLLISION = (GEOMDIST, GEOMNORMAL, GEOMFROMTO)
_RNE_POST = (ACCELEROMETER, FORCE, TORQUE, FRAMELINACC, FRAMEANGACC)


# ---------------------------------------------------------------------------------------------
# Helpers

def _with_static(m):
  """m with the sensors' structural index fields (mjx_py.model.SENSOR_STATIC) concrete: a
  traced Model (a jit argument, a vmapped batch) gets put_model's concrete arrays for them, so
  that every stage below selects sensors and addresses on the host as for a closed-over Model.
  Without them (a Model not built by put_model in this process) the traced path remains."""
  swap = {}
  for name, values in getattr(m, 'sensor_static', ()):
    if concrete(getattr(m, name)) is None:
      leaf = static_leaf(name, values)
      if leaf is not None:
        swap[name] = leaf
  return dataclasses.replace(m, **swap) if swap else m


def _ids(m, stype):
  """Sensors to evaluate for type ``stype``: exactly those (static) when the Model is concrete,
  else every sensor (the writer keeps the ones of that type)."""
  types = concrete(m.sensor_type)
  if types is None:
    return np.arange(m.nsensor)
  return np.nonzero(types == stype)[0]


def _write(m, data, stype, ids, vals):
  """Scatters vals (len(ids), dim) into sensordata at the sensors of type ``stype``."""
  types, adrs = concrete(m.sensor_type), concrete(m.sensor_adr)
  if types is not None and adrs is not None:                   # static addresses
    keep = types[ids] == stype
    idx = adrs[ids][keep][:, None] + np.arange(vals.shape[1])
    return data.at[idx.ravel()].set(vals[np.nonzero(keep)[0]].reshape(-1).astype(data.dtype))
  mine = m.sensor_type[ids] == stype
  adr = jnp.where(mine, m.sensor_adr[ids], m.nsensordata)      # other types: dropped
  idx = adr[:, None] + jnp.arange(vals.shape[1])
  return data.at[idx].set(vals.astype(data.dtype), mode='drop')


def _cutoff(m, data, stage):
  """MuJoCo's apply_cutoff for the sensors of ``stage``: REAL clipped to [-cutoff, cutoff],
  POSITIVE to <= cutoff, where cutoff > 0; fromto untouched."""
  vals = [concrete(getattr(m, f)) for f in ('sensor_type', 'sensor_datatype',
                                            'sensor_needstage', 'sensor_cutoff', 'sensor_adr',
                                            'sensor_dim')]
  if all(v is not None for v in vals):                         # static element sets
    stype, kind, stage_of, cut, adr, dim = vals
    for datatype in (REAL, POSITIVE):
      ids = np.nonzero((stage_of == stage) & (cut > 0) & (stype != GEOMFROMTO)
                       & (kind == datatype))[0]
      if not ids.size:
        continue
      idx = np.concatenate([adr[i] + np.arange(dim[i]) for i in ids])
      c = jnp.repeat(m.sensor_cutoff[ids], dim[ids], total_repeat_length=idx.size)
      x = data[idx]
      data = data.at[idx].set(jnp.clip(x, -c, c) if datatype == REAL else jnp.minimum(x, c))
    return data
  sid = jnp.searchsorted(m.sensor_adr, jnp.arange(m.nsensordata), side='right') - 1
  cut = m.sensor_cutoff[sid]
  kind = m.sensor_datatype[sid]
  on = (m.sensor_needstage[sid] == stage) & (cut > 0) & (m.sensor_type[sid] != GEOMFROMTO)
  clipped = jnp.where(kind == REAL, jnp.clip(data, -cut, cut),
                      jnp.where(kind == POSITIVE, jnp.minimum(data, cut), data))
  return jnp.where(on, clipped, data)


def _check_types(m):
  for t in m.sensor_types:
    if t not in _INFO:
      name = 'plugin' if t == PLUGIN else 'user' if t == USER else f'type {t}'
      types = concrete(m.sensor_type)
      names = dict(m.names).get('sensor', ())
      which = [names[i] or f'#{i}' for i in np.nonzero(types == t)[0]] if (
          types is not None and len(names) == len(types)) else []
      raise NotSupportedError(
          f'{name} sensors are not supported' + (f': {", ".join(which)}' if which else ''))


def _stage_types(m, stage):
  _check_types(m)
  return [t for t in m.sensor_types if _INFO[t][0] == stage]


def _run(m, data, types, fns):
  """Evaluates the sensor types ``types`` into data: ``fns[type](ids)`` gives the outputs
  (len(ids), dim) of the sensors ``ids`` (a static index array)."""
  static = concrete(m.sensor_type) is not None and concrete(m.sensor_adr) is not None
  idx, vals = [], []
  for t in types:
    ids = _ids(m, t)
    if not ids.size:
      continue
    out = fns[t](jnp.asarray(ids, jnp.int32))
    if not static:
      data = _write(m, data, t, ids, out)
      continue
    # static addresses: a type whose sensors' values are contiguous in sensordata (listed
    # together) is one slice update, the others are written by one scatter at the end
    at = (concrete(m.sensor_adr)[ids][:, None] + np.arange(out.shape[1])).ravel()
    flat = out.reshape(-1).astype(data.dtype)
    if np.array_equal(at, np.arange(at[0], at[0] + at.size)):
      data = jax.lax.dynamic_update_slice(data, flat, (int(at[0]),))
    else:
      idx.append(at)
      vals.append(flat)
  if idx:
    data = data.at[np.concatenate(idx)].set(jnp.concatenate(vals))
  return data


def _take(x, i):
  """x[i] with i clipped into range (x non-empty)."""
  return x[jnp.clip(i, 0, x.shape[0] - 1)]


def _rot_t(mat, v):
  """mat^T v for stacks mat (n, 3, 3), v (n, 3)."""
  return math.matvec_small(jnp.swapaxes(mat, -1, -2), v)


# ---------------------------------------------------------------------------------------------
# Frames and object velocities / accelerations, for stacks of objects

class Frames(NamedTuple):
  """Frames of n objects (get_xpos_xmat / get_xquat): world position, rotation, quaternion
  (None unless asked for) and the body each object moves with."""
  pos: jax.Array    # (n, 3)
  mat: jax.Array    # (n, 3, 3)
  quat: object      # (n, 4) or None
  body: jax.Array   # (n,) int32


_FRAME_TYPES = (OBJ_BODY, OBJ_XBODY, OBJ_GEOM, OBJ_SITE, OBJ_CAMERA)


def _frame_rows(m, objtype, objid):
  """Row of each object (objtype, objid) in the stacked frame table of ``frames`` (the body,
  xbody, geom, site and camera blocks, in that order), and whether it is a frame object. A
  static numpy array when the inputs are concrete, else traced."""
  sizes = (m.nbody, m.nbody, m.ngeom, m.nsite, m.ncam)
  starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
  types, ids = concrete(objtype), concrete(objid)
  if types is not None and ids is not None:
    row = np.zeros(ids.shape, np.int32)
    ok = np.zeros(ids.shape, bool)
    for t, start, size in zip(_FRAME_TYPES, starts, sizes):
      sel = (types == t) & (size > 0)
      row = np.where(sel, start + np.clip(ids, 0, max(size - 1, 0)), row)
      ok |= sel
    return row, ok
  row = jnp.zeros(objid.shape, jnp.int32)
  ok = jnp.zeros(objid.shape, bool)
  for t, start, size in zip(_FRAME_TYPES, starts, sizes):
    if size:
      sel = objtype == t
      row = jnp.where(sel, int(start) + jnp.clip(objid, 0, size - 1), row)
      ok = ok | sel
  return row, ok


def frames(m, d, objtype, objid, quat=False):
  """Frames of objects (objtype, objid) (n,) (BODY: the inertial frame; XBODY: the body frame;
  GEOM, SITE, CAMERA); other object types give zeros. ``quat`` (static): also the
  quaternions, composed from the body's xquat and the object's local one as MuJoCo does.

  One gather from the stacked frames of every object of the model (static rows when the
  Model is concrete)."""
  row, ok = _frame_rows(m, objtype, objid)
  bodies = jnp.arange(m.nbody)
  blocks = [(d.xipos, d.ximat, bodies, m.body_iquat), (d.xpos, d.xmat, bodies, None)]
  if m.ngeom:
    blocks.append((d.geom_xpos, d.geom_xmat, m.geom_bodyid, m.geom_quat))
  if m.nsite:
    blocks.append((d.site_xpos, d.site_xmat, m.site_bodyid, m.site_quat))
  if m.ncam:
    blocks.append((d.cam_xpos, d.cam_xmat, m.cam_bodyid, m.cam_quat))
  pos = jnp.concatenate([b[0] for b in blocks])[row]
  mat = jnp.concatenate([b[1] for b in blocks])[row]
  body = jnp.concatenate([b[2] for b in blocks])[row]
  mask = jnp.asarray(ok)
  pos = jnp.where(mask[:, None], pos, 0.0)
  mat = jnp.where(mask[:, None], mat, 0.0)
  body = jnp.where(mask, body, 0).astype(jnp.int32)
  q = None
  if quat:
    # the object's quaternion: its body's xquat times the local one (XBODY: the identity,
    # which multiplies exactly)
    local = jnp.concatenate([m.body_iquat, jnp.zeros((m.nbody, 4), d.xquat.dtype).at[:, 0]
                             .set(1.0)] + [b[3] for b in blocks[2:]])[row]
    q = jnp.where(mask[:, None], math.quat_mul(d.xquat[body], local), 0.0)
  return Frames(pos, mat.reshape(-1, 3, 3), q, body)


def _motion(m, d, motion, fr):
  """Com-based motion vectors (nbody, 6) of the frames' bodies moved to the frame origins
  (mju_transformSpatial, world orientation): (angular (n, 3), linear (n, 3))."""
  v = motion[fr.body]
  arm = fr.pos - d.subtree_com[m.body_rootid[fr.body]]
  return v[:, :3], v[:, 3:] - jnp.cross(arm, v[:, :3])


def velocities(m, d, fr):
  """World-frame (angular, linear) velocities of the frame origins (mj_objectVelocity);
  rotate by mat^T for the object frame (flg_local)."""
  return _motion(m, d, d.cvel, fr)


def accelerations(m, d, fr):
  """World-frame (angular, linear) accelerations of the frame origins (mj_objectAcceleration,
  reads cacc): the com-based acceleration moved to the origin, plus omega x v."""
  wang, wlin = _motion(m, d, d.cvel, fr)
  aang, alin = _motion(m, d, d.cacc, fr)
  return aang, alin + jnp.cross(wang, wlin)


def object_velocity(m, d, objtype, objid, local=False):
  """(angular (3,), linear (3,)) velocity of one object (mj_objectVelocity): world frame, or
  the object's frame with ``local``."""
  fr = frames(m, d, jnp.asarray(objtype)[None], jnp.asarray(objid)[None])
  ang, lin = velocities(m, d, fr)
  if local:
    ang, lin = _rot_t(fr.mat, ang), _rot_t(fr.mat, lin)
  return ang[0], lin[0]


def object_acceleration(m, d, objtype, objid, local=False):
  """(angular, linear) acceleration of one object (mj_objectAcceleration; reads cacc)."""
  fr = frames(m, d, jnp.asarray(objtype)[None], jnp.asarray(objid)[None])
  ang, lin = accelerations(m, d, fr)
  if local:
    ang, lin = _rot_t(fr.mat, ang), _rot_t(fr.mat, lin)
  return ang[0], lin[0]


# ---------------------------------------------------------------------------------------------
# Constraint rows

def _efc_first(m, d, ctype, objid, field):
  """(n, 1): field at the first limit row (rows ne + nf ... nefc) of type ctype of each object
  objid (n,), or 0 (MuJoCo's loop over the efc rows)."""
  if not m.nefc_max or field is None:
    return jnp.zeros((objid.shape[0], 1), d.qpos.dtype)
  j = jnp.arange(m.nefc_max)
  rows = (j >= d.ne + d.nf) & (j < d.nefc) & (d.efc_type == ctype)
  hit = rows[None, :] & (d.efc_id[None, :] == objid[:, None])
  k = jnp.argmax(hit, axis=1)
  return jnp.where(jnp.any(hit, axis=1), field[k], 0.0)[:, None]


def _constraint_force_kinds(m):
  """Names of the constraint kinds the model can produce while constraints are on (static)."""
  flags = m.opt.disableflags
  if flags & DSBL_CONSTRAINT:
    return set()
  kinds = set()
  if m.ncandidate and not flags & DSBL_CONTACT:
    kinds.add('contact')
  if m.nlimit and not flags & DSBL_LIMIT:
    kinds.add('limit')
  return kinds


def _need_efc_force(m, efc_force, what, kind):
  """Raises if rows of ``kind`` can exist but there are no constraint forces (no solver)."""
  if efc_force is None and kind in _constraint_force_kinds(m):
    raise NotSupportedError(
        f'{what} sensors read constraint forces, and the constraint solver is not implemented '
        'yet; disable constraints (<option><flag constraint="disable"/></option>) or remove '
        'the sensor')


def contact_forces(m, d, efc_force):
  """(nconmax, 6) force:torque of every contact in its contact frame (mj_contactForce): the
  efc rows of each contact, decoded from the pyramid (normal = sum of the pyramid forces,
  friction_i = (f_{2i} - f_{2i+1}) mu_i) or copied (elliptic, frictionless); 0 for unused
  rows and contacts without efc rows."""
  con = d.contact
  n = m.nconmax
  dt = efc_force.dtype
  if not efc_force.shape[0]:                                   # no rows (constraints off)
    return jnp.zeros((n, 6), dt)
  adr = con.efc_address
  ok = (jnp.arange(n) < d.ncon) & (adr >= 0)
  dim = con.dim
  # the forces of each contact's rows: only as many as a contact slot of this model can have
  # (m.efc_rows[3], static), padded with zeros to the 10 of a condim-6 pyramid (the gather of
  # single elements is the costly part: about 4 ns an element at batch 1024 on XLA:CPU)
  nr = max(min(int(m.efc_rows[3]), 10), 1)
  k = jnp.arange(10)
  rows = efc_force[jnp.clip(adr[:, None] + k[:nr], 0, max(efc_force.shape[0] - 1, 0))]
  rows = jnp.pad(rows, ((0, 0), (0, 10 - nr)))
  if m.opt.cone == 1:                                          # elliptic: rows are the force
    res = jnp.where(k[:6] < dim[:, None], rows[:, :6], 0.0)
  else:
    npyr = jnp.where(dim == 1, 1, 2 * (dim - 1))
    normal = jnp.sum(jnp.where(k < npyr[:, None], rows, 0.0), axis=1)
    pair = rows[:, 0:10:2] - rows[:, 1:10:2]                   # (n, 5)
    fric = pair * con.friction
    fric = jnp.where(jnp.arange(5) < (dim - 1)[:, None], fric, 0.0)
    res = jnp.concatenate([normal[:, None], fric], axis=1)
  return jnp.where(ok[:, None], res, 0.0).astype(dt)


# ---------------------------------------------------------------------------------------------
# Energy

def potential_energy(m, d):
  """Potential energy (mj_energyPos): -sum m_i g . xipos_i (unless gravity is disabled) plus
  joint and tendon spring energy (unless passive forces are disabled)."""
  dt = d.qpos.dtype
  e = jnp.zeros((), dt)
  if not m.opt.disableflags & DSBL_GRAVITY and m.nbody > 1:
    e = e - jnp.sum(m.body_mass[1:] * (d.xipos[1:] @ m.opt.gravity))
  if m.opt.disableflags & DSBL_PASSIVE:
    return e
  if m.njnt and tree.scalar_joints(m):
    # hinges and slides only (static): one qpos per joint, in joint order
    e = e + 0.5 * jnp.sum(m.jnt_stiffness * (d.qpos - m.qpos_spring) ** 2)
  elif m.njnt:
    qidx = jnp.minimum(m.jnt_qposadr[:, None] + jnp.arange(7), m.nq - 1)
    q, q0 = d.qpos[qidx], m.qpos_spring[qidx]
    free = m.jnt_type == FREE
    ball = m.jnt_type == BALL
    quat = jnp.where(free[:, None], q[:, 3:7], q[:, :4])
    quat0 = jnp.where(free[:, None], q0[:, 3:7], q0[:, :4])
    rot = _sub_quat(quat, quat0)
    rot2 = jnp.sum(rot * rot, axis=1)
    lin = q[:, :3] - q0[:, :3]
    scalar = (q[:, 0] - q0[:, 0]) ** 2
    sq = jnp.where(free, jnp.sum(lin * lin, axis=1) + rot2, jnp.where(ball, rot2, scalar))
    e = e + 0.5 * jnp.sum(m.jnt_stiffness * sq)
  if m.ntendon:
    length = d.ten_length
    lower, upper = m.tendon_lengthspring[:, 0], m.tendon_lengthspring[:, 1]
    disp = jnp.where(length > upper, upper - length,
                     jnp.where(length < lower, lower - length, 0.0))
    e = e + 0.5 * jnp.sum(m.tendon_stiffness * disp * disp)
  return e


def kinetic_energy(m, d):
  """Kinetic energy qvel' qM qvel / 2 (mj_energyVel)."""
  if not m.nv:
    return jnp.zeros((), d.qvel.dtype)
  return 0.5 * d.qvel @ (d.qM @ d.qvel)


def energy_pos(m, d):
  """energy[0] = potential energy (the position part of the energy enable flag)."""
  return dataclasses.replace(d, energy=d.energy.at[0].set(potential_energy(m, d)))


def energy_vel(m, d):
  """energy[1] = kinetic energy (the velocity part of the energy enable flag)."""
  return dataclasses.replace(d, energy=d.energy.at[1].set(kinetic_energy(m, d)))


# ---------------------------------------------------------------------------------------------
# Position stage

def _cam_project(site_pos, cam_pos, cam_mat, res, fovy, intrinsic, sensorsize):
  """Pixel coordinates (2,) of a world point in a camera image (cam_project)."""
  p = cam_mat.T @ (site_pos - cam_pos)              # camera frame (looking along -z)
  res = res.astype(p.dtype)
  has_size = (sensorsize[0] != 0) & (sensorsize[1] != 0)
  fxy = 0.5 / jnp.tan(fovy * jnp.pi / 360.0) * res[1]
  # MuJoCo stores intrinsic and sensorsize as float and evaluates this quotient in float
  f32 = jnp.float32
  safe = jnp.where(has_size, sensorsize, 1.0).astype(f32)
  focal = (intrinsic[:2].astype(f32) / safe * res.astype(f32)).astype(p.dtype)
  fx = jnp.where(has_size, focal[0], fxy)
  fy = jnp.where(has_size, focal[1], fxy)
  u = -fx * p[0] + 0.5 * res[0] * p[2]
  v = fy * p[1] + 0.5 * res[1] * p[2]
  w = p[2]
  small = jnp.abs(w) < MINVAL
  w = jnp.where(small, jnp.where(w < 0, jnp.minimum(w, -MINVAL), jnp.maximum(w, MINVAL)), w)
  return jnp.stack([u / w, v / w])


def _pos_fns(m, d, types):
  """Per-type evaluators of the position stage: fn(ids (n,)) -> (n, dim)."""
  obj, ref = m.sensor_objid, m.sensor_refid
  quat = FRAMEQUAT in types
  fr = frames(m, d, m.sensor_objtype, obj, quat)
  rf = frames(m, d, m.sensor_reftype, ref, quat)
  has_ref = ref >= 0

  def in_ref(vec, i):
    return jnp.where(has_ref[i][:, None], _rot_t(rf.mat[i], vec), vec)

  def framepos(i):
    return jnp.where(has_ref[i][:, None], _rot_t(rf.mat[i], fr.pos[i] - rf.pos[i]), fr.pos[i])

  def framequat(i):
    rel = math.quat_mul(math.quat_conj(rf.quat[i]), fr.quat[i])
    return jnp.where(has_ref[i][:, None], rel, fr.quat[i])

  def rangefinder(i):
    dist, _ = jax.vmap(lambda p, v, b: cast_ray(m, d, p, v, None, True, b))(
        fr.pos[i], fr.mat[i][:, :, 2], fr.body[i])
    return dist[:, None]

  def camproj(i):
    cam = ref[i]
    return jax.vmap(_cam_project)(
        fr.pos[i], rf.pos[i], rf.mat[i], _take(m.cam_resolution, cam), _take(m.cam_fovy, cam),
        _take(m.cam_intrinsic, cam), _take(m.cam_sensorsize, cam))

  def qadr(i):
    return _take(m.jnt_qposadr, obj[i])

  def col(x):
    return lambda i: _take(x, obj[i])[:, None]

  def limit(ctype):
    return lambda i: _efc_first(m, d, ctype, obj[i], d.efc_pos - d.efc_margin)

  def scalar(x):
    return lambda i: jnp.broadcast_to(jnp.asarray(x, d.qpos.dtype), (i.shape[0], 1))

  fns = {
      MAGNETOMETER: lambda i: _rot_t(fr.mat[i], jnp.broadcast_to(m.opt.magnetic,
                                                                  (i.shape[0], 3))),
      RANGEFINDER: rangefinder,
      JOINTPOS: lambda i: d.qpos[qadr(i)][:, None],
      TENDONPOS: col(d.ten_length) if m.ntendon else None,
      ACTUATORPOS: col(d.actuator_length) if m.nu else None,
      BALLQUAT: lambda i: math.quat_normalize(
          d.qpos[jnp.minimum(qadr(i)[:, None] + jnp.arange(4), m.nq - 1)]),
      JOINTLIMITPOS: limit(CNSTR_LIMIT_JOINT),
      TENDONLIMITPOS: limit(CNSTR_LIMIT_TENDON),
      FRAMEPOS: framepos,
      FRAMEXAXIS: lambda i: in_ref(fr.mat[i][:, :, 0], i),
      FRAMEYAXIS: lambda i: in_ref(fr.mat[i][:, :, 1], i),
      FRAMEZAXIS: lambda i: in_ref(fr.mat[i][:, :, 2], i),
      FRAMEQUAT: framequat,
      SUBTREECOM: lambda i: _take(d.subtree_com, obj[i]),
      E_POTENTIAL: scalar(d.energy[0]),
      E_KINETIC: scalar(d.energy[1]),
      CLOCK: scalar(d.time),
      CAMPROJECTION: camproj if m.ncam else None,
  }
  return fns


def sensor_pos(m, d):
  """Position-stage sensors (mj_sensorPos); see the module docstring."""
  if m.opt.disableflags & DSBL_SENSOR or not m.nsensor:
    return d
  m = _with_static(m)
  types = _stage_types(m, POS)
  if E_POTENTIAL in types:
    d = energy_pos(m, d)
  if E_KINETIC in types:
    d = energy_vel(m, d)
  data = _run(m, d.sensordata, [t for t in types if t not in _COLLISION],
              _pos_fns(m, d, types))
  if any(t in _COLLISION for t in types):
    data = _collision_sensors(m, d, data)
  return dataclasses.replace(d, sensordata=_cutoff(m, data, POS))


# ---------------------------------------------------------------------------------------------
# Velocity stage

def _vel_fns(m, d, types):
  """Per-type evaluators of the velocity stage: fn(ids (n,)) -> (n, dim)."""
  obj, ref = m.sensor_objid, m.sensor_refid
  fr = frames(m, d, m.sensor_objtype, obj)
  ang, lin = velocities(m, d, fr)
  if FRAMELINVEL in types or FRAMEANGVEL in types:
    rf = frames(m, d, m.sensor_reftype, ref)
    rang, rlin = velocities(m, d, rf)
    has_ref = (ref >= 0)[:, None]
    # relative to a moving frame: minus its velocity and the rotation term, in its axes
    rel_ang = jnp.where(has_ref, _rot_t(rf.mat, ang - rang), ang)
    rel_lin = jnp.where(has_ref, _rot_t(rf.mat, lin - rlin + jnp.cross(fr.pos - rf.pos, rang)),
                        lin)
  else:
    rel_ang = rel_lin = None

  def dadr(i):
    return _take(m.jnt_dofadr, obj[i])

  def col(x):
    return lambda i: _take(x, obj[i])[:, None]

  def limit(ctype):
    return lambda i: _efc_first(m, d, ctype, obj[i], d.efc_vel)

  return {
      VELOCIMETER: lambda i: _rot_t(fr.mat[i], lin[i]),
      GYRO: lambda i: _rot_t(fr.mat[i], ang[i]),
      JOINTVEL: lambda i: d.qvel[dadr(i)][:, None],
      TENDONVEL: col(d.ten_velocity) if m.ntendon else None,
      ACTUATORVEL: col(d.actuator_velocity) if m.nu else None,
      BALLANGVEL: lambda i: d.qvel[jnp.minimum(dadr(i)[:, None] + jnp.arange(3), m.nv - 1)],
      JOINTLIMITVEL: limit(CNSTR_LIMIT_JOINT),
      TENDONLIMITVEL: limit(CNSTR_LIMIT_TENDON),
      FRAMELINVEL: lambda i: rel_lin[i],
      FRAMEANGVEL: lambda i: rel_ang[i],
      SUBTREELINVEL: lambda i: _take(d.subtree_linvel, obj[i]),
      SUBTREEANGMOM: lambda i: _take(d.subtree_angmom, obj[i]),
  }


def sensor_vel(m, d):
  """Velocity-stage sensors (mj_sensorVel); runs mj_subtreeVel first when a subtree velocity
  sensor needs it."""
  if m.opt.disableflags & DSBL_SENSOR or not m.nsensor:
    return d
  m = _with_static(m)
  types = _stage_types(m, VEL)
  if SUBTREELINVEL in types or SUBTREEANGMOM in types:
    d = velocity.subtree_vel(m, d)
  data = _run(m, d.sensordata, types, _vel_fns(m, d, types))
  return dataclasses.replace(d, sensordata=_cutoff(m, data, VEL))


# ---------------------------------------------------------------------------------------------
# Acceleration stage

def _com_wrench(m, d, body, point, wrench):
  """A world-frame (torque, force) acting at ``point`` on ``body`` as a wrench about the
  subtree com of the body's root (mju_transformSpatial with flg_force = 1)."""
  arm = d.subtree_com[m.body_rootid[body]] - point
  return jnp.concatenate([wrench[..., :3] - jnp.cross(arm, wrench[..., 3:]), wrench[..., 3:]],
                         axis=-1)


def _equality_wrenches(m, d, efc_force):
  """The connect / weld constraint forces as com-based wrenches (nbody, 6), MuJoCo's
  mj_rnePostConstraint: each connect / weld equality's first 3 rows are a world force, a
  weld's next 3 a world torque; the wrench acts at the body-1 point (connect: anchor
  eq_data[0:3], weld: eq_data[3:6], in body 1's frame; site form: the site) added to body 1,
  and at the body-2 point (connect: eq_data[3:6], weld: eq_data[0:3]; site form: the site)
  subtracted from body 2. Rows are found by efc_type / efc_id (an inactive equality has none)."""
  dt = d.qvel.dtype
  n = d.efc_type.shape[0]
  ids = jnp.arange(m.neq)
  mine = (d.efc_type[None, :] == EFC_EQUALITY) & (d.efc_id[None, :] == ids[:, None])
  has = jnp.any(mine, axis=1) & ((m.eq_type == EQ_CONNECT) | (m.eq_type == EQ_WELD))
  first = jnp.argmax(mine, axis=1)
  rows = jnp.clip(first[:, None] + jnp.arange(6)[None, :], 0, n - 1)
  f = efc_force[rows]                                           # (neq, 6)
  weld = m.eq_type == EQ_WELD
  wrench = jnp.concatenate([jnp.where(weld[:, None], f[:, 3:], 0.0), f[:, :3]], axis=1)
  site = m.eq_objtype == OBJ_SITE
  xmat = d.xmat.reshape(-1, 3, 3)
  data = m.eq_data
  out = jnp.zeros((m.nbody, 6), dt)
  for obj, local, sign in ((m.eq_obj1id, jnp.where(weld[:, None], data[:, 3:6], data[:, 0:3]),
                            1.0),
                           (m.eq_obj2id, jnp.where(weld[:, None], data[:, 0:3], data[:, 3:6]),
                            -1.0)):
    b = jnp.clip(obj, 0, m.nbody - 1)
    pos = d.xpos[b] + math.matvec_small(xmat[b], local)
    if m.nsite:
      sid = jnp.clip(obj, 0, m.nsite - 1)
      b = jnp.where(site, m.site_bodyid[sid], b)
      pos = jnp.where(site[:, None], d.site_xpos[sid], pos)
    w = _com_wrench(m, d, b, pos, wrench)
    target = jnp.where(has & (b > 0), b, m.nbody)                 # world and none: dropped
    out = out + tree.add_to_bodies(m, target, sign * w)
  return out


def rne_post_constraint(m, d, contact_force=None, efc_force=None):
  """cacc, cfrc_ext and cfrc_int (mj_rnePostConstraint).

  cacc: body accelerations from qacc (cacc_parent + cdof_dot qvel + cdof qacc), the world at
  -gravity. cfrc_ext: xfrc_applied of every body (force at xipos, torque) and, with
  ``contact_force`` ((nconmax, 6) mj_contactForce of each contact, in its frame; None: no
  contact forces), each contact's force at its point, subtracted on geom1's body and added on
  geom2's (world bodies skipped); with ``efc_force`` (nefc_max,), the connect / weld
  constraint forces (_equality_wrenches); all as (torque, force) about the subtree com.
  cfrc_int: cinert cacc + cvel x* (cinert cvel) - cfrc_ext, summed over subtrees.
  """
  dt = d.qvel.dtype
  nbody = m.nbody
  world_acc = jnp.zeros(6, dt)
  if not m.opt.disableflags & DSBL_GRAVITY:
    world_acc = world_acc.at[3:].set(-jnp.asarray(m.opt.gravity, dt))
  # cfrc_ext: applied forces (torque, force) at the body com
  xfrc = d.xfrc_applied
  ext = _com_wrench(m, d, jnp.arange(nbody), d.xipos,
                    jnp.concatenate([xfrc[:, 3:], xfrc[:, :3]], axis=1))
  ext = ext.at[0].set(0.0)
  if contact_force is not None and m.nconmax:
    con = d.contact
    frame = con.frame.reshape(-1, 3, 3)
    # contact frame -> world: rows of frame are the axes, so world = frame^T local
    torque = _rot_t(frame, contact_force[:, 3:])
    force = _rot_t(frame, contact_force[:, :3])
    wrench = jnp.concatenate([torque, force], axis=1)
    used = (jnp.arange(m.nconmax) < d.ncon) & (con.efc_address >= 0)
    for geom, sign in ((con.geom1, -1.0), (con.geom2, 1.0)):
      body = m.geom_bodyid[jnp.maximum(geom, 0)]
      w = _com_wrench(m, d, body, con.pos, wrench)
      target = jnp.where(used & (body > 0), body, nbody)       # world and unused: dropped
      ext = ext + tree.add_to_bodies(m, target, sign * w)
  if efc_force is not None and m.neq and set(m.eq_types) & {EQ_CONNECT, EQ_WELD} and not (
      m.opt.disableflags & (DSBL_CONSTRAINT | DSBL_EQUALITY)):
    ext = ext + _equality_wrenches(m, d, efc_force)
  # cacc: parent-to-child accumulation
  cacc = tree.dof_path_sum(m, world_acc, d.cdof_dot * d.qvel[:, None] + d.cdof * d.qacc[:, None])
  own = jax.vmap(_body_force)(d.cinert, cacc, d.cvel)
  cfrc = (own - ext).at[0].set(0.0)
  cfrc_int = tree.subtree_sum(m, cfrc)
  return dataclasses.replace(d, cacc=cacc, cfrc_ext=ext, cfrc_int=cfrc_int)


def _body_force(cinert, cacc, cvel):
  """cinert cacc + cvel x* (cinert cvel)."""
  return (math.mul_inert_vec(cinert, cacc)
          + math.cross_force(cvel, math.mul_inert_vec(cinert, cvel)))


def _touch_shapes(m):
  """The site types of the touch sensors' sites (sorted), or every ray primitive when the
  Model is traced."""
  stype, obj, site_type = (concrete(m.sensor_type), concrete(m.sensor_objid),
                           concrete(m.site_type))
  if stype is None or obj is None or site_type is None:
    return sorted(RAY_PRIMITIVES)
  sites = np.clip(obj[stype == TOUCH], 0, max(len(site_type) - 1, 0))
  return sorted(int(t) for t in set(site_type[sites].tolist()) if int(t) in RAY_PRIMITIVES)


def _touch(m, d, site, frc):
  """Touch sensor on ``site``: normal forces ``frc`` (nconmax,) of the contacts of the site's
  body whose force ray (from the contact point along the normal, away from the body) meets
  the site's volume (MuJoCo's mju_rayGeom test)."""
  body = _take(m.site_bodyid, site)
  con = d.contact
  b1 = jnp.where(con.geom1 >= 0, m.geom_bodyid[jnp.maximum(con.geom1, 0)], -1)
  b2 = jnp.where(con.geom2 >= 0, m.geom_bodyid[jnp.maximum(con.geom2, 0)], -1)
  mine = ((jnp.arange(m.nconmax) < d.ncon) & (con.efc_address >= 0)
          & ((b1 == body) | (b2 == body)) & (frc > 0))
  conray = jax.vmap(normalize3)(con.frame[:, :3] * frc[:, None])
  conray = jnp.where((b2 == body)[:, None], -conray, conray)
  spos = _take(d.site_xpos, site)
  smat = _take(d.site_xmat, site).reshape(3, 3)
  ssize = _take(m.site_size, site)
  stype = _take(m.site_type, site)

  # the site's shape: only the shapes this model's touch sites have (static when the Model
  # is concrete), else every primitive, selected by site_type
  shapes = _touch_shapes(m)

  def zone(pnt, vec):
    hit = -jnp.ones((), pnt.dtype)
    for t in shapes:
      hit = jnp.where(stype == t, RAY_PRIMITIVES[t](spos, smat, ssize, pnt, vec), hit)
    return hit

  inside = jax.vmap(zone)(con.pos, conray) >= 0
  return jnp.sum(jnp.where(mine & inside, frc, 0.0))


def _acc_fns(m, d, types, efc_force):
  """Per-type evaluators of the acceleration stage: fn(ids (n,)) -> (n, dim)."""
  obj = m.sensor_objid
  dt = d.qvel.dtype
  fr = frames(m, d, m.sensor_objtype, obj)
  if any(t in _RNE_POST for t in types):
    aang, alin = accelerations(m, d, fr)
    # the interaction wrench of the site's body, about the root's subtree com, at the site
    wrench = d.cfrc_int[fr.body]
    torque = wrench[:, :3] - jnp.cross(fr.pos - d.subtree_com[m.body_rootid[fr.body]],
                                       wrench[:, 3:])
  else:
    aang = alin = wrench = torque = None

  def tendon_force(i):
    if not m.nu:
      return jnp.zeros((i.shape[0], 1), dt)
    mine = ((m.actuator_trntype == TRN_TENDON)[None, :]
            & (m.actuator_trnid[None, :, 0] == obj[i][:, None]))
    return jnp.sum(jnp.where(mine, d.actuator_force[None, :], 0.0), axis=1)[:, None]

  def limit(ctype):
    return lambda i: _efc_first(m, d, ctype, obj[i], efc_force)

  def touch(i):
    if efc_force is None or not m.nconmax:
      return jnp.zeros((i.shape[0], 1), dt)
    frc = contact_forces(m, d, efc_force)[:, 0]
    return jax.vmap(lambda s: _touch(m, d, s, frc))(obj[i])[:, None]

  return {
      TOUCH: touch,
      ACCELEROMETER: lambda i: _rot_t(fr.mat[i], alin[i]),
      FORCE: lambda i: _rot_t(fr.mat[i], wrench[i][:, 3:]),
      TORQUE: lambda i: _rot_t(fr.mat[i], torque[i]),
      ACTUATORFRC: (lambda i: _take(d.actuator_force, obj[i])[:, None]) if m.nu else None,
      JOINTACTFRC: lambda i: d.qfrc_actuator[_take(m.jnt_dofadr, obj[i])][:, None],
      TENDONACTFRC: tendon_force,
      JOINTLIMITFRC: limit(CNSTR_LIMIT_JOINT),
      TENDONLIMITFRC: limit(CNSTR_LIMIT_TENDON),
      FRAMELINACC: lambda i: alin[i],
      FRAMEANGACC: lambda i: aang[i],
  }


def sensor_acc(m, d, efc_force=None):
  """Acceleration-stage sensors (mj_sensorAcc); runs mj_rnePostConstraint first when an
  accelerometer, force, torque, framelinacc or frameangacc sensor needs it.

  efc_force (nefc_max,): the constraint forces (default: d.efc_force when Data has it).
  """
  if m.opt.disableflags & DSBL_SENSOR or not m.nsensor:
    return d
  m = _with_static(m)
  types = _stage_types(m, ACC)
  if efc_force is None:
    efc_force = getattr(d, 'efc_force', None)
  if TOUCH in types:
    _need_efc_force(m, efc_force, 'touch', 'contact')
  if JOINTLIMITFRC in types or TENDONLIMITFRC in types:
    _need_efc_force(m, efc_force, 'jointlimitfrc / tendonlimitfrc', 'limit')
  if any(t in _RNE_POST for t in types):
    d = rne_post_constraint(
        m, d, None if efc_force is None else contact_forces(m, d, efc_force), efc_force)
  data = _run(m, d.sensordata, types, _acc_fns(m, d, types, efc_force))
  return dataclasses.replace(d, sensordata=_cutoff(m, data, ACC))


# ---------------------------------------------------------------------------------------------
# Collision sensors (distance, normal, fromto): mj_geomDistance over geom pairs

G_PLANE, G_HFIELD, G_SPHERE, G_CAPSULE, G_ELLIPSOID, G_CYLINDER, G_BOX, G_MESH = range(8)
# pairs mj_geomDistance sends to native GJK (mjc_Convex, and mjc_BoxBox) in MuJoCo 3.3.3
_CCD_PAIRS = frozenset([(G_BOX, G_BOX), (G_SPHERE, G_ELLIPSOID), (G_CAPSULE, G_ELLIPSOID),
                        (G_CAPSULE, G_CYLINDER), (G_ELLIPSOID, G_ELLIPSOID),
                        (G_ELLIPSOID, G_CYLINDER), (G_ELLIPSOID, G_BOX),
                        (G_CYLINDER, G_CYLINDER), (G_CYLINDER, G_BOX)]
                       + [(t, G_MESH) for t in (G_SPHERE, G_CAPSULE, G_ELLIPSOID, G_CYLINDER,
                                                G_BOX, G_MESH)])


def distance_plan(m):
  """Host-side table of the geom pairs of the collision sensors (static, hashable).

  m: a Model with concrete index arrays, or the compiler's dict of arrays (so that put_model
  can store the table as static metadata, see ``_plan``). Returns (sensor, groups) as tuples
  of Python ints: ``sensor`` the sensor of each pair, pairs in MuJoCo's order (sensor by
  sensor, geoms of object 1 outer, of object 2 inner); ``groups`` one (type1, type2, rows,
  geom1, geom2, flip) per geom type pair, type1 <= type2: the pairs (rows of ``sensor``) it
  holds and their geoms swapped into type order (flip: 1 where they were swapped).
  """
  names = ('sensor_type', 'sensor_objtype', 'sensor_objid', 'sensor_reftype', 'sensor_refid',
           'body_geomadr', 'body_geomnum', 'geom_type')
  if isinstance(m, dict):
    vals = [np.asarray(m[n]).ravel() for n in names]
  else:
    vals = [concrete(getattr(m, n)) for n in names]
  if any(v is None for v in vals):
    raise NotSupportedError(
        'distance / normal / fromto sensors need the Model\'s index arrays when the pipeline '
        'is traced: close over the Model (e.g. jax.jit(lambda d: mjx_py.forward(m, d))) '
        'instead of passing it as a traced argument')
  stype, otype, oid, rtype, rid, gadr, gnum, gtype = vals

  def geoms(kind, ident):
    if kind == OBJ_BODY:
      return list(range(gadr[ident], gadr[ident] + gnum[ident])) if gnum[ident] else []
    return [int(ident)]

  rows = []
  for i in np.nonzero(np.isin(stype, _COLLISION))[0]:
    for a in geoms(otype[i], oid[i]):
      for b in geoms(rtype[i], rid[i]):
        flip = gtype[a] > gtype[b]
        g1, g2 = (b, a) if flip else (a, b)
        rows.append((int(i), int(g1), int(g2), int(flip), int(gtype[g1]), int(gtype[g2])))
  groups = []
  for key in sorted({(r[4], r[5]) for r in rows}):
    idx = tuple(k for k, r in enumerate(rows) if (r[4], r[5]) == key)
    groups.append((key[0], key[1], idx, tuple(rows[k][1] for k in idx),
                   tuple(rows[k][2] for k in idx), tuple(rows[k][3] for k in idx)))
  return tuple(r[0] for r in rows), tuple(groups)


def _plan(m):
  """distance_plan as numpy arrays: from the Model's static metadata ``sensor_distance_plan``
  when put_model stored it, else computed from the Model's (concrete) arrays."""
  plan = getattr(m, 'sensor_distance_plan', None)
  sensor, groups = plan if plan is not None else distance_plan(m)
  return np.asarray(sensor, np.int32), tuple(
      (t1, t2, np.asarray(rows, np.int32), np.asarray(g1, np.int32), np.asarray(g2, np.int32),
       np.asarray(flip, bool)) for t1, t2, rows, g1, g2, flip in groups)


def _routine_distance(fn, args, margin, flip):
  """Nearest contact of an analytic collision routine run with margin = distmax: (found, dist,
  fromto (6,)); fromto = pos -+ dist/2 normal, the sign turned when the geoms were swapped."""
  res = fn(*args, margin)
  ok = res.valid & (res.dist < margin)
  best = jnp.argmin(jnp.where(ok, res.dist, jnp.inf))         # first of equal minima
  dist = res.dist[best]
  normal = res.frame[best][0]
  half = jnp.where(flip, -0.5, 0.5) * dist
  pos = res.pos[best]
  return jnp.any(ok), dist, jnp.concatenate([pos - half * normal, pos + half * normal])


def _gjk_distance(cvx, g1, g2, eps, tol, kmax, cutoff, hmargins):
  """MuJoCo's gjk() in distance mode (dist_cutoff > 0) on the pair: (done, dist, x1, x2).

  Each iteration takes the support point along -x (spheres and capsules as their centre /
  axis, each side inflated by its ``hmargins`` / 2 along the direction) and stops when it
  converged (2 x.(x - v) < eps), when the support plane separates the origin by at least
  ``cutoff`` (dist = MAXVAL), or when the nearest point of the grown simplex stops moving or
  encloses the origin (x then still moves to it), or after ``kmax`` iterations; otherwise x
  becomes that nearest point. As MuJoCo's gjk(), dist is |x| taken at the start of the last
  iteration (x.x when x is below MINVAL there, which ends the run), while the witness points
  are the final simplex's barycentric combinations on each geom: for overlapping shapes dist
  is the length of the iterate before the enclosing simplex, and both witness points are the
  enclosed point. done: dist > tol (otherwise MuJoCo goes on to EPA).
  """
  dt = g1.pos.dtype
  z = jnp.zeros((4, 3), dt)
  st = dict(k=jnp.zeros((), jnp.int32), n=jnp.zeros((), jnp.int32), x=g1.pos - g2.pos,
            lam=jnp.zeros(4, dt).at[0].set(1), sv=z, s1=z, s2=z,
            vidx=jnp.full(2, -1, jnp.int32), run=jnp.ones((), bool), sep=jnp.zeros((), bool),
            xn=jnp.zeros((), dt))

  def step(_, st):
    x = st['x']
    xx = x @ x
    big = xx > MINVAL * MINVAL
    d = -jnp.where(big, x / jnp.sqrt(jnp.where(big, xx, 1.0)), jnp.array([1.0, 0, 0], dt))
    v, v1, v2, vidx = cvx._support(g1, g2, d[None], st['vidx'], True, hmargins)
    v, v1, v2 = v[0], v1[0], v2[0]
    started = st['run'] & (st['k'] < kmax)
    xn = jnp.where(started, jnp.where(big, jnp.sqrt(jnp.where(big, xx, 1.0)), xx), st['xn'])
    run = started & big
    conv = 2 * (x @ (x - v)) < eps
    vs = x @ v
    sep = ~conv & (vs > 0) & (vs * vs / jnp.where(big, xx, 1.0) >= cutoff * cutoff)
    grow = run & ~conv & ~sep
    n = st['n']
    sv, s1, s2 = st['sv'].at[n].set(v), st['s1'].at[n].set(v1), st['s2'].at[n].set(v2)
    lam = cvx._subdistance(n + 1, sv)
    order = jnp.argsort(lam == 0, stable=True)               # drop unused vertices
    lam, sv, s1, s2 = lam[order], sv[order], s1[order], s2[order]
    n_new = jnp.sum(lam != 0).astype(jnp.int32)
    x_next = lam @ sv
    same = jnp.all(jnp.abs(x_next - x) < MINVAL)
    go = grow & ~same & (n_new < 4)

    def pick(a, b):
      return jnp.where(grow, a, b)
    return dict(
        k=st['k'] + go.astype(jnp.int32),
        n=jnp.where(grow, n_new, jnp.where(run & conv & (st['k'] == 0), 1, n)),
        x=jnp.where(grow & ~same, x_next, x), lam=pick(lam, st['lam']),
        sv=pick(sv, jnp.where(run, st['sv'].at[n].set(v), st['sv'])),
        s1=pick(s1, jnp.where(run, st['s1'].at[n].set(v1), st['s1'])),
        s2=pick(s2, jnp.where(run, st['s2'].at[n].set(v2), st['s2'])),
        vidx=jnp.where(run, vidx, st['vidx']), run=go, sep=st['sep'] | (run & sep), xn=xn)

  st = jax.lax.fori_loop(0, kmax + 1, step, st)
  dist = jnp.where(st['sep'], MAXVAL, st['xn'])
  return dist > tol, dist, st['lam'] @ st['s1'], st['lam'] @ st['s2']


def _ccd_distance(m, t1, t2, pos1, mat1, size1, verts1, pos2, mat2, size2, verts2, distmax,
                  mode='distance'):
  """mj_geomDistance through native GJK (mjc_ccd with dist_cutoff = distmax): (dist, x1, x2).

  t1, t2: geom types as int32 () (traced: one compiled search serves every type pair).
  Spheres and capsules first run as their centre / axis (the cutoff grown by their radii); a
  distance above ccd_tolerance is then pushed out by the radii (and beyond distmax becomes
  MAXVAL). Otherwise GJK runs in distance mode on the full shapes (spheres and capsules as their
  core inflated by the radius, which is their support function); for overlapping shapes that
  run stops when its simplex encloses the origin and reports the length of the previous iterate
  with both witness points at the enclosed point, as MuJoCo does. Only when that run ends
  within the tolerance (shapes touching to within ccd_tolerance) does MuJoCo go on to EPA; that
  case keeps the run's result here, which differs from EPA's depth by about the tolerance.
  With distmax = 0 MuJoCo's search is its collision test instead (gjkIntersect, then EPA's
  penetration depth, negative; separated shapes give MAXVAL): convex._ccd with margin 0.
  ``mode`` (static): 'distance' (distmax > 0), 'collide' (distmax = 0) or 'both' (distmax
  traced: both searches, selected).
  """
  from .collision import convex as cvx
  sg = jax.lax.stop_gradient
  dt = pos1.dtype
  zero = jnp.zeros((), dt)
  tol = jnp.asarray(m.opt.ccd_tolerance, dt)
  kmax = int(m.opt.ccd_iterations)
  g1 = cvx._Geom(t1, sg(pos1), sg(mat1), sg(size1), sg(verts1), zero)
  g2 = cvx._Geom(t2, sg(pos2), sg(mat2), sg(size2), sg(verts2), zero)
  if mode != 'distance':
    valid, edist, ex1, ex2 = cvx._ccd(g1, g2, zero, tol, kmax, cvx.HORIZON_STEPS)
    edist = jnp.where(valid, edist, MAXVAL)
    if mode == 'collide':
      return _reattach_witness(edist, ex1, ex2, pos1, mat1, pos2, mat2)
  shrink1 = (t1 == G_SPHERE) | (t1 == G_CAPSULE)
  shrink2 = (t2 == G_SPHERE) | (t2 == G_CAPSULE)
  discrete = ((t1 == G_BOX) | (t1 == G_MESH)) & ((t2 == G_BOX) | (t2 == G_MESH))
  eps = jnp.where(discrete, zero, tol * tol)
  distmax = sg(distmax)
  r1 = jnp.where(shrink1, g1.size[0], zero)
  r2 = jnp.where(shrink2, g2.size[0], zero)
  # two runs in one batched loop: the full shapes (spheres and capsules: core + radius through
  # the support margin), and the cores (MuJoCo's first run when a sphere or capsule takes part)
  cutoff = jnp.stack([distmax, distmax + r1 + r2])
  hm1, hm2 = jnp.stack([2 * r1, zero]), jnp.stack([2 * r2, zero])
  done, dist, x1, x2 = jax.vmap(
      lambda c, a, b: _gjk_distance(cvx, g1, g2, eps, tol, kmax, c, (a, b)))(cutoff, hm1, hm2)
  (sdone, done), (sdist, dist), (sx1, x1), (sx2, x2) = done[::-1], dist[::-1], x1[::-1], x2[::-1]
  shallow = (shrink1 | shrink2) & sdone
  nrm = normalize3(sx2 - sx1)
  sdist = sdist - (r1 + r2)
  dist = jnp.where(shallow, jnp.where(sdist > distmax, MAXVAL, sdist), dist)
  x1 = jnp.where(shallow, sx1 + nrm * r1, x1)
  x2 = jnp.where(shallow, sx2 - nrm * r2, x2)
  del done
  if mode == 'both':
    collide = distmax == 0
    dist = jnp.where(collide, edist, dist)
    x1, x2 = jnp.where(collide, ex1, x1), jnp.where(collide, ex2, x2)
  return _reattach_witness(dist, x1, x2, pos1, mat1, pos2, mat2)


def _reattach_witness(dist, x1, x2, pos1, mat1, pos2, mat2):
  """Gradients of a search's result (values unchanged): the witness points move rigidly with
  their geoms and dist changes along the segment (envelope theorem)."""
  sg = jax.lax.stop_gradient
  w1 = mat1 @ (sg(mat1).T @ (x1 - sg(pos1))) + pos1
  w2 = mat2 @ (sg(mat2).T @ (x2 - sg(pos2))) + pos2
  n = normalize3(x2 - x1)
  ddist = n @ (w2 - w1)
  return (dist + ddist - sg(ddist), x1 + w1 - sg(w1), x2 + w2 - sg(w2))


def _uses_ccd(m, key):
  """Does mj_geomDistance send this (sorted) geom type pair to native GJK?"""
  if key not in _CCD_PAIRS:
    return False
  if m.opt.disableflags & DSBL_NATIVECCD:
    if key == (G_BOX, G_BOX):
      return False
    raise NotSupportedError('distance sensors between convex geoms with the nativeccd flag '
                            'disabled (libccd) are not supported')
  return True


def _ccd_pairs(m, d, types1, types2, geom1, geom2, margin, mode):
  """mj_geomDistance through GJK for pairs of any types (types1, types2: numpy int arrays):
  (found, dist, fromto (n, 6)); fromto runs from geom1 to geom2 of the sorted pair (MuJoCo
  does not turn it back)."""
  xmat = d.geom_xmat.reshape(-1, 3, 3)
  dt = d.geom_xpos.dtype
  n = geom1.shape[0]
  if m.nmesh:
    def verts(g, t):
      return jnp.where(t == G_MESH, _mesh_verts(m, g), 0.0)
    v1 = jax.vmap(verts)(geom1, jnp.asarray(types1))
    v2 = jax.vmap(verts)(geom2, jnp.asarray(types2))
  else:
    v1 = v2 = jnp.zeros((n, 1, 3), dt)
  args = (d.geom_xpos[geom1], xmat[geom1], m.geom_size[geom1], v1, d.geom_xpos[geom2],
          xmat[geom2], m.geom_size[geom2], v2, margin)
  if len(set(zip(types1.tolist(), types2.tolist()))) == 1:
    # one type pair: static types, the search specialised to them
    a, b = int(types1[0]), int(types2[0])
    dist, x1, x2 = jax.vmap(lambda *x: _ccd_distance(m, a, b, *x, mode=mode))(*args)
  else:
    # several: traced types, one search for all of them
    dist, x1, x2 = jax.vmap(lambda a, b, *x: _ccd_distance(m, a, b, *x, mode=mode))(
        jnp.asarray(types1), jnp.asarray(types2), *args)
  return dist < margin, dist, jnp.concatenate([x1, x2], axis=1)


def _mesh_verts(m, geom):
  """Hull vertices (maxhull, 3) of a mesh geom (padded by repeating the first)."""
  return m.mesh_hullvert[jnp.maximum(m.geom_dataid[geom], 0)]


def _pair_distances(m, d, t1, t2, geom1, geom2, flip, margin):
  """mj_geomDistance with an analytic collision routine, for pairs of one sorted type pair:
  (found (n,), dist (n,), fromto (n, 6))."""
  from .collision import convex as cvx
  from .collision import primitive
  xmat = d.geom_xmat.reshape(-1, 3, 3)
  pos1, mat1, size1 = d.geom_xpos[geom1], xmat[geom1], m.geom_size[geom1]
  pos2, mat2, size2 = d.geom_xpos[geom2], xmat[geom2], m.geom_size[geom2]
  n = geom1.shape[0]
  dt = pos1.dtype
  key = (t1, t2)
  if G_HFIELD in key and key != (G_PLANE, G_HFIELD):
    raise NotSupportedError('distance / normal / fromto sensors on height fields are not '
                            'supported')
  if key in ((G_PLANE, G_PLANE), (G_PLANE, G_HFIELD)):           # no collision function
    return jnp.zeros(n, bool), margin, jnp.zeros((n, 6), dt)
  if key == (G_PLANE, G_MESH):
    fn = cvx.MESH_ROUTINES[key][0]
    verts = jax.vmap(lambda g: _mesh_verts(m, g))(geom2)
    return jax.vmap(lambda p1, r1, s1, p2, r2, s2, v, mg, fl: _routine_distance(
        lambda *a: fn(*a[:6], a[6], None, v), (p1, r1, s1, p2, r2, s2), mg, fl))(
            pos1, mat1, size1, pos2, mat2, size2, verts, margin, flip)
  fn = primitive.ROUTINES[key][0]
  return jax.vmap(lambda p1, r1, s1, p2, r2, s2, mg, fl: _routine_distance(
      fn, (p1, r1, s1, p2, r2, s2), mg, fl))(pos1, mat1, size1, pos2, mat2, size2, margin, flip)


def _collision_sensors(m, d, data):
  """distance / normal / fromto sensors: the nearest pair of each sensor (strictly below its
  cutoff), else dist = cutoff and a zero segment."""
  sensor, groups = _plan(m)
  dt = d.geom_xpos.dtype
  if not sensor.size:
    found = jnp.zeros(m.nsensor, bool)
    best_dist = m.sensor_cutoff
    fromto = jnp.zeros((m.nsensor, 6), dt)
  else:
    npair = sensor.size
    dist = jnp.zeros(npair, dt)
    seg = jnp.zeros((npair, 6), dt)
    ok = jnp.zeros(npair, bool)
    ccd = [gr for gr in groups if _uses_ccd(m, gr[:2])]
    for t1, t2, rows, g1, g2, flip in groups:
      if _uses_ccd(m, (t1, t2)):
        continue
      f, dd, ft = _pair_distances(m, d, t1, t2, jnp.asarray(g1), jnp.asarray(g2),
                                  jnp.asarray(flip), m.sensor_cutoff[sensor[rows]])
      ok, dist, seg = ok.at[rows].set(f), dist.at[rows].set(dd), seg.at[rows].set(ft)
    if ccd:
      rows = np.concatenate([gr[2] for gr in ccd])
      types1 = np.concatenate([np.full(gr[2].size, gr[0], np.int32) for gr in ccd])
      types2 = np.concatenate([np.full(gr[2].size, gr[1], np.int32) for gr in ccd])
      geom1 = np.concatenate([gr[3] for gr in ccd])
      geom2 = np.concatenate([gr[4] for gr in ccd])
      # cutoff 0 runs MuJoCo's collision search, a positive one its distance search
      cuts = concrete(m.sensor_cutoff)
      if cuts is None:
        parts = [(np.ones(rows.size, bool), 'both')]
      else:
        zero = cuts[sensor[rows]] == 0
        parts = [(~zero, 'distance'), (zero, 'collide')]
      for sel, mode in parts:
        if not np.any(sel):
          continue
        r = rows[sel]
        f, dd, ft = _ccd_pairs(m, d, types1[sel], types2[sel], jnp.asarray(geom1[sel]),
                               jnp.asarray(geom2[sel]), m.sensor_cutoff[sensor[r]], mode)
        ok, dist, seg = ok.at[r].set(f), dist.at[r].set(dd), seg.at[r].set(ft)
    sid = jnp.asarray(sensor)
    low = jax.ops.segment_min(jnp.where(ok, dist, jnp.inf), sid, num_segments=m.nsensor)
    first = jax.ops.segment_min(jnp.where(ok & (dist == low[sid]), jnp.arange(npair), npair),
                                sid, num_segments=m.nsensor)
    found = first < npair
    best = jnp.minimum(first, npair - 1)
    best_dist = jnp.where(found, dist[best], m.sensor_cutoff)
    fromto = jnp.where(found[:, None], seg[best], 0.0)
  vec = fromto[:, 3:] - fromto[:, :3]
  normal = jnp.where(jnp.any(vec != 0, axis=1)[:, None], jax.vmap(normalize3)(vec), 0.0)
  ids = np.arange(m.nsensor)
  data = _write(m, data, GEOMDIST, ids, best_dist[:, None])
  data = _write(m, data, GEOMNORMAL, ids, normal)
  return _write(m, data, GEOMFROMTO, ids, fromto)
