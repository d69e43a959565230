"""Rotation and spatial algebra in JAX, with NaN-safe helpers (quaternions are (w, x, y, z)).

Spatial vectors follow MuJoCo: 6-vectors are (angular(3), linear(3)); a body's ``cinert`` is the
10-vector (Ixx, Iyy, Izz, Ixy, Ixz, Iyz, m*c(3), m) of its inertia about a point ``c`` away from
its centre of mass. Every function acts on one element; batching is the caller's ``vmap``.
"""

from __future__ import annotations

import jax.numpy as jnp

MINVAL = 1e-15  # mjMINVAL


def safe_norm(x, axis=-1, keepdims=False):
  """Euclidean norm with a finite gradient at 0 (double-where)."""
  sq = jnp.sum(x * x, axis=axis, keepdims=True)
  nonzero = sq > 0
  n = jnp.where(nonzero, jnp.sqrt(jnp.where(nonzero, sq, 1.0)), 0.0)
  return n if keepdims else jnp.squeeze(n, axis=axis)


def safe_div(num, den, eps=MINVAL):
  """num / den, with den replaced by eps where |den| < eps (keeps gradients finite)."""
  small = jnp.abs(den) < eps
  return num / jnp.where(small, jnp.where(den < 0, -eps, eps), den)


def normalize(x, axis=-1):
  """x / |x|; a zero vector stays zero (finite gradients)."""
  n = safe_norm(x, axis=axis, keepdims=True)
  return x / jnp.where(n > MINVAL, n, 1.0)


def quat_normalize(q):
  """Unit quaternion; a zero quaternion becomes the identity (MuJoCo's mju_normalize4)."""
  n = safe_norm(q, keepdims=True)
  ident = jnp.zeros_like(q).at[..., 0].set(1.0)
  return jnp.where(n > MINVAL, q / jnp.where(n > MINVAL, n, 1.0), ident)


def quat_mul(a, b):
  """Hamilton product a * b."""
  w1, x1, y1, z1 = a[..., 0], a[..., 1], a[..., 2], a[..., 3]
  w2, x2, y2, z2 = b[..., 0], b[..., 1], b[..., 2], b[..., 3]
  return jnp.stack([
      w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
      w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
      w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
      w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
  ], axis=-1)


def quat_conj(q):
  return q * jnp.array([1.0, -1.0, -1.0, -1.0], dtype=q.dtype)


def quat_to_mat(q):
  """3x3 rotation matrix of a unit quaternion."""
  w, x, y, z = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
  return jnp.stack([
      jnp.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
      jnp.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
      jnp.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1),
  ], -2)


def rot_vec_quat(v, q):
  """Rotates vector v by unit quaternion q."""
  return quat_to_mat(q) @ v


def axis_angle_to_quat(axis, angle):
  """Quaternion of a rotation by ``angle`` about unit ``axis``."""
  half = 0.5 * angle
  return jnp.concatenate([jnp.cos(half)[..., None], axis * jnp.sin(half)[..., None]], axis=-1)


def quat_integrate(q, omega, dt):
  """q * exp(omega * dt / 2): integrates a body-frame angular velocity (mju_quatIntegrate).

  exp is written as (cos(a/2), sin(a/2)/a * omega dt) with a = |omega| dt, using the series
  of sin(x)/x near 0, so the gradient with respect to omega is exact at omega = 0.
  """
  v = omega * dt
  sq = jnp.sum(v * v, axis=-1, keepdims=True)
  small = sq < 1e-8
  a = jnp.sqrt(jnp.where(small, 1.0, sq))
  sinc = jnp.where(small, 0.5 - sq / 48.0, jnp.sin(0.5 * a) / jnp.where(small, 1.0, a))
  cos = jnp.where(small, 1.0 - sq / 8.0, jnp.cos(0.5 * a))
  return quat_normalize(quat_mul(q, jnp.concatenate([cos, sinc * v], axis=-1)))


def cross(a, b):
  return jnp.cross(a, b)


# ---------------------------------------------------------------------------------------------
# Spatial algebra (MuJoCo's com-based motion and force vectors).

def dof_com(axis, offset):
  """Motion of a unit rotation about ``axis`` through a point that is ``offset`` away from the
  frame origin (offset = origin - point): (axis, axis x offset)."""
  return jnp.concatenate([axis, jnp.cross(axis, offset)])


def inert_com(inertia, imat, dif, mass):
  """cinert 10-vector of a body: principal ``inertia`` (3,) in frame ``imat`` (3, 3), centre of
  mass at ``dif`` from the reference point (MuJoCo's mju_inertCom)."""
  full = imat @ jnp.diag(inertia) @ imat.T
  # parallel-axis shift: I + m (|d|^2 1 - d d^T)
  full = full + mass * (jnp.dot(dif, dif) * jnp.eye(3) - jnp.outer(dif, dif))
  return jnp.concatenate([
      jnp.stack([full[0, 0], full[1, 1], full[2, 2], full[0, 1], full[0, 2], full[1, 2]]),
      mass * dif, mass[None]])


def inert_mat(cinert):
  """6x6 spatial inertia matrix of a cinert 10-vector (acts on (angular, linear) motion)."""
  i = cinert
  rot = jnp.array([[i[0], i[3], i[4]], [i[3], i[1], i[5]], [i[4], i[5], i[2]]])
  mc = i[6:9]
  skew = jnp.array([[0.0, -mc[2], mc[1]], [mc[2], 0.0, -mc[0]], [-mc[1], mc[0], 0.0]])
  top = jnp.concatenate([rot, skew], axis=1)
  bottom = jnp.concatenate([-skew, i[9] * jnp.eye(3)], axis=1)
  return jnp.concatenate([top, bottom], axis=0)


def mul_inert_vec(cinert, vec):
  """Spatial inertia times motion vector (mju_mulInertVec): momentum (angular, linear)."""
  return inert_mat(cinert) @ vec


def cross_motion(v, u):
  """Spatial motion cross product v x u (mju_crossMotion)."""
  w, vl = v[:3], v[3:]
  return jnp.concatenate([jnp.cross(w, u[:3]), jnp.cross(w, u[3:]) + jnp.cross(vl, u[:3])])


def cross_force(v, f):
  """Spatial force cross product v x* f (mju_crossForce)."""
  w, vl = v[:3], v[3:]
  return jnp.concatenate([jnp.cross(w, f[:3]) + jnp.cross(vl, f[3:]), jnp.cross(w, f[3:])])
