"""The MJCF schema: which elements may appear where, and the type of every attribute.

Host-only (no jax). Written from the MuJoCo 3.3.3 XML reference (`xml_reference.rst`). Each element
*kind* is named by its context (``"body/joint"``, ``"default/joint"``, ``"equality/joint"`` and
``"fixed/joint"`` are four different kinds with different attributes). ``CHILDREN[kind]`` maps a
child tag to ``(child kind, multiplicity)`` where multiplicity is one of MuJoCo's schema symbols:

  ``!`` required, once; ``?`` optional, once; ``*`` any number; ``R`` any number, recursive.

``ATTRS[kind]`` maps attribute name to an :class:`Attr`. Defaults here are MuJoCo's internal
defaults
(those that initialise the ``main`` default class); ``None`` means the attribute starts "undefined".
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Attr:
  """Type of one attribute.

  kind: 'str', 'int', 'real' or 'kw'.
  n: number of values for int/real (None: any length, e.g. user arrays, keyframe qpos).
  default: internal default (tuple for arrays, scalar for n == 1, str for str/kw), or None.
  choices: keyword choices (kind == 'kw').
  required: the parser demands the attribute.
  partial: fewer than n values are allowed; the rest keep the inherited value.
  """

  kind: str
  n: int | None = 1
  default: object = None
  choices: tuple[str, ...] = ()
  required: bool = False
  partial: bool = False


def S(required=False, default=None):
  return Attr('str', 1, default, required=required)


def I(default=None, n=1, required=False):  # noqa: E743 (mirrors MuJoCo's 'int' type)
  return Attr('int', n, default, required=required)


def R(n=1, default=None, partial=False, required=False):
  if isinstance(default, str):
    default = tuple(float(x) for x in default.split())
    if n == 1:
      default = default[0]
  return Attr('real', n, default, required=required, partial=partial)


def K(choices, default=None, required=False):
  return Attr('kw', 1, default, tuple(choices.split()), required=required)


BOOL_F = K('false true', 'false')
BOOL_T = K('false true', 'true')
LIMITED = K('false true auto', 'auto')
USER = R(None, ())  # user arrays: any length, checked against size/nuser_* at compile time

SOLREF = R(2, '0.02 1', partial=True)
SOLIMP = R(5, '0.9 0.95 0.001 0.5 2', partial=True)

ORIENT = dict(
    quat=R(4, '1 0 0 0'),
    axisangle=R(4),
    xyaxes=R(6),
    zaxis=R(3),
    euler=R(3),
)

# ---------------------------------------------------------------------------------------------
# Attributes of each element kind.

_FLAGS = dict(
    (f, K('disable enable', 'enable'))
    for f in ('constraint equality frictionloss limit contact passive gravity clampctrl '
              'warmstart filterparent actuation refsafe sensor midphase eulerdamp autoreset '
              'nativeccd').split()
)
_FLAGS.update(
    (f, K('disable enable', 'disable'))
    for f in 'override energy fwdinv invdiscrete multiccd island'.split()
)

_JOINT = dict(
    name=S(), **{'class': S()},
    type=K('free ball slide hinge', 'hinge'),
    group=I(0),
    pos=R(3, '0 0 0'),
    axis=R(3, '0 0 1'),
    springdamper=R(2, '0 0'),
    limited=LIMITED,
    actuatorfrclimited=LIMITED,
    solreflimit=SOLREF, solimplimit=SOLIMP,
    solreffriction=SOLREF, solimpfriction=SOLIMP,
    stiffness=R(1, 0.0),
    range=R(2, '0 0'),
    actuatorfrcrange=R(2, '0 0'),
    actuatorgravcomp=BOOL_F,
    margin=R(1, 0.0),
    ref=R(1, 0.0),
    springref=R(1, 0.0),
    armature=R(1, 0.0),
    damping=R(1, 0.0),
    frictionloss=R(1, 0.0),
    user=USER,
)

_GEOM = dict(
    name=S(), **{'class': S()},
    type=K('plane hfield sphere capsule ellipsoid cylinder box mesh sdf', 'sphere'),
    contype=I(1), conaffinity=I(1), condim=I(3), group=I(0), priority=I(0),
    size=R(3, '0 0 0', partial=True),
    material=S(),
    rgba=R(4, '0.5 0.5 0.5 1'),
    friction=R(3, '1 0.005 0.0001', partial=True),
    mass=R(1),
    density=R(1, 1000.0),
    shellinertia=BOOL_F,
    solmix=R(1, 1.0),
    solref=SOLREF, solimp=SOLIMP,
    margin=R(1, 0.0), gap=R(1, 0.0),
    fromto=R(6),
    pos=R(3, '0 0 0'),
    **ORIENT,
    hfield=S(), mesh=S(),
    fitscale=R(1, 1.0),
    fluidshape=K('none ellipsoid', 'none'),
    fluidcoef=R(5, '0.5 0.25 1.5 1.0 1.0', partial=True),
    user=USER,
)

_SITE = dict(
    name=S(), **{'class': S()},
    type=K('sphere capsule ellipsoid cylinder box', 'sphere'),
    group=I(0),
    material=S(),
    rgba=R(4, '0.5 0.5 0.5 1'),
    size=R(3, '0.005 0.005 0.005', partial=True),
    fromto=R(6),
    pos=R(3, '0 0 0'),
    **ORIENT,
    user=USER,
)

_CAMERA = dict(
    name=S(), **{'class': S()},
    mode=K('fixed track trackcom targetbody targetbodycom', 'fixed'),
    target=S(),
    orthographic=BOOL_F,
    fovy=R(1, 45.0),
    resolution=I((1, 1), n=2),
    focal=R(2, '0.01 0.01'),  # MuJoCo's internal default (the docs say 0 0)
    focalpixel=I((0, 0), n=2),
    principal=R(2, '0 0'),
    principalpixel=R(2, '0 0'),
    sensorsize=R(2, '0 0'),
    ipd=R(1, 0.068),
    pos=R(3, '0 0 0'),
    **ORIENT,
    user=USER,
)

_LIGHT = dict(
    name=S(), **{'class': S()},
    mode=K('fixed track trackcom targetbody targetbodycom', 'fixed'),
    target=S(),
    type=K('spot directional point image', 'spot'),
    directional=BOOL_F,
    castshadow=BOOL_T,
    active=BOOL_T,
    pos=R(3, '0 0 0'),
    dir=R(3, '0 0 -1'),
    diffuse=R(3, '0.7 0.7 0.7'),
    texture=S(),
    intensity=R(1, 0.0),
    ambient=R(3, '0 0 0'),
    specular=R(3, '0.3 0.3 0.3'),
    range=R(1, 10.0),
    bulbradius=R(1, 0.02),
    attenuation=R(3, '1 0 0'),
    cutoff=R(1, 45.0),
    exponent=R(1, 10.0),
)

_PAIR = dict(
    name=S(), **{'class': S()},
    geom1=S(required=True), geom2=S(required=True),
    condim=I(3),
    friction=R(5, '1 1 0.005 0.0001 0.0001', partial=True),
    solref=SOLREF, solimp=SOLIMP,
    solreffriction=R(2, '0 0', partial=True),
    margin=R(1, 0.0), gap=R(1, 0.0),
)

_EQ_COMMON = dict(name=S(), **{'class': S()}, active=BOOL_T, solref=SOLREF, solimp=SOLIMP)

_TENDON = dict(
    name=S(), **{'class': S()},
    group=I(0),
    limited=LIMITED,
    # MuJoCo 3.3.3 initialises tendon actuatorfrclimited to false (the docs say auto).
    actuatorfrclimited=K('false true auto', 'false'),
    range=R(2, '0 0'),
    actuatorfrcrange=R(2, '0 0'),
    solreflimit=SOLREF, solimplimit=SOLIMP,
    solreffriction=SOLREF, solimpfriction=SOLIMP,
    margin=R(1, 0.0),
    frictionloss=R(1, 0.0),
    width=R(1, 0.003),
    material=S(),
    rgba=R(4, '0.5 0.5 0.5 1'),
    springlength=R(2, '-1 -1', partial=True),
    stiffness=R(1, 0.0),
    damping=R(1, 0.0),
    armature=R(1, 0.0),
    user=USER,
)

_TRN = dict(
    joint=S(), jointinparent=S(), site=S(), refsite=S(), tendon=S(), cranksite=S(), slidersite=S(),
)
_ACT_COMMON = dict(
    name=S(), **{'class': S()},
    group=I(0),
    ctrllimited=LIMITED, forcelimited=LIMITED,
    ctrlrange=R(2, '0 0'), forcerange=R(2, '0 0'),
    lengthrange=R(2, '0 0'),
    gear=R(6, '1 0 0 0 0 0', partial=True),
    cranklength=R(1, 0.0),
    **_TRN,
    user=USER,
)

_GENERAL = dict(
    _ACT_COMMON,
    body=S(),
    actlimited=LIMITED,
    actrange=R(2, '0 0'),
    actdim=I(-1),
    dyntype=K('none integrator filter filterexact muscle user', 'none'),
    gaintype=K('fixed affine muscle user', 'fixed'),
    biastype=K('none affine muscle user', 'none'),
    dynprm=R(10, '1 0 0 0 0 0 0 0 0 0', partial=True),
    gainprm=R(10, '1 0 0 0 0 0 0 0 0 0', partial=True),
    biasprm=R(10, '0 0 0 0 0 0 0 0 0 0', partial=True),
    actearly=BOOL_F,
)

# Shortcut-specific attributes have no internal default: an omitted value is read back from the
# class's general dummy (MuJoCo 3.3.3's reader), so they stay undefined (None) here.
_SHORTCUTS = dict(
    motor=dict(_ACT_COMMON),
    position=dict(_ACT_COMMON, kp=R(), kv=R(), dampratio=R(), timeconst=R(), inheritrange=R()),
    velocity=dict(_ACT_COMMON, kv=R()),
    intvelocity=dict(_ACT_COMMON, actrange=R(2, '0 0'), kp=R(), kv=R(), dampratio=R(),
                     inheritrange=R()),
    damper=dict({k: v for k, v in _ACT_COMMON.items() if k != 'ctrllimited'}, kv=R()),
    cylinder=dict(_ACT_COMMON, timeconst=R(), area=R(), diameter=R(), bias=R(3)),
    muscle=dict({k: v for k, v in _ACT_COMMON.items() if k not in ('site', 'refsite')},
                timeconst=R(2, partial=True), tausmooth=R(), range=R(2), force=R(), scale=R(),
                lmin=R(), lmax=R(), vmax=R(), fpmax=R(), fvmax=R()),
    adhesion=dict(name=S(), **{'class': S()}, group=I(0), forcelimited=LIMITED,
                  ctrlrange=R(2, '0 0'), forcerange=R(2, '0 0'), user=USER,
                  body=S(required=True), gain=R()),
)

_SENSOR_COMMON = dict(name=S(), noise=R(1, 0.0), cutoff=R(1, 0.0), user=USER)
_OBJTYPES = 'body xbody geom site camera'


def _sensor(**extra):
  return dict(_SENSOR_COMMON, **extra)


_SENSORS = {}
for _t in 'touch accelerometer velocimeter gyro force torque magnetometer rangefinder'.split():
  _SENSORS[_t] = _sensor(site=S(required=True))
_SENSORS['camprojection'] = _sensor(site=S(required=True), camera=S(required=True))
for _t in ('jointpos jointvel jointactuatorfrc ballquat ballangvel jointlimitpos jointlimitvel '
           'jointlimitfrc').split():
  _SENSORS[_t] = _sensor(joint=S(required=True))
for _t in ('tendonpos tendonvel tendonactuatorfrc tendonlimitpos tendonlimitvel '
           'tendonlimitfrc').split():
  _SENSORS[_t] = _sensor(tendon=S(required=True))
for _t in 'actuatorpos actuatorvel actuatorfrc'.split():
  _SENSORS[_t] = _sensor(actuator=S(required=True))
for _t in ('framepos framequat framexaxis frameyaxis framezaxis framelinvel '
           'frameangvel').split():
  _SENSORS[_t] = _sensor(objtype=K(_OBJTYPES, required=True), objname=S(required=True),
                         reftype=K(_OBJTYPES), refname=S())
for _t in 'framelinacc frameangacc'.split():
  _SENSORS[_t] = _sensor(objtype=K(_OBJTYPES, required=True), objname=S(required=True))
for _t in 'subtreecom subtreelinvel subtreeangmom'.split():
  _SENSORS[_t] = _sensor(body=S(required=True))
for _t in 'distance normal fromto'.split():
  _SENSORS[_t] = _sensor(geom1=S(), geom2=S(), body1=S(), body2=S())
for _t in 'e_potential e_kinetic clock'.split():
  _SENSORS[_t] = _sensor()
_SENSORS['user'] = _sensor(
    objtype=S(), objname=S(), datatype=K('real positive axis quaternion', 'real'),
    needstage=K('pos vel acc', 'acc'), dim=I(required=True))
_SENSORS['plugin'] = dict(name=S(), cutoff=R(1, 0.0), user=USER, plugin=S(), instance=S(),
                          objtype=S(), objname=S(), reftype=S(), refname=S())

_VISUAL = {
    'global': dict(orthographic=BOOL_F, fovy=R(1, 45.0), ipd=R(1, 0.068), azimuth=R(1, 90.0),
                   elevation=R(1, -45.0), linewidth=R(1, 1.0), glow=R(1, 0.3),
                   realtime=R(1, 1.0), offwidth=I(640), offheight=I(480),
                   ellipsoidinertia=BOOL_F, bvactive=BOOL_T),
    'quality': dict(shadowsize=I(4096), offsamples=I(4), numslices=I(28), numstacks=I(16),
                    numquads=I(4)),
    'headlight': dict(ambient=R(3), diffuse=R(3), specular=R(3), active=I(1)),
    'map': {k: R() for k in ('stiffness stiffnessrot force torque alpha fogstart fogend znear '
                             'zfar haze shadowclip shadowscale actuatortendon').split()},
    'scale': {k: R() for k in ('forcewidth contactwidth contactheight connect com camera light '
                               'selectpoint jointlength jointwidth actuatorlength actuatorwidth '
                               'framelength framewidth constraint slidercrank frustum').split()},
    'rgba': {k: R(4) for k in ('fog haze force inertia joint actuator actuatornegative '
                               'actuatorpositive com camera light selectpoint connect '
                               'contactpoint contactforce contactfriction contacttorque '
                               'contactgap rangefinder constraint slidercrank crankbroken '
                               'frustum bv bvactive').split()},
}

_MATERIAL = dict(
    name=S(required=True), **{'class': S()}, texture=S(), texrepeat=R(2, '1 1'),
    texuniform=BOOL_F, emission=R(1, 0.0), specular=R(1, 0.5), shininess=R(1, 0.5),
    reflectance=R(1, 0.0), metallic=R(1, -1.0), roughness=R(1, -1.0), rgba=R(4, '1 1 1 1'),
)
_MESH = dict(
    name=S(), **{'class': S()}, content_type=S(), file=S(), scale=R(3, '1 1 1'),
    inertia=K('convex exact legacy shell', 'legacy'), smoothnormal=BOOL_F, maxhullvert=I(-1),
    vertex=R(None), normal=R(None), texcoord=R(None), face=I(n=None), refpos=R(3, '0 0 0'),
    refquat=R(4, '1 0 0 0'),
)

ATTRS: dict[str, dict[str, Attr]] = {
    'mujoco': dict(model=S(default='MuJoCo Model')),
    'compiler': dict(
        autolimits=BOOL_T, boundmass=R(1, 0.0), boundinertia=R(1, 0.0),
        settotalmass=R(1, -1.0), balanceinertia=BOOL_F, strippath=BOOL_F,
        coordinate=K('local global', 'local'), angle=K('radian degree', 'degree'),
        fitaabb=BOOL_F, eulerseq=S(default='xyz'), meshdir=S(), texturedir=S(), assetdir=S(),
        discardvisual=BOOL_F, usethread=BOOL_T, fusestatic=BOOL_F,
        inertiafromgeom=K('false true auto', 'auto'), inertiagrouprange=I((0, 5), n=2),
        saveinertial=BOOL_F, alignfree=BOOL_F),
    'lengthrange': dict(
        mode=K('none muscle muscleuser all', 'muscle'), useexisting=BOOL_T, uselimit=BOOL_F,
        accel=R(1, 20.0), maxforce=R(1, 0.0), timeconst=R(1, 1.0), timestep=R(1, 0.01),
        inttotal=R(1, 10.0), interval=R(1, 2.0), tolrange=R(1, 0.05)),
    'option': dict(
        timestep=R(1, 0.002), apirate=R(1, 100.0), impratio=R(1, 1.0),
        gravity=R(3, '0 0 -9.81'), wind=R(3, '0 0 0'), magnetic=R(3, '0 -0.5 0'),
        density=R(1, 0.0), viscosity=R(1, 0.0), o_margin=R(1, 0.0),
        o_solref=SOLREF, o_solimp=SOLIMP,
        o_friction=R(5, '1 1 0.005 0.0001 0.0001', partial=True),
        integrator=K('Euler RK4 implicit implicitfast', 'Euler'),
        cone=K('pyramidal elliptic', 'pyramidal'), jacobian=K('dense sparse auto', 'auto'),
        solver=K('PGS CG Newton', 'Newton'), iterations=I(100), tolerance=R(1, 1e-8),
        ls_iterations=I(50), ls_tolerance=R(1, 0.01), noslip_iterations=I(0),
        noslip_tolerance=R(1, 1e-6), ccd_iterations=I(50), ccd_tolerance=R(1, 1e-6),
        sdf_iterations=I(10), sdf_initpoints=I(40), actuatorgroupdisable=I(n=None)),
    'flag': _FLAGS,
    'size': dict(
        memory=S(default='-1'), njmax=I(-1), nconmax=I(-1), nstack=I(-1), nuserdata=I(0),
        nkey=I(0), **{f'nuser_{k}': I(-1) for k in
                      'body jnt geom site cam tendon actuator sensor'.split()}),
    'statistic': dict(meanmass=R(), meaninertia=R(), meansize=R(), extent=R(), center=R(3)),
    'default': {'class': S()},
    'custom': {}, 'numeric': dict(name=S(required=True), size=I(), data=R(None)),
    'text': dict(name=S(required=True), data=S(required=True)),
    'tuple': dict(name=S(required=True)),
    'tuple/element': dict(objtype=S(required=True), objname=S(required=True), prm=R(1, 0.0)),
    'extension': {}, 'extension/plugin': dict(plugin=S(required=True)),
    'plugin/instance': dict(name=S(required=True)),
    'config': dict(key=S(required=True), value=S(required=True)),
    'element-plugin': dict(plugin=S(), instance=S()),
    'asset': {},
    'mesh': _MESH,
    'hfield': dict(name=S(), content_type=S(), file=S(), nrow=I(0), ncol=I(0),
                   elevation=R(None), size=R(4, required=True)),
    'skin': dict(name=S(), file=S(), vertex=R(None), texcoord=R(None), face=I(n=None),
                 inflate=R(1, 0.0), material=S(), rgba=R(4), group=I(0)),
    'skin/bone': dict(body=S(required=True), bindpos=R(3, required=True),
                      bindquat=R(4, required=True), vertid=I(n=None, required=True),
                      vertweight=R(None, required=True)),
    'texture': dict(
        name=S(), type=K('2d cube skybox', 'cube'), colorspace=K('auto linear sRGB', 'auto'),
        content_type=S(), file=S(), gridsize=I((1, 1), n=2), gridlayout=S(),
        fileright=S(), fileleft=S(), fileup=S(), filedown=S(), filefront=S(), fileback=S(),
        builtin=K('none gradient checker flat', 'none'), rgb1=R(3), rgb2=R(3),
        mark=K('none edge cross random', 'none'), markrgb=R(3), random=R(1, 0.01), width=I(0),
        height=I(0), hflip=BOOL_F, vflip=BOOL_F, nchannel=I(3)),
    'material': _MATERIAL,
    'material/layer': dict(texture=S(required=True), role=S(required=True)),
    'asset/model': dict(name=S(), file=S(required=True), content_type=S()),
    'worldbody': {},
    'body': dict(name=S(), childclass=S(), mocap=BOOL_F, pos=R(3, '0 0 0'), **ORIENT,
                 gravcomp=R(1, 0.0), user=USER),
    'frame': dict(name=S(), childclass=S(), pos=R(3, '0 0 0'), **ORIENT),
    'replicate': dict(count=I(required=True), sep=S(), offset=R(3), euler=R(3)),
    'inertial': dict(pos=R(3, required=True), **ORIENT, mass=R(required=True),
                     diaginertia=R(3), fullinertia=R(6)),
    'body/joint': _JOINT,
    'freejoint': dict(name=S(), group=I(0), align=K('false true auto', 'auto')),
    'body/geom': _GEOM,
    'body/site': _SITE,
    'camera': _CAMERA,
    'light': _LIGHT,
    'composite': dict(prefix=S(), type=S(required=True), count=I(n=3, required=True)),
    'flexcomp': dict(name=S(required=True)),
    'attach': dict(model=S(required=True), body=S(), prefix=S(required=True)),
    'contact': {},
    'pair': _PAIR,
    'exclude': dict(name=S(), body1=S(required=True), body2=S(required=True)),
    'deformable': {},
    'flex': dict(name=S()),
    'equality': {},
    'connect': dict(_EQ_COMMON, body1=S(), body2=S(), anchor=R(3), site1=S(), site2=S()),
    'weld': dict(_EQ_COMMON, body1=S(), body2=S(), relpose=R(7, '0 1 0 0 0 0 0'),
                 anchor=R(3, '0 0 0'), site1=S(), site2=S(), torquescale=R(1, 1.0)),
    'equality/joint': dict(_EQ_COMMON, joint1=S(required=True), joint2=S(),
                           polycoef=R(5, '0 1 0 0 0', partial=True)),
    'equality/tendon': dict(_EQ_COMMON, tendon1=S(required=True), tendon2=S(),
                            polycoef=R(5, '0 1 0 0 0', partial=True)),
    'equality/flex': dict(_EQ_COMMON, flex=S(required=True)),
    'distance': {},
    'tendon': {},
    'spatial': _TENDON,
    'fixed': {k: v for k, v in _TENDON.items() if k not in ('width', 'material', 'rgba')},
    'spatial/site': dict(site=S(required=True)),
    'spatial/geom': dict(geom=S(required=True), sidesite=S()),
    'spatial/pulley': dict(divisor=R(required=True)),
    'fixed/joint': dict(joint=S(required=True), coef=R(required=True)),
    'actuator': {},
    'general': _GENERAL,
    **{f'actuator/{k}': v for k, v in _SHORTCUTS.items()},
    'actuator/plugin': dict(_ACT_COMMON, plugin=S(), instance=S(), actrange=R(2, '0 0'),
                            actlimited=LIMITED, dyntype=_GENERAL['dyntype'],
                            dynprm=_GENERAL['dynprm'], actdim=I(-1), actearly=BOOL_F),
    'sensor': {},
    **{f'sensor/{k}': v for k, v in _SENSORS.items()},
    'keyframe': {},
    'key': dict(name=S(), time=R(1, 0.0), qpos=R(None), qvel=R(None), act=R(None),
                ctrl=R(None), mpos=R(None), mquat=R(None)),
    'visual': {},
    **{f'visual/{k}': v for k, v in _VISUAL.items()},
}

# Default-class dummies: the element's attributes without names, classes and targets.
_NO_DEFAULT = {'name', 'class'}
ATTRS.update({
    'default/mesh': {k: _MESH[k] for k in ('scale', 'maxhullvert', 'inertia')},
    'default/material': {k: v for k, v in _MATERIAL.items() if k not in _NO_DEFAULT},
    'default/joint': {k: v for k, v in _JOINT.items() if k not in _NO_DEFAULT},
    'default/geom': {k: v for k, v in _GEOM.items() if k not in _NO_DEFAULT},
    'default/site': {k: v for k, v in _SITE.items() if k not in _NO_DEFAULT},
    'default/camera': {k: v for k, v in _CAMERA.items() if k not in _NO_DEFAULT | {'target'}},
    'default/light': {k: v for k, v in _LIGHT.items()
                      if k not in _NO_DEFAULT | {'target', 'texture'}},
    'default/pair': {k: v for k, v in _PAIR.items() if k not in _NO_DEFAULT | {'geom1', 'geom2'}},
    'default/equality': dict(active=BOOL_T, solref=SOLREF, solimp=SOLIMP),
    'default/tendon': {k: v for k, v in _TENDON.items()
                       if k not in _NO_DEFAULT | {'armature', 'actuatorfrclimited',
                                                  'actuatorfrcrange'}},
})
_NO_TRN = _NO_DEFAULT | set(_TRN) | {'body'}
ATTRS['default/general'] = {k: v for k, v in _GENERAL.items()
                            if k not in _NO_TRN | {'lengthrange'}}
for _k, _v in _SHORTCUTS.items():
  ATTRS[f'default/{_k}'] = {k: v for k, v in _v.items() if k not in _NO_TRN}

# ---------------------------------------------------------------------------------------------
# Element tree: CHILDREN[kind][tag] = (child kind, multiplicity).

_BODY_CHILDREN = {
    'inertial': ('inertial', '?'), 'joint': ('body/joint', '*'), 'freejoint': ('freejoint', '*'),
    'geom': ('body/geom', '*'), 'site': ('body/site', '*'), 'camera': ('camera', '*'),
    'light': ('light', '*'), 'body': ('body', 'R'), 'frame': ('frame', 'R'),
    'replicate': ('replicate', 'R'), 'composite': ('composite', '*'),
    'flexcomp': ('flexcomp', '*'), 'attach': ('attach', '*'), 'plugin': ('element-plugin', '?'),
}
_FRAME_CHILDREN = {k: v for k, v in _BODY_CHILDREN.items()
                   if k not in ('inertial', 'plugin')}

CHILDREN: dict[str, dict[str, tuple[str, str]]] = {
    '#root': {'mujoco': ('mujoco', '!')},
    'mujoco': {
        'compiler': ('compiler', '*'), 'option': ('option', '*'), 'size': ('size', '*'),
        'statistic': ('statistic', '*'), 'visual': ('visual', '*'), 'default': ('default', 'R'),
        'custom': ('custom', '*'), 'extension': ('extension', '*'), 'asset': ('asset', '*'),
        'worldbody': ('worldbody', '*'), 'contact': ('contact', '*'),
        'deformable': ('deformable', '*'), 'equality': ('equality', '*'),
        'tendon': ('tendon', '*'), 'actuator': ('actuator', '*'), 'sensor': ('sensor', '*'),
        'keyframe': ('keyframe', '*'),
    },
    'compiler': {'lengthrange': ('lengthrange', '?')},
    'option': {'flag': ('flag', '?')},
    'visual': {k: (f'visual/{k}', '?') for k in _VISUAL},
    'default': dict(
        {k: (f'default/{k}', '?') for k in
         'mesh material joint geom site camera light pair equality tendon general'.split()},
        **{k: (f'default/{k}', '?') for k in _SHORTCUTS},
        default=('default', 'R')),
    'custom': {'numeric': ('numeric', '*'), 'text': ('text', '*'), 'tuple': ('tuple', '*')},
    'tuple': {'element': ('tuple/element', '*')},
    'extension': {'plugin': ('extension/plugin', '*')},
    'extension/plugin': {'instance': ('plugin/instance', '*')},
    'plugin/instance': {'config': ('config', '*')},
    'element-plugin': {'config': ('config', '*')},
    'asset': {'mesh': ('mesh', '*'), 'hfield': ('hfield', '*'), 'skin': ('skin', '*'),
              'texture': ('texture', '*'), 'material': ('material', '*'),
              'model': ('asset/model', '*')},
    'mesh': {'plugin': ('element-plugin', '?')},
    'skin': {'bone': ('skin/bone', '*')},
    'material': {'layer': ('material/layer', '*')},
    'worldbody': _BODY_CHILDREN,
    'body': _BODY_CHILDREN,
    'frame': _FRAME_CHILDREN,
    'replicate': _FRAME_CHILDREN,
    'body/geom': {'plugin': ('element-plugin', '?')},
    'contact': {'pair': ('pair', '*'), 'exclude': ('exclude', '*')},
    'deformable': {'flex': ('flex', '*'), 'skin': ('skin', '*')},
    'equality': {'connect': ('connect', '*'), 'weld': ('weld', '*'),
                 'joint': ('equality/joint', '*'), 'tendon': ('equality/tendon', '*'),
                 'flex': ('equality/flex', '*'), 'distance': ('distance', '*')},
    'tendon': {'spatial': ('spatial', '*'), 'fixed': ('fixed', '*')},
    'spatial': {'site': ('spatial/site', '*'), 'geom': ('spatial/geom', '*'),
                'pulley': ('spatial/pulley', '*')},
    'fixed': {'joint': ('fixed/joint', '*')},
    'actuator': dict({'general': ('general', '*')},
                     **{k: (f'actuator/{k}', '*') for k in _SHORTCUTS},
                     plugin=('actuator/plugin', '*')),
    'actuator/plugin': {'config': ('config', '*')},
    'sensor': {k: (f'sensor/{k}', '*') for k in _SENSORS},
    'sensor/plugin': {'config': ('config', '*')},
    'keyframe': {'key': ('key', '*')},
}

# Kinds whose contents the compiler does not simulate yet: using them raises a clear error.
# (Visual-only kinds are not listed: they are validated and then ignored by design.)
UNSUPPORTED = {
    'composite': 'composite',
    'flexcomp': 'flexcomp', 'flex': 'flex', 'equality/flex': 'flex equality constraints',
    'attach': 'attach', 'asset/model': 'attach', 'replicate': 'replicate',
    'extension/plugin': 'plugins', 'element-plugin': 'plugins',
    'actuator/plugin': 'plugin actuators',
    'sensor/plugin': 'plugin sensors', 'sensor/user': 'user sensors',
}
