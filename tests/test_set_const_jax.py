"""mjx_py.set_const (JAX mj_setConst) against MuJoCo 3.3.3, in float64.

1. Compiled models: the recomputed fields, zeroed first, must come back equal to MjModel's by
   name; the statistics equal those of ``mujoco.mj_setConst`` (which, like set_const,
   overwrites any ``<statistic>`` override).
2. Domain randomization: ``jax.vmap(set_const)`` over worlds whose masses, inertias, dof
   armature, gears and (spatial tendons) wrap-geom radii and tendon armature are scaled per
   world equals ``mj_setConst`` on an MjModel edited the same way.
3. Gradients of the constants with respect to body_mass are finite and agree with central
   finite differences.
"""

from __future__ import annotations

import dataclasses
import os

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import mjx_py

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = ['models/humanoid.xml', 'models/arm7.xml', 'models/muscle_arm.xml',
          'models/finger_tendon.xml', 'models/chain20.xml',
          'tests/models/actuators_general.xml',   # every transmission and joint type
          'tests/models/tendons_spatial.xml',     # pulleys, wrapping, tendon armature
          'tests/models/mocap_gravcomp.xml']      # mocap bodies, free bodies with children
FIELDS = ('body_subtreemass', 'dof_M0', 'dof_invweight0', 'body_invweight0', 'tendon_length0',
          'tendon_invweight0', 'actuator_length0', 'actuator_acc0', 'cam_pos0', 'cam_poscom0',
          'cam_mat0', 'light_pos0', 'light_poscom0', 'light_dir0')
STATS = ('meaninertia', 'meanmass', 'meansize', 'extent', 'center')
RTOL, ATOL = 1e-9, 1e-12

set_const = jax.jit(mjx_py.set_const)   # shared: one trace per model


@pytest.fixture(autouse=True)
def _x64():
  with jax.enable_x64(True):
    yield


def _load(name):
  path = os.path.join(ROOT, name)
  return path, mjx_py.from_xml_path(path), mujoco.MjModel.from_xml_path(path)


def _zeroed(m):
  return dataclasses.replace(m, **{f: jnp.zeros_like(getattr(m, f)) for f in FIELDS})


def _compare(out, mj, label):
  for f in FIELDS:
    got = np.asarray(getattr(out, f))
    np.testing.assert_allclose(got, getattr(mj, f).reshape(got.shape), rtol=RTOL, atol=ATOL,
                               err_msg=f'{label}: {f}')


def _compare_stats(stat, mj, label):
  for f in STATS:
    np.testing.assert_allclose(np.asarray(getattr(stat, f)), getattr(mj.stat, f), rtol=RTOL,
                               atol=ATOL, err_msg=f'{label}: stat.{f}')


def _set_const_mujoco(mj):
  mujoco.mj_setConst(mj, mujoco.MjData(mj))
  return mj


@pytest.mark.parametrize('name', MODELS)
def test_constants_match_compiled_model(name):
  path, m, mj = _load(name)
  out = set_const(_zeroed(m))
  _compare(out, mj, name)
  _compare_stats(out.stat, _set_const_mujoco(mujoco.MjModel.from_xml_path(path)), name)


def _batched(m, scaled: dict):
  """Model with a leading world axis on the fields of ``scaled`` (name -> (worlds, ...) array)
  and the in_axes tree that maps over exactly those."""
  axes = jax.tree_util.tree_map(lambda _: None, m)
  axes = dataclasses.replace(axes, **{k: 0 for k in scaled})
  return dataclasses.replace(m, **{k: jnp.asarray(v) for k, v in scaled.items()}), axes


def _randomize(name, factors):
  """Per-world scaled fields: name -> (worlds, ...) arrays (scaled the same way in mujoco)."""
  _, m, mj = _load(name)
  rng = np.random.default_rng(0)
  nworld = len(factors)
  f = np.asarray(factors)
  scaled = {'body_mass': f[:, None] * mj.body_mass,
            'body_inertia': f[:, None, None] * mj.body_inertia,
            'dof_armature': f[::-1, None] * (mj.dof_armature + 0.01)}
  if mj.nu:
    scaled['actuator_gear'] = (1 + 0.2 * rng.standard_normal((nworld, mj.nu, 1))) * mj.actuator_gear
  if np.any(mj.tendon_armature > 0):
    scaled['tendon_armature'] = f[:, None] ** 2 * mj.tendon_armature
  wrap_geom = mj.wrap_objid[(mj.wrap_type == 4) | (mj.wrap_type == 5)]
  if wrap_geom.size:   # wrapping spheres/cylinders slightly smaller or bigger
    size = np.repeat(mj.geom_size[None], nworld, axis=0)
    size[:, wrap_geom, 0] *= (0.9 + 0.1 * np.arange(nworld))[:, None]
    scaled['geom_size'] = size
  return m, scaled


@pytest.mark.parametrize('name', ['models/humanoid.xml', 'tests/models/tendons_spatial.xml'])
def test_vmap_domain_randomization(name):
  m, scaled = _randomize(name, [0.5, 1.0, 1.7])
  mb, axes = _batched(m, scaled)
  out = jax.jit(jax.vmap(mjx_py.set_const, in_axes=(axes,)))(mb)
  for w in range(3):
    mj = mujoco.MjModel.from_xml_path(os.path.join(ROOT, name))
    for k, v in scaled.items():
      getattr(mj, k)[:] = v[w]
    _set_const_mujoco(mj)
    world = jax.tree_util.tree_map(lambda x, w=w: x[w], out)
    _compare(world, mj, f'{name} world {w}')
    _compare_stats(world.stat, mj, f'{name} world {w}')
  # the worlds differ where the scaling matters
  assert not np.allclose(out.dof_M0[0], out.dof_M0[2])


def test_gradient_wrt_body_mass_is_finite():
  _, m, _ = _load('tests/models/actuators_general.xml')

  def scalar(mass):
    out = mjx_py.set_const(dataclasses.replace(m, body_mass=mass))
    return (jnp.sum(out.actuator_acc0) + jnp.sum(out.body_invweight0)
            + jnp.sum(out.dof_invweight0) + jnp.sum(out.tendon_invweight0)
            + out.stat.meaninertia + out.stat.meanmass)

  value_and_grad = jax.jit(jax.value_and_grad(scalar))
  value, grad = value_and_grad(m.body_mass)
  grad = np.asarray(grad)
  assert np.all(np.isfinite(grad)) and np.isfinite(value)
  assert np.any(grad[1:] != 0)
  # central finite difference along a random direction that keeps the masses positive
  direction = np.random.default_rng(1).uniform(0.5, 1.5, m.nbody) * np.asarray(m.body_mass)
  eps = 1e-6
  plus = value_and_grad(m.body_mass + eps * direction)[0]
  minus = value_and_grad(m.body_mass - eps * direction)[0]
  np.testing.assert_allclose(grad @ direction, (plus - minus) / (2 * eps), rtol=1e-5)


# A free body with an arm, a spatial tendon and two actuators; masses and inertias are explicit
# (<inertial>), so the edits below are what a domain randomization would write into the Model.
EDITABLE = """
<mujoco>
  <worldbody>
    <geom type="plane" size="2 2 0.1"/>
    <site name="anchor" pos="0 0 2"/>
    <body name="torso" pos="0 0 1">
      <freejoint/>
      <inertial pos="0 0 0" mass="{m1}" diaginertia="{i1} {i1} {i2}"/>
      <geom type="box" size="{bx} 0.1 0.05"/>
      <geom type="sphere" pos="0 0 0.1" size="{r}"/>
      <body name="arm" pos="0.2 0 0">
        <joint name="hinge" axis="0 1 0" armature="{arm}" range="-1 1"/>
        <inertial pos="0.1 0 0" mass="{m2}" diaginertia="0.01 0.02 0.02"/>
        <geom type="capsule" fromto="0 0 0 0.2 0 0" size="{r}"/>
        <geom type="cylinder" pos="0.2 0 0" size="{r} {bx}"/>
        <site name="tip" pos="0.2 0 0"/>
      </body>
    </body>
  </worldbody>
  <tendon><spatial name="cable"><site site="anchor"/><site site="tip"/></spatial></tendon>
  <actuator>
    <motor joint="hinge" gear="{gear}"/>
    <position tendon="cable" kp="10"/>
  </actuator>
</mujoco>
"""
BASE = dict(m1=5.0, i1=0.1, i2=0.2, bx=0.15, r=0.04, arm=0.01, m2=1.0, gear=2.0)
EDITS = [dict(m1=7.5, i1=0.17, i2=0.11, bx=0.21, r=0.06, arm=0.05, m2=0.4, gear=3.5),
         dict(m1=2.0, i1=0.03, i2=0.05, bx=0.1, r=0.02, arm=0.0, m2=2.5, gear=0.5)]
EDITED_FIELDS = ('body_mass', 'body_inertia', 'geom_size', 'dof_armature', 'actuator_gear')


def test_vmap_set_const_equals_compiled_edited_xml():
  """Per-world edited masses, inertias, geom sizes, armature and gears (one jax.vmap over the
  batched Model fields): set_const's constants, geom bounds and statistics equal what our
  compiler gives for the same edits made in the XML."""
  base = mjx_py.from_xml_string(EDITABLE.format(**BASE))
  compiled = [mjx_py.from_xml_string(EDITABLE.format(**e)) for e in EDITS]
  batched = {f: jnp.stack([getattr(c, f) for c in compiled]) for f in EDITED_FIELDS}

  def randomized(fields):
    return set_const(dataclasses.replace(base, **fields))
  out = jax.jit(jax.vmap(randomized))(batched)
  for w, ref in enumerate(compiled):
    for f in FIELDS + ('geom_rbound', 'geom_aabb'):
      np.testing.assert_allclose(np.asarray(getattr(out, f)[w]), np.asarray(getattr(ref, f)),
                                 rtol=RTOL, atol=ATOL, err_msg=f'world {w}: {f}')
    for f in STATS:
      np.testing.assert_allclose(np.asarray(getattr(out.stat, f)[w]),
                                 np.asarray(getattr(ref.stat, f)), rtol=RTOL, atol=ATOL,
                                 err_msg=f'world {w}: stat.{f}')
  # the edits change the constants (the test cannot pass on the base model's values)
  assert not np.allclose(np.asarray(out.actuator_acc0[0]), np.asarray(base.actuator_acc0))
  assert not np.allclose(np.asarray(out.geom_rbound[1]), np.asarray(base.geom_rbound))


FLUID = """
<mujoco>
  <option density="1.2" viscosity="0.001"/>
  <default><geom fluidshape="ellipsoid"/></default>
  <worldbody>
    <body><freejoint/>
      <geom type="sphere" size="{r}"/>
      <geom type="capsule" pos="0.3 0 0" size="{r} {h}"/>
      <geom type="cylinder" pos="0.6 0 0" size="{h} {r}"/>
      <geom type="ellipsoid" pos="0 0.3 0" size="{r} {h} 0.07"/>
      <geom type="box" pos="0 0.6 0" size="{h} 0.05 {r}"/>
      <geom type="box" pos="0 0.9 0" size="{h} 0.05 {r}" fluidshape="none"/>
    </body>
  </worldbody>
</mujoco>
"""


def test_vmap_fluid_added_mass_equals_mujoco_edited_xml():
  """set_const recomputes the ellipsoid fluid model's virtual mass and inertia (geom_fluid
  6:12) from randomized geom sizes as MuJoCo's compiler does for the edited XML."""
  edits = [dict(r=0.05, h=0.1), dict(r=0.11, h=0.04), dict(r=0.02, h=0.2)]
  base = mjx_py.from_xml_string(FLUID.format(**edits[0]))
  sizes = jnp.stack([mjx_py.from_xml_string(FLUID.format(**e)).geom_size for e in edits[1:]])
  out = jax.jit(jax.vmap(lambda s: set_const(dataclasses.replace(base, geom_size=s))))(sizes)
  for w, e in enumerate(edits[1:]):
    mj = mujoco.MjModel.from_xml_string(FLUID.format(**e))
    np.testing.assert_allclose(np.asarray(out.geom_fluid[w]), mj.geom_fluid.reshape(-1, 12),
                               rtol=RTOL, atol=ATOL, err_msg=f'world {w}')
  assert not np.allclose(np.asarray(out.geom_fluid[0, :, 6:]), np.asarray(base.geom_fluid[:, 6:]))


CONNECTS = """
<mujoco>
  <worldbody>
    <body name="a" pos="0 0 1">
      <joint type="hinge" axis="0 1 0"/>
      <geom size="0.1"/>
      <site name="sa" pos="0.1 0 0"/>
      <body name="b" pos="0.5 0 0" euler="0 30 0">
        <joint type="hinge" axis="0 1 0"/>
        <geom size="0.1"/>
      </body>
    </body>
    <body name="c" pos="1 0 1" euler="10 0 20">
      <freejoint/>
      <geom size="0.1"/>
      <site name="sc" pos="0 0.1 0"/>
    </body>
  </worldbody>
  <equality>
    <connect body1="b" body2="c" anchor="0.1 0.05 0"/>
    <connect body1="a" anchor="0 0 0.2"/>
    <connect site1="sa" site2="sc"/>
    <weld body1="a" body2="c"/>
  </equality>
</mujoco>
"""


def test_vmap_connect_anchors_equal_mj_setconst():
  """set_const recomputes the second anchor of body-to-body connects at qpos0 (eq_data 3:6) as
  mj_setConst does, per world under vmap over edited body poses and qpos0; site connects and
  welds keep their data."""
  m = mjx_py.from_xml_string(CONNECTS)
  rng = np.random.default_rng(3)
  nworld = 3
  body_pos = np.repeat(np.asarray(m.body_pos)[None], nworld, 0)
  body_pos[:, 1:] += 0.1 * rng.standard_normal((nworld, m.nbody - 1, 3))
  qpos0 = np.repeat(np.asarray(m.qpos0)[None], nworld, 0)
  qpos0[:, :2] += 0.3 * rng.standard_normal((nworld, 2))       # the two hinges
  scaled = {'body_pos': body_pos, 'qpos0': qpos0}
  mb, axes = _batched(m, scaled)
  out = jax.jit(jax.vmap(mjx_py.set_const, in_axes=(axes,)))(mb)
  for w in range(nworld):
    mj = mujoco.MjModel.from_xml_string(CONNECTS)
    for k, v in scaled.items():
      getattr(mj, k)[:] = v[w]
    _set_const_mujoco(mj)
    np.testing.assert_allclose(np.asarray(out.eq_data[w]), mj.eq_data, rtol=RTOL, atol=ATOL,
                               err_msg=f'world {w}')
  # the body connects moved; the site connect and the weld did not
  assert not np.allclose(np.asarray(out.eq_data[0, :2, 3:6]), np.asarray(m.eq_data[:2, 3:6]))
  np.testing.assert_array_equal(np.asarray(out.eq_data[:, 2:]),
                                np.broadcast_to(np.asarray(m.eq_data[2:]), (nworld, 2, 11)))


@pytest.mark.parametrize('xml', [None, CONNECTS, FLUID.format(r=0.05, h=0.1)])
def test_writes_lists_every_field_set_const_writes(xml):
  """setconst.WRITES (+ massprops.WRITES with from_geoms) as the out_axes of a vmap over worlds
  that differ in every input set_const reads from: a field missing from the list would come out
  batched where the out_axes say unbatched, which vmap refuses."""
  from mjx_py import massprops, setconst
  m = (mjx_py.from_xml_path(os.path.join(ROOT, 'models', 'humanoid.xml')) if xml is None
       else mjx_py.from_xml_string(xml))
  inputs = ['body_mass', 'body_pos', 'body_inertia', 'geom_size', 'geom_density', 'qpos0',
            'cam_pos', 'light_pos', 'dof_armature', 'actuator_gear']
  scale = jnp.array([0.9, 1.1])
  mb = dataclasses.replace(m, **{f: scale.reshape((2,) + (1,) * getattr(m, f).ndim)
                                 * getattr(m, f)[None] for f in inputs})
  out_axes = mjx_py.model_axes(m, inputs + list(massprops.WRITES + setconst.WRITES))
  out = jax.jit(jax.vmap(lambda m: mjx_py.set_const(m, from_geoms=True),
                         in_axes=(mjx_py.model_axes(m, inputs),), out_axes=out_axes))(mb)
  assert out.body_subtreemass.shape == (2, m.nbody)
