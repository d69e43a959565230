"""mjx_py.linalg: the Gauss-Jordan inverse, the direct solve and the implicit-gradient solves,
alone, under vmap (the batched, batch-minor elimination of mjx_py.batching.per_world) and under
nested vmaps, against numpy in float64."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mjx_py import linalg


@pytest.fixture(autouse=True, scope='module')
def _float64():
  with jax.enable_x64(True):
    yield


def _spd(shape, n, seed=0):
  """Symmetric positive definite matrices (shape + (n, n)) with a spread of scales (a mass
  matrix's diagonal spans orders of magnitude)."""
  rng = np.random.default_rng(seed)
  a = rng.normal(size=shape + (n, n))
  scale = 10.0 ** rng.uniform(-2, 2, size=shape + (n,))
  return (a @ np.swapaxes(a, -1, -2) + n * np.eye(n)) * np.sqrt(scale[..., :, None]
                                                                * scale[..., None, :])


@pytest.mark.parametrize('n', [1, 6, 27])
def test_inverse_unbatched_vmapped_and_nested(n):
  a = _spd((3, 4), n)
  expect = np.linalg.inv(a)
  one = jax.jit(linalg.inverse)(a[0, 0])
  np.testing.assert_allclose(one, expect[0, 0], rtol=1e-9, atol=1e-12 * np.abs(expect).max())
  flat = jax.jit(jax.vmap(linalg.inverse))(a[0])
  np.testing.assert_allclose(flat, expect[0], rtol=1e-9, atol=1e-12 * np.abs(expect).max())
  nested = jax.jit(jax.vmap(jax.vmap(linalg.inverse)))(a)
  np.testing.assert_allclose(nested, expect, rtol=1e-9, atol=1e-12 * np.abs(expect).max())
  # a batch of one matrix shared by the worlds (an unbatched argument under vmap)
  shared = jax.jit(jax.vmap(lambda _: linalg.inverse(a[1, 2])))(jnp.arange(5))
  np.testing.assert_allclose(shared, np.broadcast_to(expect[1, 2], (5, n, n)), rtol=1e-9,
                             atol=1e-12 * np.abs(expect).max())


@pytest.mark.parametrize('path', ['gauss_jordan', 'gaussian', 'gaussian_symmetric',
                                  'library_lu'])
@pytest.mark.parametrize('n', [1, 6, 12, 27, 40])
def test_solve_direct_unbatched_vmapped_and_nested(n, path, monkeypatch):
  """The Newton direction's solve against numpy, alone, under vmap, nested vmaps and with an
  unbatched matrix shared by the worlds; a nonsymmetric a with nonzero leading minors too. Each
  path: Gauss-Jordan on [a | b] in column-narrowing loops (one loop below 12 columns, three from
  12 on; batches below linalg.ELIMINATION_MIN_BATCH), Gaussian elimination in loops narrowing
  rows and columns and back substitution (from that batch on; both taken here at every batch
  by moving the threshold), its symmetric form (``symmetric=True``: multipliers from the pivot
  rows, so that only a's upper triangle is read: given a symmetric a whose strictly lower
  triangle is replaced by noise, it solves the symmetric system), and on a GPU the batched LU
  solve, taken here on the CPU."""
  library = path == 'library_lu'
  symmetric = path == 'gaussian_symmetric'
  monkeypatch.setattr(linalg, '_library_solve', lambda: library)
  monkeypatch.setattr(linalg, 'ELIMINATION_MIN_BATCH',
                      1 if path.startswith('gaussian') else 10**9)
  calls, ge = [], linalg._solve_batch_ge
  monkeypatch.setattr(linalg, '_solve_batch_ge', lambda w, n, sym=False:
                      calls.append(sym) or ge(w, n, sym))

  def solve_direct(a, b):  # a fresh function per test: nothing reuses another path's trace
    return linalg.solve_direct(a, b, symmetric)
  rng = np.random.default_rng(n)
  a = _spd((3, 4), n)
  if symmetric:
    # the solver sees a's upper triangle and noise below it
    lower = np.tril(np.ones((n, n), bool), -1)
    given = np.where(lower, rng.normal(size=(3, 4, n, n)), a)
  else:
    a = given = a + 0.01 * rng.normal(size=(3, 4, n, n))
  b = rng.normal(size=(3, 4, n)) * 10.0 ** rng.uniform(-2, 2, size=(3, 4, 1))
  expect = np.linalg.solve(a, b[..., None])[..., 0]
  tol = dict(rtol=1e-9, atol=1e-12 * np.abs(expect).max())
  # the path taken: the LU primitive appears in the traced program only on the library path
  jaxpr = str(jax.make_jaxpr(jax.vmap(solve_direct))(given[0], b[0])).split()
  assert ('lu' in jaxpr) == library
  np.testing.assert_allclose(jax.jit(solve_direct)(given[0, 0], b[0, 0]), expect[0, 0], **tol)
  np.testing.assert_allclose(jax.jit(jax.vmap(solve_direct))(given[0], b[0]), expect[0],
                             **tol)
  np.testing.assert_allclose(jax.jit(jax.vmap(jax.vmap(solve_direct)))(given, b), expect,
                             **tol)
  shared = jax.jit(jax.vmap(lambda x: solve_direct(given[1, 2], x)))(b[1])
  np.testing.assert_allclose(shared, np.linalg.solve(a[1, 2], b[1].T).T, **tol)
  # several right-hand sides (n, k)
  many = np.swapaxes(b[:, :2], 1, 2)                                # (3, n, 2)
  np.testing.assert_allclose(jax.jit(jax.vmap(solve_direct))(given[:, 0], many),
                             np.linalg.solve(a[:, 0], many), **tol)
  assert bool(calls) == path.startswith('gaussian'), calls
  assert all(sym == symmetric for sym in calls), calls


def test_cpu_blocks_give_the_whole_batch_results(monkeypatch):
  """On CPU a batch of more than linalg.CPU_BLOCK worlds whose operands take more than
  CPU_BLOCK_BYTES is eliminated in blocks of CPU_BLOCK worlds (linalg._in_blocks, a lax.map;
  the last block padded with identity matrices): blocks of 4 here, over 10 worlds (two full
  blocks and a padded one), under nested vmaps, equal the elimination of the whole batch at
  once bit for bit, for the inverse and for the direct solve with a vector and a matrix right-
  hand side, and numpy's."""
  assert jax.default_backend() == 'cpu'
  n = 7
  rng = np.random.default_rng(3)
  a = _spd((2, 5), n)
  b = rng.normal(size=(2, 5, n))
  bk = rng.normal(size=(2, 5, n, 3))
  programs = {
      'inverse': (lambda a, b, bk: linalg.inverse(a)),
      'solve': (lambda a, b, bk: linalg.solve_direct(a, b)),
      'solve_k': (lambda a, b, bk: linalg.solve_direct(a, bk))}

  def run(fn):
    return jax.device_get(jax.jit(jax.vmap(jax.vmap(fn)))(a, b, bk))

  whole = {k: run(f) for k, f in programs.items()}
  monkeypatch.setattr(linalg, 'CPU_BLOCK', 4)
  monkeypatch.setattr(linalg, 'CPU_BLOCK_BYTES', 0)
  calls, lax_map = [], jax.lax.map
  monkeypatch.setattr(jax.lax, 'map', lambda f, xs: calls.append(xs.shape) or
                      lax_map(f, xs))
  for k, f in programs.items():
    blocked = run(lambda *args, f=f: f(*args))
    np.testing.assert_array_equal(blocked, whole[k], err_msg=k)
  # each program's flat batch of 10 worlds in 3 blocks, mapped over the block indices (the
  # inner vmap's rule, traced first on its 5 worlds, is traced in 2)
  assert calls.count((3,)) == 3, calls
  np.testing.assert_allclose(whole['inverse'], np.linalg.inv(a), rtol=1e-9,
                             atol=1e-12 * np.abs(np.linalg.inv(a)).max())
  np.testing.assert_allclose(whole['solve'], np.linalg.solve(a, b[..., None])[..., 0],
                             rtol=1e-8)
  np.testing.assert_allclose(whole['solve_k'], np.linalg.solve(a, bk), rtol=1e-8)


def test_general_solve_without_pivoting():
  # M - h D of the implicit integrators: nonsymmetric, nonzero leading minors
  rng = np.random.default_rng(1)
  a = _spd((5,), 8) - 0.01 * rng.normal(size=(5, 8, 8))
  b = rng.normal(size=(5, 8))
  y = jax.jit(jax.vmap(linalg.solve))(a, b)
  np.testing.assert_allclose(y, np.linalg.solve(a, b[..., None])[..., 0], rtol=1e-9)


def test_solve_gradients_are_implicit():
  """d/d(a, b) of y = a^-1 b through vmap: the implicit derivative (the inverse's loop carries
  none), equal to central differences."""
  a = _spd((3,), 5, seed=2)
  b = np.random.default_rng(3).normal(size=(3, 5))
  w = np.random.default_rng(4).normal(size=(3, 5))

  def loss(a, b):
    return jnp.sum(w * jax.vmap(linalg.solve_spd)(a, b) ** 2)

  ga, gb = jax.jit(jax.grad(loss, argnums=(0, 1)))(a, b)
  eps = 1e-6
  tol = 1e-6 * max(np.abs(ga).max(), np.abs(gb).max())   # central differences' rounding
  for idx in [(0, 1, 2), (2, 4, 4), (1, 0, 3)]:
    da = np.zeros_like(a)
    da[idx] = eps
    fd = (loss(a + da, b) - loss(a - da, b)) / (2 * eps)
    np.testing.assert_allclose(ga[idx], fd, rtol=1e-5, atol=tol)
  db = np.zeros_like(b)
  db[1, 3] = eps
  np.testing.assert_allclose(gb[1, 3], (loss(a, b + db) - loss(a, b - db)) / (2 * eps),
                             rtol=1e-5, atol=tol)


@pytest.mark.parametrize('fn', [linalg.solve_spd, linalg.solve], ids=['spd', 'general'])
def test_solve_value_path_and_second_derivatives(fn):
  """Undifferentiated, the solves take solve_direct's value; differentiated, the implicit
  solve's (a custom JVP): both equal numpy, forward- and reverse-mode first derivatives agree,
  and second derivatives (forward over reverse) equal the analytic Hessian in b, 2 a^-T W a^-1
  for the loss sum(w y^2), and central differences of the gradient in a."""
  rng = np.random.default_rng(5)
  a = _spd((), 6, seed=6) + (0.01 * rng.normal(size=(6, 6)) if fn is linalg.solve else 0.0)
  b = rng.normal(size=(6,))
  w = rng.uniform(0.5, 2.0, size=(6,))
  expect = np.linalg.solve(a, b)
  np.testing.assert_allclose(jax.jit(fn)(a, b), expect, rtol=1e-10)
  y, dy = jax.jvp(fn, (a, b), (np.zeros_like(a), np.eye(6)[2]))
  np.testing.assert_allclose(y, expect, rtol=1e-10)
  np.testing.assert_allclose(dy, np.linalg.solve(a, np.eye(6)[2]), rtol=1e-10)

  def loss(a, b):
    return jnp.sum(w * fn(a, b) ** 2)

  inv = np.linalg.inv(a)
  hess_b = jax.jit(jax.hessian(loss, argnums=1))(a, b)
  np.testing.assert_allclose(hess_b, 2 * inv.T @ np.diag(w) @ inv, rtol=1e-9)
  grad_a = jax.jit(jax.grad(loss))
  da = np.zeros_like(a)
  da[1, 4] = 1.0
  second = jax.jvp(grad_a, (a, b), (da, np.zeros_like(b)))[1]
  eps = 1e-6
  fd = (grad_a(a + eps * da, b) - grad_a(a - eps * da, b)) / (2 * eps)
  np.testing.assert_allclose(second, fd, rtol=1e-5, atol=1e-7 * np.abs(fd).max())


@pytest.mark.parametrize('n', [12, 27])
def test_two_steps_a_trip_equal_one(n, monkeypatch):
  """From a batch of UNROLL_MIN_BATCH systems of UNROLL_MIN_N on, the eliminations take two
  steps a loop trip (linalg._unroll; an odd phase length leaves a remainder step): the inverse
  and the direct solve of 33 systems equal numpy's, and the one-step loops' results up to
  rounding."""
  assert linalg._unroll(n, linalg.UNROLL_MIN_BATCH) == 2
  assert linalg._unroll(n, linalg.UNROLL_MIN_BATCH - 1) == linalg._unroll(6, 64) == 1
  a = _spd((33,), n, seed=n)
  b = np.random.default_rng(n).normal(size=(33, n))

  def run():
    return jax.device_get((jax.jit(jax.vmap(linalg.inverse))(a),
                           jax.jit(jax.vmap(linalg.solve_direct))(a, b)))

  inv2, x2 = run()
  monkeypatch.setattr(linalg, 'UNROLL_MIN_BATCH', 10**9)
  inv1, x1 = run()
  expect_inv, expect_x = np.linalg.inv(a), np.linalg.solve(a, b[..., None])[..., 0]
  for got, one, expect in ((inv2, inv1, expect_inv), (x2, x1, expect_x)):
    np.testing.assert_allclose(got, expect, rtol=1e-9, atol=1e-12 * np.abs(expect).max())
    np.testing.assert_allclose(got, one, rtol=1e-12, atol=1e-14 * np.abs(expect).max())
