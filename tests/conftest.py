"""Shared test configuration."""

from __future__ import annotations

import gc

import jax
import pytest


@pytest.fixture(autouse=True, scope='module')
def _release_compiled_functions():
  """Frees each test module's compiled executables when it ends (bounded memory in CI)."""
  yield
  jax.clear_caches()
  gc.collect()
