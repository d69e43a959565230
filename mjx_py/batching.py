"""Per-world functions with a batched implementation underneath (jax.custom_batching).

The library's functions are written for one world and batched by the caller's ``jax.vmap``
(DESIGN rule 1). A few pieces run better when they see the whole batch at once: the
solvers' loops skip a step by a ``lax.cond`` once no world of the batch needs it (a plain
vmap of a per-world loop turns that cond into a select and runs every step), and small dense
factorizations vectorize over the worlds when the batch is the minor axis
(mjx_py.linalg). ``per_world`` turns such a batch function into a function of one world's
arguments whose vmap (any nesting of vmaps, as one flat batch) calls the batch function once.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.custom_batching import custom_vmap

from .xla import full_precision


def broadcast_unbatched(axis_size, args, in_batched):
  """``args`` with every unbatched leaf broadcast to a leading axis of ``axis_size``."""
  leaves, tree = jax.tree_util.tree_flatten(args)
  flags = jax.tree_util.tree_leaves(in_batched)
  leaves = [x if b else jnp.broadcast_to(x, (axis_size,) + jnp.shape(x))
            for x, b in zip(leaves, flags)]
  return jax.tree_util.tree_unflatten(tree, leaves)


def per_world(batch_fn):
  """The per-world function of ``batch_fn`` (a function of batched arguments, every leaf with
  a leading axis B, returning batched results): a function of one world's arguments whose
  vmap runs the batch as one call of batch_fn (jax.custom_batching.custom_vmap), nested vmaps
  as one flat batch; called unbatched, it runs batch_fn on a batch of one. Its arguments carry
  no derivative (custom_vmap has no differentiation rule): callers pass stop_gradient values
  and differentiate around it (the solver's implicit gradients, linalg's linear solves)."""

  @custom_vmap
  def many(*args):
    return batch_fn(*args)

  @many.def_vmap
  @full_precision
  def _many_rule(axis_size, in_batched, *args):
    # (axis_size, B, ...): one flat batch of axis_size * B worlds
    args = broadcast_unbatched(axis_size, args, in_batched)
    # (sizes spelt out, not -1: a leaf may have no entries, e.g. a Newton carry's (0, 0) M^-1)
    flat = jax.tree_util.tree_map(
        lambda x: x.reshape((x.shape[0] * x.shape[1],) + x.shape[2:]), args)
    out = many(*flat)
    out = jax.tree_util.tree_map(
        lambda x: x.reshape((axis_size, x.shape[0] // axis_size) + x.shape[1:]), out)
    return out, jax.tree_util.tree_map(lambda _: True, out)

  @custom_vmap
  def one(*args):
    out = many(*jax.tree_util.tree_map(lambda x: x[None], args))
    return jax.tree_util.tree_map(lambda x: x[0], out)

  @one.def_vmap
  @full_precision
  def _one_rule(axis_size, in_batched, *args):
    out = many(*broadcast_unbatched(axis_size, args, in_batched))
    return out, jax.tree_util.tree_map(lambda _: True, out)

  return one


__all__ = ['broadcast_unbatched', 'per_world']
