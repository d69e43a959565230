"""Host-side MJCF compiler (lxml + numpy; never jax, never the MuJoCo library)."""

from __future__ import annotations

import os

from ..errors import MJCFError
from .compile import compile_model
from .xmlnode import load


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


__all__ = ['compile_string', 'compile_file', 'MJCFError']
