"""Reference engines for side-by-side speed tables: MuJoCo C (``mujoco.rollout``) and MJX.

Benchmark-only: used by ``mjx-py --compare`` and ``examples/compare_speed.py``. The ``mujoco``
and ``mujoco-mjx`` packages (the ``bench`` extra) are imported inside these functions and
nowhere else in the package; simulation never touches them.

MuJoCo C runs ``mujoco.rollout`` from the same zero state with the same kind of random controls
as ours (uniform in the control range where limited, standard normal elsewhere). MJX runs in a
child process, given up after a timeout: its XLA compile on CPU can take many minutes.
"""

from __future__ import annotations

import multiprocessing
import queue as queue_module
import time

import jax
import jax.numpy as jnp
import numpy as np


class MissingBenchExtra(RuntimeError):
  pass


def _import_mujoco():
  try:
    import mujoco
    from mujoco import rollout
  except ImportError as e:
    raise MissingBenchExtra("--compare needs MuJoCo's Python package: pip install -e '.[bench]'"
                            ) from e
  return mujoco, rollout


def time_mujoco(xml: str, batch: int, nstep: int, threads: int) -> float:
  """steps/s of MuJoCo C rolling ``batch`` worlds out for ``nstep`` steps on ``threads``
  threads (``mujoco.rollout``; 1 thread: the single-threaded rollout)."""
  mujoco, rollout = _import_mujoco()
  mj = mujoco.MjModel.from_xml_string(xml)
  datas = [mujoco.MjData(mj) for _ in range(max(threads, 1))]
  full = mujoco.mjtState.mjSTATE_FULLPHYSICS
  state0 = np.zeros((batch, mujoco.mj_stateSize(mj, full)))
  for i in range(batch):
    mujoco.mj_getState(mj, datas[0], state0[i], full)
  lo, hi = mj.actuator_ctrlrange.T
  rng = np.random.default_rng(0)
  ctrl = np.where(mj.actuator_ctrllimited, lo + (hi - lo) * rng.random((batch, nstep, mj.nu)),
                  rng.standard_normal((batch, nstep, mj.nu)))
  t0 = time.perf_counter()
  if threads > 1:
    rollout.Rollout(nthread=threads).rollout([mj] * batch, datas, state0, ctrl)
  else:
    rollout.rollout([mj] * batch, datas[0], state0, ctrl)
  return batch * nstep / (time.perf_counter() - t0)


def time_mjx(xml: str, batch: int, nstep: int):
  """(compile s, steps/s) of MJX's jitted, vmapped step over ``batch`` worlds for ``nstep``
  steps (zero controls; sensors removed, since MJX lacks several types)."""
  mujoco, _ = _import_mujoco()
  try:
    from mujoco import mjx
  except ImportError as e:
    raise MissingBenchExtra("MJX is missing: pip install -e '.[bench]'") from e
  spec = mujoco.MjSpec.from_string(xml)
  for s in list(spec.sensors):
    s.delete()
  mj = spec.compile()
  mx = mjx.put_model(mj)
  d0 = mjx.make_data(mx)
  dbatch = jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (batch,) + x.shape), d0)
  ctrl = jnp.zeros((nstep, batch, mj.nu))

  def rollout(d, ctrls):
    def body(d, c):
      return jax.vmap(lambda d, c: mjx.step(mx, d.replace(ctrl=c)))(d, c), None
    return jax.lax.scan(body, d, ctrls)[0]

  t0 = time.perf_counter()
  fn = jax.jit(rollout).lower(dbatch, ctrl).compile()
  compile_s = time.perf_counter() - t0
  jax.block_until_ready(fn(dbatch, ctrl))
  t0 = time.perf_counter()
  jax.block_until_ready(fn(dbatch, ctrl))
  return compile_s, batch * nstep / (time.perf_counter() - t0)


def _mjx_worker(xml, batch, nstep, queue):
  try:
    queue.put(time_mjx(xml, batch, nstep))
  except Exception as e:  # MJX does not support every model: report why, as text
    queue.put(f'n/a ({type(e).__name__}: {e})')


def time_mjx_limited(xml: str, batch: int, nstep: int, timeout: float):
  """``time_mjx`` in a child process, given up after ``timeout`` seconds: (compile s,
  steps/s), or a message saying why there is no figure."""
  ctx = multiprocessing.get_context('spawn')
  queue = ctx.Queue()
  proc = ctx.Process(target=_mjx_worker, args=(xml, batch, nstep, queue))
  t0 = time.perf_counter()
  proc.start()
  try:
    return queue.get(timeout=timeout)
  except queue_module.Empty:
    return f'not finished in {time.perf_counter() - t0:.0f} s'
  finally:
    proc.kill()
    proc.join()
