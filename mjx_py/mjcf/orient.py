"""Host-side (numpy) rotation helpers for the compiler: quaternions are (w, x, y, z).

These mirror MuJoCo's conventions exactly (mju_mat2Quat branch order, euler sequences, the
zaxis and xyaxes rules) so compiled orientations compare bit-for-bit-ish with MjModel.
"""

from __future__ import annotations

import math

import numpy as np

MINVAL = 1e-15  # mjMINVAL


def quat_mul(a, b):
  """Hamilton product a * b."""
  w1, x1, y1, z1 = a
  w2, x2, y2, z2 = b
  return np.array([
      w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
      w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
      w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
      w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
  ])


def quat_conj(q):
  return np.array([q[0], -q[1], -q[2], -q[3]])


def quat_normalize(q):
  q = np.asarray(q, dtype=float)
  n = np.linalg.norm(q)
  if n < MINVAL:
    return np.array([1.0, 0.0, 0.0, 0.0])
  return q / n


def quat2mat(q):
  """3x3 rotation matrix of a unit quaternion."""
  w, x, y, z = q
  return np.array([
      [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
      [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
      [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
  ])


def rot_vec(q, v):
  return quat2mat(q) @ np.asarray(v, dtype=float)


def mat2quat(mat):
  """MuJoCo's mju_mat2Quat: picks the largest component first, then normalises."""
  m = np.asarray(mat, dtype=float).reshape(9)
  q = np.zeros(4)
  if m[0] + m[4] + m[8] > 0:
    q[0] = 0.5 * np.sqrt(1 + m[0] + m[4] + m[8])
    q[1] = 0.25 * (m[7] - m[5]) / q[0]
    q[2] = 0.25 * (m[2] - m[6]) / q[0]
    q[3] = 0.25 * (m[3] - m[1]) / q[0]
  elif m[0] > m[4] and m[0] > m[8]:
    q[1] = 0.5 * np.sqrt(1 + m[0] - m[4] - m[8])
    q[0] = 0.25 * (m[7] - m[5]) / q[1]
    q[2] = 0.25 * (m[1] + m[3]) / q[1]
    q[3] = 0.25 * (m[2] + m[6]) / q[1]
  elif m[4] > m[8]:
    q[2] = 0.5 * np.sqrt(1 - m[0] + m[4] - m[8])
    q[0] = 0.25 * (m[2] - m[6]) / q[2]
    q[1] = 0.25 * (m[1] + m[3]) / q[2]
    q[3] = 0.25 * (m[5] + m[7]) / q[2]
  else:
    q[3] = 0.5 * np.sqrt(1 - m[0] - m[4] + m[8])
    q[0] = 0.25 * (m[3] - m[1]) / q[3]
    q[1] = 0.25 * (m[2] + m[6]) / q[3]
    q[2] = 0.25 * (m[5] + m[7]) / q[3]
  return quat_normalize(q)


def axisangle2quat(axis, angle):
  axis = np.asarray(axis, dtype=float)
  s = np.sin(angle / 2)
  return np.array([np.cos(angle / 2), axis[0] * s, axis[1] * s, axis[2] * s])


def zaxis2quat(vec):
  """Minimal rotation taking +Z to ``vec`` (MuJoCo's mjuu_z2quat rule)."""
  v = np.asarray(vec, dtype=float)
  v = v / np.linalg.norm(v)
  z = np.array([0.0, 0.0, 1.0])
  axis = np.cross(z, v)
  s = np.linalg.norm(axis)
  if s < 1e-10:
    axis = np.array([1.0, 0.0, 0.0])
  else:
    axis = axis / s
  ang = np.arctan2(s, v[2])
  return axisangle2quat(axis, ang)


def frame_quat(vals: dict, node, angle_scale: float, eulerseq: str, default=None):
  """Orientation of an element from whichever of quat/axisangle/xyaxes/zaxis/euler it has.

  vals: the element's resolved attributes; only the alternatives in ``node.vals`` (written in
  the element, or inherited through a default class) count as given.
  Returns a unit quaternion (w, x, y, z).
  """
  names = ('quat', 'axisangle', 'xyaxes', 'zaxis', 'euler')
  given = [k for k in names if k in node.vals]
  if len(given) > 1:
    raise node.error('multiple orientation specifiers are not allowed', given[1])
  if not given:  # an alternative inherited from a default class, else the (class) quat
    given = [k for k in names[1:] if vals.get(k) is not None]
    if not given and vals.get('quat') is not None:
      given = ['quat']
  if not given:
    return np.array([1.0, 0.0, 0.0, 0.0]) if default is None else np.asarray(default, float)
  kind = given[0]
  v = np.asarray(vals[kind], dtype=float)
  if kind == 'quat':
    if np.linalg.norm(v) < MINVAL:
      raise node.error('zero quaternion is not allowed', 'quat')
    return v / np.linalg.norm(v)
  if kind == 'axisangle':
    n = np.linalg.norm(v[:3])
    if n < 1e-14:
      raise node.error('axisangle too small', 'axisangle')
    return quat_normalize(axisangle2quat(v[:3] / n, v[3] * angle_scale))
  if kind == 'zaxis':
    if np.linalg.norm(v) < 1e-14:
      raise node.error('zaxis too small', 'zaxis')
    return quat_normalize(zaxis2quat(v))
  if kind == 'xyaxes':
    x = v[:3]
    nx = np.linalg.norm(x)
    if nx < 1e-14:
      raise node.error('xaxis too small', 'xyaxes')
    x = x / nx
    y = v[3:] - x * np.dot(x, v[3:])
    ny = np.linalg.norm(y)
    if ny < 1e-14:
      raise node.error('yaxis too small', 'xyaxes')
    y = y / ny
    z = np.cross(x, y)
    nz = np.linalg.norm(z)
    if nz < 1e-14:
      raise node.error('cross(xaxis, yaxis) too small', 'xyaxes')
    z = z / nz
    return mat2quat(np.stack([x, y, z], axis=1))
  # euler: intrinsic (lower-case) post-multiplies, extrinsic (upper-case) pre-multiplies.
  q = np.array([1.0, 0.0, 0.0, 0.0])
  for i, ch in enumerate(eulerseq):
    axis = {'x': (1, 0, 0), 'y': (0, 1, 0), 'z': (0, 0, 1)}.get(ch.lower())
    if axis is None:
      raise node.error(f"invalid character '{ch}' in compiler eulerseq", 'euler')
    r = axisangle2quat(axis, v[i] * angle_scale)
    q = quat_mul(q, r) if ch.islower() else quat_mul(r, q)
  return quat_normalize(q)


def fromto_frame(fromto):
  """Position, quaternion and half-length of a fromto segment (+Z along p1 - p2, as 3.3.3)."""
  p = np.asarray(fromto, dtype=float)
  p1, p2 = p[:3], p[3:]
  pos = 0.5 * (p1 + p2)
  d = p1 - p2
  half = 0.5 * np.linalg.norm(d)
  quat = zaxis2quat(d) if half >= 1e-14 else np.array([1.0, 0.0, 0.0, 0.0])
  return pos, quat, half


# ---------------------------------------------------------------------------------------------
# Scalar helpers with the exact operation order of MuJoCo's compiler utilities (user_util.cc).
# Principal axes of nearly isotropic inertias depend on the last bits of these operations, so
# body_iquat only matches MuJoCo when the arithmetic is replayed in the same order.

EPS = 1e-14  # mjEPS of the compiler


def normvec(v):
  """mjuu_normvec: list ``v`` normalised in place unless tiny or already within EPS of 1."""
  nrm = 0.0
  for x in v:
    nrm += x * x
  if nrm < EPS:
    return v
  nrm = math.sqrt(nrm)
  if abs(nrm - 1) > EPS:
    for i in range(len(v)):
      v[i] /= nrm
  return v


def quat2mat_c(q):
  """mjuu_quat2mat: row-major 9-list."""
  if q[0] == 1 and q[1] == 0 and q[2] == 0 and q[3] == 0:
    return [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
  q00, q01, q02, q03 = q[0] * q[0], q[0] * q[1], q[0] * q[2], q[0] * q[3]
  q11, q12, q13 = q[1] * q[1], q[1] * q[2], q[1] * q[3]
  q22, q23, q33 = q[2] * q[2], q[2] * q[3], q[3] * q[3]
  return [q00 + q11 - q22 - q33, 2 * (q12 - q03), 2 * (q13 + q02),
          2 * (q12 + q03), q00 - q11 + q22 - q33, 2 * (q23 - q01),
          2 * (q13 - q02), 2 * (q23 + q01), q00 - q11 - q22 + q33]


def mulquat_c(a, b):
  """mjuu_mulquat: normalised Hamilton product as a 4-list."""
  return normvec([a[0] * b[0] - a[1] * b[1] - a[2] * b[2] - a[3] * b[3],
                  a[0] * b[1] + a[1] * b[0] + a[2] * b[3] - a[3] * b[2],
                  a[0] * b[2] - a[1] * b[3] + a[2] * b[0] + a[3] * b[1],
                  a[0] * b[3] + a[1] * b[2] - a[2] * b[1] + a[3] * b[0]])


def _mulmat_c(A, B):
  """3x3 row-major product A @ B in mjuu_mulmat's order."""
  return [A[3 * r] * B[c] + A[3 * r + 1] * B[3 + c] + A[3 * r + 2] * B[6 + c]
          for r in range(3) for c in range(3)]


def global_inertia(diag, quat):
  """mjuu_globalinertia: R diag(d) R' as (xx, yy, zz, xy, xz, yz)."""
  m = quat2mat_c(quat)
  t = [m[0] * diag[0], m[3] * diag[0], m[6] * diag[0],
       m[1] * diag[1], m[4] * diag[1], m[7] * diag[1],
       m[2] * diag[2], m[5] * diag[2], m[8] * diag[2]]
  return [m[0] * t[0] + m[1] * t[3] + m[2] * t[6],
          m[3] * t[1] + m[4] * t[4] + m[5] * t[7],
          m[6] * t[2] + m[7] * t[5] + m[8] * t[8],
          m[0] * t[1] + m[1] * t[4] + m[2] * t[7],
          m[0] * t[2] + m[1] * t[5] + m[2] * t[8],
          m[3] * t[2] + m[4] * t[5] + m[5] * t[8]]


def offcenter_inertia(mass, d):
  """mjuu_offcenter: parallel-axis term of a point mass at offset d, 6-vector as above."""
  return [mass * (d[1] * d[1] + d[2] * d[2]), mass * (d[0] * d[0] + d[2] * d[2]),
          mass * (d[0] * d[0] + d[1] * d[1]), -mass * d[0] * d[1], -mass * d[0] * d[2],
          -mass * d[1] * d[2]]


def eig3(mat):
  """Eigen-decomposition of a symmetric 3x3 matrix, replaying MuJoCo's mjuu_eig3.

  Cyclic Jacobi rotations accumulated as a quaternion, then eigenvalues sorted in decreasing
  order (only when they differ by more than 1e-12) by quarter-turn rotations of that
  quaternion. Following MuJoCo's choices (rather than numpy's eigh) keeps body_iquat identical
  to MjModel even where eigenvectors are not unique.
  Returns (eigenvalues (3,), quaternion (4,) whose rotation matrix has the eigenvectors as
  columns).
  """
  a = [float(x) for x in np.asarray(mat, dtype=float).reshape(9)]
  eps = 1e-12
  quat = [1.0, 0.0, 0.0, 0.0]
  eigval = [a[0], a[4], a[8]]
  for _ in range(500):
    v = quat2mat_c(quat)
    vt = [v[0], v[3], v[6], v[1], v[4], v[7], v[2], v[5], v[8]]
    d = _mulmat_c(_mulmat_c(vt, a), v)
    eigval = [d[0], d[4], d[8]]
    # largest off-diagonal entry (row, col) and the axis of the rotation that zeroes it
    if abs(d[1]) > abs(d[2]) and abs(d[1]) > abs(d[5]):
      rk, ck, rotk = 0, 1, 2
    elif abs(d[2]) > abs(d[5]):
      rk, ck, rotk = 0, 2, 1
    else:
      rk, ck, rotk = 1, 2, 0
    off = d[3 * rk + ck]
    if abs(off) < eps:
      break
    # 2x2 symmetric Schur decomposition
    tau = (d[4 * ck] - d[4 * rk]) / (2 * off)
    if tau >= 0:
      t = 1.0 / (tau + math.sqrt(1 + tau * tau))
    else:
      t = -1.0 / (-tau + math.sqrt(1 + tau * tau))
    c = 1.0 / math.sqrt(1 + t * t)
    if c > 1.0 - eps:
      break
    rot = [0.0, 0.0, 0.0, 0.0]
    rot[rotk + 1] = -math.sqrt(0.5 - 0.5 * c) if tau >= 0 else math.sqrt(0.5 - 0.5 * c)
    if rotk == 1:
      rot[rotk + 1] = -rot[rotk + 1]
    rot[0] = math.sqrt(1.0 - rot[rotk + 1] * rot[rotk + 1])
    quat = normvec(mulquat_c(quat, normvec(rot)))
  # bubble sort (0, 1, 0) in decreasing order; each swap is a quarter turn about the third axis
  for j in range(3):
    j1 = j % 2
    if eigval[j1] + eps < eigval[j1 + 1]:
      eigval[j1], eigval[j1 + 1] = eigval[j1 + 1], eigval[j1]
      rot = [0.707106781186548, 0.0, 0.0, 0.0]
      rot[(j1 + 2) % 3 + 1] = rot[0]
      quat = normvec(mulquat_c(quat, rot))
  return np.array(eigval), np.array(quat)
