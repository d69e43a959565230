"""Rollouts: ``nstep`` calls of ``step`` in one ``lax.scan``, with per-step inputs and
recorded outputs (the JAX counterpart of MuJoCo's ``mujoco.rollout`` for one world; vmap it for
many).

rollout(m, d, ctrl=None, *, nstep=None, inputs=None, record=None, remat=False,
        state_only=False) -> (d, ys)
  ctrl     (nstep, nu): d.ctrl is set to ctrl[t] before step t (None: d.ctrl stays)
  inputs   {field: (nstep, ...)}: other MuJoCo user inputs set before each step, any of
           INPUT_FIELDS (ctrl may also be given here)
  nstep    the number of steps; needed when there are no per-step inputs
  record   a function Data -> pytree, applied to the Data after each step; ys stacks its
           results on a leading axis of nstep (None: ys is None)
  state_only  carry only the state from step to step (below)
  returns  the Data after the last step, and ys
  reads/writes what ``step`` does (every Data field), nstep times

state_only=True: the scan carries only the fields a step reads (``state_fields``: the state,
the user inputs, the warm start, sensordata, energy and the warning counters, as
``mjx_py.check.STATE_FIELDS``) instead of the whole Data, and the Data returned has those
fields from the last step and every other field as ``d`` had it (the derived quantities of
the last step, xpos, qacc, contact, efc_*, ... are not kept: ``record`` them where they are
needed). The state, ``ys`` and their derivatives are those of the whole-Data scan: a step
reads nothing else (tests/test_rollout.py checks it bit for bit across the test models). It
is what ``mujoco.rollout`` returns, and it runs faster: XLA writes each carried field into the
loop's buffers every step, where a derived field not carried is fused into its uses or
dropped. Measured (float32, 2-core CPU, batch 1024 over both cores' devices, 20-step rollouts
after 150 steps, the programs alternating in one process, median / fastest ratios of the time
against the whole-Data carry): humanoid 0.804 / 0.791 at the default capacities and 0.926 /
0.929 fitted (17 contacts, 53 rows), hopper 0.960 / 0.942, ant fitted 0.995 / 1.015. The
benchmarks' and the main job's rollouts (``mjx_py.testspeed.batched_rollout``) carry the state
so.

Why not a hand-written ``lax.scan(lambda d, u: (step(m, replace(d, ctrl=u)), ...), d, ctrl)``:
it gives the same values, and this function is that scan plus one thing that only changes the
tracing work under ``jax.grad`` / ``jax.jvp`` / ``jax.vmap``. Those transformations of a scan
find by a fixed point which parts of the carry carry a tangent (or a batch axis): the body is
linearized (batched) with the tangents of the initial carry, and when its output has tangents
the input lacked (the gradient is taken with respect to the initial qvel, the controls or Model
fields, and a step makes every float field depend on them), the body is linearized again with
the union. A rollout whose gradient flows from the controls or the initial velocity therefore
pays for linearizing ``step`` twice. Here every leaf of the initial Data is first given the
tangent (and batch axis) of whatever the rollout's inputs carry, so the fixed point holds at
the first pass: each leaf becomes ``where(True, x, x + seed)``, exactly x in value (XLA removes
the select), with ``seed`` a scalar that depends on one element of each traced input leaf (the
Model's, the Data's, the per-step inputs'). Measured on the humanoid (float32, 2-core CPU, the
gradient of the squared final qpos with respect to the initial qvel and 100 steps of controls,
``mjx_py.testspeed --grad 100``): tracing 5.0-5.3 -> 3.8 s, the same gradient bit for bit, the
same XLA compile and run time.

remat=True: reverse mode through a scan stores, for every step, each intermediate its
backward pass uses (the residuals: Jacobians, rotation matrices, contact frames, the solver's
rows ...), so the gradient's memory grows with nstep times a step's residuals. With ``remat``
each step is wrapped in ``jax.checkpoint``: the forward pass keeps only the Data each step
starts from and the constraint solver's solution (qacc*, forces, active set: the values named
``mjx_py.solver.CHECKPOINT_NAME``, REMAT_POLICY), and the backward pass recomputes the rest of
the step, without solver iterations, before differentiating it. The values and derivatives are
the same up to rounding. Measured on the humanoid (``python -m mjx_py.testspeed
models/humanoid.xml --grad 100 [--remat]``, README Benchmarks): the gradient program's
temporary buffers from 27.3 to 0.9 MB (float32; 52.7 to 1.4 MB in float64) at the same run
time within this machine's spread, and the same compile time in separate processes (5-6 s more
XLA compile, of 34, in one process); under vmap over 64 worlds 1,747 -> 62 MB and 1.2x faster.
It stays off by default so that a rollout's gradient equals a hand-written scan's bit for bit.
Forward mode (jax.jvp, jax.jacfwd) and vmap work as without it.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from jax import lax

from .check import STATE_FIELDS
from .forward import step
from .solver import CHECKPOINT_NAME
from .xla import gc_paused

# the Data fields MuJoCo's user inputs consist of (mjSTATE_USER without userdata)
INPUT_FIELDS = ('ctrl', 'qfrc_applied', 'xfrc_applied', 'mocap_pos', 'mocap_quat',
                'eq_active')

# what a rematerialized step keeps for its backward pass besides its input Data: the
# constraint solver's solution (qacc*, the forces and the active set, tagged CHECKPOINT_NAME in
# mjx_py.solver), so that the recomputation runs no solver iterations
REMAT_POLICY = jax.checkpoint_policies.save_only_these_names(CHECKPOINT_NAME)


def _per_step_inputs(d, ctrl, inputs, nstep):
  """The per-step inputs as a dict field -> (nstep, ...) array, and nstep; raises ValueError
  on an unknown field, a shape that does not match the Data's, or disagreeing step counts."""
  xs = dict(inputs or {})
  if ctrl is not None:
    if 'ctrl' in xs:
      raise ValueError("rollout: ctrl is given both as an argument and in inputs")
    xs['ctrl'] = ctrl
  for name, x in xs.items():
    if name not in INPUT_FIELDS:
      raise ValueError(f"rollout: '{name}' is not an input field (one of "
                       f"{', '.join(INPUT_FIELDS)})")
    x = jnp.asarray(x)
    want = tuple(getattr(d, name).shape)
    if x.ndim != len(want) + 1 or tuple(x.shape[1:]) != want:
      raise ValueError(f"rollout: inputs['{name}'] has shape {tuple(x.shape)}; expected "
                       f"(nstep,) + {want}")
    if nstep is not None and x.shape[0] != nstep:
      raise ValueError(f"rollout: inputs['{name}'] has {x.shape[0]} steps, nstep is {nstep}")
    nstep = x.shape[0]
    xs[name] = x.astype(getattr(d, name).dtype)
  if nstep is None:
    raise ValueError('rollout: give nstep when there are no per-step inputs')
  return xs, int(nstep)


def _seed(dtype, *trees):
  """A scalar of value 0 that carries the tangent and batch axis of every traced leaf of
  ``trees`` (through one element of each); None when no leaf is traced."""
  leaves = jax.tree_util.tree_leaves(trees)
  parts = [lax.convert_element_type(jnp.ravel(x)[0], dtype) for x in leaves
           if isinstance(x, jax.core.Tracer) and x.size]
  if not parts:
    return None
  return jnp.where(True, jnp.zeros((), dtype), sum(parts[1:], parts[0]))


def _with_seed(d, seed):
  """``d`` with every leaf x as where(True, x, x + seed): the same values, and the tangents and
  batch axes that a step's output will have (see the module docstring)."""
  def one(x):
    if jnp.issubdtype(x.dtype, jnp.floating):
      return jnp.where(True, x, x + seed.astype(x.dtype))
    if jnp.issubdtype(x.dtype, jnp.integer):
      # integers carry no tangent; this gives them the batch axis only
      return jnp.where(True, x, x + lax.convert_element_type(seed, x.dtype))
    return x
  return jax.tree_util.tree_map(one, d)


def state_fields(d) -> tuple:
  """The names of the Data fields that ``step`` reads (mjx_py.check.STATE_FIELDS, those d has):
  a step's result depends on the Model and these alone."""
  return tuple(f for f in STATE_FIELDS if hasattr(d, f))


def state_of(d) -> dict:
  """{name: value} of d's state_fields."""
  return {f: getattr(d, f) for f in state_fields(d)}


def scan_state(fn, d, xs=None, length=None):
  """lax.scan of ``fn(d, x) -> (d, y)`` from the Data ``d`` that carries only its
  state_fields: each step starts from ``d`` with the carried fields replaced. Returns (d with
  the last step's state_fields, ys). ``fn`` sees and returns whole Data (of d's structure)."""
  def body(state, x):
    out, y = fn(dataclasses.replace(d, **state), x)
    return state_of(out), y

  state, ys = lax.scan(body, state_of(d), xs, length=length)
  return dataclasses.replace(d, **state), ys


@gc_paused()
def rollout(m, d, ctrl=None, *, nstep=None, inputs=None, record=None, remat=False,
            state_only=False):
  """``nstep`` steps of ``step(m, d)`` in a lax.scan; see the module docstring for the
  arguments and shapes (``remat``: under reverse-mode differentiation, recompute each step
  instead of storing its intermediates; ``state_only``: carry only the state from step to
  step, see the module docstring). Jittable and differentiable in m, d and the inputs
  (``nstep``, ``record``, ``remat`` and ``state_only`` are static); vmap it for a batch of
  worlds."""
  xs, nstep = _per_step_inputs(d, ctrl, inputs, nstep)
  seed = _seed(d.qpos.dtype, m, d, xs)
  if seed is not None:
    d = _with_seed(d, seed)

  def body(d, x):
    d = step(m, dataclasses.replace(d, **x) if x else d)
    return d, (record(d) if record is not None else None)

  if remat:
    # prevent_cse=False: the recomputation runs in the backward scan's body, apart from the
    # forward scan, so XLA's CSE cannot merge the two (the case jax.checkpoint's docstring
    # names); the guard would only cost
    body = jax.checkpoint(body, prevent_cse=False, policy=REMAT_POLICY)
  if state_only:
    return scan_state(body, d, xs or None, length=nstep)
  return lax.scan(body, d, xs or None, length=nstep)


__all__ = ['rollout', 'INPUT_FIELDS', 'state_fields', 'state_of', 'scan_state']
