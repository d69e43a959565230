"""Shared test configuration."""

from __future__ import annotations

import gc
import os
import subprocess
import sys

# LLVM's backend optimizations off and XLA:CPU's classic fusion emitters (mjx_py.FAST_COMPILE)
# for every XLA CPU compile of the session: the suite is bound by compilation, and the tests'
# runs are short (set before JAX starts its backend). Together they halve a humanoid step's
# compile (4.1 to 2.2 s) and its memory. The third flag keeps each compile's LLVM code
# generation in one module instead of XLA's default 32 parts built on its thread pool: the two
# pytest-xdist workers already keep both cores busy, so the parts only add per-module overhead
# (humanoid and ant steps compiled by two processes at once, eight alternating rounds: mean XLA
# compile 8.26 -> 7.45 s and 8.62 -> 7.80 s; a float64 humanoid rollout bit-identical).
# oracle.RUN_OPTIMIZED gives the -O2 compiles the 32 parts back.
_FLAGS = ('--xla_backend_optimization_level=0', '--xla_cpu_use_fusion_emitters=false',
          '--xla_cpu_parallel_codegen_split_count=1')


def _xla_accepts(flag: str) -> bool:
  """Whether this jaxlib's XLA starts with ``flag`` in $XLA_FLAGS, asked of a child process:
  XLA ends a process whose $XLA_FLAGS names a flag it lacks (exit status 1, as jaxlib 0.11.2
  does for the classic emitters' flag, which its XLA:CPU no longer has)."""
  env = dict(os.environ, XLA_FLAGS=flag, JAX_PLATFORMS='cpu')
  probe = 'import jax.numpy as jnp; jnp.zeros(1).block_until_ready()'
  return subprocess.run([sys.executable, '-c', probe], env=env, capture_output=True,
                        timeout=300).returncode == 0


# pytest-xdist's workers inherit the controller's $XLA_FLAGS, so only the controller asks: all
# the flags in one child, each alone only if XLA refuses them together
_flags = os.environ.get('XLA_FLAGS', '')
_new = [f for f in _FLAGS if f.split('=')[0] not in _flags]
if _new and not _xla_accepts(' '.join(_new)):
  _new = [f for f in _new if _xla_accepts(f)]
os.environ['XLA_FLAGS'] = ' '.join([_flags] + _new).strip()

import jax  # noqa: E402
import pytest  # noqa: E402

# Python's automatic collections less often (allocations per young collection 700 -> 50,000):
# tracing makes hundreds of thousands of long-lived objects, and the full collections that
# allocation counts trigger walked them again and again; the pause mjx_py.xla.gc_paused makes
# covers step, forward and rollout, not JAX's transposition under jax.grad nor the tests' own
# jnp code. Measured (tests/test_gradients.py -k box_sliding, one process, gc.callbacks): 5.3 s
# of collections in 63 s, 1.9 s in 56 s with these thresholds. Cycles are still collected, and
# every module ends with a full collection (below).
gc.set_threshold(50_000, 20, 10)


@pytest.fixture(autouse=True, scope='module')
def _release_compiled_functions():
  """Frees each test module's compiled executables when it ends (bounded memory in CI)."""
  yield
  jax.clear_caches()
  gc.collect()


# The test modules by their time in a CI run (stop 69, 2 cores, seconds summed over each
# module's tests), heaviest first. pytest-xdist's loadfile scheduling gives a free worker the
# next module in collection order; by default it first reorders the modules by their number of
# tests, which put the heaviest (test_gradients: 5 tests, 243 s; test_batch: 6, 236 s) last,
# where one worker ran them while the other had finished. The collection is ordered here
# instead, heaviest first, so that the last modules handed out are short and both workers end
# together (modules not listed follow in pytest's order), and pyproject.toml's addopts turn
# xdist's reordering off (--no-loadscope-reorder).
MODULE_SECONDS = {
    'test_rollout': 414, 'test_gradients': 243, 'test_batch': 236,
    'test_forward_constraints': 235, 'test_rollout_contacts': 177, 'test_collision_driver': 146,
    'test_api': 133, 'test_sensor': 124, 'test_forward': 110, 'test_massprops': 106,
    'test_velocity': 103, 'test_dual_solvers': 100, 'test_solver': 96,
    'test_collision_hfield': 80, 'test_set_const_jax': 79, 'test_capacity': 69, 'test_step': 63,
    'test_check': 62, 'test_kinematics': 59, 'test_tendon': 58, 'test_collision_primitive': 56,
    'test_collision_broadphase': 48, 'test_actuation': 42, 'test_collision_convex': 41}


def pytest_collection_modifyitems(items):
  """The heaviest test modules first (MODULE_SECONDS; the sort is stable, so each module's
  tests keep their order, and unlisted modules keep pytest's order after the listed ones)."""
  items.sort(key=lambda item: -MODULE_SECONDS.get(item.path.stem, 0))
