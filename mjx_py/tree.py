"""The one tree recursion: a ``lax.scan`` over depth levels with ``vmap`` inside each level.

Bodies at the same depth do not depend on each other, so a forward pass (parent -> child, e.g.
kinematics) processes one depth level per scan step, all bodies of the level at once, and a
backward pass (child -> parent, e.g. subtree sums) processes the levels deepest first. The
scan body is traced once, so compile time does not grow with the depth of the tree, and the
serial work is the depth, not the number of bodies.

The linear passes (sums over subtrees, and along the path from the world) of a model with at
most ``DENSE_NBODY`` bodies are instead one product with the (nbody, nbody) 0/1 matrix of
"body j is in body i's subtree": one kernel instead of a loop over the levels with a gather and
a scatter per trip, which is faster to compile, to run and to differentiate for the small trees
of RL models (the hopper, the ant, the humanoid); the product's cost grows with nbody^2, so
larger trees keep the level loop.

The level table is built on the host when the Model is made (``tree_indices``) and stored in
the Model as int32 leaves:

  body_levels   (ndepth, width)  body ids at depth 1, 2, ...; padded with nbody (a sentinel
                                 that gathers clamp and scatters drop)
  body_treeend  (nbody,)         one past the last body of each body's subtree (bodies are
                                 numbered depth first, so body b's subtree is b .. end - 1)
  body_jnts     (nbody, maxjnt)  joint ids of each body in order, padded with -1
  dof_ancestor  (nv, nv)         1 where dof j is dof i or one of its ancestors (the sparsity
                                 pattern of the joint-space inertia matrix)
  body_dofmask  (nbody, nv)      1 where the dof moves the body (its own or an ancestor's)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def tree_indices(arrays: dict) -> dict:
  """Host-side (numpy) index tables for the tree passes, from the compiler's arrays."""
  nbody = int(arrays['nbody'])
  parent = np.asarray(arrays['body_parentid'])
  depth = np.zeros(nbody, np.int64)
  for i in range(1, nbody):  # parents come before children
    depth[i] = depth[parent[i]] + 1
  ndepth = int(depth.max()) if nbody > 1 else 0
  width = max((int(np.sum(depth == d)) for d in range(1, ndepth + 1)), default=0)
  levels = np.full((max(ndepth, 1), max(width, 1)), nbody, np.int32)
  for d in range(1, ndepth + 1):
    ids = np.nonzero(depth == d)[0]
    levels[d - 1, :len(ids)] = ids
  jntnum = np.asarray(arrays['body_jntnum'])
  jntadr = np.asarray(arrays['body_jntadr'])
  maxjnt = max(int(jntnum.max()) if nbody else 0, 1)
  jnts = np.full((nbody, maxjnt), -1, np.int32)
  for b in range(nbody):
    jnts[b, :jntnum[b]] = jntadr[b] + np.arange(jntnum[b])
  nv = int(arrays['nv'])
  dof_parent = np.asarray(arrays['dof_parentid'])
  ancestor = np.zeros((nv, nv), np.int32)
  for i in range(nv):
    j = i
    while j >= 0:
      ancestor[i, j] = 1
      j = dof_parent[j]
  # dofs that move each body: its own and those of its ancestors
  dof_body = np.asarray(arrays['dof_bodyid'])
  dofmask = np.zeros((nbody, nv), np.int32)
  for b in range(nbody):
    chain = set()
    i = b
    while i > 0:
      chain.add(i)
      i = parent[i]
    dofmask[b] = [int(x in chain) for x in dof_body]
  # support.dof_moves reads each column as the contiguous body range that starts at the dof's
  # body (bodies numbered depth first, every subtree after its root)
  for v in range(nv):
    rows = np.nonzero(dofmask[:, v])[0]
    if rows[0] != dof_body[v] or rows[-1] - rows[0] + 1 != len(rows):
      raise AssertionError(f'dof {v}: the bodies it moves are not numbered as a contiguous '
                           'subtree')
  # bodies are numbered depth first, so a subtree is contiguous and ends one past its last
  # descendant; deepest-numbered first, each body's end folds into its parent's
  treeend = np.arange(nbody, dtype=np.int32) + 1
  for b in range(nbody - 1, 0, -1):
    treeend[parent[b]] = max(treeend[parent[b]], treeend[b])
  return {'body_levels': levels, 'body_treeend': treeend, 'body_jnts': jnts,
          'dof_ancestor': ancestor, 'body_dofmask': dofmask}


def scalar_joints(m) -> bool:
  """Whether every joint of the model is a hinge or a slide (static, from the type set
  m.jnt_types; mjtJoint FREE = 0, BALL = 1). Joint j then owns qpos j and dof j (MuJoCo numbers
  both in joint order), so the stages can skip their quaternion and per-slot work."""
  return 0 not in m.jnt_types and 1 not in m.jnt_types


def _gather(tree, ids):
  return jax.tree_util.tree_map(lambda x: x[ids], tree)


def forward(m, fn, init, inputs):
  """Parent-to-child pass: ``out[i] = fn(out[parent[i]], inputs[i])`` for every body i > 0.

  init: pytree of per-body arrays (leading axis nbody); row 0 (the world) is kept as given,
    the other rows are overwritten.
  inputs: pytree of per-body arrays (leading axis nbody) handed to ``fn`` for body i.
  fn: maps (parent values, inputs) of ONE body to its values (same structure as ``init``).
  """
  nbody = m.nbody

  def level(carry, ids):
    safe = jnp.minimum(ids, nbody - 1)
    parent_vals = _gather(carry, m.body_parentid[safe])
    new = jax.vmap(fn)(parent_vals, _gather(inputs, safe))
    carry = jax.tree_util.tree_map(lambda c, n: c.at[ids].set(n, mode='drop'), carry, new)
    return carry, None

  if nbody == 1:
    return init
  out, _ = jax.lax.scan(level, init, m.body_levels)
  return out


DENSE_NBODY = 64
"""Largest body count whose linear tree passes are one dense product (see the module's doc)."""


def _subtree_matrix(m, dtype):
  """(nbody, nbody) 0/1 matrix, entry (i, j) = 1 where body j is body i or one of its
  descendants (j in i .. body_treeend[i] - 1), in ``dtype``."""
  ids = jnp.arange(m.nbody, dtype=m.body_treeend.dtype)
  inside = (ids[None, :] >= ids[:, None]) & (ids[None, :] < m.body_treeend[:, None])
  return inside.astype(dtype)


def _product(matrix, values):
  """matrix (r, n) times values (n, ...) over values' leading axis: (r, ...), exact in
  float32 on every backend (no reduced-precision matrix units: the matrix is 0/1 but the
  values are not)."""
  return jnp.tensordot(matrix, values, axes=(1, 0), precision=jax.lax.Precision.HIGHEST)


def path_sum(m, root, inc):
  """Parent-to-child sum: out[0] = root, out[i] = out[parent[i]] + inc[i] for every body i > 0.

  root: (...) the world's value; inc: (nbody, ...) each body's increment (row 0 unused).
  Returns (nbody, ...). The sum, over body i's path from the world, of the increments (body i
  included), plus root: a product with the transposed subtree matrix for small trees, the level
  loop (``forward``) otherwise.
  """
  if m.nbody > DENSE_NBODY:
    init = jnp.zeros_like(inc).at[0].set(root)
    return forward(m, lambda parent, own: parent + own, init, inc)
  inc = inc.at[0].set(0.0)
  return root + _product(_subtree_matrix(m, inc.dtype).T, inc)


def add_to_bodies(m, body, values):
  """Per-body sums of values (k, ...) onto their bodies body (k,) int, 0 <= body: (nbody,
  ...); an entry whose body is nbody or more is dropped. For at most DENSE_NBODY bodies one
  product with the (nbody, k) 0/1 matrix of "entry j goes to body i" (XLA:CPU runs a
  scatter-add as a loop over its entries), else a scatter-add."""
  if m.nbody > DENSE_NBODY:
    out = jnp.zeros((m.nbody,) + values.shape[1:], values.dtype)
    return out.at[body].add(values, mode='drop')
  return _product(jax.nn.one_hot(body, m.nbody, dtype=values.dtype).T, values)


def dof_path_sum(m, root, x):
  """Sum over each body's dofs and its ancestors' of a per-dof value, plus root: out[b] = root
  + sum of x[v] over the dofs v that move body b (``body_dofmask``), (nbody, ...) for x (nv,
  ...); out[0] = root. The parent-to-child passes of velocities and accelerations (cvel from
  cdof qvel, cacc from cdof_dot qvel): for trees of at most DENSE_NBODY bodies one product with
  body_dofmask, else a segment sum onto the dofs' bodies followed by ``path_sum``.
  """
  if m.nbody > DENSE_NBODY:
    inc = jax.ops.segment_sum(x, m.dof_bodyid, num_segments=m.nbody)
    return path_sum(m, root, inc)
  return root + _product(m.body_dofmask.astype(x.dtype), x)


def subtree_sum(m, values):
  """Child-to-parent pass: each body's value plus those of all its descendants.

  values: array (nbody, ...). Returns an array of the same shape. For a tree of at most
  ``DENSE_NBODY`` bodies one product with the subtree matrix, else a loop over the levels,
  deepest first, adding each level into its parents.
  """
  nbody = m.nbody
  if nbody == 1:
    return values
  if nbody <= DENSE_NBODY:
    return _product(_subtree_matrix(m, values.dtype), values)

  def level(acc, ids):
    valid = ids < nbody
    safe = jnp.minimum(ids, nbody - 1)
    mask = valid.reshape(valid.shape + (1,) * (acc.ndim - 1))
    contrib = jnp.where(mask, acc[safe], 0.0)
    return acc.at[m.body_parentid[safe]].add(contrib), None

  out, _ = jax.lax.scan(level, values, m.body_levels[::-1])
  return out
