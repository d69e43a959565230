"""mjx_py.ray (mj_ray) against MuJoCo on tests/models/sensor_rangefinder.xml, in float64.

The model has every geom type: planes (finite and infinite), sphere, capsule, ellipsoid,
cylinder, box, three meshes (one non-convex) and a non-square height field, in geom groups 0-5,
one invisible geom, on static and moving bodies. Random rays aimed near the geoms (and rays
grazing the height field's sides) are cast with one jitted vmap: the distance to every geom
against MuJoCo's per-type functions (mju_rayGeom, mj_rayMesh, mj_rayHfield), and the nearest hit
against mj_ray with and without geom groups, static geoms and an excluded body. Also: the
rangefinder sensors, a zero direction, gradients of the distance, and a traced Model.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import oracle
import pytest
from oracle import ROOT

import mjx_py
from mjx_py import sensor
from mjx_py.ray import geom_distances

PATH = os.path.join(ROOT, 'tests', 'models', 'sensor_rangefinder.xml')
NRAY = 300


@pytest.fixture(autouse=True, scope='module')
def _float64():
  """float64 for this module only (the global flag would leak into later test modules)."""
  previous = jax.config.jax_enable_x64
  jax.config.update('jax_enable_x64', True)
  yield
  jax.config.update('jax_enable_x64', previous)


@pytest.fixture(scope='module')
def scene():
  """(our Model, our Data, MjModel, MjData) at a random pose, kinematics done by MuJoCo."""
  m, mj = oracle.both(path=PATH)
  md = mujoco.MjData(mj)
  rng = np.random.default_rng(0)
  oracle.write_state(md, oracle.random_state(mj, rng, qpos_scale=0.2))
  mujoco.mj_forward(mj, md)
  d = oracle.make_data(m, qpos=md.qpos.copy(), geom_xpos=md.geom_xpos.copy(),
                       geom_xmat=md.geom_xmat.copy(), site_xpos=md.site_xpos.copy(),
                       site_xmat=md.site_xmat.copy(), xpos=md.xpos.copy(), xmat=md.xmat.copy())
  return m, d, mj, md


def _rays(mj, md, rng, n=NRAY):
  """Rays from random points towards random points near random geoms."""
  pnt = np.stack([rng.uniform(-4, 4, n), rng.uniform(-3, 3, n), rng.uniform(-0.5, 2.5, n)], 1)
  target = md.geom_xpos[rng.integers(0, mj.ngeom, n)] + 0.3 * rng.standard_normal((n, 3))
  return pnt, target - pnt


def _side_rays(mj, md, rng, geom, n=NRAY):
  """Nearly horizontal rays through points of a height field's top box (its sides)."""
  pos, mat = md.geom_xpos[geom], md.geom_xmat[geom].reshape(3, 3)
  size = mj.hfield_size[mj.geom_dataid[geom]]
  local = np.stack([rng.uniform(-1.1, 1.1, n) * size[0], rng.uniform(-1.1, 1.1, n) * size[1],
                    rng.uniform(0, 1, n) * size[2]], 1)
  vec = rng.standard_normal((n, 3)) * np.array([1, 1, 0.2])
  start = local - 3 * vec / np.linalg.norm(vec, axis=1, keepdims=True)
  return pos + start @ mat.T, vec @ mat.T


def _mujoco_geom_distances(mj, md, pnt, vec):
  out = np.zeros((len(pnt), mj.ngeom))
  for i in range(len(pnt)):
    for g in range(mj.ngeom):
      t = mj.geom_type[g]
      if t == mujoco.mjtGeom.mjGEOM_MESH:
        out[i, g] = mujoco.mj_rayMesh(mj, md, g, pnt[i], vec[i])
      elif t == mujoco.mjtGeom.mjGEOM_HFIELD:
        out[i, g] = mujoco.mj_rayHfield(mj, md, g, pnt[i], vec[i])
      else:
        out[i, g] = mujoco.mju_rayGeom(md.geom_xpos[g], md.geom_xmat[g], mj.geom_size[g],
                                       pnt[i], vec[i], t)
  return out


def test_every_geom_type_is_present(scene):
  _, _, mj, _ = scene
  assert set(mj.geom_type.tolist()) == set(range(8))


def test_distance_to_every_geom_matches_mujoco(scene):
  m, d, mj, md = scene
  rng = np.random.default_rng(1)
  pnt, vec = _rays(mj, md, rng)
  hfield = int(np.nonzero(mj.geom_type == mujoco.mjtGeom.mjGEOM_HFIELD)[0][0])
  spnt, svec = _side_rays(mj, md, rng, hfield)
  pnt, vec = np.concatenate([pnt, spnt]), np.concatenate([vec, svec])
  ours = np.asarray(jax.jit(jax.vmap(lambda p, v: geom_distances(m, d, p, v)))(pnt, vec))
  ref = _mujoco_geom_distances(mj, md, pnt, vec)
  for g in range(mj.ngeom):
    np.testing.assert_allclose(ours[:, g], ref[:, g], rtol=1e-9, atol=1e-10,
                               err_msg=f'geom {mj.geom(g).name} (type {mj.geom_type[g]})')
    assert np.sum(ref[:, g] >= 0) >= 5, mj.geom(g).name       # every geom is hit, often
  # the side rays reach the height field through its sides too (not only its top)
  assert np.sum(ref[NRAY:, hfield] >= 0) > NRAY // 3


def test_nearest_hit_matches_mj_ray(scene):
  """Nearest geom and distance for several geomgroup / flg_static / bodyexclude settings,
  all through one compiled function (the options are traced)."""
  m, d, mj, md = scene
  rng = np.random.default_rng(2)
  pnt, vec = _rays(mj, md, rng)
  cast = jax.jit(jax.vmap(lambda p, v, g, s, b: mjx_py.ray(m, d, p, v, g, s, b),
                          in_axes=(0, 0, None, None, None)))
  arm = mj.body('arm').id
  settings = [(np.ones(6, np.uint8), 1, -1), (np.array([1, 0, 1, 1, 0, 1], np.uint8), 1, arm),
              (np.array([0, 1, 1, 0, 1, 1], np.uint8), 0, mj.body('meshes').id),
              (np.ones(6, np.uint8), 0, 0)]
  geomid = np.zeros(1, np.int32)
  for group, static, exclude in settings:
    dist, gid = cast(pnt, vec, jnp.asarray(group), jnp.asarray(static, bool),
                     jnp.asarray(exclude))
    ref_dist = np.zeros(NRAY)
    ref_gid = np.zeros(NRAY, int)
    for i in range(NRAY):
      ref_dist[i] = mujoco.mj_ray(mj, md, pnt[i], vec[i], group, static, exclude, geomid)
      ref_gid[i] = geomid[0]
    label = f'geomgroup {group} flg_static {static} bodyexclude {exclude}'
    np.testing.assert_allclose(np.asarray(dist), ref_dist, rtol=1e-9, atol=1e-10, err_msg=label)
    np.testing.assert_array_equal(np.asarray(gid), ref_gid, err_msg=label)
    assert np.sum(ref_gid >= 0) >= 20 and np.any(ref_gid == -1)
  # geomgroup=None (no group filter) with the defaults; then a zero direction (MuJoCo raises
  # an error for it: -1 here) and a ray that misses everything
  pnt = np.concatenate([pnt[:50], [[0.0, 0.0, 1.0], [0.0, 0.0, 10.0]]])
  vec = np.concatenate([vec[:50], [[0.0, 0.0, 0.0], [0.0, 0.0, 1.0]]])
  dist, gid = jax.jit(jax.vmap(lambda p, v: mjx_py.ray(m, d, p, v)))(pnt, vec)
  for i in range(50):
    ref = mujoco.mj_ray(mj, md, pnt[i], vec[i], None, 1, -1, geomid)
    assert abs(float(dist[i]) - ref) <= 1e-9 * (1 + abs(ref)) and int(gid[i]) == geomid[0]
  np.testing.assert_array_equal(np.asarray(dist[50:]), [-1, -1])
  np.testing.assert_array_equal(np.asarray(gid[50:]), [-1, -1])


def test_gradients_are_finite_and_match_finite_differences(scene):
  """d dist / d (pnt, vec) for rays that hit each geom (the nearest one), and for misses."""
  m, d, mj, md = scene
  rng = np.random.default_rng(3)
  pnt, vec = _rays(mj, md, rng, 60)

  def dist(p, v):
    return mjx_py.ray(m, d, p, v)[0]

  # one compiled function for the gradients and the central differences
  value_grad = jax.jit(jax.vmap(jax.value_and_grad(dist, argnums=(0, 1))))
  h = 1e-6
  step = rng.standard_normal((2, 60, 3))
  base, grads = value_grad(pnt, vec)
  assert all(np.all(np.isfinite(np.asarray(g))) for g in grads)
  plus = np.asarray(value_grad(pnt + h * step[0], vec + h * step[1])[0])
  minus = np.asarray(value_grad(pnt - h * step[0], vec - h * step[1])[0])
  base = np.asarray(base)
  directional = (np.sum(np.asarray(grads[0]) * step[0], 1)
                 + np.sum(np.asarray(grads[1]) * step[1], 1))
  # central differences where a surface is hit away from its edges
  smooth = (base > 0) & (plus > 0) & (minus > 0) & (np.abs(plus - minus) < 1e-3)
  assert np.sum(smooth) > 20
  fd = (plus - minus) / (2 * h)
  np.testing.assert_allclose(directional[smooth], fd[smooth], rtol=1e-5, atol=1e-6)


def test_traced_model_matches_mujoco(scene):
  """With the Model as a traced argument every geom is tested against every type present and
  meshes / height fields against the model's whole triangle sets: same answers."""
  m, d, mj, md = scene
  rng = np.random.default_rng(4)
  pnt, vec = _rays(mj, md, rng, 40)
  dist, gid = jax.jit(jax.vmap(mjx_py.ray, in_axes=(None, None, 0, 0)))(m, d, pnt, vec)
  geomid = np.zeros(1, np.int32)
  for i in range(40):
    ref = mujoco.mj_ray(mj, md, pnt[i], vec[i], None, 1, -1, geomid)
    assert abs(float(dist[i]) - ref) <= 1e-9 * (1 + abs(ref)) and int(gid[i]) == geomid[0]


def test_rangefinder_sensors_match_mj_forward(scene):
  """Rangefinders (along each site's z axis, excluding the site's body; cutoff clipping) from
  MuJoCo's kinematics at random poses of the arm."""
  m, _, mj, _ = scene
  md = mujoco.MjData(mj)
  rng = np.random.default_rng(5)
  run = jax.jit(lambda d: sensor.sensor_pos(m, d).sensordata)
  values = []
  for _ in range(12):
    oracle.write_state(md, oracle.random_state(mj, rng, qpos_scale=0.8))
    mujoco.mj_forward(mj, md)
    d = oracle.make_data(m, **{f: getattr(md, f).copy() for f in (
        'qpos', 'xpos', 'xmat', 'geom_xpos', 'geom_xmat', 'site_xpos', 'site_xmat')})
    ours = np.asarray(run(d))
    np.testing.assert_allclose(ours, md.sensordata, rtol=1e-9, atol=1e-10)
    values.append(md.sensordata.copy())
  values = np.array(values)
  cutoff = mj.sensor_cutoff[mj.sensor('down').id]
  assert np.any(values > 0) and np.any(values == -1) and np.any(values == cutoff)
