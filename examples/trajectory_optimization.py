"""Trajectory optimization by gradient descent through the simulator: a cart-pole swing-up.

The pole starts hanging down; a sequence of motor controls over the horizon is optimized with
Adam on the gradient of a cost (pole away from upright, cart away from the centre, control
effort) through every step of ``mjx_py.rollout`` (RK4, the slider's joint limit as a
constraint). The controls are tanh of the parameters, so they stay in the motor's ctrlrange
where MuJoCo clamps them. When the mujoco package is installed, the optimized controls are
replayed open loop in MuJoCo C, to show that the plan works in the reference simulator too.

Run: python examples/trajectory_optimization.py [--horizon 200] [--iters 300] [--lr 0.1]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

import mjx_py

MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'models', 'cartpole.xml')


def make_loss(m, d0, horizon: int):
  """loss(params (horizon, nu)) -> scalar: the mean over the steps of (1 - cos pole angle)
  + 0.05 cart position^2 + 0.01 control^2, with the last quarter of the steps weighted 4x."""
  weight = jnp.where(jnp.arange(horizon) >= 3 * horizon // 4, 4.0, 1.0).astype(d0.qpos.dtype)

  def loss(params):
    ctrl = jnp.tanh(params)
    _, qpos = mjx_py.rollout(m, d0, ctrl, record=lambda d: d.qpos)
    cart, angle = qpos[:, 0], qpos[:, 1]
    cost = (1 - jnp.cos(angle)) + 0.05 * cart ** 2 + 0.01 * jnp.sum(ctrl ** 2, axis=1)
    return jnp.sum(weight * cost) / jnp.sum(weight)
  return loss


def adam(loss, params, iters: int, lr: float, report):
  """Adam (beta 0.9 / 0.999) on ``loss``; ``report(i, value)`` every 25 iterations. Returns the
  final parameters, the compile seconds of the jitted update and the seconds per update."""
  grad = jax.value_and_grad(loss)

  @jax.jit
  def update(params, mom, var, i):
    value, g = grad(params)
    mom = 0.9 * mom + 0.1 * g
    var = 0.999 * var + 0.001 * g * g
    mhat = mom / (1 - 0.9 ** i)
    vhat = var / (1 - 0.999 ** i)
    return params - lr * mhat / (jnp.sqrt(vhat) + 1e-8), mom, var, value

  zero = jnp.zeros_like(params)
  t0 = time.perf_counter()
  compiled = mjx_py.xla.lower_paused(update, params, zero, zero, 1.0).compile()
  compile_s = time.perf_counter() - t0
  mom = var = zero
  t0 = time.perf_counter()
  for i in range(1, iters + 1):
    params, mom, var, value = compiled(params, mom, var, float(i))
    if i == 1 or i % 25 == 0:
      report(i, float(value))
  jax.block_until_ready(params)
  return params, compile_s, (time.perf_counter() - t0) / iters


def replay_in_mujoco(ctrl, angle0):
  """The final pole angle (rad, wrapped to [-pi, pi]) of the controls replayed in MuJoCo C, or
  None when the mujoco package is not installed."""
  try:
    import mujoco
  except ImportError:
    return None
  mm = mujoco.MjModel.from_xml_path(MODEL)
  md = mujoco.MjData(mm)
  md.qpos[1] = angle0
  for u in ctrl:
    md.ctrl[:] = u
    mujoco.mj_step(mm, md)
  return float(np.angle(np.exp(1j * md.qpos[1])))


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--horizon', type=int, default=200, help='steps (0.01 s each)')
  parser.add_argument('--iters', type=int, default=300, help='Adam iterations')
  parser.add_argument('--lr', type=float, default=0.1)
  args = parser.parse_args(argv)

  m = mjx_py.from_xml_path(MODEL)
  d0 = mjx_py.make_data(m)
  d0 = dataclasses.replace(d0, qpos=d0.qpos.at[1].set(jnp.pi))     # hanging down
  loss = make_loss(m, d0, args.horizon)
  params = jnp.zeros((args.horizon, m.nu), d0.qpos.dtype)
  print(f'cart-pole swing-up: {args.horizon} steps, {args.iters} Adam iterations '
        f'(float{jnp.finfo(d0.qpos.dtype).bits}, {jax.devices()[0].platform})')
  params, compile_s, per_iter = adam(
      loss, params, args.iters, args.lr,
      lambda i, v: print(f'  iteration {i:4d}  loss {v:.4f}', flush=True))
  ctrl = np.asarray(jnp.tanh(params))
  _, qpos = jax.jit(lambda c: mjx_py.rollout(m, d0, c, record=lambda d: d.qpos))(ctrl)
  angle = np.angle(np.exp(1j * np.asarray(qpos[:, 1])))            # wrapped to [-pi, pi]
  held = float(np.max(np.abs(angle[3 * args.horizon // 4:])))
  print(f'final loss {float(loss(params)):.4f}; final pole angle {angle[-1]:+.3f} rad '
        f'(0 = upright, at most {held:.3f} from it over the last quarter), cart at '
        f'{float(qpos[-1, 0]):+.3f} m')
  print(f'compile (value and gradient through {args.horizon} steps) {compile_s:.1f} s; '
        f'{per_iter * 1e3:.1f} ms per iteration')
  replayed = replay_in_mujoco(ctrl, np.pi)
  if replayed is not None:
    print(f'MuJoCo C replay of the controls: final pole angle {replayed:+.3f} rad')
  return 0


if __name__ == '__main__':
  raise SystemExit(main())
