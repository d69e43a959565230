"""Body masses and inertias inferred from geoms, in JAX: the compiler's rule (MuJoCo 3.3.3's
mjCBody inertia from geoms) for Models whose geom sizes, densities or masses were edited.

inertia_from_geoms(m) -> Model
  For every body whose mass frame the compiler inferred from its geoms
  (``body_inertiafromgeom`` 1: <compiler inertiafromgeom="true">, or "auto" and no <inertial>,
  and at least one geom in inertiagrouprange), recomputes body_mass, body_ipos, body_iquat and
  body_inertia from the current geom_size, geom_pos, geom_quat, geom_density and geom_mass,
  as recompiling the edited XML would. The other bodies keep their values.

  reads  geom_type geom_bodyid geom_size geom_pos geom_quat geom_inertiamode geom_density
         geom_mass geom_meshinertia body_inertiafromgeom body_mass body_ipos body_iquat
         body_inertia; inertia_opts (static: boundmass, boundinertia, balanceinertia,
         settotalmass of <compiler>)
  writes body_mass (nbody,), body_ipos (nbody, 3), body_iquat (nbody, 4),
         body_inertia (nbody, 3)

  Per geom (geom_inertiamode 1 solid, 2 shell, 0 not part of its body's inertia): the volume
  (shell: surface area) and the diagonal inertia per unit mass of its primitive, from
  geom_size with the compiler's formulas (a height field counts as the box of its size; a mesh
  uses its asset's volume and equivalent-box inertia, geom_meshinertia, which do not follow
  geom_size); mass = geom_mass when given (>= 0; 0 for a geom without volume), else
  geom_density x volume (in float32, a shell ellipsoid's inertia uses the well-conditioned
  limit of the compiler's finite layer, see _ellipsoid_shell_limit). Per body: one geom gives
  its own mass, pos, quat and inertia; several
  are combined about their centre of mass (each geom's inertia rotated into the body frame plus
  the parallel-axis term) and diagonalized by a replay of MuJoCo's Jacobi eigensolver
  (mjuu_eig3: the same rotations, and the eigenvalues sorted in decreasing order by the same
  quarter turns, so that body_iquat equals the compiler's even where the principal axes are not
  unique), then boundmass, boundinertia and balanceinertia apply as in the compiler.

  Call set_const afterwards (or ``set_const(m, from_geoms=True)``) for the constants that
  depend on the masses (subtree masses, invweight0, acc0, statistics, ...).

Differences from recompiling the XML, by design:
  - A body that the compiler moved onto its inertial frame (free joint with alignfree) keeps
    its compiled body frame; the new ipos / iquat are relative to it (recompiling would move the
    body frame and the free joint's qpos instead; the dynamics are the same).
  - What the compiler rejects cannot be raised from inside jit: a body whose geoms weigh less
    than mjMINVAL in total gets its centre of mass at the body origin, and an inertia that
    violates A + B >= C without balanceinertia is kept as computed.
  - <compiler settotalmass> rescales every body at compile time, which cannot be replayed
    from the scaled values: such a Model raises NotSupportedError.

Pure JAX for one world: jittable, vmappable over any of the fields read, and differentiable
(the eigensolver's rotations and the shell formulas are NaN-safe; gradients with respect to the
principal axes are not defined where two principal moments are equal).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from jax import lax

from . import math
from .errors import NotSupportedError
from .mjcf import compile_tree

(GEOM_PLANE, GEOM_HFIELD, GEOM_SPHERE, GEOM_CAPSULE, GEOM_ELLIPSOID, GEOM_CYLINDER, GEOM_BOX,
 GEOM_MESH) = range(8)
EPS = 1e-12           # mjuu_eig3's tolerance, and the sort's
MASS_EPS = 1e-14      # mjEPS: a geom with less volume ignores a given mass; the compiler's
                      # smallest total mass of several geoms
EIG3_ITERATIONS = 32  # Jacobi rotations (a 3x3 converges in well under 10; MuJoCo stops at 500)
# the Model fields inertia_from_geoms writes
WRITES = ('body_mass', 'body_ipos', 'body_iquat', 'body_inertia')


# The compiler's formulas (mjx_py.mjcf.compile_tree.PRIMITIVE_MASS) with jax.numpy, by type id
_PRIMITIVES = {GEOM_SPHERE: 'sphere', GEOM_CAPSULE: 'capsule', GEOM_ELLIPSOID: 'ellipsoid',
               GEOM_CYLINDER: 'cylinder', GEOM_BOX: 'box', GEOM_HFIELD: 'hfield'}


def _ellipsoid_shell_limit(size):
  """(area, unit inertia) of an ellipsoid shell for float32. The compiler's rule takes the
  inertia of the layer between the ellipsoid and the one grown by 1e-6 on every semi-axis, a
  difference of nearly equal volumes that float32 cannot resolve (0.2% errors on a 0.1 m
  ellipsoid); its limit, d(volume x solid inertia) / d(volume) along that growth, is the same
  quantity to O(1e-6) relative and well conditioned."""
  fn = compile_tree.PRIMITIVE_MASS['ellipsoid']
  area, _ = fn(size, True, jnp)
  grow = jnp.ones(3, size.dtype)

  def vol_inertia(eps):
    vol, unit = fn(size + eps * grow, False, jnp)
    return vol * unit, vol
  _, (dvi, dvol) = jax.jvp(vol_inertia, (jnp.zeros((), size.dtype),),
                           (jnp.ones((), size.dtype),))
  return area, dvi / dvol


def geom_volume_inertia(m):
  """(volume (ngeom,), diagonal inertia per unit mass (ngeom, 3)) of every geom that is part
  of its body's inertia (geom_inertiamode > 0; zero for the others and for planes)."""
  gtype, mode, size = m.geom_type, m.geom_inertiamode, m.geom_size
  use = mode > 0
  vol = jnp.zeros(m.ngeom, size.dtype)
  unit = jnp.zeros((m.ngeom, 3), size.dtype)
  for t in m.geom_types:
    if t in _PRIMITIVES:
      mine = use & (gtype == t)
      # other geoms' sizes (zeros, other types' layouts) never enter the formulas: a size
      # of ones keeps their unused values and derivatives finite
      sz = jnp.where(mine[:, None], size, 1.0)
      fn = compile_tree.PRIMITIVE_MASS[_PRIMITIVES[t]]
      for shell in (False, True):
        if shell and t == GEOM_ELLIPSOID and jnp.finfo(size.dtype).bits < 64:
          one = _ellipsoid_shell_limit
        else:
          def one(s, fn=fn, shell=shell):
            return fn(s, shell, jnp)
        v, u = jax.vmap(one)(sz)
        sel = mine & ((mode == 2) == shell)
        vol = jnp.where(sel, v, vol)
        unit = jnp.where(sel[:, None], u, unit)
    elif t == GEOM_MESH:
      mine = use & (gtype == t)
      vol = jnp.where(mine, m.geom_meshinertia[:, 0], vol)
      unit = jnp.where(mine[:, None], m.geom_meshinertia[:, 1:], unit)
  return vol, unit


# ---------------------------------------------------------------------------------------------
# mjuu_eig3

def eig3(a):
  """Eigen-decomposition of a symmetric 3x3 matrix ``a``, replaying MuJoCo's mjuu_eig3 (see
  mjx_py.mjcf.orient.eig3 for the host version): Jacobi rotations that zero the largest
  off-diagonal entry, accumulated as a quaternion, until it is below 1e-12 or the rotation is
  the identity (at most EIG3_ITERATIONS), then the eigenvalues sorted in decreasing order
  (when they differ by more than 1e-12) by quarter turns of that quaternion.
  Returns (eigenvalues (3,), quaternion (4,) whose rotation matrix has the eigenvectors as
  columns)."""
  dtype = a.dtype
  # (row, column, rotation axis) of the three off-diagonal entries, in mjuu_eig3's order
  pivots = jnp.array([[0, 1, 2], [0, 2, 1], [1, 2, 0]])

  def rotated(quat):
    v = math.quat_to_mat(quat)
    return v.T @ a @ v

  def body(_, state):
    quat, done = state
    d = rotated(quat)
    off3 = jnp.stack([d[0, 1], d[0, 2], d[1, 2]])
    mag = jnp.abs(off3)
    k = jnp.where((mag[0] > mag[1]) & (mag[0] > mag[2]), 0, jnp.where(mag[1] > mag[2], 1, 2))
    rk, ck, rotk = pivots[k, 0], pivots[k, 1], pivots[k, 2]
    off = off3[k]
    small = jnp.abs(off) < EPS
    # 2x2 symmetric Schur decomposition; the safe operands keep stopped steps finite
    tau = (d[ck, ck] - d[rk, rk]) / (2 * jnp.where(small, 1.0, off))
    root = jnp.sqrt(1 + tau * tau)
    # mjuu_eig3's 1 / (tau + root) for tau >= 0, -1 / (-tau + root) otherwise, in one
    # expression (the unused one would divide by root - |tau|, which rounds to 0)
    t = jnp.where(tau >= 0, 1.0, -1.0) / (jnp.abs(tau) + root)
    c = 1.0 / jnp.sqrt(1 + t * t)
    # float32 cannot represent 1 - 1e-12: there the rotation stops once c rounds to 1
    stop = small | (c > 1.0 - max(EPS, float(jnp.finfo(dtype).eps)))
    s = jnp.sqrt(jnp.where(stop, 1.0, 0.5 - 0.5 * c))
    comp = jnp.where(tau >= 0, -s, s) * jnp.where(rotk == 1, -1.0, 1.0)
    rot = jnp.zeros(4, dtype).at[0].set(jnp.sqrt(1.0 - comp * comp)).at[rotk + 1].set(comp)
    new = math.quat_normalize(math.quat_mul(quat, math.quat_normalize(rot)))
    done = done | stop
    return jnp.where(done, quat, new), done

  quat, _ = lax.fori_loop(0, EIG3_ITERATIONS, body,
                          (jnp.array([1.0, 0.0, 0.0, 0.0], dtype), jnp.zeros((), bool)))
  eigval = jnp.diagonal(rotated(quat))
  # bubble sort of the pairs (0, 1), (1, 2), (0, 1); a swap is a quarter turn about the
  # remaining axis
  half = jnp.sqrt(jnp.asarray(0.5, dtype))
  for j in range(3):
    j1 = j % 2
    swap = eigval[j1] + EPS < eigval[j1 + 1]
    swapped = eigval.at[j1].set(eigval[j1 + 1]).at[j1 + 1].set(eigval[j1])
    eigval = jnp.where(swap, swapped, eigval)
    turn = jnp.zeros(4, dtype).at[0].set(half).at[(j1 + 2) % 3 + 1].set(half)
    quat = jnp.where(swap, math.quat_normalize(math.quat_mul(quat, turn)), quat)
  return eigval, quat


# ---------------------------------------------------------------------------------------------
# Bodies

def _full_inertia(diag, quat, mass, offset):
  """Inertia (3, 3) of one geom about a point ``offset`` away from its centre, in the body
  frame: R diag R' (mjuu_globalinertia) plus the parallel-axis term (mjuu_offcenter)."""
  rot = math.quat_to_mat(quat)
  own = (rot * diag[None, :]) @ rot.T
  shift = mass * ((offset @ offset) * jnp.eye(3, dtype=diag.dtype) - jnp.outer(offset, offset))
  return own + shift


def inertia_from_geoms(m):
  """body_mass, body_ipos, body_iquat and body_inertia of the bodies whose mass frame comes
  from their geoms, recomputed from the Model's geom fields (see the module docstring).
  Returns a new Model."""
  boundmass, boundinertia, balance, settotalmass = m.inertia_opts
  if settotalmass > 0:
    raise NotSupportedError(
        'inertia_from_geoms: the model sets <compiler settotalmass>, which rescales every '
        "body's mass at compile time; edit body_mass / body_inertia directly instead")
  if not m.ngeom or m.nbody < 2:
    return m
  dtype = m.geom_size.dtype
  vol, unit = geom_volume_inertia(m)
  use = m.geom_inertiamode > 0
  given = m.geom_mass >= 0
  mass = jnp.where(given, jnp.where(vol > MASS_EPS, m.geom_mass, 0.0), m.geom_density * vol)
  mass = jnp.where(use, mass, 0.0)
  diag = unit * mass[:, None]
  pos = jnp.where(use[:, None], m.geom_pos, 0.0)
  quat = jnp.where(use[:, None], m.geom_quat, 0.0)
  body = m.geom_bodyid

  def per_body(x):
    return jax.ops.segment_sum(x, body, num_segments=m.nbody)

  count = per_body(use.astype(jnp.int32))
  total = per_body(mass)
  heavy = total >= MASS_EPS
  com = per_body(mass[:, None] * pos) / jnp.where(heavy, total, 1.0)[:, None]
  com = jnp.where(heavy[:, None], com, 0.0)
  full = per_body(jax.vmap(_full_inertia)(diag, quat, mass, pos - com[body]))
  eigval, eigquat = jax.vmap(eig3)(full)
  # one geom: its own frame (the sums above hold just its values)
  single = (count == 1)
  new_ipos = jnp.where(single[:, None], per_body(pos), com)
  new_iquat = jnp.where(single[:, None], per_body(quat), eigquat)
  new_inertia = jnp.where(single[:, None], per_body(diag), eigval)
  new_mass = total
  if boundmass > 0:
    new_mass = jnp.where(new_mass < boundmass, boundmass, new_mass)
  if boundinertia > 0:
    new_inertia = jnp.maximum(new_inertia, boundinertia)
  if balance:
    a, b, c = new_inertia[:, 0], new_inertia[:, 1], new_inertia[:, 2]
    bad = ((a + b < c - 1e-12 * jnp.abs(c)) | (a + c < b - 1e-12 * jnp.abs(b))
           | (b + c < a - 1e-12 * jnp.abs(a)))
    new_inertia = jnp.where(bad[:, None], jnp.mean(new_inertia, axis=1, keepdims=True),
                            new_inertia)
  mine = m.body_inertiafromgeom == 1
  return dataclasses.replace(
      m,
      body_mass=jnp.where(mine, new_mass, m.body_mass).astype(dtype),
      body_ipos=jnp.where(mine[:, None], new_ipos, m.body_ipos).astype(dtype),
      body_iquat=jnp.where(mine[:, None], new_iquat, m.body_iquat).astype(dtype),
      body_inertia=jnp.where(mine[:, None], new_inertia, m.body_inertia).astype(dtype))


__all__ = ['inertia_from_geoms', 'geom_volume_inertia', 'eig3', 'WRITES']
