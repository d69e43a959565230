"""Shared helpers used by several stages: Jacobians of points on bodies (mj_jac and friends).

jac(m, d, point, body)
  reads  cdof, subtree_com
  returns (jacp, jacr), each (3, nv): d(point velocity)/d(qvel) and d(body angular
  velocity)/d(qvel) for a point fixed to ``body`` at world position ``point``.
apply_ft(m, d, force, torque, point, body)
  generalized force (nv,) of a world-frame force and torque applied at ``point`` on ``body``
  (mj_applyFT): jacp^T force + jacr^T torque.
"""

from __future__ import annotations

import jax.numpy as jnp


def jac(m, d, point, body):
  """Translational and rotational Jacobians (3, nv) of a point attached to a body."""
  mask = m.body_dofmask[body] > 0                                 # dofs that move the body
  offset = point - d.subtree_com[m.body_rootid[body]]             # point relative to the com
  ang, lin = d.cdof[:, :3], d.cdof[:, 3:]
  jacr = jnp.where(mask[:, None], ang, 0.0).T
  jacp = jnp.where(mask[:, None], lin + jnp.cross(ang, offset), 0.0).T
  return jacp, jacr


def apply_ft(m, d, force, torque, point, body):
  """Generalized force of a Cartesian force/torque at a point of a body (mj_applyFT)."""
  jacp, jacr = jac(m, d, point, body)
  return jacp.T @ force + jacr.T @ torque
