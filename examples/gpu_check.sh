#!/bin/bash
# One call's worth of accelerator checks for the throughput issue (figures in README, GPU):
#   bash examples/gpu_check.sh [BATCH]        (default 8192; BATCH * 4 is also timed)
# the main job at BATCH, mjx_py / MJX / MuJoCo C side by side at BATCH, mjx_py and MJX at
# 4 * BATCH, the hopper and the ant at BATCH, the humanoid's float64 rollout against mj_step
# and float32 sanity rollout on the accelerator (tests/test_rollout_contacts.py), and the
# gradient through 100 steps of one world. Each part has its own time limit, so one that
# fails or hangs does not stop the others. Needs the bench extra (mujoco, mujoco-mjx) and
# pytest; WHEELS=DIR installs the wheels in DIR first (into /tmp/site, for a machine without
# a package index). LOG=FILE keeps the output.
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
part "main job, humanoid, batch $B"
timeout 200 $PY -m mjx_py models/humanoid.xml --batch "$B" --nstep 200 --no-progress
part "side by side, humanoid, batch $B"
timeout 330 $PY examples/compare_speed.py models/humanoid.xml --batch "$B" --nstep 100 \
  --mjx-nstep 100 --repeat 2 --mjx-timeout 200
part "humanoid, batch $((4 * B)): mjx_py, then MJX"
timeout 120 $PY -m mjx_py.testspeed models/humanoid.xml --batch "$((4 * B))" --nstep 100 --repeat 2
timeout 120 $PY -c "
import sys; sys.path.insert(0, 'examples'); import compare_speed as c
res = c._time_mjx_limited(open('models/humanoid.xml').read(), $((4 * B)), 100, 2, 110)
print('MJX batch $((4 * B)):', res if isinstance(res, str) else f'{res[1]:,.0f} steps/s, compile {res[0]:.2f} s')"
for model in hopper ant; do
  part "$model, batch $B"
  timeout 100 $PY -m mjx_py.testspeed "models/$model.xml" --batch "$B" --nstep 100 --repeat 2
done
part "parity on the accelerator"
timeout 200 $PY -m pytest tests/test_rollout_contacts.py -n 0 -p no:cacheprovider -k humanoid -q
part "one world: step and gradient through 100 steps"
timeout 200 $PY -m mjx_py.testspeed models/humanoid.xml --batch 1 --nstep 100 --repeat 2 --grad 100
part done
