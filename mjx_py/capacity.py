"""Capacities fitted to a model's use: ``fit_capacity`` probes how many contacts and
constraint rows a model's worlds need and returns a contact capacity (``nconmax``) and a
constraint-row capacity (``njmax``) with a margin, for ``put_model`` / ``from_xml_path`` or
``with_capacity`` (the same Model at other capacities, without the MJCF).

Why: every stage after the narrowphase (contact ordering and parameter mixing, the constraint
rows, the solver's buffers, contact sensors, the Data carried between steps) is sized by the
static capacities, not by the contacts in use (the constraint rows' contact work excepted
while every world's contacts fit a quarter of the slots: mjx_py.constraint.contact_bucket).
The defaults never overflow: ``nconmax`` is a per-geom-type budget sized for piles of objects
(54 slots for the bundled humanoid) and
``nefc_max`` every row those slots and the model's limits, equalities and friction losses can
produce (262). The humanoid under random controls uses about a fifth of that, and its
capacities fitted here (17 contacts, 53 rows) ran 20-step rollouts at batch 1024 in 0.727 of
the default's time, the ant's (8, 30 of 38, 168) in 0.678 (float32, 2-core CPU, the median of
9 alternating pairs in one process). MuJoCo C allocates per step and has no such knob; MJX's
Warp backend asks the user for both numbers. This module measures them. A row capacity cut
below every row the model can produce, as a fitted one is, gives the solver's iterations one
row bucket of two thirds of it (``mjx_py.constraint.row_buckets``: about the most rows the probe
saw), where the default capacity's ladder is an eighth and a quarter of it.

The probe: ``nstep`` steps of ``jax.vmap(step)`` over ``batch`` worlds (one ``lax.scan``,
one jit compile at the probed Model's capacities), from ``d`` (one world, broadcast to the
batch, or a batch) under random controls drawn every step (uniform in the control range where
limited, standard normal elsewhere: ``mjx_py.testspeed``'s main-job controls) or the controls
given. It records each world's largest ``ncon`` and ``nefc`` after every step's forward pass.
The fit is the largest of ``peak + extra`` and ``ceil(margin * peak)``, never above the
probed Model's capacity; the pair capacity ``npairmax`` (the most pairs of one geom type pair
whose narrowphase runs) stays the probed Model's, so that the fitted Model tests the same
pairs (the pairs it cuts count in mjWARN_CONTACTFULL, reported as ``pairs_cut``). A probe
that filled its Model's contact buffer (mjWARN_CONTACTFULL with a world at ``nconmax``
contacts) or its row buffer (mjWARN_CNSTRFULL) measured a clipped count and raises
``CapacityError``: probe at the default capacities.

A capacity fitted this way holds for the states the probe visited. Worlds that go elsewhere
(other controls, perturbations, objects thrown at the robot) can need more: a contact that
does not fit is dropped, the shallowest first, and counted in ``warning_counts[1]``; a world
whose rows do not fit gets no constraint rows that step and counts ``warning_counts[2]``
(MuJoCo's rule). Check the warnings of the runs that use the fit.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .collision.driver import WARN_CONTACTFULL
from .constraint import WARN_CNSTRFULL, rows_needed

# the fit's defaults: at least 50% and 4 above the peak the probe saw
MARGIN = 1.5
EXTRA = 4


class CapacityError(ValueError):
  """The probe filled one of its Model's capacities, so its peak counts are clipped."""


class Capacity(NamedTuple):
  """A fitted capacity (``kwargs()``: the keyword arguments of put_model / from_xml_path).

  nconmax: contact capacity; njmax: constraint-row capacity; npairmax: pairs of one geom type
  pair whose narrowphase runs (the probed Model's); ncon, nefc: the most contacts and rows
  any world of the probe had after a step; probed: the steps the probe ran (worlds x steps);
  pairs_cut: the geom pairs the narrowphase left out in the probe for npairmax (its
  mjWARN_CONTACTFULL count; the fit keeps npairmax, so its runs cut the same pairs)."""
  nconmax: int
  njmax: int
  npairmax: int
  ncon: int
  nefc: int
  probed: int
  pairs_cut: int

  def kwargs(self) -> dict:
    return {'nconmax': self.nconmax, 'njmax': self.njmax, 'npairmax': self.npairmax}

  def apply(self, m):
    """The Model m at these capacities (with_capacity)."""
    return with_capacity(m, **self.kwargs())


def with_capacity(m, nconmax: int | None = None, njmax: int | None = None,
                  npairmax: int | None = None):
  """The Model m with other static capacities, as put_model would build it from the same
  arrays with these arguments (no recompile of the MJCF): the contact capacity ``nconmax``
  (None: m's), the pair capacity ``npairmax`` (None: m's) and the constraint-row capacity
  ``njmax`` (None: every row the contact capacity can produce, put_model's default). Only
  these and ``nefc_max`` depend on them; make the Data again (make_data) for the new sizes."""
  from .collision import driver
  nconmax = m.nconmax if nconmax is None else driver.capacity(-1, {}, nconmax)
  npairmax = m.npairmax if npairmax is None else driver.pair_capacity(nconmax, npairmax)
  rows = rows_needed(m, nconmax)
  if njmax is not None:
    if int(njmax) != njmax or njmax < 0:
      raise ValueError(f'njmax must be a non-negative integer, got {njmax!r}')
    rows = min(rows, int(njmax))
  return dataclasses.replace(m, nconmax=nconmax, npairmax=npairmax, nefc_max=rows)


def fold_peaks(peak, d):
  """peak (..., 2) int32, the most contacts and constraint rows seen so far, folded with the
  Data ``d`` after a step (its ncon, nefc (...))."""
  return jnp.maximum(peak, jnp.stack([d.ncon, d.nefc], axis=-1))


def fitted(peak: int, cap: int, margin: float = MARGIN, extra: int = EXTRA) -> int:
  """A capacity for a use of at most ``peak``: max(peak + extra, ceil(margin * peak)), at most
  ``cap``."""
  return int(min(cap, max(peak + extra, math.ceil(margin * peak))))


def random_controls(m, key, batch: int, dtype):
  """(batch, nu) controls: uniform in the control range where limited, standard normal
  elsewhere."""
  lo, hi = m.actuator_ctrlrange[:, 0], m.actuator_ctrlrange[:, 1]
  ku, kn = jax.random.split(key)
  u = jax.random.uniform(ku, (batch, m.nu), dtype)
  n = jax.random.normal(kn, (batch, m.nu), dtype)
  return jnp.where(m.actuator_ctrllimited > 0, lo + (hi - lo) * u, n).astype(dtype)


def _probe(m, d, ctrl, key, nstep: int):
  """The probe's rollout: (largest (ncon, nefc) of any world and step (2,), the CONTACTFULL
  and CNSTRFULL warnings raised (2,))."""
  from .forward import step  # late: forward imports the collision package
  batch = d.qpos.shape[0]
  one = jax.vmap(lambda d, c: step(m, dataclasses.replace(d, ctrl=c)))

  def body(carry, t):
    d, peak = carry
    c = (random_controls(m, jax.random.fold_in(key, t), batch, d.qpos.dtype)
         if ctrl is None else ctrl[t])
    d = one(d, c)
    return (d, fold_peaks(peak, d)), None

  warned = d.warning_counts[:, [WARN_CONTACTFULL, WARN_CNSTRFULL]]
  peak = jnp.zeros((batch, 2), jnp.int32)
  (d, peak), _ = jax.lax.scan(body, (d, peak), jnp.arange(nstep))
  raised = d.warning_counts[:, [WARN_CONTACTFULL, WARN_CNSTRFULL]] - warned
  return jnp.max(peak, axis=0), jnp.sum(raised, axis=0)


_probe_jit = jax.jit(_probe, static_argnums=4)


def fit_capacity(m, d=None, *, batch: int = 32, nstep: int = 1000, ctrl=None, seed: int = 0,
                 margin: float = MARGIN, extra: int = EXTRA) -> Capacity:
  """Probes the model and returns capacities for it (see the module docstring).

  m: the Model to probe, at capacities that the probe cannot fill (put_model's defaults); one
    Model, not a batch of per-world Models (probe domain randomization with the nominal
    Model, or with the per-world Model that makes the most contacts).
  d: the initial Data: one world (broadcast to ``batch`` worlds) or a batch (leading axis:
    worlds; ``batch`` is then its size); None: make_data(m).
  batch, nstep: the probe's worlds and steps.
  ctrl: (nstep, batch, nu) controls set before each step; None: random controls drawn each
    step from ``seed``.
  margin, extra: the fit, max(peak + extra, ceil(margin * peak)), at most m's capacity.

  Raises CapacityError when the probe raised mjWARN_CONTACTFULL or mjWARN_CNSTRFULL, and
  ValueError for a ``ctrl`` or ``d`` of the wrong shape.
  """
  from .data import make_data
  if nstep < 1 or batch < 1:
    raise ValueError(f'fit_capacity: nstep and batch must be positive, got {nstep}, {batch}')
  if margin < 1 or extra < 0:
    raise ValueError(f'fit_capacity: margin must be >= 1 and extra >= 0, got {margin}, {extra}')
  d = make_data(m) if d is None else d
  if d.qpos.ndim == 1:
    d = jax.tree.map(lambda x: jnp.broadcast_to(x, (batch,) + jnp.shape(x)), d)
  batch = d.qpos.shape[0]
  if ctrl is not None:
    if np.shape(ctrl) != (nstep, batch, m.nu):
      raise ValueError(f'fit_capacity: ctrl has shape {np.shape(ctrl)}, expected (nstep, '
                       f'batch, nu) = {(nstep, batch, m.nu)}')
    ctrl = jnp.asarray(ctrl, d.qpos.dtype)
  peak, raised = _probe_jit(m, d, ctrl, jax.random.PRNGKey(seed), nstep)
  (ncon, nefc), (full_con, full_efc) = np.asarray(peak).tolist(), np.asarray(raised).tolist()
  # mjWARN_CONTACTFULL also counts geom pairs past npairmax cut from the narrowphase: those
  # clip no count here (the fit keeps npairmax), a full contact buffer does
  if (full_con and ncon >= m.nconmax) or full_efc:
    raise CapacityError(
        f'fit_capacity: the probe filled the capacities it measures (nconmax={m.nconmax}, '
        f'nefc_max={m.nefc_max}; mjWARN_CONTACTFULL {full_con}, mjWARN_CNSTRFULL {full_efc}), '
        'so its peak counts are clipped: probe a Model at the default capacities (put_model '
        'or from_xml_path without nconmax and njmax, and no <size nconmax/njmax> in its '
        'MJCF)')
  nconmax = fitted(ncon, m.nconmax, margin, extra)
  # at most the rows the fitted contact slots can produce, with the model's other rows
  njmax = fitted(nefc, min(rows_needed(m, nconmax), m.nefc_max), margin, extra)
  return Capacity(nconmax, njmax, m.npairmax, ncon, nefc, batch * nstep, full_con)


__all__ = ['fit_capacity', 'with_capacity', 'Capacity', 'CapacityError', 'fold_peaks']
