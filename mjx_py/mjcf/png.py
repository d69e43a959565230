"""A minimal PNG decoder (zlib + numpy) returning 8-bit gray, as MuJoCo reads height fields.

Host only. MuJoCo decodes hfield PNGs with lodepng into 8-bit gray; lodepng's conversion takes
the *red* channel of color pixels (not a luminance mix), the high byte of 16-bit samples, the
palette entry's red for palette images (black past the palette's end), drops alpha, and scales
1/2/4-bit gray by 255 / (2^depth - 1). ``decode_gray8`` reproduces that for every PNG color
type and bit depth, interlaced (Adam7) or not. Chunk CRCs and the zlib stream are checked;
anything malformed raises PNGError with the reason.
"""

from __future__ import annotations

import struct
import zlib

import numpy as np

SIGNATURE = b'\x89PNG\r\n\x1a\n'
# color type -> (samples per pixel, allowed bit depths)
_COLOR = {0: (1, (1, 2, 4, 8, 16)), 2: (3, (8, 16)), 3: (1, (1, 2, 4, 8)), 4: (2, (8, 16)),
          6: (4, (8, 16))}
# Adam7 passes: (x start, y start, x step, y step)
_ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
          (0, 1, 1, 2))


class PNGError(ValueError):
  """A PNG file that cannot be decoded; the message says why."""


def _chunks(data: bytes):
  """(type, payload) of each chunk, CRC-checked, up to IEND."""
  if data[:8] != SIGNATURE:
    raise PNGError('not a PNG file (bad signature)')
  pos = 8
  while True:
    if pos + 8 > len(data):
      raise PNGError('truncated file (no IEND chunk)')
    length, ctype = struct.unpack('>I4s', data[pos:pos + 8])
    end = pos + 8 + length
    if end + 4 > len(data):
      raise PNGError(f'truncated {ctype.decode("latin-1")} chunk')
    payload = data[pos + 8:end]
    crc = struct.unpack('>I', data[end:end + 4])[0]
    if zlib.crc32(ctype + payload) & 0xffffffff != crc:
      raise PNGError(f'CRC mismatch in {ctype.decode("latin-1")} chunk')
    yield ctype, payload
    if ctype == b'IEND':
      return
    pos = end + 4


def _unfilter(raw: bytes, height: int, stride: int, bpp: int) -> np.ndarray:
  """Undoes the per-row filters; returns (height, stride) uint8 scanlines."""
  if len(raw) != height * (stride + 1):
    raise PNGError('wrong amount of image data')
  rows = np.frombuffer(raw, np.uint8).reshape(height, stride + 1)
  out = np.zeros((height, stride), np.uint8)
  prev = np.zeros(stride, np.int32)
  for y in range(height):
    kind = rows[y, 0]
    line = rows[y, 1:].astype(np.int32)
    if kind == 0:
      cur = line
    elif kind == 2:
      cur = (line + prev) & 0xff
    elif kind == 1:
      # Sub: each byte adds the decoded byte bpp to its left: a running sum per byte lane
      cur = np.zeros(stride, np.int32)
      for lane in range(bpp):
        cur[lane::bpp] = np.cumsum(line[lane::bpp]) & 0xff
    elif kind in (3, 4):
      # Average and Paeth predict from decoded left neighbours: sequential, on Python ints
      raw_line, up_line = line.tolist(), prev.tolist()
      dec = [0] * stride
      for x in range(stride):
        left = dec[x - bpp] if x >= bpp else 0
        up = up_line[x]
        if kind == 3:
          pred = (left + up) >> 1
        else:
          upleft = up_line[x - bpp] if x >= bpp else 0
          p = left + up - upleft
          pa, pb, pc = abs(p - left), abs(p - up), abs(p - upleft)
          pred = left if pa <= pb and pa <= pc else (up if pb <= pc else upleft)
        dec[x] = (raw_line[x] + pred) & 0xff
      cur = np.array(dec, np.int32)
    else:
      raise PNGError(f'unknown filter type {kind}')
    out[y] = cur
    prev = cur
  return out


def _samples(lines: np.ndarray, width: int, depth: int, channels: int) -> np.ndarray:
  """(height, width, channels) integer samples from unfiltered scanlines."""
  height = lines.shape[0]
  if depth == 16:
    s = lines.reshape(height, -1).view('>u2').astype(np.int32)
  elif depth == 8:
    s = lines.astype(np.int32)
  else:
    bits = np.unpackbits(lines, axis=1).reshape(height, -1, depth)
    weights = 1 << np.arange(depth - 1, -1, -1)
    s = (bits * weights).sum(axis=2).astype(np.int32)
  return s[:, :width * channels].reshape(height, width, channels)


def _to_gray8(s: np.ndarray, ctype: int, depth: int, palette) -> np.ndarray:
  """lodepng's conversion of decoded samples to 8-bit gray (see the module docstring)."""
  if ctype == 3:
    if palette is None:
      raise PNGError('palette image without a PLTE chunk')
    idx = s[..., 0]
    red = np.concatenate([palette[:, 0], np.zeros(256, np.int32)])
    return red[idx].astype(np.uint8)
  first = s[..., 0]   # gray, or red
  if depth == 16:
    return (first >> 8).astype(np.uint8)
  if depth < 8:
    return (first * 255 // ((1 << depth) - 1)).astype(np.uint8)
  return first.astype(np.uint8)


def decode_gray8(data: bytes) -> np.ndarray:
  """(height, width) uint8 gray image of a PNG file, top row first."""
  header = None
  palette = None
  idat = []
  for ctype, payload in _chunks(data):
    if ctype == b'IHDR':
      if len(payload) != 13:
        raise PNGError('bad IHDR chunk')
      header = struct.unpack('>IIBBBBB', payload)
    elif ctype == b'PLTE':
      if len(payload) % 3 or not payload:
        raise PNGError('bad PLTE chunk')
      palette = np.frombuffer(payload, np.uint8).reshape(-1, 3).astype(np.int32)
    elif ctype == b'IDAT':
      idat.append(payload)
  if header is None:
    raise PNGError('missing IHDR chunk')
  width, height, depth, ctype, comp, filt, interlace = header
  if ctype not in _COLOR or depth not in _COLOR[ctype][1]:
    raise PNGError(f'unsupported color type {ctype} with bit depth {depth}')
  if comp != 0 or filt != 0 or interlace not in (0, 1):
    raise PNGError('unsupported compression, filter or interlace method')
  if width == 0 or height == 0:
    raise PNGError('zero image dimension')
  if not idat:
    raise PNGError('missing IDAT chunk')
  try:
    raw = zlib.decompress(b''.join(idat))
  except zlib.error as e:
    raise PNGError(f'corrupt image data ({e})') from None
  channels = _COLOR[ctype][0]
  bits = channels * depth
  bpp = max(1, bits // 8)
  if interlace == 0:
    stride = (width * bits + 7) // 8
    lines = _unfilter(raw, height, stride, bpp)
    return _to_gray8(_samples(lines, width, depth, channels), ctype, depth, palette)
  image = np.zeros((height, width), np.uint8)
  pos = 0
  for x0, y0, dx, dy in _ADAM7:
    w = (width - x0 + dx - 1) // dx if width > x0 else 0
    h = (height - y0 + dy - 1) // dy if height > y0 else 0
    if not w or not h:
      continue
    stride = (w * bits + 7) // 8
    size = h * (stride + 1)
    lines = _unfilter(raw[pos:pos + size], h, stride, bpp)
    pos += size
    image[y0::dy, x0::dx] = _to_gray8(_samples(lines, w, depth, channels), ctype, depth,
                                      palette)
  if pos != len(raw):
    raise PNGError('wrong amount of image data')
  return image
