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

Sharding. ``shard_batch`` lays a batch of worlds (any pytree whose leaves have the batch on
one axis, the leading one by default) out across devices along one mesh axis, and ``replicate``
puts a shared Model on every device. ``shard_worlds(fn)`` then runs a batched function (a
vmapped step, a batched rollout) on each device's block of worlds by itself (``jax.shard_map``):
no communication between devices, so the solver's batch-wide early exits (its iterations end
when every world of the batch has converged) and its chunking of the worlds still iterating
look only at the device's own worlds. A plain ``jax.jit`` of the vmapped step over a sharded
batch also runs, but XLA's SPMD partitioner then makes those batch-wide decisions across
devices (a reduction between devices at every solver iteration, and the chunks' gathers
reach across devices): measured on the humanoid at batch 1024 (float32, 2-core CPU, 2 host
devices, 50 steps, XLA's default loop threshold), 12,523 env-steps/s under plain jit against
29,259 with ``shard_worlds`` and 22,485 unsharded on one device.

One device per CPU core. XLA:CPU runs a program's operations on a pool of threads, but a
step's operations are small and mostly run one after another, so the second core adds little:
22,485 env-steps/s on 2 cores against 14,479 pinned to one (the humanoid at batch 1024 above). With
the CPU split into one device per core (``mjx_py.xla.set_cpu_flags``, before JAX starts)
and ``shard_worlds``, each core steps its own block of worlds, as ``mujoco.rollout`` runs one
thread per core. With several processes (``jax.distributed.initialize``), each process passes
its own part of the batch and ``shard_batch`` assembles the global array.
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


def _spec(axis) -> PartitionSpec:
  """The PartitionSpec of a leaf whose batch axis is ``axis`` (None: replicated)."""
  if axis is None:
    return PartitionSpec()
  if not isinstance(axis, int) or isinstance(axis, bool) or axis < 0:
    raise ValueError(f'a batch axis must be a non-negative int or None, not {axis!r}')
  return PartitionSpec(*([None] * axis), BATCH_AXIS)


def _specs(axes):
  """``axes`` (an int, None, or a pytree of them as jax.vmap's in_axes) as PartitionSpecs."""
  return jax.tree_util.tree_map(_spec, axes, is_leaf=lambda x: x is None)


def shard_batch(tree, mesh: Mesh | None = None, axis: int = 0):
  """Lays ``tree`` (leaves with the batch on axis ``axis``: a batched Data, per-world Model
  fields, controls (nstep, batch, nu) with axis=1) out across ``mesh``'s devices, each device
  holding a contiguous block of worlds.

  Single process: the leaves are the whole batch, whose size must be a multiple of the device
  count. Several processes: each passes its own block (a multiple of its local device count);
  the result is the global array, the processes' blocks in process order.
  """
  mesh = batch_mesh() if mesh is None else mesh
  sharding = NamedSharding(mesh, _spec(axis))
  ndev = mesh.devices.size if jax.process_count() == 1 else len(mesh.local_devices)

  def put(x):
    x = np.asarray(x) if not isinstance(x, jax.Array) else x
    if x.ndim <= axis or x.shape[axis] % ndev:
      raise ValueError(f'shard_batch: a leaf of shape {tuple(x.shape)} cannot be split into '
                       f'{ndev} equal blocks along its axis {axis} (the batch axis)')
    if x.size == 0:
      # nothing to split: replicated, as jit lays out its empty outputs (a shard_worlds loop
      # then feeds them back in the layout they were compiled for)
      shape = list(x.shape)
      shape[axis] *= 1 if jax.process_count() == 1 else jax.process_count()
      return jax.device_put(np.zeros(shape, x.dtype), NamedSharding(mesh, PartitionSpec()))
    if jax.process_count() == 1:
      return jax.device_put(x, sharding)
    return jax.make_array_from_process_local_data(sharding, np.asarray(x))
  return jax.tree_util.tree_map(put, tree)


def shard_worlds(fn, mesh: Mesh | None = None, in_axes=0, out_axes=0):
  """``fn`` run on each device's block of worlds (``jax.shard_map`` over ``mesh``'s batch
  axis, default every device): a function of the same arguments and results as ``fn``.

  fn: a batched function (e.g. ``jax.vmap(step)``, a batched rollout) whose arguments and
  results have the batch on the axes given by ``in_axes`` / ``out_axes`` (as jax.vmap's: an int
  for every leaf, None for a leaf every device gets whole, or a pytree prefix of the arguments
  of such; ``mjx_py.model_axes`` works for a Model). Each device calls ``fn`` on its blocks
  (batch / devices worlds) with no communication between devices, so batch-wide decisions
  inside ``fn`` (the solver's early exits, its row bucket, its chunks) are the device's own
  (see the module docstring). The batch size must be a multiple of the device count. Jit the
  result; arguments laid out by ``shard_batch`` / ``replicate`` are used where they are.

  On a CPU split into devices, ``fn`` must not call jaxlib's LAPACK kernels (jnp.linalg,
  jax.scipy.linalg): they split a batch over the thread pool that every device's program shares
  and wait for the pieces, and with each device's program holding a pool thread they can wait
  forever (MJX's step, measured with jaxlib 0.10.2 on 2 cores, deadlocked inside
  lapack_spotrf_ffi at batch 64 and 1024). mjx_py's step calls none (mjx_py.linalg).
  """
  mesh = batch_mesh() if mesh is None else mesh
  in_specs = _specs(tuple(in_axes) if isinstance(in_axes, list) else in_axes)
  out_specs = _specs(out_axes)
  # check_vma off: the solver's per_world loops (jax.custom_batching) carry no varying-axis
  # annotations; each device's program is the batched function itself
  return jax.shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                       check_vma=False)


def replicate(tree, mesh: Mesh | None = None):
  """A copy of ``tree`` (e.g. the shared Model) on every device of ``mesh`` (with several
  processes, each must pass the same values)."""
  mesh = batch_mesh() if mesh is None else mesh
  return jax.device_put(tree, NamedSharding(mesh, PartitionSpec()))
