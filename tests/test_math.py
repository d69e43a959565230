"""mjx_py.math's quaternion and spatial-inertia products against MuJoCo's mju_ functions (the
compact contraction forms must give MuJoCo's values), in float64."""

from __future__ import annotations

import functools

import jax
import mujoco
import numpy as np
import pytest

from mjx_py import math


@pytest.fixture(autouse=True, scope='module')
def _float64():
  with jax.enable_x64(True):
    yield


def _quats(n=50, seed=0):
  q = np.random.default_rng(seed).normal(size=(n, 4))
  q /= np.linalg.norm(q, axis=1, keepdims=True)
  return np.concatenate([q, [[1.0, 0, 0, 0], [0, 1.0, 0, 0], [0.5, -0.5, 0.5, -0.5]]])


def _assert_forms_match_mujoco(qs, in_loop: bool):
  """quat_to_mat(q) and quat_mul(q, q2) (jitted over the batch qs, ``in_loop`` as given)
  against mju_quat2Mat and mju_mulQuat, to 1e-15."""
  mats = np.asarray(jax.jit(lambda q: math.quat_to_mat(q, in_loop))(qs))
  prods = np.asarray(jax.jit(lambda a, b: math.quat_mul(a, b, in_loop))(qs, qs[::-1]))
  for q, mat, q2, prod in zip(qs, mats, qs[::-1], prods):
    ref = np.zeros(9)
    mujoco.mju_quat2Mat(ref, q)
    np.testing.assert_allclose(mat.ravel(), ref, rtol=0, atol=1e-15)
    ref = np.zeros(4)
    mujoco.mju_mulQuat(ref, q, q2)
    np.testing.assert_allclose(prod, ref, rtol=0, atol=1e-15)


def test_quat_to_mat_and_quat_mul_match_mujoco():
  qs = _quats()
  _assert_forms_match_mujoco(qs, in_loop=False)
  # broadcasting a single quaternion against a batch, as callers do
  np.testing.assert_allclose(np.asarray(math.quat_mul(qs[0], qs)),
                             np.asarray(math.quat_mul(np.broadcast_to(qs[0], qs.shape), qs)))


def test_quat_forms_in_loop_match_mujoco_and_differentiate():
  """The term-by-term forms (in_loop=True, for loops: math._bilinear_in_loop) give MuJoCo's
  values, and under jvp / grad (where they take the contraction) the contraction's derivatives,
  also under vmap of a scan's linearization (where a custom JVP rule's value once came out
  with a misplaced batch axis)."""
  qs = _quats()
  _assert_forms_match_mujoco(qs, in_loop=True)
  v = np.array([0.3, -1.2, 0.7])

  def chain(qs, in_loop):
    # a scan over quaternion factors inside a vmap, as the kinematics' joint loop
    def body(carry, dq):
      pos, quat = carry
      quat = math.quat_mul(quat, dq, in_loop)
      return (pos + math.rot_vec_quat(v, quat), quat), None

    def one(q0):
      return jax.lax.scan(body, (np.zeros(3), q0), qs[:4])[0][0]
    return jax.vmap(one)(qs)

  value = {k: jax.jit(functools.partial(chain, in_loop=k))(qs) for k in (False, True)}
  np.testing.assert_allclose(np.asarray(value[True]), np.asarray(value[False]), atol=1e-14)
  tangent = np.random.default_rng(1).normal(size=qs.shape)
  jvps = {k: jax.jit(lambda q, t, k=k: jax.jvp(lambda q: chain(q, k), (q,), (t,)))(qs, tangent)
          for k in (False, True)}
  for a, b in zip(jvps[True], jvps[False]):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-13)
  grads = {k: jax.jit(jax.grad(lambda q, k=k: (chain(q, k) ** 2).sum()))(qs)
           for k in (False, True)}
  np.testing.assert_allclose(np.asarray(grads[True]), np.asarray(grads[False]), atol=1e-12)
  # a derivative with respect to one factor only (the other's tangent a symbolic zero)
  g = jax.grad(lambda a: math.quat_mul(a, qs[1], in_loop=True)[2])(qs[0])
  np.testing.assert_allclose(np.asarray(g), np.asarray(
      jax.grad(lambda a: math.quat_mul(a, qs[1])[2])(qs[0])), atol=1e-15)

def test_rot_vec_quat_matches_mujoco():
  """rot_vec_quat's component form against mju_rotVecQuat, batched and broadcast (one vector
  against a batch of quaternions, and the other way round), and its gradient against the
  rotation matrix's."""
  qs = _quats()
  vs = np.random.default_rng(2).normal(size=(len(qs), 3))
  got = np.asarray(jax.jit(math.rot_vec_quat)(vs, qs))
  for q, v, res in zip(qs, vs, got):
    ref = np.zeros(3)
    mujoco.mju_rotVecQuat(ref, v, q)
    np.testing.assert_allclose(res, ref, rtol=0, atol=1e-15)
  np.testing.assert_allclose(np.asarray(math.rot_vec_quat(vs[0], qs)),
                             np.asarray(math.quat_to_mat(qs) @ vs[0]), atol=1e-15)
  np.testing.assert_allclose(np.asarray(math.rot_vec_quat(vs, qs[3])),
                             vs @ np.asarray(math.quat_to_mat(qs[3])).T, atol=1e-15)
  # the gradients: the two forms agree on unit quaternions, so their derivatives agree along
  # the unit sphere (the tangent part of the quaternion's gradient; the callers normalize)
  def grads(f):
    return jax.grad(lambda q, v: (f(v, q) ** 2 * np.arange(1, 4)).sum(), argnums=(0, 1))(qs, vs)

  (gq, gv), (hq, hv) = grads(math.rot_vec_quat), grads(
      lambda v, q: (math.quat_to_mat(q) @ v[..., None])[..., 0])
  np.testing.assert_allclose(np.asarray(gv), np.asarray(hv), atol=1e-13)
  tangent = lambda g: g - np.sum(g * qs, axis=1, keepdims=True) * qs  # noqa: E731
  np.testing.assert_allclose(tangent(np.asarray(gq)), tangent(np.asarray(hq)), atol=1e-13)


def test_mul_inert_vec_is_the_spatial_inertia():
  """cinert (I (6), m c (3), m) acting on (angular, linear) motion: [[I, [mc]x], [-[mc]x, m]]
  (MuJoCo's mju_mulInertVec)."""
  rng = np.random.default_rng(1)
  for _ in range(20):
    i, v = rng.normal(size=10), rng.normal(size=6)
    inertia = np.array([[i[0], i[3], i[4]], [i[3], i[1], i[5]], [i[4], i[5], i[2]]])
    mc = i[6:9]
    skew = np.array([[0, -mc[2], mc[1]], [mc[2], 0, -mc[0]], [-mc[1], mc[0], 0]])
    full = np.block([[inertia, skew], [-skew, i[9] * np.eye(3)]])
    np.testing.assert_allclose(np.asarray(math.mul_inert_vec(i, v)), full @ v, rtol=1e-14,
                               atol=1e-14)
  # leading axes broadcast: (2, 3, 10) x (3, 6) -> (2, 3, 6)
  ib, vb = rng.normal(size=(2, 3, 10)), rng.normal(size=(3, 6))
  want = np.stack([[np.asarray(math.mul_inert_vec(ib[a, b], vb[b])) for b in range(3)]
                   for a in range(2)])
  np.testing.assert_array_equal(np.asarray(math.mul_inert_vec(ib, vb)), want)


def test_one_world_prefix_sum_on_an_accelerator_is_the_scan(monkeypatch):
  """cumsum_int for one world: the loop on CPU, the log-depth scan when the default backend is
  an accelerator (traced here with the backend's name patched); the same values."""
  # (lengths not traced elsewhere in this process: custom_vmap keeps a traced body per shape)
  x = np.random.default_rng(4).random(301) < 0.4
  on_cpu = jax.make_jaxpr(math.cumsum_int)(x)
  monkeypatch.setattr(jax, 'default_backend', lambda: 'gpu')
  on_gpu = jax.make_jaxpr(math.cumsum_int)(x[:299])
  # the loop is a scan in the jaxpr (a fori_loop with static bounds); the log-depth scan pads
  assert 'scan' in str(on_cpu) and 'scan' not in str(on_gpu) and 'pad' in str(on_gpu)
  got = jax.core.eval_jaxpr(on_gpu.jaxpr, on_gpu.consts, x[:299])[0]
  np.testing.assert_array_equal(np.asarray(got), np.cumsum(x[:299]))


def test_integer_prefix_sums_and_nonzero_equal_jax_numpy():
  """cumsum_int (a log-depth scan under vmap) equals jnp.cumsum, and nonzero_first equals
  jnp.nonzero(size=, fill_value=) (the rows' compaction in mjx_py.constraint), for masks that
  are empty, full, sparse and dense, with the size below, at and above the mask's length, also
  under vmap (the batched step's form), nested vmaps and unbatched. The last three shapes take
  the scatter (n * size above NONZERO_DIRECT), the others the direct count."""
  rng = np.random.default_rng(3)
  shapes = [(1, 3), (5, 12), (10, 4), (62, 62), (300, 100), (300, 262), (700, 512), (600, 200)]
  assert sum(n * size > math.NONZERO_DIRECT for n, size in shapes) == 3
  for n, size in shapes:
    masks = np.stack([rng.random(n) < p for p in (0.0, 0.1, 0.5, 1.0)])
    want_sum = np.cumsum(masks, axis=1)
    want_idx = np.stack([np.asarray(jax.numpy.nonzero(x, size=size, fill_value=n)[0])
                         for x in masks])
    np.testing.assert_array_equal(np.asarray(jax.vmap(math.cumsum_int)(masks)), want_sum)
    fn = functools.partial(math.nonzero_first, size=size, fill_value=n)
    got = jax.vmap(fn)(masks)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(got), want_idx)
    nested = jax.vmap(jax.vmap(fn))(masks.reshape(2, 2, n))
    np.testing.assert_array_equal(np.asarray(nested), want_idx.reshape(2, 2, size))
    np.testing.assert_array_equal(np.asarray(jax.jit(fn)(masks[2])), want_idx[2])
