"""forward() and step(): MuJoCo's pipeline in MuJoCo's order, as an outline.

forward(m, d) -> d   (mj_forward, mj_forwardSkip with skipsensor)
  position: kinematics, com_pos, camlight, tendon, crb, tendon_armature, collision,
            make_constraint (rows, impedance, reference), transmission; then position
            sensors, and energy[0] with the energy flag
  velocity: tendon/actuator velocity, com_vel, passive, rne; then velocity sensors, and
            energy[1] with the energy flag
  actuation, acceleration (qfrc_smooth, qacc_smooth), constraint (the solver: qacc,
  qfrc_constraint, efc_force), acceleration sensors
step(m, d) -> d      (mj_step) check_pos and check_vel (one reset), forward, check_acc, then
                     the integrator chosen by m.opt.integrator (RK4's intermediate evaluations
                     skip the sensors, as MuJoCo's do; its first forward runs in the same scan
                     as the other three, then ``sensors`` and check_acc on it, so that the
                     program holds one copy of forward); worlds with NaN / huge values are
                     counted in warning_counts and reset (mjx_py.check).
sensors(m, d) -> d   the three sensor stages on a pass that skipped them

Model options are static: m.opt.integrator, solver, cone and the disable flags pick the code
that is traced.
"""

from __future__ import annotations

import dataclasses

from . import (
  actuation,
  check,
  collision,
  constraint,
  inertia,
  integrate,
  kinematics,
  passive,
  sensor,
  solver,
  support,
  tendon,
  transmission,
  velocity,
)
from .xla import full_precision, gc_paused

DSBL_CONSTRAINT, DSBL_EQUALITY, DSBL_FRICTIONLOSS, DSBL_LIMIT, DSBL_CONTACT = 1, 2, 4, 8, 16
EULER, RK4, IMPLICIT, IMPLICITFAST = 0, 1, 2, 3
ENBL_ENERGY = 1 << 1


def fwd_position(m, d):
  d = kinematics.kinematics(m, d)
  d = inertia.com_pos(m, d)
  d = kinematics.camlight(m, d)
  d = tendon.tendon(m, d)
  d = inertia.crb(m, d)
  d = tendon.tendon_armature(m, d)
  d = collision.collision(m, d)
  d = constraint.make_constraint(m, d)
  return transmission.transmission(m, d)


def fwd_velocity(m, d):
  d = velocity.tendon_actuator_velocity(m, d)
  d = velocity.com_vel(m, d)
  d = passive.passive(m, d)
  return velocity.rne(m, d)


def fwd_acceleration(m, d):
  """qfrc_smooth = passive - bias + applied + actuator + J^T xfrc_applied; qacc_smooth.

  reads  qfrc_passive, qfrc_bias, qfrc_applied, qfrc_actuator, xfrc_applied, xipos, qM
  writes qfrc_smooth (nv,), qacc_smooth (nv,)
  """
  qfrc = d.qfrc_passive - d.qfrc_bias + d.qfrc_applied + d.qfrc_actuator
  if m.nbody > 1 and m.nv:
    # Cartesian forces act at each body's centre of mass, in the world frame (the world
    # body's row moves no dof)
    qfrc = qfrc + support.xfrc_accumulate(m, d)
  qacc = inertia.solve_m(m, d, qfrc) if m.nv else qfrc
  return dataclasses.replace(d, qfrc_smooth=qfrc, qacc_smooth=qacc)


def fwd_constraint(m, d):
  """The constraint solve (mj_fwdConstraint): qacc, qfrc_constraint, efc_force, efc_state and
  the solver statistics from the rows of make_constraint (see mjx_py.solver)."""
  return solver.solve(m, d)


@gc_paused()
@full_precision
def forward(m, d, *, skipsensor=False):
  """Forward dynamics (mj_forward): every derived quantity of the current state.

  skipsensor (static): leave sensordata (and what only sensors compute: subtree_linvel /
  subtree_angmom, cacc / cfrc_*) untouched, as mj_forwardSkip(m, d, mjSTAGE_NONE, 1).
  """
  energy = bool(m.opt.enableflags & ENBL_ENERGY)
  d = fwd_position(m, d)
  if not skipsensor:
    d = sensor.sensor_pos(m, d)
  if energy:
    d = sensor.energy_pos(m, d)
  d = fwd_velocity(m, d)
  if not skipsensor:
    d = sensor.sensor_vel(m, d)
  if energy:
    d = sensor.energy_vel(m, d)
  d = actuation.actuation(m, d)
  d = fwd_acceleration(m, d)
  d = fwd_constraint(m, d)
  if not skipsensor:
    d = sensor.sensor_acc(m, d)
  return d


def _forward_skip_sensor(m, d):
  return forward(m, d, skipsensor=True)


def sensors(m, d):
  """forward's sensor stages (mj_sensorPos, mj_sensorVel, mj_sensorAcc, in order) on a
  finished forward pass that skipped them. Each reads only fields that forward's later stages
  leave unchanged (positions, the efc rows' positions, velocities, forces), so the values
  equal those forward computes in place."""
  d = sensor.sensor_pos(m, d)
  d = sensor.sensor_vel(m, d)
  return sensor.sensor_acc(m, d)


@gc_paused()
@full_precision
def step(m, d):
  """One simulation step (mj_step): the qpos / qvel checks, forward dynamics, the qacc check,
  then integration (mjx_py.check: bad worlds are flagged and reset)."""
  integrator = m.opt.integrator
  d = check.check_pos_vel(m, d)
  if integrator == RK4:
    # the first forward pass runs inside RK4's scan of evaluations (one copy of forward in
    # the program), then the sensors and the qacc check on it
    d, first = integrate.rk4_step(m, d, _forward_skip_sensor, sensors)
    checked, bad = check.check_acc(m, first)
    d = dataclasses.replace(d, warning_counts=d.warning_counts + checked.warning_counts
                            - first.warning_counts)
    return check.reset_after(m, d, bad)
  d = forward(m, d)
  d, bad = check.check_acc(m, d)
  if integrator == EULER:
    d = integrate.euler(m, d)
  elif integrator == IMPLICIT:
    d = integrate.implicit(m, d)
  else:
    d = integrate.implicitfast(m, d)
  return check.reset_after(m, d, bad)
