"""The tree passes (mjx_py.tree): subtree sums, sums along the path from the world (of per-body
and of per-dof values) and per-body sums of entries, by the dense products (trees of at most
DENSE_NBODY bodies) and by the level loop and scatters (larger trees), against plain loops
over the bodies in float64, with the model's parent ids.

The humanoid (a free root, branching limbs) and the 20-link chain run both ways; a 70-link
chain with a side branch is over DENSE_NBODY and takes the level loop by default.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from oracle import ROOT

import mjx_py
from mjx_py import tree


def _branched_chain(n):
  """A chain of n links with a two-link branch on its third link (bodies numbered depth
  first, so the branch's bodies sit in the middle of the numbering)."""
  link = '<body pos="0 0 -0.1"><joint axis="0 1 0"/><geom size="0.02"/>'
  branch = ('<body pos="0.1 0 0"><joint axis="1 0 0"/><geom size="0.02"/>'
            '<body pos="0.1 0 0"><joint axis="1 0 0"/><geom size="0.02"/></body></body>')
  bodies = ''.join(link + (branch if i == 2 else '') for i in range(n))
  return f'<mujoco><worldbody>{bodies}{"</body>" * n}</worldbody></mujoco>'


def _reference(parent, values, root, dof_body, dof_values, body, entries):
  """Subtree sums and path sums by a loop over the bodies (parents come before children)."""
  sub = values.copy()
  for b in range(len(parent) - 1, 0, -1):
    sub[parent[b]] += sub[b]
  path = np.zeros_like(values)
  path[0] = root
  for b in range(1, len(parent)):
    path[b] = path[parent[b]] + values[b]
  own = np.zeros_like(values)
  for v, b in enumerate(dof_body):
    own[b] += dof_values[v]
  dofpath = np.zeros_like(values)
  dofpath[0] = root
  for b in range(1, len(parent)):
    dofpath[b] = dofpath[parent[b]] + own[b]
  added = np.zeros_like(values)
  for b, e in zip(body, entries):
    if 0 <= b < len(parent):
      added[b] += e
  return sub, path, dofpath, added


def _model(name):
  if name == 'branched70':
    return mjx_py.from_xml_string(_branched_chain(70))
  return mjx_py.from_xml_path(os.path.join(ROOT, 'models', name))


@pytest.mark.parametrize('name,dense', [('humanoid.xml', True), ('humanoid.xml', False),
                                        ('chain20.xml', True), ('chain20.xml', False),
                                        ('branched70', False)])
def test_tree_sums_match_a_loop(name, dense, monkeypatch):
  with jax.enable_x64(True):
    m = _model(name)
  assert (m.nbody <= tree.DENSE_NBODY) == (name != 'branched70')
  monkeypatch.setattr(tree, 'DENSE_NBODY', tree.DENSE_NBODY if dense else 0)
  rng = np.random.default_rng(m.nbody)
  values = rng.standard_normal((m.nbody, 6))
  root = rng.standard_normal(6)
  dof_values = rng.standard_normal((m.nv, 6))
  body = rng.integers(0, m.nbody + 2, 3 * m.nbody)       # some past the last body: dropped
  entries = rng.standard_normal((len(body), 6))
  want = _reference(np.asarray(m.body_parentid), values, root, np.asarray(m.dof_bodyid),
                    dof_values, body, entries)
  with jax.enable_x64(True):
    v, r = jnp.asarray(values, jnp.float64), jnp.asarray(root, jnp.float64)
    got = jax.jit(lambda v, r, x, b, e: (
        tree.subtree_sum(m, v), tree.path_sum(m, r, v), tree.dof_path_sum(m, r, x),
        tree.add_to_bodies(m, b, e)))(v, r, jnp.asarray(dof_values), jnp.asarray(body, jnp.int32),
                                      jnp.asarray(entries))
    scalar = jax.jit(lambda v: tree.subtree_sum(m, v))(v[:, 0])
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, rtol=1e-13, atol=1e-13)
  np.testing.assert_allclose(scalar, want[0][:, 0], rtol=1e-13, atol=1e-13)


def test_treeend_is_one_past_each_subtree():
  m = _model('branched70')
  parent = np.asarray(m.body_parentid)
  end = np.asarray(m.body_treeend)
  for b in range(m.nbody):
    inside = {b}
    for c in range(b + 1, m.nbody):
      if parent[c] in inside:
        inside.add(c)
    assert end[b] == max(inside) + 1 and len(inside) == end[b] - b, b
