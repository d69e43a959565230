"""Height-field collisions (mjc_ConvexHField) through the collision driver, against mj_forward.

Models: tests/models/scenes/hfield_collision.xml, a bumpy 12 x 14 hfield, tilted and moved off
the origin, with one free sphere, capsule, ellipsoid, cylinder, box and mesh (40 states, at least
200 contacts per type); and models/ant.xml on a 24 x 24 terrain (a quadruped on a height field,
8 random poses). Each state of the first drops
every body at a random place and orientation over the terrain, its height set by a ray so that
it sits a little above or below the surface (several prisms in contact per geom).

Checked: the same number of contacts per (hfield, geom) pair in every state, every contact a
penetration (dist < 0); per geom type at least 90% of the contacts (95% over
all) at MuJoCo's distance (1e-6), position (2e-4) and frame (1e-2: the EPA normal of a curved
surface is fixed only to about sqrt(ccd_tolerance / radius), see test_collision_driver.py).
The rest are deep prisms where our EPA ends on another polytope face than MuJoCo's: box and
mesh contacts go through MuJoCo's discrete-geometry rule (stop when a support vertex repeats),
where rounding can end the expansion a step earlier or later, and rarely a smooth shape
(the printed line gives the counts; a miss can be far off: a mesh prism at -0.018 against
MuJoCo's -0.053 was seen). Gradients of the contact distances with respect to the geom poses
are finite.
"""

from __future__ import annotations

import dataclasses
import os

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from oracle import ROOT, RUN_OPTIMIZED

import mjx_py
from mjx_py.collision.driver import collision
from mjx_py.errors import NotSupportedError
from mjx_py.mjcf import compile_file, compile_string

SCENE = os.path.join(ROOT, 'tests', 'models', 'scenes', 'hfield_collision.xml')
SMOOTH = {'sphere', 'capsule', 'ellipsoid', 'cylinder'}
_collision = jax.jit(collision, compiler_options=RUN_OPTIMIZED)   # 40 states' searches


@pytest.fixture(scope='module')
def scene():
  with jax.enable_x64(True):
    m = mjx_py.put_model(compile_file(SCENE), nconmax=600)
    yield m, mujoco.MjModel.from_xml_path(SCENE)


def _states(mj, n, seed=0):
  """Free bodies over the terrain: random x, y, orientation; z from a ray so that the lowest
  point is within +-0.1 of the surface below the body's origin."""
  rng = np.random.default_rng(seed)
  md = mujoco.MjData(mj)
  out = []
  for _ in range(n):
    q = mj.qpos0.copy()
    for j in range(mj.njnt):
      adr = mj.jnt_qposadr[j]
      quat = rng.standard_normal(4)
      q[adr:adr + 7] = [rng.uniform(-1.2, 1.2), rng.uniform(-1.0, 1.0), 0.0,
                        *(quat / np.linalg.norm(quat))]
    md.qpos[:] = q
    mujoco.mj_forward(mj, md)
    for j in range(mj.njnt):
      start = md.xpos[j + 1].copy()
      start[2] = 3.0
      geomid = np.zeros(1, np.int32)
      dist = mujoco.mj_ray(mj, md, start, np.array([0.0, 0.0, -1.0]),
                           np.array([1, 0, 0, 0, 0, 0], np.uint8), 1, -1, geomid)
      q[mj.jnt_qposadr[j] + 2] = 3.0 - dist + rng.uniform(-0.1, 0.1)
    md.qpos[:] = q
    mujoco.mj_forward(mj, md)
    out.append(md.__copy__())
  return out


def _poses(m, md):
  d = mjx_py.make_data(m)
  return dataclasses.replace(d, geom_xpos=jnp.asarray(md.geom_xpos),
                             geom_xmat=jnp.asarray(md.geom_xmat))


def _match(m, mj, md, total, good, label):
  """Our contacts on MuJoCo's geom poses against md.contact: the same count, every contact
  within the margin (dist < margin), and per geom-2 type the contacts that match MuJoCo's
  distance (1e-6), position (2e-4) and frame (1e-2) counted in ``good`` of ``total``."""
  d = _collision(m, _poses(m, md))
  n = int(d.ncon)
  ours = {f: np.asarray(getattr(d.contact, f))[:n]
          for f in ('geom', 'dist', 'pos', 'frame', 'includemargin')}
  assert n == md.ncon, f'{label}: ncon {n} != {md.ncon}'
  used = np.zeros(n, bool)
  for c in md.contact[:md.ncon]:
    name = mujoco.mjtGeom(mj.geom_type[c.geom[1]]).name[7:].lower()
    same = np.flatnonzero(np.all(ours['geom'] == c.geom, axis=1) & ~used)
    assert same.size, f'{label}: no contact left for geoms {c.geom}'
    j = same[np.argmin(np.linalg.norm(ours['pos'][same] - c.pos, axis=1))]
    used[j] = True
    ok = (abs(ours['dist'][j] - c.dist) < 1e-6
          and np.max(np.abs(ours['pos'][j] - c.pos)) < 2e-4
          and np.max(np.abs(ours['frame'][j] - c.frame)) < 1e-2)
    total[name] = total.get(name, 0) + 1
    good[name] = good.get(name, 0) + ok
    margin = mj.geom_margin[c.geom].max()
    assert ours['dist'][j] < margin, f'{label}: {name} at {c.pos}: {ours["dist"][j]} vs {c.dist}'


def test_scene_matches_mujoco(scene):
  m, mj = scene
  total, good = {}, {}
  with jax.enable_x64(True):
    for k, md in enumerate(_states(mj, 40)):
      _match(m, mj, md, total, good, f'state {k}')
  assert set(total) == SMOOTH | {'box', 'mesh'}, total
  assert all(total[t] >= 200 for t in total), total
  print('hfield contacts matching MuJoCo to 1e-6 / type:', {t: f'{good[t]}/{total[t]}'
                                                            for t in total})
  for t in total:
    assert good[t] >= 0.9 * total[t], (t, good, total)
  assert sum(good.values()) >= 0.95 * sum(total.values()), (good, total)


def _ant_on_terrain():
  """models/ant.xml with its floor plane replaced by a 24 x 24 height field of smooth bumps
  (4 m x 4 m, 0.4 m high)."""
  with open(os.path.join(ROOT, 'models', 'ant.xml')) as f:
    xml = f.read()
  u = np.linspace(0, 1, 24)
  elev = 0.5 + 0.3 * np.sin(7 * u)[:, None] * np.cos(5 * u)[None, :] + 0.2 * u[None, :]
  field = ('<hfield name="terrain" nrow="24" ncol="24" size="4 4 0.4 0.1" elevation="'
           + ' '.join(f'{z:.4f}' for z in elev.ravel()) + '"/>')
  xml = xml.replace('<asset>', '<asset>' + field, 1)
  floor = '<geom name="floor" pos="0 0 0" size="40 40 40" type="plane"'
  assert floor in xml
  return xml.replace(floor, '<geom name="floor" pos="0 0 0" type="hfield" hfield="terrain"')


def test_quadruped_on_terrain_matches_mujoco():
  """The ant standing and lying on bumpy terrain at random joint angles: whole contact sets
  (torso sphere and leg capsules against the terrain, with the ant's 0.01 margin)."""
  xml = _ant_on_terrain()
  mj = mujoco.MjModel.from_xml_string(xml)
  md = mujoco.MjData(mj)
  rng = np.random.default_rng(4)
  total, good = {}, {}
  with jax.enable_x64(True):
    m = mjx_py.put_model(compile_string(xml), nconmax=800)
    for k in range(8):
      q = mj.qpos0.copy()
      quat = np.array([1.0, 0, 0, 0]) + 0.3 * rng.standard_normal(4)
      q[:7] = [rng.uniform(-2.5, 2.5), rng.uniform(-2.5, 2.5), 0.0,
               *(quat / np.linalg.norm(quat))]
      lo, hi = mj.jnt_range[1:].T
      q[7:] = rng.uniform(lo, hi)
      md.qpos[:] = q
      mujoco.mj_forward(mj, md)
      # lowest geom point (bounding spheres) to the terrain height under the torso, +-5 cm
      start = np.array([q[0], q[1], 3.0])
      geomid = np.zeros(1, np.int32)
      drop = mujoco.mj_ray(mj, md, start, np.array([0.0, 0.0, -1.0]),
                           np.array([1, 0, 0, 0, 0, 0], np.uint8), 1, 1, geomid)
      low = np.min(md.geom_xpos[1:, 2] - mj.geom_rbound[1:] * 0.5) - q[2]
      q[2] = 3.0 - drop - low + rng.uniform(-0.05, 0.02)
      md.qpos[:] = q
      mujoco.mj_forward(mj, md)
      assert md.ncon >= 2, k
      _match(m, mj, md, total, good, f'ant state {k}')
  print('ant-terrain contacts matching MuJoCo / type:', {t: f'{good[t]}/{total[t]}'
                                                         for t in total})
  assert total.get('capsule', 0) >= 20, total
  assert sum(good.values()) >= 0.95 * sum(total.values()), (good, total)


def test_gradients_are_finite(scene):
  m, mj = scene
  md = _states(mj, 1, seed=5)[0]
  with jax.enable_x64(True):
    d0 = _poses(m, md)

    def loss(xpos):
      d = collision(m, dataclasses.replace(d0, geom_xpos=xpos))
      used = jnp.arange(d.contact.dist.shape[0]) < d.ncon
      return jnp.sum(jnp.where(used, d.contact.dist + jnp.sum(d.contact.pos, -1), 0.0))
    g = jax.jit(jax.grad(loss))(d0.geom_xpos)
  assert np.all(np.isfinite(np.asarray(g)))
  assert np.any(np.asarray(g)[1:] != 0)


def test_unsupported_hfield_mix_raises():
  xml = """
  <mujoco><asset>
    <hfield name="a" nrow="3" ncol="3" size="1 1 0.1 0.1"/>
    <hfield name="b" nrow="4" ncol="3" size="1 1 0.1 0.1"/>
  </asset><worldbody>
    <geom type="hfield" hfield="a"/><geom type="hfield" hfield="b" pos="3 0 0"/>
    <body><freejoint/><geom type="sphere" size="0.1"/></body>
  </worldbody></mujoco>"""
  with pytest.raises(NotSupportedError, match='grid sizes'):
    mjx_py.put_model(compile_string(xml))
