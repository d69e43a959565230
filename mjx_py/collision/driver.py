"""Collision driver: MuJoCo's ``mj_collision`` for one world (engine_collision_driver.c, 3.3.3).

Host side (numpy, at ``put_model``): ``pair_tables`` finds the geom pairs that can ever collide
and chooses the broadphase; ``capacity``, ``pair_capacity`` and ``sweep_capacity`` pick the
static buffer sizes.
Device side: ``collision(m, d)`` finds the pairs whose bounding spheres overlap, runs the
narrowphase routine of each geom type pair (``primitive.ROUTINES``) vmapped over them, mixes the
contact parameters (``mj_contactParam``) and writes ``d.contact``, ``d.ncon``.

Candidate pairs (MuJoCo's filters; see notes/semantics.md section 6):

- explicit ``<pair>``s (``pair_*`` fields), never filtered except by the bounding test;
- dynamic pairs: geoms of different weld groups (so never two static geoms), not parent/child
  weld groups unless the ``filterparent`` disable flag is set (the test is skipped when either
  side is static), ``(contype1 & conaffinity2) || (contype2 & conaffinity1)``, body pair not in
  ``<exclude>``, and the geom pair not also an explicit pair (explicit pairs take precedence);
- pairs for which MuJoCo has no collision function (plane/hfield against plane/hfield) dropped.

Order: MuJoCo merges explicit pairs (sorted by ``pair_signature``) into the body pairs of its
broadphase (sorted by signature ``body1 << 16 | body2``): an explicit pair comes before the
dynamic pairs of every body pair whose signature is >= its own, and a body pair's geom pairs come
in (geom of body1, geom of body2) order (also with the midphase, which re-sorts them so). The
broadphase's sweep-and-prune and the midphase's box tests only remove pairs that the bounding
test or the narrowphase would reject too, so the contacts' order is a static function of the
pair: the lexicographic key (signature, explicit pair id or npair for dynamic pairs, lower geom
id, higher geom id, contact index within the pair). The table path sorts by the equivalent
static slot address and contact index, the sap path by that key itself (a stable multi-key
sort: no int32 product of ids is formed).

Geoms are swapped so that ``geom_type[geom1] <= geom_type[geom2]`` (MuJoCo swaps only when
strictly greater); the contact normal points from geom1 to geom2.

Two broadphases, chosen once at ``put_model`` (``broadphase='auto' | 'table' | 'sap'``; 'auto'
takes the table below ``SAP_THRESHOLD`` dynamic candidate pairs, the sweep above):

- 'table': every candidate pair is listed on the host, in MuJoCo's order (static slot addresses
  ``col_conadr``), and the bounding test runs on all of them every step. Cheapest for small
  models; memory and time grow with the number of candidates (the square of the geoms).
- 'sap' (sort-based sweep-and-prune, on the device, in buffers of static size): each geom of
  ``col_sweep`` (the geoms that take part in some dynamic candidate pair) projects its bounding
  sphere, inflated by its margin, on the principal axis of the geom centres; the intervals are
  sorted by their lower end, each one overlaps a run of the following ones (counted with a binary
  search), and a prefix sum numbers the overlapping pairs, which are enumerated chunk by chunk (a
  fixed-count ``lax.scan`` over index arithmetic whose unneeded chunks are skipped; no gradient
  flows through it), filtered on the device (masks, weld and parent groups, ``col_exclude`` body
  signatures and the ``col_explicit`` geom pairs, both sorted and searched with ``searchsorted``),
  bounding-tested, and compacted into a buffer of static size (``sweep_capacity``: ``min(nsweep,
  npairmax)`` summed over the type pairs, so that every type pair can fill its narrowphase).
  Explicit pairs stay a static host list (``col_geom`` holds only them). No array of size ngeom^2 or
  ncandidate exists on this path, on the host either: ``col_groups`` and ``ncandidate`` come
  from counts per class of geoms (type, contype, conaffinity) and weld group.

Model fields (engine-only, int32): ``col_geom`` (nrow, 2) geom ids, grouped by type pair (table:
every candidate; sap: the explicit pairs); ``col_pairid`` (nrow,) explicit pair id or -1;
``col_conadr`` (nrow,) first contact slot of the row in MuJoCo's order, among the rows;
``col_sweep`` (nsweep,) geoms in the sweep, ``col_exclude`` (nexclude,) sorted excluded body
signatures and ``col_explicit`` (npair,) sorted ``geom1 * ngeom + geom2`` (geom1 < geom2) of the
explicit pairs (all three empty on the table path). Static: ``broadphase`` ('table' or 'sap'),
``col_groups``, one entry per type pair ``(type1, type2, start, count, ncon, example_geom1,
example_geom2, nsweep)``: rows start:start+count of the table, contacts per pair, and the dynamic
candidates of that type pair left to the sweep (0 on the table path); ``nconmax`` and
``npairmax``.

Capacity (``nconmax``, static): ``put_model(..., nconmax=N)`` if given, else ``<size nconmax>``
if it is >= 0 (0, as in MuJoCo, means no collision detection at all), else
``min(total, max(16, budget))``: ``total`` is the most contacts all candidates can produce at
once (sum of each pair's routine size, so small models are never truncated), and ``budget`` sums
over the geoms that appear in some candidate pair a per-type count (``NCON_BUDGET``: sphere and
ellipsoid 2, capsule 3, cylinder 4, box and mesh 6, planes and height fields 0; 4 more per geom
when the model collides with a height field). Everything downstream of collision (the contact
and constraint-row buffers, the solver's iterations) costs in proportion to this capacity, not
to the contacts in use, so it is sized for resting contact with some margin rather than for the
worst case: MuJoCo's humanoid flailing and falling for 24,000 steps never exceeded 11 contacts
(capacity 54), the five-box stack 30 (capacity 39). A bigger scene sets ``nconmax``.
Pair capacity (``npairmax``, static, both paths, like MJX's ``max_geom_pairs``): the most pairs of
one geom type pair whose narrowphase runs in a step; ``put_model(..., npairmax=N)`` if given, else
``nconmax`` (a pair that touches makes at least one contact). The narrowphase costs far more than
either broadphase, and a type pair's cost is its capacity, not the pairs that touch: a lower
npairmax speeds up piles whose contacts spread over several type pairs (the settled 300-body pile
of examples/compare_collision.py has at most ~250 bounding-overlapping pairs of each type pair for
~950 contacts).

When more contacts are found than fit, the deepest (smallest ``dist``) are kept, still in
MuJoCo's order, and ``warning_counts[1]`` (mjWARN_CONTACTFULL) grows by the number left out.
When more pairs of a type pair pass the bounding test than its narrowphase runs on (npairmax),
those that overlap their bounding spheres the most are kept, and the pairs left out are also
counted in ``warning_counts[1]`` (whether or not they would have touched); on the sap path, so
are bounding-overlapping pairs that did not fit the sweep's buffer (the later ones in sweep
order; this only happens when some type pair has more than npairmax of them). Results are
exact whenever that counter does not grow.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from ..check import batch_any
from ..data import Contact, empty_contact
from ..errors import NotSupportedError
from ..math import MINVAL, cumsum_int, nonzero_first, safe_norm

PLANE, HFIELD, SPHERE, CAPSULE, ELLIPSOID, CYLINDER, BOX, MESH, SDF = range(9)
GEOM_TYPE_NAMES = ('plane', 'hfield', 'sphere', 'capsule', 'ellipsoid', 'cylinder', 'box', 'mesh',
                   'sdf')
NTYPE = len(GEOM_TYPE_NAMES)
DSBL_CONSTRAINT, DSBL_CONTACT, DSBL_FILTERPARENT, DSBL_NATIVECCD = 1, 16, 1 << 9, 1 << 16
ENBL_OVERRIDE, ENBL_MULTICCD = 1, 1 << 4
PYRAMIDAL = 0          # mjtCone
MINMU = 1e-5           # mjMINMU
WARN_CONTACTFULL = 1   # mjtWarning
# default contact capacity: the sum over the geoms in some candidate pair of a budget by type
# (what such a geom makes resting on a floor and touching a neighbour: a sphere 1 + 1, a capsule
# lying flat 2 + 1, a box face 4 + 2), HFIELD_EXTRA more for each when the model collides with
# a height field (prisms multiply contacts), at least MIN_NCONMAX, never more than can occur
NCON_BUDGET = {PLANE: 0, HFIELD: 0, SPHERE: 2, CAPSULE: 3, ELLIPSOID: 2, CYLINDER: 4, BOX: 6,
               MESH: 6, SDF: 6}
HFIELD_EXTRA = 4
MIN_NCONMAX = 16
BROADPHASES = ('auto', 'table', 'sap')
# 'auto' takes the sweep above this many dynamic candidate pairs. Measured on CPU (2 shared
# cores, free spheres and boxes scattered on a plane, broadphase alone, default capacities):
# batch 1, both take 0.2-0.3 ms up to ~4,000 candidates, the sweep is faster beyond ~20,000
# (0.57 vs 0.32 ms at 20,100; 3.8 vs 2.0 ms at 180,300); batch 64 (vmap), the table is faster
# below ~2,000 (1.4 vs 1.9 ms at 1,035) and the sweep above ~4,000 (7.4 vs 5.4 ms at 4,095, 47
# vs 20 ms at 20,100). The narrowphase, the same on both paths, costs far more than either.
SAP_THRESHOLD = 3000
PAIRWISE_SORT = 128  # the longest contact list ordered by pairwise comparisons (_lex_order)
SWEEP_CHUNK = (1024, 2048)  # pairs enumerated per sweep iteration: the buffer size, within these
# Index fields this module builds for the Model (int32 leaves)
INDEX_FIELDS = ('col_geom', 'col_pairid', 'col_conadr', 'col_sweep', 'col_exclude',
                'col_explicit')


def _routines() -> dict:
  """(type1, type2) -> (fn, contacts per pair): the analytic, plane-convex and convex routines
  of primitive pairs (``primitive.ROUTINES``), the mesh pairs (``convex.MESH_ROUTINES``) and the
  height-field pairs (``hfield.ROUTINES``; their contacts per pair depend on the model: None
  here, ``_hfield_cells`` on the host)."""
  from . import convex, hfield, primitive  # late: model.py needs this module on the host only
  return {**primitive.ROUTINES, **convex.MESH_ROUTINES,
          **{k: (fn, None) for k, fn in hfield.ROUTINES.items()}}


def _is_ccd(fn) -> bool:
  """Whether a routine is MuJoCo's general convex search (mjc_Convex: GJK / EPA)."""
  return hasattr(fn, 'kinds')


def _max_contacts(t1: int, t2: int, enableflags: int, hfield_cells=None) -> int:
  """Slots per pair: the routine's size (for an hfield pair, that of its cell block
  ``hfield_cells``); for pair types without a routine (collision raises for them) MuJoCo's
  mj_maxContact, so that the default capacity stays meaningful."""
  from . import hfield
  routines = _routines()
  if t1 == HFIELD and hfield_cells:
    return hfield.max_contacts(hfield_cells[:2])
  if (t1, t2) in routines and routines[(t1, t2)][1] is not None:
    return int(routines[(t1, t2)][1])
  if HFIELD in (t1, t2):
    return 50                            # mjMAXCONPAIR
  if SPHERE in (t1, t2) or ELLIPSOID in (t1, t2):
    return 1
  if t1 == PLANE:
    return 3 if t2 == MESH else 4
  return 4 if enableflags & ENBL_MULTICCD else 1


# ---------------------------------------------------------------------------------------------
# Host side: candidate pairs, broadphase choice and capacities

def _host_context(arrays: dict) -> dict:
  """The compiled model's collision inputs as int64 numpy arrays (host only)."""
  def ints(name):
    return np.asarray(arrays[name], np.int64).reshape(-1)
  body, weld, parent = ints('geom_bodyid'), ints('body_weldid'), ints('body_parentid')
  gweld = weld[body]
  pg1, pg2 = ints('pair_geom1'), ints('pair_geom2')
  ngeom = body.size
  return {
      'ngeom': ngeom, 'nbody': weld.size, 'gtype': ints('geom_type'), 'body': body,
      'weld': weld, 'parent': parent, 'gweld': gweld,
      'gpweld': weld[parent[gweld]],          # weld group of the parent of the geom's group
      'contype': ints('geom_contype'), 'conaff': ints('geom_conaffinity'),
      'exclude': np.unique(ints('exclude_signature')),
      'pg1': pg1, 'pg2': pg2, 'psig': ints('pair_signature'),
      'explicit': np.unique(np.minimum(pg1, pg2) * ngeom + np.maximum(pg1, pg2)),
      'filterparent': not int(arrays['opt_disableflags']) & DSBL_FILTERPARENT,
      'enable': int(arrays['opt_enableflags']),
      'dataid': ints('geom_dataid'),
      'rbound': np.asarray(arrays['geom_rbound'], np.float64).reshape(-1),
      'hfield_nrow': ints('hfield_nrow'), 'hfield_ncol': ints('hfield_ncol'),
      'hfield_size': np.asarray(arrays['hfield_size'], np.float64).reshape(-1, 4),
  }


def _hfield_cells(c: dict, types):
  """The static cell block (ny, nx) of hfield.collide (``hfield.cell_bound``) that covers every
  hfield geom of the model against the largest geom (geom_rbound) of any type paired with
  height fields, and the grid size (nrow, ncol) all hfields share: (ny, nx, nrow, ncol), or
  None without hfield pairs. One block for all types lets one compiled search serve them all.
  """
  from . import hfield
  partners = [t2 for t1, t2 in types if t1 == HFIELD]
  if not partners:
    return None
  data = np.unique(c['dataid'][c['gtype'] == HFIELD])
  grids = {(int(c['hfield_nrow'][h]), int(c['hfield_ncol'][h])) for h in data}
  if len(grids) > 1:
    raise NotSupportedError(
        f'height fields of different grid sizes (nrow, ncol) {sorted(grids)} in one model: '
        'hfield collisions need one grid size for all hfields that collide; resample them to '
        'one size')
  (nrow, ncol), = grids
  rb = float(np.max(c['rbound'][np.isin(c['gtype'], partners)]))
  cells = [hfield.cell_bound(nrow, ncol, c['hfield_size'][h], rb) for h in data]
  return (max(a for a, _ in cells), max(b for _, b in cells), nrow, ncol)


def _base_keep(c: dict, g1, g2):
  """Dynamic filters that depend on the two geoms alone: weld groups, parent/child, masks."""
  w1, w2 = c['gweld'][g1], c['gweld'][g2]
  keep = w1 != w2                                    # same weld group, or both static
  keep &= ((c['contype'][g1] & c['conaff'][g2]) | (c['contype'][g2] & c['conaff'][g1])) != 0
  if c['filterparent']:
    p1, p2 = c['gpweld'][g1], c['gpweld'][g2]
    keep &= ~((w1 != 0) & (w2 != 0) & ((w1 == p2) | (w2 == p1)))
  return keep


def _planar(c: dict, g1, g2):
  """Pairs MuJoCo has no function for: plane/hfield against plane/hfield."""
  return (c['gtype'][g1] <= HFIELD) & (c['gtype'][g2] <= HFIELD)


def _dynamic_keep(c: dict, g1, g2):
  """All dynamic filters for geom pairs g1 < g2 (so body1 <= body2, as in the signature)."""
  keep = _base_keep(c, g1, g2) & ~_planar(c, g1, g2)
  keep &= ~np.isin((c['body'][g1] << 16) + c['body'][g2], c['exclude'])
  keep &= ~np.isin(g1 * c['ngeom'] + g2, c['explicit'])
  return keep


def _sweep_partners(c: dict) -> np.ndarray:
  """(ngeom, NTYPE) int64: for each geom, its dynamic candidate partners of each geom type.

  Counted without listing the pairs: geoms fall into classes (type, contype, conaffinity); with
  N[w, k] the geoms of class k in weld group w, a geom of weld w (parent weld p) has, in a class
  k that its masks accept, all class-k geoms except those of weld w and, under the parent
  filter, of p and of the child groups of w. The few pairs that an <exclude> or an explicit
  <pair> removes are then listed (small) and subtracted, and planar pairs zeroed.
  """
  ngeom, gtype = c['ngeom'], c['gtype']
  out = np.zeros((ngeom, NTYPE), np.int64)
  if ngeom < 2:
    return out
  keys = np.stack([gtype, c['contype'], c['conaff']], axis=1)
  classes, cls = np.unique(keys, axis=0, return_inverse=True)
  cls = cls.reshape(-1)
  ct, ca = classes[:, 1], classes[:, 2]
  accept = ((ct[:, None] & ca[None, :]) | (ct[None, :] & ca[:, None])) != 0   # (K, K)
  nk = len(classes)
  counts = np.zeros((c['nbody'], nk), np.int64)      # rows: weld group (a body id)
  np.add.at(counts, (c['gweld'], cls), 1)
  partners = counts.sum(axis=0)[None, :] - counts[c['gweld']]   # other weld groups
  if c['filterparent']:
    roots = np.unique(c['weld'])
    roots = roots[roots != 0]
    children = np.zeros_like(counts)                 # children[w]: geoms in child groups of w
    np.add.at(children, c['weld'][c['parent'][roots]], counts[roots])
    moving = c['gweld'] != 0
    parent_rows = np.where((moving & (c['gpweld'] != 0))[:, None], counts[c['gpweld']], 0)
    partners -= np.where(moving[:, None], parent_rows + children[c['gweld']], 0)
  partners *= accept[cls]
  np.add.at(out.T, classes[:, 0], partners.T)        # sum the classes of each type
  out[gtype <= HFIELD, :HFIELD + 1] = 0              # planar pairs have no function

  # pairs removed by <exclude> or by an explicit <pair> (each subtracted once)
  removed = [np.stack([np.minimum(c['pg1'], c['pg2']), np.maximum(c['pg1'], c['pg2'])], 1)]
  if c['exclude'].size:
    order = np.argsort(c['body'], kind='stable')
    first = np.searchsorted(c['body'][order], np.arange(c['nbody'] + 1))
    for sig in c['exclude']:
      b1, b2 = int(sig) >> 16, int(sig) & 0xFFFF
      if max(b1, b2) >= c['nbody']:
        continue
      a = order[first[b1]:first[b1 + 1]]
      b = order[first[b2]:first[b2 + 1]]
      grid = np.stack(np.meshgrid(a, b, indexing='ij'), -1).reshape(-1, 2)
      removed.append(np.sort(grid, axis=1))
  pairs = np.unique(np.concatenate(removed).reshape(-1, 2), axis=0)
  if pairs.size:
    g1, g2 = pairs[:, 0], pairs[:, 1]
    sig = (c['body'][g1] << 16) + c['body'][g2]
    hit = np.isin(sig, c['exclude']) | np.isin(g1 * ngeom + g2, c['explicit'])
    hit &= _base_keep(c, g1, g2) & ~_planar(c, g1, g2) & (g1 != g2)
    np.subtract.at(out, (g1[hit], gtype[g2[hit]]), 1)
    np.subtract.at(out, (g2[hit], gtype[g1[hit]]), 1)
  return out


def _sweep_counts(partners: np.ndarray, gtype: np.ndarray) -> dict:
  """{(type1, type2): dynamic candidate pairs} (type1 <= type2) from ``_sweep_partners``."""
  out = {}
  for t1 in range(NTYPE):
    rows = partners[gtype == t1]
    for t2 in range(t1, NTYPE):
      n = int(rows[:, t2].sum())
      n = n // 2 if t1 == t2 else n
      if n:
        out[(t1, t2)] = n
  return out


def _sweep_example(c: dict, partners: np.ndarray, t1: int, t2: int) -> tuple:
  """A dynamic candidate pair of types (t1, t2), geom of type t1 first (error messages)."""
  gtype = c['gtype']
  for a in np.flatnonzero((gtype == t1) & (partners[:, t2] > 0)):
    b = np.flatnonzero(gtype == t2)
    b = b[b != a]
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    ok = np.flatnonzero(_dynamic_keep(c, lo, hi))
    if ok.size:
      return int(a), int(b[ok[0]])
  raise AssertionError(f'no dynamic candidate pair of types {t1} and {t2}')  # counts are exact


def _rows(c: dict, g1, g2, sweep: dict, partners) -> dict:
  """The candidate rows (explicit pairs, and the dynamic pairs g1 < g2 of the table) in
  MuJoCo's order, swapped by type, grouped by type pair; ``sweep`` adds the dynamic pairs left
  to the sweep to the groups and counts."""
  gtype, pg1, pg2 = c['gtype'], c['pg1'], c['pg2']
  # all rows: explicit first in the key (signature, explicit?, ...), as MuJoCo's merge
  cg1 = np.concatenate([pg1, g1])
  cg2 = np.concatenate([pg2, g2])
  pairid = np.concatenate([np.arange(pg1.size), -np.ones(g1.size, np.int64)])
  order = np.lexsort((cg2, cg1, np.concatenate([np.arange(pg1.size), np.zeros(g1.size)]),
                      pairid < 0, np.concatenate([c['psig'], (c['body'][g1] << 16) +
                                                  c['body'][g2]])))
  cg1, cg2, pairid = cg1[order], cg2[order], pairid[order]
  swap = gtype[cg1] > gtype[cg2]
  cg1, cg2 = np.where(swap, cg2, cg1), np.where(swap, cg1, cg2)
  ok = ~_planar(c, cg1, cg2)              # MuJoCo has no plane/hfield-plane/hfield function
  cg1, cg2, pairid = cg1[ok], cg2[ok], pairid[ok]
  t1, t2 = gtype[cg1], gtype[cg2]

  # slot addresses in MuJoCo's order, then group by type pair (stable: keeps that order)
  types = sorted({(int(a), int(b)) for a, b in zip(t1, t2)} | set(sweep))
  cells = _hfield_cells(c, types)
  ncon = {k: _max_contacts(k[0], k[1], c['enable'], cells) for k in types}
  table = np.zeros(NTYPE * NTYPE, np.int64)
  for (a, b), n in ncon.items():
    table[a * NTYPE + b] = n
  nslot = table[t1 * NTYPE + t2]
  conadr = np.concatenate([[0], np.cumsum(nslot)[:-1]]) if nslot.size else nslot
  group = np.lexsort((t2, t1))
  cg1, cg2, pairid, conadr, t1, t2 = (x[group] for x in (cg1, cg2, pairid, conadr, t1, t2))
  groups = []
  start = 0
  for a, b in types:
    count = int(np.sum((t1 == a) & (t2 == b)))
    if count:
      ex = int(cg1[start]), int(cg2[start])
    else:
      ex = _sweep_example(c, partners, a, b)
    groups.append((a, b, start, count, ncon[(a, b)], ex[0], ex[1], sweep.get((a, b), 0)))
    start += count
  collide = np.zeros(c['ngeom'], bool)
  collide[cg1] = collide[cg2] = True
  if partners is not None:
    collide |= partners.sum(axis=1) > 0
  ctypes = gtype[collide]
  budget = sum(NCON_BUDGET[int(t)] for t in ctypes)
  if np.any(ctypes == HFIELD):
    budget += HFIELD_EXTRA * int(np.sum(ctypes != HFIELD))
  return {
      'col_geom': np.stack([cg1, cg2], axis=1).reshape(-1, 2).astype(np.int32),
      'col_pairid': pairid.astype(np.int32),
      'col_conadr': conadr.astype(np.int32),
      'col_groups': tuple(groups),
      'col_hfield': cells or (),
      'ncandidate': int(cg1.size) + sum(sweep.values()),
      'ncon_total': int(np.sum(nslot)) + sum(n * ncon[k] for k, n in sweep.items()),
      'ngeom_collide': int(collide.sum()),
      'ncon_budget': int(budget),
  }


def pair_tables(arrays: dict, broadphase: str = 'table') -> dict:
  """Candidate pairs of a compiled model and its broadphase (numpy, host only); see the module
  docstring.

  arrays: the compiler's dict of MuJoCo-named arrays; broadphase: 'auto', 'table' or 'sap'.
  Returns the Model fields of ``INDEX_FIELDS`` (int32 arrays), ``col_groups`` (tuple) and
  ``broadphase`` ('table' or 'sap'), and the counts ``ncandidate`` (explicit and dynamic
  candidate pairs), ``ndynamic`` (dynamic ones), ``ncon_total`` (most contacts all candidates
  can produce at once) and ``ngeom_collide`` (geoms that appear in a candidate pair), and
  ``dynamic_geoms`` (int32, the geoms that appear in a dynamic candidate pair, on both paths:
  ``col_geom`` lists only the explicit pairs on the sap path).
  """
  if broadphase not in BROADPHASES:
    raise ValueError(f'broadphase must be one of {BROADPHASES}, got {broadphase!r}')
  c = _host_context(arrays)
  ngeom = c['ngeom']
  empty = np.zeros(0, np.int32)
  partners = None
  if broadphase != 'table':
    partners = _sweep_partners(c)
    ndynamic = int(partners.sum()) // 2
    if broadphase == 'auto':
      broadphase = 'sap' if ndynamic > SAP_THRESHOLD else 'table'
  if broadphase == 'table':
    g1, g2 = np.triu_indices(ngeom, 1)     # g1 < g2: geoms are stored body by body
    keep = _dynamic_keep(c, g1, g2)
    out = _rows(c, g1[keep], g2[keep], {}, None)
    out.update(col_sweep=empty, col_exclude=empty, col_explicit=empty,
               ndynamic=int(np.sum(keep)), dynamic_geoms=np.unique(
                   np.concatenate([g1[keep], g2[keep]])).astype(np.int32))
  else:
    if c['pg1'].size and ngeom > 46340:
      raise NotSupportedError(f'the sort-based broadphase with explicit <pair>s supports at '
                              f'most 46340 geoms (int32 pair codes), this model has {ngeom}; '
                              "use broadphase='table'")
    sweep = _sweep_counts(partners, c['gtype'])
    out = _rows(c, empty, empty, sweep, partners)
    out.update(col_sweep=np.flatnonzero(partners.sum(axis=1) > 0).astype(np.int32),
               col_exclude=c['exclude'].astype(np.int32),
               col_explicit=c['explicit'].astype(np.int32), ndynamic=sum(sweep.values()))
    out['dynamic_geoms'] = out['col_sweep']
  out['broadphase'] = broadphase
  return out


def capacity(size_nconmax: int, tables: dict, nconmax: int | None = None) -> int:
  """The static contact capacity (see the module docstring).

  size_nconmax: ``<size nconmax>`` (-1 when not set); tables: output of ``pair_tables``;
  nconmax: the user's override.
  """
  if nconmax is not None:
    if int(nconmax) != nconmax or nconmax < 0:
      raise ValueError(f'nconmax must be a non-negative integer, got {nconmax!r}')
    return int(nconmax)
  if size_nconmax >= 0:
    return int(size_nconmax)
  return int(min(tables['ncon_total'], max(MIN_NCONMAX, tables['ncon_budget'])))


def pair_capacity(nconmax: int, npairmax: int | None = None) -> int:
  """The static pair capacity of one type pair's narrowphase (see the module docstring).

  nconmax: the contact capacity; npairmax: the user's override.
  """
  if npairmax is None:
    return int(nconmax)
  if int(npairmax) != npairmax or npairmax < 0:
    raise ValueError(f'npairmax must be a non-negative integer, got {npairmax!r}')
  return int(npairmax)


def sweep_capacity(col_groups: tuple, npairmax: int) -> int:
  """Size of the sap broadphase's pair buffer: each type pair's share, min(nsweep, npairmax)."""
  return int(sum(min(g[7], npairmax) for g in col_groups))


# ---------------------------------------------------------------------------------------------
# Device side

def _geom_name(m, g: int) -> str:
  for kind, names in m.names:
    if kind == 'geom' and g < len(names) and names[g]:
      return f"'{names[g]}'"
  return f'id {g}'


def _check_supported(m):
  """NotSupportedError (at trace time) for a type pair without a narrowphase routine, and for
  convex pairs when the model asks for libccd (``nativeccd`` disabled) instead of the native
  GJK / EPA that convex.py reproduces."""
  routines = _routines()
  for t1, t2, _, count, _, ex1, ex2, nsweep in m.col_groups:
    pair = (f'{count + nsweep} candidate pair(s), e.g. geoms {_geom_name(m, ex1)} and '
            f'{_geom_name(m, ex2)}')
    if (t1, t2) not in routines:
      raise NotSupportedError(
          f'collision between geom types {GEOM_TYPE_NAMES[t1]} and {GEOM_TYPE_NAMES[t2]} is '
          f'not implemented yet ({pair}); disable these contacts with '
          'contype/conaffinity or <exclude>, or all contacts with '
          '<option><flag contact="disable"/></option>')
    if m.opt.disableflags & DSBL_NATIVECCD and _is_ccd(routines[(t1, t2)][0]):
      raise NotSupportedError(
          f'<option><flag nativeccd="disable"/> (libccd\'s MPR) is not supported: geom types '
          f'{GEOM_TYPE_NAMES[t1]} and {GEOM_TYPE_NAMES[t2]} go through the convex search '
          f'({pair}); mjx_py implements the native GJK / EPA only: remove the flag')


def _margin(m, g1, g2, pairid, override):
  """Detection margin of each pair (mj_assignMargin of the pair margin or the geoms' max)."""
  if override:
    return jnp.broadcast_to(m.opt.o_margin, g1.shape)
  dyn = jnp.maximum(m.geom_margin[g1], m.geom_margin[g2])
  if not m.npair:
    return dyn
  return jnp.where(pairid >= 0, m.pair_margin[jnp.maximum(pairid, 0)], dyn)


def _bound_test(xpos, xmat, rbound, g1, g2, margin, plane):
  """MuJoCo's bounding test (mj_filterSphere): (keep (n,) bool, slack (n,)).

  xpos (ngeom, 3), xmat (ngeom, 9), rbound (ngeom,); g1, g2, margin (n,); plane: whether geom1
  is a plane (a Python bool for a whole type group, or (n,) bool).
  Geoms with rbound > 0 are tested as spheres (rbound1 + rbound2 + margin); a plane (geom1,
  rbound 0) keeps geoms whose centre is within rbound2 + margin above it; rbound 0 otherwise
  means unbounded. ``slack`` (distance beyond the bound; smaller overlaps more) ranks the pairs
  when a type pair has more survivors than it can run.
  """
  p1, p2 = xpos[g1], xpos[g2]
  r1, r2 = rbound[g1], rbound[g2]
  both = (r1 > 0) & (r2 > 0)
  dif = p1 - p2
  bound = r1 + r2 + margin
  far = both & (jnp.sum(dif * dif, axis=-1) > bound * bound)
  slack = safe_norm(dif) - bound
  if plane is not False:
    plane = jnp.asarray(plane)
    normal = xmat[g1][:, 2::3]     # the plane's z axis (column 2 of xmat)
    pdist = jnp.sum((p2 - p1) * normal, axis=-1)
    far = far | (plane & ~both & (r2 > 0) & (pdist > margin + r2))
    slack = jnp.where(both | ~plane, slack, pdist - margin - r2)
  return ~far, jax.lax.stop_gradient(slack)


def _lex_order(keys, bounds=None):
  """The permutation (n,) that sorts n entries by the int keys (n,) each, the first key most
  significant, ties kept in place (a stable sort). Up to PAIRWISE_SORT entries, each entry's rank is
  counted from pairwise comparisons and the permutation read off by a one-hot sum: a few fused
  elementwise passes, where XLA:CPU's sort is a slow per-world kernel (3.5 ms of a humanoid
  step at batch 1024, 54 entries); longer lists are sorted.

  bounds: static exclusive upper bounds of the (non-negative) keys, or None. When given and
  the keys and the position fit one int32 as mixed-radix digits, the comparisons run on that
  one combined key (one compare per pair of entries instead of three per key)."""
  n = keys[0].shape[0]
  i = jnp.arange(n, dtype=jnp.int32)
  if n > PAIRWISE_SORT:
    return jax.lax.sort(tuple(keys) + (i, i), num_keys=len(keys) + 1)[-1]
  fits = (bounds is not None and len(bounds) == len(keys)
          and int(np.prod(tuple(bounds) + (max(n, 1),), dtype=object)) < 2 ** 31)
  if fits:
    # distinct combined keys (the position is the last digit): rank = how many are smaller
    key = jnp.zeros((n,), jnp.int32)
    for k, b in zip(keys, bounds):
      key = key * b + k
    key = key * n + i
    before = key[None, :] < key[:, None]
  else:
    # before[i, j]: entry j sorts before entry i (lexicographic from the least significant
    # key, the position last, so that no two entries tie)
    before = i[None, :] < i[:, None]
    for k in reversed(keys):
      before = (k[None, :] < k[:, None]) | ((k[None, :] == k[:, None]) & before)
  rank = jnp.sum(before, axis=1, dtype=jnp.int32)
  return jnp.sum(jnp.where(rank[None, :] == i[:, None], i[None, :], 0), axis=1)


def _top_k_if_over(score_fn, k, over, fits):
  """(k,) int32 indices: ``fits`` (k,), or, in a world that is ``over`` its capacity, the k
  entries of largest ``score_fn()`` (top_k; the scores are only computed in that branch). The
  top_k only runs when some world of the batch is
  over: the cond's predicate is batch_any, so it stays a cond under vmap, where a world's own
  predicate would make it a select that runs top_k every step. Measured on the humanoid at
  batch 1024 (float32, 2-core CPU): the two top_k of a step (_select, _deepest_slots) were 2.6
  of 112 ms of profiled operations, with no world over either capacity."""
  def best(_):
    top = jax.lax.top_k(jax.lax.stop_gradient(score_fn()), k)[1].astype(jnp.int32)
    return jnp.where(over, top, fits)
  return jax.lax.cond(batch_any(over), best, lambda _: fits, None)


def _select(keep, slack, k):
  """(indices (k,), selected (k,) bool) of the pairs to run: all the kept ones (in order) when
  at most k are kept, else the k kept pairs that overlap their bounds the most."""
  nkeep = jnp.sum(keep, dtype=jnp.int32)
  over = nkeep > k
  def score():
    return jnp.where(keep, -jnp.where(jnp.isnan(slack), jnp.finfo(slack.dtype).max, slack),
                     -jnp.inf)
  fits = nonzero_first(keep, k, 0)
  sel = _top_k_if_over(score, k, over, fits)
  return sel, jnp.where(over, keep[sel], jnp.arange(k) < nkeep)


def _deepest_slots(valid, dist, nvalid, cap):
  """(cap,) int32 slots of the narrowphase results to keep: the cap deepest valid ones when
  more than cap are valid, else all the valid ones followed by invalid ones (the order does not
  matter: the kept slots are sorted into MuJoCo's order next, and the unused rows blanked)."""
  # the valid slots in order, then the first invalid slot (there is one when nvalid <= cap,
  # as the caller has more slots than cap)
  first_invalid = jnp.argmin(valid).astype(jnp.int32)
  fits = jnp.where(jnp.arange(cap) < nvalid, nonzero_first(valid, cap, 0), first_invalid)
  def score():   # the deepest first: minus the distance (NaN as the largest, invalid last)
    return -jnp.where(valid, jnp.where(jnp.isnan(dist), jnp.finfo(dist.dtype).max, dist),
                      jnp.inf)
  return _top_k_if_over(score, cap, nvalid > cap, fits)


def _table_pairs(m, d, override):
  """Table path: per type group (t1, t2, ncon, h1, h2, pairid, keep, keys), and the pairs dropped.

  h1, h2, pairid, keep (k,): the pairs the group's narrowphase runs on; keys: a tuple of (k,)
  int32 arrays ordering the pairs as MuJoCo does (here the static slot address)."""
  out = []
  dropped = jnp.zeros((), jnp.int32)
  for t1, t2, start, count, ncon, _, _, _ in m.col_groups:
    geom = m.col_geom[start:start + count]
    pairid = m.col_pairid[start:start + count]
    g1, g2 = geom[:, 0], geom[:, 1]
    margin = _margin(m, g1, g2, pairid, override)
    keep, slack = _bound_test(d.geom_xpos, d.geom_xmat, m.geom_rbound, g1, g2, margin,
                              t1 == PLANE)
    npick = min(count, m.npairmax)
    if npick == 0:   # npairmax = 0: nothing runs, every overlapping pair is counted
      dropped += jnp.sum(keep, dtype=jnp.int32)
      continue
    if npick < count:
      sel, keep_sel = _select(keep, slack, npick)
      dropped += jnp.sum(keep, dtype=jnp.int32) - jnp.sum(keep_sel, dtype=jnp.int32)
    else:
      sel = jnp.arange(count, dtype=jnp.int32)
      keep_sel = keep
    cand = start + sel
    out.append((t1, t2, ncon, g1[sel], g2[sel], pairid[sel], keep_sel, (m.col_conadr[cand],)))
  return out, dropped


def _member(sorted_vals, x):
  """Whether each x occurs in the sorted int array ``sorted_vals`` (binary search)."""
  n = sorted_vals.shape[0]
  if n == 0:
    return jnp.zeros(x.shape, bool)
  i = jnp.minimum(jnp.searchsorted(sorted_vals, x), n - 1)
  return sorted_vals[i] == x


def _dynamic_filter(m, g1, g2):
  """MuJoCo's dynamic-pair filters on the device, for geom pairs g1 < g2 (n,) -> (n,) bool."""
  weld, body, gtype = m.body_weldid, m.geom_bodyid, m.geom_type
  b1, b2 = body[g1], body[g2]
  w1, w2 = weld[b1], weld[b2]
  ct, ca = m.geom_contype, m.geom_conaffinity
  keep = (w1 != w2) & (((ct[g1] & ca[g2]) | (ct[g2] & ca[g1])) != 0)
  if not m.opt.disableflags & DSBL_FILTERPARENT:
    p1, p2 = weld[m.body_parentid[w1]], weld[m.body_parentid[w2]]
    keep &= ~((w1 != 0) & (w2 != 0) & ((w1 == p2) | (w2 == p1)))
  keep &= ~((gtype[g1] <= HFIELD) & (gtype[g2] <= HFIELD))
  keep &= ~_member(m.col_exclude, (b1 << 16) + b2)
  keep &= ~_member(m.col_explicit, g1 * m.ngeom + g2)
  return keep


def _principal_axis(pos, weight, iterations=8):
  """Principal axis of the points pos (n, 3) with weight (n,) > 0: a few power iterations on
  their covariance, from the axes weighted by their spread (any unit axis keeps the sweep
  exact; a good one only keeps it short). Vectorises under vmap, unlike a batched eigh."""
  pos = jnp.where(jnp.isfinite(pos), pos, 0.0)
  w = weight.astype(pos.dtype)[:, None]
  mean = jnp.sum(w * pos, axis=0) / jnp.maximum(jnp.sum(w), 1.0)
  dev = w * (pos - mean)
  cov = dev.T @ dev
  axis = jnp.sqrt(jnp.maximum(jnp.diagonal(cov), 0.0)) + jnp.array([1e-3, 2e-3, 3e-3], pos.dtype)
  for _ in range(iterations):   # rescaled each time (only the direction matters)
    axis = cov @ axis
    axis = axis / jnp.maximum(jnp.max(jnp.abs(axis)), 1e-30)
  norm = jnp.sqrt(jnp.sum(axis * axis))
  ok = jnp.isfinite(norm) & (norm > 0)
  return jnp.where(ok, axis / jnp.where(ok, norm, 1.0), jnp.array([1.0, 0.0, 0.0], pos.dtype))


def _sweep(m, d, override):
  """Sweep-and-prune over ``m.col_sweep`` (see the module docstring).

  Returns h1, h2 (nbuf,) int32 geom pairs in type order, found (nbuf,) bool, slack (nbuf,)
  and the number of overlapping pairs that did not fit (nbuf: ``sweep_capacity``). Index
  arithmetic only: the float inputs are stop_gradient'ed, so the loop carries no tangent.
  """
  sg = jax.lax.stop_gradient
  geoms, cap = m.col_sweep, sweep_capacity(m.col_groups, m.npairmax)
  n = geoms.shape[0]
  xpos, xmat, rbound = sg(d.geom_xpos), sg(d.geom_xmat), sg(m.geom_rbound)
  gmargin = jnp.broadcast_to(sg(m.opt.o_margin), rbound.shape) if override else sg(m.geom_margin)
  dtype = xpos.dtype

  # intervals of the bounding spheres (inflated by the margin: the pair margin is the larger
  # of the two, or o_margin) on the principal axis; unbounded geoms span the whole axis. The
  # projection is widened by a few ulps so that rounding never loses a touching pair.
  pos, r = xpos[geoms], rbound[geoms]
  bounded = r > 0
  half = r + jnp.maximum(gmargin[geoms], 0.0)
  half = half + 8 * jnp.finfo(dtype).eps * (jnp.sum(jnp.abs(pos), axis=-1) + half)
  s = pos @ _principal_axis(pos, bounded)
  lo = jnp.where(bounded, s - half, -jnp.inf)
  hi = jnp.where(bounded, s + half, jnp.inf)

  # sorted by lower end, interval k overlaps the following ones up to the last whose lower end
  # is <= its upper end: count[k] pairs (k, k+1), ..., (k, k+count[k]); the pairs are numbered
  # 0 .. total-1 in that order, those of k from ends[k] - count[k]
  order = jnp.argsort(lo)
  lo_s, hi_s = lo[order], hi[order]
  k = jnp.arange(n, dtype=jnp.int32)
  reach = jnp.searchsorted(lo_s, hi_s, side='right').astype(jnp.int32)
  count = jnp.clip(reach - k - 1, 0, n - 1 - k)
  ends = cumsum_int(count)
  total = ends[-1]
  chunk = int(min(max(cap, SWEEP_CHUNK[0]), SWEEP_CHUNK[1], n * (n - 1) // 2))
  gtype = m.geom_type

  def body(state):
    base, nfound, b1, b2, bslack = state
    j = base + jnp.arange(chunk, dtype=jnp.int32)
    kk = jnp.minimum(jnp.searchsorted(ends, j, side='right'), n - 1).astype(jnp.int32)
    other = jnp.minimum(kk + 1 + j - (ends[kk] - count[kk]), n - 1)
    a, c = geoms[order[kk]], geoms[order[other]]
    g1, g2 = jnp.minimum(a, c), jnp.maximum(a, c)
    ok = (j < total) & _dynamic_filter(m, g1, g2)
    swap = gtype[g1] > gtype[g2]            # type order: a plane is geom1
    h1, h2 = jnp.where(swap, g2, g1), jnp.where(swap, g1, g2)
    margin = jnp.maximum(gmargin[h1], gmargin[h2])
    keep, slack = _bound_test(xpos, xmat, rbound, h1, h2, margin, gtype[h1] == PLANE)
    ok &= keep
    slot = jnp.where(ok, nfound + cumsum_int(ok) - 1, cap)  # cap: dropped
    return (base + chunk, nfound + jnp.sum(ok, dtype=jnp.int32),
            b1.at[slot].set(h1, mode='drop'), b2.at[slot].set(h2, mode='drop'),
            bslack.at[slot].set(slack, mode='drop'))

  zero = jnp.zeros((), jnp.int32)
  state = (zero, zero, jnp.zeros(cap, jnp.int32), jnp.zeros(cap, jnp.int32),
           jnp.full(cap, jnp.inf, dtype))
  # a fixed-count scan over the most chunks any world can need; a chunk no world of the batch
  # needs is skipped by a lax.cond whose predicate batch_any keeps unbatched under vmap
  nchunk = -(-(n * (n - 1) // 2) // chunk)

  def scan_body(state, _):
    return jax.lax.cond(batch_any(state[0] < total), body, lambda s: s, state), None

  (_, nfound, h1, h2, slack), _ = jax.lax.scan(scan_body, state, None, length=nchunk)
  found = jnp.arange(cap) < nfound
  return h1, h2, found, slack, jnp.maximum(nfound - cap, 0)


def _sweep_pairs(m, d, override):
  """Sap path: per type group (t1, t2, ncon, h1, h2, pairid, keep, keys), and the pairs dropped.

  A group's candidates are its explicit rows (bounding-tested here) and the sweep's buffer
  entries of its type pair; its narrowphase runs on min(count + nsweep, npairmax) of them,
  chosen as on the table path. keys: (pair signature, explicit pair id or npair, lower geom,
  higher geom), MuJoCo's pair order."""
  dropped = jnp.zeros((), jnp.int32)
  sweep = None
  if m.col_sweep.shape[0] > 1:   # also with npairmax = 0, to count what does not fit
    h1, h2, found, slack, dropped = _sweep(m, d, override)
    sweep = (h1, h2, jnp.full(h1.shape, -1, jnp.int32), found, slack,
             m.geom_type[h1] * NTYPE + m.geom_type[h2])

  out = []
  for t1, t2, start, count, ncon, _, _, nsweep in m.col_groups:
    parts = []
    if count:
      g1, g2 = m.col_geom[start:start + count, 0], m.col_geom[start:start + count, 1]
      pairid = m.col_pairid[start:start + count]
      margin = _margin(m, g1, g2, pairid, override)
      parts.append((g1, g2, pairid) + _bound_test(d.geom_xpos, d.geom_xmat, m.geom_rbound, g1,
                                                  g2, margin, t1 == PLANE))
    if nsweep and sweep is not None:
      h1, h2, pid, found, slack, code = sweep
      parts.append((h1, h2, pid, found & (code == t1 * NTYPE + t2), slack))
    if not parts:
      continue
    g1, g2, pairid, keep, slack = (jnp.concatenate(x) for x in zip(*parts))
    total = g1.shape[0]
    npick = min(count + nsweep, m.npairmax, total)
    if npick == 0:   # the sweep counted its own pairs that did not fit
      dropped += jnp.sum(keep[:count], dtype=jnp.int32)
      continue
    if npick < total:
      nkeep = jnp.sum(keep, dtype=jnp.int32)
      sel, keep = _select(keep, slack, npick)
      dropped += nkeep - jnp.sum(keep, dtype=jnp.int32)
      g1, g2, pairid = g1[sel], g2[sel], pairid[sel]
    o1, o2 = jnp.minimum(g1, g2), jnp.maximum(g1, g2)
    sig = (m.geom_bodyid[o1] << 16) + m.geom_bodyid[o2]
    pkey = jnp.full(pairid.shape, m.npair, jnp.int32)
    if m.npair:
      explicit = pairid >= 0
      p = jnp.maximum(pairid, 0)
      sig = jnp.where(explicit, m.pair_signature[p], sig)
      pkey = jnp.where(explicit, pairid, pkey)
      o1, o2 = jnp.where(explicit, 0, o1), jnp.where(explicit, 0, o2)
    out.append((t1, t2, ncon, g1, g2, pairid, keep, (sig, pkey, o1, o2)))
  return out, dropped


def _params(m, g1, g2, pairid, override):
  """Contact parameters of each pair (mj_contactParam / pair_* values, mj_assign*).

  Returns dim, margin, gap, solref (2), solreffriction (2), solimp (5), friction (5).
  """
  pr1, pr2 = m.geom_priority[g1], m.geom_priority[g2]
  first, second = pr1 > pr2, pr1 < pr2
  c1, c2 = m.geom_condim[g1], m.geom_condim[g2]
  s1, s2 = m.geom_solmix[g1], m.geom_solmix[g2]
  ok1, ok2 = s1 >= MINVAL, s2 >= MINVAL
  mix = jnp.where(ok1 & ok2, s1 / jnp.where(ok1 & ok2, s1 + s2, 1.0),
                  jnp.where(~ok1 & ~ok2, 0.5, jnp.where(~ok1, 0.0, 1.0)))[:, None]
  sr1, sr2 = m.geom_solref[g1], m.geom_solref[g2]
  si1, si2 = m.geom_solimp[g1], m.geom_solimp[g2]
  f1, f2 = m.geom_friction[g1], m.geom_friction[g2]
  standard = ((sr1[:, 0] > 0) & (sr2[:, 0] > 0))[:, None]
  solref = jnp.where(standard, mix * sr1 + (1 - mix) * sr2, jnp.minimum(sr1, sr2))
  solimp = mix * si1 + (1 - mix) * si2
  fri = jnp.maximum(f1, f2)

  def pick(a, b, same):
    sel1, sel2 = first.reshape(first.shape + (1,) * (a.ndim - 1)), second.reshape(
        second.shape + (1,) * (a.ndim - 1))
    return jnp.where(sel1, a, jnp.where(sel2, b, same))

  dim = pick(c1, c2, jnp.maximum(c1, c2))
  solref, solimp, fri = pick(sr1, sr2, solref), pick(si1, si2, solimp), pick(f1, f2, fri)
  friction = jnp.stack([fri[:, 0], fri[:, 0], fri[:, 1], fri[:, 2], fri[:, 2]], axis=-1)
  margin = jnp.maximum(m.geom_margin[g1], m.geom_margin[g2])
  gap = jnp.maximum(m.geom_gap[g1], m.geom_gap[g2])
  solreffriction = jnp.zeros_like(solref)

  if m.npair:  # explicit pairs carry their own values
    p = jnp.maximum(pairid, 0)
    isp = pairid >= 0
    col = isp[:, None]
    dim = jnp.where(isp, m.pair_dim[p], dim)
    margin = jnp.where(isp, m.pair_margin[p], margin)
    gap = jnp.where(isp, m.pair_gap[p], gap)
    solref = jnp.where(col, m.pair_solref[p], solref)
    solreffriction = jnp.where(col, m.pair_solreffriction[p], solreffriction)
    solimp = jnp.where(col, m.pair_solimp[p], solimp)
    friction = jnp.where(col, m.pair_friction[p], friction)

  if override:
    shape = g1.shape
    margin = jnp.broadcast_to(m.opt.o_margin, shape)
    solref = jnp.broadcast_to(m.opt.o_solref, shape + (2,))
    solreffriction = solref
    solimp = jnp.broadcast_to(m.opt.o_solimp, shape + (5,))
    friction = jnp.broadcast_to(m.opt.o_friction, shape + (5,))
  friction = jnp.maximum(MINMU, friction)
  return dim, margin, gap, solref, solreffriction, solimp, friction


def _verts(m, t, h):
  """Hull vertex sets (npair, maxhull, 3) of the mesh geoms h (geom frame), None for the
  other types (their routines take no vertex set)."""
  if t != MESH:
    return None
  return m.mesh_hullvert[m.geom_dataid[h]]


def _ccd_options(m) -> dict:
  """Keyword options of the convex routines (opt.ccd_*, the multiccd enable flag)."""
  return dict(tolerance=m.opt.ccd_tolerance, iterations=int(m.opt.ccd_iterations),
              multiccd=bool(m.opt.enableflags & ENBL_MULTICCD))


def _narrowphase(m, d, xmat, fn, t1, t2, h1, h2, margin):
  """One type pair's routine vmapped over its pairs: Contacts with leading axis npair."""
  args = (d.geom_xpos[h1], xmat[h1], m.geom_size[h1], d.geom_xpos[h2], xmat[h2],
          m.geom_size[h2], margin)
  if (t1, t2) == (PLANE, MESH):
    # mjc_PlaneConvex: extra contacts among the deepest vertex's hull neighbours, at least
    # 0.3 * geom_rbound from the first
    def plane_mesh(*a):
      return fn(*a[:7], None, a[7], neighbors2=a[8], rbound2=a[9])
    data = m.geom_dataid[h2]
    return jax.vmap(plane_mesh)(*args, m.mesh_hullvert[data], m.mesh_hullnbr[data],
                                m.geom_rbound[h2])
  if MESH in (t1, t2):
    args += (_verts(m, t1, h1), _verts(m, t2, h2))
  opts = _ccd_options(m) if _is_ccd(fn) else {}
  return jax.vmap(lambda *a: fn(*a, **opts))(*args)


def _merge(m, d, parts):
  """Several type pairs' candidates ((t1, t2, fn, h1, h2, margin, pairid, keep, keys) each) as
  one batch: (h1, h2, margin, pairid, keep, keys, types1, types2, verts1, verts2), with the
  geom types as int32 arrays per pair and each side's hull vertex table (npair, maxhull, 3)
  when some pair has a mesh (ignored unless that side is a mesh; one shape for all pairs),
  else zeros (npair, 1, 3)."""
  def cat(i):
    return jnp.concatenate([c[i] for c in parts])
  h1, h2, margin, pairid, keep = cat(3), cat(4), cat(5), cat(6), cat(7)
  keys = [jnp.concatenate(k) for k in zip(*(c[8] for c in parts))]
  types1, types2 = (jnp.asarray(np.concatenate([np.full(c[3].shape[0], c[i], np.int32)
                                                for c in parts])) for i in (0, 1))
  if any(MESH in c[:2] for c in parts):
    verts1, verts2 = (m.mesh_hullvert[jnp.maximum(m.geom_dataid[h], 0)] for h in (h1, h2))
  else:
    verts1 = verts2 = jnp.zeros((h1.shape[0], 1, 3), d.geom_xpos.dtype)
  return h1, h2, margin, pairid, keep, keys, types1, types2, verts1, verts2


def _hfield_narrowphase(m, d, xmat, hf, groups):
  """The (hfield, t) pairs (mjc_ConvexHField), all types in one vmapped search over their
  pairs (traced geom types when there are several, as in ``_convex_narrowphase``), on the cell
  block m.col_hfield = (ny, nx, nrow, ncol) that every hfield of the model shares."""
  from . import hfield
  ny, nx, nrow, ncol = m.col_hfield
  n = hfield.max_contacts((ny, nx))
  for t1, t2, ncon, *_ in groups:
    if t1 == HFIELD and ncon != n:
      raise ValueError(f'hfield-{GEOM_TYPE_NAMES[t2]}: the Model was built for {ncon} '
                       f'contacts per pair, the routine has {n}: rebuild it with put_model')
  h1, h2, margin, pairid, keep, keys, _, types2, _, verts2 = _merge(m, d, hf)
  static = hf[0][1] if len(hf) == 1 else None     # one type: a search specialised to it
  data = m.geom_dataid[h1]

  def one(k2, adr, size, pos1, mat1, pos2, mat2, size2, mg, v2):
    field = hfield.make_hfield(m.hfield_data, adr, size, nrow, ncol)
    return hfield.collide(k2 if static is None else static, pos1, mat1, field, pos2, mat2,
                          size2, mg, v2, ncell=(ny, nx), tolerance=m.opt.ccd_tolerance,
                          iterations=int(m.opt.ccd_iterations))
  res = jax.vmap(one)(types2, m.hfield_adr[data], m.hfield_size[data], d.geom_xpos[h1],
                      xmat[h1], d.geom_xpos[h2], xmat[h2], m.geom_size[h2], margin, verts2)
  return _slots(res, n, h1, h2, pairid, keep, keys)


def _slots(res, n, h1, h2, pairid, keep, keys):
  """Flatten a type pair's Contacts (npair, n) into contact slots with their pair's order keys
  and their index within the pair."""
  def rep(x):
    return jnp.repeat(x, n, axis=0)
  return ((res.dist.reshape(-1), res.pos.reshape(-1, 3), res.normal.reshape(-1, 3),
           res.tangent.reshape(-1, 3),
           (res.valid & keep[:, None]).reshape(-1), rep(h1), rep(h2), rep(pairid),
           jnp.tile(jnp.arange(n, dtype=jnp.int32), h1.shape[0])) + tuple(rep(k) for k in keys))


def _convex_narrowphase(m, d, xmat, ccd):
  """The type pairs that go through MuJoCo's general convex search (mjc_Convex), one contact
  per pair. One type pair: its routine, specialised to the two types. Several: one search
  with traced geom types over all their pairs (convex.collide evaluates every support function
  and selects), so that XLA compiles the GJK / EPA loops once rather than once per type pair
  (each copy costs 10-25 s of compile time on CPU)."""
  from . import convex, primitive
  opts = _ccd_options(m)
  if len(ccd) == 1:
    t1, t2, fn, h1, h2, margin, pairid, keep, keys = ccd[0]
    res = _narrowphase(m, d, xmat, fn, t1, t2, h1, h2, margin)
    return _slots(res, 1, h1, h2, pairid, keep, keys)
  for t1, t2, *_ in ccd:
    if opts['multiccd'] and not {t1, t2} & {SPHERE, ELLIPSOID}:
      raise NotSupportedError(
          f'multi-point convex collision (multiccd) between {GEOM_TYPE_NAMES[t1]} and '
          f'{GEOM_TYPE_NAMES[t2]} geoms is not implemented; remove <flag multiccd="enable"/>')

  h1, h2, margin, pairid, keep, keys, types1, types2, verts1, verts2 = _merge(m, d, ccd)

  def one(a, b, *x):
    valid, dist, pos, normal = convex.collide(
        a, b, *x, tolerance=opts['tolerance'], iterations=opts['iterations'])
    return primitive._contacts(dist[None], pos[None], normal[None], valid[None])
  res = jax.vmap(one)(types1, types2, d.geom_xpos[h1], xmat[h1],
                      m.geom_size[h1], d.geom_xpos[h2], xmat[h2], m.geom_size[h2], margin,
                      verts1, verts2)
  return _slots(res, 1, h1, h2, pairid, keep, keys)


def _key_bounds(m):
  """Static exclusive bounds of collision's sort keys (invalid flag, then the pair keys, then
  the index within the pair), or None. The table path's one pair key, col_conadr, is below the
  slot count sum(count * ncon) over the type groups; the sweep's keys (body signatures) have no
  small bound."""
  if m.broadphase == 'sap':
    return None
  nslot = sum(count * ncon for _, _, _, count, ncon, *_ in m.col_groups)
  return (2, max(nslot, 1), max(max(ncon for *_, ncon, _, _, _ in m.col_groups), 1))


def collision(m, d):
  """Contact detection (mj_collision): every contact of the current geom poses.

  reads  geom_xpos (ngeom, 3), geom_xmat (ngeom, 9) (after kinematics), warning_counts
  writes contact (Contact with nconmax rows; rows [0, ncon) hold the contacts in MuJoCo's
         order, the others geom1 = geom2 = -1 and dist = 1e10), ncon () int32,
         warning_counts[1] (mjWARN_CONTACTFULL: contacts and pairs that did not fit)

  With the contact or constraint disable flag, or nconmax = 0, nothing is detected (ncon = 0).
  A geom type pair that the model can collide but that has no narrowphase routine yet raises
  NotSupportedError when traced. See the module docstring for the broadphases and capacities.
  """
  from .primitive import frames  # late, as in _routines
  cap = m.nconmax
  dtype = d.geom_xpos.dtype
  blank = empty_contact(cap, dtype)
  if m.opt.cone == PYRAMIDAL and d.contact.H.shape == blank.H.shape:
    # contact.H (the elliptic cones' Hessians) is only written by the elliptic solver: a
    # pyramidal model keeps the buffer it has (zeros) instead of writing zeros every pass
    blank = dataclasses.replace(blank, H=d.contact.H)
  empty = dataclasses.replace(d, contact=blank, ncon=jnp.zeros((), jnp.int32))
  if cap == 0 or m.opt.disableflags & (DSBL_CONSTRAINT | DSBL_CONTACT) or not m.col_groups:
    return empty
  _check_supported(m)
  routines = _routines()
  override = bool(m.opt.enableflags & ENBL_OVERRIDE)
  xmat = d.geom_xmat.reshape(-1, 3, 3)
  if m.broadphase == 'sap':
    groups, dropped = _sweep_pairs(m, d, override)
  else:
    groups, dropped = _table_pairs(m, d, override)
  if not groups:
    return dataclasses.replace(
        empty, warning_counts=d.warning_counts.at[WARN_CONTACTFULL].add(dropped))

  # narrowphase, one geom type pair at a time (the convex searches of several type pairs share
  # one compiled search); each contact slot carries its pair's order keys and its index within
  # the pair
  parts, ccd, hf = [], [], []
  for t1, t2, ncon, h1, h2, pairid, keep, keys in groups:
    fn, n = routines[(t1, t2)]
    margin = _margin(m, h1, h2, pairid, override)
    if t1 == HFIELD:
      hf.append((t1, t2, fn, h1, h2, margin, pairid, keep, keys))
      continue
    if n != ncon:
      raise ValueError(f'{GEOM_TYPE_NAMES[t1]}-{GEOM_TYPE_NAMES[t2]}: the Model was built for '
                       f'{ncon} contacts per pair, the routine has {n}: rebuild it with '
                       'put_model')
    if _is_ccd(fn):
      ccd.append((t1, t2, fn, h1, h2, margin, pairid, keep, keys))
      continue
    res = _narrowphase(m, d, xmat, fn, t1, t2, h1, h2, margin)
    parts.append(_slots(res, n, h1, h2, pairid, keep, keys))
  if ccd:
    parts.append(_convex_narrowphase(m, d, xmat, ccd))
  if hf:
    parts.append(_hfield_narrowphase(m, d, xmat, hf, groups))
  dist, pos, normal, tangent, valid, g1, g2, pairid, index, *keys = (
      jnp.concatenate(x) for x in zip(*parts))
  # materialise the narrowphase results once: otherwise XLA may fuse the routines' last steps
  # into each later gather and recompute them
  dist, pos, normal, tangent, valid = jax.lax.optimization_barrier(
      (dist, pos, normal, tangent, valid))

  # keep the deepest contacts if they do not all fit, then sort them into MuJoCo's order
  nslot = dist.shape[0]
  nvalid = jnp.sum(valid, dtype=jnp.int32)
  if nslot > cap:
    idx = _deepest_slots(valid, dist, nvalid, cap)
  else:
    idx = jnp.arange(nslot, dtype=jnp.int32)
  sort_keys = [(~valid[idx]).astype(jnp.int32)] + [k[idx] for k in keys] + [index[idx]]
  idx = idx[_lex_order(sort_keys, _key_bounds(m))]
  nrow = idx.shape[0]
  ncon = jnp.minimum(nvalid, cap)
  used = jnp.arange(nrow) < ncon

  g1, g2, pairid = g1[idx], g2[idx], pairid[idx]
  dim, margin, gap, solref, solreffriction, solimp, friction = _params(
      m, g1, g2, pairid, override)
  dist = dist[idx]
  includemargin = margin - gap
  rows = {
      'dist': dist,
      # the frames of the kept contacts only (see primitive.Contacts)
      'pos': pos[idx], 'frame': frames(normal[idx], tangent[idx]).reshape(-1, 9),
      'includemargin': includemargin,
      'friction': friction, 'solref': solref, 'solreffriction': solreffriction,
      'solimp': solimp, 'dim': dim, 'geom1': g1, 'geom2': g2,
      'geom': jnp.stack([g1, g2], axis=-1),
      'exclude': (dist >= includemargin).astype(jnp.int32),
  }
  fields = {}
  for name, value in rows.items():
    blank = getattr(empty.contact, name)
    value = jnp.where(used.reshape((nrow,) + (1,) * (value.ndim - 1)),
                      value.astype(blank.dtype), blank[:nrow])
    fields[name] = blank.at[:nrow].set(value)
  contact = dataclasses.replace(empty.contact, **fields)
  overflow = jnp.maximum(nvalid - cap, 0) + dropped
  warning_counts = d.warning_counts.at[WARN_CONTACTFULL].add(overflow)
  return dataclasses.replace(d, contact=contact, ncon=ncon, warning_counts=warning_counts)


__all__ = ['Contact', 'collision', 'pair_tables', 'capacity', 'pair_capacity',
           'sweep_capacity']
