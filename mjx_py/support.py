"""Shared helpers used by several stages: Jacobians of points on bodies (mj_jac and friends).

jac(m, d, point, body)
  reads  cdof, subtree_com
  returns (jacp, jacr), each (3, nv): d(point velocity)/d(qvel) and d(body angular
  velocity)/d(qvel) for a point fixed to ``body`` at world position ``point``.
apply_ft(m, d, force, torque, point, body)
  generalized force (nv,) of a world-frame force and torque applied at ``point`` on ``body``
  (mj_applyFT): jacp^T force + jacr^T torque.
dof_moves(m, body)
  (..., nv) bool: the dofs that move ``body`` (int array of any shape), body_dofmask's rows
  without a gather.
xfrc_accumulate(m, d)
  generalized force (nv,) of every body's xfrc_applied (mj_xfrcAccumulate).
"""

from __future__ import annotations

import jax.numpy as jnp

from . import math


def dof_moves(m, body):
  """Whether each dof moves ``body``: (body.shape + (nv,)) bool, equal to body_dofmask[body] > 0.

  Bodies are numbered depth first (a parent before its subtree, which is contiguous; the
  compiler checks it, mjx_py.tree.tree_indices), so dof v, which moves the bodies of the subtree
  of its body dof_bodyid[v], moves body b exactly when dof_bodyid[v] <= b < dof_bodyid[v] +
  size, size the subtree's body count (column v's sum of body_dofmask). Two comparisons of
  per-dof constants that fuse into their consumers, where gathering rows of the (nbody, nv)
  table costs a memory pass per use (a humanoid's 54 contact slots x 2 bodies x 27 dofs).
  """
  lo = m.dof_bodyid
  hi = lo + jnp.sum(m.body_dofmask, axis=0, dtype=lo.dtype)
  b = jnp.asarray(body)[..., None]
  return (lo <= b) & (b < hi)


def jac(m, d, point, body):
  """Translational and rotational Jacobians (3, nv) of a point attached to a body."""
  mask = dof_moves(m, body)                                       # dofs that move the body
  offset = point - d.subtree_com[m.body_rootid[body]]             # point relative to the com
  ang, lin = d.cdof[:, :3], d.cdof[:, 3:]
  jacr = jnp.where(mask[:, None], ang, 0.0).T
  jacp = jnp.where(mask[:, None], lin + jnp.cross(ang, offset), 0.0).T
  return jacp, jacr


def apply_ft(m, d, force, torque, point, body):
  """Generalized force of a Cartesian force/torque at a point of a body (mj_applyFT)."""
  jacp, jacr = jac(m, d, point, body)
  return jacp.T @ force + jacr.T @ torque


def xfrc_accumulate(m, d):
  """Generalized force (nv,) of the Cartesian forces and torques xfrc_applied (nbody, 6), each
  acting at its body's centre of mass xipos (mj_xfrcAccumulate: the sum of apply_ft over the
  bodies).

  reads xfrc_applied, xipos, subtree_com, cdof
  The sum of Jacobian transposes, regrouped per dof: dof v (cdof_v = [ang_v, lin_v]) receives
  lin_v . f_b + ang_v . ((p_b - c) x f_b + t_b) from each body b it moves (jac's rows; c the
  subtree com of the tree's root, the same for every body v moves), so with the com-based
  wrench w_b = [(p_b - c) x f_b + t_b, f_b] it is cdof_v . sum_b mask[b, v] w_b: one
  (nv, nbody) x (nbody, 6) product, instead of nbody Jacobians (nbody, 3, nv) built and
  contracted.
  """
  f, t = d.xfrc_applied[:, :3], d.xfrc_applied[:, 3:]
  offset = d.xipos - d.subtree_com[m.body_rootid]
  wrench = jnp.concatenate([jnp.cross(offset, f) + t, f], axis=1)       # (nbody, 6)
  mask = m.body_dofmask.T.astype(wrench.dtype)
  # up to 32 bodies as broadcast products (math.matmul_small): the dot ran as a kernel of its
  # own in every forward pass (the hopper: 0.8% of the step's profiled time)
  per_dof = math.matmul_small(mask, wrench) if m.nbody <= 32 else mask @ wrench   # (nv, 6)
  return jnp.sum(d.cdof * per_dof, axis=1)
