"""Height field assets (host only): elevation data as MuJoCo 3.3.3 compiles it.

Sources: the ``elevation`` attribute (nrow x ncol values, given top row first; MuJoCo stores
the rows bottom-up, so they are flipped), ``nrow``/``ncol`` alone (zeros), a PNG file (8-bit
gray, see png.py; rows flipped the same way, so image row 0 becomes the last data row), or
MuJoCo's binary format (int32 nrow, int32 ncol, float32 data, stored as is). The data are then
normalized to [0, 1] in float32 (subtract the minimum, divide by the range when it exceeds
mjMINVAL), as MuJoCo does. Geoms of type hfield take their size from the asset:
(size_x, size_y, 0.25 elevation_z + 0.5 base_z).
"""

from __future__ import annotations

import math
import os

import numpy as np

from . import png
from .defaults import internal_defaults
from .mesh import find_file
from .xmlnode import Node

MINVAL = 1e-15
CONTENT_TYPES = ('image/png', 'image/vnd.mujoco.hfield')


def _binary(node: Node, file: str, data: bytes) -> np.ndarray:
  if len(data) < 8:
    raise node.error(f"hfield file '{file}' is missing its header", 'file')
  nrow, ncol = (int(x) for x in np.frombuffer(data[:8], '<i4'))
  if nrow < 1 or ncol < 1:
    raise node.error(f"non-positive hfield dimensions in file '{file}'", 'file')
  if len(data) != 8 + 4 * nrow * ncol:
    raise node.error(f"unexpected size of hfield file '{file}' (header says {nrow} x {ncol})",
                     'file')
  return np.frombuffer(data[8:], '<f4').astype(np.float32).reshape(nrow, ncol)


def _elevation(ctx, node: Node, v: dict) -> np.ndarray:
  """(nrow, ncol) float32 raw elevation in MuJoCo's storage order (before normalization)."""
  nrow, ncol = v['nrow'], v['ncol']
  if v.get('file'):
    if nrow or ncol or v.get('elevation') is not None:
      raise node.error('hfield specified from file and manually (nrow/ncol/elevation)', 'file')
    ctype = v.get('content_type')
    if ctype and ctype not in CONTENT_TYPES:
      raise node.error(f"invalid content type '{ctype}' in hfield", 'content_type')
    is_png = ctype == 'image/png' or (not ctype and
                                      os.path.splitext(v['file'])[1].lower() == '.png')
    data = find_file(ctx, node, v['file'], 'hfield')
    if not is_png:
      return _binary(node, v['file'], data)
    try:
      image = png.decode_gray8(data)
    except png.PNGError as e:
      raise node.error(f"could not read PNG file '{v['file']}': {e}", 'file') from None
    return image[::-1].astype(np.float32)
  if nrow < 0 or ncol < 0:
    raise node.error('nrow and ncol must be non-negative', 'nrow' if nrow < 0 else 'ncol')
  if nrow < 1 or ncol < 1:
    raise node.error('hfield needs nrow and ncol (or a file)', 'nrow')
  elev = v.get('elevation')
  if elev is None:
    return np.zeros((nrow, ncol), np.float32)
  if len(elev) != nrow * ncol:
    raise node.error(f'elevation has {len(elev)} values, nrow * ncol = {nrow * ncol}',
                     'elevation')
  data = np.array(elev, np.float32).reshape(nrow, ncol)
  if not np.all(np.isfinite(data)):
    raise node.error('elevation values must be finite', 'elevation')
  return data[::-1]


def normalize(data: np.ndarray) -> np.ndarray:
  """MuJoCo's float32 normalization to [0, 1]."""
  data = data.astype(np.float32).copy()
  lo, hi = data.min(), data.max()
  data -= lo
  if float(hi - lo) > MINVAL:
    data /= hi - lo
  return data


def compile_hfields(ctx, nodes: list[Node]) -> dict:
  """hfield_* arrays of the <hfield> assets; registers their names (default: file stem)."""
  sizes, nrows, ncols, datas = [], [], [], []
  for i, node in enumerate(nodes):
    v = dict(internal_defaults('hfield'), **node.vals)
    name = v.get('name')
    if not name and v.get('file'):
      name = os.path.splitext(os.path.basename(v['file'].replace('\\', '/')))[0]
    if not name:
      raise node.error('hfield needs a name (or a file to take it from)', 'name')
    ctx.register('hfield', name, node, i)
    size = np.asarray(v['size'], float)
    if not np.all(size > 0):
      raise node.error('size parameters of hfield must be positive', 'size')
    data = normalize(_elevation(ctx, node, v))
    sizes.append(size)
    nrows.append(data.shape[0])
    ncols.append(data.shape[1])
    datas.append(data.reshape(-1))
  counts = [r * c for r, c in zip(nrows, ncols)]
  return {
      'nhfield': len(nodes), 'nhfielddata': int(sum(counts)),
      'hfield_size': np.array(sizes, float).reshape(-1, 4),
      'hfield_nrow': np.array(nrows, np.int32), 'hfield_ncol': np.array(ncols, np.int32),
      'hfield_adr': np.array(np.cumsum([0] + counts)[:-1], np.int32),
      'hfield_data': (np.concatenate(datas) if datas else np.zeros(0, np.float32)),
  }


def geom_size_rbound_aabb(size):
  """(size (3,), rbound, aabb (6,)) of a geom using an hfield of asset size ``size`` (4,)."""
  sx, sy, ez, bz = (float(s) for s in size)
  gsize = np.array([sx, sy, 0.25 * ez + 0.5 * bz])
  rbound = math.sqrt(sx * sx + sy * sy + max(ez * ez, bz * bz))
  aabb = np.array([0.0, 0.0, (ez + -bz) / 2, sx, sy, (ez - -bz) / 2])
  return gsize, rbound, aabb
