"""The Data pytree: the simulation state and everything computed from it (MuJoCo's mjData).

Shapes (MuJoCo's names and sizes); all floats in the default JAX float dtype, counters int32:

  time               ()              simulation time
  qpos               (nq,)           position                     qvel    (nv,)  velocity
  act                (na,)           actuator activation          ctrl    (nu,)  control
  qacc_warmstart     (nv,)           solver warm start            qacc    (nv,)  acceleration
  qfrc_applied       (nv,)           applied generalized force
  xfrc_applied       (nbody, 6)      applied Cartesian force/torque (world frame, at the CoM)
  mocap_pos          (nmocap, 3)     mocap body positions
  mocap_quat         (nmocap, 4)     mocap body orientations
  eq_active          (neq,)          equality constraint switches (int32)
  act_dot            (na,)           activation time derivative
  sensordata         (nsensordata,)  sensor outputs
  xpos, xquat, xmat  (nbody, 3/4/9)  body frames               xipos, ximat (nbody, 3/9)
  xanchor, xaxis     (njnt, 3)       joint anchors and axes
  geom_xpos/_xmat    (ngeom, 3/9)    site_xpos/_xmat (nsite, 3/9)
  cam_xpos/_xmat     (ncam, 3/9)     light_xpos/_xdir (nlight, 3)
  subtree_com        (nbody, 3)      cinert (nbody, 10)   cdof (nv, 6)   cvel (nbody, 6)
  cdof_dot           (nv, 6)
  ten_length         (ntendon,)      ten_velocity (ntendon,)   ten_J (ntendon, nv)
  actuator_length    (nu,)           actuator_velocity (nu,)   actuator_force (nu,)
  actuator_moment    (nu, nv)        qM (nv, nv) dense joint-space inertia
  qfrc_bias, qfrc_passive, qfrc_actuator, qfrc_smooth, qacc_smooth, qfrc_constraint  (nv,)
  qfrc_spring, qfrc_damper, qfrc_gravcomp, qfrc_fluid  (nv,)  parts of qfrc_passive
  subtree_linvel, subtree_angmom  (nbody, 3)
  cacc, cfrc_int, cfrc_ext  (nbody, 6)  com-based body acceleration, interaction and external
                     wrenches (mj_rnePostConstraint; computed when a sensor needs them)
  wrap_xpos          (2*nwrap, 3)    tendon path points; wrap_obj (2*nwrap,) int32
  ten_wrapadr, ten_wrapnum  (ntendon,) int32: each tendon's points in wrap_xpos/wrap_obj
  energy             (2,)            potential and kinetic energy
  warning_counts     (8,)            MuJoCo's warning counters (mjtWarning order), int32
  contact            Contact         contact buffer, nconmax rows (see Contact)
  ncon               ()              number of contacts: rows [0, ncon) of contact, int32

Constraint rows (mj_makeConstraint, mjx_py.constraint), a buffer of m.nefc_max rows: rows
[0, nefc) hold the active rows in MuJoCo's order (equality, friction loss, limits, contacts);
unused rows have efc_type = efc_id = -1 and every float 0 (so efc_D = 0: they weigh nothing):
  efc_type, efc_id   (nefc_max,)     mjtConstraint type and object id, int32
  efc_J              (nefc_max, nv)  dense constraint Jacobian
  efc_pos, efc_margin, efc_frictionloss, efc_diagApprox, efc_D, efc_R, efc_vel, efc_aref
                     (nefc_max,)     position, margin, friction loss, approximate A diagonal,
                                     1/R, regularizer, J qvel, reference acceleration
  efc_KBIP           (nefc_max, 4)   stiffness, damping, impedance and its derivative
  nefc, ne, nf, nl   ()              rows in use: all, equality, friction loss, limits (int32)
  efc_AR             (nefc_max, nefc_max) J M^-1 J' + diag(R) (mj_projectConstraint), only for
                     models with a dual solver (opt.solver PGS or noslip_iterations > 0; see
                     ``dual_rows``); (0, 0) otherwise
The constraint solver (mj_fwdConstraint, mjx_py.solver) writes:
  efc_b              (nefc_max,)     J qacc_smooth - aref (0 on unused rows)
  efc_force          (nefc_max,)     constraint force of each row (0 on unused rows)
  efc_state          (nefc_max,)     mjtConstraintState of each row, int32 (-1 on unused rows)
  solver_niter       ()              iterations used, int32 (0: no rows)
  solver_improvement, solver_gradient  ()  the last iteration's scaled cost improvement and
                     gradient norm (MuJoCo's d.solver[niter - 1]; 0 when no iteration ran)

``make_data(m)`` gives MuJoCo's reset state (``mj_resetData``): qpos = qpos0, mocap poses from
the mocap bodies, eq_active = eq_active0, everything else zero. Later pipeline stages fill the
computed fields.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

# mjtWarning, the order of warning_counts
WARNING_NAMES = ('mjWARN_INERTIA', 'mjWARN_CONTACTFULL', 'mjWARN_CNSTRFULL', 'mjWARN_VGEOMFULL',
                 'mjWARN_BADQPOS', 'mjWARN_BADQVEL', 'mjWARN_BADQACC', 'mjWARN_BADCTRL')
NWARNING = len(WARNING_NAMES)
SOLVER_PGS = 0  # mjtSolver


def dual_rows(m) -> int:
  """Rows of efc_AR: nefc_max for models that run a dual solver (PGS, or the noslip solver
  after any solver), 0 otherwise (the matrix is only built for them, as MuJoCo's
  mj_projectConstraint)."""
  return m.nefc_max if m.opt.solver == SOLVER_PGS or m.opt.noslip_iterations > 0 else 0


# (name, shape as a function of the model)
_SHAPES = (
    ('time', lambda m: ()),
    ('qpos', lambda m: (m.nq,)), ('qvel', lambda m: (m.nv,)), ('act', lambda m: (m.na,)),
    ('qacc_warmstart', lambda m: (m.nv,)), ('ctrl', lambda m: (m.nu,)),
    ('qfrc_applied', lambda m: (m.nv,)), ('xfrc_applied', lambda m: (m.nbody, 6)),
    ('mocap_pos', lambda m: (m.nmocap, 3)), ('mocap_quat', lambda m: (m.nmocap, 4)),
    ('qacc', lambda m: (m.nv,)), ('act_dot', lambda m: (m.na,)),
    ('sensordata', lambda m: (m.nsensordata,)),
    ('xpos', lambda m: (m.nbody, 3)), ('xquat', lambda m: (m.nbody, 4)),
    ('xmat', lambda m: (m.nbody, 9)), ('xipos', lambda m: (m.nbody, 3)),
    ('ximat', lambda m: (m.nbody, 9)), ('xanchor', lambda m: (m.njnt, 3)),
    ('xaxis', lambda m: (m.njnt, 3)), ('geom_xpos', lambda m: (m.ngeom, 3)),
    ('geom_xmat', lambda m: (m.ngeom, 9)), ('site_xpos', lambda m: (m.nsite, 3)),
    ('site_xmat', lambda m: (m.nsite, 9)), ('cam_xpos', lambda m: (m.ncam, 3)),
    ('cam_xmat', lambda m: (m.ncam, 9)), ('light_xpos', lambda m: (m.nlight, 3)),
    ('light_xdir', lambda m: (m.nlight, 3)), ('subtree_com', lambda m: (m.nbody, 3)),
    ('cinert', lambda m: (m.nbody, 10)), ('cdof', lambda m: (m.nv, 6)),
    ('cvel', lambda m: (m.nbody, 6)), ('cdof_dot', lambda m: (m.nv, 6)),
    ('ten_length', lambda m: (m.ntendon,)), ('ten_velocity', lambda m: (m.ntendon,)),
    ('ten_J', lambda m: (m.ntendon, m.nv)), ('actuator_length', lambda m: (m.nu,)),
    ('actuator_velocity', lambda m: (m.nu,)), ('actuator_force', lambda m: (m.nu,)),
    ('actuator_moment', lambda m: (m.nu, m.nv)), ('qM', lambda m: (m.nv, m.nv)),
    ('qfrc_bias', lambda m: (m.nv,)), ('qfrc_passive', lambda m: (m.nv,)),
    ('qfrc_actuator', lambda m: (m.nv,)), ('qfrc_smooth', lambda m: (m.nv,)),
    ('qacc_smooth', lambda m: (m.nv,)), ('qfrc_constraint', lambda m: (m.nv,)),
    ('energy', lambda m: (2,)),
    ('wrap_xpos', lambda m: (2 * m.nwrap, 3)),
    ('qfrc_spring', lambda m: (m.nv,)), ('qfrc_damper', lambda m: (m.nv,)),
    ('qfrc_gravcomp', lambda m: (m.nv,)), ('qfrc_fluid', lambda m: (m.nv,)),
    ('subtree_linvel', lambda m: (m.nbody, 3)), ('subtree_angmom', lambda m: (m.nbody, 3)),
    ('cacc', lambda m: (m.nbody, 6)), ('cfrc_int', lambda m: (m.nbody, 6)),
    ('cfrc_ext', lambda m: (m.nbody, 6)),
    ('efc_J', lambda m: (m.nefc_max, m.nv)), ('efc_pos', lambda m: (m.nefc_max,)),
    ('efc_margin', lambda m: (m.nefc_max,)), ('efc_frictionloss', lambda m: (m.nefc_max,)),
    ('efc_diagApprox', lambda m: (m.nefc_max,)), ('efc_KBIP', lambda m: (m.nefc_max, 4)),
    ('efc_D', lambda m: (m.nefc_max,)), ('efc_R', lambda m: (m.nefc_max,)),
    ('efc_vel', lambda m: (m.nefc_max,)), ('efc_aref', lambda m: (m.nefc_max,)),
    ('efc_force', lambda m: (m.nefc_max,)), ('efc_b', lambda m: (m.nefc_max,)),
    ('efc_AR', lambda m: (dual_rows(m),) * 2),
    ('solver_improvement', lambda m: ()), ('solver_gradient', lambda m: ()),
)
_INT_FIELDS = {'eq_active': lambda m: (m.neq,), 'warning_counts': lambda m: (NWARNING,),
               'wrap_obj': lambda m: (2 * m.nwrap,), 'ten_wrapadr': lambda m: (m.ntendon,),
               'ten_wrapnum': lambda m: (m.ntendon,),
               'efc_type': lambda m: (m.nefc_max,), 'efc_id': lambda m: (m.nefc_max,),
               'efc_state': lambda m: (m.nefc_max,), 'solver_niter': lambda m: (),
               'nefc': lambda m: (), 'ne': lambda m: (), 'nf': lambda m: (), 'nl': lambda m: ()}
EFC_UNUSED = -1  # efc_type and efc_id of an unused constraint row

# mjContact: (name, trailing shape, kind: f float / i int32)
CONTACT_FIELDS = (
    ('dist', (), 'f'), ('pos', (3,), 'f'), ('frame', (9,), 'f'), ('includemargin', (), 'f'),
    ('friction', (5,), 'f'), ('solref', (2,), 'f'), ('solreffriction', (2,), 'f'),
    ('solimp', (5,), 'f'), ('mu', (), 'f'), ('H', (36,), 'f'), ('dim', (), 'i'),
    ('geom1', (), 'i'), ('geom2', (), 'i'), ('geom', (2,), 'i'), ('exclude', (), 'i'),
    ('efc_address', (), 'i'),
)
EMPTY_DIST = 1e10  # dist of an unused contact row (mjMAXVAL)

Contact = dataclasses.make_dataclass('Contact', [(n, object) for n, _, _ in CONTACT_FIELDS],
                                     frozen=True, eq=False)
Contact.__doc__ = """The contact buffer (MuJoCo's mjContact fields, one row per contact).

Every field has a leading axis of size m.nconmax (the static capacity); rows [0, d.ncon) hold
the contacts in MuJoCo's order, the others geom1 = geom2 = geom = -1 and dist = 1e10.

  dist           (nconmax,)     signed distance (negative: penetration)
  pos            (nconmax, 3)   contact point, midway between the surfaces (world frame)
  frame          (nconmax, 9)   rows normal (from geom1 to geom2), tangent1, tangent2
  includemargin  (nconmax,)     margin - gap: the contact makes force when dist < includemargin
  friction       (nconmax, 5)   tangent1, tangent2, spin, roll1, roll2
  solref         (nconmax, 2)   solver reference (normal direction)
  solreffriction (nconmax, 2)   solver reference of the friction directions (0 0: as solref)
  solimp         (nconmax, 5)   solver impedance
  mu             (nconmax,)     friction of the regularized cone (set by the constraint stage)
  H              (nconmax, 36)  cone Hessian (set by the constraint solver)
  dim            (nconmax,)     condim: 1, 3, 4 or 6 (int32)
  geom1, geom2   (nconmax,)     geom ids, geom_type[geom1] <= geom_type[geom2] (int32)
  geom           (nconmax, 2)   (geom1, geom2) (int32)
  exclude        (nconmax,)     1: dist >= includemargin (in the gap, no force), else 0 (int32)
  efc_address    (nconmax,)     first constraint row; -1: none (int32)
"""
Contact.__module__ = __name__
jax.tree_util.register_dataclass(Contact, data_fields=[n for n, _, _ in CONTACT_FIELDS],
                                 meta_fields=[])


def empty_contact(nconmax: int, dtype=None, xp=jnp) -> Contact:
  """A contact buffer with ``nconmax`` unused rows (``xp``: jnp, or np for host arrays)."""
  dtype = jnp.result_type(float) if dtype is None else dtype
  fields = {}
  for name, shape, kind in CONTACT_FIELDS:
    fields[name] = xp.zeros((nconmax,) + shape, dtype if kind == 'f' else np.int32)
  fields['dist'] = xp.full((nconmax,), EMPTY_DIST, dtype)
  for name in ('geom1', 'geom2', 'geom', 'efc_address'):
    fields[name] = -xp.ones_like(fields[name])
  return Contact(**fields)


_FIELD_NAMES = [n for n, _ in _SHAPES] + list(_INT_FIELDS) + ['contact', 'ncon']
Data = dataclasses.make_dataclass('Data', [(n, object) for n in _FIELD_NAMES], frozen=True,
                                  eq=False)
Data.__doc__ = __doc__
Data.__module__ = __name__
jax.tree_util.register_dataclass(Data, data_fields=_FIELD_NAMES, meta_fields=[])


def _mocap_init(m, dtype, xp=jnp):
  """Initial mocap poses: the compiled pose of each mocap body, in mocap id order (a scatter
  by body_mocapid, so it also works when the Model is traced)."""
  if xp is np:
    mocapid = np.asarray(m.body_mocapid)
    pos, quat = np.zeros((m.nmocap, 3), dtype), np.zeros((m.nmocap, 4), dtype)
    mine = mocapid >= 0
    pos[mocapid[mine]] = np.asarray(m.body_pos)[mine]
    quat[mocapid[mine]] = np.asarray(m.body_quat)[mine]
    return pos, quat
  ids = jnp.where(m.body_mocapid >= 0, m.body_mocapid, m.nmocap)  # not mocap: dropped
  pos = jnp.zeros((m.nmocap, 3), dtype).at[ids].set(m.body_pos, mode='drop')
  quat = jnp.zeros((m.nmocap, 4), dtype).at[ids].set(m.body_quat, mode='drop')
  return pos, quat


def _eager(m) -> bool:
  """Whether make_data runs outside any trace (jit / vmap / grad) on a concrete Model: then
  numpy builds the arrays. Inside a trace jnp does (numpy arrays would become constants
  embedded in the program)."""
  try:
    from jax._src import core
    return bool(core.trace_state_clean())
  except (ImportError, AttributeError):   # a JAX without this query: the traceable path
    return False


def make_data(m) -> Data:
  """Data at MuJoCo's reset state for model ``m`` (see module docstring). Traceable: it also
  works inside jit/vmap with a traced Model.

  Outside a trace the arrays are built with numpy and transferred in one device_put:
  building them with jnp outside jit would compile a small program for every distinct shape
  (~140 for a humanoid: a second and about 100 MB of a fresh process)."""
  dtype = jnp.result_type(float)
  xp = np if _eager(m) else jnp
  fields = {n: xp.zeros(shape(m), dtype) for n, shape in _SHAPES}
  fields.update({n: xp.zeros(shape(m), np.int32) for n, shape in _INT_FIELDS.items()})
  fields['qpos'] = xp.asarray(m.qpos0, dtype)
  fields['mocap_pos'], fields['mocap_quat'] = _mocap_init(m, dtype, xp)
  fields['eq_active'] = xp.asarray(m.eq_active0, np.int32)
  for name in ('efc_type', 'efc_id', 'efc_state'):
    fields[name] = xp.full((m.nefc_max,), EFC_UNUSED, np.int32)
  fields['contact'] = empty_contact(m.nconmax, dtype, xp)
  fields['ncon'] = xp.zeros((), np.int32)
  d = Data(**fields)
  return jax.device_put(d) if xp is np else d


def reset_data(m, d: Data | None = None, key: int | None = None) -> Data:
  """Reset state; with ``key``, the state stored in keyframe ``key`` (mj_resetDataKeyframe).

  Jittable in ``d`` (key must be a Python int). Returns a new Data.
  """
  d = make_data(m) if d is None else make_data(m)
  if key is None:
    return d
  if not 0 <= key < m.nkey:
    raise ValueError(f'keyframe index {key} out of range: the model has {m.nkey} keyframes')
  return dataclasses.replace(
      d, time=m.key_time[key], qpos=m.key_qpos[key], qvel=m.key_qvel[key],
      act=m.key_act[key], ctrl=m.key_ctrl[key],
      mocap_pos=m.key_mpos[key].reshape(m.nmocap, 3),
      mocap_quat=m.key_mquat[key].reshape(m.nmocap, 4))
