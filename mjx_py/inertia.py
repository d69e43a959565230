"""Position stage, part 2: com-based quantities (mj_comPos) and the joint-space inertia (mj_crb).

com_pos(m, d)
  reads  xipos, ximat, xmat, xanchor, xaxis
  writes subtree_com (nbody,3), cinert (nbody,10), cdof (nv,6)
crb(m, d)
  reads  cinert, cdof
  writes qM (nv,nv) dense joint-space inertia, armature on the diagonal
solve_m(m, d, x)
  M^-1 x for x (nv,) or (nv, k), by a dense Cholesky factorisation of qM.

All motion vectors are (angular, linear) about the subtree centre of mass of each body's root
(``subtree_com[body_rootid]``), MuJoCo's com-based frame.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from . import linalg, math, tree

FREE, BALL, SLIDE, HINGE = 0, 1, 2, 3


def com_pos(m, d):
  """Subtree centres of mass, body inertias and motion subspaces in the com-based frame."""
  mass = m.body_mass
  weighted = tree.subtree_sum(m, d.xipos * mass[:, None])
  submass = tree.subtree_sum(m, mass)
  has_mass = submass > math.MINVAL
  subtree_com = jnp.where(has_mass[:, None],
                          weighted / jnp.where(has_mass, submass, 1.0)[:, None], d.xipos)
  root_com = subtree_com[m.body_rootid]
  cinert = jax.vmap(math.inert_com)(m.body_inertia, d.ximat.reshape(-1, 3, 3),
                                    d.xipos - root_com, mass)
  cinert = cinert.at[0].set(0.0)  # the world has no inertia
  cdof = _cdof(m, d, subtree_com) if m.nv else jnp.zeros((0, 6), d.qpos.dtype)
  return dataclasses.replace(d, subtree_com=subtree_com, cinert=cinert, cdof=cdof)


def _cdof(m, d, subtree_com):
  """Motion subspace of every dof: (nv, 6)."""
  jnt = m.dof_jntid
  body = m.dof_bodyid
  jtype = m.jnt_type[jnt]
  k = jnp.arange(m.nv) - m.jnt_dofadr[jnt]            # index of the dof within its joint
  offset = subtree_com[m.body_rootid[body]] - d.xanchor[jnt]
  if tree.scalar_joints(m):
    # hinges and slides only (static): every dof turns about or slides along its joint's axis
    axis = d.xaxis[jnt]
    trans = jnp.concatenate([jnp.zeros_like(axis), axis], axis=1)
    return jnp.where((jtype == SLIDE)[:, None], trans, jax.vmap(math.dof_com)(axis, offset))
  xmat = d.xmat[body].reshape(-1, 3, 3)
  # rotational dofs of ball and free joints turn about the body's own axes
  col = jnp.where(jtype == FREE, k - 3, k).clip(0, 2)
  body_axis = jnp.take_along_axis(xmat, col[:, None, None], axis=2)[..., 0]
  axis = jnp.where((jtype == HINGE)[:, None], d.xaxis[jnt], body_axis)
  rot = jax.vmap(math.dof_com)(axis, offset)
  trans_axis = jnp.where((jtype == SLIDE)[:, None], d.xaxis[jnt],
                         jnp.eye(3, dtype=axis.dtype)[k.clip(0, 2)])
  trans = jnp.concatenate([jnp.zeros_like(trans_axis), trans_axis], axis=1)
  is_trans = (jtype == SLIDE) | ((jtype == FREE) & (k < 3))
  return jnp.where(is_trans[:, None], trans, rot)


def crb(m, d):
  """Composite rigid-body inertias and the dense joint-space inertia matrix qM."""
  if not m.nv:
    return d
  crb_body = tree.subtree_sum(m, d.cinert)
  # F_i = crb(body of dof i) * cdof_i; M[i, j] = cdof_j . F_i for j an ancestor-or-self of i
  force = jax.vmap(math.mul_inert_vec)(crb_body[m.dof_bodyid], d.cdof)
  lower = jnp.where(m.dof_ancestor > 0, math.matmul_small(force, d.cdof.T), 0.0)
  qm = lower + lower.T - jnp.diag(jnp.diag(lower)) + jnp.diag(m.dof_armature)
  return dataclasses.replace(d, qM=qm)


def solve_m(m, d, x):
  """Solves qM y = x (x: (nv,) or (nv, k)) by dense Gauss-Jordan elimination (mj_solveM;
  plain JAX, see mjx_py.linalg for why not LAPACK)."""
  return linalg.solve_spd(d.qM, x)
