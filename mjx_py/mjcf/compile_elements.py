"""Compiling the elements outside the kinematic tree (host only: numpy).

Contact pairs and excludes, tendons and their wrap paths, actuators (general and shortcuts),
equality constraints, sensors, keyframes and custom data. Each ``_section(ctx, out)`` reads
nodes from ``ctx.sections`` and writes MuJoCo-named arrays into ``out``.
"""

from __future__ import annotations

import numpy as np

from .defaults import apply_actuator, internal_defaults
from .xmlnode import Node

OBJ = dict(unknown=0, body=1, xbody=2, joint=3, dof=4, geom=5, site=6, camera=7, light=8,
           flex=9, mesh=10, skin=11, hfield=12, texture=13, material=14, pair=15, exclude=16,
           equality=17, tendon=18, actuator=19, sensor=20, numeric=21, text=22, tuple=23, key=24,
           plugin=25)
TRN = dict(joint=0, jointinparent=1, slidercrank=2, tendon=3, site=4, body=5)
DYN = ('none', 'integrator', 'filter', 'filterexact', 'muscle', 'user')
GAIN = ('fixed', 'affine', 'muscle', 'user')
BIAS = ('none', 'affine', 'muscle', 'user')
WRAP = dict(none=0, joint=1, pulley=2, site=3, sphere=4, cylinder=5)
EQ = dict(connect=0, weld=1, joint=2, tendon=3)
JNT_FREE, JNT_BALL, JNT_SLIDE, JNT_HINGE = 0, 1, 2, 3
GEOM_SPHERE, GEOM_CYLINDER = 2, 5


def compile_all(ctx, out: dict):
  _contact(ctx, out)
  _tendons(ctx, out)
  _actuators(ctx, out)
  _equality(ctx, out)
  _sensors(ctx, out)
  _keyframes(ctx, out)
  _custom(ctx, out)


def _children(ctx, section: str):
  for sec in ctx.sections.get(section, []):
    yield from sec.children


def matid(ctx, vals, node):
  from .compile import matid as lookup
  return lookup(ctx, vals, node)


def _limited(ctx, value, rng, node, what, attr):
  from .compile import _limited as lim
  return lim(value, rng, ctx.autolimits, node, what, attr)


# ---------------------------------------------------------------------------------------------
# Contact pairs and excludes.

def _contact(ctx, out: dict):
  pairs, excludes = [], []
  bodyid = out['geom_bodyid']
  for node in _children(ctx, 'contact'):
    if node.tag == 'pair':
      v = ctx.defaults.resolve(node, 'pair', None)
      g1 = ctx.lookup('geom', v['geom1'], node, 'geom1')
      g2 = ctx.lookup('geom', v['geom2'], node, 'geom2')
      if v['condim'] not in (1, 3, 4, 6):
        raise node.error('invalid condim (must be 1, 3, 4 or 6)', 'condim')
      if bodyid[g1] > bodyid[g2]:  # MuJoCo stores geom1 on the lower-numbered body
        g1, g2 = g2, g1
      sig = (int(bodyid[g1]) << 16) + int(bodyid[g2])
      pairs.append(dict(v=v, node=node, g1=g1, g2=g2, sig=sig))
    else:
      b1 = ctx.lookup('body', node.vals['body1'], node, 'body1')
      b2 = ctx.lookup('body', node.vals['body2'], node, 'body2')
      excludes.append(dict(node=node, sig=(min(b1, b2) << 16) + max(b1, b2)))
  # MuJoCo orders pairs and excludes by body-pair signature (stable); ids follow that order
  pairs.sort(key=lambda p: p['sig'])
  excludes.sort(key=lambda e: e['sig'])
  for i, p in enumerate(pairs):
    ctx.register('pair', p['v'].get('name'), p['node'], i)
  for i, e in enumerate(excludes):
    ctx.register('exclude', e['node'].vals.get('name'), e['node'], i)
  out['npair'] = len(pairs)
  pv = lambda k: [p['v'][k] for p in pairs]  # noqa: E731
  out['pair_dim'] = np.array(pv('condim'), np.int32)
  out['pair_geom1'] = np.array([p['g1'] for p in pairs], np.int32)
  out['pair_geom2'] = np.array([p['g2'] for p in pairs], np.int32)
  out['pair_signature'] = np.array([p['sig'] for p in pairs], np.int32)
  out['pair_solref'] = np.array(pv('solref'), float).reshape(-1, 2)
  out['pair_solreffriction'] = np.array(pv('solreffriction'), float).reshape(-1, 2)
  out['pair_solimp'] = np.array(pv('solimp'), float).reshape(-1, 5)
  out['pair_margin'] = np.array(pv('margin'), float)
  out['pair_gap'] = np.array(pv('gap'), float)
  out['pair_friction'] = np.array(pv('friction'), float).reshape(-1, 5)
  out['nexclude'] = len(excludes)
  out['exclude_signature'] = np.array([e['sig'] for e in excludes], np.int32)


# ---------------------------------------------------------------------------------------------
# Tendons.

def _tendons(ctx, out: dict):
  rows, wraps = [], []
  for node in _children(ctx, 'tendon'):
    v = ctx.defaults.resolve(node, 'tendon', None)
    tid = len(rows)
    ctx.register('tendon', v.get('name'), node, tid)
    adr = len(wraps)
    if node.tag == 'fixed':
      if not node.children:
        raise node.error('tendon has no joints')
      for c in node.children:
        j = ctx.lookup('joint', c.vals['joint'], c, 'joint')
        if out['jnt_type'][j] not in (JNT_SLIDE, JNT_HINGE):
          raise c.error('fixed tendon joint must be slide or hinge', 'joint')
        wraps.append((WRAP['joint'], j, c.vals['coef']))
    else:
      _spatial_path(ctx, node, out, wraps)
    rng = np.asarray(v['range'], float)
    limited = _limited(ctx, v['limited'], rng, node, 'tendon', 'limited')
    if limited and rng[0] >= rng[1]:
      raise node.error('invalid limits in tendon (range[0] must be smaller than range[1])',
                       'range')
    frng = np.asarray(v['actuatorfrcrange'], float)
    flim = _limited(ctx, v['actuatorfrclimited'], frng, node, 'tendon', 'actuatorfrclimited')
    if flim and (frng[0] > 0 or frng[1] < 0 or frng[0] >= frng[1]):
      raise node.error('invalid actuatorfrcrange in tendon', 'actuatorfrcrange')
    if v['width'] <= 0 and node.tag == 'spatial':
      raise node.error('tendon must have positive width', 'width')
    if v['armature'] < 0:
      raise node.error('tendon armature cannot be negative', 'armature')
    sl = list(v['springlength'])
    if 'springlength' in node.vals and len(node.vals['springlength']) == 1:
      sl[1] = sl[0]
    if not (sl[0] == -1 and sl[1] == -1) and sl[0] > sl[1]:
      raise node.error('invalid springlength in tendon', 'springlength')
    rows.append(dict(v=v, adr=adr, num=len(wraps) - adr, limited=limited, flim=flim, range=rng,
                     frng=frng, springlength=sl, matid=matid(ctx, v, node)))
  out['ntendon'], out['nwrap'] = len(rows), len(wraps)
  tv = lambda k: [r['v'][k] for r in rows]  # noqa: E731
  out['tendon_adr'] = np.array([r['adr'] for r in rows], np.int32)
  out['tendon_num'] = np.array([r['num'] for r in rows], np.int32)
  out['tendon_group'] = np.array(tv('group'), np.int32)
  out['tendon_limited'] = np.array([r['limited'] for r in rows], np.uint8)
  out['tendon_actfrclimited'] = np.array([r['flim'] for r in rows], np.uint8)
  out['tendon_width'] = np.array(tv('width'), float)
  out['tendon_solref_lim'] = np.array(tv('solreflimit'), float).reshape(-1, 2)
  out['tendon_solimp_lim'] = np.array(tv('solimplimit'), float).reshape(-1, 5)
  out['tendon_solref_fri'] = np.array(tv('solreffriction'), float).reshape(-1, 2)
  out['tendon_solimp_fri'] = np.array(tv('solimpfriction'), float).reshape(-1, 5)
  out['tendon_range'] = np.array([r['range'] for r in rows], float).reshape(-1, 2)
  out['tendon_actfrcrange'] = np.array([r['frng'] for r in rows], float).reshape(-1, 2)
  out['tendon_margin'] = np.array(tv('margin'), float)
  out['tendon_stiffness'] = np.array(tv('stiffness'), float)
  out['tendon_damping'] = np.array(tv('damping'), float)
  out['tendon_armature'] = np.array(tv('armature'), float)
  out['tendon_frictionloss'] = np.array(tv('frictionloss'), float)
  out['tendon_lengthspring'] = np.array([r['springlength'] for r in rows], float).reshape(-1, 2)
  out['tendon_rgba'] = np.array(tv('rgba'), np.float32).reshape(-1, 4)
  out['tendon_matid'] = np.array([r['matid'] for r in rows], np.int32)
  out['wrap_type'] = np.array([w[0] for w in wraps], np.int32)
  out['wrap_objid'] = np.array([w[1] for w in wraps], np.int32)
  out['wrap_prm'] = np.array([w[2] for w in wraps], float)
  ctx.user_raw['tendon'] = tv('user')


def _spatial_path(ctx, node: Node, out: dict, wraps: list):
  """Appends a spatial tendon's path; checks MuJoCo's path rules."""
  items = node.children
  if len(items) < 2:
    raise node.error('spatial tendon path must contain at least two objects')
  prev = None
  for i, c in enumerate(items):
    if c.tag == 'site':
      s = ctx.lookup('site', c.vals['site'], c, 'site')
      if prev is not None and prev[0] == 'site' and prev[1] == s:
        raise c.error('tendon path repeats the same site consecutively', 'site')
      wraps.append((WRAP['site'], s, 0.0))
      prev = ('site', s)
    elif c.tag == 'geom':
      g = ctx.lookup('geom', c.vals['geom'], c, 'geom')
      gtype = out['geom_type'][g]
      if gtype not in (GEOM_SPHERE, GEOM_CYLINDER):
        raise c.error('tendon wrapping geom must be a sphere or a cylinder', 'geom')
      side = -1
      if c.vals.get('sidesite'):
        side = ctx.lookup('site', c.vals['sidesite'], c, 'sidesite')
      if (i == 0 or i == len(items) - 1 or items[i - 1].tag != 'site'
          or items[i + 1].tag != 'site'):
        raise c.error('tendon wrapping geom must be between two sites', 'geom')
      if node.vals.get('armature', 0) > 0:
        raise c.error('geom wrapping not supported by tendon armature', 'geom')
      wraps.append((WRAP['sphere'] if gtype == GEOM_SPHERE else WRAP['cylinder'], g,
                    float(side)))
      prev = ('geom', g)
    else:  # pulley
      if i == 0 or prev[0] == 'pulley':
        raise c.error('tendon path cannot start with or repeat a pulley')
      if i == len(items) - 1:
        raise c.error('tendon path ends with a pulley')
      if items[i - 1].tag != 'site' or items[i + 1].tag != 'site':
        raise c.error('pulley must be between sites')
      if c.vals['divisor'] <= 0:
        raise c.error('pulley divisor must be positive', 'divisor')
      wraps.append((WRAP['pulley'], -1, c.vals['divisor']))
      prev = ('pulley', None)
  if items[0].tag != 'site' or items[-1].tag != 'site':
    raise node.error('spatial tendon path must start and end with a site')


# ---------------------------------------------------------------------------------------------
# Actuators.

_TARGETS = ('joint', 'jointinparent', 'tendon', 'site', 'body', 'cranksite')


def _actuators(ctx, out: dict):
  rows = []
  na = 0
  for node in _children(ctx, 'actuator'):
    name = node.vals.get('class') or 'main'
    a = dict(ctx.defaults.get(node, name)['general'])
    a.setdefault('name', None)
    for k, val in internal_defaults('general').items():
      a.setdefault(k, val)
    a['name'] = None
    apply_actuator(a, node, node.tag)
    aid = len(rows)
    ctx.register('actuator', a.get('name'), node, aid)
    targets = [t for t in _TARGETS if node.vals.get(t)]
    if len(targets) > 1:
      raise node.error('actuator can have at most one of transmission target', targets[1])
    if not targets:
      raise node.error('missing transmission target for actuator')
    t = targets[0]
    if (a['cranklength'] or node.vals.get('slidersite')) and t != 'cranksite':
      attr = 'cranklength' if a['cranklength'] else 'slidersite'
      raise node.error('cranklength and slidersite can only be used in slidercrank '
                       'transmission', attr)
    if node.vals.get('refsite') and t != 'site':
      raise node.error('refsite can only be used with site transmission', 'refsite')
    trnid = [-1, -1]
    if t in ('joint', 'jointinparent'):
      trntype = TRN[t]
      trnid[0] = ctx.lookup('joint', node.vals[t], node, t)
    elif t == 'tendon':
      trntype = TRN['tendon']
      trnid[0] = ctx.lookup('tendon', node.vals[t], node, t)
    elif t == 'site':
      trntype = TRN['site']
      trnid[0] = ctx.lookup('site', node.vals[t], node, t)
      if node.vals.get('refsite'):
        trnid[1] = ctx.lookup('site', node.vals['refsite'], node, 'refsite')
    elif t == 'body':
      trntype = TRN['body']
      trnid[0] = ctx.lookup('body', node.vals[t], node, t)
    else:
      trntype = TRN['slidercrank']
      trnid[0] = ctx.lookup('site', node.vals['cranksite'], node, 'cranksite')
      if not node.vals.get('slidersite'):
        raise node.error('slidersite must be defined in slidercrank transmission', 'slidersite')
      trnid[1] = ctx.lookup('site', node.vals['slidersite'], node, 'slidersite')
      if a['cranklength'] <= 0:
        raise node.error('cranklength must be positive in slidercrank transmission',
                         'cranklength')
    _inheritrange(ctx, node, a, t, trnid, out)
    _lengthrange(ctx, node, a, t, trnid, out)
    ctrl_lim = _limited(ctx, a['ctrllimited'], a['ctrlrange'], node, 'actuator', 'ctrllimited')
    force_lim = _limited(ctx, a['forcelimited'], a['forcerange'], node, 'actuator',
                         'forcelimited')
    act_lim = _limited(ctx, a['actlimited'], a['actrange'], node, 'actuator', 'actlimited')
    if ctrl_lim and a['ctrlrange'][0] >= a['ctrlrange'][1]:
      raise node.error('invalid control range for actuator', 'ctrlrange')
    if force_lim and a['forcerange'][0] >= a['forcerange'][1]:
      raise node.error('invalid force range for actuator', 'forcerange')
    if act_lim and a['actrange'][0] >= a['actrange'][1]:
      raise node.error('invalid actrange for actuator', 'actrange')
    if act_lim and a['dyntype'] == 'none':
      raise node.error("actrange specified but dyntype is 'none'", 'actlimited')
    if node.tag in ('damper', 'adhesion') and (a['ctrlrange'][0] < 0 or a['ctrlrange'][1] < 0):
      raise node.error(f'{node.tag} control range cannot be negative', 'ctrlrange')
    if a['gaintype'] == 'muscle' or a['biastype'] == 'muscle':
      _check_muscle(node, a)
    actdim = a['actdim']
    if actdim == -1:
      actdim = 0 if a['dyntype'] == 'none' else 1
    if a['dyntype'] == 'none' and actdim > 0:
      raise node.error('actdim must be 0 if dyntype is none', 'actdim')
    if a['dyntype'] != 'none' and actdim == 0:
      raise node.error('actdim must be positive if dyntype is not none', 'actdim')
    if actdim > 1 and a['dyntype'] != 'user':
      raise node.error('actdim > 1 is only allowed for dyntype user', 'actdim')
    rows.append(dict(a=a, trntype=trntype, trnid=trnid, ctrl_lim=ctrl_lim, force_lim=force_lim,
                     act_lim=act_lim, actadr=na if actdim else -1, actnum=actdim))
    na += actdim
  out['nu'], out['na'] = len(rows), na
  av = lambda k: [r['a'][k] for r in rows]  # noqa: E731
  i32 = lambda x: np.array(x, np.int32)  # noqa: E731
  out['actuator_trntype'] = i32([r['trntype'] for r in rows])
  out['actuator_dyntype'] = i32([DYN.index(x) for x in av('dyntype')])
  out['actuator_gaintype'] = i32([GAIN.index(x) for x in av('gaintype')])
  out['actuator_biastype'] = i32([BIAS.index(x) for x in av('biastype')])
  out['actuator_trnid'] = i32([r['trnid'] for r in rows]).reshape(-1, 2)
  out['actuator_actadr'] = i32([r['actadr'] for r in rows])
  out['actuator_actnum'] = i32([r['actnum'] for r in rows])
  out['actuator_group'] = i32(av('group'))
  out['actuator_ctrllimited'] = np.array([r['ctrl_lim'] for r in rows], np.uint8)
  out['actuator_forcelimited'] = np.array([r['force_lim'] for r in rows], np.uint8)
  out['actuator_actlimited'] = np.array([r['act_lim'] for r in rows], np.uint8)
  out['actuator_dynprm'] = np.array(av('dynprm'), float).reshape(-1, 10)
  out['actuator_gainprm'] = np.array(av('gainprm'), float).reshape(-1, 10)
  out['actuator_biasprm'] = np.array(av('biasprm'), float).reshape(-1, 10)
  out['actuator_actearly'] = np.array([x == 'true' for x in av('actearly')], np.uint8)
  out['actuator_ctrlrange'] = np.array(av('ctrlrange'), float).reshape(-1, 2)
  out['actuator_forcerange'] = np.array(av('forcerange'), float).reshape(-1, 2)
  out['actuator_actrange'] = np.array(av('actrange'), float).reshape(-1, 2)
  out['actuator_gear'] = np.array(av('gear'), float).reshape(-1, 6)
  out['actuator_cranklength'] = np.array(av('cranklength'), float)
  out['actuator_lengthrange'] = np.array(av('lengthrange'), float).reshape(-1, 2)
  ctx.user_raw['actuator'] = av('user')
  ctx.actuator_rows = rows


def _inheritrange(ctx, node, a, target, trnid, out):
  """Position-like actuators copy a scaled copy of the target's range (inheritrange > 0)."""
  x = a.get('inheritrange', 0.0) or 0.0
  if x <= 0:
    return
  key = 'actrange' if a['dyntype'] == 'integrator' else 'ctrlrange'
  if key in node.vals:
    raise node.error(f'{key} and inheritrange cannot both be defined', 'inheritrange')
  if target in ('joint', 'jointinparent'):
    j = trnid[0]
    if out['jnt_type'][j] not in (JNT_SLIDE, JNT_HINGE):
      raise node.error('inheritrange can only be used with hinge and slide joints',
                       'inheritrange')
    if not out['jnt_limited'][j]:
      raise node.error('inheritrange requires a target with a range', 'inheritrange')
    rng = out['jnt_range'][j]
  elif target == 'tendon':
    t = trnid[0]
    if not out['tendon_limited'][t]:
      raise node.error('inheritrange requires a target with a range', 'inheritrange')
    rng = out['tendon_range'][t]
  else:
    raise node.error('inheritrange can only be used with joint and tendon transmission',
                     'inheritrange')
  mid, half = 0.5 * (rng[0] + rng[1]), 0.5 * x * (rng[1] - rng[0])
  a[key] = (mid - half, mid + half)


def _lengthrange(ctx, node, a, target, trnid, out):
  """MuJoCo's compile-time actuator length ranges (compiler/lengthrange).

  Where MuJoCo would find the range by simulating the model (mj_setLengthRange) we stop with
  a clear error rather than leave it at zero; copying joint/tendon limits (uselimit) and
  keeping an explicit range (useexisting) are done here.
  """
  lr = ctx.lengthrange
  muscle = 'muscle' in (a['gaintype'], a['biastype'])
  user = 'user' in (a['gaintype'], a['biastype'])
  mode = lr['mode']
  if not (mode == 'all' or (mode == 'muscle' and muscle)
          or (mode == 'muscleuser' and (muscle or user))):
    return
  if lr['useexisting'] == 'true' and a['lengthrange'][0] < a['lengthrange'][1]:
    return
  if lr['uselimit'] == 'true':
    rng = None
    if target in ('joint', 'jointinparent') and out['jnt_limited'][trnid[0]]:
      rng = out['jnt_range'][trnid[0]]
    elif target == 'tendon' and out['tendon_limited'][trnid[0]]:
      rng = out['tendon_range'][trnid[0]]
    if rng is not None:
      # MuJoCo 3.3.3 copies the joint/tendon range as it is (gear is not applied)
      a['lengthrange'] = (float(rng[0]), float(rng[1]))
      return
  raise node.error('this actuator needs a lengthrange, which MuJoCo computes by simulation; '
                   'that is not supported yet by mjx_py: give lengthrange="lo hi" explicitly '
                   '(or compiler <lengthrange mode="none"/>)', 'lengthrange')


def _check_muscle(node, a):
  g = a['gainprm']
  if not g[0] < g[1]:
    raise node.error('muscle range[0] must be smaller than range[1]', 'range')
  if not (g[4] < 1 < g[5]):
    raise node.error('muscle lmin must be < 1 and lmax > 1', 'lmin')
  for i, key in ((3, 'scale'), (6, 'vmax'), (7, 'fpmax'), (8, 'fvmax')):
    if not g[i] > 0:
      raise node.error(f'muscle {key} must be positive', key)


# ---------------------------------------------------------------------------------------------
# Equality constraints.

# MuJoCo's untouched eq_data: polycoef (0 1 0 0 0), zeros, torquescale 1. Elements overwrite
# the slots their attributes map to (see _eq_connect_weld / _equality).
EQ_DATA_DEFAULT = (0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0)


def _eq_connect_weld(ctx, node, v, kind, data):
  """(objtype, obj1, obj2) of a connect/weld; writes its eq_data slots in place.

  Layout (the input set_const expects): data[0:3] anchor in body1 (body form), data[3:10]
  relpose (pos, quat; weld body form), data[10] torquescale (weld). Site forms keep the
  default data (MuJoCo's setconst zeroes a site connect's data).
  """
  given = node.vals
  bodyform = any(k in given for k in ('body1', 'body2', 'anchor', 'relpose'))
  siteform = 'site1' in given or 'site2' in given
  if bodyform and siteform:
    raise node.error('body and site semantics cannot be mixed',
                     'site1' if 'site1' in given else 'site2')
  if kind == 'connect':
    usage = 'either both body1 and anchor must be defined, or both site1 and site2 must be defined'
  else:
    usage = ('either body1 must be defined and optionally {body2, anchor, relpose}, or site1 '
             'and site2 must be defined')
  if kind == 'weld':
    data[10] = v['torquescale']
  if siteform:
    if not (v.get('site1') and v.get('site2')):
      raise node.error(usage, 'site2' if v.get('site1') else 'site1')
    return (OBJ['site'], ctx.lookup('site', v['site1'], node, 'site1'),
            ctx.lookup('site', v['site2'], node, 'site2'))
  if not v.get('body1') or (kind == 'connect' and v.get('anchor') is None):
    raise node.error(usage, 'body1')
  obj1 = ctx.lookup('body', v['body1'], node, 'body1')
  obj2 = ctx.lookup('body', v['body2'], node, 'body2') if v.get('body2') else 0
  data[0:3] = v['anchor']
  if kind == 'weld':
    data[3:10] = v['relpose']  # a zero quaternion asks set_const for the qpos0 relative pose
  return OBJ['body'], obj1, obj2


def _equality(ctx, out: dict):
  rows = []
  for node in _children(ctx, 'equality'):
    v = ctx.defaults.resolve(node, 'equality', None)
    kind = node.tag
    data = np.array(EQ_DATA_DEFAULT)
    if kind in ('connect', 'weld'):
      objtype, obj1, obj2 = _eq_connect_weld(ctx, node, v, kind, data)
    else:  # joint or tendon coupling: polycoef in data[0:5]
      objtype = OBJ['unknown']  # MuJoCo records no object type for joint/tendon equalities
      obj1 = ctx.lookup(kind, v[kind + '1'], node, kind + '1')
      obj2 = ctx.lookup(kind, v[kind + '2'], node, kind + '2') if v.get(kind + '2') else -1
      if kind == 'joint':
        for j, attr in ((obj1, 'joint1'), (obj2, 'joint2')):
          if j >= 0 and out['jnt_type'][j] not in (JNT_SLIDE, JNT_HINGE):
            raise node.error('only HINGE and SLIDE joint allowed in constraint', attr)
      data[0:5] = v['polycoef']
    if obj1 == obj2:  # body2 omitted means the world, so body1="world" alone repeats too
      name = v.get(kind + '1') or v.get('site1') or v.get('body1')
      raise node.error(f"element '{name}' is repeated in equality constraint {len(rows)}")
    ctx.register('equality', v.get('name'), node, len(rows))
    rows.append(dict(v=v, type=EQ[kind], obj1=obj1, obj2=obj2, objtype=objtype, data=data))
  out['neq'] = len(rows)
  out['eq_type'] = np.array([r['type'] for r in rows], np.int32)
  out['eq_obj1id'] = np.array([r['obj1'] for r in rows], np.int32)
  out['eq_obj2id'] = np.array([r['obj2'] for r in rows], np.int32)
  out['eq_objtype'] = np.array([r['objtype'] for r in rows], np.int32)
  out['eq_active0'] = np.array([r['v']['active'] == 'true' for r in rows], np.uint8)
  out['eq_solref'] = np.array([r['v']['solref'] for r in rows], float).reshape(-1, 2)
  out['eq_solimp'] = np.array([r['v']['solimp'] for r in rows], float).reshape(-1, 5)
  out['eq_data'] = np.array([r['data'] for r in rows], float).reshape(-1, 11)


# ---------------------------------------------------------------------------------------------
# Sensors.

SENSOR_TYPES = (
    'touch accelerometer velocimeter gyro force torque magnetometer rangefinder camprojection '
    'jointpos jointvel tendonpos tendonvel actuatorpos actuatorvel actuatorfrc jointactuatorfrc '
    'tendonactuatorfrc ballquat ballangvel jointlimitpos jointlimitvel jointlimitfrc '
    'tendonlimitpos tendonlimitvel tendonlimitfrc framepos framequat framexaxis frameyaxis '
    'framezaxis framelinvel frameangvel framelinacc frameangacc subtreecom subtreelinvel '
    'subtreeangmom distance normal fromto e_potential e_kinetic clock plugin user').split()
REAL, POSITIVE, AXIS, QUATERNION = 0, 1, 2, 3
POS, VEL, ACC = 1, 2, 3

# type -> (dim, datatype, stage)
_SENSOR_INFO = {
    'touch': (1, POSITIVE, ACC), 'accelerometer': (3, REAL, ACC), 'velocimeter': (3, REAL, VEL),
    'gyro': (3, REAL, VEL), 'force': (3, REAL, ACC), 'torque': (3, REAL, ACC),
    'magnetometer': (3, REAL, POS), 'rangefinder': (1, POSITIVE, POS),
    'camprojection': (2, REAL, POS), 'jointpos': (1, REAL, POS), 'jointvel': (1, REAL, VEL),
    'tendonpos': (1, REAL, POS), 'tendonvel': (1, REAL, VEL), 'actuatorpos': (1, REAL, POS),
    'actuatorvel': (1, REAL, VEL), 'actuatorfrc': (1, REAL, ACC),
    'jointactuatorfrc': (1, REAL, ACC), 'tendonactuatorfrc': (1, REAL, ACC),
    'ballquat': (4, QUATERNION, POS), 'ballangvel': (3, REAL, VEL),
    'jointlimitpos': (1, REAL, POS), 'jointlimitvel': (1, REAL, VEL),
    'jointlimitfrc': (1, REAL, ACC), 'tendonlimitpos': (1, REAL, POS),
    'tendonlimitvel': (1, REAL, VEL), 'tendonlimitfrc': (1, REAL, ACC),
    'framepos': (3, REAL, POS), 'framequat': (4, QUATERNION, POS), 'framexaxis': (3, AXIS, POS),
    'frameyaxis': (3, AXIS, POS), 'framezaxis': (3, AXIS, POS), 'framelinvel': (3, REAL, VEL),
    'frameangvel': (3, REAL, VEL), 'framelinacc': (3, REAL, ACC), 'frameangacc': (3, REAL, ACC),
    'subtreecom': (3, REAL, POS), 'subtreelinvel': (3, REAL, VEL),
    'subtreeangmom': (3, REAL, VEL), 'distance': (1, POSITIVE, POS), 'normal': (3, AXIS, POS),
    'fromto': (6, REAL, POS), 'e_potential': (1, REAL, POS), 'e_kinetic': (1, REAL, POS),
    'clock': (1, REAL, POS),
}


def _sensor_target(ctx, node, stype, out):
  """(objtype, objid, reftype, refid) of a sensor, with MuJoCo's validity checks."""
  v = node.vals
  ref = (OBJ['unknown'], -1)
  if 'site' in v and stype != 'camprojection':
    return OBJ['site'], ctx.lookup('site', v['site'], node, 'site'), *ref
  if stype == 'camprojection':
    site = ctx.lookup('site', v['site'], node, 'site')
    cam = ctx.lookup('camera', v['camera'], node, 'camera')
    if not np.all(out['cam_resolution'][cam] > 0):
      raise node.error('camera projection sensor requires camera resolution', 'camera')
    return OBJ['site'], site, OBJ['camera'], cam
  if 'joint' in v:
    j = ctx.lookup('joint', v['joint'], node, 'joint')
    jtype = out['jnt_type'][j]
    if stype in ('ballquat', 'ballangvel'):
      if jtype != JNT_BALL:
        raise node.error('joint must be ball joint in sensor', 'joint')
    elif stype.startswith('jointlimit'):
      pass  # any limited joint (ball joints have a cone limit)
    elif jtype not in (JNT_SLIDE, JNT_HINGE):
      raise node.error('joint must be slide or hinge in sensor', 'joint')
    if stype.startswith('jointlimit') and not out['jnt_limited'][j]:
      raise node.error('joint must be limited in sensor', 'joint')
    return OBJ['joint'], j, *ref
  if 'tendon' in v:
    t = ctx.lookup('tendon', v['tendon'], node, 'tendon')
    if stype.startswith('tendonlimit') and not out['tendon_limited'][t]:
      raise node.error('tendon must be limited in sensor', 'tendon')
    return OBJ['tendon'], t, *ref
  if 'actuator' in v:
    return OBJ['actuator'], ctx.lookup('actuator', v['actuator'], node, 'actuator'), *ref
  if stype.startswith('subtree'):
    return OBJ['body'], ctx.lookup('body', v['body'], node, 'body'), *ref
  if stype.startswith('frame'):
    obj = _frame_obj(ctx, node, v['objtype'], v['objname'], 'objname')
    if ('reftype' in v) != ('refname' in v):
      raise node.error('reftype and refname must be given together',
                       'reftype' if 'reftype' in v else 'refname')
    if 'reftype' in v:
      ref = _frame_obj(ctx, node, v['reftype'], v['refname'], 'refname')
    return *obj, *ref
  if stype in ('distance', 'normal', 'fromto'):
    objs = []
    for i in ('1', '2'):
      g, b = v.get('geom' + i), v.get('body' + i)
      if (g is None) == (b is None):
        raise node.error(f'exactly one of (geom{i}, body{i}) must be specified', 'geom' + i)
      objs.append((OBJ['geom'], ctx.lookup('geom', g, node, 'geom' + i)) if g is not None
                  else (OBJ['body'], ctx.lookup('body', b, node, 'body' + i)))
    if objs[0] == objs[1]:
      raise node.error('1st body/geom must be different from 2nd', 'geom2')
    return *objs[0], *objs[1]
  return OBJ['unknown'], -1, *ref


def _frame_obj(ctx, node, objtype, name, attr):
  table = {'body': 'body', 'xbody': 'body', 'geom': 'geom', 'site': 'site', 'camera': 'camera'}
  return OBJ[objtype], ctx.lookup(table[objtype], name, node, attr)


def _sensors(ctx, out: dict):
  rows = []
  adr = 0
  for node in _children(ctx, 'sensor'):
    stype = node.tag
    dim, datatype, stage = _SENSOR_INFO[stype]
    v = dict(internal_defaults(node.kind))
    v.update(node.vals)
    if v['noise'] < 0:
      raise node.error('negative noise in sensor', 'noise')
    if v['cutoff'] < 0:
      raise node.error('negative cutoff in sensor', 'cutoff')
    if v['cutoff'] > 0 and datatype in (AXIS, QUATERNION) and stype != 'normal':
      raise node.error('cutoff applied to axis or quaternion datatype', 'cutoff')
    objtype, objid, reftype, refid = _sensor_target(ctx, node, stype, out)
    ctx.register('sensor', v.get('name'), node, len(rows))
    rows.append(dict(type=SENSOR_TYPES.index(stype), datatype=datatype, stage=stage,
                     objtype=objtype, objid=objid, reftype=reftype, refid=refid, dim=dim,
                     adr=adr, cutoff=v['cutoff'], noise=v['noise'], user=v['user']))
    adr += dim
  out['nsensor'], out['nsensordata'] = len(rows), adr
  for key in ('type', 'datatype', 'objtype', 'objid', 'reftype', 'refid', 'dim', 'adr'):
    out[f'sensor_{key}'] = np.array([r[key] for r in rows], np.int32)
  out['sensor_needstage'] = np.array([r['stage'] for r in rows], np.int32)
  out['sensor_cutoff'] = np.array([r['cutoff'] for r in rows], float)
  out['sensor_noise'] = np.array([r['noise'] for r in rows], float)
  out['sensor_plugin'] = -np.ones(len(rows), np.int32)
  ctx.user_raw['sensor'] = [r['user'] for r in rows]


# ---------------------------------------------------------------------------------------------
# Keyframes and custom data.

def _keyframes(ctx, out: dict):
  keys = list(_children(ctx, 'keyframe'))
  nkey = max(len(keys), ctx.size['nkey'])
  nq, nv, na, nu, nmocap = out['nq'], out['nv'], out['na'], out['nu'], out['nmocap']
  mocap_bodies = [i for i in range(out['nbody']) if out['body_mocapid'][i] >= 0]
  mpos0 = np.array([out['body_pos'][i] for i in mocap_bodies]).reshape(-1)
  mquat0 = np.array([out['body_quat'][i] for i in mocap_bodies]).reshape(-1)
  fields = dict(qpos=(nq, out['qpos0']), qvel=(nv, np.zeros(nv)), act=(na, np.zeros(na)),
                ctrl=(nu, np.zeros(nu)), mpos=(3 * nmocap, mpos0), mquat=(4 * nmocap, mquat0))
  arrays = {k: np.tile(d, (nkey, 1)).reshape(nkey, n) for k, (n, d) in fields.items()}
  times = np.zeros(nkey)
  for i, node in enumerate(keys):
    ctx.register('key', node.vals.get('name'), node, i)
    times[i] = node.vals.get('time', 0.0)
    for k, (n, _) in fields.items():
      if k in node.vals:
        val = node.vals[k]
        if len(val) != n:
          raise node.error(f'keyframe {i}: invalid {k} size, expected length {n}', k)
        arrays[k][i] = val
    if 'qpos' in node.vals:
      _normalize_quats(arrays['qpos'][i], out)
    if 'mquat' in node.vals:
      q = arrays['mquat'][i].reshape(-1, 4)
      arrays['mquat'][i] = (q / np.linalg.norm(q, axis=1, keepdims=True)).reshape(-1)
  out['nkey'] = nkey
  out['key_time'] = times
  for k, arr in arrays.items():
    out[f'key_{k}'] = arr


def _normalize_quats(qpos, out):
  """Normalises the quaternions of free and ball joints inside a qpos vector, in place."""
  for j, jtype in enumerate(out['jnt_type']):
    if jtype in (JNT_FREE, JNT_BALL):
      adr = out['jnt_qposadr'][j] + (3 if jtype == JNT_FREE else 0)
      q = qpos[adr:adr + 4]
      n = np.linalg.norm(q)
      qpos[adr:adr + 4] = q / n if n > 0 else (1.0, 0.0, 0.0, 0.0)


def _custom(ctx, out: dict):
  numeric, text, tuples = [], [], []
  for node in _children(ctx, 'custom'):
    if node.tag == 'numeric':
      data = list(node.vals.get('data', ()))
      size = node.vals.get('size', len(data))
      if size <= 0 or size < len(data):
        raise node.error('numeric size must be positive and at least the data length', 'size')
      ctx.register('numeric', node.vals['name'], node, len(numeric))
      numeric.append(data + [0.0] * (size - len(data)))
    elif node.tag == 'text':
      ctx.register('text', node.vals['name'], node, len(text))
      text.append(node.vals['data'])
    else:
      ctx.register('tuple', node.vals['name'], node, len(tuples))
      elems = []
      for c in node.children:
        ot = c.vals['objtype']
        if ot not in OBJ:
          raise c.error(f"unknown object type '{ot}'", 'objtype')
        table = 'body' if ot == 'xbody' else ot
        elems.append((OBJ[ot], ctx.lookup(table, c.vals['objname'], c, 'objname'),
                      c.vals.get('prm', 0.0)))
      tuples.append(elems)
  out['nnumeric'] = len(numeric)
  out['numeric_adr'] = np.cumsum([0] + [len(x) for x in numeric])[:-1].astype(np.int32)
  out['numeric_size'] = np.array([len(x) for x in numeric], np.int32)
  out['numeric_data'] = np.array([v for x in numeric for v in x], float)
  out['ntuple'] = len(tuples)
  out['tuple_adr'] = np.cumsum([0] + [len(x) for x in tuples])[:-1].astype(np.int32)
  out['tuple_size'] = np.array([len(x) for x in tuples], np.int32)
  out['tuple_objtype'] = np.array([e[0] for x in tuples for e in x], np.int32)
  out['tuple_objid'] = np.array([e[1] for x in tuples for e in x], np.int32)
  out['tuple_objprm'] = np.array([e[2] for x in tuples for e in x], float)
  out['ntext'] = len(text)
  out['text_data_list'] = tuple(text)
