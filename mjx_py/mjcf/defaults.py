"""Default classes (MuJoCo's CSS-like `<default>` mechanism) and attribute resolution.

Every class holds one *dummy* per defaultable element (joint, geom, site, camera, light, pair,
equality, tendon, general, mesh, material); actuator shortcuts all write the single ``general``
dummy. A nested class starts as a copy of its parent; the top-level class is ``main``. An
element's attributes are its class dummy's values overlaid by what the element writes
(partial arrays replace only their leading entries).
"""

from __future__ import annotations

import copy
import math

from . import schema
from .xmlnode import Node

# dummy name -> schema kind that lists its full attribute set (and internal defaults)
DUMMY_KIND = {
    'joint': 'body/joint', 'geom': 'body/geom', 'site': 'body/site', 'camera': 'camera',
    'light': 'light', 'pair': 'pair', 'equality': 'default/equality', 'tendon': 'spatial',
    'general': 'general', 'mesh': 'mesh', 'material': 'material',
}
SHORTCUTS = ('motor', 'position', 'velocity', 'intvelocity', 'damper', 'cylinder', 'muscle',
             'adhesion')


def internal_defaults(kind: str) -> dict:
  """Attribute values an element of ``kind`` has before any class or explicit setting."""
  return {name: spec.default for name, spec in schema.ATTRS[kind].items()}


def overlay(base: dict, node: Node, kind: str | None = None, names=None) -> dict:
  """Writes node's explicit values into ``base`` (in place); partial arrays overlay a prefix."""
  attrs = schema.ATTRS[kind or node.kind]
  for name, value in node.vals.items():
    if names is not None and name not in names:
      continue
    spec = attrs[name]
    if spec.partial and isinstance(value, tuple) and spec.n and len(value) < spec.n:
      old = base.get(name)
      old = tuple(old) if old is not None else tuple(spec.default or (0.0,) * spec.n)
      value = tuple(value) + old[len(value):]
    base[name] = value
  return base


class Defaults:
  """All default classes of a model: ``classes[name][dummy] -> {attr: value}``."""

  def __init__(self):
    main = {d: internal_defaults(k) for d, k in DUMMY_KIND.items()}
    main['general']['inheritrange'] = 0.0
    self.classes = {'main': main}

  def add_top(self, node: Node):
    name = node.vals.get('class', 'main')
    if name != 'main':
      raise node.error("top-level default class 'main' cannot be renamed", 'class')
    self._fill(node, 'main')

  def _fill(self, node: Node, name: str):
    cls = self.classes[name]
    # MuJoCo applies all of a class's own settings before any nested class copies it.
    for child in node.children:
      if child.tag == 'default':
        continue
      if child.tag in SHORTCUTS or child.tag == 'general':
        apply_actuator(cls['general'], child, child.tag)
      else:
        overlay(cls[child.tag], child)
    for child in node.children:
      if child.tag != 'default':
        continue
      sub = child.vals.get('class')
      if not sub:
        raise child.error('empty class name', 'class')
      if sub in self.classes:
        raise child.error(f"repeated default class name '{sub}'", 'class')
      self.classes[sub] = copy.deepcopy(cls)
      self._fill(child, sub)

  def get(self, node: Node, name: str):
    cls = self.classes.get(name)
    if cls is None:
      raise node.error(f"unknown default class name '{name}'", 'class')
    return cls

  def resolve(self, node: Node, dummy: str, childclass: str | None) -> dict:
    """Full attribute dict of an element: class dummy values overlaid by explicit ones."""
    name = node.vals.get('class') or childclass or 'main'
    base = copy.deepcopy(self.get(node, name)[dummy])
    for k, v in internal_defaults(node.kind).items():
      base.setdefault(k, v)
    return overlay(base, node)


# ---------------------------------------------------------------------------------------------
# Actuators: the general element and its shortcuts, written into a general-style dict.

_COMMON = set(schema.ATTRS['actuator/motor']) - {'name', 'class'}


def _set(vec, i, value):
  vec = list(vec)
  vec[i] = float(value)
  return tuple(vec)


def apply_actuator(a: dict, node: Node, tag: str) -> dict:
  """Applies an actuator element (general or a shortcut) to general-style dict ``a``, in place.

  Mirrors MuJoCo 3.3.3's reader: common attributes first, then the shortcut's mapping onto
  dyn/gain/bias parameters, where omitted shortcut parameters are read back from ``a``.
  """
  kind = node.kind
  if tag == 'general':
    overlay(a, node, kind)
    return a
  overlay(a, node, kind, names=_COMMON | {'name', 'class', 'actrange'})
  v = node.vals
  err = node.error
  if tag == 'motor':
    a['gainprm'] = _set(a['gainprm'], 0, 1.0)
    a.update(dyntype='none', gaintype='fixed', biastype='none')
  elif tag in ('position', 'intvelocity'):
    kp = v.get('kp', a['gainprm'][0])
    a['gainprm'] = _set(a['gainprm'], 0, kp)
    a['biasprm'] = _set(a['biasprm'], 1, -kp)
    if 'kv' in v and 'dampratio' in v:
      raise err('kv and dampratio cannot both be defined', 'kv')
    if 'kv' in v:
      if v['kv'] < 0:
        raise err('kv cannot be negative', 'kv')
      a['biasprm'] = _set(a['biasprm'], 2, -v['kv'])
    if 'dampratio' in v:
      if v['dampratio'] < 0:
        raise err('dampratio cannot be negative', 'dampratio')
      a['biasprm'] = _set(a['biasprm'], 2, v['dampratio'])
    if 'timeconst' in v:
      if v['timeconst'] < 0:
        raise err('timeconst cannot be negative', 'timeconst')
      a['dynprm'] = _set(a['dynprm'], 0, v['timeconst'])
      a['dyntype'] = 'filterexact' if v['timeconst'] > 0 else 'none'
    if 'inheritrange' in v:
      a['inheritrange'] = v['inheritrange']
    a.update(gaintype='fixed', biastype='affine')
    if tag == 'intvelocity':
      a.update(dyntype='integrator', actlimited='true')
  elif tag == 'velocity':
    kv = v.get('kv', a['gainprm'][0])
    a['biasprm'] = (0.0, 0.0, -kv) + (0.0,) * 7
    a['gainprm'] = _set(a['gainprm'], 0, kv)
    a.update(dyntype='none', gaintype='fixed', biastype='affine')
  elif tag == 'damper':
    kv = v.get('kv', 0.0)
    if kv < 0:
      raise err('damping coefficient cannot be negative', 'kv')
    a['gainprm'] = (0.0, 0.0, -kv) + (0.0,) * 7
    a.update(dyntype='none', gaintype='affine', biastype='none', ctrllimited='true')
  elif tag == 'cylinder':
    timeconst = v.get('timeconst', a['dynprm'][0])
    area = v.get('area', a['gainprm'][0])
    if 'diameter' in v:
      area = math.pi / 4 * v['diameter'] ** 2
    a['dynprm'] = _set(a['dynprm'], 0, timeconst)
    a['gainprm'] = _set(a['gainprm'], 0, area)
    if 'bias' in v:
      # Deliberately mirrors MuJoCo 3.3.3's reader: of the three required 'bias' values only
      # the first reaches biasprm; biasprm[1:3] keep what the class (or general) had.
      a['biasprm'] = _set(a['biasprm'], 0, v['bias'][0])
    a.update(dyntype='filter', gaintype='fixed', biastype='affine')
  elif tag == 'muscle':
    dyn, gain = list(a['dynprm']), list(a['gainprm'])
    # MuJoCo substitutes the muscle defaults only where the value still equals the general one.
    for i, (general, muscle) in enumerate([(1, 0.01), (0, 0.04)]):
      if dyn[i] == general:
        dyn[i] = muscle
    for i, (general, muscle) in enumerate([(1, 0.75), (0, 1.05), (0, -1), (0, 200), (0, 0.5),
                                           (0, 1.6), (0, 1.5), (0, 1.3), (0, 1.2)]):
      if gain[i] == general:
        gain[i] = muscle
    if 'timeconst' in v:
      dyn[:len(v['timeconst'])] = v['timeconst']
    if 'tausmooth' in v:
      if v['tausmooth'] < 0:
        raise err('muscle tausmooth cannot be negative', 'tausmooth')
      dyn[2] = v['tausmooth']
    if 'range' in v:
      gain[0:2] = v['range']
    for i, key in enumerate(('force', 'scale', 'lmin', 'lmax', 'vmax', 'fpmax', 'fvmax')):
      if key in v:
        gain[2 + i] = v[key]
    a['dynprm'] = tuple(float(x) for x in dyn)
    a['gainprm'] = tuple(float(x) for x in gain)
    a['biasprm'] = tuple(gain[:9]) + tuple(a['biasprm'][9:])
    a['biasprm'] = tuple(float(x) for x in a['biasprm'])
    a.update(dyntype='muscle', gaintype='muscle', biastype='muscle')
  elif tag == 'adhesion':
    gain = v.get('gain', a['gainprm'][0])
    if gain < 0:
      raise err('adhesion gain cannot be negative', 'gain')
    a['gainprm'] = _set(a['gainprm'], 0, gain)
    a.update(gaintype='fixed', biastype='none', ctrllimited='true')
  return a
