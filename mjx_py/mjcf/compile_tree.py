"""Compiling the kinematic tree: bodies, joints/dofs, geoms, sites, cameras, lights, inertia.

Host only (numpy). Bodies are numbered depth-first in document order (world = 0, parents before
children); joints, geoms, sites, cameras and lights are numbered body by body, in document order
within a body, which is MuJoCo's order. ``<frame>`` elements are dissolved here: their pose is
composed into the pose of each child (and into joint anchors and axes).
"""

from __future__ import annotations

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
# Geom mass properties (MuJoCo's mjCGeom::GetVolume / SetInertia). With shellinertia the mass
# is spread over the surface: "volume" is then the surface area, and density is per area.

def geom_volume_inertia(gtype: str, size, shell: bool):
  """(volume or area, diagonal inertia per unit mass) of a primitive geom in its own frame.

  An hfield geom counts as the box of its geom size (MuJoCo's rule).
  """
  fn = PRIMITIVE_MASS.get(gtype)
  if fn is None:  # plane: no mass (meshes: see compile._geom_mass)
    return 0.0, np.zeros(3)
  return fn(size, shell)


# The formulas take the array module ``xp``: numpy here, jax.numpy in mjx_py.massprops, which
# applies them to edited geom sizes (one copy of MuJoCo's rules for both).

def _sphere(size, shell, xp=np):
  r = size[0]
  if shell:
    return 4 * xp.pi * r * r, xp.full(3, 2 * r * r / 3)
  return 4 * xp.pi * r**3 / 3, xp.full(3, 2 * r * r / 5)


def _capsule(size, shell, xp=np):
  """Cylinder of length h = 2 * size[1] plus two hemispheres (solid, or surfaces with shell)."""
  r, half = size[0], size[1]
  h = 2 * half
  if shell:
    a_sphere, a_cyl = 4 * xp.pi * r * r, 2 * xp.pi * r * h
    area = a_sphere + a_cyl
    m_sph = a_sphere / area  # per unit total mass
    m_cyl = 1.0 - m_sph
    ixx = m_cyl * (6 * r * r + h * h) / 12
    izz = m_cyl * r * r
    # hemispherical shells: own centre of mass r/2 from the cap base, at half + r/2 from centre
    hs_com = r / 2
    hs_pos = half + hs_com
    ixx += 2 * m_sph * r * r / 3 + m_sph * (hs_pos * hs_pos - hs_com * hs_com)
    izz += 2 * m_sph * r * r / 3
    return area, xp.stack([ixx, ixx, izz])
  vol = xp.pi * (r * r * h + 4 * r**3 / 3)
  m_sph = 4 * r / (4 * r + 3 * h)  # sphere volume / total volume
  m_cyl = 1.0 - m_sph
  ixx = m_cyl * (3 * r * r + h * h) / 12 + 2 * m_sph * r * r / 5 + m_sph * h * (3 * r + 2 * h) / 8
  izz = m_cyl * r * r / 2 + 2 * m_sph * r * r / 5
  return vol, xp.stack([ixx, ixx, izz])


def _cylinder(size, shell, xp=np):
  r, half = size[0], size[1]
  h = 2 * half
  if shell:
    a_disk, a_side = xp.pi * r * r, 2 * xp.pi * r * h
    area = 2 * a_disk + a_side
    m_disk = a_disk / area  # per unit total mass, each of the two caps
    m_side = 1.0 - 2 * m_disk
    ixx = m_side * (6 * r * r + h * h) / 12 + 2 * (m_disk * r * r / 4 + m_disk * half * half)
    izz = m_side * r * r + 2 * (m_disk * r * r / 2)
    return area, xp.stack([ixx, ixx, izz])
  ixx = (3 * r * r + h * h) / 12
  return xp.pi * r * r * h, xp.stack([ixx, ixx, r * r / 2])


def _ellipsoid_solid(a, b, c, xp=np):
  return xp.stack([(b * b + c * c) / 5, (a * a + c * c) / 5, (a * a + b * b) / 5])


def _ellipsoid(size, shell, xp=np):
  a, b, c = size[0], size[1], size[2]
  if not shell:
    return 4 * xp.pi * a * b * c / 3, _ellipsoid_solid(a, b, c, xp)
  # Thomsen's approximation of the surface area
  p = 1.6075
  area = 4 * xp.pi * (((a * b) ** p + (b * c) ** p + (c * a) ** p) / 3) ** (1 / p)
  # inertia: the ellipsoid grown by eps on every semi-axis minus the ellipsoid itself
  eps = 1e-6
  vol_a = 4 * xp.pi * a * b * c / 3
  vol_b = 4 * xp.pi * (a + eps) * (b + eps) * (c + eps) / 3
  density = 1.0 / (vol_b - vol_a)  # per unit mass
  inertia = (vol_b * density * _ellipsoid_solid(a + eps, b + eps, c + eps, xp)
             - vol_a * density * _ellipsoid_solid(a, b, c, xp))
  return area, inertia


def _box(size, shell, xp=np):
  a, b, c = size[0], size[1], size[2]
  if not shell:
    return 8 * a * b * c, xp.stack([b * b + c * c, a * a + c * c, a * a + b * b]) / 3
  lx, ly, lz = 2 * a, 2 * b, 2 * c
  # face pairs: normal z (area lx*ly), normal x (ly*lz), normal y (lz*lx)
  a0, a1, a2 = lx * ly, ly * lz, lz * lx
  area = 2 * (a0 + a1 + a2)
  m0, m1, m2 = a0 / area, a1 / area, a2 / area  # per unit total mass, one face each
  ix = m0 * ly * ly / 12 + m1 * (ly * ly + lz * lz) / 12 + m2 * lz * lz / 12
  iy = m0 * lx * lx / 12 + m1 * lz * lz / 12 + m2 * (lx * lx + lz * lz) / 12
  iz = m0 * (lx * lx + ly * ly) / 12 + m1 * ly * ly / 12 + m2 * lx * lx / 12
  inertia = 2 * xp.stack([m0 * c * c + m2 * b * b + ix, m0 * c * c + m1 * a * a + iy,
                          m1 * a * a + m2 * b * b + iz])
  return area, inertia


# volume (area with shell) and unit inertia of each primitive: fn(size, shell, xp=np)
PRIMITIVE_MASS = {'sphere': _sphere, 'capsule': _capsule, 'cylinder': _cylinder,
                  'ellipsoid': _ellipsoid, 'box': _box, 'hfield': _box}
