"""MJCF -> numpy arrays named like MuJoCo's ``mjModel`` fields (host only: numpy, never jax).

``compile_model(root)`` takes the validated ``<mujoco>`` node (see xmlnode.load) and returns a
dict of numpy arrays and ints keyed by MuJoCo field name (options as ``opt_<field>``), plus
``names`` (per object type, a tuple of names). The order of work mirrors MuJoCo's compiler:
globals, defaults, the tree (frames, joints, geoms, inertia), the elements outside the tree,
topology, then the constants MuJoCo derives by running kinematics at qpos0.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
import os

import numpy as np

from . import compile_elements, compile_tree, hfield, mesh, orient, setconst
from .compile_tree import CAMLIGHT_MODES, GEOM_TYPES, JNT_TYPES, MINVAL, TreeBuilder
from .defaults import Defaults, overlay
from .xmlnode import Node

DISABLE_FLAGS = ('constraint equality frictionloss limit contact passive gravity clampctrl '
                 'warmstart filterparent actuation refsafe sensor midphase eulerdamp autoreset '
                 'nativeccd').split()
ENABLE_FLAGS = 'override energy fwdinv invdiscrete multiccd island'.split()
INTEGRATORS = ('Euler', 'RK4', 'implicit', 'implicitfast')
CONES = ('pyramidal', 'elliptic')
JACOBIANS = ('dense', 'sparse', 'auto')
SOLVERS = ('PGS', 'CG', 'Newton')
LIGHT_TYPES = ('spot', 'directional', 'point', 'image')


def _limited(value: str, rng, autolimits: bool, node: Node, what: str, attr: str) -> bool:
  """MuJoCo's limit resolution for 'limited'-style attributes (false/true/auto)."""
  if value == 'true':
    return True
  if value == 'false':
    return False
  if not autolimits:
    if rng[0] != 0 or rng[1] != 0:
      raise node.error(f"{what} has '{attr.replace('limited', 'range')}' but not '{attr}'; "
                       f"set '{attr}' or use compiler autolimits", attr)
    return False
  return bool(rng[0] < rng[1])


class Ctx:
  """Compilation state shared by the tree and element compilers."""

  def __init__(self, root: Node):
    self.root = root
    self.sections: dict[str, list[Node]] = {}
    for child in root.children:
      self.sections.setdefault(child.tag, []).append(child)
    self.compiler = self._merged('compiler')
    self.angle_scale = math.pi / 180 if self.compiler['angle'] == 'degree' else 1.0
    self.eulerseq = self.compiler['eulerseq']
    comp_node = (self.sections.get('compiler') or [root])[-1]
    if len(self.eulerseq) != 3:
      raise comp_node.error('euler format must have length 3', 'eulerseq')
    if self.compiler['coordinate'] == 'global':
      raise comp_node.error('global coordinates no longer supported', 'coordinate')
    self.autolimits = self.compiler['autolimits'] == 'true'
    self.lengthrange = self._merged('compiler', 'lengthrange')
    for attr in ('fusestatic', 'discardvisual'):
      if self.compiler[attr] == 'true':  # both change the compiled model: never ignore them
        node = [n for n in self.sections['compiler'] if n.vals.get(attr) == 'true'][-1]
        raise node.error(f'compiler {attr}="true" is not supported yet by mjx_py', attr)
    self.defaults = Defaults()
    for d in self.sections.get('default', []):
      self.defaults.add_top(d)
    self.names: dict[str, dict[str, int]] = {}
    self.user_raw: dict[str, list] = {}

  def _merged(self, tag: str, sub: str | None = None) -> dict:
    from .defaults import internal_defaults
    vals = internal_defaults(sub or tag)
    for node in self.sections.get(tag, []):
      if sub is None:
        overlay(vals, node)
      else:
        for c in node.find(sub):
          overlay(vals, c)
    return vals

  def register(self, objtype: str, name: str | None, node: Node, idx: int):
    if not name:
      return
    table = self.names.setdefault(objtype, {})
    if name in table:
      raise node.error(f"repeated name '{name}' in {objtype}", 'name')
    table[name] = idx

  def lookup(self, objtype: str, name: str, node: Node, attr: str) -> int:
    idx = self.names.get(objtype, {}).get(name)
    if idx is None:
      raise node.error(f"{objtype} '{name}' not found", attr)
    return idx


def compile_model(root: Node, assets: dict | None = None) -> dict:
  ctx = Ctx(root)
  ctx.assets = assets or {}
  out: dict = {}
  _options(ctx, out)
  _sizes(ctx, out)
  _assets(ctx, out)
  bodies = TreeBuilder(ctx).build(
      [n for n in ctx.sections.get('worldbody', [])])
  _bodies(ctx, bodies, out)
  _joints(ctx, bodies, out)
  _geoms(ctx, bodies, out)
  _sites(ctx, bodies, out)
  _cameras_lights(ctx, bodies, out)
  _inertia(ctx, bodies, out)
  _align_free(ctx, bodies, out)
  _topology(ctx, bodies, out)
  compile_elements.compile_all(ctx, out)
  _user_arrays(ctx, out)
  _finalize_constants(ctx, out)
  out['names'] = {k: _names_list(v) for k, v in ctx.names.items()}
  return out


def _assets(ctx: Ctx, out: dict):
  """Textures and materials are visual only; their names are registered so that references
  to them are checked and ``*_matid`` fields match MuJoCo. Height fields are compiled here
  (hfield.py); mesh names are registered here and the meshes compiled with the geoms, which
  decide whether a mesh needs its convex hull (mesh.py)."""
  textures = [n for a in ctx.sections.get('asset', []) for n in a.find('texture')]
  for i, node in enumerate(textures):
    name = node.vals.get('name')
    if not name and node.vals.get('file'):
      name = os.path.splitext(os.path.basename(node.vals['file']))[0]
    ctx.register('texture', name, node, i)
  materials = [n for a in ctx.sections.get('asset', []) for n in a.find('material')]
  for i, node in enumerate(materials):
    ctx.register('material', node.vals['name'], node, i)
    if node.vals.get('texture'):
      if node.find('layer'):
        raise node.error('a material with a texture attribute cannot have layer sub-elements',
                         'texture')
      ctx.lookup('texture', node.vals['texture'], node, 'texture')
    for layer in node.find('layer'):
      ctx.lookup('texture', layer.vals['texture'], layer, 'texture')
  out['nmat'] = len(materials)
  # meshes: names now (geoms refer to them), compiled with the geoms (see _mesh_assets)
  ctx.mesh_nodes = [n for a in ctx.sections.get('asset', []) for n in a.find('mesh')]
  ctx.mesh_vals = []
  for i, node in enumerate(ctx.mesh_nodes):
    v = ctx.defaults.resolve(node, 'mesh', None)
    name = v.get('name')
    if not name and v.get('file'):
      name = os.path.splitext(os.path.basename(v['file'].replace('\\', '/')))[0]
    if not name:
      raise node.error('mesh needs a name (or a file to take it from)', 'name')
    ctx.register('mesh', name, node, i)
    ctx.mesh_vals.append((name, v))
  out.update(hfield.compile_hfields(
      ctx, [n for a in ctx.sections.get('asset', []) for n in a.find('hfield')]))


def matid(ctx: Ctx, vals: dict, node: Node) -> int:
  """Material id of an element, -1 without one; an unknown material is an error."""
  name = vals.get('material')
  return ctx.lookup('material', name, node, 'material') if name else -1


def _names_list(table: dict) -> tuple:
  n = max(table.values()) + 1 if table else 0
  names = [''] * n
  for name, i in table.items():
    names[i] = name
  return tuple(names)


# ---------------------------------------------------------------------------------------------
# Globals.

def _options(ctx: Ctx, out: dict):
  opt = ctx._merged('option')
  flags = ctx._merged('option', 'flag')
  for k in ('timestep', 'apirate', 'impratio', 'tolerance', 'ls_tolerance', 'noslip_tolerance',
            'ccd_tolerance', 'density', 'viscosity', 'o_margin'):
    out[f'opt_{k}'] = float(opt[k])
  for k in ('gravity', 'wind', 'magnetic', 'o_solref', 'o_solimp', 'o_friction'):
    out[f'opt_{k}'] = np.array(opt[k], dtype=float)
  for k in ('iterations', 'ls_iterations', 'noslip_iterations', 'ccd_iterations',
            'sdf_iterations', 'sdf_initpoints'):
    out[f'opt_{k}'] = int(opt[k])
  out['opt_integrator'] = INTEGRATORS.index(opt['integrator'])
  out['opt_cone'] = CONES.index(opt['cone'])
  out['opt_jacobian'] = JACOBIANS.index(opt['jacobian'])
  out['opt_solver'] = SOLVERS.index(opt['solver'])
  out['opt_disableflags'] = sum(1 << i for i, f in enumerate(DISABLE_FLAGS)
                                if flags[f] == 'disable')
  out['opt_enableflags'] = sum(1 << i for i, f in enumerate(ENABLE_FLAGS)
                               if flags[f] == 'enable')
  groups = opt['actuatorgroupdisable'] or ()
  mask = 0
  for g in groups:
    if g < 0 or g > 30:
      node = ctx.sections['option'][-1]
      raise node.error('actuatorgroupdisable must be in [0, 30]', 'actuatorgroupdisable')
    mask |= 1 << g
  out['opt_disableactuator'] = mask
  ctx.opt = opt


def _sizes(ctx: Ctx, out: dict):
  size = ctx._merged('size')
  node = (ctx.sections.get('size') or [ctx.root])[-1]
  for k, v in size.items():
    if k.startswith('nuser_') and v < -1:
      raise node.error(f'{k} must be >= -1', k)
    if k in ('nconmax', 'njmax', 'nstack') and v < -1:
      raise node.error(f'{k} must be >= -1', k)
  ctx.size = size
  # legacy contact-buffer and constraint-row sizes (-1: not set); put_model turns them into
  # the static capacities
  out['nconmax'] = int(size['nconmax'])
  out['njmax'] = int(size['njmax'])
  stat = ctx._merged('statistic')
  if stat['extent'] is not None and stat['extent'] <= 0:
    raise ctx.sections['statistic'][-1].error('extent must be strictly positive', 'extent')
  ctx.statistic = stat


# ---------------------------------------------------------------------------------------------
# Bodies and joints.

def _bodies(ctx: Ctx, bodies, out: dict):
  nbody = len(bodies)
  for b in bodies:
    if b.node is not None:
      ctx.register('body', b.name, b.node, b.id)
  ctx.names.setdefault('body', {})['world'] = 0
  out['nbody'] = nbody
  out['body_parentid'] = np.array([b.parent if b.parent >= 0 else 0 for b in bodies], np.int32)
  out['body_pos'] = np.array([b.pos for b in bodies])
  out['body_quat'] = np.array([orient.quat_normalize(b.quat) for b in bodies])
  out['body_gravcomp'] = np.array([b.vals.get('gravcomp', 0.0) for b in bodies], float)
  ctx.user_raw['body'] = [b.vals.get('user', ()) for b in bodies]
  mocapid = -np.ones(nbody, np.int32)
  nmocap = 0
  for b in bodies:
    if b.vals.get('mocap') == 'true':
      if b.parent != 0 or any(True for _ in b.joints):
        raise b.node.error(f"mocap body '{b.name}' is not a fixed child of world", 'mocap')
      mocapid[b.id] = nmocap
      nmocap += 1
  out['body_mocapid'] = mocapid
  out['nmocap'] = nmocap
  ctx.bodies = bodies


def _joints(ctx: Ctx, bodies, out: dict):
  jnt = {k: [] for k in ('type', 'bodyid', 'group', 'limited', 'actfrclimited', 'actgravcomp',
                         'solref', 'solimp', 'pos', 'axis', 'stiffness', 'range',
                         'actfrcrange', 'margin', 'user', 'qposadr', 'dofadr')}
  dof = {k: [] for k in ('bodyid', 'jntid', 'solref', 'solimp', 'frictionloss', 'armature',
                         'damping')}
  qpos0, qpos_spring = [], []
  body_jntadr, body_jntnum, body_dofadr, body_dofnum = [], [], [], []
  springdamper = []
  jid = 0
  for b in bodies:
    body_jntadr.append(jid if b.joints else -1)
    body_jntnum.append(len(b.joints))
    body_dofadr.append(len(dof['bodyid']) if b.joints else -1)
    ndof_body = 0
    prev_type = None
    for node, fpos, fquat, cc in b.joints:
      if node.tag == 'freejoint':
        # freejoint ignores joint defaults entirely
        from .defaults import internal_defaults
        v = internal_defaults('body/joint')
        v.update(type='free', name=node.vals.get('name'), group=node.vals.get('group', 0))
        v['align'] = node.vals.get('align', 'auto')
      else:
        v = ctx.defaults.resolve(node, 'joint', cc)
      jtype = v['type']
      if jtype == 'free':
        if len(b.joints) > 1:
          raise node.error('free joint can only appear by itself', 'type')
        if b.parent != 0:
          raise node.error('free joint can only be used on top level', 'type')
        if v['limited'] == 'true':
          raise node.error('limits should not be defined in free joint', 'limited')
      if prev_type == 'ball' and jtype in ('ball', 'hinge'):
        raise node.error('ball joint followed by rotational joint in the same body', 'type')
      prev_type = jtype
      ctx.register('joint', v.get('name'), node, jid)
      axis = np.asarray(v['axis'], float)
      if jtype in ('hinge', 'slide'):
        n = np.linalg.norm(axis)
        if n < 1e-14:
          raise node.error('axis too small', 'axis')
        axis = orient.rot_vec(fquat, axis / n)
      else:
        axis = np.array([0.0, 0.0, 1.0])
      pos = fpos + orient.rot_vec(fquat, v['pos']) if jtype != 'free' else np.zeros(3)
      rng = np.asarray(v['range'], float)
      if jtype == 'free':
        limited = False
      else:
        limited = _limited(v['limited'], rng, ctx.autolimits, node, 'joint', 'limited')
      if limited:
        if jtype == 'ball':
          if rng[0] != 0:
            raise node.error('range[0] should be 0 in ball joint', 'range')
          if rng[1] <= 0:
            raise node.error('range[1] should be positive in ball joint', 'range')
        elif rng[0] >= rng[1]:
          raise node.error('range[0] should be smaller than range[1] in joint', 'range')
        if jtype in ('hinge', 'ball'):
          rng = rng * ctx.angle_scale
      actrng = np.asarray(v['actuatorfrcrange'], float)
      actlim = _limited(v['actuatorfrclimited'], actrng, ctx.autolimits, node, 'joint',
                        'actuatorfrclimited')
      if jtype in ('free', 'ball'):  # only scalar joints have actuator force limits
        actlim = False
      if actlim and actrng[0] >= actrng[1]:
        raise node.error('actfrcrange[0] should be smaller than actfrcrange[1]',
                         'actuatorfrcrange')
      scale = ctx.angle_scale if jtype == 'hinge' else 1.0
      jnt['type'].append(JNT_TYPES.index(jtype))
      jnt['bodyid'].append(b.id)
      jnt['group'].append(v['group'])
      jnt['limited'].append(int(limited))
      jnt['actfrclimited'].append(int(actlim))
      jnt['actgravcomp'].append(int(v['actuatorgravcomp'] == 'true'))
      jnt['solref'].append(v['solreflimit'])
      jnt['solimp'].append(v['solimplimit'])
      jnt['pos'].append(pos)
      jnt['axis'].append(axis)
      jnt['stiffness'].append(v['stiffness'])
      jnt['range'].append(rng)
      jnt['actfrcrange'].append(actrng)
      jnt['margin'].append(v['margin'])
      jnt['user'].append(v['user'])
      jnt['qposadr'].append(len(qpos0))
      jnt['dofadr'].append(len(dof['bodyid']))
      for name in ('stiffness', 'damping', 'armature', 'frictionloss'):
        if v[name] < 0:
          raise node.error(f'{name} cannot be negative', name)
      nd = {'free': 6, 'ball': 3, 'slide': 1, 'hinge': 1}[jtype]
      for _ in range(nd):
        dof['bodyid'].append(b.id)
        dof['jntid'].append(jid)
        dof['solref'].append(v['solreffriction'])
        dof['solimp'].append(v['solimpfriction'])
        dof['frictionloss'].append(v['frictionloss'])
        dof['armature'].append(v['armature'])
        dof['damping'].append(v['damping'])
      ndof_body += nd
      if jtype == 'free':
        q = list(b.pos) + list(orient.quat_normalize(b.quat))
        qpos0 += q
        qpos_spring += q
      elif jtype == 'ball':
        qpos0 += [1.0, 0.0, 0.0, 0.0]
        qpos_spring += [1.0, 0.0, 0.0, 0.0]
      else:
        qpos0.append(v['ref'] * scale)
        qpos_spring.append(v['springref'] * scale)
      sd = v['springdamper']
      if (sd[0] > 0) != (sd[1] > 0) or sd[0] < 0 or sd[1] < 0:
        raise node.error('springdamper timeconst and dampratio must both be positive',
                         'springdamper')
      springdamper.append(tuple(sd) if sd[0] > 0 else None)
      jid += 1
    if ndof_body > 6:
      raise b.node.error('more than 6 dofs in body')
    body_dofnum.append(ndof_body)
  njnt = jid
  nv = len(dof['bodyid'])
  out['njnt'], out['nv'], out['nq'] = njnt, nv, len(qpos0)
  out['body_jntadr'] = np.array(body_jntadr, np.int32)
  out['body_jntnum'] = np.array(body_jntnum, np.int32)
  out['body_dofadr'] = np.array(body_dofadr, np.int32)
  out['body_dofnum'] = np.array(body_dofnum, np.int32)
  f = lambda x, s: np.array(x, float).reshape((-1,) + s)  # noqa: E731
  i32 = lambda x: np.array(x, np.int32)  # noqa: E731
  out['jnt_type'] = i32(jnt['type'])
  out['jnt_qposadr'] = i32(jnt['qposadr'])
  out['jnt_dofadr'] = i32(jnt['dofadr'])
  out['jnt_bodyid'] = i32(jnt['bodyid'])
  out['jnt_group'] = i32(jnt['group'])
  out['jnt_limited'] = np.array(jnt['limited'], np.uint8)
  out['jnt_actfrclimited'] = np.array(jnt['actfrclimited'], np.uint8)
  out['jnt_actgravcomp'] = np.array(jnt['actgravcomp'], np.uint8)
  out['jnt_solref'] = f(jnt['solref'], (2,))
  out['jnt_solimp'] = f(jnt['solimp'], (5,))
  out['jnt_pos'] = f(jnt['pos'], (3,))
  out['jnt_axis'] = f(jnt['axis'], (3,))
  out['jnt_stiffness'] = f(jnt['stiffness'], ())
  out['jnt_range'] = f(jnt['range'], (2,))
  out['jnt_actfrcrange'] = f(jnt['actfrcrange'], (2,))
  out['jnt_margin'] = f(jnt['margin'], ())
  ctx.user_raw['jnt'] = jnt['user']
  out['dof_bodyid'] = i32(dof['bodyid'])
  out['dof_jntid'] = i32(dof['jntid'])
  out['dof_solref'] = f(dof['solref'], (2,))
  out['dof_solimp'] = f(dof['solimp'], (5,))
  out['dof_frictionloss'] = f(dof['frictionloss'], ())
  out['dof_armature'] = f(dof['armature'], ())
  out['dof_damping'] = f(dof['damping'], ())
  out['qpos0'] = np.array(qpos0, float)
  out['qpos_spring'] = np.array(qpos_spring, float)
  ctx.springdamper = springdamper
  # dof_parentid: previous dof of the same body, else the last dof of the nearest ancestor
  parentid = []
  last_dof = {0: -1}
  for b in bodies[1:]:
    last_dof[b.id] = last_dof[b.parent]
  for b in bodies:
    if b.id == 0:
      continue
    prev = last_dof[b.parent]
    adr, num = body_dofadr[b.id], body_dofnum[b.id]
    for k in range(num):
      parentid.append(prev)
      prev = adr + k
    if num:
      last_dof[b.id] = adr + num - 1
    else:
      last_dof[b.id] = last_dof[b.parent]
  out['dof_parentid'] = i32(parentid)
  madr, nM = [], 0
  for i in range(nv):
    madr.append(nM)
    j = i
    while j >= 0:
      nM += 1
      j = parentid[j]
  out['dof_Madr'] = i32(madr)
  out['nM'] = nM


# ---------------------------------------------------------------------------------------------
# Geoms, sites, cameras, lights.

def _size_from(vals, gtype, node, nsize_required, what='geom'):
  size = np.array(vals['size'], float)
  for i in range(nsize_required):
    if not size[i] > 0:
      raise node.error(f'size {i + 1} must be positive in {what}', 'size')
  return size


def _place(vals, node, ctx, fpos, fquat, what):
  """Pose (pos, quat) relative to the body, from pos/orientation or fromto."""
  if vals.get('fromto') is not None:
    if 'pos' in node.vals or (vals.get('pos') is not None and np.any(vals['pos'])):
      raise node.error(f'both pos and fromto defined in {what}', 'fromto')
    pos, quat, half = orient.fromto_frame(vals['fromto'])
    if half < 1e-14:
      raise node.error('fromto points too close', 'fromto')
  else:
    pos = np.asarray(vals['pos'], float)
    quat = orient.frame_quat(vals, node, ctx.angle_scale, ctx.eulerseq)
    half = None
  return fpos + orient.rot_vec(fquat, pos), orient.quat_mul(fquat, quat), half


def _fromto_size(gtype, size, half):
  size = size.copy()
  if gtype in ('capsule', 'cylinder'):
    size[1] = half
  elif gtype in ('box', 'ellipsoid'):
    size[1] = size[0]
    size[2] = half
  return size


def _geoms(ctx: Ctx, bodies, out: dict):
  rows = []
  body_geomadr, body_geomnum = [], []
  for b in bodies:
    body_geomadr.append(len(rows) if b.geoms else -1)
    body_geomnum.append(len(b.geoms))
    for node, fpos, fquat, cc in b.geoms:
      v = ctx.defaults.resolve(node, 'geom', cc)
      gtype = v['type']
      if gtype == 'sdf':
        raise node.error("geom type 'sdf' is not supported yet by mjx_py", 'type')
      _check_geom_assets(v, node)
      if v['fromto'] is not None and gtype not in ('capsule', 'cylinder', 'box', 'ellipsoid'):
        raise node.error('fromto requires capsule, cylinder, box or ellipsoid geom', 'fromto')
      if v.get('mesh') is not None and v['fromto'] is not None:
        raise node.error('fromto cannot be used with mesh geom', 'fromto')
      pos, quat, half = _place(v, node, ctx, fpos, fquat, 'geom')
      dataid, extra = -1, {}
      if v.get('mesh') is not None:   # mesh geom, or primitive fitted to a mesh: see below
        dataid = ctx.lookup('mesh', v['mesh'], node, 'mesh')
        size = None
      elif gtype == 'hfield':
        dataid = ctx.lookup('hfield', v['hfield'], node, 'hfield')
        size, rbound, aabb = hfield.geom_size_rbound_aabb(out['hfield_size'][dataid])
        extra = dict(rbound=rbound, aabb=aabb)
      else:
        nreq = _NSIZE_FROMTO[gtype] if half is not None else compile_tree._NSIZE[gtype]
        size = _size_from(v, gtype, node, nreq)
        if gtype == 'plane' and not size[2] > 0:
          raise node.error('plane size(3) must be positive', 'size')
        if half is not None:
          size = _fromto_size(gtype, size, half)
      if v['condim'] not in (1, 3, 4, 6):
        raise node.error('invalid condim (must be 1, 3, 4 or 6)', 'condim')
      mass = v['mass']
      if (mass is not None and mass < 0) or v['density'] < 0:
        raise node.error('mass, inertia or density are negative in geom',
                         'mass' if mass is not None and mass < 0 else 'density')
      idx = len(rows)
      ctx.register('geom', v.get('name'), node, idx)
      rows.append(dict(node=node, v=v, type=gtype, body=b.id, pos=pos,
                       quat=orient.quat_normalize(quat), size=size, dataid=dataid, **extra))
  _mesh_assets(ctx, rows, out)
  ngeom = len(rows)
  out['ngeom'] = ngeom
  out['body_geomadr'] = np.array(body_geomadr, np.int32)
  out['body_geomnum'] = np.array(body_geomnum, np.int32)
  g = lambda key: [r['v'][key] for r in rows]  # noqa: E731
  out['geom_type'] = np.array([GEOM_TYPES.index(r['type']) for r in rows], np.int32)
  out['geom_contype'] = np.array(g('contype'), np.int32)
  out['geom_conaffinity'] = np.array(g('conaffinity'), np.int32)
  out['geom_condim'] = np.array(g('condim'), np.int32)
  out['geom_bodyid'] = np.array([r['body'] for r in rows], np.int32)
  out['geom_dataid'] = np.array([r['dataid'] for r in rows], np.int32)
  out['geom_matid'] = np.array([matid(ctx, r['v'], r['node']) for r in rows], np.int32)
  out['geom_group'] = np.array(g('group'), np.int32)
  out['geom_priority'] = np.array(g('priority'), np.int32)
  out['geom_solmix'] = np.array(g('solmix'), float)
  out['geom_solref'] = np.array(g('solref'), float).reshape(-1, 2)
  out['geom_solimp'] = np.array(g('solimp'), float).reshape(-1, 5)
  out['geom_size'] = np.array([r['size'] for r in rows], float).reshape(-1, 3)
  out['geom_pos'] = np.array([r['pos'] for r in rows], float).reshape(-1, 3)
  out['geom_quat'] = np.array([r['quat'] for r in rows], float).reshape(-1, 4)
  out['geom_friction'] = np.array(g('friction'), float).reshape(-1, 3)
  out['geom_margin'] = np.array(g('margin'), float)
  out['geom_gap'] = np.array(g('gap'), float)
  out['geom_rgba'] = np.array(g('rgba'), np.float32).reshape(-1, 4)
  out['geom_rbound'] = np.array([r['rbound'] if 'rbound' in r else _rbound(r['type'], r['size'])
                                 for r in rows], float)
  out['geom_aabb'] = np.array([r['aabb'] if 'aabb' in r else _aabb(r['type'], r['size'])
                               for r in rows], float).reshape(-1, 6)
  out['geom_fluid'] = np.array([_fluid(r['type'], r['size'], r['v']) for r in rows],
                               float).reshape(-1, 12)
  ctx.user_raw['geom'] = g('user')
  ctx.geom_rows = rows


_NSIZE_FROMTO = {'plane': 0, 'sphere': 1, 'capsule': 1, 'ellipsoid': 1, 'cylinder': 1, 'box': 1}
_FITTABLE = ('sphere', 'capsule', 'cylinder', 'ellipsoid', 'box')


def _check_geom_assets(v, node):
  """MuJoCo's pairing rules of geom type with the mesh and hfield attributes."""
  gtype, meshname, hfname = v['type'], v.get('mesh'), v.get('hfield')
  if gtype == 'mesh' and not meshname:
    raise node.error("geom type 'mesh' needs a 'mesh' attribute naming a mesh asset", 'type')
  if gtype == 'hfield' and not hfname:
    raise node.error("geom type 'hfield' needs an 'hfield' attribute naming an hfield asset",
                     'type')
  if hfname and gtype != 'hfield':
    raise node.error(f"the hfield attribute needs geom type 'hfield', not '{gtype}'", 'hfield')
  if meshname and gtype != 'mesh' and gtype not in _FITTABLE:
    raise node.error(f"geom type '{gtype}' cannot be fitted to mesh '{meshname}'", 'type')
  if gtype == 'mesh' and v['shellinertia'] == 'true':
    raise node.error('for mesh geoms, inertia should be specified in the mesh asset '
                     '(mesh inertia="shell")', 'shellinertia')


def _mesh_assets(ctx: Ctx, rows: list, out: dict):
  """Compiles the <mesh> assets, then the geoms that use them, in geom order.

  A mesh needs its convex hull when a colliding mesh geom uses it (then a degenerate hull is an
  error). Mesh geoms take the mesh offset (mesh_pos/quat) into their pose and their size,
  bounding sphere and box from the mesh; primitives with a mesh attribute are fitted to it
  (mesh.fit_geom, which may move the mesh offset, as in MuJoCo: hence geom order).
  """
  collide = {r['dataid'] for r in rows if r['type'] == 'mesh' and
             (r['v']['contype'] or r['v']['conaffinity'])}
  ctx.meshes = [mesh.compile_mesh(ctx, node, v, name, i in collide)
                for i, (node, (name, v)) in enumerate(zip(ctx.mesh_nodes, ctx.mesh_vals))]
  fitaabb = ctx.compiler['fitaabb'] == 'true'
  for r in rows:
    if r['size'] is not None:
      continue
    m, node, gtype = ctx.meshes[r['dataid']], r['node'], r['type']
    if gtype == 'mesh':
      r['size'], r['rbound'], r['aabb'] = mesh.geom_rbound_aabb(m)
      r['mesh'] = m
    else:
      r['size'] = mesh.fit_geom(m, gtype, fitaabb, r['v']['fitscale'], node)
      for i in range(compile_tree._NSIZE[gtype]):
        if not r['size'][i] > 0:
          raise node.error(f'size {i + 1} of the geom fitted to mesh \'{m.name}\' must be '
                           'positive', 'mesh')
    r['pos'] = r['pos'] + orient.rot_vec(r['quat'], m.pos)
    r['quat'] = orient.quat_mul(r['quat'], m.quat)
  out.update(mesh.model_fields(ctx.meshes))


def _rbound(gtype, s):
  if gtype == 'sphere':
    return s[0]
  if gtype == 'capsule':
    return s[0] + s[1]
  if gtype == 'cylinder':
    return math.sqrt(s[0] ** 2 + s[1] ** 2)
  if gtype == 'ellipsoid':
    return max(s[0], s[1], s[2])
  if gtype == 'box':
    return math.sqrt(s[0] ** 2 + s[1] ** 2 + s[2] ** 2)
  return 0.0


def _aabb(gtype, s):
  if gtype == 'sphere':
    half = (s[0], s[0], s[0])
  elif gtype == 'capsule':
    half = (s[0], s[0], s[0] + s[1])
  elif gtype == 'cylinder':
    half = (s[0], s[0], s[1])
  elif gtype in ('ellipsoid', 'box'):
    half = (s[0], s[1], s[2])
  else:  # plane: an infinite half-space below z = 0 (MuJoCo's convention)
    return (0.0, 0.0, -5e9, 1e10, 1e10, 5e9)
  return (0.0, 0.0, 0.0) + tuple(half)


def _fluid(gtype, size, v):
  fl = np.zeros(12)
  if v['fluidshape'] == 'ellipsoid':
    fl[0] = 1.0
    fl[1:6] = v['fluidcoef']
    semi = _semiaxes(gtype, size)
    fl[6:9], fl[9:12] = added_mass(semi)
  return fl


def _semiaxes(gtype, s):
  if gtype == 'sphere':
    return np.array([s[0], s[0], s[0]])
  if gtype == 'capsule':
    return np.array([s[0], s[0], s[1] + s[0]])
  if gtype == 'cylinder':
    return np.array([s[0], s[0], s[1]])
  return np.array(s[:3], float)


# 15-point Gauss-Kronrod weights and nodes for MuJoCo's added-mass integral over l in [0, inf),
# mapped from x in [0, 1] by l = x^3 / (1 - x)^2 (nodes _KRONROD_L, Jacobian dl/dx _KRONROD_D).
# These are MuJoCo's constants (mjCGeom::GetAddedMassKappa); geom_fluid matches only with them.
_KRONROD_W = (0.01146766, 0.03154605, 0.05239501, 0.07032663, 0.08450236, 0.09517529,
              0.10221647, 0.10474107, 0.10221647, 0.09517529, 0.08450236, 0.07032663,
              0.05239501, 0.03154605, 0.01146766)
_KRONROD_L = (7.865151709349917e-08, 1.7347976913907274e-05, 0.0003548008144506193,
              0.002846636252924549, 0.014094260903596077, 0.053063261727396636,
              0.17041978741317773, 0.5, 1.4036301548686991, 3.9353484827022642,
              11.644841677041734, 39.53187807410903, 177.5711362220801, 1429.4772912937397,
              54087.416549217705)
_KRONROD_D = (5.538677720489877e-05, 0.002080868285293228, 0.016514126520723166,
              0.07261900344370877, 0.23985243401862602, 0.6868318249020725,
              1.8551129519182894, 5.0, 14.060031152313941, 43.28941239611009,
              156.58546376397112, 747.9826085305024, 5827.4042950027115, 116754.0197944512,
              25482945.327264845)


def _kappa(dx, dy, dz, xp=np):
  """Lamb's added-mass coefficient for axis x of an ellipsoid with semi-axes (dx, dy, dz).

  kappa = dx dy dz * int_0^inf dl / ((dx^2 + l)^{3/2} sqrt((dy^2 + l)(dz^2 + l))), by MuJoCo's
  15-point quadrature with l scaled by (dx^3 dy dz)^(2/5) for conditioning. ``xp``: the array
  module (numpy here, jax.numpy in mjx_py.setconst, which applies it to edited geom sizes).
  """
  ix, iy, iz = 1.0 / (dx * dx), 1.0 / (dy * dy), 1.0 / (dz * dz)
  scale = (dx * dx * dx * dy * dz) ** 0.4
  kappa = 0.0
  for w, node, jac in zip(_KRONROD_W, _KRONROD_L, _KRONROD_D):
    lam = scale * node
    denom = (1 + lam * ix) * xp.sqrt((1 + lam * ix) * (1 + lam * iy) * (1 + lam * iz))
    kappa = kappa + scale * jac / denom * w
  return kappa * ix


def added_mass(semi, xp=np):
  """Virtual (added) mass (3,) and inertia (3,) of the equivalent ellipsoid with semi-axes
  ``semi`` (MuJoCo's rule); ``xp`` as in _kappa."""
  a, b, c = semi[0], semi[1], semi[2]
  kx, ky, kz = _kappa(a, b, c, xp), _kappa(b, c, a, xp), _kappa(c, a, b, xp)
  vol = 4.0 / 3.0 * xp.pi * a * b * c
  eps = 1e-14  # mjEPS clip of the denominators
  mass = xp.stack([vol * kx / xp.maximum(eps, 2 - kx), vol * ky / xp.maximum(eps, 2 - ky),
                   vol * kz / xp.maximum(eps, 2 - kz)])

  def fac(p, q, kp, kq):  # inertia factor about the axis normal to semi-axes p, q
    return (p * p - q * q) ** 2 * xp.abs(kq - kp) / xp.maximum(
        eps, xp.abs(2 * (p * p - q * q) + (p * p + q * q) * (kp - kq)))
  inertia = xp.stack([vol * fac(b, c, ky, kz) / 5, vol * fac(c, a, kz, kx) / 5,
                      vol * fac(a, b, kx, ky) / 5])
  return mass, inertia


def _sites(ctx: Ctx, bodies, out: dict):
  rows = []
  for b in bodies:
    for node, fpos, fquat, cc in b.sites:
      v = ctx.defaults.resolve(node, 'site', cc)
      if v['fromto'] is not None and v['type'] not in ('capsule', 'cylinder', 'box',
                                                       'ellipsoid'):
        raise node.error('fromto requires capsule, cylinder, box or ellipsoid site', 'fromto')
      pos, quat, half = _place(v, node, ctx, fpos, fquat, 'site')
      size = np.array(v['size'], float)
      if half is not None:
        size = _fromto_size(v['type'], size, half)
      ctx.register('site', v.get('name'), node, len(rows))
      rows.append(dict(v=v, body=b.id, pos=pos, quat=orient.quat_normalize(quat), size=size,
                       node=node))
  out['nsite'] = len(rows)
  out['site_type'] = np.array([GEOM_TYPES.index(r['v']['type']) for r in rows], np.int32)
  out['site_bodyid'] = np.array([r['body'] for r in rows], np.int32)
  out['site_group'] = np.array([r['v']['group'] for r in rows], np.int32)
  out['site_size'] = np.array([r['size'] for r in rows], float).reshape(-1, 3)
  out['site_pos'] = np.array([r['pos'] for r in rows], float).reshape(-1, 3)
  out['site_quat'] = np.array([r['quat'] for r in rows], float).reshape(-1, 4)
  out['site_rgba'] = np.array([r['v']['rgba'] for r in rows], np.float32).reshape(-1, 4)
  out['site_matid'] = np.array([matid(ctx, r['v'], r['node']) for r in rows], np.int32)
  ctx.user_raw['site'] = [r['v']['user'] for r in rows]
  ctx.site_rows = rows


def _cameras_lights(ctx: Ctx, bodies, out: dict):
  cams, lights = [], []
  for b in bodies:
    for node, fpos, fquat, cc in b.cams:
      v = ctx.defaults.resolve(node, 'camera', cc)
      _check_camera_sensor(node)
      pos, quat, _ = _place(dict(v, fromto=None), node, ctx, fpos, fquat, 'camera')
      ctx.register('camera', v.get('name'), node, len(cams))
      cams.append(dict(v=v, node=node, body=b.id, pos=pos, quat=orient.quat_normalize(quat)))
    for node, fpos, fquat, cc in b.lights:
      v = ctx.defaults.resolve(node, 'light', cc)
      d = np.asarray(v['dir'], float)
      n = np.linalg.norm(d)
      if n < 1e-14:
        raise node.error('light direction too small', 'dir')
      ctx.register('light', v.get('name'), node, len(lights))
      lights.append(dict(v=v, node=node, body=b.id, pos=fpos + orient.rot_vec(fquat, v['pos']),
                         dir=orient.rot_vec(fquat, d / n)))
  for kind, rows in (('camera', cams), ('light', lights)):
    for r in rows:
      mode = r['v']['mode']
      r['target'] = -1
      if mode.startswith('target'):
        tgt = r['v'].get('target')
        if not tgt:
          raise r['node'].error(f'target body required for {kind} mode {mode}', 'target')
        r['target'] = ctx.lookup('body', tgt, r['node'], 'target')
  out['ncam'] = len(cams)
  out['cam_mode'] = np.array([CAMLIGHT_MODES.index(r['v']['mode']) for r in cams], np.int32)
  out['cam_bodyid'] = np.array([r['body'] for r in cams], np.int32)
  out['cam_targetbodyid'] = np.array([r['target'] for r in cams], np.int32)
  out['cam_pos'] = np.array([r['pos'] for r in cams], float).reshape(-1, 3)
  out['cam_quat'] = np.array([r['quat'] for r in cams], float).reshape(-1, 4)
  out['cam_orthographic'] = np.array([int(r['v']['orthographic'] == 'true') for r in cams],
                                     np.int32)
  znear = _visual_value(ctx, 'map', 'znear', 0.01)
  for r in cams:
    r['intrinsic'] = _intrinsic(r, znear)
  out['cam_fovy'] = np.array([_fovy(r) for r in cams], float)
  out['cam_ipd'] = np.array([r['v']['ipd'] for r in cams], float)
  out['cam_resolution'] = np.array([r['v']['resolution'] for r in cams], np.int32).reshape(-1, 2)
  out['cam_sensorsize'] = np.array([r['v']['sensorsize'] for r in cams],
                                   np.float32).reshape(-1, 2)
  out['cam_intrinsic'] = np.array([r['intrinsic'] for r in cams], np.float32).reshape(-1, 4)
  ctx.user_raw['cam'] = [r['v']['user'] for r in cams]
  out['nlight'] = len(lights)
  lv = lambda k: [r['v'][k] for r in lights]  # noqa: E731
  out['light_mode'] = np.array([CAMLIGHT_MODES.index(m) for m in lv('mode')], np.int32)
  out['light_bodyid'] = np.array([r['body'] for r in lights], np.int32)
  out['light_targetbodyid'] = np.array([r['target'] for r in lights], np.int32)
  out['light_pos'] = np.array([r['pos'] for r in lights], float).reshape(-1, 3)
  out['light_dir'] = np.array([r['dir'] for r in lights], float).reshape(-1, 3)
  out['light_type'] = np.array(
      [1 if r['v']['directional'] == 'true' else LIGHT_TYPES.index(r['v']['type'])
       for r in lights], np.int32)
  out['light_castshadow'] = np.array([int(x == 'true') for x in lv('castshadow')], np.uint8)
  out['light_active'] = np.array([int(x == 'true') for x in lv('active')], np.uint8)
  ctx.cam_rows, ctx.light_rows = cams, lights


def _check_camera_sensor(node: Node):
  """MuJoCo's reader rules for a camera's physical sensor attributes (on the element itself)."""
  given = node.vals
  if 'fovy' in given and 'sensorsize' in given:
    raise node.error("either 'fovy' or 'sensorsize' attribute can be specified, not both",
                     'fovy')
  lens = [k for k in ('focal', 'focalpixel', 'principal', 'principalpixel') if k in given]
  if lens and 'sensorsize' not in given:
    raise node.error("required attribute missing: 'sensorsize'", lens[0])
  if 'sensorsize' in given and 'resolution' not in given:
    raise node.error("required attribute missing: 'resolution'", 'sensorsize')


def _visual_value(ctx: Ctx, sub: str, attr: str, default):
  """A <visual> attribute (the last <visual><sub attr=...> given), else MuJoCo's default."""
  value = default
  for vis in ctx.sections.get('visual', []):
    for node in vis.find(sub):
      value = node.vals.get(attr, value)
  return value


def _load_atan2f():
  """The C library's single-precision atan2f, or numpy's float32 arctan2 where there is none.

  MuJoCo evaluates a camera's fovy with the C library's atan2f on float32 arguments, which is
  not always correctly rounded (glibc differs from numpy by one float32 ulp on some inputs).
  """
  try:
    libm = ctypes.CDLL(ctypes.util.find_library('m') or 'libm.so.6')
    fn = libm.atan2f
  except (OSError, AttributeError):
    return lambda y, x: float(np.arctan2(np.float32(y), np.float32(x)))
  fn.restype = ctypes.c_float
  fn.argtypes = [ctypes.c_float, ctypes.c_float]
  return fn


_atan2f = _load_atan2f()


def _fovy(r):
  """Vertical field of view in degrees; a physical sensor size implies it from the focal length.

  As MuJoCo: atan2f of the float32 half sensor height and focal length, scaled in double.
  """
  v = r['v']
  ss = np.array(v['sensorsize'], np.float32)
  if ss[0] > 0 and ss[1] > 0:
    half = ss[1] / np.float32(2)
    return float(_atan2f(half, r['intrinsic'][1])) * 360.0 / math.pi
  return v['fovy']


def _intrinsic(r, znear: float):
  """cam_intrinsic (focal x, y, principal x, y; float32 like MuJoCo's mjsCamera).

  With a sensor size, lengths come from focal/principal, or from focalpixel/principalpixel
  divided by the pixel density resolution / sensorsize (all float32 arithmetic); a pixel value
  given explicitly replaces the length. Without one, the focal lengths are visual/map znear.
  """
  v, given = r['v'], r['node'].vals
  f32 = np.float32
  focal = np.array(v['focal'], f32)
  principal = np.array(v['principal'], f32)
  ss = np.array(v['sensorsize'], f32)
  if not (ss[0] > 0 and ss[1] > 0):
    return np.array([znear, znear, principal[0], principal[1]], f32)
  density = np.array(v['resolution'], f32) / ss
  if 'focalpixel' in given:
    focal = np.array(v['focalpixel'], f32) / density
  if 'principalpixel' in given:
    principal = np.array(v['principalpixel'], f32) / density
  return np.array([focal[0], focal[1], principal[0], principal[1]], f32)


# ---------------------------------------------------------------------------------------------
# Mass and inertia.

def _inertia(ctx: Ctx, bodies, out: dict):
  """Body mass, centre of mass and principal inertia (MuJoCo's mjCBody::Compile rules).

  The geoms in inertiagrouprange define the inertial frame when inertiafromgeom is 'true', or
  'auto' and the body has no <inertial>; otherwise the <inertial> does. When neither defines it
  (no <inertial>, no selected geom), MuJoCo copies the body's own pos/quat attributes (before
  any <frame> is applied) into ipos/iquat, with zero mass and inertia.
  """
  nbody = len(bodies)
  mass = np.zeros(nbody)
  ipos = np.zeros((nbody, 3))
  iquat = np.tile([1.0, 0, 0, 0], (nbody, 1))
  inertia = np.zeros((nbody, 3))
  mode = ctx.compiler['inertiafromgeom']
  lo, hi = ctx.compiler['inertiagrouprange']
  geoms_by_body: dict[int, list] = {}
  for gi, r in enumerate(ctx.geom_rows):
    geoms_by_body.setdefault(r['body'], []).append(gi)
  # what mjx_py.massprops needs to infer them again from edited geoms (engine-only fields)
  ngeom = len(ctx.geom_rows)
  geom_mode = np.zeros(ngeom, np.int32)
  from_geoms = np.zeros(nbody, np.int32)
  for b in bodies[1:]:
    frame = None
    if b.inertial is not None:
      frame = _explicit_inertial(ctx, b.inertial)
    if mode == 'true' or (mode == 'auto' and b.inertial is None):
      ids = [gi for gi in geoms_by_body.get(b.id, [])
             if lo <= ctx.geom_rows[gi]['v']['group'] <= hi]
      if ids:
        frame = _combine([_geom_mass(ctx.geom_rows[gi]) for gi in ids], b)
        from_geoms[b.id] = 1
        for gi in ids:
          geom_mode[gi] = 2 if ctx.geom_rows[gi]['v']['shellinertia'] == 'true' else 1
    if frame is None:
      frame = (0.0, b.lpos, b.lquat, np.zeros(3))
    mass[b.id], ipos[b.id], iquat[b.id], inertia[b.id] = frame
  # bounds, balance, totals
  c = ctx.compiler
  for b in bodies[1:]:
    i = b.id
    if c['boundmass'] > 0 and mass[i] < c['boundmass']:
      mass[i] = c['boundmass']
    if c['boundinertia'] > 0:
      inertia[i] = np.maximum(inertia[i], c['boundinertia'])
    if mass[i] < 0 or np.any(inertia[i] < 0):
      raise b.node.error('mass and inertia cannot be negative')
    d = inertia[i]
    if d[0] + d[1] < d[2] - 1e-12 * abs(d[2]) or d[0] + d[2] < d[1] - 1e-12 * abs(d[1]) or \
       d[1] + d[2] < d[0] - 1e-12 * abs(d[0]):
      if c['balanceinertia'] == 'true':
        inertia[i] = d.mean()
      else:
        node = b.inertial or b.node
        raise node.error("inertia must satisfy A + B >= C; use 'balanceinertia' to fix")
  if c['settotalmass'] > 0:
    total = mass.sum()
    if total > 0:
      scale = c['settotalmass'] / total
      mass *= scale
      inertia *= scale
  out['body_mass'] = mass
  out['body_ipos'] = ipos
  out['body_iquat'] = iquat
  out['body_inertia'] = inertia
  out['body_inertiafromgeom'] = from_geoms
  out['geom_inertiamode'] = geom_mode
  out['geom_density'] = np.array([r['v']['density'] for r in ctx.geom_rows], float)
  out['geom_mass'] = np.array([-1.0 if r['v']['mass'] is None else r['v']['mass']
                               for r in ctx.geom_rows], float)
  out['geom_meshinertia'] = np.array(
      [[r['mesh'].volume, *mesh.unit_inertia(r['mesh'])] if r['type'] == 'mesh' else [0.0] * 4
       for r in ctx.geom_rows], float).reshape(-1, 4)
  out['inertia_opts'] = (float(c['boundmass']), float(c['boundinertia']),
                         int(c['balanceinertia'] == 'true'), float(c['settotalmass']))
  # geom-level sameframe / body sameframe are set in _topology


def _explicit_inertial(ctx, node: Node):
  v = node.vals
  m = v['mass']
  if m < 0:
    raise node.error('mass and inertia cannot be negative', 'mass')
  pos = np.asarray(v['pos'], float)
  if 'fullinertia' in v:
    if 'diaginertia' in v:
      raise node.error('fullinertia and diagonal inertia cannot both be specified',
                       'fullinertia')
    if any(k in v for k in ('quat', 'axisangle', 'xyaxes', 'zaxis', 'euler')):
      raise node.error('fullinertia and orientation cannot both be specified', 'fullinertia')
    f = v['fullinertia']
    full = np.array([[f[0], f[3], f[4]], [f[3], f[1], f[5]], [f[4], f[5], f[2]]])
    vals, quat = orient.eig3(full)
    if vals[2] < orient.EPS:  # smallest eigenvalue (eig3 sorts them in decreasing order)
      raise node.error("error 'inertia must have positive eigenvalues' in fullinertia",
                       'fullinertia')
    return m, pos, quat, vals
  diag = np.asarray(v.get('diaginertia', (0.0, 0.0, 0.0)), float)
  if np.any(diag < 0):
    raise node.error('mass and inertia cannot be negative', 'diaginertia')
  quat = orient.frame_quat(v, node, ctx.angle_scale, ctx.eulerseq)
  return m, pos, quat, diag


def _geom_mass(r):
  """(mass, pos, quat, diag inertia) of one geom in the body frame."""
  v = r['v']
  shell = v['shellinertia'] == 'true'
  if r['type'] == 'mesh':   # the mesh's volume (area for inertia="shell") and inertia box
    vol, unit_inertia = r['mesh'].volume, mesh.unit_inertia(r['mesh'])
  else:
    vol, unit_inertia = compile_tree.geom_volume_inertia(r['type'], r['size'], shell)
  if v['mass'] is not None:
    m = v['mass'] if vol > 1e-14 else 0.0  # MuJoCo ignores a given mass on a volume-less geom
  else:
    m = v['density'] * vol
  return m, r['pos'], r['quat'], unit_inertia * m


def _combine(parts, body):
  """Mass frame of several geoms (mjCBody::InertiaFromGeom, in its order of operations)."""
  if len(parts) == 1:
    m, p, q, d = parts[0]
    return m, np.asarray(p, float), np.asarray(q, float), np.asarray(d, float)
  total, com = 0.0, [0.0, 0.0, 0.0]
  for m, pos, _, _ in parts:
    total += m
    for k in range(3):
      com[k] += m * pos[k]
  if total < orient.EPS:
    raise body.node.error('body mass is too small, cannot compute center of mass')
  ipos = [c / total for c in com]
  toti = [0.0] * 6  # (xx, yy, zz, xy, xz, yz) about ipos
  for m, pos, quat, diag in parts:
    inert0 = orient.global_inertia(diag, quat)
    inert1 = orient.offcenter_inertia(m, [pos[k] - ipos[k] for k in range(3)])
    toti = [toti[j] + inert0[j] + inert1[j] for j in range(6)]
  full = [[toti[0], toti[3], toti[4]], [toti[3], toti[1], toti[5]], [toti[4], toti[5], toti[2]]]
  vals, quat = orient.eig3(full)
  return total, np.array(ipos), quat, vals


def _aligns_free(ctx: Ctx, b, has_children: bool) -> bool:
  """Whether MuJoCo moves this body's frame onto its inertial frame (free-joint alignment).

  Applies to a childless body whose only joint is free, with freejoint align="true", or
  align="auto" (also any <joint type="free">) and compiler alignfree="true".
  """
  if len(b.joints) != 1 or has_children:
    return False
  node = b.joints[0][0]
  if node.tag == 'joint':
    if ctx.defaults.resolve(node, 'joint', b.joints[0][3])['type'] != 'free':
      return False
    align = 'auto'
  else:
    align = node.vals.get('align', 'auto')
  return align == 'true' or (align == 'auto' and ctx.compiler['alignfree'] == 'true')


def _align_free(ctx: Ctx, bodies, out: dict):
  """Free-joint alignment: the body frame becomes the inertial frame (ipos 0, iquat identity).

  Body pose <- body pose * inertial pose; the body's geoms, sites, cameras and lights are
  re-expressed in the new frame through the inverse inertial pose; the free joint's qpos0 and
  qpos_spring (which hold the body pose) follow.
  """
  parents = {b.parent for b in bodies}
  for b in bodies[1:]:
    i = b.id
    if not _aligns_free(ctx, b, i in parents):
      continue
    ipos, iquat = out['body_ipos'][i].copy(), out['body_iquat'][i].copy()
    quat = out['body_quat'][i]
    out['body_pos'][i] = out['body_pos'][i] + orient.rot_vec(quat, ipos)
    out['body_quat'][i] = orient.quat_normalize(orient.quat_mul(quat, iquat))
    out['body_ipos'][i] = 0.0
    out['body_iquat'][i] = (1.0, 0.0, 0.0, 0.0)
    inv_quat = orient.quat_conj(iquat)
    inv_pos = -orient.rot_vec(inv_quat, ipos)
    for kind, rot_key in (('geom', 'geom_quat'), ('site', 'site_quat'), ('cam', 'cam_quat'),
                          ('light', None)):
      for k in np.flatnonzero(out[f'{kind}_bodyid'] == i):
        out[f'{kind}_pos'][k] = inv_pos + orient.rot_vec(inv_quat, out[f'{kind}_pos'][k])
        if rot_key is not None:
          out[rot_key][k] = orient.quat_mul(inv_quat, out[rot_key][k])
        else:
          out['light_dir'][k] = orient.rot_vec(inv_quat, out['light_dir'][k])
    adr = out['jnt_qposadr'][out['body_jntadr'][i]]  # free joint qpos: pos (3), quat (4)
    for key in ('qpos0', 'qpos_spring'):
      out[key][adr:adr + 3] = out['body_pos'][i]
      out[key][adr + 3:adr + 7] = out['body_quat'][i]


# ---------------------------------------------------------------------------------------------
# Topology and derived per-body data.

def _topology(ctx: Ctx, bodies, out: dict):
  nbody = len(bodies)
  parent = out['body_parentid']
  jntnum = out['body_jntnum']
  rootid = np.zeros(nbody, np.int32)
  weldid = np.zeros(nbody, np.int32)
  treeid = -np.ones(nbody, np.int32)
  ntree = 0
  for i in range(1, nbody):
    rootid[i] = i if parent[i] == 0 else rootid[parent[i]]
    weldid[i] = i if jntnum[i] > 0 else weldid[parent[i]]
  # kinematic trees: each moving body whose parent is welded to the world starts a tree
  for i in range(1, nbody):
    if weldid[i] == 0:
      continue
    if weldid[parent[i]] == 0:
      treeid[i] = ntree
      ntree += 1
    else:
      treeid[i] = treeid[parent[i]]
  out['body_rootid'] = rootid
  out['body_weldid'] = weldid
  out['body_treeid'] = treeid
  out['ntree'] = ntree
  out['dof_treeid'] = np.array([treeid[b] for b in out['dof_bodyid']], np.int32)
  # planes must be static
  for r in ctx.geom_rows:
    if r['type'] == 'plane' and weldid[r['body']] != 0:
      raise r['node'].error('plane only allowed in static bodies', 'type')
  # moving bodies need mass
  for b in bodies[1:]:
    if out['body_dofnum'][b.id] > 0 and not _subtree_has_mass(out, b.id, bodies):
      raise b.node.error('mass and inertia of moving bodies must be larger than mjMINVAL')
  # contact filter aggregates
  contype = np.zeros(nbody, np.int32)
  conaff = np.zeros(nbody, np.int32)
  margin = np.zeros(nbody)
  for gi, r in enumerate(ctx.geom_rows):
    contype[r['body']] |= out['geom_contype'][gi]
    conaff[r['body']] |= out['geom_conaffinity'][gi]
    margin[r['body']] = max(margin[r['body']], out['geom_margin'][gi])
  out['body_contype'] = contype
  out['body_conaffinity'] = conaff
  out['body_margin'] = margin
  out['ngravcomp'] = int(np.sum(out['body_gravcomp'] != 0))
  out['body_sameframe'] = np.array(
      [_sameframe(np.zeros(3), np.array([1.0, 0, 0, 0]), out['body_ipos'][i],
                  out['body_iquat'][i], body=True) for i in range(nbody)], np.uint8)
  gb = out['geom_bodyid']
  out['geom_sameframe'] = np.array(
      [_sameframe(out['geom_pos'][i], out['geom_quat'][i], out['body_ipos'][gb[i]],
                  out['body_iquat'][gb[i]]) for i in range(out['ngeom'])], np.uint8)
  sb = out['site_bodyid']
  out['site_sameframe'] = np.array(
      [_sameframe(out['site_pos'][i], out['site_quat'][i], out['body_ipos'][sb[i]],
                  out['body_iquat'][sb[i]]) for i in range(out['nsite'])], np.uint8)


def _subtree_has_mass(out, bid, bodies):
  """A moving body needs mass itself, or through a chain of welded (joint-less) descendants."""
  def ok(i):
    return out['body_mass'][i] >= MINVAL and np.all(out['body_inertia'][i] >= MINVAL)
  if ok(bid):
    return True
  stack = [b.id for b in bodies if b.parent == bid and out['body_jntnum'][b.id] == 0]
  while stack:
    i = stack.pop()
    if ok(i):
      return True
    stack += [b.id for b in bodies if b.parent == i and out['body_jntnum'][b.id] == 0]
  return False


def _sameframe(pos, quat, ipos, iquat, body=False):
  """MuJoCo's mjtSameFrame: 0 none, 1 body, 2 inertia, 3 body rotation, 4 inertia rotation."""
  ident = np.array([1.0, 0, 0, 0])
  if body:  # comparing the inertial frame with the body frame
    if np.allclose(ipos, 0, atol=MINVAL, rtol=0) and np.allclose(iquat, ident, atol=MINVAL,
                                                                  rtol=0):
      return 1
    if np.allclose(iquat, ident, atol=MINVAL, rtol=0):
      return 3
    return 0
  if np.allclose(pos, 0, atol=MINVAL, rtol=0) and np.allclose(quat, ident, atol=MINVAL, rtol=0):
    return 1
  if np.allclose(quat, ident, atol=MINVAL, rtol=0):
    return 3
  if np.allclose(pos, ipos, atol=MINVAL, rtol=0) and np.allclose(quat, iquat, atol=MINVAL,
                                                                  rtol=0):
    return 2
  if np.allclose(quat, iquat, atol=MINVAL, rtol=0):
    return 4
  return 0


def _user_arrays(ctx: Ctx, out: dict):
  """``*_user`` arrays padded to nuser_* (size attribute, or the longest user array)."""
  for key, field_name, size_key in (
      ('body', 'body_user', 'nuser_body'), ('jnt', 'jnt_user', 'nuser_jnt'),
      ('geom', 'geom_user', 'nuser_geom'), ('site', 'site_user', 'nuser_site'),
      ('cam', 'cam_user', 'nuser_cam'), ('tendon', 'tendon_user', 'nuser_tendon'),
      ('actuator', 'actuator_user', 'nuser_actuator'), ('sensor', 'sensor_user', 'nuser_sensor')):
    rows = ctx.user_raw.get(key, [])
    n = ctx.size[size_key]
    longest = max((len(r) for r in rows), default=0)
    if n == -1:
      n = longest
    elif longest > n:
      node = (ctx.sections.get('size') or [ctx.root])[-1]
      raise node.error(f'user has more values than {size_key}', size_key)
    arr = np.zeros((len(rows), n))
    for i, r in enumerate(rows):
      arr[i, :len(r)] = r
    out[field_name] = arr
    out[size_key] = n


def _finalize_constants(ctx: Ctx, out: dict):
  """Constants MuJoCo derives at qpos0 (mj_setConst), then springdamper."""
  model = _AsModel(out)
  consts = setconst.set_const(model)
  for k, val in consts.items():
    out[k] = val
  out['body_simple'] = setconst.body_simple(model).astype(np.uint8)
  out['dof_simplenum'] = _dof_simplenum(out['body_simple'], out['dof_bodyid'])
  # <statistic> values given in the model replace the computed ones
  for k, val in ctx.statistic.items():
    if val is not None:
      out[f'stat_{k}'] = np.array(val, float)
  # springdamper: stiffness and damping from (timeconst, dampratio) and the joint's invweight
  for j, sd in enumerate(ctx.springdamper):
    if sd is None:
      continue
    adr = out['jnt_dofadr'][j]
    nd = {0: 6, 1: 3, 2: 1, 3: 1}[int(out['jnt_type'][j])]
    inertia = nd / np.sum(out['dof_invweight0'][adr:adr + nd])
    tc, dr = sd
    out['jnt_stiffness'][j] = inertia / (tc * tc * dr * dr)
    out['dof_damping'][adr:adr + nd] = 2 * inertia / tc


def _dof_simplenum(body_simple, dof_bodyid):
  """Number of consecutive dofs from each dof on (itself included) that belong to simple bodies."""
  num = np.zeros(len(dof_bodyid), np.int32)
  count = 0
  for i in range(len(dof_bodyid) - 1, -1, -1):  # backwards: each run is counted from its end
    count = count + 1 if body_simple[dof_bodyid[i]] else 0
    num[i] = count
  return num


class _AsModel:
  """Attribute view of the compiled dict (``opt_x`` reachable as ``opt.x``, ``stat``)."""

  def __init__(self, d: dict):
    self.__dict__.update(d)
    self.opt = type('Opt', (), {k[4:]: v for k, v in d.items() if k.startswith('opt_')})()
