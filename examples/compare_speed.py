"""Side-by-side speed: mjx_py vs MuJoCo C (mujoco.rollout, 1 thread and all cores) vs MJX.

Run: python examples/compare_speed.py MODEL [--batch 1 64 1024] [--nstep 200] [--mjx-nstep 20]
     [--smooth] [--no-mjx] [--option "<option noslip_iterations=\"0\"/>"]
Needs the bench extra (mujoco, mujoco-mjx). All three run in one run on one machine (MJX in a
child process that is given up after --mjx-timeout), so the ratios are comparable. For one
batch size, ``mjx-py MODEL --batch B --compare`` prints the same comparison.
"""

from __future__ import annotations

import argparse
import os
import re

from mjx_py import compare, testspeed


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('model')
  parser.add_argument('--batch', type=int, nargs='+', default=[1, 64, 1024])
  parser.add_argument('--nstep', type=int, default=200)
  parser.add_argument('--mjx-nstep', type=int, default=20,
                      help='steps per MJX rollout (MJX on CPU is slow; its compile time does not '
                           'depend on this, since the steps run in lax.scan)')
  parser.add_argument('--no-mjx', action='store_true', help='skip MJX')
  parser.add_argument('--mjx-timeout', type=float, default=600,
                      help='seconds before an MJX measurement (compile + two runs) is given up')
  parser.add_argument('--smooth', action='store_true', help='disable the constraint solver')
  parser.add_argument('--option', default='',
                      help='an <option .../> element appended to the model for all three '
                           'engines, e.g. \'<option noslip_iterations="0"/>\'')
  args = parser.parse_args()
  with open(args.model) as f:
    xml = f.read()
  if args.option:
    xml = re.sub(r'</mujoco>\s*$', args.option + '</mujoco>', xml)
  if args.smooth:
    xml = testspeed.disable_constraints(xml)
  ncpu = os.cpu_count() or 1
  print(f"{'batch':>6} {'ours':>12} {'compile s':>10} {'MuJoCo 1thr':>12} "
        f"{f'MuJoCo {ncpu}thr':>12} {'MJX':>12} {'MJX compile':>11}  (steps/s)")
  for batch in args.batch:
    c, sps = testspeed.time_rollout(xml, batch, args.nstep,
                                    base_dir=os.path.dirname(args.model))
    print(f'{batch:>6} {sps:>12,.0f} {c:>10.2f}', end=' ', flush=True)
    c1 = compare.time_mujoco(xml, batch, args.nstep, 1)
    cn = compare.time_mujoco(xml, batch, args.nstep, ncpu)
    print(f'{c1:>12,.0f} {cn:>12,.0f}', end=' ', flush=True)
    if args.no_mjx:
      print(flush=True)
      continue
    res = compare.time_mjx_limited(xml, batch, args.mjx_nstep, args.mjx_timeout)
    if isinstance(res, str):
      print(f'MJX: {res}', flush=True)
    else:
      print(f'{res[1]:>12,.0f} {res[0]:>11.2f}', flush=True)


if __name__ == '__main__':
  main()
