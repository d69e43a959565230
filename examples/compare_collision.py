"""Contact-rich collision benchmark: mjx_py (both broadphases) vs MJX vs MuJoCo C.

Run: python examples/compare_collision.py [--scenes pile box_stack humanoid] [--batch 1 64 256]
     [--paths table sap] [--npairmax N] [--reps 20] [--mjx-reps 3] [--no-mjx] [--x64]

Scenes, each settled by MuJoCo's own mj_step before timing:
  pile       300 free boxes and spheres (half size 0.05) in a bin of five planes (46,350 candidate
             geom pairs, ~950 contacts); nconmax 1200
  box_stack  models/box_stack.xml from rest (boxes, sphere, cylinder, capsule on a plane)
  humanoid   models/humanoid.xml lying on its back on the plane
Times the collision stage alone: ``jax.jit`` of ``mjx_py.collision.driver.collision`` (table and
sap broadphases) and of ``mujoco.mjx.collision``, on states whose kinematics already ran (the
settled state, slightly perturbed per world), at each batch size (``jax.vmap`` over worlds);
per call and per world, plus the compile times; and ``mujoco.mj_collision`` in C on the settled
state, single-threaded, in the same process. Needs the bench extra (mujoco, mujoco-mjx).

``--npairmax N`` caps the pairs of one geom type pair whose narrowphase runs (mjx_py's npairmax,
default nconmax; on the pile, MJX's ``max_geom_pairs`` too): the narrowphase, not the
broadphase, dominates both engines, and its cost and memory are set by that cap (the settled
pile needs at most ~250 per type pair, so 300 is exact there; the script prints the overflow
counter if it is not).

MJX lists every candidate pair statically (no broadphase) and lacks some pair types (the script
says which, when it refuses a scene); on the pile it gets MJX's own capacity numerics
(``max_geom_pairs``, ``max_contact_points``), else its contact arrays hold every candidate's
contacts. MJX on CPU is slow: it runs ``--mjx-reps`` repetitions only.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

import mjx_py
from mjx_py import kinematics, mjcf
from mjx_py.collision import driver

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---------------------------------------------------------------------------------------------
# scenes

def pile_xml(nbody=300, half=0.9, spacing=0.18, seed=0, extra=''):
  """nbody free spheres and boxes (every other body) on a jittered grid of layers inside a bin
  of planes (the same scene as tests/test_collision_broadphase.py)."""
  rng = np.random.default_rng(seed)
  n = int(round(2 * half / spacing))
  walls = ''.join(f'<geom type="plane" pos="{x} {y} 0" zaxis="{-np.sign(x)} {-np.sign(y)} 0" '
                  f'size="{half} 0.5 0.1"/>'
                  for x, y in ((half, 0), (-half, 0), (0, half), (0, -half)))
  bodies = []
  for i in range(nbody):
    layer, cell = divmod(i, n * n)
    x = -half + spacing * (cell % n + 0.5) + rng.uniform(-0.02, 0.02)
    y = -half + spacing * (cell // n + 0.5) + rng.uniform(-0.02, 0.02)
    q = rng.standard_normal(4)
    q /= np.linalg.norm(q)
    geom = ('<geom type="box" size="0.05 0.05 0.05"/>' if i % 2 else
            '<geom type="sphere" size="0.05"/>')
    bodies.append(f'<body pos="{x:.4f} {y:.4f} {0.1 + spacing * layer:.4f}" '
                  f'quat="{q[0]:.4f} {q[1]:.4f} {q[2]:.4f} {q[3]:.4f}"><freejoint/>{geom}</body>')
  return ('<mujoco><option timestep="0.005"/>' + extra + '<worldbody>'
          '<geom name="floor" type="plane" size="2 2 0.1"/>' + walls + ''.join(bodies)
          + '</worldbody></mujoco>')


def _read(name):
  with open(os.path.join(ROOT, 'models', name)) as f:
    return f.read()


def scenes(npairmax=None):
  """{name: (xml, mjx_xml or None, nconmax or None, settle(mj, md))}"""
  import mujoco

  def settle(nstep, init=None):
    def run(mj, md):
      if init is not None:
        init(mj, md)
      for _ in range(nstep):
        mujoco.mj_step(mj, md)
    return run

  def lying(mj, md):
    md.qpos[:3] = (0, 0, 0.12)
    md.qpos[3:7] = (np.cos(np.pi / 4), 0, -np.sin(np.pi / 4), 0)   # on its back
    md.ctrl[:] = 0

  mjx_limits = (f'<custom><numeric name="max_geom_pairs" data="{npairmax or 1200}"/>'
                '<numeric name="max_contact_points" data="1200"/></custom>')
  return {
      'pile': (pile_xml(), pile_xml(extra=mjx_limits), 1200, settle(400)),
      'box_stack': (_read('box_stack.xml'), None, None, settle(300)),
      'humanoid': (_read('humanoid.xml'), None, None, settle(200, lying)),
  }


# ---------------------------------------------------------------------------------------------
# timing

def _time(fn, args, reps):
  """(compile seconds, seconds per call) of jax.jit(fn)(*args)."""
  t0 = time.perf_counter()
  compiled = jax.jit(fn).lower(*args).compile()
  compile_s = time.perf_counter() - t0
  jax.block_until_ready(compiled(*args))
  best = np.inf
  for _ in range(max(reps // 5, 1)):   # best of a few runs of `reps // 5` calls (noisy hosts)
    t0 = time.perf_counter()
    for _ in range(min(reps, 5)):
      out = compiled(*args)
    jax.block_until_ready(out)
    best = min(best, (time.perf_counter() - t0) / min(reps, 5))
  return compile_s, best


def _states(mj, md, batch, seed=0):
  """batch qpos: the settled state, positions perturbed by 1e-4 (the first world unperturbed)."""
  import mujoco
  rng = np.random.default_rng(seed)
  q = np.tile(md.qpos, (batch, 1))
  q[1:] += 1e-4 * rng.standard_normal(q[1:].shape)
  for j in range(mj.njnt):
    adr = mj.jnt_qposadr[j]
    if mj.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE:
      q[:, adr + 3:adr + 7] /= np.linalg.norm(q[:, adr + 3:adr + 7], axis=1, keepdims=True)
    elif mj.jnt_type[j] == mujoco.mjtJoint.mjJNT_BALL:
      q[:, adr:adr + 4] /= np.linalg.norm(q[:, adr:adr + 4], axis=1, keepdims=True)
  return q


def time_ours(arrays, nconmax, broadphase, npairmax, qs, reps):
  """Rows (batch, compile s, s per call, ncon of world 0, overflow, Model) of our collision
  stage; arrays: the compiled model (mjx_py.mjcf.compile_string)."""
  m = mjx_py.put_model(arrays, nconmax=nconmax, broadphase=broadphase, npairmax=npairmax)
  d0 = mjx_py.make_data(m)
  kin = jax.jit(jax.vmap(lambda q: kinematics.kinematics(m, dataclasses.replace(d0, qpos=q))))
  rows = []
  for q in qs:
    d = kin(jnp.asarray(q, d0.qpos.dtype))
    if q.shape[0] == 1:
      d = jax.tree_util.tree_map(lambda x: x[0], d)
      fn = driver.collision
    else:
      fn = jax.vmap(driver.collision, in_axes=(None, 0))
    compile_s, per_call = _time(fn, (m, d), reps)
    out = jax.jit(fn)(m, d)
    ncon = np.asarray(out.ncon).reshape(-1)[0]
    over = np.asarray(out.warning_counts[..., 1]).reshape(-1).max()
    rows.append((q.shape[0], compile_s, per_call, int(ncon), int(over), m))
  return rows


def time_mjx(xml, qs, reps):
  """Rows (batch, compile s, s per call, ncon of world 0) of MJX's collision, or a reason."""
  import mujoco
  from mujoco import mjx
  mj = mujoco.MjModel.from_xml_string(xml)
  try:
    mx = mjx.put_model(mj)
    dx0 = mjx.make_data(mx)
    kin = jax.jit(jax.vmap(lambda q: mjx.kinematics(mx, dx0.replace(qpos=q))))
    rows = []
    for q in qs:
      dx = kin(jnp.asarray(q, dx0.qpos.dtype))
      if q.shape[0] == 1:
        dx = jax.tree_util.tree_map(lambda x: x[0], dx)
        fn = mjx.collision
      else:
        fn = jax.vmap(mjx.collision, in_axes=(None, 0))
      compile_s, per_call = _time(fn, (mx, dx), reps)
      out = jax.jit(fn)(mx, dx)
      dist = np.asarray(out._impl.contact.dist if hasattr(out, '_impl') else out.contact.dist)
      ncon = int(np.sum(dist.reshape(q.shape[0], -1)[0] < 0)) if dist.size else 0
      rows.append((q.shape[0], compile_s, per_call, ncon))
    return rows
  except NotImplementedError as e:
    return f'not supported by MJX: {e}'


def time_c(mj, md, reps=200):
  """MuJoCo's mj_collision in C on the settled state: (s per call, ncon)."""
  import mujoco
  mujoco.mj_kinematics(mj, md)
  mujoco.mj_collision(mj, md)
  best = np.inf
  for _ in range(5):
    t0 = time.perf_counter()
    for _ in range(reps):
      mujoco.mj_collision(mj, md)
    best = min(best, (time.perf_counter() - t0) / reps)
  return best, md.ncon


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--scenes', nargs='+', default=['pile', 'box_stack', 'humanoid'])
  parser.add_argument('--batch', type=int, nargs='+', default=[1, 64, 256])
  parser.add_argument('--reps', type=int, default=20)
  parser.add_argument('--mjx-reps', type=int, default=3)
  parser.add_argument('--paths', nargs='+', default=['table', 'sap'],
                      help="mjx_py's broadphases to time")
  parser.add_argument('--npairmax', type=int, default=None,
                      help='pairs per geom type pair (default: nconmax)')
  parser.add_argument('--no-mjx', action='store_true', help='skip MJX')
  parser.add_argument('--x64', action='store_true', help='float64 (default: float32)')
  args = parser.parse_args()
  if args.x64:
    jax.config.update('jax_enable_x64', True)
  import mujoco

  print(f'jax {jax.__version__} on {jax.devices()[0].platform}, mujoco {mujoco.__version__}, '
        f'{"float64" if args.x64 else "float32"}')
  head = (f'{"scene":10} {"engine":17} {"batch":>5} {"compile s":>9} {"ms/call":>9} '
          f'{"us/world":>9} {"ncon":>5}  notes')
  table = [head, '-' * len(head)]
  all_scenes = scenes(args.npairmax)
  for name in args.scenes:
    xml, mjx_xml, nconmax, settle = all_scenes[name]
    mj = mujoco.MjModel.from_xml_string(xml)
    md = mujoco.MjData(mj)
    mujoco.mj_resetData(mj, md)
    settle(mj, md)
    mujoco.mj_forward(mj, md)
    qs = [_states(mj, md, b) for b in args.batch]
    arrays = mjcf.compile_string(xml)
    c_s, c_ncon = time_c(mj, md)
    line = f'{name:10} {"MuJoCo C":17} {1:>5} {"":>9} {c_s * 1e3:>9.3f} {c_s * 1e6:>9.1f} ' \
           f'{c_ncon:>5}  mj_collision, 1 thread'
    table.append(line)
    print(line, flush=True)
    for bp in args.paths:
      rows = time_ours(arrays, nconmax, bp, args.npairmax, qs, args.reps)
      for batch, compile_s, per_call, ncon, over, m in rows:
        note = (f'{m.ncandidate} candidates, nconmax {m.nconmax}, npairmax {m.npairmax}'
                + (f', OVERFLOW {over}' if over else ''))
        line = (f'{name:10} {"mjx_py " + bp:17} {batch:>5} {compile_s:>9.2f} '
                f'{per_call * 1e3:>9.3f} {per_call / batch * 1e6:>9.1f} {ncon:>5}  {note}')
        table.append(line)
        print(line, flush=True)
    if not args.no_mjx:
      rows = time_mjx(mjx_xml or xml, qs, args.mjx_reps)
      if isinstance(rows, str):
        line = f'{name:10} {"MJX":17} {"":>5} {"":>9} {"":>9} {"":>9} {"":>5}  {rows}'
        table.append(line)
        print(line, flush=True)
      else:
        for batch, compile_s, per_call, ncon in rows:
          line = (f'{name:10} {"MJX":17} {batch:>5} {compile_s:>9.2f} {per_call * 1e3:>9.3f} '
                  f'{per_call / batch * 1e6:>9.1f} {ncon:>5}  '
                  + (f'max_geom_pairs {args.npairmax or 1200}, max_contact_points 1200'
                     if mjx_xml else ''))
          table.append(line)
          print(line, flush=True)
  print('\n' + '\n'.join(table))


if __name__ == '__main__':
  main()
