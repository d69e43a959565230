"""Host-side MJCF compiler (lxml + numpy; never jax, never the MuJoCo library)."""

from __future__ import annotations

import os

from ..errors import MJCFError
from .compile import compile_model
from .xmlnode import load

# Keys of the compiler's output without an MjModel counterpart: host bookkeeping (names, text
# data), the convex hull tables of mjx_py.collision, and what mjx_py.massprops needs to infer
# body inertias from edited geoms.
ENGINE_ONLY = frozenset({
    'names', 'text_data_list', 'mesh_hullvert', 'mesh_hullvertnum', 'mesh_hullnbr',
    'inertia_opts', 'body_inertiafromgeom', 'geom_inertiamode', 'geom_density', 'geom_mass',
    'geom_meshinertia'})


def compile_string(xml: str, assets: dict | None = None, file: str = '<string>') -> dict:
  """Compiles MJCF text into MuJoCo-named numpy arrays (see compile.compile_model)."""
  return compile_model(load(xml, file, assets), assets)


def compile_file(path: str, assets: dict | None = None) -> dict:
  """Compiles an MJCF file; includes resolve relative to its folder."""
  path = os.fspath(path)
  try:
    with open(path, 'rb') as f:
      text = f.read()
  except OSError as e:
    raise MJCFError(f'cannot read model file: {e.strerror}', path) from None
  return compile_model(load(text, os.path.abspath(path), assets), assets)


__all__ = ['compile_string', 'compile_file', 'MJCFError', 'ENGINE_ONLY']
