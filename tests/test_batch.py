"""Batches of worlds: jax.vmap over per-world Model fields, and sharding across devices.

1. ``jax.vmap(step)`` over a Model whose friction, masses, inertias, geom sizes, gravity,
   timestep, actuator gains, solref / solimp and damping differ per world (passed through
   ``set_const`` inside the vmapped function) equals stepping each world alone with its own
   Model, over 40 steps with contacts (float64).
2. ``model_axes`` refuses static fields and unknown names.
2a. A loop of jitted batched steps with the Data donated (``donate_argnums``, the README's
   per-step loop) gives the undonated loop's states bit for bit, consumes the input Data's
   state buffers and uses every donated buffer (no "not usable" warning).
2b. Every float array leaf of the Model at once (the options, geometry, inertias, solver,
   actuator, tendon, equality and sensor parameters: 145 of its 269 leaves) with a batch axis,
   the index arrays closed over: ``vmap(step)`` equals the unbatched step of each world.
3. ``shard_batch`` / ``replicate`` / ``shard_worlds`` on a CPU with 2 forced host devices (a
   subprocess: the device count is fixed when JAX starts): a jitted, vmapped rollout of 4
   worlds runs sharded, its outputs stay split across both devices, and it equals the
   unsharded rollout; so does the rollout run per device by ``shard_worlds`` (per-world masses
   through ``model_axes``, controls with the batch on axis 1), and a loop of a compiled
   per-device step fed its own outputs.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from oracle import ROOT

import mjx_py

SCENE = """
<mujoco>
  <option timestep="0.004"/>
  <worldbody>
    <geom name="floor" type="plane" size="2 2 0.1"/>
    <body name="box" pos="0.3 0 0.12">
      <freejoint/>
      <geom name="box" type="box" size="0.1 0.08 0.1" density="300"/>
    </body>
    <body name="ball" pos="-0.3 0 0.2">
      <freejoint/>
      <geom name="ball" type="sphere" size="0.07" density="500"/>
    </body>
    <body name="arm" pos="0 0 0.3">
      <joint name="swing" axis="0 1 0" damping="0.5"/>
      <geom name="arm" type="capsule" fromto="0 0 0 0.25 0 -0.15" size="0.03"/>
    </body>
  </worldbody>
  <actuator><motor joint="swing" gear="1"/></actuator>
</mujoco>
"""
NWORLD, NSTEP = 4, 40
# per-world fields and how each world scales / replaces them
FIELDS = ['geom_friction', 'body_mass', 'body_inertia', 'geom_size', 'opt.gravity',
          'opt.timestep', 'actuator_gainprm', 'geom_solref', 'geom_solimp', 'dof_damping']


def _worlds(m):
  """The per-world field values (leading axis NWORLD), scaled by a fixed random draw."""
  rng = np.random.default_rng(0)

  def scale(x, lo, hi):
    x = np.asarray(x)
    return np.stack([x * rng.uniform(lo, hi, x.shape) for _ in range(NWORLD)])
  solimp = np.stack([np.asarray(m.geom_solimp)] * NWORLD)
  solimp[:, :, 0] = rng.uniform(0.85, 0.95, (NWORLD, m.ngeom))
  return {
      'geom_friction': scale(m.geom_friction, 0.5, 1.5),
      'body_mass': scale(m.body_mass, 0.7, 1.3),
      'body_inertia': scale(m.body_inertia, 0.7, 1.3),
      'geom_size': scale(m.geom_size, 0.9, 1.1),
      'opt.gravity': np.stack([[0.0, 0.0, -9.81 * s] for s in rng.uniform(0.5, 1.5, NWORLD)]),
      'opt.timestep': np.array([0.004, 0.003, 0.002, 0.0045]),
      'actuator_gainprm': scale(m.actuator_gainprm, 0.5, 2.0),
      'geom_solref': scale(m.geom_solref, 0.8, 1.2),
      'geom_solimp': solimp,
      'dof_damping': scale(m.dof_damping, 0.5, 2.0),
  }


def _replace(m, fields):
  """m with the given fields replaced (``opt.`` names in m.opt)."""
  top = {k: v for k, v in fields.items() if '.' not in k}
  opt = {k[4:]: v for k, v in fields.items() if k.startswith('opt.')}
  return dataclasses.replace(m, **top, opt=dataclasses.replace(m.opt, **opt))


def _rollout(m, d, ctrls):
  def body(d, c):
    d = mjx_py.step(m, dataclasses.replace(d, ctrl=c))
    return d, (d.qpos, d.ncon)
  return jax.lax.scan(body, d, ctrls)[1]


def test_vmap_over_batched_model_equals_per_world_models():
  with jax.enable_x64(True):
    m = mjx_py.from_xml_string(SCENE)
    d0 = mjx_py.make_data(m)
    worlds = {k: jnp.asarray(v) for k, v in _worlds(m).items()}
    ctrls = jnp.asarray(np.random.default_rng(1).uniform(-1, 1, (NWORLD, NSTEP, m.nu)))

    def one(fields, ctrl):
      return _rollout(mjx_py.set_const(_replace(m, fields)), d0, ctrl)
    # the batched Model through model_axes (what a user writes), against each world's own
    # Model (until stop 40 also a vmap over the dict of fields, equal to 1e-12: a third compile),
    # compiled with the options of large batches (NO_LIBRARY_FUSIONS: reductions and small
    # products in XLA's own loops rather than YNNPACK's), against per-world programs without
    batched = _replace(m, worlds)
    maxes = mjx_py.model_axes(m, FIELDS)
    qpos, ncon = jax.jit(jax.vmap(lambda mm, c: _rollout(mjx_py.set_const(mm), d0, c),
                                  in_axes=(maxes, 0)),
                         compiler_options=mjx_py.xla.compile_options(
                             batch=mjx_py.xla.LIBRARY_FUSIONS_MIN_BATCH))(batched, ctrls)

    single = jax.jit(one)
    for w in range(NWORLD):
      ref_qpos, ref_ncon = single({k: v[w] for k, v in worlds.items()}, ctrls[w])
      np.testing.assert_allclose(np.asarray(qpos[w]), np.asarray(ref_qpos), rtol=0, atol=1e-10,
                                 err_msg=f'world {w}')
      np.testing.assert_array_equal(np.asarray(ncon[w]), np.asarray(ref_ncon))
    assert int(ncon[:, -1].min()) > 0                       # contacts in every world
    spread = np.ptp(np.asarray(qpos[:, -1]), axis=0)        # the worlds went different ways
    assert spread.max() > 1e-3


def test_nested_vmap_models_by_worlds():
  """Two nested vmaps, the outer over per-world Models (friction and gravity), the inner over
  starting states: each of the 2 x 2 rollouts (10 steps with contacts, float64) equals the
  same rollout alone. (Until stop 60 a nested vmap of the step failed while batching the
  solver's per-world iterations: a carry leaf with no entries was flattened by a reshape to
  -1.)"""
  with jax.enable_x64(True):
    m = mjx_py.from_xml_string(SCENE)
    d0 = mjx_py.make_data(m)
    worlds = {k: jnp.asarray(v[:2]) for k, v in _worlds(m).items()
              if k in ('geom_friction', 'opt.gravity')}
    lift = jnp.asarray([0.0, 0.02])                              # the inner axis: start height
    ctrls = jnp.asarray(np.random.default_rng(2).uniform(-1, 1, (10, m.nu)))

    def run(mm, z):
      return _rollout(mm, dataclasses.replace(d0, qpos=d0.qpos.at[2].add(z)), ctrls)
    inner = jax.vmap(run, in_axes=(None, 0))
    maxes = mjx_py.model_axes(m, list(worlds))
    qpos, ncon = jax.jit(jax.vmap(inner, in_axes=(maxes, None)))(_replace(m, worlds), lift)
    single = jax.jit(run)
    for i in range(2):
      for j in range(2):
        ref_qpos, ref_ncon = single(_replace(m, {k: v[i] for k, v in worlds.items()}), lift[j])
        np.testing.assert_allclose(np.asarray(qpos[i, j]), np.asarray(ref_qpos), rtol=0,
                                   atol=1e-10, err_msg=f'model {i}, world {j}')
        np.testing.assert_array_equal(np.asarray(ncon[i, j]), np.asarray(ref_ncon))
    assert int(ncon[:, :, -1].min()) > 0


def test_donated_batched_step_loop():
  with jax.enable_x64(True):
    m = mjx_py.from_xml_string(SCENE)
    d = mjx_py.make_data(m)
    worlds = jax.tree_util.tree_map(lambda x: jnp.stack([x] * NWORLD), d)
    ctrl = np.linspace(-1.0, 1.0, NWORLD)[:, None]
    worlds = dataclasses.replace(worlds, ctrl=jnp.asarray(ctrl))
    batch = jax.vmap(mjx_py.step, in_axes=(None, 0))
    plain, donated = jax.jit(batch), jax.jit(batch, donate_argnums=1)
    a = worlds
    b = jax.tree_util.tree_map(jnp.copy, worlds)
    with warnings.catch_warnings():
      warnings.filterwarnings('error', message='.*donated buffers were not usable.*')
      for _ in range(5):
        a = plain(m, a)
        old, b = b, donated(m, b)
        # the fields a step reads are donated (those it only writes, efc_J, are not arguments
        # of the compiled program: jit drops unused inputs)
        assert old.qpos.is_deleted() and old.qvel.is_deleted()
    assert int(np.max(a.ncon)) > 0
    for name in ('qpos', 'qvel', 'qacc', 'efc_force', 'qacc_warmstart'):
      np.testing.assert_array_equal(getattr(b, name), getattr(a, name), err_msg=name)


def test_model_axes_refuses_static_fields():
  m = mjx_py.from_xml_string(SCENE)
  axes = mjx_py.model_axes(m, ['body_mass', 'opt.wind'])
  assert axes.body_mass == 0 and axes.opt.wind == 0 and axes.geom_size is None
  for bad in ['nbody', 'opt.solver', 'opt.iterations', 'body_masses', 'opt.gravity.x']:
    with pytest.raises(ValueError, match='model_axes'):
      mjx_py.model_axes(m, [bad])


def _float_leaves(m):
  """The Model's float array leaves: (indices into its flattened leaves, a function that puts
  new values at those indices, the leaves' paths)."""
  paths, treedef = jax.tree_util.tree_flatten_with_path(m)
  leaves = [x for _, x in paths]
  idx = [i for i, x in enumerate(leaves)
         if hasattr(x, 'dtype') and jnp.issubdtype(x.dtype, jnp.floating)]

  def put(values):
    new = list(leaves)
    for i, v in zip(idx, values):
      new[i] = v
    return jax.tree_util.tree_unflatten(treedef, new)
  return [leaves[i] for i in idx], put, [jax.tree_util.keystr(paths[i][0]) for i in idx]


@pytest.mark.parametrize('name', ['sensors_all', 'equality_all'])
def test_every_float_field_can_be_batched(name):
  """Every float leaf of the Model carries a batch axis at once (each world a copy of the
  model's values), the worlds start from different velocities and controls, and the index
  arrays stay closed over (as a randomization passes only its batched fields into the jitted
  function): ``vmap(step)`` equals the unbatched step of each world, so no stage reads a float
  field in Python or depends on its shape (float64)."""
  nworld = 2
  with jax.enable_x64(True):
    m = mjx_py.from_xml_path(os.path.join(ROOT, 'tests', 'models', name + '.xml'))
    floats, put, paths = _float_leaves(m)
    assert len(floats) > 100 and 'opt.timestep' in ''.join(paths)
    assert any('sensor_cutoff' in p for p in paths) and any('eq_data' in p for p in paths)
    rng = np.random.default_rng(0)
    d0 = mjx_py.make_data(m)
    ds = [dataclasses.replace(d0, qvel=jnp.asarray(rng.normal(0, 0.5, m.nv)),
                              ctrl=jnp.asarray(rng.uniform(-1, 1, m.nu)))
          for _ in range(nworld)]
    batched = [jnp.stack([x] * nworld) for x in floats]
    dbatch = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *ds)
    out = jax.jit(jax.vmap(lambda f, d: mjx_py.step(put(f), d)))(batched, dbatch)
    single = jax.jit(lambda d: mjx_py.step(m, d))
    for w in range(nworld):
      ref = single(ds[w])
      for field in ('qpos', 'qvel', 'qacc', 'sensordata', 'efc_force', 'efc_J'):
        np.testing.assert_allclose(np.asarray(getattr(out, field)[w]),
                                   np.asarray(getattr(ref, field)), rtol=1e-9, atol=1e-9,
                                   err_msg=f'{name} world {w} {field}')
    assert np.abs(np.asarray(out.qvel[0] - out.qvel[1])).max() > 1e-3   # the worlds differ


SHARDED = textwrap.dedent('''
    import dataclasses, sys
    import jax, jax.numpy as jnp, numpy as np
    jax.config.update('jax_enable_x64', True)
    sys.path.insert(0, {tests!r})
    import mjx_py
    from test_batch import SCENE
    assert len(jax.devices()) == 2, jax.devices()
    m = mjx_py.from_xml_string(SCENE)
    d0 = mjx_py.make_data(m)
    n, nstep = 4, 25
    mass = jnp.asarray(np.asarray(m.body_mass) * np.linspace(0.6, 1.4, n)[:, None])
    ctrls = jnp.asarray(np.random.default_rng(2).uniform(-1, 1, (n, nstep, m.nu)))

    def run(mass, ctrls):
        def one(mass, ctrl):
            mm = mjx_py.set_const(dataclasses.replace(m, body_mass=mass))
            def body(d, c):
                d = mjx_py.step(mm, dataclasses.replace(d, ctrl=c))
                return d, d.qpos
            return jax.lax.scan(body, d0, ctrl)[1]
        return jax.vmap(one)(mass, ctrls)

    fn = jax.jit(run)
    ref = fn(mass, ctrls)
    smass, sctrls = mjx_py.shard_batch((mass, ctrls))
    assert len(smass.sharding.device_set) == 2
    out = fn(smass, sctrls)
    assert len(out.sharding.device_set) == 2, out.sharding
    assert not out.sharding.is_fully_replicated
    err = float(jnp.max(jnp.abs(out - ref)))
    assert err < 1e-12, err
    try:
        mjx_py.shard_batch(jnp.zeros((3, 2)))
        raise SystemExit('no error for 3 worlds on 2 devices')
    except ValueError as e:
        assert 'cannot be split' in str(e)
    rep = mjx_py.replicate(m)
    assert rep.body_mass.sharding.is_fully_replicated

    # shard_worlds: each device runs the batched rollout on its worlds alone (no batch-wide
    # decisions across devices); per-world Model fields via model_axes, controls with the
    # batch on axis 1, so the row bucket and early exits are each device's own
    axes = mjx_py.model_axes(m, ['body_mass'])
    mb = dataclasses.replace(m, body_mass=mass)

    def run_model(mb, ctrls_t):
        def one(mm, ctrl):
            mm = mjx_py.set_const(mm)
            def body(d, c):
                d = mjx_py.step(mm, dataclasses.replace(d, ctrl=c))
                return d, d.qpos
            return jax.lax.scan(body, d0, ctrl)[1]
        return jax.vmap(one, in_axes=(axes, 1))(mb, ctrls_t)

    per_dev = jax.jit(mjx_py.shard_worlds(run_model, in_axes=(axes, 1)))
    ctrls_t = jnp.swapaxes(ctrls, 0, 1)                    # (nstep, n, nu)
    smb = dataclasses.replace(m, body_mass=mjx_py.shard_batch(mass))
    out = per_dev(smb, mjx_py.shard_batch(ctrls_t, axis=1))
    assert len(out.sharding.device_set) == 2 and not out.sharding.is_fully_replicated
    err_worlds = float(jnp.max(jnp.abs(out - ref)))
    assert err_worlds < 1e-12, err_worlds

    # a stepping loop: the compiled step takes back its own outputs (empty leaves included);
    # its reference is the unsharded rollout program above at the model's own masses and zero
    # controls (d0's), already compiled
    db = jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (n,) + x.shape), d0)
    vstep = jax.vmap(lambda d: mjx_py.step(m, d))
    sstep = jax.jit(mjx_py.shard_worlds(vstep))
    sd = mjx_py.shard_batch(db)
    compiled = sstep.lower(sd).compile()
    for _ in range(3):
        sd = compiled(sd)
    assert len(sd.qpos.sharding.device_set) == 2
    same = fn(jnp.broadcast_to(m.body_mass, mass.shape), jnp.zeros_like(ctrls))
    err_loop = float(jnp.max(jnp.abs(sd.qpos - same[:, 2])))
    assert err_loop < 1e-12, err_loop
    try:
        mjx_py.shard_batch(ctrls_t[:, :3], axis=1)
        raise SystemExit('no error for 3 worlds on 2 devices (axis 1)')
    except ValueError as e:
        assert 'axis 1' in str(e)
    print('sharded ok', err, err_worlds, err_loop)
''')


def test_shard_batch_on_two_host_devices():
  env = dict(os.environ)
  env['XLA_FLAGS'] = (env.get('XLA_FLAGS', '') +
                      ' --xla_force_host_platform_device_count=2').strip()
  env['JAX_PLATFORMS'] = 'cpu'
  script = SHARDED.format(tests=os.path.join(ROOT, 'tests'))
  res = subprocess.run([sys.executable, '-c', script], env=env, capture_output=True, text=True,
                       timeout=600)
  assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
  assert 'sharded ok' in res.stdout
