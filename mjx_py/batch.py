"""Batches of worlds: per-world Model fields under ``jax.vmap``, and sharding across devices.

Per-world Models (domain randomization, parameter sweeps). Every array field of a Model is a
pytree leaf, real-valued options included (``opt.timestep``, ``opt.gravity``, ``opt.wind``,
...), so a Model whose chosen fields carry a leading batch axis runs under ``jax.vmap`` with
``model_axes`` as its ``in_axes``::

  frictions = ...                                   # (nworld, ngeom, 3)
  mb = dataclasses.replace(m, geom_friction=frictions)
  axes = mjx_py.model_axes(m, ['geom_friction'])
  d = jax.vmap(mjx_py.step, in_axes=(axes, 0))(mb, d)

Fields whose constants MuJoCo derives at compile time (masses, inertias, armature, gears, geom
sizes, ...) should go through ``mjx_py.set_const`` inside the vmapped function, so that each
world's invweight0, acc0, subtree masses, bounds and statistics are its own.

The discrete options (integrator, solver, cone, iteration counts, disable flags) and every
index, count and type array are static: they fix the traced program and cannot differ between
worlds.

Sharding. ``shard_batch`` lays a batch of worlds (any pytree whose leaves have the batch as
their leading axis) out across devices along one mesh axis, and ``replicate`` puts a shared
Model on every device; ``jax.jit`` of a vmapped step then runs each device's worlds where they
are (XLA's SPMD partitioner splits the batch; the solver's batch-wide early exits reduce across
devices). With several processes (``jax.distributed.initialize``), each process passes its
own part of the batch and ``shard_batch`` assembles the global array.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

BATCH_AXIS = 'batch'


def model_axes(m, fields):
  """``in_axes`` for ``jax.vmap`` over a Model whose ``fields`` carry a leading batch axis.

  fields: names of Model array fields, with ``opt.`` / ``stat.`` for the options and
  statistics (e.g. ``['body_mass', 'opt.gravity']``). Returns a Model-shaped pytree: 0 at those
  fields, None elsewhere. Raises ValueError for a name that is not an array field.
  """
  axes = jax.tree_util.tree_map(lambda _: None, m)
  for name in fields:
    parts = name.split('.')
    if len(parts) > 2:
      raise ValueError(f"model_axes: '{name}' is not a Model field")
    owner = m if len(parts) == 1 else getattr(m, parts[0], None)
    leaf = parts[-1]
    if owner is None or not _is_leaf_field(owner, leaf):
      raise ValueError(f"model_axes: '{name}' is not an array field of the Model (static "
                       'fields, counts and discrete options fix the traced program and cannot '
                       'vary between worlds)')
    if len(parts) == 1:
      axes = dataclasses.replace(axes, **{leaf: 0})
    else:
      sub = dataclasses.replace(getattr(axes, parts[0]), **{leaf: 0})
      axes = dataclasses.replace(axes, **{parts[0]: sub})
  return axes


def _is_leaf_field(obj, name) -> bool:
  """Whether ``name`` is one of the pytree data fields (array leaves) of ``obj``."""
  paths = jax.tree_util.tree_flatten_with_path(obj)[0]
  return any(len(p) == 1 and getattr(p[0], 'name', None) == name for p, _ in paths)


def batch_mesh(devices=None) -> Mesh:
  """A one-axis device mesh (axis name ``'batch'``) over ``devices`` (default: every device of
  every process, ``jax.devices()``)."""
  devices = jax.devices() if devices is None else list(devices)
  return Mesh(np.asarray(devices), (BATCH_AXIS,))


def shard_batch(tree, mesh: Mesh | None = None):
  """Lays ``tree`` (leaves with the batch as leading axis: a batched Data, controls, per-world
  Model fields) out across ``mesh``'s devices, each device holding a contiguous block of worlds.

  Single process: the leaves are the whole batch, whose size must be a multiple of the device
  count. Several processes: each passes its own block (a multiple of its local device count);
  the result is the global array, the processes' blocks in process order.
  """
  mesh = batch_mesh() if mesh is None else mesh
  sharding = NamedSharding(mesh, PartitionSpec(BATCH_AXIS))
  ndev = mesh.devices.size if jax.process_count() == 1 else len(mesh.local_devices)

  def put(x):
    x = np.asarray(x) if not isinstance(x, jax.Array) else x
    if x.ndim == 0 or x.shape[0] % ndev:
      raise ValueError(f'shard_batch: a leaf of shape {tuple(x.shape)} cannot be split into '
                       f'{ndev} equal blocks along its leading (batch) axis')
    if jax.process_count() == 1:
      return jax.device_put(x, sharding)
    return jax.make_array_from_process_local_data(sharding, np.asarray(x))
  return jax.tree_util.tree_map(put, tree)


def replicate(tree, mesh: Mesh | None = None):
  """A copy of ``tree`` (e.g. the shared Model) on every device of ``mesh`` (with several
  processes, each must pass the same values)."""
  mesh = batch_mesh() if mesh is None else mesh
  return jax.device_put(tree, NamedSharding(mesh, PartitionSpec()))
