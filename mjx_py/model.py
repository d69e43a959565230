"""The immutable Model pytree: MuJoCo's ``mjModel`` fields, by MuJoCo's names.

``Model`` is a frozen dataclass registered with ``jax.tree_util.register_dataclass``. Array fields
are pytree leaves (floats in the default JAX float type: float32, or float64 under
``jax_enable_x64``; integer ids, types and flags as int32). Sizes (``nq``, ``nv``, ``nbody``, ...),
element names and the discrete options in ``Model.opt`` are static metadata: they fix shapes and
algorithm choices, so they are not traced. Everything else can be batched with ``jax.vmap``
(domain randomization) or differentiated.

The field table (name, dtype: f float / i int32, shape in MuJoCo's size names, meaning)
is appended to this docstring from ``_FIELD_TABLE`` below.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from . import tendon, tree

_FIELD_TABLE = """
body_parentid            i nbody                  id of body's parent
body_pos                 f nbodyx3                position offset rel. to parent body
body_quat                f nbodyx4                orientation offset rel. to parent body
body_gravcomp            f nbody                  antigravity force, units of body weight
body_mocapid             i nbody                  id of mocap data; -1: none
body_jntadr              i nbody                  start addr of joints; -1: no joints
body_jntnum              i nbody                  number of joints for this body
body_dofadr              i nbody                  start addr of dofs; -1: no dofs
body_dofnum              i nbody                  number of motion degrees of freedom
jnt_type                 i njnt                   type of joint (mjtJoint)
jnt_qposadr              i njnt                   start addr in 'qpos' for joint's data
jnt_dofadr               i njnt                   start addr in 'qvel' for joint's data
jnt_bodyid               i njnt                   id of joint's body
jnt_group                i njnt                   group for visibility
jnt_limited              i njnt                   does joint have limits
jnt_actfrclimited        i njnt                   does joint have actuator force limits
jnt_actgravcomp          i njnt                   is gravcomp force applied via actuators
jnt_solref               f njntx2                 constraint solver reference: limit
jnt_solimp               f njntx5                 constraint solver impedance: limit
jnt_pos                  f njntx3                 local anchor position
jnt_axis                 f njntx3                 local joint axis
jnt_stiffness            f njnt                   stiffness coefficient
jnt_range                f njntx2                 joint limits
jnt_actfrcrange          f njntx2                 range of total actuator force
jnt_margin               f njnt                   min distance for limit detection
dof_bodyid               i nv                     id of dof's body
dof_jntid                i nv                     id of dof's joint
dof_solref               f nvx2                   constraint solver reference:frictionloss
dof_solimp               f nvx5                   constraint solver impedance:frictionloss
dof_frictionloss         f nv                     dof friction loss
dof_armature             f nv                     dof armature inertia/mass
dof_damping              f nv                     damping coefficient
qpos0                    f nq                     qpos values at default pose
qpos_spring              f nq                     reference pose for springs
dof_parentid             i nv                     id of dof's parent; -1: none
dof_simplenum            i nv                     number of consecutive simple dofs
dof_Madr                 i nv                     dof address in M-diagonal
body_geomadr             i nbody                  start addr of geoms; -1: no geoms
body_geomnum             i nbody                  number of geoms
geom_type                i ngeom                  geometric type (mjtGeom)
geom_contype             i ngeom                  geom contact type
geom_conaffinity         i ngeom                  geom contact affinity
geom_condim              i ngeom                  contact dimensionality (1, 3, 4, 6)
geom_bodyid              i ngeom                  id of geom's body
geom_dataid              i ngeom                  id of geom's mesh/hfield; -1: none
geom_group               i ngeom                  group for visibility
geom_priority            i ngeom                  geom contact priority
geom_solmix              f ngeom                  mixing coef for solref/imp in geom pair
geom_solref              f ngeomx2                constraint solver reference: contact
geom_solimp              f ngeomx5                constraint solver impedance: contact
geom_size                f ngeomx3                geom-specific size parameters
geom_pos                 f ngeomx3                local position offset rel. to body
geom_quat                f ngeomx4                local orientation offset rel. to body
geom_friction            f ngeomx3                friction for (slide, spin, roll)
geom_margin              f ngeom                  detect contact if dist<margin
geom_gap                 f ngeom                  include in solver if dist<margin-gap
geom_rgba                f ngeomx4                rgba when material is omitted
geom_rbound              f ngeom                  radius of bounding sphere
geom_aabb                f ngeomx6                bounding box, (center, size)
geom_fluid               f ngeomx12               fluid interaction parameters
site_type                i nsite                  geom type for rendering (mjtGeom)
site_bodyid              i nsite                  id of site's body
site_group               i nsite                  group for visibility
site_size                f nsitex3                geom size for rendering
site_pos                 f nsitex3                local position offset rel. to body
site_quat                f nsitex4                local orientation offset rel. to body
site_rgba                f nsitex4                rgba when material is omitted
cam_mode                 i ncam                   camera tracking mode (mjtCamLight)
cam_bodyid               i ncam                   id of camera's body
cam_targetbodyid         i ncam                   id of targeted body; -1: none
cam_pos                  f ncamx3                 position rel. to body frame
cam_quat                 f ncamx4                 orientation rel. to body frame
cam_orthographic         i ncam                   orthographic camera; 0: no, 1: yes
cam_fovy                 f ncam                   y field-of-view (ortho ? len : deg)
cam_ipd                  f ncam                   inter-pupilary distance
cam_resolution           i ncamx2                 resolution: pixels [width, height]
cam_sensorsize           f ncamx2                 sensor size: length [width, height]
cam_intrinsic            f ncamx4                 [focal length; principal point]
light_mode               i nlight                 light tracking mode (mjtCamLight)
light_bodyid             i nlight                 id of light's body
light_targetbodyid       i nlight                 id of targeted body; -1: none
light_pos                f nlightx3               position rel. to body frame
light_dir                f nlightx3               direction rel. to body frame
light_type               i nlight                 type of light (mjtLightType)
light_castshadow         i nlight                 does light cast shadows
light_active             i nlight                 is light on
mesh_vertadr             i nmesh                  first vertex address
mesh_vertnum             i nmesh                  number of vertices
mesh_faceadr             i nmesh                  first face address
mesh_facenum             i nmesh                  number of faces
mesh_vert                f nmeshvertx3            vertex positions for all meshes
mesh_face                i nmeshfacex3            vertex face data
mesh_scale               f nmeshx3                scaling applied to asset vertices
mesh_pos                 f nmeshx3                translation applied to asset vertices
mesh_quat                f nmeshx4                rotation applied to asset vertices
mesh_hullvert            f nmeshxmaxhullx3        engine-only: hull vertices, repeat-1st padded
mesh_hullvertnum         i nmesh                  engine-only: number of hull vertices
mesh_hullnbr             i nmeshxmaxhullxmaxnbr   engine-only: hull neighbours, -1 padded
hfield_size              f nhfieldx4              (x, y, z_top, z_bottom)
hfield_nrow              i nhfield                number of rows in grid
hfield_ncol              i nhfield                number of columns in grid
hfield_adr               i nhfield                address in hfield_data
hfield_data              f nhfielddata            elevation data
body_mass                f nbody                  mass
body_ipos                f nbodyx3                local position of center of mass
body_iquat               f nbodyx4                local orientation of inertia ellipsoid
body_inertia             f nbodyx3                diagonal inertia in ipos/iquat frame
body_inertiafromgeom     i nbody                  engine-only: 1: mass frame inferred from geoms
geom_inertiamode         i ngeom                  engine-only: in body inertia: 0 no, 1, 2 shell
geom_density             f ngeom                  engine-only: material density (MJCF density)
geom_mass                f ngeom                  engine-only: MJCF mass; -1: density x volume
geom_meshinertia         f ngeomx4                engine-only: mesh volume, unit diag inertia (3)
body_rootid              i nbody                  id of root above body
body_weldid              i nbody                  id of body that this body is welded to
body_treeid              i nbody                  id of body's kinematic tree; -1: static
dof_treeid               i nv                     id of dof's kinematic tree
body_contype             i nbody                  OR over all geom contypes
body_conaffinity         i nbody                  OR over all geom conaffinities
body_margin              f nbody                  MAX over all geom margins
body_simple              i nbody                  1: diag M; 2: diag M, sliders only
body_sameframe           i nbody                  same frame as inertia (mjtSameframe)
geom_sameframe           i ngeom                  same frame as body (mjtSameframe)
site_sameframe           i nsite                  same frame as body (mjtSameframe)
pair_dim                 i npair                  contact dimensionality
pair_geom1               i npair                  id of geom1
pair_geom2               i npair                  id of geom2
pair_signature           i npair                  body1 << 16 + body2
pair_solref              f npairx2                solver reference: contact normal
pair_solreffriction      f npairx2                solver reference: contact friction
pair_solimp              f npairx5                solver impedance: contact
pair_margin              f npair                  detect contact if dist<margin
pair_gap                 f npair                  include in solver if dist<margin-gap
pair_friction            f npairx5                tangent1, 2, spin, roll1, 2
exclude_signature        i nexclude               body1 << 16 + body2
tendon_adr               i ntendon                address of first object in tendon's path
tendon_num               i ntendon                number of objects in tendon's path
tendon_group             i ntendon                group for visibility
tendon_limited           i ntendon                does tendon have length limits
tendon_actfrclimited     i ntendon                does tendon have actuator force limits
tendon_width             f ntendon                width for rendering
tendon_solref_lim        f ntendonx2              constraint solver reference: limit
tendon_solimp_lim        f ntendonx5              constraint solver impedance: limit
tendon_solref_fri        f ntendonx2              constraint solver reference: friction
tendon_solimp_fri        f ntendonx5              constraint solver impedance: friction
tendon_range             f ntendonx2              tendon length limits
tendon_actfrcrange       f ntendonx2              range of total actuator force
tendon_margin            f ntendon                min distance for limit detection
tendon_stiffness         f ntendon                stiffness coefficient
tendon_damping           f ntendon                damping coefficient
tendon_armature          f ntendon                inertia associated with tendon velocity
tendon_frictionloss      f ntendon                loss due to friction
tendon_lengthspring      f ntendonx2              spring resting length range
tendon_rgba              f ntendonx4              rgba when material is omitted
wrap_type                i nwrap                  wrap object type (mjtWrap)
wrap_objid               i nwrap                  object id: geom, site, joint
wrap_prm                 f nwrap                  divisor, joint coef, or site id
actuator_trntype         i nu                     transmission type (mjtTrn)
actuator_dyntype         i nu                     dynamics type (mjtDyn)
actuator_gaintype        i nu                     gain type (mjtGain)
actuator_biastype        i nu                     bias type (mjtBias)
actuator_trnid           i nux2                   transmission id: joint, tendon, site
actuator_actadr          i nu                     first activation address; -1: stateless
actuator_actnum          i nu                     number of activation variables
actuator_group           i nu                     group for visibility
actuator_ctrllimited     i nu                     is control limited
actuator_forcelimited    i nu                     is force limited
actuator_actlimited      i nu                     is activation limited
actuator_dynprm          f nux10                  dynamics parameters
actuator_gainprm         f nux10                  gain parameters
actuator_biasprm         f nux10                  bias parameters
actuator_actearly        i nu                     step activation before force
actuator_ctrlrange       f nux2                   range of controls
actuator_forcerange      f nux2                   range of forces
actuator_actrange        f nux2                   range of activations
actuator_gear            f nux6                   scale length and transmitted force
actuator_cranklength     f nu                     crank length for slider-crank
actuator_lengthrange     f nux2                   feasible actuator length range
eq_type                  i neq                    constraint type (mjtEq)
eq_obj1id                i neq                    id of object 1
eq_obj2id                i neq                    id of object 2
eq_objtype               i neq                    type of both objects (mjtObj)
eq_active0               i neq                    initial enable/disable constraint state
eq_solref                f neqx2                  constraint solver reference
eq_solimp                f neqx5                  constraint solver impedance
eq_data                  f neqxmjNEQDATA          numeric data for constraint
sensor_type              i nsensor                sensor type (mjtSensor)
sensor_datatype          i nsensor                numeric data type (mjtDataType)
sensor_objtype           i nsensor                type of sensorized object (mjtObj)
sensor_objid             i nsensor                id of sensorized object
sensor_reftype           i nsensor                type of reference frame (mjtObj)
sensor_refid             i nsensor                id of reference frame; -1: global frame
sensor_dim               i nsensor                number of scalar outputs
sensor_adr               i nsensor                address in sensor array
sensor_needstage         i nsensor                required compute stage (mjtStage)
sensor_cutoff            f nsensor                cutoff for real and positive; 0: ignore
sensor_noise             f nsensor                noise standard deviation
sensor_plugin            i nsensor                plugin instance id; -1: not a plugin
key_time                 f nkey                   key time
key_qpos                 f nkeyxnq                key position
key_qvel                 f nkeyxnv                key velocity
key_act                  f nkeyxna                key activation
key_ctrl                 f nkeyxnu                key control
key_mpos                 f nkeyxnmocap*3          key mocap position
key_mquat                f nkeyxnmocap*4          key mocap quaternion
numeric_adr              i nnumeric               address of field in numeric_data
numeric_size             i nnumeric               size of numeric field
numeric_data             f nnumericdata           array of all numeric fields
tuple_adr                i ntuple                 address of text in text_data
tuple_size               i ntuple                 number of objects in tuple
tuple_objtype            i ntupledata             array of object types in all tuples
tuple_objid              i ntupledata             array of object ids in all tuples
tuple_objprm             f ntupledata             array of object params in all tuples
body_user                f nbodyxnuser_body       user data
jnt_user                 f njntxnuser_jnt         user data
geom_user                f ngeomxnuser_geom       user data
site_user                f nsitexnuser_site       user data
cam_user                 f ncamxnuser_cam         user data
tendon_user              f ntendonxnuser_tendon   user data
actuator_user            f nuxnuser_actuator      user data
sensor_user              f nsensorxnuser_sensor   user data
body_subtreemass         f nbody                  mass of subtree starting at this body
dof_M0                   f nv                     diag. inertia in qpos0
body_invweight0          f nbodyx2                mean inv inert in qpos0 (trn, rot)
dof_invweight0           f nv                     diag. inverse inertia in qpos0
tendon_length0           f ntendon                tendon length in qpos0
tendon_invweight0        f ntendon                inv. weight in qpos0
actuator_length0         f nu                     actuator length in qpos0
actuator_acc0            f nu                     acceleration from unit force in qpos0
cam_pos0                 f ncamx3                 global position rel. to body in qpos0
cam_poscom0              f ncamx3                 global position rel. to sub-com in qpos0
cam_mat0                 f ncamx9                 global orientation in qpos0
light_pos0               f nlightx3               global position rel. to body in qpos0
light_poscom0            f nlightx3               global position rel. to sub-com in qpos0
light_dir0               f nlightx3               global direction in qpos0
"""

__doc__ += '\nField table::\n\n' + '\n'.join(
    '  ' + line for line in _FIELD_TABLE.strip('\n').split('\n'))

# (name, kind, shape string, meaning)
FIELDS = tuple(
    (line[:25].strip(), line[25:27].strip(), line[27:50].strip(), line[50:].strip())
    for line in _FIELD_TABLE.strip('\n').split('\n'))

SIZES = ('nq', 'nv', 'nu', 'na', 'nbody', 'njnt', 'ngeom', 'nsite', 'ncam', 'nlight', 'nmocap',
         'npair', 'nexclude', 'neq', 'ntendon', 'nwrap', 'nsensor', 'nsensordata', 'nkey',
         'nnumeric', 'ntuple', 'ntext', 'ntree', 'ngravcomp', 'nM', 'nuser_body', 'nuser_jnt',
         'nuser_geom', 'nuser_site', 'nuser_cam', 'nuser_tendon', 'nuser_actuator',
         'nuser_sensor', 'nmesh', 'nmeshvert', 'nmeshface', 'nhfield', 'nhfielddata')
# Engine-only static counts (host-computed, see constraint_counts): which constraint kinds
# the model can produce. They let stages that are not implemented yet refuse loudly.
# has_fluid (static): option density or viscosity is positive, so fluid forces are built at
# all; to randomize density/viscosity under vmap, start from a model where one is positive.
COUNT_SIZES = ('nlimit', 'nfriction', 'ncandidate', 'has_fluid', 'nefc_max', 'efc_friction',
               'efc_limit', 'efc_rows')
# Constraint rows (host-computed by mjx_py.constraint.row_tables, see mjx_py.constraint):
#   nefc_max: capacity of the efc_* buffers (every row the model can produce at once, with the
#   disable flags of put_model); efc_friction: (dof ids, tendon ids) with frictionloss > 0;
#   efc_limit: (limited hinge/slide/ball joint ids, limited tendon ids), tuples of ints;
#   efc_rows: most rows of (equality, friction loss, limits, one contact slot), before flags.
# Engine-only static collision metadata (host-computed, see mjx_py.collision.driver):
#   nconmax: the contact buffer's capacity (put_model's nconmax, else <size nconmax> if >= 0,
#     else a default from the candidate pairs);
#   col_groups: one (type1, type2, start, count, ncon, example_geom1, example_geom2, nsweep)
#     per geom type pair: its rows start:start+count in col_geom/col_pairid/col_conadr, the
#     contacts its narrowphase routine returns per pair, and its dynamic candidate pairs left to
#     the sort-based broadphase (0 with the table);
#   broadphase: 'table' (host list of every candidate pair) or 'sap' (sweep-and-prune on the
#     device), put_model's broadphase ('auto' picks by the number of dynamic candidate pairs);
#   npairmax: the most pairs of one geom type pair whose narrowphase runs in a step (put_model's
#     npairmax, else nconmax; like MJX's max_geom_pairs).
#   col_hfield: (ny, nx, nrow, ncol), the static cell block of hfield.collide shared by every
#     (hfield, geom) pair and the grid size all hfields share; () without hfield pairs.
COLLISION_META = ('nconmax', 'col_groups', 'col_hfield', 'broadphase', 'npairmax')
# Engine-only static type sets (host-computed, see type_sets): the sorted distinct values of
# the discrete type fields, so that stages only trace the branches a model can take (a humanoid
# has no ball-joint or slider-crank code in its step). They are fixed by the compiled model: a
# Model whose type fields are edited after put_model must be rebuilt with put_model.
#   jnt_types (mjtJoint), trn_types (mjtTrn), dyn_types (mjtDyn), gain_types (mjtGain),
#   bias_types (mjtBias), wrap_types (mjtWrap), geom_types (mjtGeom), eq_types (mjtEq),
#   sensor_types (mjtSensor), cam_modes and light_modes (mjtCamLight);
#   trn_refsite: 1 if a site transmission has a refsite; has_tendon_armature: 1 if a spatial
#   tendon has armature (the tendon bias term of mj_rne is only built then).
TYPE_SETS = ('jnt_types', 'trn_types', 'dyn_types', 'gain_types', 'bias_types', 'wrap_types',
             'geom_types', 'eq_types', 'sensor_types', 'cam_modes', 'light_modes',
             'trn_refsite', 'has_tendon_armature')

# inertia_opts (static): the compiler options mjx_py.massprops applies when it infers body
#   masses and inertias from geoms again: (boundmass, boundinertia, balanceinertia (0/1),
#   settotalmass) of <compiler>.
# sensor_static (static): put_model's snapshot of the sensors' structural index fields
#   (SENSOR_STATIC), ((name, values), ...). A Model traced as a jit argument or batched under
#   vmap has no concrete index arrays; the sensor stages then take these fields from the
#   snapshot (static_leaf), so that they select each sensor type's sensors and addresses on the
#   host instead of evaluating every sensor for every type. Like the type sets, they are fixed
#   by the compiled model: edit them through put_model.
SENSOR_STATIC = ('sensor_type', 'sensor_datatype', 'sensor_needstage', 'sensor_objtype',
                 'sensor_objid', 'sensor_reftype', 'sensor_refid', 'sensor_adr', 'sensor_dim',
                 'site_type')
# concrete int32 arrays of the snapshots, made by put_model outside any trace: a traced
# Model's stage swaps them in for its tracers (looked up by the hashable snapshot)
_STATIC_LEAVES: dict = {}


def static_leaf(name: str, values: tuple):
  """The concrete int32 array put_model made for the snapshot ``(name, values)``, or None
  (a Model not built by put_model in this process)."""
  return _STATIC_LEAVES.get((name, values))


# Option: (name, static?) -- discrete settings are static, real-valued ones are traced leaves.
OPTION_FIELDS = (
    ('timestep', False), ('apirate', False), ('impratio', False), ('tolerance', False),
    ('ls_tolerance', False), ('noslip_tolerance', False), ('ccd_tolerance', False),
    ('gravity', False), ('wind', False), ('magnetic', False), ('density', False),
    ('viscosity', False), ('o_margin', False), ('o_solref', False), ('o_solimp', False),
    ('o_friction', False), ('integrator', True), ('cone', True), ('jacobian', True),
    ('solver', True), ('iterations', True), ('ls_iterations', True),
    ('noslip_iterations', True), ('ccd_iterations', True), ('sdf_iterations', True),
    ('sdf_initpoints', True), ('disableflags', True), ('enableflags', True),
    ('disableactuator', True),
)
STAT_FIELDS = ('meaninertia', 'meanmass', 'meansize', 'extent', 'center')


def _frozen_pytree(name: str, data: list, meta: list, doc: str):
  cls = dataclasses.make_dataclass(
      name, [(f, object) for f in data + meta], frozen=True, eq=False)
  cls.__doc__ = doc
  cls.__module__ = __name__
  jax.tree_util.register_dataclass(cls, data_fields=data, meta_fields=meta)
  return cls


Option = _frozen_pytree(
    'Option', [n for n, s in OPTION_FIELDS if not s], [n for n, s in OPTION_FIELDS if s],
    """Physics options (MuJoCo's mjOption, XML ``<option>``).

    Traced: timestep, apirate, impratio, tolerance, ls_tolerance, noslip_tolerance,
    ccd_tolerance (scalars); gravity, wind, magnetic (3,); density, viscosity, o_margin
    (scalars); o_solref (2,), o_solimp (5,), o_friction (5,).
    Static: integrator (0 Euler, 1 RK4, 2 implicit, 3 implicitfast), cone (0 pyramidal,
    1 elliptic), jacobian (0 dense, 1 sparse, 2 auto), solver (0 PGS, 1 CG, 2 Newton),
    iterations, ls_iterations, noslip_iterations, ccd_iterations, sdf_iterations,
    sdf_initpoints, disableflags (mjtDisableBit bits), enableflags (mjtEnableBit bits),
    disableactuator (bit g: actuator group g disabled).
    """)

Statistic = _frozen_pytree(
    'Statistic', list(STAT_FIELDS), [],
    """Model statistics at qpos0 (mjStatistic): meaninertia, meanmass, meansize, extent
    (scalars) and center (3,).""")

# Engine-only index tables (not MuJoCo fields), built on the host by tree.tree_indices and
# tendon.path_indices.
ENGINE_FIELDS = ('body_levels', 'body_treeend', 'body_jnts', 'dof_ancestor', 'body_dofmask',
                 'wrap_tendonid', 'tendon_seg', 'tendon_wrapseg', 'tendon_slot', 'col_geom',
                 'col_pairid', 'col_conadr', 'col_sweep', 'col_exclude', 'col_explicit')
__doc__ += '''
Engine-only int32 index tables (see mjx_py.tree): body_levels (ndepth, width) body ids by
depth; body_treeend (nbody,) one past the last body of each body's subtree; body_jnts (nbody,
maxjnt) joint ids per body; dof_ancestor (nv, nv) ancestor mask; body_dofmask (nbody, nv)
dofs that move each body. Tendon paths (see mjx_py.tendon):
wrap_tendonid (nwrap,) tendon of each wrap object; tendon_seg (nseg, 5) spatial-tendon
segments; tendon_wrapseg (nwseg,) segments that wrap a geom; tendon_slot (nslot, 3) the points
each path can write to wrap_xpos. Collision candidates (see mjx_py.collision.driver), grouped by
geom type pair: col_geom (nrow, 2) geom ids (geom_type[0] <= geom_type[1]); col_pairid
(nrow,) explicit pair id or -1; col_conadr (nrow,) first contact slot in MuJoCo's order (the
rows: every candidate pair with the table broadphase, the explicit pairs with 'sap').
Sort-based broadphase ('sap'; empty with the table): col_sweep (nsweep,) the geoms it sweeps;
col_exclude (nexclude,) sorted excluded body signatures; col_explicit (npair,) sorted
geom1 * ngeom + geom2 (geom1 < geom2) of the explicit pairs.
'''

Model = _frozen_pytree(
    'Model', [f[0] for f in FIELDS] + list(ENGINE_FIELDS) + ['opt', 'stat'],
    list(SIZES) + list(COUNT_SIZES) + list(COLLISION_META) + list(TYPE_SETS)
    + ['inertia_opts', 'sensor_static', 'names'],
    __doc__)
Model.__doc__ = __doc__

_INT_KINDS = 'iub'


def _leaf(value, kind: str):
  """A Model leaf: int32, or the default float dtype, converted on the host and transferred
  with device_put (jnp.asarray would compile a small conversion program for each distinct
  shape: ~80 for a humanoid, a second and ~100 MB of a fresh process)."""
  a = np.asarray(value)
  dtype = np.int32 if kind == 'i' else np.dtype(jnp.result_type(float))
  return jax.device_put(np.asarray(a, dtype=dtype))


def put_model(arrays: dict, nconmax: int | None = None, broadphase: str = 'auto',
              npairmax: int | None = None, njmax: int | None = None) -> Model:
  """Builds a Model from the compiler's dict of MuJoCo-named numpy arrays.

  arrays: output of ``mjx_py.mjcf.compile_file``/``compile_string``. Floats become the default
  JAX float dtype, integer fields int32.
  nconmax: capacity of the contact buffer (static); None: ``<size nconmax>`` if set (>= 0),
  else a default from the model's candidate pairs (see mjx_py.collision.driver).
  broadphase: 'table' (a host list of every candidate geom pair, bounding-tested each step;
  cheapest for small models), 'sap' (sort-based sweep-and-prune on the device: memory and time
  grow with the capacities, not with the square of the geoms) or 'auto' (sap above
  ``driver.SAP_THRESHOLD`` dynamic candidate pairs). Static.
  npairmax: the most pairs of one geom type pair whose narrowphase runs in a step (static, both
  broadphases; MJX's max_geom_pairs); None: nconmax.
  njmax: capacity of the constraint-row buffers (static); None: ``<size njmax>`` if set
  (>= 0), else the most rows the model can produce at once (no overflow possible). A world
  whose rows do not fit gets none in that step and counts mjWARN_CNSTRFULL (see
  mjx_py.constraint).
  """
  from .collision import driver  # late: the collision package imports jax-side modules
  kwargs = {name: _leaf(arrays[name], kind) for name, kind, _, _ in FIELDS}
  kwargs.update({k: _leaf(v, 'i') for k, v in tree.tree_indices(arrays).items()})
  kwargs.update({k: _leaf(v, 'i') for k, v in tendon.path_indices(arrays).items()})
  tables = driver.pair_tables(arrays, broadphase)
  kwargs.update({k: _leaf(tables[k], 'i') for k in driver.INDEX_FIELDS})
  kwargs['col_groups'] = tables['col_groups']
  kwargs['col_hfield'] = tables['col_hfield']
  kwargs['broadphase'] = tables['broadphase']
  kwargs['nconmax'] = driver.capacity(int(arrays.get('nconmax', -1)), tables, nconmax)
  kwargs['npairmax'] = driver.pair_capacity(kwargs['nconmax'], npairmax)
  kwargs.update({n: int(arrays[n]) for n in SIZES})
  opt = {}
  for name, static in OPTION_FIELDS:
    v = arrays[f'opt_{name}']
    opt[name] = int(v) if static else _leaf(v, 'f')
  kwargs['opt'] = Option(**opt)
  kwargs['stat'] = Statistic(**{n: _leaf(arrays[f'stat_{n}'], 'f') for n in STAT_FIELDS})
  kwargs['inertia_opts'] = tuple(arrays['inertia_opts'])
  snapshot = []
  for name in SENSOR_STATIC:
    values = tuple(int(x) for x in np.asarray(arrays[name]).ravel())
    if (name, values) not in _STATIC_LEAVES:
      _STATIC_LEAVES[(name, values)] = _leaf(np.asarray(arrays[name]), 'i')
    snapshot.append((name, values))
  kwargs['sensor_static'] = tuple(snapshot)
  kwargs['names'] = tuple(sorted((k, tuple(v)) for k, v in arrays['names'].items()))
  kwargs.update(constraint_counts(arrays, tables, kwargs['nconmax'], njmax))
  kwargs.update(type_sets(arrays))
  return Model(**kwargs)


def type_sets(arrays: dict) -> dict:
  """Host-side static type sets (see TYPE_SETS): sorted tuples of the distinct values."""
  def distinct(name):
    return tuple(sorted({int(x) for x in np.asarray(arrays[name]).ravel()}))
  out = {'jnt_types': distinct('jnt_type'), 'trn_types': distinct('actuator_trntype'),
         'dyn_types': distinct('actuator_dyntype'), 'gain_types': distinct('actuator_gaintype'),
         'bias_types': distinct('actuator_biastype'), 'wrap_types': distinct('wrap_type'),
         'geom_types': distinct('geom_type'), 'eq_types': distinct('eq_type'),
         'sensor_types': distinct('sensor_type'), 'cam_modes': distinct('cam_mode'),
         'light_modes': distinct('light_mode')}
  trntype = np.asarray(arrays['actuator_trntype'])
  trnid = np.asarray(arrays['actuator_trnid']).reshape(-1, 2)
  out['trn_refsite'] = int(np.any((trntype == 4) & (trnid[:, 1] >= 0)))
  out['has_tendon_armature'] = int(
      np.any(np.asarray(arrays['tendon_armature']) > 0) and 3 in out['wrap_types'])
  return out


def name2id(m: Model, objtype: str, name: str) -> int:
  """Id of the named element (objtype: 'body', 'joint', 'geom', 'site', 'actuator', ...); -1 if
  there is none."""
  for kind, names in m.names:
    if kind == objtype:
      return names.index(name) if name in names else -1
  return -1


def constraint_counts(arrays: dict, tables: dict | None = None,
                      nconmax: int | None = None, njmax: int | None = None) -> dict:
  """Host-side counts of the constraints a model can produce (before disable flags).

  nlimit: limited joints and tendons; nfriction: dofs and tendons with frictionloss;
  ncandidate: geom pairs that can collide (explicit pairs, plus dynamic pairs that pass
  MuJoCo's filters: contype/conaffinity masks, same weld group, both static, parent-child
  filtering unless disabled, excluded body pairs, and pairs that are also explicit), from
  ``mjx_py.collision.driver.pair_tables`` (``tables``: its output, if already computed).
  Also the constraint-row tables and capacity of ``mjx_py.constraint.row_tables`` (nefc_max,
  efc_friction, efc_limit, efc_rows; ``nconmax``: the contact capacity, None: the default;
  ``njmax``: the row capacity asked for, None: ``<size njmax>`` or the default).
  """
  nlimit = int(np.sum(arrays['jnt_limited'])) + int(np.sum(arrays['tendon_limited']))
  nfriction = int(np.sum(np.asarray(arrays['dof_frictionloss']) > 0)) + int(
      np.sum(np.asarray(arrays['tendon_frictionloss']) > 0))
  if tables is None:
    from .collision import driver
    tables = driver.pair_tables(arrays)
  has_fluid = int(float(arrays['opt_density']) > 0 or float(arrays['opt_viscosity']) > 0)
  from . import constraint  # late, like the collision driver
  if nconmax is None:
    from .collision import driver
    nconmax = driver.capacity(int(arrays.get('nconmax', -1)), tables)
  return {'nlimit': nlimit, 'nfriction': nfriction, 'ncandidate': tables['ncandidate'],
          'has_fluid': has_fluid, **constraint.row_tables(arrays, tables, nconmax, njmax)}
