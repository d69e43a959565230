"""mj_step's state checks (engine_forward.c: mj_checkPos, mj_checkVel, mj_checkAcc).

check_pos(m, d) -> d          reads qpos; writes everything (on a reset) or warning_counts
check_vel(m, d) -> d          reads qvel; the same
check_pos_vel(m, d) -> d      both, with one reset (what step runs)
check_acc(m, d) -> (d, bad)   reads qacc; writes warning_counts; bad: the world is to be reset
reset_after(m, d, bad) -> d   after the integrator: the reset state where bad

A world is bad when its qpos (qvel, qacc) has a NaN or an entry beyond mjMAXVAL = 1e10 in
magnitude (mju_isBad; infinities included). As MuJoCo:
- with automatic reset (the default; the ``autoreset`` disable flag turns it off) a bad world
  is reset to MuJoCo's reset state (mj_resetData: make_data, every warning counter cleared) and
  its warning counter (mjWARN_BADQPOS 4, BADQVEL 5, BADQACC 6) is set to 1; a bad qpos or qvel
  is found before forward, so the step then simulates the reset state, as MuJoCo;
- a bad qacc is found after forward. MuJoCo then resets and runs mj_forward a second time, so
  that the step integrates the reset state (the world ends at time = timestep). Here the world
  ends the step at the reset state itself (time 0, not integrated): a second forward in the
  step's program would double its compile time (and its gradient's), for a case that only a
  diverged world reaches. The world is one step behind MuJoCo's from there on;
- with the autoreset flag disabled the counter grows by 2 (MuJoCo counts the warning once in
  mj_warning and once in the check) and the bad values stay.
So a diverged world of a batch is flagged (and by default restarted) instead of poisoning the
batch's statistics.

Cost. The reset is a select of the reset state where the world is bad, under a lax.cond
whose predicate is "some world of the batch is bad": ``batch_any`` is a custom_vmap function
whose batching rule reduces over the batch (and, nested, over every enclosing vmap), so the
predicate stays unbatched and the branch is skipped at run time in every step where no world is
bad. Inside the branch the select is ``_pick``: a custom_vmap function that selects per world
under vmap and, for one world (no vmap), returns the reset state itself, since the branch
then runs only when that world is bad; its derivative rule is the plain select. The one-world
step's program loses a select kernel per Data field: the humanoid's optimized step went from
782 to 693 fusions, and its XLA compile (float32, FAST_COMPILE, 2-core CPU, six alternating
rounds in one process) from a median of 6.4 to 6.3 s (pairwise median ratio 0.94).
The qpos / qvel checks share one reset, over ``STATE_FIELDS`` only (forward rewrites the
rest); the reset after a bad qacc covers every field, so that the world holds MuJoCo's reset
state. Gradients: the reset state's Model-dependent values (qpos0, mocap poses) enter through
stop_gradient, so the reset carries no derivative with respect to the Model.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from jax import lax
from jax.custom_batching import custom_vmap

from .batching import broadcast_unbatched
from .data import make_data

MAXVAL = 1e10                                        # mjMAXVAL
WARN_BADQPOS, WARN_BADQVEL, WARN_BADQACC = 4, 5, 6   # mjtWarning
DSBL_AUTORESET = 1 << 15                             # mjDSBL_AUTORESET


@custom_vmap
def batch_any(flag):
  """``flag`` (a bool scalar) for one world; under vmap, the OR of the whole batch, unbatched
  (nested vmaps reduce over every level)."""
  return flag


@batch_any.def_vmap
def _batch_any_rule(axis_size, in_batched, flag):
  del axis_size
  (batched,) = in_batched
  return batch_any(jnp.any(flag) if batched else flag), False


def is_bad(x):
  """mju_isBad over an array: any NaN or |x| > mjMAXVAL."""
  x = jnp.asarray(x)
  return jnp.any(jnp.isnan(x) | (jnp.abs(x) > MAXVAL))


def _autoreset(m) -> bool:
  return not m.opt.disableflags & DSBL_AUTORESET


# The Data fields that forward reads before (or without) writing them: the state, the inputs,
# the warm start and the outputs that only some models compute. The reset before forward
# (check_pos_vel) resets only these, since forward then rewrites every other field from them;
# resetting all ~130 fields there made the check a tenth of the step's program.
STATE_FIELDS = ('time', 'qpos', 'qvel', 'act', 'qacc_warmstart', 'ctrl', 'qfrc_applied',
                'xfrc_applied', 'mocap_pos', 'mocap_quat', 'eq_active', 'sensordata', 'energy',
                'warning_counts')


def reset_state(m, d, warning, fields=None):
  """MuJoCo's reset state for the Model of ``d`` (dtypes of d; no derivative w.r.t. the
  Model) with warning counter ``warning`` (an int, or a traced int scalar) at 1 and the
  others at 0. ``fields``: reset only these Data fields (the others keep d's values)."""
  fresh = make_data(m)
  # the reset state's Model-dependent values (qpos0, the mocap bodies' poses) carry no
  # derivative; the other fields are constants
  fresh = dataclasses.replace(fresh, qpos=lax.stop_gradient(fresh.qpos),
                              mocap_pos=lax.stop_gradient(fresh.mocap_pos),
                              mocap_quat=lax.stop_gradient(fresh.mocap_quat))
  counts = jnp.zeros_like(d.warning_counts).at[warning].set(1)
  fresh = dataclasses.replace(fresh, warning_counts=counts)
  names = _names(d, fields)
  return dataclasses.replace(d, **{
      n: jax.tree_util.tree_map(lambda a, b: jnp.asarray(a, b.dtype), getattr(fresh, n),
                                getattr(d, n)) for n in names})


def _names(d, fields):
  """The Data field names ``fields``, or all of d's when None."""
  return [f.name for f in dataclasses.fields(d)] if fields is None else list(fields)


def _select(bad, new, old):
  return jax.tree_util.tree_map(lambda a, b: jnp.where(bad, a, b), new, old)


@custom_vmap
def _pick_value(bad, new, old):
  # one world: the reset branch runs only when batch_any(bad), i.e. bad itself, holds
  del bad, old
  return new


@_pick_value.def_vmap
def _pick_value_rule(axis_size, in_batched, bad, new, old):
  # a batch: the select of each world's own state (its leaves given the batch axis first), as
  # plain operations, so that an enclosing vmap batches them as any other
  bad, new, old = broadcast_unbatched(axis_size, (bad, new, old), in_batched)
  out = jax.tree_util.tree_map(
      lambda a, b: jnp.where(bad.reshape(bad.shape + (1,) * (a.ndim - 1)), a, b), new, old)
  return out, jax.tree_util.tree_map(lambda _: True, out)


@jax.custom_jvp
def _pick(bad, new, old):
  """_select(bad, new, old) inside _reset_where's reset branch: a world's own select under
  vmap; for one world (no vmap) ``new`` itself, without a select per field (the branch runs
  only when that world is bad). Under differentiation it is _select (the rule below), so the
  differentiated program is as before."""
  return _pick_value(bad, new, old)


@_pick.defjvp
def _pick_jvp(primals, tangents):
  bad, new, old = primals
  _, tnew, told = tangents
  return jax.jvp(lambda a, b: _select(bad, a, b), (new, old), (tnew, told))


def _reset_where(m, d, bad, warning, fields=None):
  """d with the fields ``fields`` (None: all) at the reset state where ``bad``, under a
  lax.cond that skips the reset when no world of the batch is bad."""
  names = _names(d, fields)

  def reset(d):
    fresh = reset_state(m, d, warning, names)
    picked = _pick(bad, {n: getattr(fresh, n) for n in names}, {n: getattr(d, n) for n in names})
    return dataclasses.replace(d, **picked)

  return lax.cond(batch_any(bad), reset, lambda d: d, d)


def _check(m, d, x, warning):
  bad = is_bad(x)
  if _autoreset(m):
    return _reset_where(m, d, bad, warning)
  counts = d.warning_counts.at[warning].add(2 * bad.astype(jnp.int32))
  return dataclasses.replace(d, warning_counts=counts)


def check_pos(m, d):
  """mj_checkPos: see the module docstring."""
  return _check(m, d, d.qpos, WARN_BADQPOS)


def check_vel(m, d):
  """mj_checkVel: see the module docstring."""
  return _check(m, d, d.qvel, WARN_BADQVEL)


def check_pos_vel(m, d):
  """check_pos then check_vel, with one reset in the program instead of two: a world whose
  qpos is bad is reset with BADQPOS counted (the reset qvel is then good, as in MuJoCo's
  sequence), one whose qvel alone is bad with BADQVEL counted."""
  bad_pos, bad_vel = is_bad(d.qpos), is_bad(d.qvel)
  if not _autoreset(m):
    counts = (d.warning_counts.at[WARN_BADQPOS].add(2 * bad_pos.astype(jnp.int32))
              .at[WARN_BADQVEL].add(2 * bad_vel.astype(jnp.int32)))
    return dataclasses.replace(d, warning_counts=counts)
  bad = bad_pos | bad_vel
  warning = jnp.where(bad_pos, WARN_BADQPOS, WARN_BADQVEL)
  return _reset_where(m, d, bad, warning, [f for f in STATE_FIELDS if hasattr(d, f)])


def check_acc(m, d):
  """mj_checkAcc (see the module docstring): (d with the warning counted, whether the world is
  to be reset after the integrator)."""
  bad = is_bad(d.qacc)
  if not _autoreset(m):
    counts = d.warning_counts.at[WARN_BADQACC].add(2 * bad.astype(jnp.int32))
    return dataclasses.replace(d, warning_counts=counts), jnp.zeros((), bool)
  return d, bad


def reset_after(m, d, bad):
  """The reset state (warning BADQACC at 1) where ``bad`` (from check_acc), d elsewhere."""
  return _reset_where(m, d, bad, WARN_BADQACC)


__all__ = ['check_pos', 'check_vel', 'check_pos_vel', 'check_acc', 'reset_after', 'batch_any',
           'is_bad', 'reset_state', 'STATE_FIELDS']
