"""Command line: ``python -m mjx_py [MODEL.xml]`` (also the ``mjx-py`` console script).

Compiles a model, prints its sizes and compile time, then simulates a batch of worlds with
random controls (the full step: contacts, limits, equality and friction loss, solved by the
model's constraint solver; ``--smooth`` switches the constraints off) and prints steps/s.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

DEFAULT_MODEL = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                             'models', 'humanoid.xml')


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(prog='mjx-py', description=__doc__.splitlines()[0])
  parser.add_argument('model', nargs='?', default=DEFAULT_MODEL, help='MJCF file')
  parser.add_argument('--repeat', type=int, default=5, help='compile this many times')
  parser.add_argument('--batch', type=int, default=64, help='worlds simulated at once')
  parser.add_argument('--nstep', type=int, default=200, help='steps per world')
  parser.add_argument('--smooth', action='store_true',
                      help='disable the constraints (contacts, limits, equality, friction loss)')
  args = parser.parse_args(argv)

  from . import MJCFError, mjcf, put_model
  try:
    times = []
    for _ in range(max(1, args.repeat)):
      t0 = time.perf_counter()
      arrays = mjcf.compile_file(args.model)
      times.append(time.perf_counter() - t0)
  except MJCFError as e:
    print(f'error: {e}', file=sys.stderr)
    return 1
  t0 = time.perf_counter()
  m = put_model(arrays)
  t_put = time.perf_counter() - t0
  print(f'model: {args.model}')
  sizes = ('nq nv nu na nbody njnt ngeom nsite ncam nlight nmocap ntendon nwrap neq npair '
           'nexclude nsensor nsensordata nkey').split()
  print('sizes: ' + ', '.join(f'{k}={getattr(m, k)}' for k in sizes))
  print(f'total mass: {float(m.body_mass.sum()):.4g} kg, timestep: {float(m.opt.timestep):g} s')
  print(f'compile (MJCF -> arrays): best {min(times) * 1e3:.1f} ms of {len(times)}, '
        f'first {times[0] * 1e3:.1f} ms; put_model: {t_put * 1e3:.1f} ms')
  if args.nstep > 0 and args.batch > 0:
    from . import testspeed
    with open(args.model) as f:
      xml = f.read()
    if args.smooth:
      xml = testspeed.disable_constraints(xml)
    print('simulating ' + ('without constraints' if args.smooth else
                           'with contacts and constraints'))
    jit_s, sps = testspeed.time_rollout(xml, args.batch, args.nstep,
                                        base_dir=os.path.dirname(args.model))
    print(f'simulate: {args.batch} worlds x {args.nstep} steps, jit compile {jit_s:.2f} s, '
          f'{sps:,.0f} steps/s (jax.vmap(step) on {testspeed.device_name()})')
  return 0


if __name__ == '__main__':
  sys.exit(main())
