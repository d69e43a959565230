"""Collision driver: MuJoCo's ``mj_collision`` for one world (engine_collision_driver.c, 3.3.3).

Host side (numpy, at ``put_model``): ``pair_tables`` lists every geom pair that can ever collide,
in MuJoCo's order, and groups them by geom-type pair; ``capacity`` picks the static size of the
contact buffer. Device side: ``collision(m, d)`` runs a bounding-sphere broadphase over all those
pairs, the narrowphase routine of each type pair (``primitive.ROUTINES``) vmapped over the pairs
that survive, mixes the contact parameters (``mj_contactParam``) and writes ``d.contact``,
``d.ncon``.

Candidate pairs (MuJoCo's filters, applied once on the host; see notes/semantics.md section 6):

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
test or the narrowphase would reject too, so the candidates' order is static: each candidate gets
a static slot address (``col_conadr``) in that order, and a world's contacts are the valid slots
sorted by address.

Geoms are swapped so that ``geom_type[geom1] <= geom_type[geom2]`` (MuJoCo swaps only when
strictly greater); the contact normal points from geom1 to geom2.

Model fields (engine-only, int32): ``col_geom`` (ncandidate, 2) geom ids, grouped by type pair;
``col_pairid`` (ncandidate,) explicit pair id or -1; ``col_conadr`` (ncandidate,) first contact
slot of the candidate in MuJoCo's order. Static: ``col_groups``, one entry per type pair
``(type1, type2, start, count, ncon, example_geom1, example_geom2)``, and ``nconmax``.

Capacity (``nconmax``, static): ``put_model(..., nconmax=N)`` if given, else ``<size nconmax>``
if it is >= 0 (0, as in MuJoCo, means no collision detection at all), else
``min(total, max(64, 6 * ngeom_collide))``: ``total`` is the most contacts all candidates can
produce at once (sum of each pair's routine size, so small models are never truncated), and
``ngeom_collide`` the number of geoms that appear in some candidate pair (six contacts per geom
covers boxes resting on a floor and on each other).

When more contacts are found than fit, the deepest (smallest ``dist``) are kept, still in
MuJoCo's order, and ``warning_counts[1]`` (mjWARN_CONTACTFULL) grows by the number left out. The
narrowphase of one type pair runs on at most ``min(count, nconmax)`` pairs: when more pass the
broadphase, those that overlap their bounding spheres the most are kept, and the pairs left out
are also counted in ``warning_counts[1]`` (whether or not they would have touched). Results are
exact whenever that counter does not grow.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from ..data import Contact, empty_contact
from ..errors import NotSupportedError
from ..math import MINVAL, safe_norm

PLANE, HFIELD, SPHERE, CAPSULE, ELLIPSOID, CYLINDER, BOX, MESH, SDF = range(9)
GEOM_TYPE_NAMES = ('plane', 'hfield', 'sphere', 'capsule', 'ellipsoid', 'cylinder', 'box', 'mesh',
                   'sdf')
DSBL_CONSTRAINT, DSBL_CONTACT, DSBL_FILTERPARENT = 1, 16, 1 << 9
ENBL_OVERRIDE, ENBL_MULTICCD = 1, 1 << 4
MINMU = 1e-5           # mjMINMU
WARN_CONTACTFULL = 1   # mjtWarning
MIN_NCONMAX = 64       # default capacity: at least this many contacts ...
NCON_PER_GEOM = 6      # ... or this many per colliding geom (never more than can occur)


def _routines() -> dict:
  from . import primitive  # imported late: model.py needs this module on the host only
  return primitive.ROUTINES


def _max_contacts(t1: int, t2: int, enableflags: int) -> int:
  """Slots per pair: the routine's size; for pair types without a routine (collision raises
  for them) MuJoCo's mj_maxContact, so that the default capacity stays meaningful."""
  routines = _routines()
  if (t1, t2) in routines:
    return int(routines[(t1, t2)][1])
  if HFIELD in (t1, t2):
    return 50                            # mjMAXCONPAIR
  if SPHERE in (t1, t2) or ELLIPSOID in (t1, t2):
    return 1
  if t1 == PLANE:
    return 3 if t2 == MESH else 4
  return 4 if enableflags & ENBL_MULTICCD else 1


# ---------------------------------------------------------------------------------------------
# Host side: candidate pair tables and capacity

def pair_tables(arrays: dict) -> dict:
  """Candidate geom pairs of a compiled model (numpy, host only); see the module docstring.

  arrays: the compiler's dict of MuJoCo-named arrays. Returns the Model fields ``col_geom``,
  ``col_pairid``, ``col_conadr`` (int32 arrays), ``col_groups`` (tuple) and the counts
  ``ncandidate``, ``ncon_total`` (most contacts all candidates can produce at once) and
  ``ngeom_collide`` (geoms that appear in a candidate pair).
  """
  gtype = np.asarray(arrays['geom_type'], np.int64).reshape(-1)
  ngeom = gtype.size
  body = np.asarray(arrays['geom_bodyid'], np.int64).reshape(-1)
  weld = np.asarray(arrays['body_weldid'], np.int64).reshape(-1)
  parent = np.asarray(arrays['body_parentid'], np.int64).reshape(-1)
  contype = np.asarray(arrays['geom_contype'], np.int64).reshape(-1)
  conaff = np.asarray(arrays['geom_conaffinity'], np.int64).reshape(-1)
  exclude = np.asarray(arrays['exclude_signature'], np.int64).reshape(-1)
  pg1 = np.asarray(arrays['pair_geom1'], np.int64).reshape(-1)
  pg2 = np.asarray(arrays['pair_geom2'], np.int64).reshape(-1)
  psig = np.asarray(arrays['pair_signature'], np.int64).reshape(-1)
  disable = int(arrays['opt_disableflags'])
  enable = int(arrays['opt_enableflags'])

  # dynamic pairs (g1 < g2: geoms are stored body by body, so body1 <= body2)
  g1, g2 = np.triu_indices(ngeom, 1)
  b1, b2 = body[g1], body[g2]
  w1, w2 = weld[b1], weld[b2]
  keep = w1 != w2                                    # same weld group, or both static
  keep &= ((contype[g1] & conaff[g2]) | (contype[g2] & conaff[g1])) != 0
  if not disable & DSBL_FILTERPARENT:
    p1, p2 = weld[parent[w1]], weld[parent[w2]]
    keep &= ~((w1 != 0) & (w2 != 0) & ((w1 == p2) | (w2 == p1)))
  sig = (b1 << 16) + b2
  keep &= ~np.isin(sig, exclude)
  if pg1.size:                                       # explicit pairs take precedence
    explicit = np.minimum(pg1, pg2) * ngeom + np.maximum(pg1, pg2)
    keep &= ~np.isin(g1 * ngeom + g2, explicit)
  g1, g2, sig = g1[keep], g2[keep], sig[keep]

  # all candidates: explicit first in the key (signature, explicit?, ...), as MuJoCo's merge
  cg1 = np.concatenate([pg1, g1])
  cg2 = np.concatenate([pg2, g2])
  pairid = np.concatenate([np.arange(pg1.size), -np.ones(g1.size, np.int64)])
  order = np.lexsort((cg2, cg1, np.concatenate([np.arange(pg1.size), np.zeros(g1.size)]),
                      pairid < 0, np.concatenate([psig, sig])))
  cg1, cg2, pairid = cg1[order], cg2[order], pairid[order]
  swap = gtype[cg1] > gtype[cg2]
  cg1, cg2 = np.where(swap, cg2, cg1), np.where(swap, cg1, cg2)
  t1, t2 = gtype[cg1], gtype[cg2]
  ok = ~((t1 <= HFIELD) & (t2 <= HFIELD))  # MuJoCo has no plane/hfield-plane/hfield function
  cg1, cg2, pairid, t1, t2 = cg1[ok], cg2[ok], pairid[ok], t1[ok], t2[ok]

  # slot addresses in MuJoCo's order, then group by type pair (stable: keeps that order)
  ntype = len(GEOM_TYPE_NAMES)
  code = t1 * ntype + t2
  ncon = {(int(c) // ntype, int(c) % ntype): 0 for c in np.unique(code)}
  table = np.zeros(ntype * ntype, np.int64)
  for a, b in ncon:
    ncon[(a, b)] = table[a * ntype + b] = _max_contacts(a, b, enable)
  nslot = table[code]
  conadr = np.concatenate([[0], np.cumsum(nslot)[:-1]]) if nslot.size else nslot
  group = np.lexsort((t2, t1))
  cg1, cg2, pairid, conadr, t1, t2 = (x[group] for x in (cg1, cg2, pairid, conadr, t1, t2))
  groups = []
  start = 0
  for a, b in sorted(ncon):
    count = int(np.sum((t1 == a) & (t2 == b)))
    groups.append((a, b, start, count, ncon[(a, b)], int(cg1[start]), int(cg2[start])))
    start += count
  return {
      'col_geom': np.stack([cg1, cg2], axis=1).reshape(-1, 2).astype(np.int32),
      'col_pairid': pairid.astype(np.int32),
      'col_conadr': conadr.astype(np.int32),
      'col_groups': tuple(groups),
      'ncandidate': int(cg1.size),
      'ncon_total': int(np.sum(nslot)),
      'ngeom_collide': int(np.unique(np.concatenate([cg1, cg2])).size),
  }


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
  return int(min(tables['ncon_total'],
                 max(MIN_NCONMAX, NCON_PER_GEOM * tables['ngeom_collide'])))


# ---------------------------------------------------------------------------------------------
# Device side

def _geom_name(m, g: int) -> str:
  for kind, names in m.names:
    if kind == 'geom' and g < len(names) and names[g]:
      return f"'{names[g]}'"
  return f'id {g}'


def _check_supported(m):
  """NotSupportedError (at trace time) for a type pair without a narrowphase routine."""
  routines = _routines()
  for t1, t2, _, count, _, ex1, ex2 in m.col_groups:
    if (t1, t2) not in routines:
      raise NotSupportedError(
          f'collision between geom types {GEOM_TYPE_NAMES[t1]} and {GEOM_TYPE_NAMES[t2]} is '
          f'not implemented yet ({count} candidate pair(s), e.g. geoms {_geom_name(m, ex1)} and '
          f'{_geom_name(m, ex2)}); disable these contacts with contype/conaffinity or <exclude>, '
          'or all contacts with <option><flag contact="disable"/></option>')


def _margin(m, g1, g2, pairid, override):
  """Detection margin of each pair (mj_assignMargin of the pair margin or the geoms' max)."""
  if override:
    return jnp.broadcast_to(m.opt.o_margin, g1.shape)
  dyn = jnp.maximum(m.geom_margin[g1], m.geom_margin[g2])
  if not m.npair:
    return dyn
  return jnp.where(pairid >= 0, m.pair_margin[jnp.maximum(pairid, 0)], dyn)


def _bound_test(m, d, t1, g1, g2, margin):
  """MuJoCo's bounding test (mj_filterSphere): (keep (n,) bool, slack (n,)).

  Geoms with rbound > 0 are tested as spheres (rbound1 + rbound2 + margin); a plane (geom1,
  rbound 0) keeps geoms whose centre is within rbound2 + margin above it; rbound 0 otherwise
  means unbounded. ``slack`` (distance beyond the bound; smaller overlaps more) ranks the pairs
  when a type pair has more survivors than it can run.
  """
  p1, p2 = d.geom_xpos[g1], d.geom_xpos[g2]
  r1, r2 = m.geom_rbound[g1], m.geom_rbound[g2]
  both = (r1 > 0) & (r2 > 0)
  dif = p1 - p2
  bound = r1 + r2 + margin
  far = both & (jnp.sum(dif * dif, axis=-1) > bound * bound)
  slack = safe_norm(dif) - bound
  if t1 == PLANE:
    normal = d.geom_xmat[g1][:, 2::3]     # the plane's z axis (column 2 of xmat)
    pdist = jnp.sum((p2 - p1) * normal, axis=-1)
    far = far | (~both & (r2 > 0) & (pdist > margin + r2))
    slack = jnp.where(both, slack, pdist - margin - r2)
  return ~far, jax.lax.stop_gradient(slack)


def _select(keep, slack, k):
  """(indices (k,), selected (k,) bool) of the pairs to run: all the kept ones (in order) when
  at most k are kept, else the k kept pairs that overlap their bounds the most (top_k is only
  paid when that happens, except under vmap, where both branches run)."""
  nkeep = jnp.sum(keep, dtype=jnp.int32)

  def first(_):
    sel = jnp.nonzero(keep, size=k, fill_value=0)[0].astype(jnp.int32)
    return sel, jnp.arange(k) < nkeep

  def deepest(_):
    dtype = slack.dtype
    score = jnp.where(keep, -jnp.where(jnp.isnan(slack), jnp.finfo(dtype).max, slack), -jnp.inf)
    sel = jax.lax.top_k(score, k)[1].astype(jnp.int32)
    return sel, keep[sel]

  return jax.lax.cond(nkeep <= k, first, deepest, None)


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


def collision(m, d):
  """Contact detection (mj_collision): every contact of the current geom poses.

  reads  geom_xpos (ngeom, 3), geom_xmat (ngeom, 9) (after kinematics), warning_counts
  writes contact (Contact with nconmax rows; rows [0, ncon) hold the contacts in MuJoCo's
         order, the others geom1 = geom2 = -1 and dist = 1e10), ncon () int32,
         warning_counts[1] (mjWARN_CONTACTFULL: contacts and pairs that did not fit)

  With the contact or constraint disable flag, or nconmax = 0, nothing is detected (ncon = 0).
  A geom type pair that the model can collide but that has no narrowphase routine yet raises
  NotSupportedError when traced. See the module docstring for the pair tables and capacity.
  """
  cap = m.nconmax
  dtype = d.geom_xpos.dtype
  empty = dataclasses.replace(d, contact=empty_contact(cap, dtype),
                              ncon=jnp.zeros((), jnp.int32))
  if cap == 0 or m.opt.disableflags & (DSBL_CONSTRAINT | DSBL_CONTACT) or not m.col_groups:
    return empty
  _check_supported(m)
  routines = _routines()
  override = bool(m.opt.enableflags & ENBL_OVERRIDE)
  xmat = d.geom_xmat.reshape(-1, 3, 3)

  # broadphase and narrowphase, one geom type pair at a time
  parts = []
  dropped = jnp.zeros((), jnp.int32)
  for t1, t2, start, count, n, _, _ in m.col_groups:
    fn, nfn = routines[(t1, t2)]
    if nfn != n:
      raise ValueError(f'{GEOM_TYPE_NAMES[t1]}-{GEOM_TYPE_NAMES[t2]}: the Model was built for '
                       f'{n} contacts per pair, the routine has {nfn}: rebuild it with put_model')
    geom = m.col_geom[start:start + count]
    pairid = m.col_pairid[start:start + count]
    g1, g2 = geom[:, 0], geom[:, 1]
    margin = _margin(m, g1, g2, pairid, override)
    keep, slack = _bound_test(m, d, t1, g1, g2, margin)
    npick = min(count, cap)
    if npick < count:
      sel, keep_sel = _select(keep, slack, npick)
      dropped += jnp.sum(keep, dtype=jnp.int32) - jnp.sum(keep_sel, dtype=jnp.int32)
    else:
      sel = jnp.arange(count, dtype=jnp.int32)
      keep_sel = keep
    h1, h2 = g1[sel], g2[sel]
    res = jax.vmap(fn)(d.geom_xpos[h1], xmat[h1], m.geom_size[h1], d.geom_xpos[h2], xmat[h2],
                       m.geom_size[h2], margin[sel])
    cand = start + sel
    parts.append((
        res.dist.reshape(-1), res.pos.reshape(-1, 3), res.frame.reshape(-1, 9),
        (res.valid & keep_sel[:, None]).reshape(-1),
        (m.col_conadr[cand][:, None] + jnp.arange(n, dtype=jnp.int32)).reshape(-1),
        jnp.repeat(cand, n)))
  dist, pos, frame, valid, key, cand = (jnp.concatenate(x) for x in zip(*parts))

  # keep the deepest contacts if they do not all fit, then sort them into MuJoCo's order
  nslot = dist.shape[0]
  nvalid = jnp.sum(valid, dtype=jnp.int32)
  if nslot > cap:
    depth = jnp.where(valid, jnp.where(jnp.isnan(dist), jnp.finfo(dtype).max, dist), jnp.inf)
    _, idx = jax.lax.top_k(-jax.lax.stop_gradient(depth), cap)
  else:
    idx = jnp.arange(nslot, dtype=jnp.int32)
  big = jnp.iinfo(jnp.int32).max // 2
  rank = jnp.where(valid[idx], jnp.minimum(key[idx], big - 1), big + jnp.arange(idx.shape[0]))
  idx = idx[jnp.argsort(rank)]
  nrow = idx.shape[0]
  ncon = jnp.minimum(nvalid, cap)
  used = jnp.arange(nrow) < ncon

  c = cand[idx]
  g1, g2, pairid = m.col_geom[c, 0], m.col_geom[c, 1], m.col_pairid[c]
  dim, margin, gap, solref, solreffriction, solimp, friction = _params(
      m, g1, g2, pairid, override)
  dist = dist[idx]
  includemargin = margin - gap
  rows = {
      'dist': dist,
      'pos': pos[idx], 'frame': frame[idx], 'includemargin': includemargin,
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


__all__ = ['Contact', 'collision', 'pair_tables', 'capacity']
