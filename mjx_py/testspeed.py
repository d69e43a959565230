"""Benchmark: ``python -m mjx_py.testspeed MODEL [--batch 1 64 1024] [--compare]``.

Times jit compilation of ``step`` and steps/s of ``jax.vmap(step)`` over a batch of worlds
(random controls, ``lax.scan`` over steps), and reports peak resident memory. The side-by-side
run with MuJoCo C (``mujoco.rollout``) and MJX in the same process is
``examples/compare_speed.py`` (the library never imports mujoco).
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


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(prog='python -m mjx_py.testspeed',
                                   description=__doc__.splitlines()[0])
  parser.add_argument('model')
  parser.add_argument('--batch', type=int, nargs='+', default=[1, 64, 1024])
  parser.add_argument('--nstep', type=int, default=200)
  parser.add_argument('--smooth', action='store_true', help='disable the constraint solver')
  args = parser.parse_args(argv)
  xml = _prepare_xml(args.model, args.smooth)
  print(f'model {os.path.basename(args.model)}  device {jax.devices()[0].platform}  '
        f'x64 {jax.config.jax_enable_x64}  nstep {args.nstep}')
  print(f"{'batch':>6} {'ours steps/s':>14} {'compile s':>10}")
  for batch in args.batch:
    c, sps = time_rollout(xml, batch, args.nstep, base_dir=os.path.dirname(args.model))
    print(f'{batch:>6} {sps:>14,.0f} {c:>10.2f}', flush=True)
  print(f'peak RSS {_peak_rss_mb():.0f} MB')
  return 0


if __name__ == '__main__':
  raise SystemExit(main())
