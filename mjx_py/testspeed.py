"""Benchmark: ``python -m mjx_py.testspeed MODEL [--batch 1 64 1024] [--compare]``.

Times jit compilation of ``step`` and steps/s of ``jax.vmap(step)`` over a batch of worlds
(random controls, ``lax.scan`` over steps), and reports peak resident memory. With
``--compare`` it also runs MuJoCo C (``mujoco.rollout``, single- and multi-threaded) and MJX
(``mujoco.mjx``) on the same model in the same process, so every ratio comes from one run.
``--smooth`` disables the constraint solver in all three (the smooth-dynamics benchmark).
Never a timed test: numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import time

import jax
import jax.numpy as jnp
import numpy as np


def _peak_rss_mb() -> float:
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def disable_constraints(xml: str) -> str:
  """The model with <flag constraint="disable"/> appended (the last <option> wins)."""
  return re.sub(r'</mujoco>\s*$', '<option><flag constraint="disable"/></option></mujoco>', xml)


def device_name() -> str:
  dev = jax.devices()[0]
  return f'{dev.platform} ({len(jax.devices())} device(s))'


def _prepare_xml(path: str, smooth: bool) -> str:
  with open(path) as f:
    xml = f.read()
  return disable_constraints(xml) if smooth else xml


def time_rollout(xml: str, batch: int, nstep: int, seed: int = 0, base_dir: str = ''):
  """(compile seconds, steps/s) of vmap(step) over ``batch`` worlds for ``nstep`` steps."""
  import mjx_py
  from mjx_py import mjcf
  from mjx_py.forward import step
  m = mjx_py.put_model(mjcf.compile_string(xml, file=os.path.join(base_dir or '.', 'model.xml')))
  d0 = mjx_py.make_data(m)
  lo, hi = np.asarray(m.actuator_ctrlrange).T if m.nu else (np.zeros(0), np.zeros(0))
  limited = np.asarray(m.actuator_ctrllimited) > 0
  rng = np.random.default_rng(seed)
  ctrl = np.where(limited, lo + (hi - lo) * rng.random((nstep, batch, m.nu)),
                  rng.standard_normal((nstep, batch, m.nu)))
  ctrl = jnp.asarray(ctrl, dtype=d0.qpos.dtype)
  dbatch = jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (batch,) + x.shape), d0)

  def rollout(d, ctrls):
    def body(d, c):
      d = jax.vmap(lambda d, c: step(m, d.__class__(**{**vars(d), 'ctrl': c})))(d, c)
      return d, None
    return jax.lax.scan(body, d, ctrls)[0]

  t0 = time.perf_counter()
  fn = jax.jit(rollout).lower(dbatch, ctrl).compile()
  compile_s = time.perf_counter() - t0
  jax.block_until_ready(fn(dbatch, ctrl))
  t0 = time.perf_counter()
  out = fn(dbatch, ctrl)
  jax.block_until_ready(out)
  run_s = time.perf_counter() - t0
  return compile_s, batch * nstep / run_s


def _time_mujoco(xml: str, batch: int, nstep: int, threads: int):
  import mujoco
  from mujoco import rollout
  mj = mujoco.MjModel.from_xml_string(xml)
  datas = [mujoco.MjData(mj) for _ in range(max(threads, 1))]
  state0 = np.zeros((batch, mujoco.mj_stateSize(mj, mujoco.mjtState.mjSTATE_FULLPHYSICS)))
  for i in range(batch):
    mujoco.mj_getState(mj, datas[0], state0[i], mujoco.mjtState.mjSTATE_FULLPHYSICS)
  lo, hi = mj.actuator_ctrlrange.T
  rng = np.random.default_rng(0)
  ctrl = np.where(mj.actuator_ctrllimited, lo + (hi - lo) * rng.random((batch, nstep, mj.nu)),
                  rng.standard_normal((batch, nstep, mj.nu)))
  runner = rollout.Rollout(nthread=threads) if threads > 1 else None
  t0 = time.perf_counter()
  if runner is not None:
    runner.rollout([mj] * batch, datas, state0, ctrl)
  else:
    rollout.rollout([mj] * batch, datas[0], state0, ctrl)
  return batch * nstep / (time.perf_counter() - t0)


def _time_mjx(xml: str, batch: int, nstep: int):
  import mujoco
  from mujoco import mjx
  spec = mujoco.MjSpec.from_string(xml)
  for s in list(spec.sensors):  # MJX lacks several sensor types; sensors are not timed here
    spec.delete(s)
  mj = spec.compile()
  mx = mjx.put_model(mj)
  d0 = mjx.make_data(mx)
  dbatch = jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (batch,) + x.shape), d0)
  ctrl = jnp.zeros((nstep, batch, mj.nu))

  def rollout(d, ctrls):
    def body(d, c):
      return jax.vmap(lambda d, c: mjx.step(mx, d.replace(ctrl=c)))(d, c), None
    return jax.lax.scan(body, d, ctrls)[0]

  t0 = time.perf_counter()
  fn = jax.jit(rollout).lower(dbatch, ctrl).compile()
  compile_s = time.perf_counter() - t0
  jax.block_until_ready(fn(dbatch, ctrl))
  t0 = time.perf_counter()
  jax.block_until_ready(fn(dbatch, ctrl))
  return compile_s, batch * nstep / (time.perf_counter() - t0)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(prog='python -m mjx_py.testspeed',
                                   description=__doc__.splitlines()[0])
  parser.add_argument('model')
  parser.add_argument('--batch', type=int, nargs='+', default=[1, 64, 1024])
  parser.add_argument('--nstep', type=int, default=200)
  parser.add_argument('--compare', action='store_true', help='also MuJoCo C and MJX')
  parser.add_argument('--smooth', action='store_true', help='disable the constraint solver')
  args = parser.parse_args(argv)
  xml = _prepare_xml(args.model, args.smooth)
  print(f'model {os.path.basename(args.model)}  device {jax.devices()[0].platform}  '
        f'x64 {jax.config.jax_enable_x64}  nstep {args.nstep}')
  header = f"{'batch':>6} {'ours steps/s':>14} {'compile s':>10}"
  if args.compare:
    header += f" {'MuJoCo 1thr':>12} {f'MuJoCo {os.cpu_count()}thr':>12} {'MJX steps/s':>12}" \
              f" {'MJX compile':>11}"
  print(header)
  for batch in args.batch:
    c, sps = time_rollout(xml, batch, args.nstep, base_dir=os.path.dirname(args.model))
    row = f'{batch:>6} {sps:>14,.0f} {c:>10.2f}'
    if args.compare:
      c1 = _time_mujoco(xml, batch, args.nstep, 1)
      cn = _time_mujoco(xml, batch, args.nstep, os.cpu_count() or 1)
      try:
        mc, msps = _time_mjx(xml, batch, args.nstep)
        mjx_cols = f' {msps:>12,.0f} {mc:>11.2f}'
      except Exception as e:  # MJX does not support every model
        mjx_cols = f' {"n/a: " + type(e).__name__:>24}'
      row += f' {c1:>12,.0f} {cn:>12,.0f}' + mjx_cols
    print(row, flush=True)
  print(f'peak RSS {_peak_rss_mb():.0f} MB')
  return 0


if __name__ == '__main__':
  raise SystemExit(main())
