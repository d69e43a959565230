"""mjx_py.inertia_from_geoms (body masses and inertias from edited geoms) against MuJoCo 3.3.3.

1. Every bundled and test model: the recomputed body_mass / body_ipos / body_iquat /
   body_inertia of the bodies whose mass frame comes from geoms, zeroed first, come back equal
   to the compiled values (which tests/test_compiler_parity.py holds equal to MjModel's).
2. Domain randomization: one jax.vmap over worlds whose geom sizes, densities and masses
   differ equals, per world, MjModel compiled from the XML edited the same way (every
   primitive, solid and shell, a mesh, a geom with a given mass, a geom outside
   inertiagrouprange, single- and multi-geom bodies, an explicit <inertial>); and
   set_const(m, from_geoms=True) gives that model's constants.
3. The eigensolver replays the compiler's (mjuu_eig3) on random and degenerate matrices.
4. Gradients with respect to geom sizes are finite (float32) and match central differences
   (float64).
"""

from __future__ import annotations

import dataclasses
import glob
import os

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import mjx_py
from mjx_py import massprops
from mjx_py.mjcf import orient

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BODY_FIELDS = ('body_mass', 'body_ipos', 'body_iquat', 'body_inertia')
RTOL, ATOL = 1e-9, 1e-12

inertia_from_geoms = jax.jit(mjx_py.inertia_from_geoms)


@pytest.fixture(autouse=True)
def _x64():
  with jax.enable_x64(True):
    yield


def _compiled_models():
  paths = sorted(glob.glob(os.path.join(ROOT, 'models', '*.xml'))
                 + glob.glob(os.path.join(ROOT, 'tests', 'models', '*.xml')))
  out = []
  for p in paths:
    try:
      m = mjx_py.from_xml_path(p)
    except (mjx_py.MJCFError, mjx_py.NotSupportedError):
      continue   # models that exist to exercise errors
    if np.any(np.asarray(m.body_inertiafromgeom)) and m.inertia_opts[3] <= 0:
      out.append(os.path.relpath(p, ROOT))
  return out


@pytest.mark.parametrize('name', _compiled_models())
def test_recomputed_from_geoms_equals_compiled(name):
  m = mjx_py.from_xml_path(os.path.join(ROOT, name))
  mine = np.asarray(m.body_inertiafromgeom) == 1

  def zeroed(f):
    x = np.array(getattr(m, f))
    x[mine] = 0.0
    return jnp.asarray(x)
  out = inertia_from_geoms(dataclasses.replace(m, **{f: zeroed(f) for f in BODY_FIELDS}))
  for f in BODY_FIELDS:
    np.testing.assert_allclose(np.asarray(getattr(out, f)), np.asarray(getattr(m, f)),
                               rtol=RTOL, atol=ATOL, err_msg=f'{name}: {f}')


# Bodies of every kind the compiler infers from geoms; the {placeholders} are what the
# randomization edits (geom sizes, densities, a given mass).
EDITABLE = """
<mujoco>
  <compiler angle="degree" inertiagrouprange="0 3" boundmass="1e-3" boundinertia="1e-7"/>
  <asset>
    <mesh name="tetra" vertex="0 0 0  0.2 0 0  0 0.25 0  0.05 0.05 0.2"/>
  </asset>
  <worldbody>
    <geom type="plane" size="2 2 0.1"/>
    <body name="torso" pos="0 0 1">
      <freejoint/>
      <geom type="box" size="{bx} 0.1 0.05" euler="0 0 20"/>
      <geom type="sphere" pos="0 0 0.1" size="{r}" density="{rho}"/>
      <geom type="capsule" fromto="0 0 0 0.2 0.05 -0.1" size="{r2}"/>
      <geom type="ellipsoid" pos="-0.1 0 0" size="{ea} 0.05 0.04" euler="10 20 30"
            shellinertia="true"/>
      <geom type="box" size="0.3 0.3 0.3" group="4"/>
      <body name="arm" pos="0.2 0 0">
        <joint name="hinge" axis="0 1 0"/>
        <geom type="cylinder" fromto="0 0 0 0.2 0 0" size="{r2}"/>
        <geom type="mesh" mesh="tetra" pos="0.1 0 0" density="{rho2}"/>
        <geom type="box" pos="0.2 0 0" size="{bx} 0.02 0.02" mass="{gm}"/>
        <body name="single" pos="0.2 0 0">
          <joint axis="1 0 0"/>
          <geom type="capsule" fromto="0 0 0 0 0 -{len}" size="{r}" density="{rho}"/>
        </body>
      </body>
      <body name="shells" pos="0 0.3 0">
        <joint axis="0 0 1"/>
        <geom type="box" size="{bx} 0.03 0.02" shellinertia="true"/>
        <geom type="cylinder" pos="0 0.05 0" size="{r} 0.05" shellinertia="true"/>
        <geom type="capsule" pos="0 -0.05 0" size="{r2} 0.04" shellinertia="true" euler="90 0 0"/>
        <geom type="sphere" pos="0.05 0 0.05" size="{r}" shellinertia="true" density="{rho2}"/>
      </body>
      <body name="explicit" pos="0 -0.3 0">
        <joint axis="0 0 1"/>
        <inertial pos="0.01 0 0" mass="0.7" diaginertia="0.01 0.02 0.03"/>
        <geom type="box" size="{bx} 0.03 0.02"/>
      </body>
    </body>
  </worldbody>
</mujoco>
"""
BASE = dict(bx=0.15, r=0.04, rho=1000, r2=0.03, ea=0.08, rho2=600, gm=0.3, len=0.25)
EDITS = [dict(bx=0.21, r=0.06, rho=400, r2=0.05, ea=0.05, rho2=1500, gm=0.9, len=0.4),
         dict(bx=0.1, r=0.02, rho=2500, r2=0.02, ea=0.12, rho2=300, gm=0.05, len=0.1)]
# the geom fields a randomization writes: sizes, and the poses that fromto derives from them
EDITED = ('geom_size', 'geom_pos', 'geom_quat', 'geom_density', 'geom_mass')
CONSTS = ('body_subtreemass', 'dof_M0', 'dof_invweight0', 'body_invweight0')


def test_vmap_randomized_geoms_equal_mujoco_compiled_edited_xml():
  base = mjx_py.from_xml_string(EDITABLE.format(**BASE))
  refs = [EDITABLE.format(**e) for e in EDITS]
  compiled = [mjx_py.from_xml_string(x) for x in refs]
  batched = {f: jnp.stack([getattr(c, f) for c in compiled]) for f in EDITED}

  def randomized(fields):
    m = dataclasses.replace(base, **fields)
    return mjx_py.inertia_from_geoms(m), mjx_py.set_const(m, from_geoms=True)
  out, consts = jax.jit(jax.vmap(randomized))(batched)
  for w, xml in enumerate(refs):
    mj = mujoco.MjModel.from_xml_string(xml)
    for f in BODY_FIELDS:
      np.testing.assert_allclose(np.asarray(getattr(out, f)[w]), getattr(mj, f), rtol=RTOL,
                                 atol=ATOL, err_msg=f'world {w}: {f}')
    for f in CONSTS:
      np.testing.assert_allclose(np.asarray(getattr(consts, f)[w]),
                                 getattr(mj, f).reshape(getattr(consts, f)[w].shape),
                                 rtol=RTOL, atol=ATOL, err_msg=f'world {w}: {f}')
  # the edits change every inferred body, and leave the explicit <inertial> alone
  body = mujoco.mj_name2id
  mj0 = mujoco.MjModel.from_xml_string(EDITABLE.format(**BASE))
  for name in ('torso', 'arm', 'single', 'shells'):
    i = body(mj0, mujoco.mjtObj.mjOBJ_BODY, name)
    assert not np.isclose(float(out.body_mass[0, i]), mj0.body_mass[i]), name
  i = body(mj0, mujoco.mjtObj.mjOBJ_BODY, 'explicit')
  np.testing.assert_array_equal(np.asarray(out.body_mass[:, i]), [0.7, 0.7])


def test_eig3_replays_the_compiler():
  rng = np.random.default_rng(0)
  mats = []
  for _ in range(40):
    a = rng.standard_normal((3, 3))
    mats.append(a @ a.T + 0.1 * np.eye(3))
  # degenerate spectra: diagonal, repeated eigenvalues, a rotated axisymmetric inertia
  mats += [np.diag([1.0, 2.0, 3.0]), np.diag([2.0, 2.0, 1.0]), np.eye(3), np.zeros((3, 3))]
  q = orient.normvec([0.9, 0.1, -0.3, 0.2])
  r = np.asarray(orient.quat2mat_c(q)).reshape(3, 3)
  mats.append(r @ np.diag([0.5, 0.5, 0.2]) @ r.T)
  vals, quats = jax.jit(jax.vmap(massprops.eig3))(jnp.asarray(np.stack(mats)))
  for k, a in enumerate(mats):
    ref_vals, ref_quat = orient.eig3(a)
    np.testing.assert_allclose(np.asarray(vals[k]), ref_vals, rtol=1e-10, atol=1e-12,
                               err_msg=f'matrix {k}')
    np.testing.assert_allclose(np.asarray(quats[k]), ref_quat, rtol=1e-9, atol=1e-10,
                               err_msg=f'matrix {k}')


def _scalar(m):
  def f(size):
    out = mjx_py.inertia_from_geoms(dataclasses.replace(m, geom_size=size))
    return (jnp.sum(out.body_mass) + jnp.sum(out.body_inertia * 100)
            + jnp.sum(out.body_ipos ** 2) + jnp.sum(out.body_iquat[:, 1:] ** 2))
  return f


def test_gradient_wrt_geom_size():
  m = mjx_py.from_xml_string(EDITABLE.format(**BASE))
  f = jax.jit(jax.value_and_grad(_scalar(m)))
  value, grad = f(m.geom_size)
  grad = np.asarray(grad)
  assert np.isfinite(value) and np.all(np.isfinite(grad))
  assert np.count_nonzero(grad) > 10
  # central difference along a random direction over the sizes in use
  direction = np.random.default_rng(2).uniform(0.5, 1.5, grad.shape) * np.asarray(m.geom_size)
  eps = 1e-6
  plus = f(m.geom_size + eps * direction)[0]
  minus = f(m.geom_size - eps * direction)[0]
  np.testing.assert_allclose(np.sum(grad * direction), (plus - minus) / (2 * eps), rtol=1e-5)


def test_gradient_finite_in_float32():
  with jax.enable_x64(False):
    m = mjx_py.from_xml_string(EDITABLE.format(**BASE))
    grad = jax.jit(jax.grad(_scalar(m)))(m.geom_size)
    assert grad.dtype == jnp.float32 and np.all(np.isfinite(np.asarray(grad)))


@pytest.mark.parametrize('name', ['models/humanoid.xml', 'tests/models/geoms_fromto_mass.xml',
                                  'tests/models/mesh_assets.xml'])
def test_float32_recomputed_close_to_compiled(name):
  """In float32 (every primitive solid and shell, meshes): within float32 rounding of the
  compiled values; a shell ellipsoid uses the well-conditioned limit of the compiler's layer
  (its finite difference of volumes was off by 0.2% in float32)."""
  with jax.enable_x64(False):
    m = mjx_py.from_xml_path(os.path.join(ROOT, name))
    out = jax.jit(mjx_py.inertia_from_geoms)(m)
    for f in BODY_FIELDS:
      got, want = np.asarray(getattr(out, f)), np.asarray(getattr(m, f))
      assert got.dtype == np.float32
      np.testing.assert_allclose(got, want, rtol=5e-5, atol=1e-7, err_msg=f'{name}: {f}')


def test_settotalmass_is_not_supported():
  m = mjx_py.from_xml_string("""
    <mujoco><compiler settotalmass="3"/><worldbody>
      <body><freejoint/><geom size="0.1"/></body></worldbody></mujoco>""")
  with pytest.raises(mjx_py.NotSupportedError, match='settotalmass'):
    mjx_py.inertia_from_geoms(m)


def test_domain_randomization_example():
  """examples/domain_randomization.py's batch: per-world geom edits, and each world's mass frame
  equal to inertia_from_geoms on that world's fields."""
  import importlib.util
  spec = importlib.util.spec_from_file_location(
      'domain_randomization', os.path.join(ROOT, 'examples', 'domain_randomization.py'))
  example = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(example)
  m = mjx_py.from_xml_path(os.path.join(ROOT, 'models', 'hopper.xml'))
  models = example.randomize(m, jax.random.PRNGKey(0), 3)
  assert models.geom_size.shape == (3,) + m.geom_size.shape
  assert models.body_iquat.shape == (3,) + m.body_iquat.shape   # a consistent per-world field
  assert models.body_parentid.shape == m.body_parentid.shape    # unbatched elsewhere
  for w in range(3):
    world = dataclasses.replace(m, **{f: getattr(models, f)[w] for f in example.RANDOMIZED})
    ref = inertia_from_geoms(world)
    for f in BODY_FIELDS:
      np.testing.assert_allclose(np.asarray(getattr(models, f)[w]), np.asarray(getattr(ref, f)),
                                 rtol=RTOL, atol=ATOL, err_msg=f'world {w}: {f}')
  assert len(set(np.round(np.asarray(jnp.sum(models.body_mass, axis=1)), 9))) == 3


PENDULUM = """
<mujoco>
  <option timestep="0.01"/>
  <worldbody>
    <body pos="0 0 1">
      <joint type="hinge" axis="0 1 0" damping="0.02"/>
      <geom type="capsule" fromto="0 0 0 0.5 0 0" size="0.03"/>
      <geom type="sphere" pos="0.5 0 0" size="0.06" density="3000"/>
    </body>
  </worldbody>
</mujoco>
"""


def test_rollout_gradient_wrt_geom_size_through_set_const():
  """System identification of geometry: d(final angle after 60 steps)/d(geom sizes), with the
  body inertia inferred from the sizes in the differentiated program, equals central
  differences (the bob's radius moves the pendulum's centre of mass, mass and inertia)."""
  m = mjx_py.from_xml_string(PENDULUM)

  def final_angle(size):
    mm = mjx_py.set_const(dataclasses.replace(m, geom_size=size), from_geoms=True)
    d = dataclasses.replace(mjx_py.make_data(mm), qpos=jnp.array([0.4]))
    d = jax.lax.scan(lambda d, _: (mjx_py.step(mm, d), None), d, None, length=60)[0]
    return d.qpos[0]

  f = jax.jit(jax.value_and_grad(final_angle))
  value, grad = f(m.geom_size)
  grad = np.asarray(grad)
  assert np.all(np.isfinite(grad)) and grad[1, 0] != 0 and grad[0, 0] != 0
  direction = np.zeros_like(grad)
  direction[:, 0] = np.asarray(m.geom_size)[:, 0]     # both radii, scaled together
  eps = 1e-5
  fd = (f(m.geom_size + eps * direction)[0] - f(m.geom_size - eps * direction)[0]) / (2 * eps)
  np.testing.assert_allclose(np.sum(grad * direction), fd, rtol=1e-5)
  # the same model compiled with larger radii swings differently (the sizes matter)
  assert abs(float(value) - float(jax.jit(final_angle)(m.geom_size * 1.2))) > 1e-3
