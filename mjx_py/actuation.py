"""Actuation stage (mj_fwdActuation): actuator forces, their generalized forces, act_dot.

actuation(m, d)
  reads  ctrl (nu,), act (na,), actuator_length (nu,), actuator_velocity (nu,),
         actuator_moment (nu, nv), qfrc_gravcomp (nv,), warning_counts (8,)
  writes actuator_force (nu,), qfrc_actuator (nv,), act_dot (na,), warning_counts (8,)
         (mjWARN_BADCTRL counted when a control is NaN or beyond 1e10)

next_activation(m, act, act_dot)
  act (na,) after one step of activation dynamics: exact integration for filterexact, Euler
  otherwise, clamped to actrange where actlimited (MuJoCo's nextActivation, used by actearly
  and by the integrators).

MuJoCo's order, every actuator at once (no loop over actuators):
  1. a copy of ctrl is clamped to ctrlrange (ctrllimited, unless clampctrl is disabled); any bad
     control (NaN, |u| > 1e10) zeroes all controls of this call. d.ctrl is left as it is.
  2. act_dot from the clamped control (integrator, filter, filterexact, muscle). It is computed
     for actuators in disabled groups too; the integrators treat their act_dot as 0.
  3. force = gain * (ctrl, or act; with actearly the next act) + bias; 0 in disabled groups.
  4. forces of actuators on a tendon with actuator force limits are scaled so that their sum
     lies in tendon_actfrcrange.
  5. actuator_force clamped to forcerange (forcelimited).
  6. qfrc_actuator = actuator_moment^T force, plus qfrc_gravcomp on joints with actgravcomp
     (when the model has gravcomp bodies and gravity is on and non-zero).
  7. qfrc_actuator clamped to jnt_actfrcrange at each limited joint's first dof (MuJoCo clamps
     qfrc_actuator[jnt_dofadr]).
With the actuation disable flag, or without actuators, actuator_force and qfrc_actuator are
zero and act_dot is left untouched (as in MuJoCo).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from .math import MINVAL

MAXVAL = 1e10          # mjMAXVAL: larger controls are "bad"
WARN_BADCTRL = 7       # mjWARN_BADCTRL
DSBL_GRAVITY, DSBL_CLAMPCTRL, DSBL_ACTUATION = 1 << 6, 1 << 7, 1 << 10
DYN_NONE, DYN_INTEGRATOR, DYN_FILTER, DYN_FILTEREXACT, DYN_MUSCLE = 0, 1, 2, 3, 4
GAIN_FIXED, GAIN_AFFINE, GAIN_MUSCLE = 0, 1, 2
BIAS_NONE, BIAS_AFFINE, BIAS_MUSCLE = 0, 1, 2
TRN_TENDON = 3


# ---------------------------------------------------------------------------------------------
# Muscle curves (mju_muscleGainLength, mju_muscleGain, mju_muscleBias, mju_muscleDynamics),
# elementwise over arrays. prm = (range0, range1, force, scale, lmin, lmax, vmax, fpmax, fvmax).

def _pos(x):
  """max(mjMINVAL, x): MuJoCo's guard on every divisor of the muscle model."""
  return jnp.maximum(MINVAL, x)


def muscle_gain_length(length, lmin, lmax):
  """Normalised active force-length curve FL (four half-quadratics peaking at L = 1)."""
  a = 0.5 * (lmin + 1)
  b = 0.5 * (1 + lmax)
  x1 = (length - lmin) / _pos(a - lmin)
  x2 = (1 - length) / _pos(1 - a)
  x3 = (length - 1) / _pos(b - 1)
  x4 = (lmax - length) / _pos(lmax - b)
  val = jnp.where(length <= a, 0.5 * x1 * x1,
                  jnp.where(length <= 1, 1 - 0.5 * x2 * x2,
                            jnp.where(length <= b, 1 - 0.5 * x3 * x3, 0.5 * x4 * x4)))
  return jnp.where((lmin <= length) & (length <= lmax), val, 0.0)


def _muscle_scaled(length, lengthrange, acc0, prm):
  """Peak force F0, optimal length L0 and normalised length L of a muscle."""
  force = jnp.where(prm[..., 2] < 0, prm[..., 3] / _pos(acc0), prm[..., 2])
  l0 = (lengthrange[..., 1] - lengthrange[..., 0]) / _pos(prm[..., 1] - prm[..., 0])
  norm_len = prm[..., 0] + (length - lengthrange[..., 0]) / _pos(l0)
  return force, l0, norm_len


def muscle_gain(length, velocity, lengthrange, acc0, prm):
  """Muscle active gain -F0 * FL(L) * FV(V) (mju_muscleGain)."""
  force, l0, norm_len = _muscle_scaled(length, lengthrange, acc0, prm)
  vmax, fvmax = prm[..., 6], prm[..., 8]
  v = velocity / _pos(l0 * vmax)
  fl = muscle_gain_length(norm_len, prm[..., 4], prm[..., 5])
  y = fvmax - 1
  fv = jnp.where(v <= -1, 0.0,
                 jnp.where(v <= 0, (v + 1) * (v + 1),
                           jnp.where(v <= y, fvmax - (y - v) * (y - v) / _pos(y), fvmax)))
  return -force * fl * fv


def muscle_gain_vel(length, velocity, lengthrange, acc0, prm):
  """d(muscle gain)/d(velocity), MuJoCo's analytic piecewise form (mjd_muscleGain_vel)."""
  force, l0, norm_len = _muscle_scaled(length, lengthrange, acc0, prm)
  vmax, fvmax = prm[..., 6], prm[..., 8]
  v = velocity / _pos(l0 * vmax)
  fl = muscle_gain_length(norm_len, prm[..., 4], prm[..., 5])
  y = fvmax - 1
  dfv = jnp.where(v <= -1, 0.0,
                  jnp.where(v <= 0, 2 * v + 2,
                            jnp.where(v <= y, (-2 * v + 2 * y) / _pos(y), 0.0)))
  return -force * fl * dfv / _pos(l0 * vmax)


def muscle_bias(length, lengthrange, acc0, prm):
  """Muscle passive force -F0 * FP(L) (mju_muscleBias)."""
  force, _, norm_len = _muscle_scaled(length, lengthrange, acc0, prm)
  lmax, fpmax = prm[..., 5], prm[..., 7]
  b = 0.5 * (1 + lmax)
  x_quad = (norm_len - 1) / _pos(b - 1)
  x_lin = (norm_len - b) / _pos(b - 1)
  passive = jnp.where(norm_len <= 1, 0.0,
                      jnp.where(norm_len <= b, fpmax * 0.5 * x_quad * x_quad,
                                fpmax * (0.5 + x_lin)))
  return -force * passive


def _sigmoid(x):
  """Quintic smoothstep 6x^5 - 15x^4 + 10x^3 on [0, 1], 0 below, 1 above (mju_sigmoid)."""
  xc = jnp.clip(x, 0.0, 1.0)
  return xc * xc * xc * (3 * xc * (2 * xc - 5) + 10)


def muscle_dynamics(ctrl, act, dynprm):
  """Muscle activation rate (mju_muscleDynamics); dynprm = (tau_act, tau_deact, tausmooth)."""
  ctrlclamp = jnp.clip(ctrl, 0.0, 1.0)
  actclamp = jnp.clip(act, 0.0, 1.0)
  tau_act = dynprm[..., 0] * (0.5 + 1.5 * actclamp)
  tau_deact = dynprm[..., 1] / (0.5 + 1.5 * actclamp)
  width = dynprm[..., 2]
  dctrl = ctrlclamp - act
  hard = jnp.where(dctrl > 0, tau_act, tau_deact)
  smooth = tau_deact + (tau_act - tau_deact) * _sigmoid(
      dctrl / jnp.where(width < MINVAL, 1.0, width) + 0.5)
  tau = jnp.where(width < MINVAL, hard, smooth)
  return dctrl / _pos(tau)


# ---------------------------------------------------------------------------------------------
# Activation integration (nextActivation), shared with the integrators.

def step_activation(m, ids, act, act_dot):
  """Next activation (nextActivation) of activation values ``act`` owned by actuators ``ids``,
  with rates ``act_dot`` (all the same shape)."""
  h = m.opt.timestep
  tau = jnp.maximum(MINVAL, m.actuator_dynprm[ids, 0])
  exact = act + act_dot * tau * (1 - jnp.exp(-h / tau))
  nxt = jnp.where(m.actuator_dyntype[ids] == DYN_FILTEREXACT, exact, act + act_dot * h)
  lo, hi = m.actuator_actrange[ids, 0], m.actuator_actrange[ids, 1]
  return jnp.where(m.actuator_actlimited[ids] > 0, jnp.clip(nxt, lo, hi), nxt)


def act_owner(m):
  """Actuator id owning each activation entry: (na,) int32."""
  a = jnp.arange(m.na)[:, None]
  start = m.actuator_actadr[None, :]
  owns = (start >= 0) & (a >= start) & (a < start + m.actuator_actnum[None, :])
  return jnp.argmax(owns, axis=1).astype(jnp.int32)


def actuator_disabled(m):
  """(nu,) bool: actuator in a group disabled by m.opt.disableactuator (groups 0..30)."""
  group = m.actuator_group
  valid = (group >= 0) & (group <= 30)
  bits = jnp.right_shift(jnp.int32(m.opt.disableactuator), jnp.clip(group, 0, 30)) & 1
  return valid & (bits > 0)


def next_activation(m, act, act_dot):
  """act (na,) advanced by one timestep with act_dot (na,): filterexact integrated exactly,
  others by Euler, then clamped to actrange where actlimited (MuJoCo's nextActivation)."""
  if not m.na:
    return act
  return step_activation(m, act_owner(m), act, act_dot)


# ---------------------------------------------------------------------------------------------

def _select(cases, default):
  """Per-actuator choice among formulas: cases are (present, condition, value function);
  only the formulas of types the model has (``present``, static) are traced at all."""
  out = default
  for present, cond, value in reversed(cases):
    if present:
      out = jnp.where(cond, value(), out)
  return out


def actuation(m, d):
  """Actuator forces and activation derivatives (mj_fwdActuation); see the module docstring."""
  flags = m.opt.disableflags
  dtype = d.qvel.dtype
  if m.nu == 0 or flags & DSBL_ACTUATION:
    return dataclasses.replace(d, actuator_force=jnp.zeros((m.nu,), dtype),
                               qfrc_actuator=jnp.zeros((m.nv,), dtype))

  # 1. clamped local copy of ctrl; a bad control zeroes them all
  ctrl = d.ctrl
  if not flags & DSBL_CLAMPCTRL:
    lo, hi = m.actuator_ctrlrange[:, 0], m.actuator_ctrlrange[:, 1]
    ctrl = jnp.where(m.actuator_ctrllimited > 0, jnp.clip(ctrl, lo, hi), ctrl)
  bad = jnp.any(jnp.isnan(ctrl) | (jnp.abs(ctrl) > MAXVAL))
  ctrl = jnp.where(bad, 0.0, ctrl)
  warning_counts = d.warning_counts.at[WARN_BADCTRL].add(bad.astype(jnp.int32))

  # 2. act_dot of stateful actuators (written at their last activation entry)
  stateful = m.actuator_actadr >= 0
  act_last = m.actuator_actadr + m.actuator_actnum - 1
  if m.na:
    act = d.act[jnp.clip(act_last, 0, m.na - 1)]
  else:
    act = jnp.zeros((m.nu,), dtype)
  dyntype = m.actuator_dyntype
  dynprm = m.actuator_dynprm
  tau = jnp.maximum(MINVAL, dynprm[:, 0])
  dyn = m.dyn_types
  rate = _select([
      (DYN_INTEGRATOR in dyn, dyntype == DYN_INTEGRATOR, lambda: ctrl),
      (DYN_FILTER in dyn or DYN_FILTEREXACT in dyn,
       (dyntype == DYN_FILTER) | (dyntype == DYN_FILTEREXACT), lambda: (ctrl - act) / tau),
      (DYN_MUSCLE in dyn, dyntype == DYN_MUSCLE, lambda: muscle_dynamics(ctrl, act, dynprm))],
      jnp.zeros_like(ctrl))
  if m.na:
    act_dot = jnp.zeros((m.na,), dtype).at[jnp.where(stateful, act_last, m.na)].set(
        rate, mode='drop')
  else:
    act_dot = d.act_dot

  # 3. force = gain * input + bias
  length, velocity = d.actuator_length, d.actuator_velocity
  gainprm, biasprm = m.actuator_gainprm, m.actuator_biasprm
  lrange, acc0 = m.actuator_lengthrange, m.actuator_acc0
  gaintype, biastype = m.actuator_gaintype, m.actuator_biastype
  gain = _select([
      (True, gaintype == GAIN_FIXED, lambda: gainprm[:, 0]),
      (GAIN_AFFINE in m.gain_types, gaintype == GAIN_AFFINE,
       lambda: gainprm[:, 0] + gainprm[:, 1] * length + gainprm[:, 2] * velocity),
      (GAIN_MUSCLE in m.gain_types, gaintype == GAIN_MUSCLE,
       lambda: muscle_gain(length, velocity, lrange, acc0, gainprm))], jnp.ones_like(ctrl))
  bias = _select([
      (BIAS_AFFINE in m.bias_types, biastype == BIAS_AFFINE,
       lambda: biasprm[:, 0] + biasprm[:, 1] * length + biasprm[:, 2] * velocity),
      (BIAS_MUSCLE in m.bias_types, biastype == BIAS_MUSCLE,
       lambda: muscle_bias(length, lrange, acc0, biasprm))], jnp.zeros_like(ctrl))
  if m.na:
    act_dot_last = act_dot[jnp.clip(act_last, 0, m.na - 1)]
    act_early = step_activation(m, jnp.arange(m.nu), act, act_dot_last)
    act_in = jnp.where(m.actuator_actearly > 0, act_early, act)
  else:
    act_in = act
  force = gain * jnp.where(stateful, act_in, ctrl) + bias
  force = jnp.where(actuator_disabled(m), 0.0, force)

  # 4. tendon actuator force limits: scale all forces on a tendon into its range
  if m.ntendon and TRN_TENDON in m.trn_types:
    tid = m.actuator_trnid[:, 0]
    tsafe = jnp.clip(tid, 0, m.ntendon - 1)
    on_limited = (m.actuator_trntype == TRN_TENDON) & (m.tendon_actfrclimited[tsafe] > 0)
    total = jnp.zeros((m.ntendon,), dtype).at[tsafe].add(jnp.where(on_limited, force, 0.0))
    tf = total[tsafe]
    lo, hi = m.tendon_actfrcrange[tsafe, 0], m.tendon_actfrcrange[tsafe, 1]
    nonzero = tf != 0
    safe_tf = jnp.where(nonzero, tf, 1.0)
    scale = jnp.where(tf < lo, lo / safe_tf, jnp.where(tf > hi, hi / safe_tf, 1.0))
    force = jnp.where(on_limited & nonzero, force * scale, force)

  # 5. force limits
  lo, hi = m.actuator_forcerange[:, 0], m.actuator_forcerange[:, 1]
  force = jnp.where(m.actuator_forcelimited > 0, jnp.clip(force, lo, hi), force)

  # 6. generalized force, actuator-level gravity compensation
  qfrc = d.actuator_moment.T @ force
  if m.ngravcomp and not flags & DSBL_GRAVITY and m.nv:
    on = (m.jnt_actgravcomp[m.dof_jntid] > 0) & jnp.any(m.opt.gravity != 0)
    qfrc = qfrc + jnp.where(on, d.qfrc_gravcomp, 0.0)

  # 7. joint-level actuator force limits, at each joint's first dof
  if m.njnt and m.nv:
    adr = m.jnt_dofadr
    lo, hi = m.jnt_actfrcrange[:, 0], m.jnt_actfrcrange[:, 1]
    limited = m.jnt_actfrclimited > 0
    clamped = jnp.clip(qfrc[adr], lo, hi)
    # onto the limited joints' first dofs by a (nv, njnt) match (no scatter: a dof is the
    # first dof of at most one joint)
    hit = jax.nn.one_hot(adr, m.nv, dtype=bool).T & limited[None, :]
    qfrc = jnp.where(jnp.any(hit, axis=1), jnp.sum(jnp.where(hit, clamped, 0.0), axis=1), qfrc)

  return dataclasses.replace(d, actuator_force=force, qfrc_actuator=qfrc, act_dot=act_dot,
                             warning_counts=warning_counts)
