"""Compile a model, print its kinematic tree, and build a batch of mass-randomized models.

Run: python examples/inspect_model.py [models/humanoid.xml]
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp

import mjx_py


def print_tree(m: mjx_py.Model):
  names = dict(m.names)
  bodies, joints = names.get('body', ()), names.get('joint', ())
  parent = [int(p) for p in m.body_parentid]
  depth = [0] * m.nbody
  for i in range(1, m.nbody):
    depth[i] = depth[parent[i]] + 1
    adr, num = int(m.body_jntadr[i]), int(m.body_jntnum[i])
    jnames = [joints[j] if j < len(joints) and joints[j] else f'joint{j}'
              for j in range(adr, adr + num)] if num else []
    print(f"{'  ' * depth[i]}{bodies[i] or f'body{i}'}  mass={float(m.body_mass[i]):.3f}"
          + (f"  joints: {', '.join(jnames)}" if jnames else ''))


def randomized_masses(m: mjx_py.Model, key, n: int) -> mjx_py.Model:
  """A batch of n models whose body masses are scaled by U(0.8, 1.2) (leading batch axis)."""
  scales = jax.random.uniform(key, (n, m.nbody), minval=0.8, maxval=1.2)
  return jax.vmap(lambda s: m.__class__(**{**vars(m), 'body_mass': m.body_mass * s}))(scales)


if __name__ == '__main__':
  path = sys.argv[1] if len(sys.argv) > 1 else 'models/humanoid.xml'
  m = mjx_py.from_xml_path(path)
  print(f'{path}: nq={m.nq} nv={m.nv} nu={m.nu} nbody={m.nbody}')
  print_tree(m)
  batch = randomized_masses(m, jax.random.PRNGKey(0), 8)
  totals = jnp.sum(batch.body_mass, axis=1)
  print('total mass of 8 randomized worlds:', [round(float(t), 2) for t in totals])
