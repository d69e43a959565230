"""Primitive narrowphase routines against MuJoCo's mj_collision, pair type by pair type.

For every implemented pair type one two-geom MuJoCo model (an explicit <pair>, so broadphase
and bitmasks play no part) is compiled once; random relative poses, sizes and margins are
written into qpos / geom_pos / geom_quat / geom_size / pair_margin, MuJoCo collides them, and
one jax.jit(jax.vmap(fn)) call collides the same geoms (MuJoCo's geom_xpos / geom_xmat fed in).
Contacts are compared as unordered sets (matched by position): count, dist, normal, position
and the tangent rows of the frame. Cases: generic random, deep penetration, near touching
(shifted along the contact normal to dist = 0, +-1e-9, +-1e-6 or +-1e-3), axis-aligned /
parallel configurations, and hand-made degenerate ones (coincident centres, parallel axes, ...);
about 30% carry a positive margin. Two kinds of disagreement are decided by the last bit of
rounding and are counted, not failed (and must stay rare): a contact with dist == margin up to
rounding (MuJoCo's dist <= margin test), and box-box separating-axis ties (see _boxbox_tie).
A gradient test checks that d(sum of valid dist and pos) w.r.t. both poses is finite at
touching and degenerate configurations, in float32 and float64.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

from mjx_py.collision import primitive
from mjx_py.collision.primitive import BOX, CAPSULE, CYLINDER, PLANE, ROUTINES, SPHERE


@pytest.fixture(autouse=True, scope='module')
def _float64():
  """float64 for this module only (the global flag would leak into later test modules)."""
  previous = jax.config.jax_enable_x64
  jax.config.update('jax_enable_x64', True)
  yield
  jax.config.update('jax_enable_x64', previous)


NAMES = {PLANE: 'plane', SPHERE: 'sphere', CAPSULE: 'capsule', CYLINDER: 'cylinder', BOX: 'box'}
# the dedicated primitive routines (ROUTINES also holds the convex collider's pairs, tested in
# test_collision_convex.py)
PAIRS = sorted(p for p in ROUTINES if ROUTINES[p][0].__module__ == primitive.__name__)
NRANDOM, NDEEP, NALIGNED = 110, 45, 45   # per pair type, plus near-touching copies and specials
TOL_DIST, TOL_POS, TOL_ANGLE = 1e-6, 1e-6, 1e-4


# ---------------------------------------------------------------------------------------------
# MuJoCo side

def _model(t1, t2):
  def geom(name, t):
    return f'<geom name="{name}" type="{NAMES[t]}" size=".1 .1 .1" contype="0" conaffinity="0"/>'
  g1 = geom('g1', t1)
  if t1 != PLANE:
    g1 = f'<body name="b1"><freejoint/>{g1}</body>'
  xml = f"""<mujoco><worldbody>{g1}<body name="b2"><freejoint/>{geom('g2', t2)}</body>
    </worldbody><contact><pair geom1="g1" geom2="g2"/></contact></mujoco>"""
  m = mujoco.MjModel.from_xml_string(xml)
  m.geom_rbound[:] = 1e3   # sizes change per case: keep the bounding-sphere filter out of play
  return m, mujoco.MjData(m)


def _mujoco(m, d, case):
  """Sets one case (poses, sizes, margin), runs kinematics + collision. Returns the geom inputs
  of our routine and MuJoCo's contacts as a list of (dist, pos, frame (3, 3))."""
  for g, (pos, quat, size) in enumerate(case['geoms']):
    m.geom_size[g] = size
    if m.geom_bodyid[g] == 0:
      m.geom_pos[g], m.geom_quat[g] = pos, quat
    else:
      adr = m.jnt_qposadr[m.body_jntadr[m.geom_bodyid[g]]]
      d.qpos[adr:adr + 3], d.qpos[adr + 3:adr + 7] = pos, quat
  m.pair_margin[0] = case['margin']
  mujoco.mj_kinematics(m, d)
  mujoco.mj_collision(m, d)
  inputs = (d.geom_xpos[0].copy(), d.geom_xmat[0].reshape(3, 3).copy(), m.geom_size[0].copy(),
            d.geom_xpos[1].copy(), d.geom_xmat[1].reshape(3, 3).copy(), m.geom_size[1].copy(),
            float(case['margin']))
  cons = [(c.dist, c.pos.copy(), c.frame.reshape(3, 3).copy()) for c in d.contact[:d.ncon]]
  assert all(np.array_equal(c.geom, [0, 1]) for c in d.contact[:d.ncon])
  return inputs, cons


# ---------------------------------------------------------------------------------------------
# Cases

def _quat(rng):
  q = rng.standard_normal(4)
  return q / np.linalg.norm(q)


def _axis_angle(axis, angle):
  axis = np.asarray(axis, float) / np.linalg.norm(axis)
  return np.concatenate([[np.cos(angle / 2)], np.sin(angle / 2) * axis])


AXIS_QUATS = [np.array([1.0, 0, 0, 0])] + [
    _axis_angle(a, ang) for a in np.eye(3) for ang in (np.pi / 2, np.pi, -np.pi / 2)]


def _size(rng, t):
  if t == PLANE:
    return np.array([0.0, 0.0, 1.0])
  if t == SPHERE:
    return np.array([rng.uniform(0.03, 0.3), 0, 0])
  if t in (CAPSULE, CYLINDER):
    return np.array([rng.uniform(0.03, 0.2), rng.uniform(0.03, 0.3), 0])
  return rng.uniform(0.03, 0.3, 3)


def _radius(t, s):
  return {SPHERE: s[0], CAPSULE: s[0] + s[1], CYLINDER: np.hypot(s[0], s[1])}.get(
      t, np.linalg.norm(s))


def _case(rng, t1, t2, kind):
  s1, s2 = _size(rng, t1), _size(rng, t2)
  if kind == 'aligned':
    q1, q2 = AXIS_QUATS[rng.integers(len(AXIS_QUATS))], AXIS_QUATS[rng.integers(len(AXIS_QUATS))]
    if rng.uniform() < 0.3:   # aligned up to a rotation about the common z axis
      q2 = _axis_angle([0, 0, 1], rng.uniform(-np.pi, np.pi))
    if rng.uniform() < 0.3:   # identical sizes (exactly coincident faces / ends)
      s2 = s1.copy() if t1 == t2 else s2
  else:
    q1, q2 = _quat(rng), _quat(rng)
  if t1 == PLANE:
    p1 = rng.uniform(-0.2, 0.2, 3)
    normal = _rotmat(q1)[:, 2]
    tangent = rng.standard_normal(3) * 0.2
    if kind == 'aligned':
      p1, normal, tangent = np.zeros(3), np.array([0.0, 0, 1]), np.zeros(3)
      q1 = np.array([1.0, 0, 0, 0])
    r2 = _radius(t2, s2)
    h = r2 * (rng.uniform(-0.6, 0.3) if kind == 'deep' else rng.uniform(-0.2, 1.1))
    p2 = p1 + normal * h + tangent - normal * np.dot(tangent, normal)
  else:
    p1 = rng.uniform(-0.2, 0.2, 3)
    direction = rng.standard_normal(3)
    if kind == 'aligned':
      direction = np.eye(3)[rng.integers(3)] * rng.choice([-1, 1])
      direction = direction + rng.uniform(-0.3, 0.3, 3) * (rng.uniform() < 0.5)
    direction /= np.linalg.norm(direction)
    scale = _radius(t1, s1) + _radius(t2, s2)
    f = rng.uniform(0.0, 0.35) if kind == 'deep' else rng.uniform(0.3, 1.05)
    p2 = p1 + direction * scale * f
  margin = rng.uniform(0.001, 0.05) if rng.uniform() < 0.3 else 0.0
  return {'geoms': [(p1, q1, s1), (p2, q2, s2)], 'margin': margin, 'kind': kind}


def _rotmat(q):
  mat = np.zeros(9)
  mujoco.mju_quat2Mat(mat, q)
  return mat.reshape(3, 3)


def _specials(t1, t2):
  """Hand-made degenerate / aligned configurations for each pair type."""
  ident = np.array([1.0, 0, 0, 0])
  qx = _axis_angle([1, 0, 0], np.pi / 2)
  qz = _axis_angle([0, 0, 1], 0.3)
  cases = []

  def add(p1, q1, s1, p2, q2, s2, margin=0.0):
    cases.append({'geoms': [(np.asarray(p1, float), q1, np.asarray(s1, float)),
                            (np.asarray(p2, float), q2, np.asarray(s2, float))],
                  'margin': margin, 'kind': 'special'})

  pl = [0, 0, 1.0]
  z = np.zeros(3)
  if (t1, t2) == (PLANE, SPHERE):
    add(z, ident, pl, [0, 0, 0.1], ident, [0.1, 0, 0])          # exactly touching
    add(z, ident, pl, [0.3, 0, 0.05], ident, [0.1, 0, 0], 0.01)
    add(z, ident, pl, [0, 0, 0.0], ident, [0.1, 0, 0])          # centre on the plane
  if (t1, t2) == (PLANE, CAPSULE):
    add(z, ident, pl, [0, 0, 0.05], qx, [0.05, 0.2, 0])          # lying flat: two contacts
    add(z, ident, pl, [0, 0, 0.2], ident, [0.05, 0.2, 0])        # upright (tangent fallback)
    add(z, ident, pl, [0, 0, 0.24], ident, [0.05, 0.2, 0], 0.02)
  if (t1, t2) == (PLANE, CYLINDER):
    add(z, ident, pl, [0, 0, 0.19], ident, [0.1, 0.2, 0])        # disk parallel to the plane
    add(z, ident, pl, [0, 0, 0.09], qx, [0.1, 0.2, 0])           # lying on its side
    add(z, ident, pl, [0, 0, 0.21], ident, [0.1, 0.2, 0], 0.05)
    add(z, ident, pl, [0, 0, 0.0], qz, [0.1, 0.2, 0])
  if (t1, t2) == (PLANE, BOX):
    add(z, ident, pl, [0, 0, 0.19], ident, [0.1, 0.2, 0.2])      # face down, 4 corners
    add(z, ident, pl, [0, 0, 0.19], qz, [0.1, 0.2, 0.2], 0.02)
    add(z, ident, pl, [0, 0, 0.0], _axis_angle([1, 1, 0], 0.7), [0.1, 0.2, 0.3])
  if (t1, t2) == (SPHERE, SPHERE):
    add(z, ident, [0.1, 0, 0], z, ident, [0.2, 0, 0])            # coincident, parallel z
    add(z, ident, [0.1, 0, 0], z, qx, [0.2, 0, 0])               # coincident, crossed z
    add(z, ident, [0.1, 0, 0], [0.3, 0, 0], ident, [0.2, 0, 0])  # exactly touching
  if (t1, t2) == (SPHERE, CAPSULE):
    add(z, ident, [0.1, 0, 0], z, ident, [0.05, 0.2, 0])         # centre on the axis
    add([0, 0, 0.3], ident, [0.1, 0, 0], z, ident, [0.05, 0.2, 0])
    add([0.15, 0, 0.1], ident, [0.1, 0, 0], z, ident, [0.05, 0.2, 0])
  if (t1, t2) == (SPHERE, CYLINDER):
    add(z, ident, [0.05, 0, 0], z, ident, [0.1, 0.2, 0])         # centre at the centre
    add([0, 0, 0.15], ident, [0.05, 0, 0], z, ident, [0.1, 0.2, 0])
    add([0.12, 0, 0.22], ident, [0.05, 0, 0], z, ident, [0.1, 0.2, 0])   # rim
    add([0.12, 0, 0.0], ident, [0.05, 0, 0], z, ident, [0.1, 0.2, 0])    # side
    add([0.05, 0, 0.15], ident, [0.05, 0, 0], z, ident, [0.1, 0.2, 0])   # inside, cap nearer
  if (t1, t2) == (SPHERE, BOX):
    add(z, ident, [0.05, 0, 0], z, ident, [0.1, 0.2, 0.3])       # centre at the box centre
    add([0.05, 0.01, 0], ident, [0.05, 0, 0], z, qz, [0.1, 0.2, 0.3])
    add([0.15, 0, 0], ident, [0.05, 0, 0], z, ident, [0.1, 0.2, 0.3])    # exactly touching
    add([0.12, 0.22, 0.32], ident, [0.05, 0, 0], z, ident, [0.1, 0.2, 0.3], 0.02)  # corner
  if (t1, t2) == (CAPSULE, CAPSULE):
    add(z, ident, [0.05, 0.2, 0], z, ident, [0.05, 0.2, 0])      # identical
    add(z, ident, [0.05, 0.2, 0], [0.08, 0, 0.1], ident, [0.05, 0.2, 0])   # parallel, offset
    add(z, ident, [0.05, 0.2, 0], [0.08, 0, 0.1], _axis_angle([1, 0, 0], np.pi),
        [0.05, 0.1, 0])                                          # antiparallel
    add(z, qx, [0.05, 0.2, 0], [0.0, 0.0, 0.1], ident, [0.05, 0.2, 0])     # crossing
    add(z, ident, [0.05, 0.2, 0], [0.1, 0, 0.0], ident, [0.05, 0.2, 0], 0.01)  # touching
  if (t1, t2) == (CAPSULE, BOX):
    add([0, 0, 0.34], qx, [0.05, 0.2, 0], z, ident, [0.1, 0.2, 0.3])       # flat on top face
    add([0, 0, 0.34], _axis_angle([0, 1, 0], np.pi / 2), [0.05, 0.2, 0], z, ident,
        [0.1, 0.2, 0.3])
    add([0, 0, 0.5], ident, [0.05, 0.2, 0], z, ident, [0.1, 0.2, 0.3])     # upright on top
    add(z, ident, [0.05, 0.2, 0], z, ident, [0.1, 0.2, 0.3])               # centred inside
    add([0.14, 0.24, 0], ident, [0.05, 0.2, 0], z, ident, [0.1, 0.2, 0.3])  # along an edge
    add([0.0, 0.0, 0.34], _axis_angle([1, 1, 0], np.pi / 2), [0.05, 0.3, 0], z, qz,
        [0.1, 0.2, 0.3], 0.01)
    # a gripper finger beside the object, tilted by 1e-30 rad: a float32 axis component of
    # 1e-30 whose reciprocal's derivative overflows unless huge quotients are cut off
    add([0.16, 0, 0.1], _axis_angle([0, 1, 0], 1e-30), [0.05, 0.2, 0], z, ident,
        [0.1, 0.2, 0.3])
  if (t1, t2) == (BOX, BOX):
    s = [0.1, 0.1, 0.1]
    add(z, ident, s, [0, 0, 0.19], ident, s)                     # stacked, identical faces
    add(z, ident, s, [0, 0, 0.19], _axis_angle([0, 0, 1], 0.6), s)   # octagon overlap
    add(z, ident, s, [0.05, 0.02, 0.19], ident, [0.1, 0.2, 0.1])
    add(z, ident, s, z, ident, s)                                # coincident
    add(z, ident, [0.1, 0.2, 0.3], [0, 0, 0.59], ident, [0.2, 0.1, 0.3], 0.02)  # near, margin
    add(z, ident, s, [0.17, 0, 0.17], _axis_angle([0, 1, 0], np.pi / 4), s)   # edge on face
    add(z, _axis_angle([1, 0, 0], np.pi / 4), s, [0, 0, 0.27],
        _axis_angle([0, 1, 0], np.pi / 4), s)                    # crossed edges
  return cases


def _cases(t1, t2, m, d, rng):
  cases = [_case(rng, t1, t2, 'random') for _ in range(NRANDOM)]
  cases += [_case(rng, t1, t2, 'deep') for _ in range(NDEEP)]
  cases += [_case(rng, t1, t2, 'aligned') for _ in range(NALIGNED)]
  # near-touching copies: move geom 2 along the deepest contact's normal to just touch
  touching = []
  for case in cases:
    _, cons = _mujoco(m, d, case)
    if not cons:
      continue
    dist, _, frame = min(cons, key=lambda c: c[0])
    eps = rng.choice([0.0, 1e-9, -1e-9, 1e-6, -1e-6, 1e-3, -1e-3])
    shift = (-dist * (2 if (t1, t2) == (BOX, BOX) else 1) + eps) * frame[0]
    (p1, q1, s1), (p2, q2, s2) = case['geoms']
    touching.append({'geoms': [(p1, q1, s1), (p2 + shift, q2, s2)], 'margin': case['margin'],
                     'kind': 'touching'})
  return cases + touching + _specials(t1, t2)


# ---------------------------------------------------------------------------------------------
# Comparison

def _angle(a, b):
  return np.arctan2(np.linalg.norm(np.cross(a, b)), np.dot(a, b))


def _match(got, ref, scale, hint):
  """Errors (dist, pos / scale, normal angle, tangent angle) of ``got`` against MuJoCo's ``ref``
  (lists of (dist, pos, frame)), matched by nearest position; None if the counts differ."""
  if len(got) != len(ref):
    return None
  errs = np.zeros(4)
  unused = list(range(len(got)))
  for dist, pos, frame in ref:
    j = min(unused, key=lambda i: np.linalg.norm(got[i][1] - pos))
    unused.remove(j)
    gd, gp, gf = got[j]
    tangent = max(_angle(gf[1], frame[1]), _angle(gf[2], frame[2]))
    # tangents are ill-conditioned where the hint (capsule axis) is nearly the normal, or
    # where the default hint switches (|normal_y| = 0.5): not compared there
    if hint is not None and np.linalg.norm(hint - np.dot(hint, frame[0]) * frame[0]) < 1e-6:
      tangent = 0.0
    if hint is None and abs(abs(frame[0, 1]) - 0.5) < 1e-9:
      tangent = 0.0
    errs = np.maximum(errs, [abs(gd - dist), np.linalg.norm(gp - pos) / scale,
                             _angle(gf[0], frame[0]), tangent])
  return errs


def _on_boundary(got, ref, margin):
  """True if the contacts present on one side only all have dist == margin up to rounding:
  MuJoCo's dist <= margin test then decides by the last bit, which neither side controls."""
  big, small = (got, ref) if len(got) > len(ref) else (ref, got)
  extra = [c for c in big if all(np.linalg.norm(c[1] - o[1]) > 1e-9 for o in small)]
  return bool(extra) and all(abs(c[0] - margin) < 1e-12 for c in extra)


def _boxbox_tie(pos1, mat1, size1, pos2, mat2, size2, margin):
  """True if the box-box separating-axis choice is a tie up to rounding: two face axes (e.g.
  parallel faces of stacked boxes), or a face axis and an edge-edge axis parallel to it (with
  penetration ~0, MuJoCo's 1e-12 relative preference for faces is below rounding). MuJoCo's
  plain double arithmetic and XLA's (which fuses multiply-adds) then break the tie
  independently, and the two choices can yield different (equally valid) contact sets."""
  pos21 = mat1.T @ (pos2 - pos1)
  pos12 = mat2.T @ (pos1 - pos2)
  rot = mat1.T @ mat2
  rotabs = np.abs(rot)
  vals = list(-np.abs(pos21) + size1 + rotabs @ size2)
  vals += list(-np.abs(pos12) + size2 + rotabs.T @ size1)
  for i in range(3):
    for j in range(3):
      ax = np.cross(np.eye(3)[i], rot[:, j])
      nrm = np.linalg.norm(ax)
      if nrm < 1e-15:
        continue
      ext = sum(size1[k] * abs(ax[k]) / nrm for k in range(3) if k != i)
      ext += sum(size2[k] * rotabs[i, 3 - k - j] / nrm for k in range(3) if k != j)
      vals.append(ext - abs(pos21 @ ax) / nrm)
  vals = np.sort(vals)
  return vals[1] - vals[0] < 1e-12


def _compare(t1, t2, seed=0):
  """Runs all cases of one pair type through MuJoCo and our routine; returns statistics."""
  fn, n = ROUTINES[(t1, t2)]
  m, d = _model(t1, t2)
  rng = np.random.default_rng(seed + 97 * t1 + t2)
  cases = _cases(t1, t2, m, d, rng)
  inputs, refs = zip(*[_mujoco(m, d, c) for c in cases])
  batch = [np.stack(x) for x in zip(*inputs)]
  ours = jax.jit(jax.vmap(fn))(*batch)
  ours = jax.tree_util.tree_map(np.asarray, ours)
  assert ours.dist.shape == (len(cases), n)

  stats = {'cases': len(cases), 'contacts': 0, 'dist': 0.0, 'pos': 0.0, 'normal': 0.0,
           'tangent': 0.0, 'max_count': 0, 'boundary': 0, 'tie': 0, 'failures': []}
  frame = np.asarray(ours.frame)      # formed once (a property computed in JAX)
  for k, (inp, ref) in enumerate(zip(inputs, refs)):
    got = [(ours.dist[k, i], ours.pos[k, i], frame[k, i]) for i in range(n)
           if ours.valid[k, i]]
    stats['max_count'] = max(stats['max_count'], len(ref))
    scale = max(np.max(inp[2]) if t1 != PLANE else 0.0, np.max(inp[5]))
    hint = inp[4][:, 2] if (t1, t2) == (PLANE, CAPSULE) else None
    errs = _match(got, ref, scale, hint)
    if errs is not None and errs[0] < TOL_DIST and errs[1] < TOL_POS and max(errs[2:]) < TOL_ANGLE:
      stats['contacts'] += len(ref)
      for key, e in zip(('dist', 'pos', 'normal', 'tangent'), errs):
        stats[key] = max(stats[key], e)
    elif errs is None and _on_boundary(got, ref, inp[6]):
      stats['boundary'] += 1
    elif (t1, t2) == (BOX, BOX) and _boxbox_tie(*inp):
      stats['tie'] += 1
    else:
      stats['failures'].append((k, cases[k]['kind'], len(ref), len(got), errs))
  return stats


@pytest.mark.parametrize('pair', PAIRS, ids=[f'{NAMES[a]}-{NAMES[b]}' for a, b in PAIRS])
def test_matches_mujoco(pair):
  stats = _compare(*pair)
  assert not stats['failures'], stats['failures'][:10]
  assert stats['cases'] >= 200
  assert stats['contacts'] >= 100, stats
  # rounding-decided cases (see _on_boundary, _boxbox_tie) must stay rare
  assert stats['boundary'] + stats['tie'] <= 0.03 * stats['cases'], stats
  assert stats['max_count'] <= ROUTINES[pair][1]
  assert stats['dist'] < TOL_DIST, stats
  assert stats['pos'] < TOL_POS, stats
  assert stats['normal'] < TOL_ANGLE, stats
  assert stats['tangent'] < TOL_ANGLE, stats


# ---------------------------------------------------------------------------------------------
# Gradients

def _grad_cases(t1, t2):
  """Touching and degenerate inputs of our routine (pos1, mat1, size1, pos2, mat2, size2,
  margin), computed with MuJoCo's kinematics from the special cases plus exact contacts."""
  m, d = _model(t1, t2)
  cases = _specials(t1, t2)
  return [_mujoco(m, d, c)[0] for c in cases]


@pytest.mark.parametrize('dtype', [np.float32, np.float64])
@pytest.mark.parametrize('pair', PAIRS, ids=[f'{NAMES[a]}-{NAMES[b]}' for a, b in PAIRS])
def test_gradients_finite(pair, dtype):
  fn, _ = ROUTINES[pair]

  def loss(pos1, mat1, pos2, mat2, size1, size2, margin):
    c = fn(pos1, mat1, size1, pos2, mat2, size2, margin)
    w = c.valid.astype(c.dist.dtype)
    return jnp.sum(c.dist * w) + jnp.sum(c.pos * w[:, None])

  inputs = _grad_cases(*pair)
  batch = [np.stack(x).astype(dtype) for x in zip(*inputs)]
  pos1, mat1, size1, pos2, mat2, size2, margin = batch
  grads = jax.jit(jax.vmap(jax.grad(loss, argnums=(0, 1, 2, 3))))(
      pos1, mat1, pos2, mat2, size1, size2, margin)
  for g in grads:
    assert g.dtype == dtype
    assert np.all(np.isfinite(g)), pair
  out = jax.jit(jax.vmap(fn))(pos1, mat1, size1, pos2, mat2, size2, margin)
  for leaf in out:
    assert np.all(np.isfinite(leaf)) if leaf.dtype != bool else True
    assert leaf.dtype in (dtype, np.bool_)


def test_routines_table():
  assert set(PAIRS) == {(PLANE, SPHERE), (PLANE, CAPSULE), (PLANE, CYLINDER), (PLANE, BOX),
                           (SPHERE, SPHERE), (SPHERE, CAPSULE), (SPHERE, CYLINDER),
                           (SPHERE, BOX), (CAPSULE, CAPSULE), (CAPSULE, BOX), (BOX, BOX)}
  assert [ROUTINES[p][1] for p in PAIRS] == [1, 2, 4, 4, 1, 1, 1, 1, 2, 2, 9]
  assert primitive.Contacts._fields == ('dist', 'pos', 'normal', 'tangent', 'valid')
