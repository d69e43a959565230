"""Where a model's compile time goes: tracing, lowering, XLA's HLO passes and its code generation.

Run: python examples/profile_compile.py [MODEL] [--batch B] [--grad NSTEP [--remat] [--state-only]]
     [--top K] [--no-xla-log]

Compiles ``jax.jit`` of ``mjx_py.step`` on one world (``--batch B``: of ``jax.vmap(step)`` over B
worlds; ``--grad NSTEP``: of ``jax.grad`` of the squared final qpos through an NSTEP-step
``mjx_py.rollout`` instead, ``--remat``: with ``remat=True``) with
``mjx_py.xla.compile_options()`` and prints:

- the wall time of each phase: tracing (Python: building the jaxpr), lowering (to StableHLO)
  and XLA's compile, split by XLA's own timers into its HLO passes and its code generation
  (LLVM: one module per fused kernel group and one per operation left outside fusions, built
  on XLA's thread pool; the sum over modules is printed beside the wall time);
- the heaviest HLO passes and the heaviest kinds of per-operation LLVM modules;
- the program's size: jaxpr equations attributed to the mjx_py function that emitted them (the
  innermost mjx_py frame of each equation's traceback; control flow counted through its
  bodies, each copy of a body once), HLO instructions before and after XLA's optimization, and
  the optimized program's kernels (fusions and their sizes, while loops, conditionals) and
  its fusions attributed to the function that emitted them (the innermost frame of each
  fusion's stack in the optimized module's stack-frame tables, as examples/profile_step.py
  reads them).

XLA's timers are VLOG(1) messages of three of its source files, enabled through
$TF_CPP_VMODULE before JAX starts and read from the process's standard error while the one
compile runs (``--no-xla-log``: skip them; the phases are then trace / lower / compile only).
Every figure is from this one process and one compile: run it twice to see the spread.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import re
import sys
import tempfile
import time

_XLA_LOG = __name__ == '__main__' and '--no-xla-log' not in sys.argv
if _XLA_LOG:
  # read when XLA's logging starts, i.e. before JAX's first backend call
  os.environ['TF_CPP_MIN_LOG_LEVEL'] = '0'
  os.environ['TF_CPP_VMODULE'] = 'cpu_compiler=1,hlo_pass_pipeline=1,ir_compiler=1'

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.extend import core as jcore  # noqa: E402

import mjx_py  # noqa: E402
from mjx_py import xla  # noqa: E402

if os.path.dirname(os.path.abspath(__file__)) not in sys.path:   # its sibling script's reader
  sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from profile_step import hlo_stacks  # noqa: E402

_UNITS = {'s': 1.0, 'ms': 1e-3, 'us': 1e-6, 'min': 60.0}
_TIMER = re.compile(r'\] (.*) time: ([0-9.]+) (min|ms|us|s) ')


def xla_timers(log: str):
  """XLA's timer messages in ``log``: a list of (message, seconds)."""
  out = []
  for line in log.splitlines():
    hit = _TIMER.search(line)
    if hit:
      out.append((hit.group(1), float(hit.group(2)) * _UNITS[hit.group(3)]))
  return out


def module_kind(name: str) -> str:
  """An LLVM module's kind: 'fusion parts' for the split module of the fused kernels, else the
  operation of a per-operation kernel ('dot', 'reduce-window', ...)."""
  name = name.removeprefix('__compute_module_')
  if name.startswith('part_'):
    return 'fusion parts'
  return re.split(r'[._]\d', name, maxsplit=1)[0]


def summarize_xla(timers, top: int):
  """Lines describing XLA's phases from its timers (see xla_timers)."""
  passes, kinds, counts = collections.Counter(), collections.Counter(), collections.Counter()
  hlo = codegen = 0.0
  for msg, sec in timers:
    if msg.startswith('Running HLO passes on'):
      hlo += sec
    elif msg.startswith('Compiling [') and 'using JIT' in msg:
      codegen += sec
    elif msg.startswith('HLO pass: '):
      passes[msg.removeprefix('HLO pass: ')] += sec
    elif msg.startswith('Compiled LLVM module: '):
      kind = module_kind(msg.removeprefix('Compiled LLVM module: '))
      kinds[kind] += sec
      counts[kind] += 1
  lines = [f'XLA: HLO passes {hlo:.2f} s, code generation {codegen:.2f} s wall '
           f'({sum(kinds.values()):.2f} s summed over {sum(counts.values())} LLVM modules)']
  lines.append('  heaviest HLO passes: ' + ', '.join(
      f'{k} {v:.2f} s' for k, v in passes.most_common(top)))
  lines.append('  LLVM modules by kind (summed s, count): ' + ', '.join(
      f'{k} {v:.2f} ({counts[k]})' for k, v in kinds.most_common(top)))
  return lines


def _subjaxprs(eqn):
  for v in eqn.params.values():
    for x in (v if isinstance(v, (tuple, list)) else (v,)):
      if isinstance(x, jcore.ClosedJaxpr):
        yield x.jaxpr
      elif isinstance(x, jcore.Jaxpr):
        yield x


def equations_by_function(jaxpr) -> collections.Counter:
  """Equations of ``jaxpr`` (through the bodies of its control flow and calls) per mjx_py
  function 'module:function': the innermost mjx_py frame of the equation's traceback, else
  that of the call or control-flow equation it sits in (jax.numpy's own jitted helpers, such
  as jnp.where, trace their bodies once and reuse them), else '?'."""
  counts = collections.Counter()

  def key(eqn, outer):
    tb = eqn.source_info.traceback
    frame = next((f for f in (tb.frames if tb is not None else ())
                  if '/mjx_py/' in f.file_name), None)
    if frame is None:
      return outer
    return frame.file_name.split('/mjx_py/')[-1].removesuffix('.py') + ':' + frame.function_name

  def walk(j, outer):
    for eqn in j.eqns:
      subs = list(_subjaxprs(eqn))
      if subs:
        for s in subs:
          walk(s, key(eqn, outer))
      else:
        counts[key(eqn, outer)] += 1
  walk(jaxpr, '?')
  return counts


# the start of an instruction's line in HLO text, up to its shape, capturing the name
_NAMED_INSTRUCTION = r'^\s*(?:ROOT )?%?([\w.-]+) = '
# the same without the capture (for findall patterns that capture something else)
_INSTRUCTION = _NAMED_INSTRUCTION.replace('([', '(?:[')


def hlo_instructions(text: str) -> int:
  """Instructions in an HLO module's text: lines 'name = type op(...', the name with a '%'
  in XLA's optimized text and without one in JAX's lowered text."""
  return len(re.findall(_INSTRUCTION + r'\S+ [\w-]+\(', text, flags=re.M))


def kernel_summary(text: str) -> dict:
  """The kernels of an optimized HLO module's text: 'fusions' (fusion instructions: each one
  kernel, built by LLVM), 'sizes' (instructions of each fused computation, descending),
  'loops' (while instructions) and 'conds' (conditional instructions). The number of fusions,
  rather than their size, is what code generation and a small batch's per-operation run time
  grow with."""
  sizes, counts = [], collections.Counter()
  for block in re.split(r'\n(?=\S)', text):
    head, _, body = block.partition('\n')
    if re.match(r'%?fused\S* ', head):
      sizes.append(hlo_instructions(body))
    else:
      counts.update(re.findall(_INSTRUCTION + r'.*? (fusion|while|conditional)\(', body,
                               flags=re.M))
  return dict(fusions=counts['fusion'], sizes=sorted(sizes, reverse=True),
              loops=counts['while'], conds=counts['conditional'])


def fusions_by_function(text: str) -> collections.Counter:
  """Fusion instructions (kernels) of an optimized HLO module's text per function
  'module:function', the innermost frame of the fusion's stack (from the module's stack-frame
  tables, mjx_py's files by their base name), else '?'."""
  stacks = hlo_stacks(text)
  counts = collections.Counter()
  for name in re.findall(_NAMED_INSTRUCTION + r'.*? fusion\(', text, flags=re.M):
    frames = stacks.get(name)
    if not frames:
      counts['?'] += 1
      continue
    where, _, function = frames[0].partition(' ')
    counts[where.split(':')[0].removesuffix('.py') + ':' + function] += 1
  return counts


class _Stderr:
  """Captures file descriptor 2 (where XLA logs) into a temporary file inside the block."""

  def __enter__(self):
    sys.stderr.flush()
    self.file = tempfile.TemporaryFile(mode='w+b')
    self.saved = os.dup(2)
    os.dup2(self.file.fileno(), 2)
    return self

  def __exit__(self, *exc):
    sys.stderr.flush()
    os.dup2(self.saved, 2)
    os.close(self.saved)
    self.file.seek(0)
    self.text = self.file.read().decode(errors='replace')
    self.file.close()


def program(m, batch: int, grad: int, remat: bool = False, state_only: bool = False):
  """The function to compile and its example argument."""
  d = mjx_py.make_data(m)
  if grad:
    ctrl = jnp.zeros((grad, m.nu), d.qpos.dtype)

    def loss(ctrl):
      last, _ = mjx_py.rollout(m, d, ctrl, remat=remat, state_only=state_only)
      return jnp.sum(last.qpos ** 2)
    return jax.grad(loss), ctrl
  if batch:
    d = jax.tree.map(lambda x: jnp.broadcast_to(x, (batch,) + x.shape), d)
    return jax.vmap(lambda d: mjx_py.step(m, d)), d
  return (lambda d: mjx_py.step(m, d)), d


def main():
  here = os.path.dirname(os.path.abspath(__file__))
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('model', nargs='?', default=os.path.join(here, '..', 'models',
                                                               'humanoid.xml'))
  parser.add_argument('--batch', type=int, default=0, help='vmap over B worlds (0: one world)')
  parser.add_argument('--grad', type=int, default=0, metavar='NSTEP',
                      help='compile the gradient through an NSTEP-step rollout instead')
  parser.add_argument('--remat', action='store_true',
                      help="with --grad: the rollout's remat=True (each step rematerialized)")
  parser.add_argument('--state-only', action='store_true',
                      help="with --grad: the rollout's state_only=True (only the state carried)")
  parser.add_argument('--top', type=int, default=12, help='rows of each ranking')
  parser.add_argument('--no-xla-log', action='store_true', help="skip XLA's timers")
  args = parser.parse_args()

  with _Stderr():        # JAX's start and compile_options' probe compile log too: not ours
    m = mjx_py.from_xml_path(args.model)
    fn, arg = program(m, args.batch, args.grad, args.remat, args.state_only)
    options = xla.compile_options(batch=args.batch)
  what = (f'grad through {args.grad} steps{" (remat)" * args.remat}'
          f'{" (state only)" * args.state_only}' if args.grad else
          f'vmap(step) over {args.batch} worlds' if args.batch else 'step, one world')
  print(f'{os.path.basename(args.model)}: {what}; compile options {options}; '
        f'jax {jax.__version__}')

  jitted = jax.jit(fn)
  t0 = time.perf_counter()
  with mjx_py.xla.gc_paused():    # as the main job traces and lowers
    traced = jitted.trace(arg)
    t1 = time.perf_counter()
    lowered = traced.lower()
  t2 = time.perf_counter()
  with _Stderr() if _XLA_LOG else contextlib.nullcontext() as err:
    compiled = lowered.compile(options)
  t3 = time.perf_counter()
  print(f'trace {t1 - t0:.2f} s, lower {t2 - t1:.2f} s, XLA compile {t3 - t2:.2f} s, '
        f'total {t3 - t0:.2f} s')
  if _XLA_LOG:
    timers = xla_timers(err.text)
    if timers:
      print('\n'.join(summarize_xla(timers, args.top)))
    else:
      print("XLA printed no timers (its logging may already have started): rerun as a script")

  eqns = equations_by_function(traced.jaxpr.jaxpr)
  optimized = compiled.as_text()
  print(f'program: {sum(eqns.values())} jaxpr equations, '
        f'{hlo_instructions(lowered.as_text(dialect="hlo"))} HLO instructions before XLA\'s '
        f'optimization, {hlo_instructions(optimized)} after')
  kern = kernel_summary(optimized)
  if kern['sizes']:
    sizes = kern['sizes']
    print(f"  kernels: {kern['fusions']} fusions (instructions each: median "
          f"{sizes[len(sizes) // 2]}, largest {sizes[0]}), {kern['loops']} while loops, "
          f"{kern['conds']} conditionals")
  modules = collections.Counter()
  for key, n in eqns.items():
    modules[key.split(':')[0]] += n
  print('  equations by module: ' + ', '.join(f'{k} {v}' for k, v in modules.most_common(
      args.top)))
  print('  equations by function: ' + ', '.join(f'{k} {v}' for k, v in eqns.most_common(
      args.top)))
  print('  fusions by function: ' + ', '.join(
      f'{k} {v}' for k, v in fusions_by_function(optimized).most_common(args.top)))


if __name__ == '__main__':
  main()
