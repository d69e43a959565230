"""Compiling the kinematic tree: bodies, joints/dofs, geoms, sites, cameras, lights, inertia.

Host only (numpy). Bodies are numbered depth-first in document order (world = 0, parents before
children); joints, geoms, sites, cameras and lights are numbered body by body, in document order
within a body, which is MuJoCo's order. ``<frame>`` elements are dissolved here: their pose is
composed into the pose of each child (and into joint anchors and axes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from . import orient
from .xmlnode import Node

MINVAL = 1e-15
GEOM_TYPES = ('plane', 'hfield', 'sphere', 'capsule', 'ellipsoid', 'cylinder', 'box', 'mesh',
              'sdf')
JNT_TYPES = ('free', 'ball', 'slide', 'hinge')
CAMLIGHT_MODES = ('fixed', 'track', 'trackcom', 'targetbody', 'targetbodycom')
# number of size entries that must be positive, per geom type (with fromto, one fewer for the
# elongated shapes: their length comes from the segment)
_NSIZE = {'plane': 0, 'sphere': 1, 'capsule': 2, 'ellipsoid': 3, 'cylinder': 2, 'box': 3}


@dataclass
class Body:
  node: Node | None
  id: int
  parent: int
  name: str | None
  pos: np.ndarray
  quat: np.ndarray
  childclass: str | None
  vals: dict = field(default_factory=dict)
  joints: list = field(default_factory=list)   # (node, resolved vals, frame pos, frame quat)
  geoms: list = field(default_factory=list)
  sites: list = field(default_factory=list)
  cams: list = field(default_factory=list)
  lights: list = field(default_factory=list)
  inertial: Node | None = None
  depth: int = 0
  # the body's own pos/quat attributes, before any enclosing <frame> is applied (MuJoCo copies
  # these into ipos/iquat when nothing defines the inertial frame)
  lpos: np.ndarray = field(default_factory=lambda: np.zeros(3))
  lquat: np.ndarray = field(default_factory=lambda: np.array([1.0, 0, 0, 0]))


class TreeBuilder:
  """Walks <worldbody> and collects bodies and their elements with frame-composed poses."""

  def __init__(self, ctx):
    self.ctx = ctx
    self.bodies: list[Body] = []

  def build(self, worldbodies: list[Node]):
    world = Body(None, 0, -1, 'world', np.zeros(3), np.array([1.0, 0, 0, 0]), None)
    self.bodies.append(world)
    for wb in worldbodies:
      if wb.raw:
        raise wb.error('world body cannot have attributes', next(iter(wb.raw)))
      for child in wb.children:
        if child.tag in ('inertial', 'joint', 'freejoint'):
          raise child.error(f'world body cannot have {child.tag}')
      self._children(wb, world, np.zeros(3), np.array([1.0, 0, 0, 0]), None)
    return self.bodies

  def _frame_pose(self, node: Node, vals: dict):
    pos = np.asarray(vals.get('pos') if vals.get('pos') is not None else (0, 0, 0), float)
    quat = orient.frame_quat(vals, node, self.ctx.angle_scale, self.ctx.eulerseq)
    return pos, quat

  def _children(self, node: Node, body: Body, fpos, fquat, childclass):
    """Adds node's children to ``body``; (fpos, fquat) is the frame relative to the body."""
    for child in node.children:
      tag = child.tag
      if tag == 'body':
        self._body(child, body, fpos, fquat, childclass)
      elif tag == 'frame':
        cc = child.vals.get('childclass', childclass)
        if cc is not None:
          self.ctx.defaults.get(child, cc)
        pos, quat = self._frame_pose(child, child.vals)
        self._children(child, body, fpos + orient.rot_vec(fquat, pos),
                       orient.quat_mul(fquat, quat), cc)
      elif tag in ('joint', 'freejoint'):
        body.joints.append((child, fpos, fquat, childclass))
      elif tag == 'geom':
        body.geoms.append((child, fpos, fquat, childclass))
      elif tag == 'site':
        body.sites.append((child, fpos, fquat, childclass))
      elif tag == 'camera':
        body.cams.append((child, fpos, fquat, childclass))
      elif tag == 'light':
        body.lights.append((child, fpos, fquat, childclass))
      elif tag == 'inertial':
        body.inertial = child

  def _body(self, node: Node, parent: Body, fpos, fquat, childclass):
    cc = node.vals.get('childclass', childclass)
    if cc is not None and 'childclass' in node.vals:
      if cc not in self.ctx.defaults.classes:
        raise node.error(f"unknown default childclass '{cc}'", 'childclass')
    pos, quat = self._frame_pose(node, node.vals)
    body = Body(node, len(self.bodies), parent.id, node.vals.get('name'),
                fpos + orient.rot_vec(fquat, pos), orient.quat_mul(fquat, quat), cc,
                vals=dict(node.vals), depth=parent.depth + 1, lpos=pos,
                lquat=orient.quat_normalize(quat))
    self.bodies.append(body)
    self._children(node, body, np.zeros(3), np.array([1.0, 0, 0, 0]), cc)


# ---------------------------------------------------------------------------------------------
# Geom mass properties.

def geom_volume_inertia(gtype: str, size, shell: bool):
  """(volume or area, diagonal inertia per unit mass) of a primitive geom in its own frame."""
  r = size[0]
  if gtype == 'sphere':
    if shell:
      return 4 * math.pi * r * r, np.full(3, 2.0 / 3.0 * r * r)
    return 4.0 / 3.0 * math.pi * r**3, np.full(3, 0.4 * r * r)
  if gtype == 'capsule':
    h = size[1]
    L = 2 * h
    if shell:
      return _capsule_shell(r, h)
    vol = math.pi * r * r * L + 4.0 / 3.0 * math.pi * r**3
    # split the unit mass between the cylinder and the two hemispheres by volume
    ms = (4.0 / 3.0 * math.pi * r**3) / vol
    mc = 1.0 - ms
    ixx = (mc * (3 * r * r + L * L) / 12 + ms * (0.4 * r * r + 0.375 * r * L + 0.25 * L * L))
    izz = mc * r * r / 2 + ms * 0.4 * r * r
    return vol, np.array([ixx, ixx, izz])
  if gtype == 'cylinder':
    h = size[1]
    L = 2 * h
    if shell:
      return _cylinder_shell(r, h)
    vol = math.pi * r * r * L
    ixx = (3 * r * r + L * L) / 12
    return vol, np.array([ixx, ixx, r * r / 2])
  if gtype == 'ellipsoid':
    a, b, c = size[:3]
    if shell:
      return _ellipsoid_shell(a, b, c)
    vol = 4.0 / 3.0 * math.pi * a * b * c
    return vol, np.array([(b * b + c * c) / 5, (a * a + c * c) / 5, (a * a + b * b) / 5])
  if gtype == 'box':
    a, b, c = size[:3]
    if shell:
      return _box_shell(a, b, c)
    vol = 8 * a * b * c
    return vol, np.array([(b * b + c * c) / 3, (a * a + c * c) / 3, (a * a + b * b) / 3])
  return 0.0, np.zeros(3)


def _box_shell(a, b, c):
  # six rectangular plates; per-unit-mass inertia of the hollow box
  areas = {'x': 4 * b * c, 'y': 4 * a * c, 'z': 4 * a * b}
  area = 2 * sum(areas.values())
  dims = {'x': a, 'y': b, 'z': c}
  inertia = np.zeros(3)
  for i, ax in enumerate('xyz'):
    total = 0.0
    for face, fa in areas.items():
      m = 2 * fa / area  # two faces normal to `face`
      others = [d for d in 'xyz' if d != face]
      if face == ax:   # plate normal to the axis: in-plane inertia
        total += m * (dims[others[0]] ** 2 + dims[others[1]] ** 2) / 3
      else:            # plate parallel to the axis, at distance dims[face]
        in_plane = [d for d in others if d != ax][0]
        total += m * (dims[in_plane] ** 2 / 3 + dims[face] ** 2)
    inertia[i] = total
  return area, inertia


def _sphere_cap_terms(r):
  return 4 * math.pi * r * r


def _capsule_shell(r, h):
  # cylinder side (no caps) plus two hemispherical shells
  a_cyl = 2 * math.pi * r * 2 * h
  a_sph = 4 * math.pi * r * r
  area = a_cyl + a_sph
  mc, ms = a_cyl / area, a_sph / area
  L = 2 * h
  ixx_c = mc * (r * r / 2 + L * L / 12)
  izz_c = mc * r * r
  # hemispherical shells: inertia about own centre 2/3 r^2, centroid at r/2 from the base
  ixx_s = ms * (2.0 / 3.0 * r * r + h * h + h * r)
  izz_s = ms * 2.0 / 3.0 * r * r
  return area, np.array([ixx_c + ixx_s, ixx_c + ixx_s, izz_c + izz_s])


def _cylinder_shell(r, h):
  L = 2 * h
  a_side = 2 * math.pi * r * L
  a_cap = math.pi * r * r
  area = a_side + 2 * a_cap
  ms, mcap = a_side / area, a_cap / area
  ixx = ms * (r * r / 2 + L * L / 12) + 2 * mcap * (r * r / 4 + h * h)
  izz = ms * r * r + 2 * mcap * r * r / 2
  return area, np.array([ixx, ixx, izz])


def _ellipsoid_shell(a, b, c):
  # Knud Thomsen's approximation of the surface area; inertia of a thin shell scaled from a sphere
  p = 1.6075
  area = 4 * math.pi * (((a * b) ** p + (a * c) ** p + (b * c) ** p) / 3) ** (1 / p)
  return area, np.array([(b * b + c * c) / 3, (a * a + c * c) / 3, (a * a + b * b) / 3])
