"""The constraint solver: MuJoCo 3.3.3's mj_fwdConstraint with its primal solvers (mj_solNewton,
mj_solCG; engine_solver.c / engine_forward.c) for one world, in fixed-capacity buffers; the
dual solvers (PGS, noslip) are in mjx_py.dual and are dispatched from here.

solve(m, d) -> d
  reads  qM (nv, nv), qfrc_smooth, qacc_smooth, qacc_warmstart (nv,); the efc_* rows of
         mjx_py.constraint (efc_type, efc_J, efc_aref, efc_D, efc_R, efc_frictionloss, nefc);
         contact.efc_address, dim, mu, friction (elliptic cones)
  writes qacc, qfrc_constraint, qacc_warmstart (= the main solver's qacc, as mj_fwdConstraint)
         (nv,); efc_b = J qacc_smooth - aref (nefc_max,); contact.H
         (nconmax, 36): the cone Hessians of the contacts in the cone's middle zone (row-major
         dim x dim, zero elsewhere); efc_force, efc_state (nefc_max,); solver_niter,
         solver_improvement, solver_gradient ()
solve_info(m, d) -> (d, Solution)
  the same, with efc_force, efc_state and the statistics returned alongside (``Solution``)

The problem (MuJoCo's primal formulation). With jar = J qacc - aref per row and D = 1 / R,
  cost(qacc) = 0.5 (qacc - qacc_smooth)' M (qacc - qacc_smooth) + sum of the rows' costs s(jar):
  equality rows          0.5 D jar^2                                   (state QUADRATIC)
  friction-loss rows     0.5 D jar^2 for |jar| < R f, else f |jar| - 0.5 R f^2
                                                    (QUADRATIC, LINEARNEG, LINEARPOS)
  limits, frictionless and pyramidal contact rows
                         0.5 D jar^2 for jar < 0, else 0               (QUADRATIC, SATISFIED)
  elliptic contacts      per contact, on U = (mu jar_0, friction_j jar_j): with N = U_0 and
                         T = |U_1..|: 0 in the top zone (N >= mu T), the rows' 0.5 D jar^2 in
                         the bottom zone (mu N + T <= 0), otherwise (CONE)
                         0.5 D_0 / (mu^2 (1 + mu^2)) (N - mu T)^2
and efc_force = -ds/djar (the rows' constraint forces), qfrc_constraint = J' efc_force.

Iterations (at most opt.iterations of them): a line search along ``search`` (MuJoCo's CGsearch:
a Newton step on the 1-D piecewise-quadratic cost, a one-sided Newton search, then a bracketed
search over the two brackets' Newton points and their midpoint, at most ls_iterations + 3
evaluations of the 1-D cost; one evaluation per loop step, as a state machine of masked
selects), the move, the constraint update and the new gradient grad = M qacc - qfrc_smooth - J'
force; Newton preconditions with the Hessian H = M + J' diag(D of the QUADRATIC rows) J + the
middle-zone cone blocks J_c' H_c J_c (H_c from mj_constraintUpdate), solved densely each
iteration (mjx_py.linalg.solve_direct: for batches of 32 or more Gaussian elimination on [H |
grad] in loops that narrow the rows and columns left to eliminate, its multipliers taken from
the pivot rows since H is symmetric, and back substitution, for smaller ones Gauss-Jordan;
MuJoCo updates its Cholesky factor incrementally, which gives the same direction up to
rounding); CG preconditions with M^-1 and updates the direction with Polak-Ribiere (beta clamped
at 0). Termination as MuJoCo: the line search returns 0, or the scaled improvement or gradient
(scale = 1 / (meaninertia max(1, nv))) falls below opt.tolerance. Warm start: qacc_warmstart
unless the warmstart flag is disabled or its total cost exceeds the constraint cost at
qacc_smooth (whose Gauss cost is 0).

float32. MuJoCo's defaults (tolerance 1e-8, ls_tolerance 0.01) are float64 settings: in float32
the scaled improvement and the line's slope cannot get that small except by stagnation, so the
line search would spend all its ls_iterations evaluations on rounding noise, and the iterations
would stop only when the cost stops changing. In float32 the solver therefore raises tolerance
to at least F32_TOLERANCE = 1e-5 and ls_tolerance to at least F32_LS_TOLERANCE = 0.1. Measured on
20 humanoid states (float32 against MuJoCo's float64 qacc): the largest relative qacc error was
1.81e-5 with the raw defaults and with the floors; the line-search evaluations per solve fell
from 64-191 to 5-20. A few worlds still end their line search only at ls_iterations (50 by
default): in their bracketed phase the slope's rounding noise stays above the tolerance, and
the batch runs those worlds' steps. In float32, ls_iterations is therefore capped at
F32_LS_ITERATIONS = 12. Measured on 1024 humanoid states (float32 against MuJoCo's float64
qacc from the same states): the error distribution is the same with caps of 8, 12, 20 and 50
(max 2.4e-3, median 2.2e-4 relative; float32 rounding amplified by stiff contacts), and the
batch's step time fell by about a third; a cap of 5 breaks it (max error 58).
float64 uses the options as given.

Batches. A world that has converged keeps its state (a mask), and the batch stays in lockstep.
Both loops (the iterations and each line search) are lax.while_loops that end when no world of
the batch needs another step (every world has converged, or finished its line search), at
opt.iterations (ls_iterations + 4) steps at most. A plain vmap of a per-world loop would turn
the loop's condition into a batched predicate and every step's work into selects; so the
per-world iteration function is a jax.custom_batching.custom_vmap (mjx_py.batching.per_world)
whose batching rule runs the whole batch (nested vmaps flattened into one batch) through the
batched loops, with the conditions reduced over the batch. A batch then costs the iterations of
its slowest world, as MuJoCo's cost is its own iterations'.

While loops, not fixed-count scans (DESIGN rule 5 asks for fixed-count scans in differentiable
paths): the iterations carry no derivative (they run on stop_gradient inputs; the gradients are
the implicit ones below), so reverse mode never meets these loops. Until this round the loops
were fixed-count lax.scans of opt.iterations + 1 and ls_iterations + 4 steps whose steps a
lax.cond skipped once the batch had converged; each skipped step still cost the scan's
per-step work (the carry's copies and the cond), about a hundred per solve. Measured (rollouts,
float32, 2-core CPU, against those scans; identical results): hopper (RK4, four solves per
step) at batch 1 / 64 / 1024 from 1,892 / 14,023 / 20,353 to 5,158 / 17,353 / 22,710
env-steps/s, the ant at batch 1 from 1,370 to 2,422, the humanoid from 3,639-3,801 to
4,858-4,895 at batch 1 and about 3% faster at batch 1024.

Chunks (CPU). On CPU a batch larger than CPU_CHUNK = 64 worlds runs each iteration only on its
worlds still iterating: their indices are gathered (a fixed-size nonzero), the iteration runs on
chunks of 64 of them in a loop whose trip count is the number of chunks needed, and the results
are scattered back. Converged worlds then cost nothing, and one chunk's Hessians and solves
stay in cache. The iterates are the same (each world's arithmetic is unchanged). Measured on
the humanoid (20-step vmapped rollouts, 2 cores; worlds iterating per iteration at batch 1024:
about 1007, 790, 480, 160, 35, 5): batch 1024 went from 6,584 to 8,382 env-steps/s (chunks of
128: 8,031; 256: 7,277), batch 256 from 5,277 to 7,967, batch 128 from 5,900 to 7,021, and
batch 4096 ran 7,748 (chunks of 128: 6,893); at batch 64, chunks of 32 were slower (5,737-5,860
against 6,008-6,160 unchunked), so batches up to 64 run whole. Accelerators run the whole batch
(their throughput needs its width). What a chunk moves: each of its worlds' problem and carry
(gathered from the worlds' flattened entries, _take_worlds: XLA:CPU gathers a (1, n, m) slice
element by element, a flat row as one run), and J's first rows (_take_rows, from the batch's J
directly). The worlds whose rows fit the smallest row count k0 (the usual case) iterate in chunks
of their own, which take only the first k0 rows of J, of the problem's per-row arrays and of the
carry's (jar, forces, states), iterate on k0 rows and write back those rows (the rows past k0
are unused in those worlds and stay so); the other worlds follow in chunks over every row, each
gathering its bucket's rows of J in each use. The iterations are then compiled twice (at k0
rows and at N), about 1 s more of a chunked program's XLA compile (the humanoid's batch-512
step, three alternating rounds: a median of 11.1 against 10.2 s), for less data moved: by the
arrays' shapes, the humanoid's chunks gathered about 2,700 floats a world per iteration (M, the
problem's 262 rows, the carry) and wrote back about 900, against about 1,150 and 230 on its 40
rows. Measured (float32, one device, alternating calls in one process, iterates bit for bit the
same): the solve alone on 512 states from a rollout (median / fastest ratio) humanoid 0.927 /
0.955, ant 0.956 / 0.928, hopper 0.831 / 0.778; 20-step rollouts at batch 512 humanoid 0.942 /
0.952, hopper 0.957 / 0.989, ant 0.972 / 0.991 (and 1.014 / 1.078 in a noisier run). A chunk's
iteration keeps no select between the old and the new carry (its worlds all still iterate; its
padding is dropped when written back).
Until stop 59 a chunk gathered the largest bucket's rows from a copy of the batch's, and copied
the smaller bucket's leading rows out of them in each of the iteration's three row-work uses
(89 copies a solve at batch 512, 11% of its profiled time, against the profile's 2 now); the
solve alone on 512 humanoid states from a rollout (float32, one device, alternating calls in
one process, median ratio): 0.90-0.94 of the time, the iterates bit for bit the same (with
efc_b and qfrc_constraint's bucket products as multiply-sums, rows_product, in stop 59 too).

Rows. The efc buffers hold nefc_max = N rows (the most the model can produce at once); a world
uses its first nefc, the rest are unused. The iterations' row work (the Hessian's J' D J, J
search, every line-search evaluation, the constraint update and J' force) runs over all N unless
the batch fits a smaller size: constraint.row_buckets(N) are an eighth and a quarter of N (each
rounded up to a multiple of 8, at most N / 2) when N is every row the model can produce
(put_model's default), or one bucket of two thirds of N when the capacity was cut to the
model's use (fit_capacity, an njmax given; see constraint.CUT_BUCKET), and the row work runs
on the first k rows for the smallest bucket k that every world of the batch (on CPU: of each
chunk) fits, its results padded back to N. The unused rows add nothing, so every size gives the
same iterates up to summation order.
Only the row work is compiled at each size (_on_rows: a lax.switch per piece of row work on the
batch's bucket index), the iterations and the line search's control flow once: the carry keeps
all N rows. Until this round the whole iterations were compiled at each size (a lax.switch
around them): the humanoid's one-world step compiled in 17.2-20.7 instead of 19.8-21.9 s on a
slow day of this machine (HLO instructions after optimization 19,131 -> 16,094), which made
buckets down to 8 rows affordable (they used to be at least 32 rows): the hopper (buckets 8 and
16 of its 62 rows; none before) went from 102.3 to 89.1 us per world-step at batch 1024 (one
process, alternating calls, median of 15), unchanged at batch 64. The humanoid's row work on 40
or 72 rows is as before, its carry now at 262 rows and each CPU chunk gathering the 72-row
bucket's J: batch 64 and 1024 within 2-8% of the previous code (one process, alternating calls;
the fastest calls equal). History: with a single bucket of 72 rows the humanoid's batch-1024
solve took 91 ms instead of 263 ms on all rows, the step 247 instead of 397 ms; the eighth (40
rows) took it from 19,763 to 21,120 env-steps/s at batch 1024. Within the bucket, the Newton
Hessian's J' D J (the costliest row work, nv^2 per row) sums only the blocks of ROW_BLOCK rows
that hold the batch's rows in use (_hessian, _row_blocks; for any N of at least 2 ROW_BLOCK
rows, the last block clamped to end at row N when N is not a multiple: the hopper's 62 rows,
before it had buckets, went from a sum over all 62 rows to a block or two: its RK4 step, batch
512 on one core, 147.0 / 148.4 -> 145.5 / 135.8 us per world on a slow day of this machine,
float64 qacc within 2.2e-12). Each line-search evaluation forms the rows' cost polynomials from
jar, J search and D on the bucket's rows (_row_poly; the rows on the minor axis, so that a
batch's evaluations vectorize along them) rather than reading (3, N) tables prepared per
direction, so that the line's state has no per-bucket shape. A model that cannot produce
friction-loss rows (no dof or tendon frictionloss, or the frictionloss flag disabled; static)
carries floss as (0,), and the constraint update and the line's evaluations leave the
friction-loss pieces out.

Gradients (implicit differentiation at the optimum, active set frozen): the iterations run on
stop_gradient inputs. At the solution qacc* the residual G(qacc, theta) = M qacc - qfrc_smooth
- J' f(J qacc - aref) vanishes, where f is the force law of the final constraint states (the
frozen active set) and theta all the float inputs (M, qfrc_smooth, J, aref, D, R, f, mu,
friction). Its Jacobian in qacc is the Newton Hessian H above, so dqacc = -H^-1 dG/dtheta
dtheta. The output is qacc* with a custom JVP rule (_implicit) giving that derivative
(forward or reverse, any order of vmap); the rule factors H at qacc*, so a forward pass that
takes no derivative never does. efc_force gets the same
treatment through f, and qfrc_constraint = J' efc_force. No derivative flows through the
iterations or the line search.

Unused rows (efc_type -1) have no cost, zero force and efc_state -1. MuJoCo's islands
(enableflags island) change only the statistics and the order of the work, not the optimum;
they are not modelled.

PGS (opt.solver 0) and noslip (opt.noslip_iterations > 0) run mjx_py.dual's sweeps on efc_AR
and efc_b. PGS warm-starts from the primal forces at qacc_warmstart unless their dual cost is
positive (then from zero), as MuJoCo's warmstart; qacc = qacc_smooth + M^-1 J' efc_force. Its
gradients are the implicit ones above, with the active set of the primal constraint update at
PGS's qacc (the same optimum). Noslip runs after the main solver (qacc_warmstart keeps the main
solver's qacc) and replaces efc_force, qacc and qfrc_constraint; its change carries no
derivative (the gradients are the main solver's: noslip only removes the regularizer's slip from
the friction forces), and its statistics follow the main solver's in the Solution arrays
(length opt.iterations + opt.noslip_iterations), solver_niter counting both. In float32
noslip_tolerance is floored at F32_TOLERANCE like tolerance.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jax.ad_checkpoint import checkpoint_name

from . import dual, linalg
from .batching import per_world
from .constraint import model_row_buckets, row_bucket, rows_product
from .data import dual_rows
from .errors import NotSupportedError
from .math import MINVAL, nonzero_first
from .xla import full_precision

# float32 floors of opt.tolerance and opt.ls_tolerance (see the module docstring)
F32_TOLERANCE, F32_LS_TOLERANCE = 1e-5, 0.1
# float32 cap of opt.ls_iterations (see the module docstring)
F32_LS_ITERATIONS = 12
# worlds per chunk of a CPU batch's primal iterations (see the module docstring)
CPU_CHUNK = 64
# rows per step of the Newton Hessian's loop over the rows in use (see _hessian)
ROW_BLOCK = 8
# mjtConstraintState (and the sentinel of unused rows)
UNUSED, SATISFIED, QUADRATIC, LINEARNEG, LINEARPOS, CONE = -1, 0, 1, 2, 3, 4
# mjtSolver
PGS, CG, NEWTON = 0, 1, 2
# mjtConstraint
EQUALITY, FRICTION_DOF, FRICTION_TENDON, LIMIT_JOINT, LIMIT_TENDON = 0, 1, 2, 3, 4
CONTACT_FRICTIONLESS, CONTACT_PYRAMIDAL, CONTACT_ELLIPTIC = 5, 6, 7
ELLIPTIC = 1
DSBL_CONSTRAINT, DSBL_FRICTIONLOSS, DSBL_CONTACT, DSBL_WARMSTART = 1, 4, 16, 1 << 8
# row kinds of the cost (from efc_type)
_NONE, _EQ, _FRIC, _INEQ, _ELL = 0, 1, 2, 3, 4
# a 1-D line-search point: (alpha, cost, first derivative, second derivative)
_ALPHA, _COST, _D0, _D1 = 0, 1, 2, 3


class Solution(NamedTuple):
  """What the solver computes besides qacc / qfrc_constraint (MuJoCo's names).

  efc_force (nefc_max,) constraint forces; efc_state (nefc_max,) int32 mjtConstraintState (-1
  on unused rows); solver_niter () int32 iterations used; solver_improvement, solver_gradient,
  solver_lineslope (K,) the scaled cost improvement, gradient norm and final line slope of each
  iteration (0 after the last; PGS and noslip: improvement only); solver_nactive,
  solver_nchange, solver_neval (K,) int32 rows not satisfied, rows whose state changed,
  line-search evaluations; K = opt.iterations + opt.noslip_iterations (noslip's iterations
  follow the main solver's).
  """
  efc_force: jax.Array
  efc_state: jax.Array
  solver_niter: jax.Array
  solver_improvement: jax.Array
  solver_gradient: jax.Array
  solver_lineslope: jax.Array
  solver_nactive: jax.Array
  solver_nchange: jax.Array
  solver_neval: jax.Array


class _Problem(NamedTuple):
  """The solver's inputs for one world. Rows: N = nefc_max; cones: nc = nconmax contact slots
  of (up to) nr rows each, gathered from the rows (elliptic models only, else empty)."""
  M: jax.Array            # (nv, nv)
  qfrc_smooth: jax.Array  # (nv,)
  qacc_smooth: jax.Array  # (nv,)
  J: jax.Array            # (N, nv)
  aref: jax.Array         # (N,)
  D: jax.Array            # (N,)
  R: jax.Array            # (N,)
  floss: jax.Array        # (N,), or (0,) when the model has no friction-loss rows
  kind: jax.Array         # (N,) int32 row kind (_NONE, _EQ, _FRIC, _INEQ, _ELL)
  cone_row: jax.Array     # (nc, nr) int32 rows of each cone (clipped into [0, N))
  cone_on: jax.Array      # (nc, nr) bool: the row belongs to an elliptic cone
  cone_scale: jax.Array   # (nc, nr) (mu, friction_0, ..) on the cone's rows, 0 elsewhere
  mu: jax.Array           # (nc,)


# ---------------------------------------------------------------------------------------------
# Setup

# the name (jax.ad_checkpoint.checkpoint_name) of the solver's solution (qacc*, forces, active
# set) that a rematerialized step keeps (mjx_py.rollout's remat); outside jax.checkpoint it
# changes nothing
CHECKPOINT_NAME = 'mjx_py.solver'


def _cone_width(m) -> int:
  """Rows per elliptic cone that the model can produce (0: no elliptic cones)."""
  if m.opt.cone != ELLIPTIC or m.opt.disableflags & DSBL_CONTACT or not m.nconmax:
    return 0
  nr = m.efc_rows[3]
  return nr if nr > 1 else 0


def _has_friction_rows(m) -> bool:
  """Whether the model can produce friction-loss rows (static)."""
  return bool(m.efc_rows[1]) and not m.opt.disableflags & DSBL_FRICTIONLOSS


def _problem(m, d) -> _Problem:
  """The solver's inputs from Data (values as given: the caller decides on gradients)."""
  t = jnp.asarray(d.efc_type)
  kind = jnp.select(
      [t == EQUALITY, (t == FRICTION_DOF) | (t == FRICTION_TENDON),
       (t >= LIMIT_JOINT) & (t <= CONTACT_PYRAMIDAL), t == CONTACT_ELLIPTIC],
      [_EQ, _FRIC, _INEQ, _ELL], _NONE).astype(jnp.int32)
  n, dtype = t.shape[0], d.efc_D.dtype
  nr = _cone_width(m)
  if nr:
    c = d.contact
    c = dataclasses.replace(c, **{k: jnp.asarray(getattr(c, k))
                                  for k in ('efc_address', 'dim', 'mu', 'friction')})
    j = jnp.arange(nr)
    adr = c.efc_address
    first = jnp.clip(adr, 0, n - 1)
    # a contact is a cone when its first row is elliptic (condim 1 contacts are frictionless)
    cone = (adr >= 0) & (t[first] == CONTACT_ELLIPTIC)
    on = cone[:, None] & (j[None, :] < c.dim[:, None])
    rows = jnp.clip(adr[:, None] + j[None, :], 0, n - 1).astype(jnp.int32)
    fr = jnp.concatenate([c.mu[:, None], c.friction[:, :nr - 1]], axis=1)
    scale = jnp.where(on, fr, 0.0).astype(dtype)
    mu = jnp.where(cone, c.mu, 1.0).astype(dtype)
  else:
    rows = jnp.zeros((0, 1), jnp.int32)
    on = jnp.zeros((0, 1), bool)
    scale = jnp.zeros((0, 1), dtype)
    mu = jnp.zeros((0,), dtype)
  floss = d.efc_frictionloss
  if not _has_friction_rows(m):
    floss = jnp.zeros((0,), dtype)    # static: the friction-loss pieces are left out
  arrays = (d.qM, d.qfrc_smooth, d.qacc_smooth, d.efc_J, d.efc_aref, d.efc_D, d.efc_R, floss)
  return _Problem(*(jnp.asarray(x) for x in arrays), kind, rows, on, scale, mu)


# ---------------------------------------------------------------------------------------------
# Constraint update (mj_constraintUpdate): states, forces, cost, cone Hessians

class _Update(NamedTuple):
  force: jax.Array   # (N,)
  state: jax.Array   # (N,) int32
  cost: jax.Array    # () constraint cost (no Gauss term)
  Hc: jax.Array      # (nc, nr, nr) cone Hessians (zero outside the middle zone)


def _cone_u(p, jar):
  """Per cone: U = scale * jar on its rows (nc, nr), N = U_0, T = |U_1..| and T > 0."""
  U = jar[p.cone_row] * p.cone_scale
  tsq = jnp.sum(U[:, 1:] * U[:, 1:], axis=1)
  pos = tsq > 0
  T = jnp.where(pos, jnp.sqrt(jnp.where(pos, tsq, 1.0)), 0.0)
  return U, U[:, 0], T, pos


def _update(p: _Problem, jar, frozen=None, hessian=False) -> _Update:
  """States, forces and cost of jar (N,); with ``frozen`` (N,) states the force law of those
  states (the active set held fixed: used for the implicit gradients)."""
  D, R, fl, kind = p.D, p.R, p.floss, p.kind
  fric = fl.shape[0] > 0                  # static: friction-loss rows possible
  # the rows' own states (the elliptic rows' come from their cones below)
  state = jnp.where(kind == _EQ, QUADRATIC,
                    jnp.where(kind == _INEQ, jnp.where(jar >= 0, SATISFIED, QUADRATIC), UNUSED))
  if fric:
    fric_state = jnp.where(jar <= -R * fl, LINEARNEG, jnp.where(jar >= R * fl, LINEARPOS,
                                                                  QUADRATIC))
    state = jnp.where(kind == _FRIC, fric_state, state)
  nc = p.mu.shape[0]
  if nc:
    U, N, T, tpos = _cone_u(p, jar)
    mu = p.mu
    top = (N >= mu * T) | (~tpos & (N >= 0))
    bottom = (mu * N + T <= 0) | (~tpos & (N < 0))
    zone = jnp.where(top, SATISFIED, jnp.where(bottom, QUADRATIC, CONE))
    # scatter the cones' zones to their rows (rows outside the cones are dropped)
    dest = jnp.where(p.cone_on, p.cone_row, kind.shape[0])
    state = state.at[dest].set(jnp.broadcast_to(zone[:, None], dest.shape), mode='drop')
  state = state.astype(jnp.int32)
  if frozen is not None:
    state = frozen
  state = lax.stop_gradient(state)

  quad = -D * jar
  force = jnp.where(state == QUADRATIC, quad, 0.0)
  row_cost = jnp.where(state == QUADRATIC, 0.5 * D * jar * jar, 0.0)
  if fric:
    # the friction-loss rows' linear pieces (states disjoint from QUADRATIC)
    force = jnp.where(state == LINEARNEG, fl, jnp.where(state == LINEARPOS, -fl, force))
    row_cost = jnp.where(state == LINEARNEG, -0.5 * R * fl * fl - fl * jar,
                         jnp.where(state == LINEARPOS, -0.5 * R * fl * fl + fl * jar, row_cost))
  cost = jnp.sum(row_cost)
  Hc = jnp.zeros((nc,) + p.cone_row.shape[1:] * 2, jar.dtype)
  if nc:
    middle = (state[p.cone_row[:, 0]] == CONE) & p.cone_on[:, 0]
    # middle zone: cost 0.5 Dm (N - mu T)^2, force -dcost/djar; unused branches at safe T
    Ts = jnp.where(middle, T, 1.0)
    Dm = D[p.cone_row[:, 0]] / (mu * mu * (1 + mu * mu))
    nmt = N - mu * T
    cost = cost + jnp.sum(jnp.where(middle, 0.5 * Dm * nmt * nmt, 0.0))
    f0 = -Dm * nmt * mu
    fj = -(f0 / Ts)[:, None] * U[:, 1:] * p.cone_scale[:, 1:]
    fcone = jnp.concatenate([f0[:, None], fj], axis=1)
    dest = jnp.where(p.cone_on & middle[:, None], p.cone_row, kind.shape[0])
    force = force.at[dest].set(fcone, mode='drop')
    if hessian:
      # H_c = Dm S [[1, -mu u'/T], [-mu u/T, mu N/T^3 u u' + (mu^2 - mu N/T) I]] S, u = U_1..,
      # S = diag(scale) (zero on the padding rows, so the padding's identity entries vanish)
      u = U[:, 1:]
      nr = U.shape[1]
      top_row = jnp.concatenate([jnp.ones((nc, 1), jar.dtype), -(mu / Ts)[:, None] * u], 1)
      block = ((mu * N / (Ts * Ts * Ts))[:, None, None] * u[:, :, None] * u[:, None, :]
               + (mu * mu - mu * N / Ts)[:, None, None] * jnp.eye(nr - 1, dtype=jar.dtype))
      raw = jnp.concatenate([top_row[:, None, :], jnp.concatenate(
          [top_row[:, 1:, None], block], axis=2)], axis=1)
      s = p.cone_scale
      Hc = jnp.where(middle[:, None, None],
                     Dm[:, None, None] * s[:, :, None] * raw * s[:, None, :], 0.0)
  return _Update(force, state, cost, Hc)


def _hessian(p: _Problem, up: _Update, nblock=None, single=False):
  """H = M + J' diag(D on QUADRATIC rows) J + sum over middle-zone cones J_c' H_c J_c.

  nblock: with it (an int32 scalar, the same for every world of a batch: the loop index stays
  unbatched, so its slices stay slices), only the first nblock * ROW_BLOCK rows are summed, a
  block of ROW_BLOCK rows per loop step (the last clamped to end at row N). The rows beyond a
  world's row count add nothing, and the rows in use are usually far fewer than the buffer's: on
  the humanoid the iterations run on 40 or 72 rows (the row buckets) while the worlds use 6-9 on
  average and at most about 30-40, and a batch of 64 needs 3-4 blocks. Measured (humanoid
  rollouts, 2-core CPU, against the sum over all rows, with a single bucket of 72 rows): batch 64
  9,535 -> 10,844 env-steps/s, batch 1024 12,539 -> 13,102; blocks of 4 and 16 rows were slower
  than 8.

  single (static): the batch is one world. A block's rows are then added one by one instead of
  by a reduction, which XLA:CPU runs as a library kernel (YNNPACK) that keeps the block loop
  from being compiled into one kernel under mjx_py.xla.set_cpu_flags (measured, humanoid,
  float32, one process, median of 9: batch-1 rollouts 6,830 -> 7,147 env-steps/s). Batched,
  the reduction is faster (the adds: batch 64 15,808 -> 14,751, batch 1024 21,256 -> 20,358)."""
  dq = jnp.where(up.state == QUADRATIC, p.D, 0.0)

  def rows(J, dq):
    # J' diag(dq) J as a broadcast product summed over the rows: one fused reduction, where a
    # batched (nv, N) x (N, nv) dot runs as many small matrix kernels (about 1.8x slower on
    # CPU for the humanoid at batch 1024)
    outer = (J * dq[:, None])[:, :, None] * J[:, None, :]
    if not single or J.shape[0] > ROW_BLOCK:
      return jnp.sum(outer, axis=0)
    H = outer[0]
    for r in range(1, J.shape[0]):
      H = H + outer[r]
    return H

  if nblock is None:
    H = p.M + rows(p.J, dq)
  else:
    n = dq.shape[0]

    def block(b, H):
      # rows start .. start + ROW_BLOCK; when N is not a multiple of ROW_BLOCK the last block
      # is clamped to end at row N, and its rows below start (summed by the previous block)
      # get no weight
      start = b * ROW_BLOCK
      first = jnp.minimum(start, n - ROW_BLOCK)
      mine = first + jnp.arange(ROW_BLOCK) >= start
      return H + rows(lax.dynamic_slice_in_dim(p.J, first, ROW_BLOCK),
                      jnp.where(mine, lax.dynamic_slice_in_dim(dq, first, ROW_BLOCK), 0.0))
    H = lax.fori_loop(0, nblock, block, p.M)
  if p.mu.shape[0]:
    Jc = p.J[p.cone_row] * p.cone_on[:, :, None]
    H = H + jnp.einsum('cjn,cjk,ckm->nm', Jc, up.Hc, Jc)
  return H


# ---------------------------------------------------------------------------------------------
# Line search (CGprepare, CGeval, CGsearch)

class _Line(NamedTuple):
  """The 1-D cost along qacc + alpha search, prepared once per search direction: the Gauss
  polynomial, the rows' jar and Jv (N,) (their polynomials are formed in each evaluation, on the
  row bucket's rows, see _row_poly) and the cones' quantities."""
  gauss: jax.Array     # (3,) Gauss cost polynomial (constant, linear, quadratic coefficient)
  jar: jax.Array       # (N,)
  Jv: jax.Array        # (N,)
  cone: jax.Array      # (6, nc): U0, V0, UU, UV, VV, Dm
  cone_quad: jax.Array  # (3, nc): the sum of the cone's rows' polynomials (bottom zone)


def _quad(jar, Jv, D):
  """The rows' quadratic cost polynomials 0.5 D (jar + alpha Jv)^2: (3,) + jar.shape, the
  coefficients (constant, linear, quadratic) leading."""
  DJ = D * jar
  return jnp.stack([0.5 * jar * DJ, Jv * DJ, 0.5 * Jv * D * Jv])


def _prepare(p: _Problem, jar, Jv, Ma, Mv, search, gauss_cost) -> _Line:
  gauss = jnp.stack([gauss_cost, search @ Ma - p.qfrc_smooth @ search, 0.5 * search @ Mv])
  nc = p.mu.shape[0]
  if nc:
    rows = p.cone_row
    U = jar[rows] * p.cone_scale
    V = Jv[rows] * p.cone_scale
    mu = p.mu
    cone = jnp.stack([U[:, 0], V[:, 0], jnp.sum(U[:, 1:] ** 2, 1), jnp.sum(U[:, 1:] * V[:, 1:], 1),
                      jnp.sum(V[:, 1:] ** 2, 1),
                      p.D[rows[:, 0]] / (mu * mu * (1 + mu * mu))])
    cone_quad = jnp.sum(_quad(jar[rows], Jv[rows], p.D[rows]) * p.cone_on, axis=2)
  else:
    cone = jnp.zeros((6, 0), jar.dtype)
    cone_quad = jnp.zeros((3, 0), jar.dtype)
  return _Line(gauss, jar, Jv, cone, cone_quad)


def _row_poly(k: int, p: _Problem, ln: _Line, alpha):
  """The sum over the first k rows of each row's cost polynomial at alpha (3,): equality rows,
  friction-loss rows inside (-R f, R f) and active inequalities on their quadratic, friction
  loss outside on its linear pieces (elliptic rows: their cones, in _eval)."""
  jar, Jv, D, kind = ln.jar[:k], ln.Jv[:k], p.D[:k], p.kind[:k]
  x = jar + alpha * Jv
  quad = _quad(jar, Jv, D)
  on_quad = (kind == _EQ) | ((kind == _INEQ) & (x < 0))
  if p.floss.shape[0]:
    f = p.floss[:k]
    Rf = p.R[:k] * f
    fric = kind == _FRIC
    on_quad = on_quad | (fric & (-Rf < x) & (x < Rf))
    neg = fric & (x <= -Rf)
    pos = fric & (x >= Rf) & ~neg
    zero = jnp.zeros_like(f)
    lin_neg = jnp.stack([f * (-0.5 * Rf - jar), -f * Jv, zero])
    lin_pos = jnp.stack([f * (-0.5 * Rf + jar), f * Jv, zero])
    # each row contributes one of its three polynomials (the zones are disjoint): one select
    # and one reduction (a fused loop; three mask-matrix products cost three passes and,
    # batched, run as small dot kernels)
    piece = jnp.where(on_quad, quad, jnp.where(neg, lin_neg, jnp.where(pos, lin_pos, 0.0)))
  else:
    piece = jnp.where(on_quad, quad, 0.0)
  return jnp.sum(piece, axis=1)


def _eval(p: _Problem, ln: _Line, alpha, rows):
  """The 1-D cost and its first two derivatives at alpha (CGeval): a point (4,). rows: the
  rows' polynomial at alpha (3,) (_row_poly, on the row bucket)."""
  total = ln.gauss + rows
  cost = d0 = d1 = jnp.zeros((), alpha.dtype)
  if p.mu.shape[0]:
    U0, V0, UU, UV, VV, Dm = ln.cone
    on = p.cone_on[:, 0]
    mu = p.mu
    N = U0 + alpha * V0
    tsq = UU + alpha * (2 * UV + alpha * VV)
    tpos = tsq > 0
    T = jnp.sqrt(jnp.where(tpos, tsq, 1.0))
    top = jnp.where(tpos, N >= mu * T, N >= 0)
    bottom = on & ~top & jnp.where(tpos, mu * N + T <= 0, True)
    middle = on & ~top & ~bottom
    total = total + jnp.sum(jnp.where(bottom, ln.cone_quad, 0.0), axis=1)
    T1 = (UV + alpha * VV) / T
    T2 = VV / T - (UV + alpha * VV) * T1 / (T * T)
    nmt = N - mu * T
    g = V0 - mu * T1
    cost = jnp.sum(jnp.where(middle, 0.5 * Dm * nmt * nmt, 0.0))
    d0 = jnp.sum(jnp.where(middle, Dm * nmt * g, 0.0))
    d1 = jnp.sum(jnp.where(middle, Dm * (g * g + nmt * (-mu * T2)), 0.0))
  cost = cost + alpha * alpha * total[2] + alpha * total[1] + total[0]
  d0 = d0 + 2 * alpha * total[2] + total[1]
  d1 = d1 + 2 * total[2]
  d1 = jnp.where(d1 <= 0, MINVAL, d1)   # not convex: SHOULD NOT OCCUR (MuJoCo warns)
  return jnp.stack([alpha, cost, d0, d1])


def _newton_alpha(pt):
  return pt[_ALPHA] - pt[_D0] / pt[_D1]


def _update_bracket(pts, cands):
  """updateBracket for several bracket points at once: each point p of ``pts`` (k, 4) moves
  to each candidate of ``cands`` (c, 4) whose derivative has p's sign and is smaller in
  magnitude, in order; returns (points (k, 4), moved (k,)).

  The sequence never changes p's sign, so it ends at the same-signed candidate of smallest
  |derivative| when that is below p's own (the first such on ties, as the strict comparisons
  keep the earlier point): an argmin over (p, candidates) with the other candidates masked
  out, one program operation instead of a chain of selects per candidate."""
  d0 = pts[:, _D0][:, None]                                    # (k, 1)
  c0 = cands[:, _D0][None, :]                                  # (1, c)
  same = ((d0 < 0) & (c0 < 0)) | ((d0 > 0) & (c0 > 0))
  key = jnp.concatenate([jnp.abs(d0), jnp.where(same, jnp.abs(c0), jnp.inf)], axis=1)
  idx = jnp.argmin(key, axis=1)                                # 0: p stays (NaN: stays)
  both = jnp.concatenate([pts[:, None, :], jnp.broadcast_to(cands, (pts.shape[0],)
                                                            + cands.shape)], axis=1)
  return jnp.take_along_axis(both, idx[:, None, None], axis=1)[:, 0], idx > 0


# line-search phases: what the point evaluated in this step is; _STOP: the search has ended
# (returned, or ran out of evaluations), its state no longer changes
_P0, _P1, _OS, _P1NEXT, _MID, _U1, _U2, _STOP = 0, 1, 2, 3, 4, 5, 6, 7


class _Config(NamedTuple):
  """The static settings of the iterations (from m.opt; sizes: the row counts the row work is
  compiled at, row_buckets(N) and N, ascending)."""
  newton: bool
  iterations: int
  ls_iterations: int
  warmstart: bool
  sizes: tuple


class _Params(NamedTuple):
  """The traced settings of one world (scalars, no gradient): opt.tolerance, opt.ls_tolerance
  and scale = 1 / (meaninertia max(1, nv))."""
  tol: jax.Array
  ls_tol: jax.Array
  scale: jax.Array


def _ls_init(ln: _Line, snorm, prm: _Params, frozen):
  """The line search's state before its first evaluation (CGsearch's setup); a frozen world
  (converged, or a chunk's padding) starts done."""
  dtype = ln.jar.dtype
  zero4 = jnp.zeros((4,), dtype)
  done = (snorm < MINVAL) | frozen          # search vector too small: alpha 0
  return dict(phase=jnp.where(done, _STOP, _P0).astype(jnp.int32), nxt=jnp.zeros((), dtype),
              p0=zero4, p1=zero4, p2=zero4, p1n=zero4, p2n=zero4, pmid=zero4, done=done,
              alpha=jnp.zeros((), dtype), slope=jnp.ones((), dtype), neval=jnp.int32(0),
              dir=jnp.ones((), dtype), p2upd=jnp.zeros((), bool), pend2=jnp.zeros((), bool),
              gtol=prm.tol * prm.ls_tol * snorm / prm.scale,
              slopescl=prm.scale / jnp.where(snorm > 0, snorm, 1.0))


def _ls_step(ls_iter: int, limit: int, p: _Problem, ln: _Line, s, rows):
  """One evaluation of MuJoCo's CGsearch and its control flow up to the next evaluation (or
  the return), as masked selects. ``s`` is the state of _ls_init, ``rows`` the rows'
  polynomial at s['nxt'] (_row_poly).

  A stopped search (phase _STOP) keeps its state: every update below is keyed to a phase of
  the search (so no per-field select is needed when a batch steps worlds that have stopped).
  The search stops when it returns or after ``limit`` evaluations."""
  dtype = ln.jar.dtype
  gtol, slopescl = s['gtol'], s['slopescl']
  e = _eval(p, ln, s['nxt'], rows)
  ph = s['phase']
  neval = s['neval'] + (ph != _STOP)
  p0 = jnp.where(ph == _P0, e, s['p0'])
  p1 = jnp.where(ph == _P1, jnp.where(p0[_COST] < e[_COST], p0, e),
                 jnp.where(ph == _OS, e, s['p1']))
  p1n = jnp.where((ph == _P1NEXT) | (ph == _U1), e, s['p1n'])
  p2n = jnp.where(ph == _U2, e, s['p2n'])
  pmid = jnp.where(ph == _MID, e, s['pmid'])
  p2, p2upd = s['p2'], s['p2upd']
  slope1 = jnp.abs(p1[_D0]) * slopescl

  # after the first Newton step and each one-sided step: converged, or the one-sided check
  newt = (ph == _P1) | (ph == _OS)
  conv1 = newt & (jnp.abs(p1[_D0]) < gtol)
  direc = jnp.where(ph == _P1, jnp.where(p1[_D0] < 0, 1.0, -1.0).astype(dtype), s['dir'])
  check = newt & ~conv1
  go = check & (p1[_D0] * direc <= -gtol) & (neval < ls_iter)
  p2 = jnp.where(go, p1, p2)
  p2upd = p2upd | go
  stop = check & ~go
  stop_done = stop & ((neval >= ls_iter) | ~p2upd)    # could not bracket / no p2 update
  to_p1next = stop & ~stop_done
  p2n = jnp.where(to_p1next, p1, p2n)

  # after the midpoint: a converged candidate (lowest cost), else the bracket updates
  cands = jnp.stack([p1n, p2n, pmid])
  is_mid = ph == _MID
  # the converged candidate of lowest cost (the first on ties)
  conv = jnp.abs(cands[:, _D0]) < gtol
  best = jnp.any(conv)
  best_pt = cands[jnp.argmin(jnp.where(conv, cands[:, _COST], jnp.inf))]
  mid_conv = is_mid & best
  upd = is_mid & ~best
  (q1, q2), (b1, b2) = _update_bracket(jnp.stack([p1, p2]), cands)
  p1 = jnp.where(upd, q1, p1)
  p2 = jnp.where(upd, q2, p2)
  mid_none = upd & ~b1 & ~b2                         # no update possible: the midpoint
  to_u1 = upd & b1
  to_u2 = (upd & ~b1 & b2) | ((ph == _U1) & s['pend2'])
  pend2 = jnp.where(to_u1, b2, s['pend2'])

  # the bracketed loop's head: another midpoint, or the best bracket
  to_br = (ph == _P1NEXT) | ((ph == _U1) & ~s['pend2']) | (ph == _U2)
  br_go = to_br & (neval < ls_iter)
  final = to_br & ~br_go
  fin1 = (p1[_COST] <= p2[_COST]) & (p1[_COST] < p0[_COST])
  fin2 = ~fin1 & (p2[_COST] <= p1[_COST]) & (p2[_COST] < p0[_COST])
  fin_alpha = jnp.where(fin1, p1[_ALPHA], jnp.where(fin2, p2[_ALPHA], 0.0))
  fin_slope = jnp.where(fin1, jnp.abs(p1[_D0]), jnp.where(fin2, jnp.abs(p2[_D0]), 0.0))
  fin_slope = jnp.where(fin1 | fin2, fin_slope * slopescl, s['slope'])

  ends = [(conv1 | stop_done, p1[_ALPHA], slope1),
          (mid_conv, best_pt[_ALPHA], jnp.abs(best_pt[_D0]) * slopescl),
          (mid_none, pmid[_ALPHA], jnp.abs(pmid[_D0]) * slopescl),
          (final, fin_alpha, fin_slope)]
  done = s['done']
  alpha, slope = s['alpha'], s['slope']
  for flag, a, sl in ends:
    alpha = jnp.where(flag, a, alpha)
    slope = jnp.where(flag, sl, slope)
    done = done | flag
  first = ph == _P0
  nxt = jnp.select([first, go | to_p1next, to_u1, to_u2, br_go],
                   [_newton_alpha(p0), _newton_alpha(p1), _newton_alpha(p1), _newton_alpha(p2),
                    0.5 * (p1[_ALPHA] + p2[_ALPHA])], s['nxt'])
  phase = jnp.select([done | (neval >= limit), first, go, to_p1next, to_u1, to_u2, br_go],
                     [_STOP, _P1, _OS, _P1NEXT, _U1, _U2, _MID], ph).astype(jnp.int32)
  return dict(s, phase=phase, nxt=nxt, p0=p0, p1=p1, p2=p2, p1n=p1n, p2n=p2n, pmid=pmid,
              done=done, alpha=alpha, slope=slope, neval=neval, dir=direc, p2upd=p2upd,
              pend2=pend2)


def _ls_result(s):
  """(alpha, slope, neval) of a finished line search (the last Newton point if it ran out)."""
  alpha = jnp.where(s['done'], s['alpha'], s['p1'][_ALPHA])
  return alpha, s['slope'], s['neval']


def _select(flag, new, old):
  """Per world (flag (B,)): new where flag, else old, leaf by leaf (leading axis B)."""
  def one(a, b):
    return jnp.where(flag.reshape(flag.shape + (1,) * (a.ndim - 1)), a, b)
  return jax.tree_util.tree_map(one, new, old)


def _linesearch_batch(cfg: _Config, P: _Problem, LN: _Line, S, index):
  """CGsearch for a batch of worlds (leading axis B): one evaluation per step in the worlds
  still searching, in a loop that ends when no world searches (every path of CGsearch returns
  within ls_iterations + 3 evaluations, and a world stops at ls_iterations + 4). index: the
  row bucket (_on_rows)."""
  limit = cfg.ls_iterations + 4
  step = jax.vmap(lambda p, ln, s, r: _ls_step(cfg.ls_iterations, limit, p, ln, s, r))

  def body(S):
    rows = _on_rows(cfg.sizes, index, lambda k: jax.vmap(functools.partial(_row_poly, k))(
        P, LN, S['nxt']))
    return step(P, LN, S, rows)

  S = lax.while_loop(lambda S: jnp.any(S['phase'] != _STOP), body, S)
  return jax.vmap(_ls_result)(S)


# ---------------------------------------------------------------------------------------------
# Row buckets: the row work on the first k rows

def _world_rows(P: _Problem):
  """The rows in use in each world of the batch P (leading axis B): int32 (B,)."""
  return jnp.sum(P.kind != _NONE, axis=1, dtype=jnp.int32)


def _rows_used(P: _Problem):
  """The most rows in use in any world of the batch P (leading axis B): an int32 scalar."""
  return jnp.max(_world_rows(P))


def _row_index(sizes: tuple, P: _Problem):
  """The index into ``sizes`` of the smallest row count that every world of the batch P
  (leading axis B) fits: an int32 scalar, or None when there is one size."""
  if len(sizes) == 1:
    return None
  used = _rows_used(P)
  return sum((used > k).astype(jnp.int32) for k in sizes[:-1])


def _on_rows(sizes: tuple, index, fn):
  """fn(k) for the row count k = sizes[index] (fn batched, closing over its operands): a
  lax.switch on the batch's index, only fn compiled at each size."""
  if index is None:
    return fn(sizes[-1])
  return lax.switch(index, [functools.partial(fn, k) for k in sizes])


def _head(p: _Problem, k: int, Jk) -> _Problem:
  """One world's problem on its first k rows, Jk (k, nv) being J's (the rows in use come
  first, see mjx_py.constraint; the rows of every cone in use are below the row count, its
  other cone row indices are clipped into [0, k))."""
  if k == p.kind.shape[0]:
    return p._replace(J=Jk)
  return p._replace(J=Jk, aref=p.aref[:k], D=p.D[:k], R=p.R[:k], floss=p.floss[:k],
                    kind=p.kind[:k], cone_row=jnp.minimum(p.cone_row, k - 1))


def _pad(x, n: int, fill=0):
  """x (k,) padded to (n,) with ``fill`` (the unused rows' value)."""
  return jnp.pad(x, (0, n - x.shape[0]), constant_values=fill) if x.shape[0] < n else x


def _constrain(cfg: _Config, p: _Problem, jar):
  """The constraint update of jar (N,) on p's k rows (_head) padded to N as unused rows are
  (force 0, state UNUSED), and J' force (nv,): (update, J' force)."""
  k, n = p.kind.shape[0], jar.shape[0]
  up = _update(p, jar[:k], hessian=cfg.newton)
  Jtf = p.J.T @ up.force
  return up._replace(force=_pad(up.force, n), state=_pad(up.state, n, UNUSED)), Jtf


# ---------------------------------------------------------------------------------------------
# The iterations (mj_solCGNewton)

class _Carry(NamedTuple):
  qacc: jax.Array
  Ma: jax.Array
  jar: jax.Array
  up: _Update
  cost: jax.Array      # total cost (constraints + Gauss)
  gauss: jax.Array     # Gauss cost
  grad: jax.Array
  Mgrad: jax.Array
  search: jax.Array
  Hinv: jax.Array      # CG: M^-1 (nv, nv); Newton: (0, 0), its Hessian is factored in _direction
  done: jax.Array
  niter: jax.Array


def _warmstart(cfg: _Config, p: _Problem, warm, empty):
  """The point to start from and its constraint update: (qacc, jar = J qacc - aref (k,),
  update of jar). qacc is qacc_warmstart unless its cost exceeds qacc_smooth's (MuJoCo's
  warmstart; disabled: qacc_smooth); qacc_smooth when there are no rows. Step 0 of the
  iterations takes the update from here instead of computing it a second time."""
  if not cfg.warmstart:
    jar = p.J @ p.qacc_smooth - p.aref
    return p.qacc_smooth, jar, _update(p, jar, hessian=cfg.newton)
  # the constraint updates at both points in one (vmapped) update; two matrix-vector products
  # (a (2, nv) x (nv, N) product ran as a slow small-matrix kernel per world under vmap: 3.4 of
  # the humanoid's ~110 ms per step at batch 1024, against ~0.9 ms for the two products)
  jar = jnp.stack([p.J @ warm, p.J @ p.qacc_smooth]) - p.aref
  ups = jax.vmap(lambda x: _update(p, x, hessian=cfg.newton))(jar)
  cost_warm = ups.cost[0] + 0.5 * (p.M @ warm - p.qfrc_smooth) @ (warm - p.qacc_smooth)
  smooth = (cost_warm > ups.cost[1]) | empty
  pick = functools.partial(jax.tree_util.tree_map, lambda x: jnp.where(smooth, x[1], x[0]))
  return jnp.where(smooth, p.qacc_smooth, warm), pick(jar), pick(ups)


def _init(cfg: _Config, n: int, p: _Problem, warm, empty):
  """The carry of one world before step 0 (which assesses the start point), and the start
  point's constraint update and J' force, as _constrain gives them: (carry, update, J' force).
  p on the row bucket's k rows (_head), the carry's rows padded to n."""
  nv = p.J.shape[1]
  nc, nr = p.cone_row.shape
  dtype = p.M.dtype
  qacc, jar, up = _warmstart(cfg, p, warm, empty)
  zv = jnp.zeros((nv,), dtype)
  blank = _Update(jnp.zeros((n,), dtype), jnp.full((n,), UNUSED, jnp.int32),
                  jnp.zeros((), dtype), jnp.zeros((nc, nr, nr), dtype))
  Hinv = jnp.zeros((0, 0), dtype) if cfg.newton else linalg.inverse(p.M)
  carry = _Carry(qacc, p.M @ qacc, _pad(jar, n), blank, jnp.zeros((), dtype),
                 jnp.zeros((), dtype), zv, zv, zv, Hinv, empty, jnp.zeros((), jnp.int32))
  Jtf = p.J.T @ up.force
  return carry, up._replace(force=_pad(up.force, n), state=_pad(up.state, n, UNUSED)), Jtf


def _prepare_search(p: _Problem, c: _Carry, Jv):
  """The search direction's products and 1-D polynomials: (snorm, Mv, Jv, line); Jv = J
  search (N,)."""
  search = c.search
  Mv = p.M @ search
  return jnp.sqrt(search @ search), Mv, Jv, _prepare(p, c.jar, Jv, c.Ma, Mv, search, c.gauss)


def _move(cfg: _Config, p: _Problem, prm: _Params, c: _Carry, first, alpha, slope, neval, Mv,
          jar, up, Jtf):
  """The move by alpha along the search direction to jar = c.jar + alpha J search, with the
  constraint update ``up`` and J' force ``Jtf`` there (_constrain), and the gradient (one
  world); CG also preconditions and sets its next direction (Newton: _direction, at the start
  of the next iteration): (carry, stats)."""
  dtype = p.M.dtype
  moved = (alpha != 0) | first
  qacc = c.qacc + alpha * c.search
  Ma = c.Ma + alpha * Mv
  gauss = 0.5 * (Ma - p.qfrc_smooth) @ (qacc - p.qacc_smooth)
  cost = up.cost + gauss
  grad = Ma - p.qfrc_smooth - Jtf
  improvement = prm.scale * (c.cost - cost)
  gradient = prm.scale * jnp.sqrt(grad @ grad)
  converged = (improvement < prm.tol) | (gradient < prm.tol)
  if cfg.newton:
    Mgrad, new_search = c.Mgrad, c.search
  else:
    # Polak-Ribiere, reset when negative (the first direction: -Mgrad)
    Mgrad = c.Hinv @ grad
    beta = grad @ (Mgrad - c.Mgrad) / jnp.maximum(MINVAL, c.grad @ c.Mgrad)
    new_search = -Mgrad + jnp.where(first, 0.0, jnp.maximum(beta, 0.0)) * c.search
  new = _Carry(qacc, Ma, jar, up, cost, gauss, grad, Mgrad, new_search, c.Hinv,
               converged, c.niter + jnp.where(first, 0, 1).astype(jnp.int32))
  out = jax.tree_util.tree_map(lambda a, b: jnp.where(moved, a, b), new, c)
  out = out._replace(done=jnp.where(first, c.done, ~moved | converged))
  nactive = jnp.sum((up.state != SATISFIED) & (p.kind != _NONE), dtype=jnp.int32)
  nchange = jnp.sum(up.state != c.up.state, dtype=jnp.int32)
  keep = moved & jnp.logical_not(first)  # first: a Python bool or an array
  zero, izero = jnp.zeros((), dtype), jnp.zeros((), jnp.int32)
  stats = (jnp.where(keep, improvement, zero), jnp.where(keep, gradient, zero),
           jnp.where(keep, slope, zero), jnp.where(keep, nactive, izero),
           jnp.where(keep, nchange, izero), jnp.where(keep, neval, izero))
  return out, stats


def _direction(c: _Carry, H):
  """Newton's search direction at the carry's point (one world): -H^-1 grad, H (nv, nv) the
  Hessian of the carry's constraint update (MuJoCo computes it right after the move; it is
  computed here, at the start of the next iteration, so that a world that converged never
  factors it)."""
  Mgrad = linalg.solve_direct(H, c.grad, symmetric=True)
  return c._replace(Mgrad=Mgrad, search=-Mgrad)


def _row_blocks(P: _Problem):
  """The number of ROW_BLOCK-row blocks that hold every row in use in the batch P (leading
  axis B), or None when there are fewer than 2 ROW_BLOCK rows (then all are summed at once;
  a row count that is not a multiple of ROW_BLOCK ends in a clamped block, see _hessian)."""
  n = P.kind.shape[1]
  if n < 2 * ROW_BLOCK:
    return None
  used = _rows_used(P)
  return ((used + ROW_BLOCK - 1) // ROW_BLOCK).astype(jnp.int32)


def _lead_rows(J, k: int):
  """J[..., :k, :] for row blocks J (..., n, nv), sliced as (..., k nv) prefixes of the
  flattened rows: XLA:CPU copies those long contiguous runs about twice as fast as a (B, k, nv)
  slice with its short minor axis (humanoid buckets at batch 1024: 1.25 -> 0.66 ms)."""
  lead, nv = J.shape[:-2], J.shape[-1]
  return J.reshape(lead + (-1,))[..., :k * nv].reshape(lead + (k, nv))


def _take_worlds(x, take):
  """x[take] for a batch x (B, ...) and world indices take (c,), gathered from x's flattened
  worlds (B, size): XLA:CPU moves a world's entries as one contiguous run then, where a gather
  of (1, n, m) slices indexes every element (J's 72 rows of 27 for 64 of 512 humanoid worlds,
  float32, the gather alone: 92 against 38 us)."""
  if x.ndim < 3:
    return x[take]
  return x.reshape(x.shape[0], -1)[take].reshape(take.shape + x.shape[1:])


def _take_rows(J, take, k: int):
  """J[take, :k] (c, k, nv) for J (B, N, nv) and world indices take (c,): each world's first k
  rows gathered as one contiguous run of its flattened rows (see _take_worlds), without a copy
  of the batch's leading rows first."""
  B, n, nv = J.shape
  return J.reshape(B, n * nv)[take, :k * nv].reshape(take.shape[0], k, nv)


def _strip_rows(C: _Carry) -> _Carry:
  """The carry without its per-row fields (jar, the update's force and state: None)."""
  return C._replace(jar=None, up=C.up._replace(force=None, state=None))


def _take_carry(C: _Carry, take, k: int) -> _Carry:
  """The carry of worlds take (c,) from the batch's C (leading axis B), its per-row fields
  (jar, the update's force and state, (B, N)) cut to their first k rows: (c, k)."""
  rest = jax.tree_util.tree_map(lambda x: _take_worlds(x, take), _strip_rows(C))
  return rest._replace(jar=C.jar[take, :k], up=rest.up._replace(
      force=C.up.force[take, :k], state=C.up.state[take, :k]))


def _put_worlds(tree, ids, new):
  """tree (leaves with leading axis B) with worlds ids (c,) replaced by new's (leading axis c);
  ids past the batch (a chunk's padding) are dropped."""
  return jax.tree_util.tree_map(lambda a, b: a.at[ids].set(b, mode='drop'), tree, new)


def _put_carry(C: _Carry, ids, new: _Carry) -> _Carry:
  """C with worlds ids (c,) replaced by new (_put_worlds), whose per-row fields may hold only
  the first k rows (the rows past k keep C's)."""
  def rows(a, b):
    if b.shape[1] == a.shape[1]:
      return _put_worlds(a, ids, b)
    return a.at[ids, :b.shape[1]].set(b, mode='drop')
  rest = _put_worlds(_strip_rows(C), ids, _strip_rows(new))
  return rest._replace(jar=rows(C.jar, new.jar), up=rest.up._replace(
      force=rows(C.up.force, new.up.force), state=rows(C.up.state, new.up.state)))


def _iterate_batch(cfg: _Config, P: _Problem, warm, empty, prm: _Params):
  """The primal solver's iterations for a batch of worlds (every input has a leading axis B;
  stop_gradient inputs): (final carry, stats), the stats with shape (B, iterations).

  Step 0 assesses the start point: the move by 0 along the zero search direction of _init
  (the constraint update and gradient at qacc), for the whole batch at once. Then a
  lax.while_loop of at most opt.iterations steps, each (Newton) the search direction from the
  Hessian at the current point, then a line search and move followed by the constraint update
  and gradient at the new point (CG: and its preconditioning and next direction). A world that
  has converged keeps its carry (a mask); the loop ends when every world of the batch has
  converged, so a batch costs the iterations of its slowest world, and all worlds stay in
  lockstep (see the module docstring on why a while loop). Step 0 used to run as the loop's
  first step (Newton skipping its direction by a lax.cond, the CPU chunks gathering
  every world); outside the loop it is one batched update and the loop's steps have no cond:
  the humanoid's rollouts (float32, one process, median of 7) went from 21,494 to 21,772
  env-steps/s at batch 1024, 15,873 to 16,046 at batch 64 and 5,878 to 5,957 at batch 1,
  float64 steps bit-identical.

  The row work (the Hessian's J' D J, J search, each line-search evaluation, the constraint
  update and J' force) runs on the row bucket of the batch, or of each CPU chunk (_on_rows:
  the first k rows of cfg.sizes that every world fits); the carry keeps all N rows (those past
  the bucket are unused: jar, force 0, state UNUSED), so the iterations compile once and only
  the row work once per size; with CPU chunks, the chunks whose worlds fit the smallest size
  iterate on a carry and problem cut to those rows (see the module docstring), so there the
  iterations compile at that size and at N.
  """
  sizes = cfg.sizes
  n = P.kind.shape[1]
  B = empty.shape[0]
  dtype = P.M.dtype
  zeros = (jnp.zeros((B,), dtype),) * 3 + (jnp.zeros((B,), jnp.int32),) * 3
  chunk = _chunk_size(B)
  chunked = chunk < B
  # the whole batch's iterations: J's leading rows at each size, copied once per solve (the
  # products cannot read a strided operand)
  Js = None if chunked else tuple(_lead_rows(P.J, k) for k in sizes[:-1]) + (P.J,)

  def heads(P, jrows, k):
    return jax.vmap(lambda p, J: _head(p, k, J))(P, jrows(k))

  def move(P, prm, C, first, alpha, slope, neval, Mv, Jv, index, jrows, sizes=sizes):
    jar = C.jar + alpha[:, None] * Jv
    up, Jtf = _on_rows(sizes, index, lambda k: jax.vmap(functools.partial(_constrain, cfg))(
        heads(P, jrows, k), jar))
    return jax.vmap(functools.partial(_move, cfg), in_axes=(0, 0, 0, None) + (0,) * 7)(
        P, prm, C, first, alpha, slope, neval, Mv, jar, up, Jtf)

  def iteration(P, prm, C, frozen, index, jrows, keep=True, sizes=sizes):
    # sizes: the row counts of the row work; the problem's and carry's rows: P.kind.shape[1]
    n = P.kind.shape[1]
    if cfg.newton:
      nblock = _row_blocks(P)

      def hessian(k):
        up = C.up._replace(state=C.up.state[:, :k])
        nb = nblock if k >= 2 * ROW_BLOCK else None
        return jax.vmap(functools.partial(_hessian, single=B == 1), in_axes=(0, 0, None))(
            heads(P, jrows, k), up, nb)
      C = jax.vmap(_direction)(C, _on_rows(sizes, index, hessian))
    Jv = _on_rows(sizes, index, lambda k: jax.vmap(lambda J, s: _pad(J @ s, n))(
        jrows(k), C.search))
    snorm, Mv, Jv, LN = jax.vmap(_prepare_search)(P, C, Jv)
    S = jax.vmap(_ls_init)(LN, snorm, prm, frozen)
    alpha, slope, neval = _linesearch_batch(cfg._replace(sizes=sizes), P, LN, S, index)
    new, stats = move(P, prm, C, False, alpha, slope, neval, Mv, Jv, index, jrows, sizes)
    if not keep:
      # the frozen worlds are a CPU chunk's padding, which its write-back drops
      return new, stats
    zero = jax.tree_util.tree_map(lambda x: x[:frozen.shape[0]], zeros)
    return _select(frozen, C, new), _select(frozen, zero, stats)

  index = _row_index(sizes, P)

  def batch_rows(k):
    # whole-batch iterations share one copy of J's first k rows per solve; with CPU chunks
    # only the start point reads them, and the copy is made in the branch taken
    return _lead_rows(P.J, k) if chunked else Js[sizes.index(k)]

  C, up0, Jtf0 = _on_rows(sizes, index, lambda k: jax.vmap(functools.partial(_init, cfg, n))(
      heads(P, batch_rows, k), warm, empty))
  # step 0 assesses the start point: the move by 0 along the (zero) search direction, i.e. the
  # constraint update (_init's, from the warm-start choice) and gradient at qacc, for the whole
  # batch at once (no direction, no line search, no chunks); its statistics are zero
  C, _ = jax.vmap(functools.partial(_move, cfg), in_axes=(0, 0, 0, None) + (0,) * 7)(
      P, prm, C, True, zeros[0], jnp.ones((B,), dtype), zeros[3], jnp.zeros_like(C.search),
      C.jar, up0, Jtf0)

  if not chunked:
    def body(C, k):
      del k
      return iteration(P, prm, C, C.done, index, batch_rows)
  else:
    nslot = -(-B // chunk) * chunk
    # a chunk gathers J's first k0 rows (the smallest row count) directly from the batch's J
    # (_take_rows); a chunk whose worlds all fit k0 also takes only the first k0 rows of the
    # problem's and the carry's per-row arrays, and iterates on them (its row work at k0),
    # writing back those rows; the other chunks take every row and gather their bucket's rows
    # of J in each use (see the docstring)
    k0 = sizes[0]
    Pm = P._replace(J=P.J[:, :0])
    small = k0 < n
    if small:
      fits = _world_rows(P) <= k0
      P0 = jax.vmap(lambda p: _head(p, k0, p.J))(Pm)

    def chunks(C, stats, group, Pc, sizes_c):
      # the worlds of ``group`` (B,), in chunks of ``chunk``: gathered, iterated, scattered
      # back; Pc: the batch's problem without J, its rows cut to those the chunk takes
      order = nonzero_first(group, nslot, B)
      nchunk = (jnp.sum(group, dtype=jnp.int32) + chunk - 1) // chunk
      kc = Pc.kind.shape[1]

      def one_chunk(j, carry):
        C, stats = carry
        ids = lax.dynamic_slice_in_dim(order, j * chunk, chunk)
        take = jnp.minimum(ids, B - 1)
        Jm = _take_rows(P.J, take, sizes_c[0])
        part = jax.tree_util.tree_map(lambda x: _take_worlds(x, take), (Pc, prm))
        part = (part[0]._replace(J=Jm), part[1], _take_carry(C, take, kc))

        def chunk_rows(k):
          return Jm if k == sizes_c[0] else _take_rows(P.J, take, k)

        # the chunk's own row bucket (its worlds may fit a smaller one than the batch's)
        # its worlds are all still iterating: only its padding (ids B, dropped when written
        # back) is frozen, and needs no select of the kept carry
        new, st = iteration(*part, ids >= B, _row_index(sizes_c, part[0]), chunk_rows,
                            keep=False, sizes=sizes_c)
        return _put_carry(C, ids, new), _put_worlds(stats, ids, st)

      return lax.fori_loop(0, nchunk, one_chunk, (C, stats))

    def body(C, k):
      # the worlds still iterating: those that fit k0 in chunks on k0 rows, then the others
      del k
      active = ~C.done
      if not small:
        return chunks(C, zeros, active, Pm, sizes)
      C, stats = chunks(C, zeros, active & fits, P0, (k0,))
      return chunks(C, stats, active & ~fits, Pm, sizes[1:])

  def more(state):
    k, C, _ = state
    return (k <= cfg.iterations) & ~jnp.all(C.done)

  def step(state):
    # step k's statistics go to row k (rows of steps that do not run stay 0)
    k, C, stats = state
    C, st = body(C, k)
    stats = tuple(lax.dynamic_update_index_in_dim(a, x, k, 0) for a, x in zip(stats, st))
    return k + 1, C, stats

  stats = tuple(jnp.zeros((cfg.iterations + 1,) + z.shape, z.dtype) for z in zeros)
  _, C, stats = lax.while_loop(more, step, (jnp.int32(1), C, stats))
  return C, tuple(jnp.moveaxis(x[1:], 0, 1) for x in stats)


def _chunk_size(batch: int) -> int:
  """Worlds per chunk of the primal iterations (see _iterate_batch and the module docstring):
  CPU_CHUNK on CPU for batches larger than that, the whole batch otherwise (and on
  accelerators, whose throughput needs the batch's width)."""
  if jax.default_backend() == 'cpu' and batch > CPU_CHUNK:
    return CPU_CHUNK
  return batch


def _iterate_fn(cfg: _Config):
  """The primal iterations of one world, _iterate_batch underneath (see
  mjx_py.batching.per_world): a function (p, warm, empty, prm) -> (carry, stats)."""
  return per_world(lambda *args: _iterate_batch(cfg, *args))


# ---------------------------------------------------------------------------------------------
# Implicit gradients and the stage

def _residual(p: _Problem, qacc, state):
  """G(qacc) = M qacc - qfrc_smooth - J' f(J qacc - aref) with the force law of ``state``;
  returns (G, f)."""
  force = _update(p, p.J @ qacc - p.aref, frozen=state).force
  return p.M @ qacc - p.qfrc_smooth - p.J.T @ force, force


_INTS = ('kind', 'cone_row', 'cone_on')


def _split(p: _Problem):
  """(the float fields, the int and bool fields) of a _Problem, as two tuples."""
  return (tuple(x for k, x in p._asdict().items() if k not in _INTS),
          tuple(getattr(p, k) for k in _INTS))


def _join(floats, ints) -> _Problem:
  fields = iter(floats)
  return _Problem(**{k: (ints[_INTS.index(k)] if k in _INTS else next(fields))
                     for k in _Problem._fields})


@jax.custom_jvp
def _implicit(floats, ints, qstar, state):
  """qstar (nv,), carrying the implicit derivative of the optimum in the problem's float
  fields, the active set ``state`` (N,) held fixed: dqacc = -H^-1 dG (see the module
  docstring). The Hessian is factored only when a derivative is taken (in the rule below), so
  the forward pass pays nothing for it."""
  return qstar


@_implicit.defjvp
@full_precision
def _implicit_jvp(primals, tangents):
  floats, ints, qstar, state = primals
  qstar, state = lax.stop_gradient(qstar), lax.stop_gradient(state)
  floats = jax.tree_util.tree_map(lax.stop_gradient, floats)
  _, dG = jax.jvp(lambda f: _residual(_join(f, ints), qstar, state)[0], (floats,),
                  (tangents[0],))
  p = _join(floats, ints)
  H = _hessian(p, _update(p, p.J @ qstar - p.aref, frozen=state, hessian=True))
  return qstar, -linalg.inverse(H) @ dG


@jax.custom_jvp
def _force_at(floats, ints, qacc, state, fstar):
  """fstar (N,), the solver's forces at the optimum, carrying the derivative of the force law
  of ``state`` at ``qacc`` (which carries the implicit derivative): f(J qacc - aref) of
  _residual. Its value is the solver's, so the forward pass computes no second constraint
  update (the full-capacity J qacc and update that f - stop_gradient(f) cost)."""
  del floats, ints, qacc, state
  return fstar


@_force_at.defjvp
@full_precision
def _force_at_jvp(primals, tangents):
  floats, ints, qacc, state, fstar = primals
  dfloats, _, dqacc, _, _ = tangents
  state = lax.stop_gradient(state)
  _, df = jax.jvp(lambda fl, q: _residual(_join(fl, ints), q, state)[1], (floats, qacc),
                  (dfloats, dqacc))
  return fstar, df


def _check(m):
  if m.opt.solver not in (PGS, CG, NEWTON):
    raise NotSupportedError(f'unknown constraint solver {m.opt.solver}')


def _nstats(m) -> int:
  """Length of the per-iteration statistics: the main solver's, then noslip's."""
  return int(m.opt.iterations) + max(0, int(m.opt.noslip_iterations))


def _no_rows(m, d):
  nv = m.nv
  dtype = d.qacc_smooth.dtype
  n = d.efc_type.shape[0]
  it = _nstats(m)
  sol = Solution(jnp.zeros((n,), dtype), jnp.full((n,), UNUSED, jnp.int32),
                 jnp.zeros((), jnp.int32), jnp.zeros((it,), dtype), jnp.zeros((it,), dtype),
                 jnp.zeros((it,), dtype), jnp.zeros((it,), jnp.int32),
                 jnp.zeros((it,), jnp.int32), jnp.zeros((it,), jnp.int32))
  d = dataclasses.replace(d, qacc=d.qacc_smooth, qacc_warmstart=d.qacc_smooth,
                          qfrc_constraint=jnp.zeros((nv,), dtype),
                          efc_b=jnp.zeros_like(d.efc_b))
  return _write_data(d, sol), sol


def _write_data(d, sol: Solution):
  """Writes the Solution into Data: efc_force, efc_state, solver_niter, and the last
  iteration's solver_improvement / solver_gradient (0 when none ran)."""
  last = jnp.maximum(sol.solver_niter - 1, 0)
  ran = sol.solver_niter > 0
  dtype = d.solver_improvement.dtype

  def pick(x):
    # no statistics rows at all when opt.iterations = 0 (and no noslip): nothing ran
    return jnp.where(ran, x[last], 0.0).astype(dtype) if x.shape[0] else jnp.zeros((), dtype)
  return dataclasses.replace(
      d, efc_force=sol.efc_force.astype(d.efc_force.dtype), efc_state=sol.efc_state,
      solver_niter=sol.solver_niter, solver_improvement=pick(sol.solver_improvement),
      solver_gradient=pick(sol.solver_gradient))


def _params(m, dtype) -> _Params:
  prm = _Params(*(lax.stop_gradient(jnp.asarray(x, dtype)) for x in (
      m.opt.tolerance, m.opt.ls_tolerance, 1 / (m.stat.meaninertia * max(1, m.nv)))))
  if dtype == jnp.float32:
    # float32 cannot resolve MuJoCo's float64 defaults (see the module docstring)
    prm = prm._replace(tol=jnp.maximum(prm.tol, F32_TOLERANCE),
                       ls_tol=jnp.maximum(prm.ls_tol, F32_LS_TOLERANCE))
  return prm


def _primal(m, ps: _Problem, warm, empty, prm: _Params, buckets: tuple):
  """Newton or CG: (qacc*, final constraint update, niter, stats); ``buckets``: the Model's
  row buckets (model_row_buckets)."""
  ls_iterations = int(m.opt.ls_iterations)
  if ps.M.dtype == jnp.float32:
    ls_iterations = min(ls_iterations, F32_LS_ITERATIONS)
  n = ps.J.shape[0]
  cfg = _Config(m.opt.solver == NEWTON, int(m.opt.iterations), ls_iterations,
                not m.opt.disableflags & DSBL_WARMSTART, buckets + (n,))
  carry, stats = _iterate_fn(cfg)(ps, warm, empty, prm)
  return carry.qacc, carry.up, carry.niter, stats


def _dual_finish(ps: _Problem, Minv, force):
  """qacc = qacc_smooth + M^-1 J' force (MuJoCo's dualFinish)."""
  return ps.qacc_smooth + Minv @ (ps.J.T @ force)


def _pgs(m, d, ps: _Problem, dp, warm, prm: _Params, Minv):
  """PGS: (qacc*, forces, dual states, the primal update at qacc* (its active set for the
  implicit gradients), niter, stats)."""
  f_warm = _update(ps, ps.J @ warm - ps.aref).force
  F0 = dual.warm_forces(dp, f_warm, dp.b[:f_warm.shape[0]],
                        not m.opt.disableflags & DSBL_WARMSTART)
  run = per_world(functools.partial(dual.pgs_batch, int(m.opt.iterations),
                                   bool(_cone_width(m))))
  res = run(dp, F0, dual.Params(prm.tol, prm.scale))
  qstar = _dual_finish(ps, Minv, res.force)
  up = _update(ps, ps.J @ qstar - ps.aref)
  it = res.improvement.shape[0]
  zf, zi = jnp.zeros((it,), res.improvement.dtype), jnp.zeros((it,), jnp.int32)
  stats = (res.improvement, zf, zf, res.nactive, res.nchange, zi)
  return qstar, res.force, res.state, up, res.niter, stats


def _noslip(m, ps: _Problem, dp, force, dtype, Minv):
  """The noslip solver from the main solver's forces: (qacc, forces, states, niter, stats)."""
  tol = lax.stop_gradient(jnp.asarray(m.opt.noslip_tolerance, dtype))
  if dtype == jnp.float32:
    tol = jnp.maximum(tol, F32_TOLERANCE)
  scale = lax.stop_gradient(jnp.asarray(1 / (m.stat.meaninertia * max(1, m.nv)), dtype))
  run = per_world(functools.partial(dual.noslip_batch, int(m.opt.noslip_iterations),
                                   bool(_cone_width(m))))
  res = run(dp, force, dual.Params(tol, scale))
  return _dual_finish(ps, Minv, res.force), res.force, res.state, res.niter, res


def _merge_stats(stats, niter, ns, total: int):
  """The main solver's statistics (iterations,) followed, from index niter on, by noslip's."""
  out = []
  for k, x in enumerate(stats):
    x = jnp.pad(x, (0, total - x.shape[0]))
    if ns is not None:
      extra = {0: ns.improvement, 3: ns.nactive, 4: ns.nchange}.get(k)
      if extra is not None:
        j = jnp.arange(extra.shape[0])
        idx = jnp.where(j < ns.niter, niter + j, total)
        x = x.at[idx].set(extra.astype(x.dtype), mode='drop')
    out.append(x)
  return tuple(out)


def solve_info(m, d):
  """The constraint solve (mj_fwdConstraint); returns (d, Solution). See the module docstring
  for what is read and written."""
  if m.opt.disableflags & DSBL_CONSTRAINT or not m.nv or not m.nefc_max:
    return _no_rows(m, d)
  _check(m)
  p = _problem(m, d)
  empty = d.nefc == 0
  ps = jax.tree_util.tree_map(lax.stop_gradient, p)
  dtype = d.qacc_smooth.dtype
  prm = _params(m, dtype)
  warm = lax.stop_gradient(d.qacc_warmstart)
  buckets = model_row_buckets(m)
  bucket = row_bucket(buckets, m.nefc_max)
  efc_b = rows_product(d.efc_J, d.qacc_smooth, d.nefc, bucket) - d.efc_aref
  use_dual = bool(dual_rows(m))
  if use_dual:
    dp = jax.tree_util.tree_map(lax.stop_gradient, dual.problem(d, d.efc_AR, efc_b))
    Minv = linalg.inverse(ps.M)

  contact = d.contact
  if m.opt.solver == PGS:
    qstar, fstar, state, up, niter, stats = _pgs(m, d, ps, dp, warm, prm, Minv)
    # with no rows PGS's result is qacc_smooth already
  else:
    qstar, up, niter, stats = _primal(m, ps, warm, empty, prm, buckets)
    fstar, state = up.force, up.state
    # MuJoCo's layout of the cone Hessians: row-major dim x dim in the first dim^2 of contact.H
    nr = _cone_width(m)
    if nr:
      Hc = up.Hc
      dim = jnp.clip(contact.dim, 1, nr)
      k = jnp.arange(36)
      r, col = k[None, :] // dim[:, None], k[None, :] % dim[:, None]
      inside = k[None, :] < dim[:, None] * dim[:, None]
      val = Hc[jnp.arange(Hc.shape[0])[:, None], jnp.clip(r, 0, nr - 1),
               jnp.clip(col, 0, nr - 1)]
      contact = dataclasses.replace(contact,
                                    H=jnp.where(inside, val, 0.0).astype(contact.H.dtype))

  # implicit differentiation at the optimum, active set of the primal update at qacc* frozen
  # (values unchanged, see the module docstring); the solution named for rollout's remat, whose
  # backward pass then finds it saved and runs no iterations again
  qstar, fstar, astate = checkpoint_name((qstar, fstar, up.state), CHECKPOINT_NAME)
  qacc = _implicit(*_split(p), qstar, astate)
  force = _force_at(*_split(p), qacc, astate, fstar)
  # MuJoCo's mj_fwdConstraint saves the main solver's solution as the next warm start
  qacc_warmstart = lax.stop_gradient(qacc)

  ns = None
  if m.opt.noslip_iterations > 0:
    qacc_ns, f_ns, state, ns_niter, ns = _noslip(m, ps, dp, lax.stop_gradient(force), dtype,
                                                 Minv)
    # noslip's change passes no derivative: the gradients are the main solver's
    qacc = qacc + lax.stop_gradient(qacc_ns - qacc)
    force = force + lax.stop_gradient(f_ns - force)
    stats = _merge_stats(stats, niter, ns, _nstats(m))
    niter = niter + ns_niter
  else:
    stats = _merge_stats(stats, niter, None, _nstats(m))
  qfrc_constraint = rows_product(d.efc_J, force, d.nefc, bucket, transpose=True)

  improvement, gradient, slope, nactive, nchange, neval = stats
  sol = Solution(force, state, niter, improvement, gradient, slope, nactive, nchange, neval)
  d = dataclasses.replace(d, qacc=qacc, qacc_warmstart=qacc_warmstart, efc_b=efc_b,
                          qfrc_constraint=qfrc_constraint, contact=contact)
  return _write_data(d, sol), sol


def solve(m, d):
  """The constraint solve (mj_fwdConstraint): d with qacc, qfrc_constraint, qacc_warmstart,
  efc_b and contact.H (and the Solution fields Data declares) written."""
  return solve_info(m, d)[0]


__all__ = ['solve', 'solve_info', 'Solution', 'SATISFIED', 'QUADRATIC', 'LINEARNEG',
           'LINEARPOS', 'CONE']
