"""Where a batched step's run time goes, operation by operation, on any backend.

Run: python examples/profile_step.py [MODEL] [--batch B] [--nstep 5] [--calls 2] [--top 30]
     [--depth 2] [--out DIR] [--nconmax N] [--njmax N] [--solve]

Rolls MODEL's batch of B worlds 300 steps with random controls (a state with contacts), compiles
an NSTEP-step ``lax.scan`` of ``jax.vmap(mjx_py.step)`` and times it (median of 7 calls), then
records CALLS calls with ``jax.profiler`` (a perfetto trace) and prints, per step:

- the operations the device ran (GPU kernels and copies; on CPU, XLA's operations on the host
  threads), their busy time (self time, summed over streams or threads) and how many took under
  5 us: many short kernels mean the step is bound by launches rather than by arithmetic;
- the device-to-host copies by the HLO operation that made them (GPU): a while loop or cond
  whose predicate the device computes waits for the host once per iteration;
- the busy time by mjx_py source line (the innermost DEPTH frames of the HLO operation's
  stack, from the optimized HLO's stack-frame table; command-buffer kernels are matched by their
  fusion name).

--solve profiles the constraint solve alone instead: ``jax.vmap(solver.solve)`` (the iterations
and their CPU chunks) on the batch's states of the next step, the stages before it run once
outside the profiled program (the humanoid at batch 512, stop 59: 23.6 ms unprofiled, 2,852
operations and 17.7 ms busy per solve).

--out DIR keeps the trace (trace.json.gz) and the optimized HLO (step.hlo.gz). Profiling adds
time to each operation, so the busy times are for comparing shares, not for the step's speed
(the unprofiled median is printed first). On CPU the overhead is largest in a while loop that
XLA runs operation by operation (its carry above the small-loop threshold, see mjx_py.xla):
each trip's operations are charged it. The script sets mjx_py.xla.set_cpu_flags before JAX's
backend starts; until stop 59 it asked for the backend first, so that the flags (the 1 MB
small-loop threshold among them) were not applied: its CPU profiles of stops 35-58 ran the
solver's small loops operation by operation, and charged the CPU chunks' write-back a quarter
of the busy time (the humanoid at batch 512: 15,860 operations, 141 ms busy for 73 ms
unprofiled; with the flags 4,057 operations, 66 ms busy for 52 ms). Float32, XLA's default
options on the accelerator, ``mjx_py.xla.compile_options()`` on CPU.
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import importlib
import json
import os
import re
import shutil
import tempfile
import time

import jax
import numpy as np

import mjx_py
from mjx_py import actuation, solver, testspeed
from mjx_py.rollout import scan_state


def hlo_stacks(text: str) -> dict:
  """{HLO instruction name: [innermost frame, its caller, ...]} from an optimized HLO module's
  text: each instruction's stack_frame_id resolved through the module's FileNames,
  FunctionNames, FileLocations and StackFrames tables (frames as 'file.py:line function')."""
  def table(name):
    hit = re.search(r'\n' + name + r'\n(.*?)(?=\n[A-Z][A-Za-z]+\n|\Z)', text, re.S)
    return hit.group(1).strip().splitlines() if hit else []

  def ids(line):
    return dict((k, int(v)) for k, v in re.findall(r'(\w+)=(\d+)', line))

  def keyed(lines):
    return {int(line.split(' ', 1)[0]): line.split(' ', 1)[1].strip().strip('"')
            for line in lines if line[:1].isdigit()}

  files, funcs = keyed(table('FileNames')), keyed(table('FunctionNames'))
  locs = {int(line.split(' ', 1)[0]): ids(line) for line in table('FileLocations')
          if line[:1].isdigit()}
  frames = {int(line.split(' ', 1)[0]): ids(line) for line in table('StackFrames')
            if line[:1].isdigit()}

  def stack(fid):
    out = []
    while fid in frames and len(out) < 32:
      loc = locs.get(frames[fid].get('file_location_id'))
      if loc is None:
        break
      out.append(f"{os.path.basename(files.get(loc['file_name_id'], '?'))}:{loc['line']} "
                 f"{funcs.get(loc['function_name_id'], '?')}")
      parent = frames[fid].get('parent_frame_id', 0)
      fid = parent if parent != fid else 0
    return out

  named = re.findall(r'\n\s*(?:ROOT )?%([\w.\-]+) = [^\n]*?stack_frame_id=(\d+)', text)
  return {name: stack(int(fid)) for name, fid in named}


def trace_events(trace_dir: str):
  """(the perfetto trace's path, its complete events, {pid: process name})."""
  path = glob.glob(f'{trace_dir}/**/perfetto_trace.json.gz', recursive=True)[0]
  data = json.load(gzip.open(path))
  events = data['traceEvents'] if isinstance(data, dict) else data
  names = {e['pid']: e['args']['name'] for e in events
           if e.get('ph') == 'M' and e.get('name') == 'process_name'}
  return path, [e for e in events if e.get('ph') == 'X'], names


def self_times(events) -> list:
  """Each event's duration less its children's on the same process and thread (us)."""
  by_thread = collections.defaultdict(list)
  for e in events:
    by_thread[(e['pid'], e['tid'])].append(e)
  out = []
  for group in by_thread.values():
    group.sort(key=lambda e: (e['ts'], -e.get('dur', 0)))
    open_, child = [], collections.Counter()
    for e in group:
      while open_ and open_[-1]['ts'] + open_[-1]['dur'] <= e['ts']:
        open_.pop()
      if open_:
        child[id(open_[-1])] += e['dur']
      open_.append(e)
    out += [(e, e['dur'] - child[id(e)]) for e in group]
  return out


def hlo_name(e) -> str:
  """The HLO instruction an event ran: its hlo_op, or for a kernel inside a command buffer
  (a CUDA graph) its fusion name ('loop_add_fusion_8' -> 'loop_add_fusion.8')."""
  op = e.get('args', {}).get('hlo_op', '')
  if op and not op.startswith('command_buffer'):
    return op
  return re.sub(r'_(\d+)$', r'.\1', e['name'])


def solve_program(m, d, options):
  """The batch's states as the next step's constraint solve reads them: forward's stages before
  the solve (positions, velocities, actuation, qacc_smooth) run on d, in their own program."""
  fwd = importlib.import_module('mjx_py.forward')

  def before(d):
    d = fwd.fwd_velocity(m, fwd.fwd_position(m, d))
    return fwd.fwd_acceleration(m, actuation.actuation(m, d))
  return jax.block_until_ready(jax.jit(jax.vmap(before)).lower(d).compile(options)(d))


def solve_alone(m):
  """jit of the batched constraint solve (mjx_py.solver.solve) of the Model m."""
  return jax.jit(jax.vmap(lambda d: solver.solve(m, d)))


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('model', nargs='?', default='models/humanoid.xml')
  parser.add_argument('--batch', type=int, default=1024)
  parser.add_argument('--nstep', type=int, default=5, help='steps per profiled call')
  parser.add_argument('--calls', type=int, default=2, help='profiled calls')
  parser.add_argument('--top', type=int, default=30)
  parser.add_argument('--depth', type=int, default=2, help='frames per source key')
  parser.add_argument('--out', default=None, help='keep the trace and the HLO here')
  parser.add_argument('--nconmax', type=int, default=None, help='contact capacity')
  parser.add_argument('--njmax', type=int, default=None, help='constraint-row capacity')
  parser.add_argument('--solve', action='store_true',
                      help='profile the constraint solve alone (one solve per call)')
  args = parser.parse_args()
  # before JAX's backend starts (asking for the default backend starts it), or the flags are
  # not applied: until stop 59 they were asked for after it, so the CPU profiles of stops 35-58
  # ran XLA:CPU's small while loops operation by operation (without the 1 MB loop threshold);
  # harmless on an accelerator
  applied = mjx_py.xla.set_cpu_flags(1)
  on_cpu = jax.default_backend() == 'cpu'
  if on_cpu and not applied:
    print('note: $XLA_FLAGS already set the CPU options or JAX had started; not added')
  B, ns = args.batch, args.nstep
  xml = open(args.model).read()
  m, d0, ctrl = testspeed.model_and_controls(xml, (300, B),
                                             base_dir=os.path.dirname(args.model),
                                             nconmax=args.nconmax, njmax=args.njmax)
  d = jax.block_until_ready(jax.jit(testspeed.batched_rollout(m))(
      testspeed.broadcast_batch(d0, B), ctrl))
  options = mjx_py.xla.compile_options(True, batch=B) if on_cpu else None
  if args.solve:
    d, prog, what = solve_program(m, d, options), solve_alone(m), 'the constraint solve alone'
    ns = 1
  else:
    f1 = jax.vmap(lambda d: mjx_py.step(m, d))
    # the scan carries only the state, as the benchmarks' rollouts do (scan_state)
    prog = jax.jit(lambda d: scan_state(lambda d, _: (f1(d), None), d, length=ns)[0])
    what = f'{ns}-step scan'
  t0 = time.perf_counter()
  fn = mjx_py.xla.lower_paused(prog, d).compile(compiler_options=options)
  print(f'{os.path.basename(args.model)}, batch {B}, {what} on '
        f'{jax.devices()[0].platform}: compiled in {time.perf_counter() - t0:.1f} s')
  jax.block_until_ready(fn(d))
  ts = []
  for _ in range(7):
    t0 = time.perf_counter()
    jax.block_until_ready(fn(d))
    ts.append(time.perf_counter() - t0)
  med = float(np.median(ts))
  print(f'unprofiled: {med * 1e3 / ns:.3f} ms per step, {B * ns / med:,.0f} env-steps/s')

  stacks = hlo_stacks(fn.as_text())
  with tempfile.TemporaryDirectory() as tdir:
    jax.profiler.start_trace(tdir, create_perfetto_trace=True)
    for _ in range(args.calls):
      jax.block_until_ready(fn(d))
    jax.profiler.stop_trace()
    path, events, procs = trace_events(tdir)
    if args.out:
      os.makedirs(args.out, exist_ok=True)
      shutil.copy(path, os.path.join(args.out, 'trace.json.gz'))
      with gzip.open(os.path.join(args.out, 'step.hlo.gz'), 'wt') as f:
        f.write(fn.as_text())
  device = [e for e in events if procs.get(e['pid'], '').startswith('/device:')]
  # on a device the kernels and copies; on CPU the host events that are HLO operations
  ops = device or [e for e in events if hlo_name(e) in stacks]
  timed = self_times(ops)
  nstep = ns * args.calls
  busy = sum(t for _, t in timed)
  durs = np.array([t for _, t in timed])
  print(f'{len(ops) / nstep:,.0f} operations per step, busy {busy / nstep / 1e3:.3f} ms per step'
        f' (summed over {"streams" if device else "threads"}); under 5 us: '
        f'{np.mean(durs < 5):.0%} of them, {durs[durs < 5].sum() / max(busy, 1e-9):.0%} of the '
        f'time; median {np.median(durs):.2f} us')

  def source(name):
    # the innermost frames, a frame repeated by nested traces of one function counted once
    frames = [f for i, f in enumerate(stacks.get(name, [])) if i == 0 or f != stacks[name][i - 1]]
    return ' < '.join(frames[:args.depth]) if frames else f'({name})'

  d2h = collections.Counter(source(hlo_name(e)) for e in device if e['name'] == 'MemcpyD2H')
  if d2h:
    print(f'device-to-host copies: {sum(d2h.values()) / nstep:.0f} per step')
    for key, n in d2h.most_common(8):
      print(f'  {n / nstep:6.1f} per step  {key}')
  by_src, count = collections.Counter(), collections.Counter()
  for e, t in timed:
    key = source(hlo_name(e)) if hlo_name(e) in stacks else f'({e["name"]})'
    by_src[key] += t
    count[key] += 1
  print(f'busy time by source line (top {args.top}; ms per step, operations per step):')
  for key, t in by_src.most_common(args.top):
    print(f'  {t / nstep / 1e3:8.3f} ms {count[key] / nstep:7.1f}  {key}')


if __name__ == '__main__':
  main()
