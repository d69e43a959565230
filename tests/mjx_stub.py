"""A stand-in for examples/compare_speed.py's MJX child (test_api's test of its retries): the
child's function with _mjx_worker's arguments and messages, which hangs after its compile in the
tries that a counter file names."""

from __future__ import annotations

import time


def worker(path, batch, nstep, repeat, queue):
  """``path``: a file holding 'tries so far, tries that hang' (e.g. '0 1': the first try
  hangs); each call counts itself in it."""
  with open(path) as f:
    done, hang = (int(x) for x in f.read().split())
  with open(path, 'w') as f:
    f.write(f'{done + 1} {hang}')
  queue.put(('compiled', 0.5))
  if done < hang:
    time.sleep(3600)                          # hung: the parent kills the process
  queue.put(('warm', 0.01))
  queue.put(('done', (0.5, 1000.0 * batch)))
