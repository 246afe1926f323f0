#!/usr/bin/env bash
# The GPU check: what rldbg says about GPU memory, proven on a real GPU under Ray, in one call of
# a few minutes. On the GPU machine, from the repo root, with the bundle carried
# (../shared/device/README.md):
#     . .devbundle/env.sh && bash bench/gpu_check.sh
# It prints its figures and writes the evidence under $OUT (default ./gpu-check-out):
#   1. the memory probes' cost per call (what a worker call's edges pay, and a transition's)
#   2. the `-m gpu` tests under this suite's Ray conftest
#   3. llama-small on CUDA with a second process holding GPU memory: the transition table, every
#      transition's return to the GPU, the stranger attributed to its pid, nothing named
#   4. injected faults (tests/faults: a sleep that keeps a reference, memory kept every
#      to_train_mode): each named, nothing else
#   5. two ranks on one GPU: refused, and how fast
#   6. traced/untraced demo step on the GPU (bench/bench_trace_overhead.py), goal <= 1.02
# Sections can be picked: SECTIONS="3 4" bash bench/gpu_check.sh. DEVICE=cpu runs the same
# sections on a CPU (to try the script itself; sections 1, 2 and 6 then say little).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-check-out}
PY=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda}
CPUS=${CPUS:-8}
ROUNDS=${ROUNDS:-40}
SECTIONS=${SECTIONS:-1 2 3 4 5 6}
mkdir -p "$OUT"
export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 PYTHONUNBUFFERED=1
RUN="resources.device=$DEVICE resources.n_ranks=1 resources.ray_num_cpus=$CPUS trainer.progress=false control.enabled=false"
want() { [[ " $SECTIONS " == *" $1 "* ]]; }
stamp() { echo; echo "== $* ($(date +%T))"; }
took() { echo "   [$1: $(( (${EPOCHREALTIME/./} - $2) / 1000 )) ms]"; }
now() { echo "${EPOCHREALTIME/./}"; }

if want 1; then
  stamp "1. memory probes: µs per call"
  $PY - <<'EOF'
import time, torch
from rldbg.memory import nvml, probes
dev = torch.device("cuda") if torch.cuda.is_available() else None
if dev is not None:
    xs = [torch.ones(1 << 20, device=dev) for _ in range(64)]
def per_call(fn, n=2000):
    fn()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6
print(f"   probes.sample()       {per_call(probes.sample):8.1f} µs   (every worker call's two edges)")
print(f"   probes.sample_full()  {per_call(probes.sample_full, 500):8.1f} µs   (a transition's edges, the sampler)")
if dev is not None:
    print(f"   torch.cuda.memory_allocated()+memory_reserved()  {per_call(lambda: (torch.cuda.memory_allocated(), torch.cuda.memory_reserved())):8.1f} µs   (the old edge probe)")
    print(f"   torch.cuda.mem_get_info()                        {per_call(torch.cuda.mem_get_info):8.1f} µs   (the old edge probe)")
    print(f"   nvml.by_process()                                {per_call(nvml.by_process, 500):8.1f} µs   (the sampler, 10 Hz)")
    print("   sample_full:", {k: f"{v / 2**20:.1f} MiB" for k, v in probes.sample_full().items()})
    print("   gpus:", [(g.label, g.index, g.uuid) for g in nvml.gpus()])
EOF
fi

if want 2; then
  stamp "2. pytest -m gpu, under the suite's Ray conftest"
  t0=$(now)
  $PY -m pytest -q -m gpu -p no:cacheprovider -o addopts="" tests/test_offload_gpu.py tests/test_profilers_gpu.py \
      tests/test_gpu_truth.py 2>&1 | tail -15
  took "pytest" "$t0"
fi

report() {   # report TRACE NAME: the text report's memory sections, the JSON beside the evidence
  local trace=$1 name=$2
  cp "$trace" "$OUT/$name.json.gz"
  $PY -m rldbg report --json "$trace" > "$OUT/$name.report.json" 2>&1
  $PY -m rldbg report "$trace" | sed -n '/^memory by transition/,$p'
}

if want 3; then
  stamp "3. llama-small on $DEVICE, a second process holding 1 GiB of the GPU"
  rm -rf /tmp/gc-llama
  holder_pid=
  if [ "$DEVICE" = cuda ]; then
    $PY -c "import os, time, torch; x = torch.ones(1 << 30, dtype=torch.uint8, device='cuda'); torch.cuda.synchronize(); print('   stranger holds 1 GiB, pid', os.getpid(), flush=True); time.sleep(600)" &
    holder_pid=$!
    sleep 5
  fi
  t0=$(now)
  $PY -m reference_trainer --preset demo model.preset=llama-small $RUN trainer.total_steps=10 \
      trainer.run_dir=/tmp/gc-llama > "$OUT/llama.log" 2>&1; echo "   trainer rc $?"
  took "llama-small, 10 steps" "$t0"
  [ -n "$holder_pid" ] && { echo "   the stranger's pid: $holder_pid"; kill "$holder_pid"; wait "$holder_pid" 2>/dev/null; }
  tail -2 "$OUT/llama.log"
  report /tmp/gc-llama/trace.json.gz llama_small_1rank
fi

if want 4; then
  stamp "4. injected faults on $DEVICE: a sleep that keeps a reference; 32 MiB kept every to_train_mode"
  rm -rf /tmp/gc-faults
  t0=$(now)
  PYTHONPATH="$PWD/tests/faults${PYTHONPATH:+:$PYTHONPATH}" TEST_FAULT=sleep_keeps_weights,train_mode_leaks \
    $PY -m reference_trainer --preset demo $RUN trainer.total_steps=12 trainer.run_dir=/tmp/gc-faults \
    > "$OUT/faults.log" 2>&1; echo "   trainer rc $?"
  took "demo with faults, 12 steps" "$t0"
  report /tmp/gc-faults/trace.json.gz faults_1rank
fi

if want 5; then
  stamp "5. two ranks on one GPU"
  t0=$(now)
  $PY -m reference_trainer --preset demo resources.device=cuda resources.gpus_per_rank=0.5 resources.n_ranks=2 \
      trainer.run_dir=/tmp/gc-shared 2>&1 | tail -2; echo "   rc ${PIPESTATUS[0]}"
  took "refused" "$t0"
fi

if want 6; then
  stamp "6. traced/untraced demo step on $DEVICE (goal <= 1.02 on a GPU)"
  $PY bench/bench_trace_overhead.py --rounds "$ROUNDS" --num-cpus "$CPUS" --idle-rounds 1 --idle-seconds 3 \
      resources.device="$DEVICE" resources.n_ranks=1 > "$OUT/overhead.log" 2>&1
  grep -v "^\s*$" "$OUT/overhead.log" | grep -v "WARNING\|INFO" | tail -40
fi
echo; echo "== done ($(date +%T)); evidence in $OUT"
