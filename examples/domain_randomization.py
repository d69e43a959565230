"""Domain randomization: a batch of worlds whose geometry, materials, friction and motors differ,
made consistent with mjx_py.set_const(m, from_geoms=True), then stepped with one jax.vmap
(split over the CPU's cores by mjx_py.shard_worlds).

Per world: every collision geom's size is scaled by U(0.9, 1.1) (thicker or thinner limbs),
geom densities by U(0.8, 1.2), sliding friction by U(0.5, 1.5) and actuator gears by
U(0.9, 1.1). set_const(m, from_geoms=True) then infers each world's body masses, centres of
mass and inertias from its geoms, as recompiling the edited XML would, and the constants that
depend on them (subtree masses, invweight0, acc0, bounding spheres, statistics).

Run: python examples/domain_randomization.py [models/humanoid.xml] [--batch 256] [--nstep 100]
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np

import mjx_py
from mjx_py import massprops, setconst, testspeed
from mjx_py.rollout import scan_state

RANDOMIZED = ('geom_size', 'geom_density', 'geom_friction', 'actuator_gear')


def randomize(m: mjx_py.Model, key, n: int) -> mjx_py.Model:
  """n worlds of ``m`` with the RANDOMIZED fields scaled per world (leading batch axis), made
  consistent by set_const(from_geoms=True)."""
  k = jax.random.split(key, 4)

  def uniform(key, shape, lo, hi):
    return jax.random.uniform(key, (n,) + shape, minval=lo, maxval=hi, dtype=m.geom_size.dtype)

  fields = {
      'geom_size': m.geom_size * uniform(k[0], (m.ngeom, 1), 0.9, 1.1),
      'geom_density': m.geom_density * uniform(k[1], (m.ngeom,), 0.8, 1.2),
      'geom_friction': m.geom_friction * jnp.ones((n, m.ngeom, 3), m.geom_size.dtype).at[
          :, :, 0].set(uniform(k[2], (m.ngeom,), 0.5, 1.5)),   # sliding friction only
      'actuator_gear': m.actuator_gear * uniform(k[3], (m.nu, 1), 0.9, 1.1),
  }
  batched = dataclasses.replace(m, **fields)
  axes = mjx_py.model_axes(m, list(RANDOMIZED))
  return jax.vmap(lambda m: mjx_py.set_const(m, from_geoms=True), in_axes=(axes,),
                  out_axes=mjx_py.model_axes(m, list(RANDOMIZED) + CONSISTENT))(batched)


# the fields set_const(from_geoms=True) recomputes per world
CONSISTENT = list(massprops.WRITES + setconst.WRITES)


def rollout(m: mjx_py.Model, axes):
  """rollout(models, d, ctrls) -> d: vmapped steps of the batched models, ctrls (nstep, batch,
  nu) set before each step; the scan carries only the state a step reads
  (mjx_py.rollout.scan_state: d's other fields come back as given)."""
  def run(models, d, ctrls):
    def body(d, ctrl):
      d = dataclasses.replace(d, ctrl=ctrl)
      return jax.vmap(mjx_py.step, in_axes=(axes, 0))(models, d), None
    return scan_state(body, d, ctrls)[0]
  return run


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('model', nargs='?', default='models/humanoid.xml')
  parser.add_argument('--batch', type=int, default=256)
  parser.add_argument('--nstep', type=int, default=100)
  parser.add_argument('--seed', type=int, default=0)
  args = parser.parse_args()
  mjx_py.xla.set_cpu_flags()   # before any JAX computation: one CPU device per core (mjx_py.xla)

  m = mjx_py.from_xml_path(args.model)
  models = randomize(m, jax.random.PRNGKey(args.seed), args.batch)
  total = np.asarray(jnp.sum(models.body_mass, axis=1))
  print(f'{args.model}: {args.batch} worlds, total mass {total.min():.2f} - {total.max():.2f} '
        f'(compiled: {float(jnp.sum(m.body_mass)):.2f}); first body inertia '
        f'{np.asarray(models.body_inertia[:, 1]).min(axis=0).round(4)} - '
        f'{np.asarray(models.body_inertia[:, 1]).max(axis=0).round(4)}')

  axes = mjx_py.model_axes(m, list(RANDOMIZED) + CONSISTENT)
  d = jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (args.batch,) + x.shape),
                             mjx_py.make_data(m))
  # random controls in each actuator's control range, drawn per world and step
  lo, hi = m.actuator_ctrlrange[:, 0], m.actuator_ctrlrange[:, 1]
  ctrls = jax.random.uniform(jax.random.PRNGKey(args.seed + 1), (args.nstep, args.batch, m.nu),
                             minval=lo, maxval=hi, dtype=d.ctrl.dtype)
  run = rollout(m, axes)
  ndev = testspeed.device_split(args.batch)
  if ndev > 1:
    # each device (one per CPU core, set_cpu_flags) steps its block of worlds on its own; the
    # Model's per-world fields and the controls are split along their batch axes
    run = mjx_py.shard_worlds(run, in_axes=(axes, 0, 1))
  # FAST_COMPILE, and NO_LIBRARY_FUSIONS for 32 or more worlds per device (mjx_py.xla)
  run = jax.jit(run, compiler_options=testspeed.compile_options_for(args.batch))
  t0 = time.perf_counter()
  compiled = mjx_py.xla.lower_paused(run, models, d, ctrls).compile()
  compile_s = time.perf_counter() - t0
  jax.block_until_ready(compiled(models, d, ctrls))    # warm-up: the first run's allocations
  t1 = time.perf_counter()
  out = jax.block_until_ready(compiled(models, d, ctrls))
  t2 = time.perf_counter()
  height = np.asarray(out.qpos[:, 2]) if m.nq >= 3 else np.zeros(args.batch)
  print(f'compile {compile_s:.1f} s; {args.batch} x {args.nstep} steps on {ndev} device(s) in '
        f'{t2 - t1:.2f} s '
        f'({args.batch * args.nstep / (t2 - t1):,.0f} env-steps/s); qpos[2] after the run: '
        f'{height.min():.3f} - {height.max():.3f}; '
        f'warnings {int(np.sum(np.asarray(out.warning_counts)))}')


if __name__ == '__main__':
  main()
