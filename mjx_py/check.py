"""mj_step's state checks (engine_forward.c: mj_checkPos, mj_checkVel, mj_checkAcc).

check_pos(m, d) -> d          reads qpos; writes everything (on a reset) or warning_counts
check_vel(m, d) -> d          reads qvel; the same
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

Cost. The reset (a select of the reset state over every Data field) runs under a lax.cond
whose predicate is "some world of the batch is bad": ``batch_any`` is a custom_vmap function
whose batching rule reduces over the batch (and, nested, over every enclosing vmap), so the
predicate stays unbatched and the branch is skipped at run time in every step where no world is
bad. Gradients: the reset state depends on the Model only, and its derivative is not
propagated (the Model enters the reset branch through stop_gradient).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from jax import lax
from jax.custom_batching import custom_vmap

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


def reset_state(m, d, warning: int):
  """MuJoCo's reset state for the Model of ``d`` (dtypes of d; no derivative w.r.t. the
  Model) with warning counter ``warning`` at 1 and the others at 0."""
  fresh = make_data(jax.tree_util.tree_map(lax.stop_gradient, m))
  fresh = jax.tree_util.tree_map(lambda a, b: jnp.asarray(a, b.dtype), fresh, d)
  counts = jnp.zeros_like(d.warning_counts).at[warning].set(1)
  return dataclasses.replace(fresh, warning_counts=counts)


def _select(bad, new, old):
  return jax.tree_util.tree_map(lambda a, b: jnp.where(bad, a, b), new, old)


def _check(m, d, x, warning):
  bad = is_bad(x)
  if _autoreset(m):
    return lax.cond(batch_any(bad), lambda d: _select(bad, reset_state(m, d, warning), d),
                    lambda d: d, d)
  counts = d.warning_counts.at[warning].add(2 * bad.astype(jnp.int32))
  return dataclasses.replace(d, warning_counts=counts)


def check_pos(m, d):
  """mj_checkPos: see the module docstring."""
  return _check(m, d, d.qpos, WARN_BADQPOS)


def check_vel(m, d):
  """mj_checkVel: see the module docstring."""
  return _check(m, d, d.qvel, WARN_BADQVEL)


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
  return lax.cond(batch_any(bad), lambda d: _select(bad, reset_state(m, d, WARN_BADQACC), d),
                  lambda d: d, d)


__all__ = ['check_pos', 'check_vel', 'check_acc', 'reset_after', 'batch_any', 'is_bad',
           'reset_state']
