#!/bin/bash
# One call's worth of accelerator checks for the throughput issue (figures in README, GPU):
#   bash examples/gpu_check.sh [BATCH]        (default 8192; BATCH * 4 is also timed)
# mjx_py / MJX / MuJoCo C side by side at BATCH, a kernel-level profile of the step at BATCH
# (examples/profile_step.py), mjx_py at 4 * BATCH, and the humanoid's float64 rollout against
# mj_step and float32 sanity rollout on the accelerator (tests/test_rollout_contacts.py), with
# the direct solves of tests/test_linalg.py. Each part has its own time limit, so one that fails
# or hangs does not stop the others; the limits add up to 500 s, inside one 600-s device call
# (the same parts, run by hand on an H200, took 287 s). Needs the bench extra (mujoco, mujoco-mjx) and pytest;
# WHEELS=DIR installs the wheels in DIR first (into /tmp/site, for a machine without a package
# index). LOG=FILE keeps the output.
cd "$(dirname "$0")/.."
B=${1:-8192}
PY=${PY:-python3}
exec > >(tee "${LOG:-/dev/null}") 2>&1
T0=$(date +%s)
part() { echo "== [$(( $(date +%s) - T0 )) s] $*"; }
if [ -n "$WHEELS" ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$WHEELS"/*.whl && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
# the repository on the path (no install needed); no GPU memory preallocation, since MJX's
# child process shares the GPU with the parent
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null
$PY -c "import jax, mujoco; print('jax', jax.__version__, jax.devices(), 'mujoco', mujoco.__version__)"
part "side by side, humanoid, batch $B"
timeout 215 $PY examples/compare_speed.py models/humanoid.xml --batch "$B" --nstep 100 \
  --mjx-nstep 100 --repeat 2 --mjx-timeout 150
part "profile, humanoid, batch $B"
timeout 110 $PY examples/profile_step.py models/humanoid.xml --batch "$B" --top 25
part "humanoid, batch $((4 * B))"
timeout 75 $PY -m mjx_py.testspeed models/humanoid.xml --batch "$((4 * B))" --nstep 100 --repeat 2
part "parity on the accelerator"
timeout 100 $PY -m pytest tests/test_rollout_contacts.py tests/test_linalg.py -n 0 \
  -p no:cacheprovider -k "humanoid or solve_direct" -rA
part done
