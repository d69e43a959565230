"""Public API: loading, the Model/Data pytrees under jit/vmap, keyframes, hardened parsing."""

from __future__ import annotations

import dataclasses
import os
import re
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mjx_py

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HUMANOID = os.path.join(ROOT, 'models', 'humanoid.xml')

SMALL = """
<mujoco>
  <worldbody>
    <body name="b" pos="0 0 1">
      <joint name="h" type="hinge" axis="0 1 0" range="-30 60"/>
      <geom type="capsule" fromto="0 0 0 0 0 -0.5" size="0.05"/>
    </body>
  </worldbody>
  <actuator><motor joint="h" ctrlrange="-1 1"/></actuator>
  <keyframe><key name="k" qpos="0.3" ctrl="0.5" time="1.5"/></keyframe>
</mujoco>
"""


@pytest.fixture(scope='module')
def humanoid():
  return mjx_py.from_xml_path(HUMANOID)


def test_from_xml_string_and_sizes():
  m = mjx_py.from_xml_string(SMALL)
  assert (m.nq, m.nv, m.nu, m.nbody, m.nkey) == (1, 1, 1, 2, 1)
  assert mjx_py.name2id(m, 'joint', 'h') == 0
  assert mjx_py.name2id(m, 'body', 'world') == 0
  assert mjx_py.name2id(m, 'body', 'nope') == -1
  np.testing.assert_allclose(np.asarray(m.jnt_range[0]), np.deg2rad([-30, 60]), rtol=1e-6)


def test_default_dtypes(humanoid):
  assert humanoid.body_mass.dtype == jnp.result_type(float)
  assert humanoid.jnt_qposadr.dtype == jnp.int32
  assert humanoid.jnt_limited.dtype == jnp.int32
  assert isinstance(humanoid.opt.integrator, int)


def test_model_is_pytree_under_jit_and_vmap(humanoid):
  leaves, treedef = jax.tree_util.tree_flatten(humanoid)
  assert all(isinstance(x, jax.Array) for x in leaves)
  rebuilt = jax.tree_util.tree_unflatten(treedef, leaves)
  assert rebuilt.nv == humanoid.nv

  @jax.jit
  def total_mass(m):
    return jnp.sum(m.body_mass) * m.opt.timestep

  np.testing.assert_allclose(total_mass(humanoid),
                             np.sum(humanoid.body_mass) * humanoid.opt.timestep, rtol=1e-6)
  # a batch of models differing in mass (domain randomization shape)
  scales = jnp.linspace(0.5, 1.5, 4)
  batched = jax.vmap(lambda s: jax.tree_util.tree_map(lambda x: x, humanoid).__class__(
      **{**{f: getattr(humanoid, f) for f in humanoid.__dataclass_fields__},
         'body_mass': humanoid.body_mass * s}))(scales)
  assert batched.body_mass.shape == (4, humanoid.nbody)
  out = jax.vmap(total_mass)(batched)
  np.testing.assert_allclose(out, scales * total_mass(humanoid), rtol=1e-5)


def test_make_data_and_keyframe():
  m = mjx_py.from_xml_string(SMALL)
  d = mjx_py.make_data(m)
  assert d.qpos.shape == (1,) and d.ctrl.shape == (1,)
  dk = mjx_py.reset_data(m, key=0)
  np.testing.assert_allclose(dk.qpos, [0.3])
  np.testing.assert_allclose(dk.ctrl, [0.5])
  np.testing.assert_allclose(dk.time, 1.5)
  with pytest.raises(ValueError):
    mjx_py.reset_data(m, key=3)
  d2 = jax.jit(lambda d: d)(d)
  assert jax.tree_util.tree_structure(d2) == jax.tree_util.tree_structure(d)


def test_loading_and_make_data_compile_nothing():
  """from_xml_string and make_data build their arrays on the host and transfer them: no XLA
  program is compiled (each eager jnp conversion used to compile one, ~220 for a humanoid),
  and make_data outside a trace equals make_data traced under jit."""
  import logging
  messages = []

  class Catch(logging.Handler):
    def emit(self, record):
      messages.append(record.getMessage())

  handler = Catch(level=logging.DEBUG)
  logger = logging.getLogger('jax')
  level = logger.level
  logger.addHandler(handler)
  logger.setLevel(logging.DEBUG)
  try:
    with jax.log_compiles(True):
      m = mjx_py.from_xml_string(SMALL.replace('<keyframe>', '<equality><joint joint1="h"/>'
                                               '</equality><keyframe>'))
      d = mjx_py.make_data(m)
  finally:
    logger.removeHandler(handler)
    logger.setLevel(level)
  compiles = [x for x in messages if x.startswith('Compiling')]
  assert not compiles, compiles[:3]
  traced = jax.jit(mjx_py.make_data)(m)
  for a, b in zip(jax.tree_util.tree_leaves(d), jax.tree_util.tree_leaves(traced)):
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert int(d.eq_active[0]) == 1 and d.efc_type.shape == (m.nefc_max,)
  assert np.all(np.asarray(d.efc_type) == -1)


def test_fast_compile_options():
  """compile_options gives FAST_COMPILE on a CPU backend whose XLA has the option (jaxlib
  0.10.2's), and for LIBRARY_FUSIONS_MIN_BATCH or more worlds per device also
  NO_LIBRARY_FUSIONS where XLA has that one, None elsewhere (an accelerator, jaxlib 0.11.2's
  XLA:CPU for FAST_COMPILE); the probe tells an unknown option apart."""
  import mjx_py.xla as xla
  assert mjx_py.FAST_COMPILE == {'xla_cpu_use_fusion_emitters': False,
                                 'xla_disable_hlo_passes': 'tree_reduction_rewriter'}
  assert xla.NO_LIBRARY_FUSIONS == {'xla_cpu_experimental_ynn_fusion_type': ''}
  supported = xla.fast_compile_supported()
  on_cpu = jax.default_backend() == 'cpu'
  assert xla.compile_options() == (mjx_py.FAST_COMPILE if supported and on_cpu else None)
  batched = xla.compile_options(batch=xla.LIBRARY_FUSIONS_MIN_BATCH)
  expect = {**(mjx_py.FAST_COMPILE if supported else {}),
            **(xla.NO_LIBRARY_FUSIONS if xla.no_library_fusions_supported() else {})}
  # a batched program also leaves out loop-invariant code motion, after FAST_COMPILE's pass
  expect['xla_disable_hlo_passes'] = ','.join(
      ['tree_reduction_rewriter'] * supported + ['while-loop-invariant-code-motion'])
  assert xla.NO_LOOP_HOISTING == 'while-loop-invariant-code-motion'
  assert batched == (expect if on_cpu else None)
  if on_cpu:
    assert xla.option_groups(batched) == (['FAST_COMPILE'] * supported + ['NO_LIBRARY_FUSIONS']
                                          * xla.no_library_fusions_supported()
                                          + ['NO_LOOP_HOISTING'])
    # the pass list is compared as a set, and a group needs all of its options
    assert xla.option_groups({**batched, 'xla_disable_hlo_passes': ','.join(reversed(
        batched['xla_disable_hlo_passes'].split(',')))}) == xla.option_groups(batched)
    assert 'FAST_COMPILE' not in xla.option_groups(
        {'xla_disable_hlo_passes': 'tree_reduction_rewriter'})
  assert xla.option_groups(None) == []
  assert xla.compile_options(batch=xla.LIBRARY_FUSIONS_MIN_BATCH - 1) == xla.compile_options()
  assert xla.compile_options(False) is None and xla.compile_options(False, batch=64) is None
  if xla.no_library_fusions_supported():
    # a short sum over a batch of 3-vectors (safe_norm's pattern) goes to a YNNPACK library
    # fusion by default; NO_LIBRARY_FUSIONS keeps it in XLA's own fused loop, same values
    x = jnp.asarray(np.random.default_rng(0).standard_normal((256, 14, 3)), jnp.float32)
    lowered = jax.jit(lambda x: jnp.sqrt(jnp.sum(x * x, axis=-1))).lower(x)
    own = lowered.compile(xla.NO_LIBRARY_FUSIONS)
    assert '__ynn_fusion' not in own.as_text()
    np.testing.assert_allclose(own(x), np.linalg.norm(np.asarray(x), axis=-1), rtol=1e-6)
  if supported:
    f = jax.jit(lambda x: jnp.sin(x) * 2, compiler_options=mjx_py.FAST_COMPILE)
    np.testing.assert_allclose(f(jnp.ones(3)), 2 * np.sin(np.ones(3)), rtol=1e-6)
    # a sum of 1000 elements: XLA's tree-reduction rewrite splits it into a windowed
    # reduction, which FAST_COMPILE leaves out (one kernel fewer to build per long reduction)
    lowered = jax.jit(lambda x: jnp.sum(jnp.sin(x))).lower(jnp.ones(1000))
    assert 'reduce-window' in lowered.compile().as_text()
    fast = lowered.compile(mjx_py.FAST_COMPILE)
    assert 'reduce-window' not in fast.as_text()
    np.testing.assert_allclose(fast(jnp.ones(1000)), 1000 * np.sin(1.0), rtol=1e-5)
  saved = xla.FAST_COMPILE
  try:                                     # an option this XLA lacks: not supported, no error
    xla.FAST_COMPILE = {'xla_cpu_no_such_option': False}
    xla.fast_compile_supported.cache_clear()
    assert not xla.fast_compile_supported() and xla.compile_options() is None
  finally:
    xla.FAST_COMPILE = saved
    xla.fast_compile_supported.cache_clear()
  assert xla.fast_compile_supported() == supported


def test_set_cpu_flags(monkeypatch):
  """mjx_py.xla.set_cpu_flags: before JAX starts, CPU_XLA_FLAGS and the CPU device count go
  into $XLA_FLAGS; a small while loop (50 steps on 8 KB, above XLA:CPU's default threshold of
  1024 bytes) then compiles into one kernel, which it does not without the call, and the CPU
  presents the devices asked for (devices=1: one, no count flag); separate processes, as XLA
  reads $XLA_FLAGS once, when it starts. After the start, or with the user's own backend
  options, nothing changes."""
  import subprocess
  import sys

  from mjx_py.xla import CPU_XLA_FLAGS, DEVICE_COUNT_FLAG, set_cpu_flags
  code = ('import os, sys\n'
          'from mjx_py import xla\n'
          'n = int(sys.argv[1])\n'
          'applied = xla.set_cpu_flags(n) if n else False\n'
          'import jax, jax.numpy as jnp\n'
          'f = jax.jit(lambda x: jax.lax.fori_loop(0, 50, lambda i, y: jnp.sin(y) + y[::-1], x))\n'
          'small = "xla_cpu_small_call" in f.lower(jnp.ones(2000)).compile().as_text()\n'
          'print(applied, small, xla.set_cpu_flags(), len(jax.devices("cpu")), '
          'os.environ.get("XLA_FLAGS", "-"))\n')
  env = {k: v for k, v in os.environ.items() if k != 'XLA_FLAGS'}
  out = {n: subprocess.run([sys.executable, '-c', code, str(n)], env=env, capture_output=True,
                           text=True, check=True).stdout.split(maxsplit=4)
         for n in (3, 1, 0)}
  assert out[3][:4] == ['True', 'True', 'False', '3']
  assert out[3][4].split() == [CPU_XLA_FLAGS, f'{DEVICE_COUNT_FLAG}=3']
  assert out[1][:4] == ['True', 'True', 'False', '1'] and out[1][4].strip() == CPU_XLA_FLAGS
  assert out[0][0] == 'False' and out[0][2:4] == ['False', '1'] and out[0][4].strip() == '-'
  if tuple(int(x) for x in jax.__version__.split('.')[:2]) < (0, 11):
    # without the call, XLA's default threshold (1024 bytes in jaxlib 0.10.2) runs the loop
    # step by step; jaxlib 0.12.1's XLA:CPU compiles this loop into one kernel by itself
    assert out[0][1] == 'False'
  jnp.ones(1).block_until_ready()                   # this process's XLA has started
  monkeypatch.setenv('XLA_FLAGS', '--xla_cpu_use_fusion_emitters=false')
  assert not set_cpu_flags() and os.environ['XLA_FLAGS'] == '--xla_cpu_use_fusion_emitters=false'
  own = '--xla_backend_extra_options=xla_cpu_small_while_loop_byte_threshold=4096'
  monkeypatch.setenv('XLA_FLAGS', own)
  assert not set_cpu_flags() and os.environ['XLA_FLAGS'] == own


def test_gc_paused(monkeypatch):
  """mjx_py.xla.gc_paused: nested and failing uses restore the collector once, after the
  outermost; a collector the caller disabled stays disabled; lower_paused resumes it.
  Tracing step, forward and rollout (with a collection threshold of 50 allocations) runs a
  few collections, outside their calls, where the same traces with the pause made a no-op
  (traced second, so with JAX's caches warm) run hundreds each."""
  import gc

  from mjx_py.xla import gc_paused, lower_paused
  assert gc.isenabled()
  with gc_paused():
    with gc_paused():
      assert not gc.isenabled()
    assert not gc.isenabled()
  assert gc.isenabled()
  with pytest.raises(ValueError):
    with gc_paused():
      raise ValueError
  assert gc.isenabled()
  gc.disable()
  try:
    with gc_paused():
      pass
    assert not gc.isenabled()
  finally:
    gc.enable()
  lowered = lower_paused(jax.jit(lambda x: x + 1), jnp.ones(2))   # compiled after the pause
  assert gc.isenabled() and float(lowered.compile()(jnp.ones(2))[0]) == 2.0

  m = mjx_py.from_xml_string(SMALL)
  d = mjx_py.make_data(m)
  starts = []

  def count(phase, info):
    if phase == 'start':
      starts.append(gc_paused._depth)

  def collections():
    out = []
    for fn in (lambda d: mjx_py.step(m, d), lambda d: mjx_py.forward(m, d),
               lambda d: mjx_py.rollout(m, d, nstep=2)[0]):
      starts.clear()
      jax.make_jaxpr(fn)(d)
      assert not any(starts)          # none while paused (depth > 0)
      out.append(len(starts))
    return out

  threshold = gc.get_threshold()
  gc.callbacks.append(count)
  gc.set_threshold(50)
  try:
    paused = collections()
    monkeypatch.setattr(gc_paused, '__enter__', lambda self: self)
    monkeypatch.setattr(gc_paused, '__exit__', lambda self, *exc: False)
    unpaused = collections()
  finally:
    gc.set_threshold(*threshold)
    gc.callbacks.remove(count)
  assert all(10 * p < u for p, u in zip(paused, unpaused)), (paused, unpaused)
  assert gc.isenabled()


def test_include_from_assets():
  main = '<mujoco><include file="part.xml"/></mujoco>'
  part = b'<mujoco><worldbody><body><freejoint/><geom size="0.1"/></body></worldbody></mujoco>'
  m = mjx_py.from_xml_string(main, assets={'part.xml': part})
  assert m.nq == 7


def test_external_entities_are_never_expanded(tmp_path):
  secret = tmp_path / 'secret.txt'
  secret.write_text('1 2 3')
  xml = (f'<?xml version="1.0"?><!DOCTYPE mujoco [<!ENTITY e SYSTEM "file://{secret}">]>'
         '<mujoco><worldbody><geom size="&e;"/></worldbody></mujoco>')
  with pytest.raises(mjx_py.MJCFError):
    mjx_py.from_xml_string(xml)


def test_entity_bomb_is_rejected():
  # "billion laughs": each entity expands to ten copies of the previous one
  entities = ['<!ENTITY l0 "lol">'] + [
      f'<!ENTITY l{i} "{f"&l{i - 1};" * 10}">' for i in range(1, 9)]
  xml = f'<?xml version="1.0"?><!DOCTYPE m [{"".join(entities)}]><mujoco model="&l8;"/>'
  with pytest.raises(mjx_py.MJCFError):
    mjx_py.from_xml_string(xml)


def test_missing_file_is_mjcf_error(tmp_path):
  with pytest.raises(mjx_py.MJCFError) as e:
    mjx_py.from_xml_path(tmp_path / 'nope.xml')
  assert 'nope.xml' in str(e.value)


def _dot_precisions(jaxpr, out):
  """The precision of every dot_general in ``jaxpr`` and its sub-jaxprs (scans, loops, conds,
  custom rules), appended to ``out``."""
  from jax.extend import core as jcore
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == 'dot_general':
      out.append(eqn.params['precision'])
    for value in eqn.params.values():
      for sub in value if isinstance(value, (tuple, list)) else (value,):
        if isinstance(sub, (jcore.ClosedJaxpr, jcore.Jaxpr)):
          _dot_precisions(getattr(sub, 'jaxpr', sub), out)
  return out


def test_matrix_products_run_in_full_precision():
  """Every matrix product of step is traced at Precision.HIGHEST (float32's full mantissa on
  accelerators, mjx_py.xla.full_precision), also those JAX traces outside step's call: the
  solver's vmap rules under vmap of a jitted step and the implicit-gradient JVP rules under
  grad of one. A default precision the caller sets is kept."""
  m = mjx_py.from_xml_path(os.path.join(ROOT, 'models', 'hopper.xml'))
  d = mjx_py.make_data(m)
  jstep = jax.jit(lambda d: mjx_py.step(m, d))
  batched = jax.tree_util.tree_map(lambda x: x[None], d)

  def loss(qvel):
    return jnp.sum(jstep(dataclasses.replace(d, qvel=qvel)).qpos)

  highest = (jax.lax.Precision.HIGHEST,) * 2
  for fn, arg in [(lambda d: mjx_py.step(m, d), d), (jax.vmap(jstep), batched),
                  (jax.grad(loss), d.qvel)]:
    found = _dot_precisions(jax.make_jaxpr(fn)(arg).jaxpr, [])
    assert found and all(p == highest for p in found), set(found)
  with jax.default_matmul_precision('tensorfloat32'):
    found = _dot_precisions(jax.make_jaxpr(lambda d: mjx_py.step(m, d))(d).jaxpr, [])
  assert (jax.lax.Precision.HIGH,) * 2 in found


def test_main_job_names_the_warnings():
  """The main job's warning line names each kind raised (MuJoCo's mjtWarning names, in
  warning_counts' order), its count and how many worlds raised it."""
  from mjx_py.__main__ import warning_summary
  counts = np.zeros((1024, 8), np.int32)
  assert warning_summary(counts) == '0'
  counts[186, 1] = 3                       # contact buffer full, 3 pairs left out
  counts[[5, 7], 6] = [1, 2]               # bad qacc in two worlds
  assert warning_summary(counts) == ('6 (mjWARN_CONTACTFULL 3 in 1 of 1024 worlds, '
                                     'mjWARN_BADQACC 3 in 2 of 1024 worlds)')
  assert warning_summary(counts[186]) == '3 (mjWARN_CONTACTFULL 3 in 1 of 1 worlds)'


def test_main_job_prints_summary(capsys):
  from mjx_py.__main__ import main
  cartpole = os.path.join(ROOT, 'models', 'cartpole.xml')
  assert main([cartpole, '--repeat', '1', '--batch', '2', '--nstep', '5', '--compare',
               '--no-mjx']) == 0
  captured = capsys.readouterr()
  out = captured.out
  assert 'nq=' in out and 'jit compile' in out and 'env-steps/s' in out
  if mjx_py.xla.fast_compile_supported():                    # the main job's default on CPU
    assert '(mjx_py.FAST_COMPILE' in out
  assert 'peak memory' in out and 'warnings raised: 0' in out
  m = mjx_py.from_xml_path(cartpole)
  assert re.search(rf'capacity used: at most \d+ of nconmax={m.nconmax} contacts and \d+ of '
                   rf'nefc_max={m.nefc_max} constraint rows', out)
  assert '[' + '#' * 30 + '] 5/5 steps' in captured.err      # the progress bar reached the end
  # the side-by-side table of examples/compare_speed.py: batch, ours, compile s, MuJoCo C on 1
  # thread and on all cores, then ours as a share of the latter (no MJX column with --no-mjx)
  table = out[out.index('MuJoCo 1thr'):].splitlines()
  row = table[1].split()
  assert row[0] == '2' and len(row) == 6
  ours, compile_s, c1, cn = (float(x.replace(',', '')) for x in row[1:5])
  assert min(ours, compile_s, c1, cn) > 0
  assert row[5].endswith('%') and abs(float(row[5][:-1]) - 100 * ours / cn) <= 1


def test_main_job_contact_capacity(capsys):
  """--nconmax sets the contact capacity of the main job's Model (and of testspeed's); the
  pairs tested per geom type pair stay the default's, so that a smaller contact buffer drops
  no pair that could touch."""
  from mjx_py import testspeed
  from mjx_py.__main__ import main
  hopper = os.path.join(ROOT, 'models', 'hopper.xml')
  default = mjx_py.from_xml_path(hopper)
  assert default.nconmax == default.npairmax > 4
  assert main([hopper, '--repeat', '1', '--nstep', '0']) == 0
  assert (f'capacity: nconmax={default.nconmax} contacts, npairmax={default.npairmax} pairs '
          f'per geom type pair, nefc_max={default.nefc_max} constraint rows\n'
          in capsys.readouterr().out)
  assert main([hopper, '--repeat', '1', '--nstep', '0', '--nconmax', '4']) == 0
  out = capsys.readouterr().out
  assert f'capacity: nconmax=4 contacts, npairmax={default.npairmax} pairs' in out
  assert '(--nconmax)' in out
  with open(hopper) as f:
    m, _, _ = testspeed.model_and_controls(f.read(), (1, 1), base_dir=os.path.dirname(hopper),
                                           nconmax=4)
  assert m.nconmax == 4 and m.npairmax == default.npairmax
  assert m.nefc_max < default.nefc_max
  # --njmax: the row capacity alone (the contact and pair capacities stay the default's)
  assert main([hopper, '--repeat', '1', '--nstep', '0', '--njmax', '20']) == 0
  out = capsys.readouterr().out
  assert (f'capacity: nconmax={default.nconmax} contacts, npairmax={default.npairmax} pairs '
          'per geom type pair, nefc_max=20 constraint rows (--njmax)\n' in out)
  m = testspeed.capacity_model(mjx_py.mjcf.compile_file(hopper), njmax=20)
  assert (m.nconmax, m.npairmax, m.nefc_max) == (default.nconmax, default.npairmax, 20)


def test_main_fit_capacity(capsys, monkeypatch):
  """The main job's --fit-capacity: mjx_py.fit_capacity's probe (shortened here) sets the
  contact and row capacities, the pair capacity stays the default's, and --njmax given
  overrides the fitted rows."""
  import re

  from mjx_py import capacity, testspeed
  from mjx_py.__main__ import main
  monkeypatch.setattr(testspeed, 'FIT_BATCH', 4)
  monkeypatch.setattr(testspeed, 'FIT_NSTEP', 60)
  hopper = os.path.join(ROOT, 'models', 'hopper.xml')
  default = mjx_py.from_xml_path(hopper)
  assert main([hopper, '--repeat', '1', '--nstep', '0', '--fit-capacity']) == 0
  out = capsys.readouterr().out
  fit = re.search(r'fitted capacity \(mjx_py.fit_capacity: 4 worlds x 60 steps .*\): '
                  r'nconmax=(\d+) \(at most (\d+) contacts seen, default (\d+)\), '
                  r'njmax=(\d+) \(at most (\d+) rows seen, default (\d+)\)', out)
  nconmax, ncon, ncon_default, njmax, nefc, nefc_default = (int(x) for x in fit.groups())
  assert (ncon_default, nefc_default) == (default.nconmax, default.nefc_max)
  assert 0 < ncon and 0 < nefc
  assert nconmax == capacity.fitted(ncon, default.nconmax) < default.nconmax
  assert njmax == capacity.fitted(nefc, default.nefc_max) < default.nefc_max
  assert (f'capacity: nconmax={nconmax} contacts, npairmax={default.npairmax} pairs per geom '
          f'type pair, nefc_max={njmax} constraint rows (--fit-capacity)\n' in out)
  assert main([hopper, '--repeat', '1', '--nstep', '0', '--fit-capacity', '--njmax',
               str(njmax + 1)]) == 0
  assert f'nconmax={nconmax} contacts' in (out := capsys.readouterr().out)
  assert f'nefc_max={njmax + 1} constraint rows' in out


def test_rollout_peaks_are_the_largest_counts():
  """testspeed.batched_rollout(m, peaks=True) (the main job's rollout): the peak it carries is
  each world's largest ncon / nefc after any step, folded into the peak passed in."""
  from mjx_py import testspeed
  hopper = os.path.join(ROOT, 'models', 'hopper.xml')
  with open(hopper) as f:
    m, d0, ctrl = testspeed.model_and_controls(f.read(), (6, 1, 3),
                                               base_dir=os.path.dirname(hopper))
  d = testspeed.broadcast_batch(d0, 3)
  d = d.__class__(**{**vars(d), 'qpos': d.qpos.at[:, 1].add(jnp.asarray([-0.3, 0.0, 0.2]))})
  fn = jax.jit(testspeed.batched_rollout(m, peaks=True))
  # the rollout carries only the state: each step's counts from the same step taken alone
  step = jax.jit(jax.vmap(lambda d, c: mjx_py.step(m, d.__class__(**{**vars(d), 'ctrl': c}))))
  peak = jnp.zeros((3, 2), jnp.int32)
  seen = []
  for c in ctrl:             # one step per call: every step's counts are visible
    alone = step(d, c[0])
    d, peak = fn(d, c, peak)
    np.testing.assert_allclose(d.qpos, alone.qpos, rtol=0, atol=1e-5)
    seen.append(np.stack([np.asarray(alone.ncon), np.asarray(alone.nefc)], axis=-1))
  np.testing.assert_array_equal(peak, np.max(seen, axis=0))
  assert np.max(np.asarray(seen)[..., 0]) > 0              # the hopper touches the floor
  _, again = fn(d, ctrl[0], peak.at[1, 0].set(99))
  assert int(again[1, 0]) == 99                            # folded into the peak passed in


def test_main_job_compile_cache(tmp_path):
  """--cache: the first run compiles and stores the batched step in the persistent cache
  ($MJX_PY_CACHE_DIR), the second loads it from there (separate processes, as users run it);
  with --devices 2 the batch runs one world per device (the per-device program is cached)."""
  import subprocess
  import sys
  hopper = os.path.join(ROOT, 'models', 'hopper.xml')
  env = dict(os.environ, MJX_PY_CACHE_DIR=str(tmp_path / 'xla'))
  cmd = [sys.executable, '-m', 'mjx_py', hopper, '--repeat', '1', '--batch', '2', '--nstep', '5',
         '--no-progress', '--cache', '--devices', '2']
  first = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
  # --devices 2: the CPU as two devices, each stepping one of the two worlds (shard_worlds)
  assert '2 worlds x 5 steps, 1 on each of 2 devices' in first
  assert f"persistent compilation cache: {tmp_path / 'xla'} (compiled, then stored)" in first
  assert os.listdir(tmp_path / 'xla')
  assert f"traced program: traced, then stored ({tmp_path / 'xla' / 'programs'})" in first
  assert len(os.listdir(tmp_path / 'xla' / 'programs')) == 1
  second = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
  assert 'persistent compilation cache: ' in second and '(loaded from the cache)' in second
  assert 'traced program: loaded from the cache' in second
  assert 'env-steps/s' in second
  # the same steps from the loaded program: the runs' last lines agree on the capacity used
  used = [next(line for line in out.splitlines() if line.startswith('capacity used'))
          for out in (first, second)]
  assert used[0] == used[1]


def test_lower_cached(tmp_path):
  """mjx_py.xla.lower_cached: a miss traces, exports and stores the program, a hit (same
  name, argument shapes and constants) loads it without calling fn; both give jax.jit(fn)'s
  results, in fn's result structure; other constant values, argument shapes or names miss."""
  from mjx_py import xla
  calls = []
  consts = {'gain': np.array([2.0, 3.0], np.float32), 'n': np.int32(3)}

  def make(c):
    def fn(x, extra):
      calls.append(1)
      y = x * c['gain'] + extra['b']
      return {'y': y, 'sum': (jnp.sum(y) * c['n'],)}
    return fn

  x = jnp.arange(2.0, dtype=jnp.float32)
  extra = {'b': jnp.float32(0.5)}

  def run(c, xv, name='t'):
    lowered, hit = xla.lower_cached(make(c), xv, extra, name=name, consts=c,
                                    cache_dir=str(tmp_path))
    return lowered.compile()(xv, extra), hit

  want = jax.jit(make(consts))(x, extra)
  got, hit = run(consts, x)
  assert not hit and len(calls) == 2            # the export's trace (and the reference's)
  got2, hit2 = run(consts, x)
  assert hit2 and len(calls) == 2               # loaded: fn not traced
  for out in (got, got2):
    assert jax.tree_util.tree_structure(out) == jax.tree_util.tree_structure(want)
    jax.tree_util.tree_map(np.testing.assert_array_equal, out, want)
  other = dict(consts, gain=np.array([2.0, 4.0], np.float32))
  assert not run(other, x)[1]                   # a constant's value is in the key
  assert not run(consts, jnp.ones((3, 2), jnp.float32))[1]          # a shape
  assert not run(consts, x, name='u')[1]                            # the name
  assert len(os.listdir(tmp_path / xla.PROGRAM_DIR)) == 4
  assert xla.program_key('t', (x, extra), consts) != xla.program_key('t', (x, extra), other)


def test_export_supported_needs_flatbuffers(monkeypatch):
  """export_supported is False where flatbuffers cannot be imported (the main job's --cache
  then keeps XLA's cache only, and says so)."""
  import sys

  from mjx_py import xla
  assert xla.export_supported()                  # the test extra installs it
  monkeypatch.setitem(sys.modules, 'flatbuffers', None)
  assert not xla.export_supported()


def test_internal_entities_are_not_expanded():
  xml = ('<?xml version="1.0"?><!DOCTYPE mujoco [<!ENTITY r "0.1">]>'
         '<mujoco><worldbody><geom size="&r;"/></worldbody></mujoco>')
  with pytest.raises(mjx_py.MJCFError, match='entity'):
    mjx_py.from_xml_string(xml)


LENGTHRANGE = """
<mujoco>
  <compiler>{lr}</compiler>
  <worldbody>
    <body>
      <joint name="j" range="-40 60" limited="true"/>
      <geom type="capsule" size="0.1" fromto="0 0 0 0 0 -0.5"/>
    </body>
  </worldbody>
  <actuator><muscle joint="j" gear="-2" {attr}/></actuator>
</mujoco>
"""


def test_muscle_lengthrange_by_simulation_is_a_clear_error():
  with pytest.raises(mjx_py.MJCFError, match='lengthrange') as e:
    mjx_py.from_xml_string(LENGTHRANGE.format(lr='', attr=''))
  assert e.value.line == 10 and e.value.element == 'muscle'


@pytest.mark.parametrize('lr,attr', [('', 'lengthrange="0.1 0.9"'),
                                     ('<lengthrange uselimit="true"/>', ''),
                                     ('<lengthrange mode="none"/>', '')])
def test_muscle_lengthrange_without_simulation_matches_mujoco(lr, attr):
  import mujoco
  xml = LENGTHRANGE.format(lr=lr, attr=attr)
  ours = mjx_py.mjcf.compile_string(xml)['actuator_lengthrange']
  np.testing.assert_allclose(ours, mujoco.MjModel.from_xml_string(xml).actuator_lengthrange,
                             rtol=1e-12)


@pytest.mark.parametrize('attr', ['fusestatic', 'discardvisual'])
def test_compiler_options_that_would_change_the_model_are_not_ignored(attr):
  xml = f'<mujoco><compiler {attr}="true"/><worldbody/></mujoco>'
  with pytest.raises(mjx_py.MJCFError, match=attr):
    mjx_py.from_xml_string(xml)


def test_unknown_material_is_an_error():
  xml = '<mujoco><worldbody><geom size="1" material="nope"/></worldbody></mujoco>'
  with pytest.raises(mjx_py.MJCFError, match='material') as e:
    mjx_py.from_xml_string(xml)
  assert e.value.attribute == 'material'


def _example(name: str):
  """examples/NAME.py imported as a module (its main() not run)."""
  import importlib.util
  spec = importlib.util.spec_from_file_location(
      name, os.path.join(ROOT, 'examples', f'{name}.py'))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_compare_speed_retries_a_hung_mjx_child(tmp_path, monkeypatch):
  """examples/compare_speed.py measures MJX in a child process and starts a fresh one when a
  try hangs after its compile (jaxlib's batched LAPACK kernels can deadlock MJX's step on a
  2-core CPU): with a stand-in child (tests/mjx_stub.py) whose first try hangs, the second's
  figures come back with one hung try counted; when every try hangs, a message says so."""
  example = _example('compare_speed')
  import mjx_stub
  monkeypatch.setattr(example, 'MJX_WARM_TIMEOUT', 2.0)
  monkeypatch.setattr(example, 'MJX_TRIES', 2)
  counter = tmp_path / 'tries'
  counter.write_text('0 1')
  res = example._time_mjx_limited(str(counter), 4, 1, 1, timeout=120, worker=mjx_stub.worker)
  assert res == ((0.5, 4000.0), 1) and counter.read_text() == '2 1'
  counter.write_text('0 5')
  res = example._time_mjx_limited(str(counter), 4, 1, 1, timeout=120, worker=mjx_stub.worker)
  assert isinstance(res, str) and res.startswith('hung in all 2 tries')
  # the child's flags: one device, MJX's own loop threshold at batches, no Eigen pool
  flags = ('--xla_backend_extra_options=xla_cpu_small_while_loop_byte_threshold=1048576 '
           '--xla_force_host_platform_device_count=2')
  assert example._mjx_flags(flags, 1024, False) == '--xla_cpu_multi_thread_eigen=false'
  assert example._mjx_flags(flags, 1, True) == flags.split()[0]


def test_compare_speed_runs_mjx_in_another_interpreter(tmp_path, monkeypatch):
  """examples/compare_speed.py's --mjx-python: the MJX child as a subprocess of the given
  interpreter (here this one), its messages read from its output; a hung try is retried as
  with a multiprocessing child; a child that exits early or an interpreter that does not start
  gives a message instead of figures."""
  example = _example('compare_speed')
  import mjx_stub
  monkeypatch.setattr(example, 'MJX_WARM_TIMEOUT', 2.0)
  monkeypatch.setattr(example, 'MJX_TRIES', 2)
  counter = tmp_path / 'tries'
  counter.write_text('0 1')
  res = example._time_mjx_limited(str(counter), 4, 1, 1, timeout=120, worker=mjx_stub.worker,
                                  python=sys.executable)
  assert res == ((0.5, 4000.0), 1) and counter.read_text() == '2 1'
  res = example._time_mjx_limited(str(tmp_path / 'missing'), 4, 1, 1, timeout=120,
                                  worker=mjx_stub.worker, python=sys.executable)
  assert res.startswith('n/a (its interpreter exited with status 1: FileNotFoundError')
  res = example._time_mjx_limited(str(counter), 4, 1, 1, timeout=120, worker=mjx_stub.worker,
                                  python=str(tmp_path / 'no-python'))
  assert res.startswith('n/a (--mjx-python ') and 'No such file' in res
  with pytest.raises(RuntimeError, match='cannot run MJX'):
    example.mjx_python_versions(sys.executable, flags='--xla_no_such_flag=1')


def test_compare_speed_steps_mjx_with_our_controls():
  """examples/compare_speed.py gives MJX the random controls of mjx_py's rollout (the same
  seed), so that both engines time the same stretch of motion: equal for the hopper (limited
  controls) and for a model with an unlimited actuator (standard normal draws)."""
  import mujoco

  from mjx_py import testspeed
  example = _example('compare_speed')
  unlimited = ('<mujoco><worldbody><body><joint name="j"/><geom size=".1"/></body></worldbody>'
               '<actuator><motor joint="j" ctrllimited="false"/>'
               '<motor joint="j" ctrlrange="-2 3"/></actuator></mujoco>')
  with open(os.path.join(ROOT, 'models', 'hopper.xml')) as f:
    hopper = f.read()
  for xml, base in ((hopper, os.path.join(ROOT, 'models')), (unlimited, '')):
    mj = mujoco.MjModel.from_xml_string(xml)
    ours = testspeed.model_and_controls(xml, (7, 5), 0, base)[2]
    theirs = example.mjx_controls(mj, 7, 5)
    assert theirs.shape == (7, 5, mj.nu)
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs, ours.dtype))
    assert np.unique(theirs).size == theirs.size      # random, not zeros


def test_profile_compile_example():
  """examples/profile_compile.py's accounting: XLA's timer lines parsed and summed by phase,
  pass and module kind; HLO instructions counted; jaxpr equations attributed to the mjx_py
  function that emitted them, also through jax.numpy's jitted helpers (jnp.where); kernels
  counted and attributed to their functions."""
  example = _example('profile_compile')
  assert example._XLA_LOG is False           # imported, not run: XLA's logging untouched
  log = '\n'.join([
      'I1127 08:10:19.3 14510 cpu_compiler.cc:1269] Running HLO passes on [jit_f] for CPU '
      'time: 3.25 s (3246440 us) (cumulative: 3.25 s, max: 3.25 s, #called: 2)',
      'I1127 08:10:17.8 14510 hlo_pass_pipeline.cc:176] HLO pass: simplification time: 978 ms '
      '(978074 us) (cumulative: 2.57 s, max: 978 ms, #called: 363)',
      'I1127 08:10:18.9 14510 hlo_pass_pipeline.cc:176] HLO pass: copy-insertion time: 373 ms '
      '(372992 us) (cumulative: 4.35 s, max: 978 ms, #called: 470)',
      'I1127 08:10:29.3 14510 ir_compiler.cc:293] Compiled LLVM module: __compute_module_part_17 '
      'time: 541 ms (541000 us) (cumulative: 16.2 s, max: 540 ms, #called: 334)',
      'I1127 08:10:29.3 14510 ir_compiler.cc:293] Compiled LLVM module: '
      '__compute_module_dot.223_elemental_kernel_module time: 43.9 ms (43902 us) (x)',
      'I1127 08:10:29.3 14510 ir_compiler.cc:293] Compiled LLVM module: '
      '__compute_module_reduce-window.2_elemental_kernel_module time: 41 us (41 us) (x)',
      'I1127 08:10:29.4 14510 cpu_compiler.cc:2094] Compiling [jit_f] for CPU using JIT time: '
      '10 s (9996324 us) (cumulative: 10 s, max: 10 s, #called: 2)',
      'an unrelated line'])
  timers = example.xla_timers(log)
  assert len(timers) == 7 and timers[1] == ('HLO pass: simplification', 0.978)
  lines = example.summarize_xla(timers, 5)
  assert lines[0].startswith('XLA: HLO passes 3.25 s, code generation 10.00 s wall '
                             '(0.58 s summed over 3 LLVM modules)')
  assert 'simplification 0.98 s, copy-insertion 0.37 s' in lines[1]
  assert 'fusion parts 0.54 (1), dot 0.04 (1), reduce-window 0.00 (1)' in lines[2]

  def f(x):
    return mjx_py.math.safe_norm(x) + jnp.where(x[0] > 0, 1.0, 2.0)
  jaxpr = jax.make_jaxpr(jax.jit(f))(jnp.ones(3)).jaxpr
  counts = example.equations_by_function(jaxpr)
  assert counts['math:safe_norm'] >= 4            # multiply, sum, compare, select, sqrt ...
  assert set(counts) <= {'math:safe_norm', '?'} and counts['?'] >= 2  # the where, the add
  lowered = jax.jit(f).lower(jnp.ones(3))
  assert example.hlo_instructions(lowered.as_text(dialect='hlo')) >= sum(counts.values())
  assert example.hlo_instructions(lowered.compile().as_text()) > 0
  # the kernels of an optimized module: fusions and their fused computations' sizes, loops
  text = '\n'.join([
      'HloModule jit_f', '',
      '%fused_computation (param_0: f32[3]) -> f32[3] {',
      '  %param_0 = f32[3]{0} parameter(0)',
      '  %sine.1 = f32[3]{0} sine(%param_0)',
      '  ROOT %multiply.2 = f32[3]{0} multiply(%sine.1, %sine.1)', '}', '',
      '%fused_computation.1 (param_0.1: f32[3]) -> f32[3] {',
      '  ROOT %param_0.1 = f32[3]{0} parameter(0)', '}', '',
      'ENTRY %main.9 (x: f32[3]) -> f32[3] {',
      '  %x = f32[3]{0} parameter(0)',
      '  %a_fusion = f32[3]{0} fusion(%x), kind=kLoop, calls=%fused_computation',
      '  %w = (s32[], f32[3]{0}) while(%t), condition=%c, body=%b',
      '  ROOT %b_fusion = f32[3]{0} fusion(%a_fusion), kind=kLoop, calls=%fused_computation.1',
      '}'])
  assert example.kernel_summary(text) == dict(fusions=2, sizes=[3, 1], loops=1, conds=0)

  def g(x):
    return jax.lax.fori_loop(0, x.shape[0] + jnp.int32(x[0] > 0), lambda i, y: jnp.sin(y) * y,
                             x)
  kern = example.kernel_summary(jax.jit(g).lower(jnp.ones(3)).compile().as_text())
  assert kern['fusions'] >= 1 and kern['loops'] == 1 and len(kern['sizes']) >= 1
  # fusions attributed to the function that emitted them (innermost stack frame)
  assert example.fusions_by_function(text) == {'?': 2}        # no stack-frame tables
  def h(x):
    return jnp.sin(x) * mjx_py.math.safe_norm(jnp.cos(x), keepdims=True)
  text = jax.jit(h).lower(jnp.ones((4, 3))).compile().as_text()
  fused = example.fusions_by_function(text)
  assert sum(fused.values()) == example.kernel_summary(text)['fusions'] >= 1
  assert fused['math:safe_norm'] >= 1, fused
  assert set(fused) <= {'math:safe_norm', 'test_api:test_profile_compile_example.<locals>.h',
                        '?'}, fused


def test_profile_step_example():
  """examples/profile_step.py's accounting: HLO instructions resolved to their source lines
  through the optimized module's stack-frame tables, self times of nested trace events, and
  command-buffer kernels matched to their fusions by name."""
  example = _example('profile_step')

  def f(x):
    return jnp.sin(x) * 2.0 + mjx_py.math.safe_norm(x)
  text = jax.jit(f).lower(jnp.ones(3)).compile().as_text()
  stacks = example.hlo_stacks(text)
  assert stacks and all(isinstance(s, list) for s in stacks.values())
  frames = [fr for s in stacks.values() for fr in s]
  assert any(fr.startswith('test_api.py:') and fr.endswith('.f') for fr in frames), frames
  assert any(fr.startswith('math.py:') and fr.endswith(' safe_norm') for fr in frames)
  # a parent of 10 us with children of 3 and 4 us on one thread; another thread apart
  ev = [dict(pid=1, tid=1, ts=0.0, dur=10.0, name='a'), dict(pid=1, tid=1, ts=1.0, dur=3.0,
        name='b'), dict(pid=1, tid=1, ts=5.0, dur=4.0, name='c'),
        dict(pid=1, tid=2, ts=0.0, dur=6.0, name='d')]
  assert {e['name']: t for e, t in example.self_times(ev)} == {'a': 3.0, 'b': 3.0, 'c': 4.0,
                                                              'd': 6.0}
  assert example.hlo_name(dict(name='loop_add_fusion_8',
                               args=dict(hlo_op='command_buffer_5'))) == 'loop_add_fusion.8'
  assert example.hlo_name(dict(name='MemcpyD2H', args=dict(hlo_op='while.160'))) == 'while.160'
  # --solve: the solve alone, on the states forward's earlier stages give, is forward's solve
  # (two worlds, one past the hinge's upper limit: a limit row)
  m = mjx_py.from_xml_string(SMALL)
  d = jax.vmap(lambda q: dataclasses.replace(mjx_py.make_data(m), qpos=q))(
      jnp.asarray([[0.3], [1.2]], jnp.float32))
  out = example.solve_alone(m)(example.solve_program(m, d, None))
  ref = jax.jit(jax.vmap(lambda d: mjx_py.forward(m, d)))(d)
  assert np.asarray(ref.nefc).tolist() == [0, 1]
  np.testing.assert_allclose(out.qacc, ref.qacc, rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(out.efc_force, ref.efc_force, rtol=1e-6, atol=1e-6)


def test_compare_compile_example(tmp_path):
  """examples/compare_compile.py: the step program lowered, compiled and run by ``child`` (here
  in this process, on SMALL) and the table's rows; MJX's model with its solver at the one
  iteration it differentiates, for the gradient only (the gradient programs are not compiled
  here: CI time; the README's table is this script's output); a child that fails reported by
  its last line of error output instead of a figure."""
  example = _example('compare_compile')
  path = tmp_path / 'small.xml'
  path.write_text(SMALL)
  res = example.child('mjx_py', 'step', str(path), 3, True)
  assert res['lower_s'] > 0 and res['xla_s'] > 0 and res['peak_mb'] > 100 and len(res) == 3
  fields = example._row('small.xml', 'mjx_py', 'step', res).split()
  assert fields[:3] == ['small.xml', 'mjx_py', 'step'] and len(fields) == 7
  grad = example._row('h.xml', 'mjx', 'grad', dict(res, run_ms=1.5, finite=False))
  assert grad.split()[6:] == ['1.5', fields[6], 'NOT', 'finite']
  assert float(fields[5]) == pytest.approx(float(fields[3]) + float(fields[4]), abs=0.011)
  assert example._row('small.xml', 'mjx', 'step', 'failed: x').endswith('step  failed: x')
  args = example.argparse.Namespace(nstep=3, option='', full_opt=False, timeout=300)
  failed = example._run_child('mjx_py', 'step', str(tmp_path / 'missing.xml'), args)
  assert failed.startswith('failed: ') and 'missing.xml' in failed, failed
  # MJX's model (mujoco-mjx is the bench extra, not the test one: skipped without it): its
  # solver at one iteration for the gradient only, the same control limits
  pytest.importorskip('mujoco.mjx')
  for grad in (False, True):
    _, mx, _, limits, replace = example._mjx(SMALL, str(tmp_path), grad)
    assert int(mx.opt.iterations) == (1 if grad else 100)
  assert np.array_equal(limits[2], [True]) and np.array_equal(limits[1], [1.0])
  from mjx_py import testspeed  # the controls' rule the script shares with testspeed
  ctrl = testspeed.random_controls(*limits, (50,))
  assert ctrl.shape == (50, 1) and np.all(np.abs(ctrl) <= 1)
