"""Model constants derived by running kinematics and dynamics at ``qpos0`` (host side, numpy).

This is the numpy counterpart of MuJoCo 3.3.3's ``mj_setConst`` (``engine_setconst.c``): once the
compiler has produced the raw model arrays, a few fields can only be obtained by evaluating the
model at its reference configuration.  :func:`set_const` computes all of them:

* at ``qpos0``: ``dof_M0``, ``dof_invweight0``, ``body_invweight0``, ``tendon_length0``,
  ``tendon_invweight0``, ``actuator_length0``, ``actuator_acc0``, the ``dampratio -> kv``
  conversion of position-like actuators (``actuator_biasprm``), the missing ``eq_data`` of body
  connect/weld equalities, camera/light offsets and the model statistics;
* at ``qpos_spring``: ``tendon_lengthspring`` where the compiler left the "compute me" marker
  ``(-1, -1)``;
* configuration independent: ``body_subtreemass``.

The input ``m`` is any object with attribute access to MuJoCo-named model fields (a
``mujoco.MjModel`` works, which is how the module is tested).  Nothing here imports jax or mujoco.
Fields read (sizes are taken from the array lengths)::

    body_parentid body_pos body_quat body_ipos body_iquat body_mass body_inertia
    jnt_type jnt_bodyid jnt_qposadr jnt_dofadr jnt_pos jnt_axis dof_bodyid dof_armature
    qpos0 qpos_spring geom_bodyid geom_type geom_pos geom_quat geom_size geom_rbound
    site_bodyid site_pos site_quat cam_bodyid cam_targetbodyid cam_pos cam_quat
    light_bodyid light_targetbodyid light_pos light_dir
    tendon_adr tendon_num tendon_lengthspring wrap_type wrap_objid wrap_prm
    actuator_trntype actuator_trnid actuator_gear actuator_cranklength actuator_gainprm
    actuator_biasprm eq_type eq_objtype eq_obj1id eq_obj2id eq_data
    optional: tendon_armature (default none), nflex (must be 0),
    geom_dataid hfield_size (only with hfield geoms)

Conventions (MuJoCo's): quaternions are ``(w, x, y, z)``; rotation matrices map local to global
(``x_global = R @ x_local + p``); motion dofs ``cdof`` are 6-vectors ``[angular(3), linear(3)]``
expressed in the world frame with the linear part taken at the subtree centre of mass of the
body's kinematic tree root (``subtree_com[body_rootid]``).  Loops over bodies/tendons are plain
Python: this runs once per compile on the host.
"""

from __future__ import annotations

import dataclasses

import numpy as np

MINVAL = 1e-15  # mjMINVAL
NEQDATA = 11  # mjNEQDATA

# mjtJoint
JNT_FREE, JNT_BALL, JNT_SLIDE, JNT_HINGE = 0, 1, 2, 3
# mjtWrap
WRAP_NONE, WRAP_JOINT, WRAP_PULLEY, WRAP_SITE, WRAP_SPHERE, WRAP_CYLINDER = 0, 1, 2, 3, 4, 5
# mjtTrn
TRN_JOINT, TRN_JOINTINPARENT, TRN_SLIDERCRANK, TRN_TENDON, TRN_SITE, TRN_BODY = 0, 1, 2, 3, 4, 5
# mjtEq
EQ_CONNECT, EQ_WELD = 0, 1
# mjtObj
OBJ_BODY, OBJ_SITE = 1, 6
# mjtGeom
GEOM_PLANE, GEOM_HFIELD = 0, 1

# mjStatistic values MuJoCo keeps when a statistic cannot be computed (no dofs, no bodies, ...).
DEFAULT_STAT = {"meaninertia": 1.0, "meanmass": 1.0, "meansize": 0.2, "extent": 2.0}


# ------------------------------------------------------------------------------------------------
# small vector / quaternion helpers (single elements; shapes in the docstrings)
# ------------------------------------------------------------------------------------------------


def normalize(v: np.ndarray) -> tuple[np.ndarray, float]:
  """Normalize a vector like ``mju_normalize{3,4}``: returns (unit vector, original norm).

  Below MINVAL the result is the first basis vector (so a zero quaternion becomes the identity);
  a vector whose norm is already within MINVAL of 1 is returned unchanged, like MuJoCo.
  """
  v = np.asarray(v, dtype=np.float64)
  n = float(np.sqrt(v @ v))
  if n < MINVAL:
    unit = np.zeros_like(v)
    unit[0] = 1.0
    return unit, n
  if abs(n - 1.0) > MINVAL:
    return v / n, n
  return v.copy(), n


def quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """Hamilton product ``a * b`` of quaternions (4,) -> (4,)."""
  aw, ax, ay, az = a
  bw, bx, by, bz = b
  return np.array(
    [
      aw * bw - ax * bx - ay * by - az * bz,
      aw * bx + ax * bw + ay * bz - az * by,
      aw * by - ax * bz + ay * bw + az * bx,
      aw * bz + ax * by - ay * bx + az * bw,
    ]
  )


def quat_conj(q: np.ndarray) -> np.ndarray:
  """Conjugate (= inverse of a unit quaternion), ``mju_negQuat``: (4,) -> (4,)."""
  return np.array([q[0], -q[1], -q[2], -q[3]], dtype=np.float64)


def quat_to_mat(q: np.ndarray) -> np.ndarray:
  """Rotation matrix (3, 3) of a unit quaternion (4,)."""
  w, x, y, z = q
  return np.array(
    [
      [w * w + x * x - y * y - z * z, 2 * (x * y - w * z), 2 * (x * z + w * y)],
      [2 * (x * y + w * z), w * w - x * x + y * y - z * z, 2 * (y * z - w * x)],
      [2 * (x * z - w * y), 2 * (y * z + w * x), w * w - x * x - y * y + z * z],
    ]
  )


def rot_vec_quat(v: np.ndarray, q: np.ndarray) -> np.ndarray:
  """Rotate vector (3,) by unit quaternion (4,)."""
  return quat_to_mat(q) @ v


def axis_angle_quat(axis: np.ndarray, angle: float) -> np.ndarray:
  """Quaternion (4,) of a rotation by ``angle`` about unit ``axis`` (3,)."""
  if angle == 0:
    return np.array([1.0, 0.0, 0.0, 0.0])
  s = np.sin(angle / 2)
  return np.array([np.cos(angle / 2), axis[0] * s, axis[1] * s, axis[2] * s])


def quat_to_vel(q: np.ndarray) -> np.ndarray:
  """Exponential-map vector (3,) ``angle * axis`` of quaternion (4,), angle in (-pi, pi]."""
  axis, sin_half = normalize(q[1:4])
  angle = 2 * np.arctan2(sin_half, q[0])
  if angle > np.pi:
    angle -= 2 * np.pi
  return axis * angle


def sub_quat(qa: np.ndarray, qb: np.ndarray) -> np.ndarray:
  """``mju_subQuat``: exp-map (3,) of ``qb^-1 * qa``, i.e. the rotation from qb to qa."""
  return quat_to_vel(quat_mul(quat_conj(qb), qa))


# ------------------------------------------------------------------------------------------------
# model access and tree bookkeeping
# ------------------------------------------------------------------------------------------------


def _f(m, name: str, cols: int | None = None) -> np.ndarray:
  """Float64 copy of model field ``name``; with ``cols``, reshaped to (-1, cols)."""
  a = np.array(getattr(m, name), dtype=np.float64)
  return a.reshape(-1, cols) if cols else a.reshape(-1)


def _i(m, name: str, cols: int | None = None) -> np.ndarray:
  """Int64 copy of model field ``name``; with ``cols``, reshaped to (-1, cols)."""
  a = np.array(getattr(m, name), dtype=np.int64)
  return a.reshape(-1, cols) if cols else a.reshape(-1)


@dataclasses.dataclass(frozen=True)
class Tree:
  """Kinematic-tree bookkeeping derived from ``body_parentid``, ``jnt_bodyid``, ``dof_bodyid``.

  Attributes:
    parent: (nbody,) parent body id (world's parent is itself, 0).
    rootid: (nbody,) id of the world child at the top of each body's branch (0 for world).
    weldid: (nbody,) id of the nearest ancestor-or-self body with joints (0: welded to world).
    jntadr, jntnum: (nbody,) first joint and number of joints of each body (joints are stored
      grouped by body, in body order).
    dofnum: (nbody,) number of dofs of each body.
    anc: (nbody, nbody) bool, ``anc[b, a]`` iff ``a`` is an ancestor of ``b`` or ``b`` itself.
    dof_chain: (nbody, nv) bool, ``dof_chain[b, i]`` iff dof ``i`` moves body ``b``.
  """

  parent: np.ndarray
  rootid: np.ndarray
  weldid: np.ndarray
  jntadr: np.ndarray
  jntnum: np.ndarray
  dofnum: np.ndarray
  anc: np.ndarray
  dof_chain: np.ndarray


def make_tree(m) -> Tree:
  """Derive :class:`Tree` from the model's parent / joint / dof body ids."""
  parent = _i(m, "body_parentid")
  nbody = parent.size
  jnt_bodyid = _i(m, "jnt_bodyid")
  dof_bodyid = _i(m, "dof_bodyid")

  jntnum = np.bincount(jnt_bodyid, minlength=nbody)
  # joints of body b occupy [jntadr[b], jntadr[b] + jntnum[b]) because they are body-sorted
  jntadr = np.concatenate([[0], np.cumsum(jntnum)[:-1]])
  dofnum = np.bincount(dof_bodyid, minlength=nbody)

  anc = np.zeros((nbody, nbody), dtype=bool)
  rootid = np.zeros(nbody, dtype=np.int64)
  weldid = np.zeros(nbody, dtype=np.int64)
  anc[0, 0] = True
  for b in range(1, nbody):  # parents precede children
    p = parent[b]
    anc[b] = anc[p]
    anc[b, b] = True
    rootid[b] = b if p == 0 else rootid[p]
    weldid[b] = b if jntnum[b] > 0 else weldid[p]
  return Tree(parent, rootid, weldid, jntadr, jntnum, dofnum, anc, anc[:, dof_bodyid])


def body_simple(m, tree: Tree | None = None) -> np.ndarray:
  """MuJoCo's ``body_simple`` flag (nbody,) int: 0 general, 1 diagonal M block, 2 slides only.

  A body is simple when its inertial frame is its body frame, it hangs from the world (directly
  or through a joint-less world child), it has no children, its joints sit at the body origin
  with axis-aligned axes and no rotation followed by another joint, and no spatial tendon with
  armature passes through it.  Value 2 means all of its (at least one) dofs are slides, which
  lets ``set_const`` use ``1/mass`` as invweight.
  """
  tree = tree or make_tree(m)
  parent = tree.parent
  ipos, iquat = _f(m, "body_ipos", 3), _f(m, "body_iquat", 4)
  jnt_type, jnt_pos, jnt_axis = _i(m, "jnt_type"), _f(m, "jnt_pos", 3), _f(m, "jnt_axis", 3)
  nbody = parent.size
  simple = np.zeros(nbody, dtype=np.int64)
  for b in range(nbody):
    p = parent[b]
    sameframe = not ipos[b].any() and np.array_equal(iquat[b], [1.0, 0.0, 0.0, 0.0])
    flag = sameframe and (tree.rootid[b] == b or (parent[p] == 0 and tree.dofnum[p] == 0))
    rotfound = False
    joints = range(tree.jntadr[b], tree.jntadr[b] + tree.jntnum[b])
    for j in joints:
      has_axis = jnt_type[j] in (JNT_HINGE, JNT_SLIDE)
      aligned = np.count_nonzero(np.abs(jnt_axis[j]) > 1e-14) == 1
      if rotfound or jnt_pos[j].any() or (has_axis and not aligned):
        flag = False
      rotfound = rotfound or jnt_type[j] in (JNT_BALL, JNT_HINGE)
    if flag and tree.dofnum[b]:
      simple[b] = 2 if all(jnt_type[j] == JNT_SLIDE for j in joints) else 1
    else:
      simple[b] = int(flag)
  simple[np.unique(parent[1:][parent[1:] > 0])] = 0  # a parent body is never simple

  # spatial tendons with armature couple the bodies they pass through (fixed ones do not)
  if hasattr(m, "tendon_armature") and np.size(m.tendon_armature):
    wtype, wobj = _i(m, "wrap_type"), _i(m, "wrap_objid")
    for t in np.flatnonzero(_f(m, "tendon_armature") > 0):
      adr = _i(m, "tendon_adr")[t]
      for w in range(adr, adr + _i(m, "tendon_num")[t]):
        if wtype[w] == WRAP_SITE:
          simple[_i(m, "site_bodyid")[wobj[w]]] = 0
        elif wtype[w] in (WRAP_SPHERE, WRAP_CYLINDER):
          simple[_i(m, "geom_bodyid")[wobj[w]]] = 0
  return simple


# ------------------------------------------------------------------------------------------------
# position stage: kinematics, com quantities, mass matrix, Jacobians
# ------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Kinematics:
  """Poses and com-frame quantities at one configuration (all world frame).

  Attributes:
    qpos: (nq,) configuration with normalized quaternions.
    xpos, xquat, xmat: (nbody, 3), (nbody, 4), (nbody, 3, 3) body frames.
    xipos, ximat: (nbody, 3), (nbody, 3, 3) body inertial frames.
    xanchor, xaxis: (njnt, 3) joint anchors and axes.
    geom_xpos, geom_xmat, site_xpos, site_xmat: (n, 3), (n, 3, 3) geom and site frames.
    subtree_com: (nbody, 3) subtree centres of mass.
    cinert: (nbody, 6, 6) spatial inertia of each body about its root's subtree com.
    cdof: (nv, 6) motion dofs ``[angular, linear]`` about the root's subtree com.
  """

  qpos: np.ndarray
  xpos: np.ndarray
  xquat: np.ndarray
  xmat: np.ndarray
  xipos: np.ndarray
  ximat: np.ndarray
  xanchor: np.ndarray
  xaxis: np.ndarray
  geom_xpos: np.ndarray
  geom_xmat: np.ndarray
  site_xpos: np.ndarray
  site_xmat: np.ndarray
  subtree_com: np.ndarray
  cinert: np.ndarray
  cdof: np.ndarray


def normalize_qpos(m, qpos: np.ndarray) -> np.ndarray:
  """Copy of ``qpos`` (nq,) with the quaternions of free and ball joints normalized."""
  qpos = np.array(qpos, dtype=np.float64)
  for jtype, adr in zip(_i(m, "jnt_type"), _i(m, "jnt_qposadr"), strict=True):
    if jtype in (JNT_FREE, JNT_BALL):
      a = adr + (3 if jtype == JNT_FREE else 0)
      qpos[a : a + 4] = normalize(qpos[a : a + 4])[0]
  return qpos


def _local_to_global(xpos, xquat, bodyid, pos, quat):
  """World frames ((n, 3), (n, 3, 3)) of objects with local pos (n, 3), quat (n, 4) on bodies."""
  n = len(bodyid)
  gpos, gmat = np.zeros((n, 3)), np.zeros((n, 3, 3))
  for k, b in enumerate(bodyid):
    gpos[k] = xpos[b] + quat_to_mat(xquat[b]) @ pos[k]
    gmat[k] = quat_to_mat(quat_mul(xquat[b], quat[k]))
  return gpos, gmat


def kinematics(m, qpos: np.ndarray, tree: Tree | None = None) -> Kinematics:
  """Forward kinematics plus com quantities (``mj_kinematics`` + ``mj_comPos``) at ``qpos``.

  Mocap bodies take their pose from ``body_pos``/``body_quat`` (the mocap state at reset).
  """
  tree = tree or make_tree(m)
  nbody = tree.parent.size
  qpos = normalize_qpos(m, qpos)
  qpos0 = _f(m, "qpos0")
  body_pos, body_quat = _f(m, "body_pos", 3), _f(m, "body_quat", 4)
  jnt_type, jnt_qposadr = _i(m, "jnt_type"), _i(m, "jnt_qposadr")
  jnt_pos, jnt_axis = _f(m, "jnt_pos", 3), _f(m, "jnt_axis", 3)
  njnt = jnt_type.size

  xpos, xquat = np.zeros((nbody, 3)), np.zeros((nbody, 4))
  xmat = np.zeros((nbody, 3, 3))
  xquat[0, 0] = 1.0
  xmat[0] = np.eye(3)
  xanchor, xaxis = np.zeros((njnt, 3)), np.zeros((njnt, 3))

  for b in range(1, nbody):
    joints = range(tree.jntadr[b], tree.jntadr[b] + tree.jntnum[b])
    if tree.jntnum[b] == 1 and jnt_type[joints[0]] == JNT_FREE:
      # free joint: qpos holds the world pose directly
      j = joints[0]
      a = jnt_qposadr[j]
      pos, quat = qpos[a : a + 3].copy(), qpos[a + 3 : a + 7].copy()
      xanchor[j], xaxis[j] = pos, [0.0, 0.0, 1.0]
    else:
      p = tree.parent[b]
      pos = xpos[p] + xmat[p] @ body_pos[b]
      quat = quat_mul(xquat[p], body_quat[b])
      for j in joints:
        a = jnt_qposadr[j]
        xaxis[j] = rot_vec_quat(jnt_axis[j], quat)
        xanchor[j] = rot_vec_quat(jnt_pos[j], quat) + pos
        if jnt_type[j] == JNT_SLIDE:
          pos = pos + xaxis[j] * (qpos[a] - qpos0[a])
        elif jnt_type[j] in (JNT_BALL, JNT_HINGE):
          if jnt_type[j] == JNT_BALL:
            qloc = qpos[a : a + 4]
          else:
            qloc = axis_angle_quat(jnt_axis[j], qpos[a] - qpos0[a])
          quat = quat_mul(quat, qloc)
          # rotation about the anchor: keep the anchor fixed in the world
          pos = pos + (xanchor[j] - pos) - rot_vec_quat(jnt_pos[j], quat)
        else:
          raise ValueError(f"joint {j}: a free joint must be its body's only joint")
    quat = normalize(quat)[0]
    xpos[b], xquat[b], xmat[b] = pos, quat, quat_to_mat(quat)

  xipos, ximat = _local_to_global(
    xpos, xquat, np.arange(nbody), _f(m, "body_ipos", 3), _f(m, "body_iquat", 4)
  )
  xipos[0], ximat[0] = 0.0, np.eye(3)
  geom_xpos, geom_xmat = _local_to_global(
    xpos, xquat, _i(m, "geom_bodyid"), _f(m, "geom_pos", 3), _f(m, "geom_quat", 4)
  )
  site_xpos, site_xmat = _local_to_global(
    xpos, xquat, _i(m, "site_bodyid"), _f(m, "site_pos", 3), _f(m, "site_quat", 4)
  )
  kin = Kinematics(
    qpos,
    xpos,
    xquat,
    xmat,
    xipos,
    ximat,
    xanchor,
    xaxis,
    geom_xpos,
    geom_xmat,
    site_xpos,
    site_xmat,
    None,
    None,
    None,
  )
  _com_pos(m, tree, kin)
  return kin


def _skew(v: np.ndarray) -> np.ndarray:
  """Cross-product matrix (3, 3) with ``_skew(v) @ u == cross(v, u)``."""
  return np.array([[0.0, -v[2], v[1]], [v[2], 0.0, -v[0]], [-v[1], v[0], 0.0]])


def _com_pos(m, tree: Tree, kin: Kinematics) -> None:
  """Fill ``subtree_com``, ``cinert`` and ``cdof`` of ``kin`` (``mj_comPos``)."""
  mass = _f(m, "body_mass")
  inertia = _f(m, "body_inertia", 3)
  nbody = mass.size

  # subtree sums: anc[d, b] says d is in the subtree of b
  submass = tree.anc.T.astype(np.float64) @ mass
  subsum = tree.anc.T.astype(np.float64) @ (mass[:, None] * kin.xipos)
  light = submass < MINVAL
  subtree_com = np.where(light[:, None], kin.xipos, subsum / np.maximum(MINVAL, submass)[:, None])

  # spatial inertia about c = subtree_com[root], acting on [omega, v_c] -> [torque_c, force]
  cinert = np.zeros((nbody, 6, 6))
  for b in range(1, nbody):
    d = kin.xipos[b] - subtree_com[tree.rootid[b]]
    icom = kin.ximat[b] @ np.diag(inertia[b]) @ kin.ximat[b].T
    s = _skew(d)
    cinert[b, :3, :3] = icom + mass[b] * (d @ d * np.eye(3) - np.outer(d, d))
    cinert[b, :3, 3:] = mass[b] * s
    cinert[b, 3:, :3] = -mass[b] * s
    cinert[b, 3:, 3:] = mass[b] * np.eye(3)

  # motion dofs: hinge/ball rotate about an axis through the anchor, slides translate
  jnt_type, jnt_dofadr, jnt_bodyid = _i(m, "jnt_type"), _i(m, "jnt_dofadr"), _i(m, "jnt_bodyid")
  nv = tree.dof_chain.shape[1]
  cdof = np.zeros((nv, 6))
  for j, (jtype, da, b) in enumerate(zip(jnt_type, jnt_dofadr, jnt_bodyid, strict=True)):
    offset = subtree_com[tree.rootid[b]] - kin.xanchor[j]
    if jtype in (JNT_FREE, JNT_BALL):
      if jtype == JNT_FREE:  # three world-frame translations first
        cdof[da : da + 3, 3:] = np.eye(3)
        da += 3
      for k in range(3):  # rotations about the body frame axes (columns of xmat)
        axis = kin.xmat[b][:, k]
        cdof[da + k] = np.concatenate([axis, np.cross(axis, offset)])
    elif jtype == JNT_SLIDE:
      cdof[da, 3:] = kin.xaxis[j]
    else:
      cdof[da] = np.concatenate([kin.xaxis[j], np.cross(kin.xaxis[j], offset)])

  kin.subtree_com, kin.cinert, kin.cdof = subtree_com, cinert, cdof


def mass_matrix(m, tree: Tree, kin: Kinematics, ten_J: np.ndarray | None = None) -> np.ndarray:
  """Dense joint-space inertia (nv, nv) by composite rigid bodies (``mj_crb`` + armature).

  ``M[i, j] = cdof_j . (crb_{body(i)} cdof_i)`` for dof ``j`` on the path from dof ``i`` to the
  root (``j <= i``), mirrored to the upper triangle; ``dof_armature`` is added to the diagonal,
  and with ``ten_J`` (ntendon, nv) the tendon armature ``sum_t a_t J_t^T J_t`` as in
  ``mj_makeM``.  Like MuJoCo's sparse ``qM``, the tendon armature only lands on entries of the
  tree sparsity pattern: couplings between dofs of different branches are dropped.
  """
  dof_bodyid = _i(m, "dof_bodyid")
  nv = dof_bodyid.size
  # composite inertia: sum of cinert over each body's subtree (all share the root's com frame)
  crb = np.einsum("db,dxy->bxy", tree.anc.astype(np.float64), kin.cinert)
  force = np.einsum("ixy,iy->ix", crb[dof_bodyid], kin.cdof)  # (nv, 6) crb_i cdof_i
  full = kin.cdof @ force.T  # full[j, i] = cdof_j . crb_i cdof_i
  # lower[i, j]: dof j moves the body of dof i and j <= i (ancestor dofs, or same body earlier)
  lower = tree.dof_chain[dof_bodyid] & np.tri(nv, dtype=bool)
  low = np.where(lower, full.T, 0.0)
  if ten_J is not None and hasattr(m, "tendon_armature") and ten_J.size:
    low += np.where(lower, (ten_J.T * _f(m, "tendon_armature")) @ ten_J, 0.0)
  qm = low + low.T - np.diag(np.diag(low))
  qm[np.diag_indices(nv)] += _f(m, "dof_armature")
  return qm


def jac(tree: Tree, kin: Kinematics, point: np.ndarray, body: int):
  """Translational and rotational Jacobians ((3, nv), (3, nv)) of a point fixed to ``body``."""
  chain = tree.dof_chain[body][:, None]
  offset = point - kin.subtree_com[tree.rootid[body]]
  ang, lin = kin.cdof[:, :3], kin.cdof[:, 3:]
  jacp = np.where(chain, lin + np.cross(ang, offset), 0.0)
  jacr = np.where(chain, ang, 0.0)
  return jacp.T, jacr.T


# ------------------------------------------------------------------------------------------------
# tendon wrapping (semantics of mju_wrap in engine_util_misc.c)
# ------------------------------------------------------------------------------------------------


def _segments_intersect(p1, p2, p3, p4) -> bool:
  """Whether 2D segments p1-p2 and p3-p4 intersect (parallel segments never do)."""
  det = (p4[1] - p3[1]) * (p2[0] - p1[0]) - (p4[0] - p3[0]) * (p2[1] - p1[1])
  if abs(det) < MINVAL:
    return False
  a = ((p4[0] - p3[0]) * (p1[1] - p3[1]) - (p4[1] - p3[1]) * (p1[0] - p3[0])) / det
  b = ((p2[0] - p1[0]) * (p1[1] - p3[1]) - (p2[1] - p1[1]) * (p1[0] - p3[0])) / det
  return 0 <= a <= 1 and 0 <= b <= 1


def _arc_length(p0, p1, ind: int, rad: float) -> float:
  """Length of the circular arc from 2D tangent point p0 to p1; ``ind`` picks the direction."""
  u0, u1 = normalize(p0)[0], normalize(p1)[0]
  angle = np.arccos(np.clip(u0 @ u1, -1.0, 1.0))
  cross = p0[1] * p1[0] - p0[0] * p1[1]
  if (cross > 0 and ind) or (cross < 0 and not ind):
    angle = 2 * np.pi - angle
  return rad * angle


def wrap_circle(d: np.ndarray, sd: np.ndarray | None, rad: float):
  """2D wrap of segment d[0:2]-d[2:4] around the origin circle of radius ``rad``.

  ``sd`` (2,) is the optional side point (already projected onto the circle).  Returns
  ``(length, tangent points (4,))``; length -1 means the straight segment is kept.
  """
  p0, p1 = d[:2], d[2:]
  sq0, sq1, sqrad = p0 @ p0, p1 @ p1, rad * rad
  if sq0 < sqrad or sq1 < sqrad or rad < MINVAL:
    return -1.0, None
  dif = p1 - p0
  dd = dif @ dif
  if dd < MINVAL:
    return -1.0, None
  a = min(max(-(dif @ p0) / dd, 0.0), 1.0)
  near = a * dif + p0  # point of the segment nearest to the centre
  if near @ near > sqrad and (sd is None or sd @ near >= 0):
    return -1.0, None

  # the two candidate tangent-point pairs (one per turning direction) and their goodness
  sols, good = [], []
  for sgn in (1.0, -1.0):
    r0, r1 = np.sqrt(sq0 - sqrad), np.sqrt(sq1 - sqrad)
    t0 = (
      np.array([p0[0] * sqrad + sgn * rad * p0[1] * r0, p0[1] * sqrad - sgn * rad * p0[0] * r0])
      / sq0
    )
    t1 = (
      np.array([p1[0] * sqrad - sgn * rad * p1[1] * r1, p1[1] * sqrad + sgn * rad * p1[0] * r1])
      / sq1
    )
    if sd is not None:  # closest to the side point
      g = normalize(t0 + t1)[0] @ sd
    else:  # shortest straight connection between tangent points
      g = -((t0 - t1) @ (t0 - t1))
    if _segments_intersect(p0, t0, p1, t1):
      g = -10000.0
    sols.append((t0, t1))
    good.append(g)
  i = 0 if good[0] > good[1] else 1
  t0, t1 = sols[i]
  if _segments_intersect(p0, t0, p1, t1):
    return -1.0, None
  return _arc_length(t0, t1, i, rad), np.concatenate([t0, t1])


def wrap_inside(d: np.ndarray, rad: float):
  """2D "inside" wrap (side site inside the circle): single contact point from the inside.

  Returns ``(length, points (4,))`` with length 0 (both points equal) or -1 for no wrap.
  Solves ``asin(A z) + asin(B z) - 2 asin(z) + G = 0`` by Newton's method as MuJoCo does.
  """
  p0, p1 = d[:2], d[2:]
  len0, len1 = np.sqrt(p0 @ p0), np.sqrt(p1 @ p1)
  dif = p1 - p0
  dd = dif @ dif
  if len0 <= rad or len1 <= rad or rad < MINVAL or len0 < MINVAL or len1 < MINVAL:
    return -1.0, None
  if dd > MINVAL:
    a = -(dif @ p0) / dd
    if 0 < a < 1 and np.sqrt((p0 + a * dif) @ (p0 + a * dif)) <= rad:
      return -1.0, None

  # fallback for numerical failure: direction of the midpoint
  mid = normalize(0.5 * (p0 + p1))[0] * rad
  fallback = np.concatenate([mid, mid])

  A, B = rad / len0, rad / len1
  cos_g = (len0 * len0 + len1 * len1 - dd) / (2 * len0 * len1)
  if cos_g < -1 + MINVAL:
    return -1.0, None
  if cos_g > 1 - MINVAL:
    return 0.0, fallback
  G = np.arccos(cos_g)

  def fun(z):
    return np.arcsin(A * z) + np.arcsin(B * z) - 2 * np.arcsin(z) + G

  z = 1 - 1e-7
  f = fun(z)
  if f > 0:
    return 0.0, fallback
  it = 0
  while it < 20 and abs(f) > 1e-6:
    df = (
      A / max(MINVAL, np.sqrt(1 - z * z * A * A))
      + B / max(MINVAL, np.sqrt(1 - z * z * B * B))
      - 2 / max(MINVAL, np.sqrt(1 - z * z))
    )
    if df > -MINVAL:
      return 0.0, fallback
    z1 = z - f / df
    if z1 > z:
      return 0.0, fallback
    z = z1
    f = fun(z)
    if f > 1e-6:
      return 0.0, fallback
    it += 1
  if it >= 20:
    return 0.0, fallback

  # rotate the nearer-side endpoint direction by the solved angle
  if p0[0] * p1[1] - p0[1] * p1[0] > 0:
    vec, ang = normalize(p0)[0], np.arcsin(z) - np.arcsin(A * z)
  else:
    vec, ang = normalize(p1)[0], np.arcsin(z) - np.arcsin(B * z)
  c, s = np.cos(ang), np.sin(ang)
  pnt = rad * np.array([c * vec[0] - s * vec[1], s * vec[0] + c * vec[1]])
  return 0.0, np.concatenate([pnt, pnt])


def wrap(x0, x1, gpos, gmat, size, wtype: int, side=None):
  """Wrap the straight segment x0-x1 (world (3,)) around a sphere or cylinder geom.

  ``gpos`` (3,), ``gmat`` (3, 3): geom frame; ``size[0]``: radius; ``side``: optional side site
  position (3,).  Returns ``(length of the wrapped part, tangent points (2, 3))``; length < 0
  means no wrapping (points None).
  """
  p = [gmat.T @ (x0 - gpos), gmat.T @ (x1 - gpos)]
  if np.linalg.norm(p[0]) < MINVAL or np.linalg.norm(p[1]) < MINVAL:
    return -1.0, None

  # 2D frame for the circle problem: sphere -> plane through centre, p0 and p1; cylinder -> xy
  if wtype == WRAP_SPHERE:
    ax0 = normalize(p[0])[0]
    normal, nrm = normalize(np.cross(p[0], p[1]))
    if nrm < MINVAL:  # p0, p1 parallel: any plane containing them
      i = _max_component(ax0)
      other = np.ones(3)
      other[i] = 0.0
      normal = normalize(np.cross(ax0, other))[0]
    ax1 = normalize(np.cross(normal, ax0))[0]
  else:
    ax0, ax1 = np.array([1.0, 0.0, 0.0]), np.array([0.0, 1.0, 0.0])

  d = np.array([p[0] @ ax0, p[0] @ ax1, p[1] @ ax0, p[1] @ ax1])
  sd = None
  if side is not None:
    s = gmat.T @ (side - gpos)
    sd = np.array([s @ ax0, s @ ax1])
    # project onto the circle when outside, mark "inside" with (0, 0)
    sd = normalize(sd)[0] * size[0] if np.sqrt(sd @ sd) >= size[0] else np.zeros(2)

  if sd is not None and sd[0] == 0 and sd[1] == 0:
    wlen, pnt = wrap_inside(d, size[0])
  else:
    wlen, pnt = wrap_circle(d, sd, size[0])
  if wlen < 0:
    return -1.0, None

  res = np.stack([ax0 * pnt[0] + ax1 * pnt[1], ax0 * pnt[2] + ax1 * pnt[3]])
  if wtype == WRAP_CYLINDER:
    # heights interpolated along the unrolled path, helix length
    len0 = np.hypot(p[0][0] - res[0, 0], p[0][1] - res[0, 1])
    len1 = np.hypot(p[1][0] - res[1, 0], p[1][1] - res[1, 1])
    total = len0 + wlen + len1
    res[0, 2] = p[0][2] + (p[1][2] - p[0][2]) * len0 / total
    res[1, 2] = p[0][2] + (p[1][2] - p[0][2]) * (len0 + wlen) / total
    height = abs(res[1, 2] - res[0, 2])
    wlen = np.sqrt(wlen * wlen + height * height)
  return wlen, res @ gmat.T + gpos


def _max_component(v: np.ndarray) -> int:
  """Index of the strictly largest |component| of a 3-vector, preferring 0 on ties."""
  a = np.abs(v)
  if a[1] > a[0] and a[1] > a[2]:
    return 1
  if a[2] > a[0] and a[2] > a[1]:
    return 2
  return 0


# ------------------------------------------------------------------------------------------------
# tendons and actuator transmissions
# ------------------------------------------------------------------------------------------------


def tendon(m, tree: Tree, kin: Kinematics):
  """Tendon lengths (ntendon,) and Jacobians (ntendon, nv) (``mj_tendon``).

  Wrap objects of tendon ``i`` are ``wrap_*[tendon_adr[i] : tendon_adr[i] + tendon_num[i]]``.
  Fixed tendons: ``L = sum coef * qpos``.  Spatial tendons: a path of sites, optionally wrapping
  around a sphere/cylinder between two sites (``wrap_prm`` = side site id or -1), with pulleys
  (``wrap_prm`` = divisor) scaling the following branch.
  """
  ntendon = int(np.size(m.tendon_adr))
  nv = tree.dof_chain.shape[1]
  length, J = np.zeros(ntendon), np.zeros((ntendon, nv))
  if not ntendon:
    return length, J
  adrs, nums = _i(m, "tendon_adr"), _i(m, "tendon_num")
  wtype, wobj, wprm = _i(m, "wrap_type"), _i(m, "wrap_objid"), _f(m, "wrap_prm")
  jnt_qposadr, jnt_dofadr = _i(m, "jnt_qposadr"), _i(m, "jnt_dofadr")
  site_bodyid, geom_bodyid = _i(m, "site_bodyid"), _i(m, "geom_bodyid")
  geom_size = _f(m, "geom_size", 3)

  for t in range(ntendon):
    adr, num = adrs[t], nums[t]
    if wtype[adr] == WRAP_JOINT:  # fixed tendon
      for w in range(adr, adr + num):
        length[t] += wprm[w] * kin.qpos[jnt_qposadr[wobj[w]]]
        J[t, jnt_dofadr[wobj[w]]] = wprm[w]
      continue

    divisor, j = 1.0, 0
    while j < num - 1:
      t0, t1 = wtype[adr + j], wtype[adr + j + 1]
      if WRAP_PULLEY in (t0, t1):
        if t0 == WRAP_PULLEY:
          divisor = wprm[adr + j]
        j += 1
        continue
      s0 = wobj[adr + j]  # a branch segment always starts at a site
      if t1 in (WRAP_SPHERE, WRAP_CYLINDER):
        geom, s1 = wobj[adr + j + 1], wobj[adr + j + 2]
        side = int(np.round(wprm[adr + j + 1]))
        wlen, wpnt = wrap(
          kin.site_xpos[s0],
          kin.site_xpos[s1],
          kin.geom_xpos[geom],
          kin.geom_xmat[geom],
          geom_size[geom],
          t1,
          kin.site_xpos[side] if side >= 0 else None,
        )
        step = 2
      else:
        s1, wlen, step = wobj[adr + j + 1], -1.0, 1

      x0, x1 = kin.site_xpos[s0], kin.site_xpos[s1]
      b0, b1 = site_bodyid[s0], site_bodyid[s1]
      if wlen < 0:
        pts, bodies = [x0, x1], [b0, b1]
        length[t] += np.linalg.norm(x1 - x0) / divisor
      else:
        gb = geom_bodyid[geom]
        pts, bodies = [x0, wpnt[0], wpnt[1], x1], [b0, gb, gb, b1]
        length[t] += (np.linalg.norm(wpnt[0] - x0) + wlen + np.linalg.norm(x1 - wpnt[1])) / divisor

      # chain rule on each straight piece whose endpoints move with different bodies
      for k in range(len(pts) - 1):
        if bodies[k] != bodies[k + 1]:
          dif = normalize(pts[k + 1] - pts[k])[0]
          jacdif = (
            jac(tree, kin, pts[k + 1], bodies[k + 1])[0] - jac(tree, kin, pts[k], bodies[k])[0]
          )
          J[t] += (jacdif.T @ dif) / divisor
      j += step
  return length, J


def _site_quat(m, kin: Kinematics, site: int) -> np.ndarray:
  """Site orientation as MuJoCo's site transmission forms it: ``site_quat * xquat[body]``."""
  body = int(_i(m, "site_bodyid")[site])
  return quat_mul(_f(m, "site_quat", 4)[site], kin.xquat[body])


def transmission(m, tree: Tree, kin: Kinematics, ten_length: np.ndarray, ten_J: np.ndarray):
  """Actuator lengths (nu,) and moment arms (nu, nv) (``mj_transmission``).

  Body (adhesion) transmissions act through contacts, which do not exist here: length 0 and a
  zero moment, as at qpos0 in MuJoCo.
  """
  trntype = _i(m, "actuator_trntype")
  nu, nv = trntype.size, tree.dof_chain.shape[1]
  length, moment = np.zeros(nu), np.zeros((nu, nv))
  if not nu:
    return length, moment
  trnid, gears = _i(m, "actuator_trnid", 2), _f(m, "actuator_gear", 6)
  jnt_type, jnt_qposadr, jnt_dofadr = _i(m, "jnt_type"), _i(m, "jnt_qposadr"), _i(m, "jnt_dofadr")
  site_bodyid = _i(m, "site_bodyid")
  crank = _f(m, "actuator_cranklength")

  for u in range(nu):
    tid, tid2, gear = trnid[u, 0], trnid[u, 1], gears[u]
    kind = trntype[u]
    if kind in (TRN_JOINT, TRN_JOINTINPARENT):
      qa, da, jt = jnt_qposadr[tid], jnt_dofadr[tid], jnt_type[tid]
      if jt in (JNT_SLIDE, JNT_HINGE):
        length[u] = kin.qpos[qa] * gear[0]
        moment[u, da] = gear[0]
      elif jt == JNT_BALL:
        quat = kin.qpos[qa : qa + 4]
        gear_axis = gear[:3] if kind == TRN_JOINT else rot_vec_quat(gear[:3], quat_conj(quat))
        length[u] = quat_to_vel(quat) @ gear_axis
        moment[u, da : da + 3] = gear_axis
      else:  # free joint: no meaningful length
        quat = kin.qpos[qa + 3 : qa + 7]
        gear_axis = gear[3:] if kind == TRN_JOINT else rot_vec_quat(gear[3:], quat_conj(quat))
        moment[u, da : da + 3] = gear[:3]
        moment[u, da + 3 : da + 6] = gear_axis
    elif kind == TRN_SLIDERCRANK:
      # tid: crank site, tid2: slider site; slider moves along its local z axis
      axis = kin.site_xmat[tid2][:, 2]
      vec = kin.site_xpos[tid] - kin.site_xpos[tid2]
      av = vec @ axis
      det = av * av + crank[u] ** 2 - vec @ vec
      if det <= 0:
        length[u] = av
        dlda, dldv = vec, axis
      else:
        sdet = np.sqrt(det)
        length[u] = av - sdet
        dldv = axis * (1 - av / sdet) + vec / sdet
        dlda = vec * (1 - av / sdet)
      jac_s, jacr_s = jac(tree, kin, kin.site_xpos[tid2], site_bodyid[tid2])
      jac_axis = np.cross(jacr_s.T, axis).T  # (3, nv): d(axis)/dq
      jac_v = jac(tree, kin, kin.site_xpos[tid], site_bodyid[tid])[0] - jac_s
      moment[u] = (dlda @ jac_axis + dldv @ jac_v) * gear[0]
      length[u] *= gear[0]
    elif kind == TRN_TENDON:
      length[u] = ten_length[tid] * gear[0]
      moment[u] = ten_J[tid] * gear[0]
    elif kind == TRN_SITE:
      jacp, jacr = jac(tree, kin, kin.site_xpos[tid], site_bodyid[tid])
      if tid2 == -1:  # gear is a wrench in the site frame
        rot = kin.site_xmat[tid]
        moment[u] = (rot @ gear[:3]) @ jacp + (rot @ gear[3:]) @ jacr
      else:  # relative to a reference site
        ref = tid2
        rot = kin.site_xmat[ref]
        jacp_ref, jacr_ref = jac(tree, kin, kin.site_xpos[ref], site_bodyid[ref])
        # dofs moving both sites leave the relative pose (in the ref frame) unchanged
        common = tree.dof_chain[site_bodyid[tid]] & tree.dof_chain[site_bodyid[ref]]
        jacp, jacr = np.where(common, 0.0, jacp), np.where(common, 0.0, jacr)
        jacp_ref = np.where(common, 0.0, jacp_ref)
        jacr_ref = np.where(common, 0.0, jacr_ref)
        if gear[:3].any():
          vec = rot.T @ (kin.site_xpos[tid] - kin.site_xpos[ref])
          length[u] += vec @ gear[:3]
          moment[u] += (rot @ gear[:3]) @ (jacp - jacp_ref)
        if gear[3:].any():
          vec = sub_quat(_site_quat(m, kin, tid), _site_quat(m, kin, ref))
          length[u] += vec @ gear[3:]
          moment[u] += (rot @ gear[3:]) @ (jacr - jacr_ref)
    elif kind != TRN_BODY:
      raise ValueError(f"actuator {u}: unknown transmission type {kind}")
  return length, moment


# ------------------------------------------------------------------------------------------------
# derived constants
# ------------------------------------------------------------------------------------------------


def _invweights(m, tree, kin, minv, simple, mass):
  """``body_invweight0`` (nbody, 2) and ``dof_invweight0`` (nv,) from ``minv`` = M^-1.

  Bodies: mean diagonal of ``J M^-1 J^T`` for the com Jacobian, translation then rotation;
  0 for bodies welded to the world; ``(1/mass, 0)`` for slide-only simple bodies.  Joints: mean
  diagonal of the joint's block of M^-1 (free joints: translation and rotation separately).
  """
  nbody = tree.parent.size
  nv = minv.shape[0]
  body_iw = np.zeros((nbody, 2))
  for b in range(1, nbody):
    if tree.weldid[b] == 0:
      continue
    if simple[b] == 2:
      body_iw[b] = 1 / max(MINVAL, mass[b]), 0.0
    elif nv:
      jacp, jacr = jac(tree, kin, kin.xipos[b], b)
      jj = np.concatenate([jacp, jacr])
      a = np.einsum("iv,vw,iw->i", jj, minv, jj)
      body_iw[b] = a[:3].mean(), a[3:].mean()

  dof_iw = np.zeros(nv)
  jnt_type, jnt_dofadr, jnt_bodyid = _i(m, "jnt_type"), _i(m, "jnt_dofadr"), _i(m, "jnt_bodyid")
  for jtype, da, b in zip(jnt_type, jnt_dofadr, jnt_bodyid, strict=True):
    if simple[b] == 2:  # only the joint's first dof, like MuJoCo (slides have one anyway)
      dof_iw[da] = 1 / max(MINVAL, mass[b])
      continue
    diag = np.diag(minv)
    if jtype == JNT_FREE:
      dof_iw[da : da + 3] = diag[da : da + 3].mean()
      dof_iw[da + 3 : da + 6] = diag[da + 3 : da + 6].mean()
    elif jtype == JNT_BALL:
      dof_iw[da : da + 3] = diag[da : da + 3].mean()
    else:
      dof_iw[da] = diag[da]
  return body_iw, dof_iw


def _eq_data(m, kin: Kinematics) -> np.ndarray:
  """``eq_data`` (neq, 11) with the qpos0-dependent entries of body connect/weld filled in.

  connect (body form): ``[anchor in body1 (3), anchor in body2 (3)]``, the second computed from
  the first at qpos0; site form: all zero.  weld (body form): ``[anchor in body2 (3), anchor in
  body1 (3), relquat (4), torquescale]``; when the given relquat is zero, the body1 anchor and
  ``relquat = xquat1^-1 * xquat2`` come from qpos0, otherwise relquat is only normalized.
  """
  data = _f(m, "eq_data", NEQDATA)
  eq_type, objtype = _i(m, "eq_type"), _i(m, "eq_objtype")
  id1s, id2s = _i(m, "eq_obj1id"), _i(m, "eq_obj2id")
  for e in range(data.shape[0]):
    i1, i2 = id1s[e], id2s[e]
    if eq_type[e] == EQ_CONNECT:
      if objtype[e] == OBJ_BODY:
        pos = kin.xpos[i1] + kin.xmat[i1] @ data[e, :3]
        data[e, 3:6] = kin.xmat[i2].T @ (pos - kin.xpos[i2])
      elif objtype[e] == OBJ_SITE:
        data[e] = 0.0
    elif eq_type[e] == EQ_WELD and objtype[e] == OBJ_BODY:
      if data[e, 6:10].any():
        data[e, 6:10] = normalize(data[e, 6:10])[0]
        continue
      pos = kin.xpos[i2] + kin.xmat[i2] @ data[e, :3]
      data[e, 3:6] = kin.xmat[i1].T @ (pos - kin.xpos[i1])
      data[e, 6:10] = quat_mul(quat_conj(kin.xquat[i1]), kin.xquat[i2])
  return data


def _camlight(m, kin: Kinematics) -> dict[str, np.ndarray]:
  """Camera/light offsets at qpos0 from their fixed-mode poses.

  ``*_pos0``: position relative to the owning body; ``*_poscom0``: relative to the subtree com
  of the target body (or the owning body); ``cam_mat0`` (ncam, 9): world orientation;
  ``light_dir0``: unit world direction.
  """
  out = {}
  cam_bodyid = _i(m, "cam_bodyid")
  cam_xpos, cam_xmat = _local_to_global(
    kin.xpos, kin.xquat, cam_bodyid, _f(m, "cam_pos", 3), _f(m, "cam_quat", 4)
  )
  cam_ref = np.where(_i(m, "cam_targetbodyid") >= 0, _i(m, "cam_targetbodyid"), cam_bodyid)
  out["cam_pos0"] = cam_xpos - kin.xpos[cam_bodyid]
  out["cam_poscom0"] = cam_xpos - kin.subtree_com[cam_ref]
  out["cam_mat0"] = cam_xmat.reshape(-1, 9)

  light_bodyid = _i(m, "light_bodyid")
  light_pos, light_dir = _f(m, "light_pos", 3), _f(m, "light_dir", 3)
  nlight = light_bodyid.size
  light_xpos, light_xdir = np.zeros((nlight, 3)), np.zeros((nlight, 3))
  for k, b in enumerate(light_bodyid):
    light_xpos[k] = kin.xpos[b] + kin.xmat[b] @ light_pos[k]
    light_xdir[k] = normalize(rot_vec_quat(light_dir[k], kin.xquat[b]))[0]
  light_ref = np.where(_i(m, "light_targetbodyid") >= 0, _i(m, "light_targetbodyid"), light_bodyid)
  out["light_pos0"] = light_xpos - kin.xpos[light_bodyid]
  out["light_poscom0"] = light_xpos - kin.subtree_com[light_ref]
  out["light_dir0"] = light_xdir
  return out


def _dampratio(biasprm, gainprm, moment, dof_M0) -> np.ndarray:
  """Turn a positive ``biasprm[2]`` of position-like actuators into ``-kv``.

  Position-like means ``gainprm[0] == -biasprm[1]`` (MuJoCo checks nothing else).  With the
  reflected inertia ``m_r = sum_i dof_M0[i] / moment[i]^2`` over dofs with ``moment^2 >
  MINVAL``: ``biasprm[2] = -dampratio * 2 * sqrt(kp * m_r)``.  Returns the new biasprm.
  """
  biasprm = biasprm.copy()
  for u in range(biasprm.shape[0]):
    if gainprm[u, 0] != -biasprm[u, 1] or biasprm[u, 2] <= 0:
      continue
    trn2 = moment[u] ** 2
    used = trn2 > MINVAL
    reflected = np.sum(dof_M0[used] / trn2[used])
    biasprm[u, 2] = -biasprm[u, 2] * 2 * np.sqrt(gainprm[u, 0] * reflected)
  return biasprm


def _statistics(m, tree: Tree, kin: Kinematics, qm: np.ndarray) -> dict[str, np.ndarray]:
  """Model statistics (``setStat``).

  ``center``/``extent``: bounding box of body frames, inertial frames, joint anchors, sites and
  geoms (bounding spheres; planes 0.1 of their largest size or 1 if infinite; hfields 0.1 of
  the largest hfield size).  ``meansize``: mean over bodies of the largest com-joint distance /
  geom reach.  ``meanmass``: mean body mass.  ``meaninertia``: mean diagonal of M.
  """
  nbody = tree.parent.size
  mass = _f(m, "body_mass")
  geom_type, geom_size = _i(m, "geom_type"), _f(m, "geom_size", 3)
  geom_rbound, geom_bodyid = _f(m, "geom_rbound"), _i(m, "geom_bodyid")
  jnt_bodyid = _i(m, "jnt_bodyid")
  stat = dict(DEFAULT_STAT)

  # bounding box of points (radius 0) and geom spheres
  pts = [kin.xpos[1:], kin.xipos[1:], kin.xanchor, kin.site_xpos]
  rbound = geom_rbound.copy()
  for g in np.flatnonzero(geom_rbound <= 0):
    if geom_type[g] == GEOM_PLANE:
      big = max(geom_size[g, 0], geom_size[g, 1])
      rbound[g] = 0.1 * big if big else 1.0
    elif geom_type[g] == GEOM_HFIELD:
      rbound[g] = 0.1 * _f(m, "hfield_size", 4)[_i(m, "geom_dataid")[g]].max()
  lo = np.min(
    [np.full(3, 1e10)]
    + [p.min(0) for p in pts if len(p)]
    + ([(kin.geom_xpos - rbound[:, None]).min(0)] if len(rbound) else []),
    axis=0,
  )
  hi = np.max(
    [np.full(3, -1e10)]
    + [p.max(0) for p in pts if len(p)]
    + ([(kin.geom_xpos + rbound[:, None]).max(0)] if len(rbound) else []),
    axis=0,
  )
  center = 0.5 * (lo + hi)
  if hi[0] > lo[0]:
    stat["extent"] = max(1e-5, float(np.max(hi - lo)))

  # body size: largest com-anchor distance (own and children's joints), then geom reach
  size = np.zeros(nbody)
  for j, b in enumerate(jnt_bodyid):
    for bb in (b, tree.parent[b]):
      size[bb] = max(size[bb], np.linalg.norm(kin.xipos[bb] - kin.xanchor[j]))
  size[0] = 0.0
  for g, b in enumerate(geom_bodyid):
    if b > 0 and geom_rbound[g] > 0:
      reach = geom_rbound[g] + np.linalg.norm(kin.xipos[b] - kin.geom_xpos[g])
      size[b] = max(size[b], reach)
  if nbody > 1:
    size[1:] = np.maximum(size[1:], 1e-5)
    stat["meansize"] = float(np.sum(size[1:] / (nbody - 1)))
    stat["meanmass"] = float(np.sum(mass[1:]) / (nbody - 1))
  stat["extent"] = max(stat["extent"], 2 * stat["meansize"])
  if qm.shape[0]:
    stat["meaninertia"] = float(np.mean(np.diag(qm)))

  out = {f"stat_{k}": np.asarray(v, dtype=np.float64) for k, v in stat.items()}
  out["stat_center"] = center
  return out


def set_const(m) -> dict[str, np.ndarray]:
  """Compute the qpos0-derived constants of a compiled model (``mj_setConst``).

  Args:
    m: object with MuJoCo-named model fields (e.g. ``mujoco.MjModel`` or our compiler's
      arrays).  It is not modified.  Fields that carry "compute me" markers on input:
      ``tendon_lengthspring`` rows equal to ``(-1, -1)``, ``actuator_biasprm[:, 2] > 0`` on
      position-like actuators (dampratio), zero weld relquat ``eq_data[6:10]``.

  Returns:
    Dict of new field values, keyed by MuJoCo name (shapes as in ``MjModel``):
    ``dof_M0`` (nv,), ``dof_invweight0`` (nv,), ``body_invweight0``
    (nbody, 2), ``body_subtreemass`` (nbody,), ``tendon_length0`` (ntendon,),
    ``tendon_invweight0`` (ntendon,), ``tendon_lengthspring`` (ntendon, 2),
    ``actuator_length0`` (nu,), ``actuator_acc0`` (nu,), ``actuator_biasprm`` (nu, 10),
    ``eq_data`` (neq, 11), ``cam_pos0``, ``cam_poscom0`` (ncam, 3), ``cam_mat0`` (ncam, 9),
    ``light_pos0``, ``light_poscom0``, ``light_dir0`` (nlight, 3), ``stat_meaninertia``,
    ``stat_meanmass``, ``stat_meansize``, ``stat_extent`` (scalars) and ``stat_center`` (3,).
    Statistics given explicitly in MJCF (``<statistic>``) override these; that is up to the
    caller.
  """
  if int(getattr(m, "nflex", 0)):
    raise NotImplementedError("set_const: flex objects are not supported")
  tree = make_tree(m)
  mass = _f(m, "body_mass")
  simple = body_simple(m, tree)
  out: dict[str, np.ndarray] = {"body_subtreemass": tree.anc.T.astype(np.float64) @ mass}

  # everything at qpos0
  kin = kinematics(m, _f(m, "qpos0"), tree)
  ten_length, ten_J = tendon(m, tree, kin)
  qm = mass_matrix(m, tree, kin, ten_J)
  crb_only = mass_matrix(m, tree, kin)  # dof_M0 excludes tendon armature (mj_setM0)
  act_length, moment = transmission(m, tree, kin, ten_length, ten_J)
  nv = qm.shape[0]
  minv = np.linalg.inv(qm) if nv else qm

  out["dof_M0"] = np.diag(crb_only).copy()
  out["body_invweight0"], out["dof_invweight0"] = _invweights(m, tree, kin, minv, simple, mass)
  out["tendon_length0"] = ten_length
  out["tendon_invweight0"] = np.einsum("tv,vw,tw->t", ten_J, minv, ten_J)
  out["actuator_length0"] = act_length
  out["actuator_acc0"] = np.linalg.norm(moment @ minv, axis=1)
  out["actuator_biasprm"] = _dampratio(
    _f(m, "actuator_biasprm", 10), _f(m, "actuator_gainprm", 10), moment, out["dof_M0"]
  )
  out["eq_data"] = _eq_data(m, kin)
  out.update(_camlight(m, kin))
  out.update(_statistics(m, tree, kin, qm))

  # tendon spring rest lengths at qpos_spring where the compiler left (-1, -1)
  lengthspring = _f(m, "tendon_lengthspring", 2)
  todo = (lengthspring[:, 0] == -1) & (lengthspring[:, 1] == -1)
  if todo.any():
    spring_length = tendon(m, tree, kinematics(m, _f(m, "qpos_spring"), tree))[0]
    lengthspring[todo] = spring_length[todo, None]
  out["tendon_lengthspring"] = lengthspring
  return out
