"""System identification by gradient-based fitting through the simulator: a box's mass and
friction from its observed motion.

A motor pushes a box back and forth along a plane (slide joints x and z, four sliding
contacts). The observations are the box's x positions over 150 steps of MuJoCo C (when the
mujoco package is installed; else of mjx_py itself) simulating the box with its true mass and
friction. The model starts from a wrong guess of both, and Levenberg-Marquardt fits their
logarithms to the observations, with the Jacobian of the position errors taken by forward-mode
differentiation (jax.jacfwd) through every step of ``mjx_py.rollout``.

The mass enters through the geom's mass: ``set_const(m, from_geoms=True)`` recomputes the
body's mass and inertia from it and, with them, the constants the constraint rows use (the
bodies' inverse weights, which set the contacts' regularizer), as recompiling the XML with the
new mass would. The friction enters through the geom's sliding friction (the contact takes the
larger of the two geoms', and the floor's is lower).

Run: python examples/system_identification.py [--iters 10]
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np

import mjx_py

XML = """
<mujoco>
  <option timestep="0.01"/>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 .1" friction="0.1"/>
    <body name="box" pos="0 0 0.1">
      <joint name="x" type="slide" axis="1 0 0"/>
      <joint name="z" type="slide" axis="0 0 1"/>
      <geom name="box" type="box" size="0.1 0.1 0.1" mass="{mass}" friction="{friction}"/>
    </body>
  </worldbody>
  <actuator><motor joint="x" gear="1"/></actuator>
</mujoco>
"""
TRUE = {'mass': 2.0, 'friction': 0.7}
GUESS = {'mass': 1.0, 'friction': 0.4}
NSTEP = 150


def controls(nstep: int = NSTEP) -> np.ndarray:
  """The motor force (N) of each step: a 1.5 s sine of 30 N, strong enough to overcome the
  true friction (0.7 x 2 kg x 9.81 = 13.7 N) in both directions."""
  t = np.arange(nstep) * 0.01
  return (30.0 * np.sin(2 * np.pi * t / 1.5))[:, None]


def observe(ctrl) -> np.ndarray:
  """The box's x over the steps with the TRUE parameters: MuJoCo C when installed, else
  mjx_py."""
  xml = XML.format(**TRUE)
  try:
    import mujoco
  except ImportError:
    m = mjx_py.from_xml_string(xml)
    _, x = mjx_py.rollout(m, mjx_py.make_data(m), jnp.asarray(ctrl, m.geom_size.dtype),
                          record=lambda d: d.qpos[0])
    return np.asarray(x)
  mm = mujoco.MjModel.from_xml_string(xml)
  md = mujoco.MjData(mm)
  xs = []
  for u in ctrl:
    md.ctrl[:] = u
    mujoco.mj_step(mm, md)
    xs.append(md.qpos[0])
  return np.asarray(xs)


def make_residuals(m, ctrl, observed):
  """residuals(log_params (2,)) -> (nstep,) x - observed x (m), with log_params = (log mass,
  log friction) of the box geom."""
  box = mjx_py.name2id(m, 'geom', 'box')
  d0 = mjx_py.make_data(m)
  ctrl = jnp.asarray(ctrl, m.geom_size.dtype)
  observed = jnp.asarray(observed, m.geom_size.dtype)

  def with_params(log_params):
    mass, friction = jnp.exp(log_params[0]), jnp.exp(log_params[1])
    edited = dataclasses.replace(
        m, geom_mass=m.geom_mass.at[box].set(mass),
        geom_friction=m.geom_friction.at[box, 0].set(friction))
    return mjx_py.set_const(edited, from_geoms=True)

  def residuals(log_params):
    _, x = mjx_py.rollout(with_params(log_params), d0, ctrl, record=lambda d: d.qpos[0])
    return x - observed
  return residuals


def fit(residuals, log_params, iters: int, report):
  """Levenberg-Marquardt on the residuals, their Jacobian (nstep, 2) by forward-mode
  differentiation through the rollout (jax.jacfwd: two tangents): (log_params, compile s,
  s per iteration); ``report(i, loss, params)`` after every iteration, loss the mean squared
  residual."""
  @jax.jit
  def linearize(p):
    return residuals(p), jax.jacfwd(residuals)(p)

  t0 = time.perf_counter()
  compiled = mjx_py.xla.lower_paused(linearize, log_params).compile()
  compile_s = time.perf_counter() - t0
  damping = 1e-3
  t0 = time.perf_counter()
  r, jac = compiled(log_params)
  for i in range(1, iters + 1):
    # the damped Gauss-Newton step; a step that does not lower the loss is retried with more
    # damping (each try costs one more linearization)
    jtj, jtr = jac.T @ jac, jac.T @ r
    while True:
      step = jnp.linalg.solve(jtj + damping * jnp.diag(jnp.diag(jtj)), -jtr)
      r_new, jac_new = compiled(log_params + step)
      if float(jnp.mean(r_new ** 2)) < float(jnp.mean(r ** 2)) or damping > 1e6:
        break
      damping *= 10
    log_params, r, jac, damping = log_params + step, r_new, jac_new, max(damping / 10, 1e-7)
    report(i, float(jnp.mean(r ** 2)), np.exp(np.asarray(log_params)))
  jax.block_until_ready(log_params)
  return log_params, compile_s, (time.perf_counter() - t0) / iters


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--iters', type=int, default=10)
  args = parser.parse_args(argv)
  ctrl = controls()
  observed = observe(ctrl)
  m = mjx_py.from_xml_string(XML.format(**GUESS))
  residuals = make_residuals(m, ctrl, observed)
  start = jnp.log(jnp.asarray([GUESS['mass'], GUESS['friction']], m.geom_size.dtype))
  print(f"box on a plane, {NSTEP} steps; true mass {TRUE['mass']} kg, friction "
        f"{TRUE['friction']}; start from {GUESS['mass']} kg, {GUESS['friction']}")
  log_params, compile_s, per_iter = fit(
      residuals, start, args.iters,
      lambda i, v, p: print(f'  iteration {i:3d}  loss {v:.3e} m^2  mass {p[0]:.5f} kg  '
                            f'friction {p[1]:.5f}', flush=True))
  mass, friction = np.exp(np.asarray(log_params))
  print(f'fitted mass {mass:.6f} kg (true {TRUE["mass"]}), friction {friction:.6f} (true '
        f'{TRUE["friction"]})')
  print(f'compile (residuals and their Jacobian through {NSTEP} steps and set_const) '
        f'{compile_s:.1f} s; {per_iter * 1e3:.1f} ms per iteration')
  return 0


if __name__ == '__main__':
  raise SystemExit(main())
