"""qpos0-dependent model constants in JAX (MuJoCo's mj_setConst), for randomized Models.

set_const(m) -> Model
  Recomputes, from the Model's current fields, the constants MuJoCo derives by evaluating the
  model at its reference configuration, with the engine's own stages (kinematics, com_pos,
  tendon, crb, tendon_armature, transmission, solve_m, support.jac), so that a Model whose
  masses, inertias, armature, gears, geom sizes, ... were edited (e.g. per world under
  ``jax.vmap`` for domain randomization) is consistent with what MuJoCo's compiler, or
  ``mujoco.mj_setConst``, would give for the edited model.

  The state is MuJoCo's reset state: qpos = qpos0, mocap bodies at their compiled poses
  (body_pos, body_quat).

  reads  body_parentid body_rootid body_weldid body_simple body_mocapid body_pos body_quat
         eq_type eq_objtype eq_obj1id eq_obj2id eq_data cam_/light_ bodyid targetbodyid pos
         cam_quat light_dir
         body_ipos body_iquat body_mass body_inertia jnt_* dof_bodyid dof_jntid dof_armature
         qpos0 geom_bodyid geom_type geom_pos geom_quat geom_size geom_rbound site_bodyid
         site_pos site_quat tendon_* wrap_* tendon_armature actuator_trntype actuator_trnid
         actuator_gear actuator_cranklength stat, and the engine index tables (body_levels,
         body_treeend, body_jnts, dof_ancestor, body_dofmask, tendon path tables)
  writes body_subtreemass (nbody,)    sum of body_mass over each subtree
         dof_M0 (nv,)                 diagonal of the CRB joint-space inertia with dof armature
                                      (no tendon armature, MuJoCo's mj_setM0)
         body_invweight0 (nbody, 2)   mean diagonal of J M^-1 J^T for the body's com Jacobian
                                      (translation, rotation); 0 for bodies welded to the
                                      world; (1/mass, 0) for slide-only simple bodies
         dof_invweight0 (nv,)         mean diagonal of each joint's block of M^-1 (free joints:
                                      translation and rotation separately); 1/mass for the
                                      dofs of slide-only simple bodies
         tendon_length0 (ntendon,)    tendon lengths
         tendon_invweight0 (ntendon,) J M^-1 J^T of each tendon
         actuator_length0 (nu,)       actuator lengths
         actuator_acc0 (nu,)          |M^-1 moment| of each actuator
         geom_rbound (ngeom,), geom_aabb (ngeom, 6)
                                      bounds of sphere/capsule/ellipsoid/cylinder/box geoms
                                      from geom_size (the compiler's formulas; before the
                                      statistics, which use them)
         cam_pos0, cam_poscom0 (ncam, 3), cam_mat0 (ncam, 9), light_pos0, light_poscom0,
         light_dir0 (nlight, 3)       the tracking modes' offsets at qpos0: from the body
                                      origin, from the (target) body's subtree com, the world
                                      orientation (direction) of the element's fixed pose
         eq_data[:, 3:6] (neq, 3)     second anchor of the body-to-body connects: the first
                                      anchor in body 2's frame at qpos0
         geom_fluid[:, 6:12] (ngeom, 6) virtual mass and inertia of the geoms with the
                                      ellipsoid fluid model, from geom_size (the compiler's
                                      quadrature of Lamb's coefficients)
         stat.meaninertia             mean diagonal of M (with tendon armature)   (nv > 0)
         stat.meanmass                mean mass of the bodies other than the world (nbody > 1)
         stat.meansize                mean body size: largest com-joint distance or geom reach
         stat.extent, stat.center     bounding box of body frames, com, joint anchors, sites
                                      and geom bounding spheres (planes: 0.1 of the largest
                                      size, 1 if infinite); extent >= 2 meansize
  M is qM at qpos0 (dof armature and tendon armature included); M^-1 comes from
  inertia.solve_m (dense Cholesky).

Like mj_setConst, the statistics are overwritten even where the MJCF gave them in
``<statistic>``; put the given values back into ``m.stat`` afterwards to keep them.

Left alone, as mj_setConst leaves them (checked against mujoco 3.3.3: one-way compiler
conversions, or not derived from the fields a user randomizes): the dampratio -> kv conversion
of position actuators (actuator_biasprm), the relative poses of welds, tendon_lengthspring
computed at qpos_spring for springlength -1 (recompiling the edited XML would redo these
three), the bounds of mesh and height-field geoms (from their assets),
body_simple/body_sameframe (derived from the geometry by the compiler), and the body masses and
inertias themselves: MuJoCo infers them from geoms only when compiling, and mj_setConst does not
touch them. ``set_const(m, from_geoms=True)`` infers them again first, from the edited geom
sizes, densities and masses (mjx_py.massprops.inertia_from_geoms), for the bodies whose mass
frame the compiler took from their geoms.

Pure JAX for one world: jittable, vmappable over any Model fields and differentiable (the
norms and divisions are NaN-safe). Sizes and the static type sets of the Model fix the traced
program, as for every stage.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from . import inertia, kinematics, massprops, math, support, tendon, transmission, tree
from .constraint import EQ_CONNECT
from .data import make_data
from .errors import NotSupportedError
from .mjcf import compile as mjcf_compile
from .sensor import OBJ_BODY
from .xla import full_precision, gc_paused

FREE, BALL, SLIDE, HINGE = 0, 1, 2, 3
# The Model fields set_const writes (mjx_py.model_axes names): the out_axes of a vmap that
# builds per-world consistent Models (with from_geoms=True, also massprops.WRITES)
WRITES = ('body_subtreemass', 'dof_M0', 'body_invweight0', 'dof_invweight0', 'tendon_length0',
          'tendon_invweight0', 'actuator_length0', 'actuator_acc0', 'geom_rbound', 'geom_aabb',
          'geom_fluid', 'eq_data', 'cam_pos0', 'cam_poscom0', 'cam_mat0', 'light_pos0',
          'light_poscom0', 'light_dir0', 'stat.meaninertia', 'stat.meanmass', 'stat.meansize',
          'stat.extent', 'stat.center')
(GEOM_PLANE, GEOM_HFIELD, GEOM_SPHERE, GEOM_CAPSULE, GEOM_ELLIPSOID, GEOM_CYLINDER,
 GEOM_BOX) = range(7)


def _body_invweight0(m, d, minv):
  """body_invweight0 (nbody, 2) from the com Jacobians and M^-1."""
  mass = m.body_mass
  if m.nv:
    jacp, jacr = jax.vmap(lambda p, b: support.jac(m, d, p, b))(d.xipos, jnp.arange(m.nbody))
    trn = jnp.einsum('biv,vw,biw->b', jacp, minv, jacp) / 3
    rot = jnp.einsum('biv,vw,biw->b', jacr, minv, jacr) / 3
  else:
    trn = rot = jnp.zeros_like(mass)
  slide_only = m.body_simple == 2
  inv_mass = 1.0 / jnp.maximum(math.MINVAL, mass)
  trn = jnp.where(slide_only, inv_mass, trn)
  rot = jnp.where(slide_only, 0.0, rot)
  welded = (m.body_weldid == 0)[:, None]
  return jnp.where(welded, 0.0, jnp.stack([trn, rot], axis=1))


def _dof_invweight0(m, minv):
  """dof_invweight0 (nv,): mean diagonal of M^-1 over each dof's group (the dof alone for
  hinges and slides, the 3 rotations of a ball, the 3 translations or 3 rotations of a free
  joint); 1/mass for the dofs of slide-only simple bodies."""
  diag = jnp.diag(minv)
  jnt = m.dof_jntid
  jtype = m.jnt_type[jnt]
  k = jnp.arange(m.nv) - m.jnt_dofadr[jnt]     # index of the dof within its joint
  start = m.jnt_dofadr[jnt] + jnp.where((jtype == FREE) & (k >= 3), 3, 0)
  group = (jtype == FREE) | (jtype == BALL)
  idx = jnp.minimum(start[:, None] + jnp.arange(3), m.nv - 1)
  mean3 = jnp.mean(diag[idx], axis=1)
  iw = jnp.where(group, mean3, diag)
  body = m.dof_bodyid
  inv_mass = 1.0 / jnp.maximum(math.MINVAL, m.body_mass[body])
  return jnp.where(m.body_simple[body] == 2, inv_mass, iw)


def _semiaxes(m):
  """(ngeom, 3) half-extents of each geom in its frame from geom_size: sphere r r r, capsule
  r r r+h, cylinder r r h, else the three sizes (the bounding box's half-sizes of the
  primitives, and the fluid model's equivalent ellipsoid)."""
  t, s = m.geom_type, m.geom_size
  r, h = s[:, 0], s[:, 1]
  return jnp.select(
      [(t == GEOM_SPHERE)[:, None], (t == GEOM_CAPSULE)[:, None], (t == GEOM_CYLINDER)[:, None]],
      [jnp.stack([r, r, r], 1), jnp.stack([r, r, r + h], 1), jnp.stack([r, r, h], 1)], s)


def _primitive_bounds(m):
  """(geom_rbound (ngeom,), geom_aabb (ngeom, 6)) with the sphere, capsule, ellipsoid, cylinder
  and box geoms' bounds recomputed from geom_size by the compiler's formulas (rbound: the
  bounding sphere's radius about the geom frame; aabb: centre 0 and the half-sizes of the box
  in the geom frame). Planes, height fields and meshes keep theirs: their geom_size is not
  what bounds them."""
  t, s = m.geom_type, m.geom_size
  r, h = s[:, 0], s[:, 1]
  half = _semiaxes(m)
  rbound = jnp.select(
      [t == GEOM_SPHERE, t == GEOM_CAPSULE, t == GEOM_CYLINDER, t == GEOM_ELLIPSOID,
       t == GEOM_BOX],
      [r, r + h, math.safe_norm(s[:, :2]), jnp.max(s, axis=1), math.safe_norm(s)],
      m.geom_rbound)
  prim = (t >= GEOM_SPHERE) & (t <= GEOM_BOX)
  aabb = jnp.where(prim[:, None], jnp.concatenate([jnp.zeros_like(half), half], 1),
                   m.geom_aabb)
  return rbound, aabb


def _fluid_added_mass(m):
  """geom_fluid with the virtual mass (6:9) and inertia (9:12) of the geoms that use the
  ellipsoid fluid model (geom_fluid[:, 0] > 0) recomputed from geom_size by the compiler's
  rule (mjx_py.mjcf.compile.added_mass on the equivalent ellipsoid's semi-axes)."""
  on = m.geom_fluid[:, 0] > 0
  semi = jnp.where(on[:, None], _semiaxes(m), 1.0)   # keeps the unused geoms' quadrature finite
  mass, inertia = jax.vmap(lambda s: mjcf_compile.added_mass(s, jnp))(semi)
  added = jnp.concatenate([mass, inertia], 1)
  return m.geom_fluid.at[:, 6:12].set(jnp.where(on[:, None], added, m.geom_fluid[:, 6:12]))


def _connect_anchors(m, d):
  """eq_data with the second anchor (3:6) of every body-to-body connect recomputed at qpos0, as
  mj_setConst does: the first anchor (0:3, in body 1's frame) expressed in body 2's frame.
  Site connects and welds keep theirs (mj_setConst leaves them too)."""
  b1, b2 = m.eq_obj1id, m.eq_obj2id
  xmat = d.xmat.reshape(-1, 3, 3)
  point = d.xpos[b1] + jnp.einsum('nij,nj->ni', xmat[b1], m.eq_data[:, 0:3])
  anchor2 = jnp.einsum('nji,nj->ni', xmat[b2], point - d.xpos[b2])
  mine = (m.eq_type == EQ_CONNECT) & (m.eq_objtype == OBJ_BODY)
  return m.eq_data.at[:, 3:6].set(jnp.where(mine[:, None], anchor2, m.eq_data[:, 3:6]))


def _camlight0(m, d):
  """Offsets of the cameras and lights at qpos0 that their tracking modes use (mj_setConst):
  from the body's frame with the element's fixed pose (xpos + xmat pos): pos0 = the offset
  from the body origin, poscom0 = from the subtree com of the target body, or of the own body
  without one (hence on the masses), mat0 / dir0 = the orientation / direction in the world.
  Returns a dict of the Model fields."""
  out = {}
  xmat = d.xmat.reshape(-1, 3, 3)
  for kind, n in (('cam', m.ncam), ('light', m.nlight)):
    if not n:
      continue
    body = getattr(m, f'{kind}_bodyid')
    pos = d.xpos[body] + jnp.einsum('nij,nj->ni', xmat[body], getattr(m, f'{kind}_pos'))
    out[f'{kind}_pos0'] = pos - d.xpos[body]
    # the subtree com of the target body when there is one (targetbody* modes), else the own
    target = getattr(m, f'{kind}_targetbodyid')
    out[f'{kind}_poscom0'] = pos - d.subtree_com[jnp.where(target >= 0, target, body)]
    if kind == 'cam':
      out['cam_mat0'] = (xmat[body] @ math.quat_to_mat(m.cam_quat)).reshape(n, 9)
    else:
      out['light_dir0'] = jnp.einsum('nij,nj->ni', xmat[body], m.light_dir)
  return out


def _geom_rbound(m):
  """Bounding radius of each geom for the statistics box: geom_rbound, or for planes 0.1 of
  the largest size (1 when infinite in both directions)."""
  big = jnp.maximum(m.geom_size[:, 0], m.geom_size[:, 1])
  plane = jnp.where(big != 0, 0.1 * big, 1.0)
  fallback = jnp.where(m.geom_type == GEOM_PLANE, plane, 0.0)
  return jnp.where(m.geom_rbound > 0, m.geom_rbound, fallback)


def _statistics(m, d, qm):
  """The Model's Statistic recomputed at qpos0 (MuJoCo's setStat)."""
  if GEOM_HFIELD in m.geom_types:
    raise NotSupportedError('set_const: height-field geoms are not supported')
  stat = m.stat
  dtype = d.xpos.dtype
  # bounding box of body frames, inertial frames, joint anchors, sites and geom spheres
  pts = [d.xpos[1:], d.xipos[1:], d.xanchor, d.site_xpos]
  rbound = _geom_rbound(m)
  lo = jnp.min(jnp.concatenate([jnp.full((1, 3), 1e10, dtype)] + pts
                               + [d.geom_xpos - rbound[:, None]]), axis=0)
  hi = jnp.max(jnp.concatenate([jnp.full((1, 3), -1e10, dtype)] + pts
                               + [d.geom_xpos + rbound[:, None]]), axis=0)
  center = 0.5 * (lo + hi)
  extent = jnp.where(hi[0] > lo[0], jnp.maximum(1e-5, jnp.max(hi - lo)), stat.extent)

  # body size: largest com-anchor distance over its joints and its children's joints, then
  # the reach of its geoms with a positive bounding radius
  size = jnp.zeros(m.nbody, dtype)
  if m.njnt:
    own = m.jnt_bodyid
    parent = m.body_parentid[own]
    size = size.at[own].max(math.safe_norm(d.xipos[own] - d.xanchor))
    size = size.at[parent].max(math.safe_norm(d.xipos[parent] - d.xanchor))
  size = size.at[0].set(0.0)
  if m.ngeom:
    body = m.geom_bodyid
    reach = m.geom_rbound + math.safe_norm(d.xipos[body] - d.geom_xpos)
    size = size.at[body].max(jnp.where((body > 0) & (m.geom_rbound > 0), reach, 0.0))
  meansize, meanmass, meaninertia = stat.meansize, stat.meanmass, stat.meaninertia
  if m.nbody > 1:
    meansize = jnp.sum(jnp.maximum(size[1:], 1e-5)) / (m.nbody - 1)
    meanmass = jnp.sum(m.body_mass[1:]) / (m.nbody - 1)
  extent = jnp.maximum(extent, 2 * meansize)
  if m.nv:
    meaninertia = jnp.mean(jnp.diag(qm))
  return dataclasses.replace(stat, meaninertia=meaninertia, meanmass=meanmass,
                             meansize=meansize, extent=extent, center=center)


@gc_paused()
@full_precision
def set_const(m, from_geoms: bool = False):
  """Recomputes the qpos0-dependent constants of ``m`` (MuJoCo's mj_setConst); see the module
  docstring for the fields read and written. Returns a new Model.

  from_geoms (static): first infer the masses and inertias of the bodies whose mass frame the
  compiler took from their geoms, from the current geom sizes, densities and masses
  (mjx_py.massprops.inertia_from_geoms), as recompiling the edited XML would; mj_setConst
  itself never touches them."""
  if from_geoms:
    m = massprops.inertia_from_geoms(m)
  if m.ngeom:
    rbound, aabb = _primitive_bounds(m)
    m = dataclasses.replace(m, geom_rbound=rbound, geom_aabb=aabb,
                            geom_fluid=_fluid_added_mass(m))
  d = make_data(m)
  d = kinematics.kinematics(m, d)
  d = inertia.com_pos(m, d)
  d = tendon.tendon(m, d)
  d = inertia.crb(m, d)
  dof_m0 = jnp.diag(d.qM)                    # before the tendon armature (mj_setM0)
  d = tendon.tendon_armature(m, d)
  d = transmission.transmission(m, d)

  dtype = d.qpos.dtype
  if m.nv:
    minv = inertia.solve_m(m, d, jnp.eye(m.nv, dtype=dtype))
    minv = 0.5 * (minv + minv.T)
    ten_iw = jnp.einsum('tv,vw,tw->t', d.ten_J, minv, d.ten_J)
    acc0 = math.safe_norm(d.actuator_moment @ minv, axis=1)
    dof_iw = _dof_invweight0(m, minv)
  else:
    minv = jnp.zeros((0, 0), dtype)
    ten_iw = jnp.zeros(m.ntendon, dtype)
    acc0 = jnp.zeros(m.nu, dtype)
    dof_iw = jnp.zeros(0, dtype)
  return dataclasses.replace(
      m,
      body_subtreemass=tree.subtree_sum(m, m.body_mass),
      dof_M0=dof_m0,
      body_invweight0=_body_invweight0(m, d, minv),
      dof_invweight0=dof_iw,
      tendon_length0=d.ten_length,
      tendon_invweight0=ten_iw,
      actuator_length0=d.actuator_length,
      actuator_acc0=acc0,
      eq_data=_connect_anchors(m, d) if m.neq else m.eq_data,
      stat=_statistics(m, d, d.qM),
      **_camlight0(m, d))
