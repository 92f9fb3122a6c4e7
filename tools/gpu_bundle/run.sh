#!/usr/bin/env bash
# gpu-bundle/run.sh [OUTDIR]: the bundle's one call on a GPU machine, within 8 minutes: every GPU test in
# chunks, compute-sanitizer on the kernel tests, train, cyclic and bd_bench briefly on GPU 0 and its SM
# partitions, models_bench beside PyTorch (f32 and bf16 autocast), kernels_bench, conv_api_bench (cuDNN's legacy
# convolution calls against its graph API; its table goes to programs.txt) and the profile hook. Each step
# has its own time limit (and all share an 8-minute budget) and prints its table when it ends, so a cut run
# keeps what it did. OUTDIR (default $OUT, else gpu-bundle/results) receives at most 8 files of at most 16 MiB:
# run.log (everything printed), gpu_tests.txt, sanitizers.txt, programs.txt, models_bench.json, speed.json,
# kernels_bench.json, profile.txt. Without a GPU it says so and skips the GPU steps.
# The machine needs a CUDA 13 driver; cuDNN, cuBLAS, NCCL and cudart come from PyTorch's Python packages
# (site-packages/nvidia/*/lib) or /usr/local/cuda; the bundle's other libraries from lib.tar.xz.
# Environment: TANDEM_BUNDLE_STEPS (comma list of tests, sanitizers, programs, models, kernels, profile; default
# all), TANDEM_BUNDLE_BUDGET_S (default 465), TANDEM_BUNDLE_TORCH_PYTHON (the interpreter with PyTorch).
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUTDIR="${1:-${OUT:-$HERE/results}}"
BUDGET_S="${TANDEM_BUNDLE_BUDGET_S:-465}"
STEPS=",${TANDEM_BUNDLE_STEPS:-tests,sanitizers,programs,models,kernels,profile},"
FILE_LIMIT=$((16 * 1024 * 1024))
START_S=$SECONDS
mkdir -p "$OUTDIR"
rm -f "$OUTDIR"/{run.log,gpu_tests.txt,sanitizers.txt,programs.txt,models_bench.json,speed.json,kernels_bench.json}
rm -f "$OUTDIR/profile.txt"
exec > >(tee "$OUTDIR/run.log") 2>&1
TEE_PID=$!
WORK="$(mktemp -d "${TMPDIR:-/tmp}/tandem-bundle.XXXXXX")"
# At the end: the work folder goes, and tee has written everything before run.sh returns.
trap 'rm -rf "$WORK"; exec >&- 2>&-; wait "$TEE_PID"' EXIT

rows=()  # the final table: "step|result|seconds"
failed=0
# left: seconds of the budget left.
left() { echo $((BUDGET_S - (SECONDS - START_S))); }
# limit WANT: WANT seconds, or what is left of the budget if less.
limit() {
  local l
  l=$(left)
  echo $((l < $1 ? (l > 0 ? l : 0) : $1))
}
# row STEP RESULT SECONDS: a line of the final table; a result starting with "FAILED" or "cut" fails the run.
row() {
  rows+=("$1|$2|$3")
  case "$2" in FAILED* | cut*) failed=1 ;; esac
}
wanted() { [[ "$STEPS" == *",$1,"* ]]; }
# torch_python: the Python with torch and torchvision (TANDEM_BUNDLE_TORCH_PYTHON, else the first found), or "".
torch_python() {
  local py
  if [ -n "${TANDEM_BUNDLE_TORCH_PYTHON:-}" ]; then
    echo "$TANDEM_BUNDLE_TORCH_PYTHON"
    return
  fi
  for py in python3 /opt/torch/.venv/bin/python3; do
    if "$py" -c 'import torch, torchvision' >/dev/null 2>&1; then
      echo "$py"
      return
    fi
  done
}
# cap FILE: cuts a result file to FILE_LIMIT bytes, saying so at its end.
cap() {
  local size
  [ -f "$1" ] || return 0
  size=$(stat -c %s "$1")
  [ "$size" -le "$FILE_LIMIT" ] && return 0
  truncate -s $((FILE_LIMIT - 200)) "$1"
  printf '\n[run.sh: cut from %d bytes to stay under 16 MiB]\n' "$size" >>"$1"
}
# timed NAME WANT CMD...: CMD with WANT seconds at most (less where less of the budget is left; skipped under
# 5 s); adds NAME's row.
timed() {
  local name="$1" t0=$SECONDS rc l
  l=$(limit "$2")
  shift 2
  if [ "$l" -lt 5 ]; then
    row "$name" "skipped: out of time" 0
    return
  fi
  timeout -k 5 "$l" "$@"
  rc=$?
  case $rc in
    0) row "$name" "ok" $((SECONDS - t0)) ;;
    124 | 137) row "$name" "cut at its limit of $l s" $((SECONDS - t0)) ;;
    *) row "$name" "FAILED (exit $rc)" $((SECONDS - t0)) ;;
  esac
}
# program NAME WANT ARGS...: timed, its output appended to programs.txt under a heading; prints its last lines.
program() {
  local name="$1" want="$2"
  shift 2
  printf '\n== %s\n' "$*" >>"$OUTDIR/programs.txt"
  timed "$name" "$want" "$@" >"$WORK/program.txt" 2>&1
  tr '\r' '\n' <"$WORK/program.txt" >>"$OUTDIR/programs.txt"
  echo "-- $name: $(basename "$1") ${*:2}"
  tr '\r' '\n' <"$WORK/program.txt" | grep -v '^\s*$' | tail -n "${TAIL_LINES:-6}" | cut -c1-200 | sed 's/^/   /'
  cap "$OUTDIR/programs.txt"
}

echo "Tandem GPU bundle: $(cat "$HERE/bundle.txt" 2>/dev/null || echo "unknown build"); $(date -u '+%F %T UTC')"
echo "host: $(hostname), $(nproc) CPU cores; results in $OUTDIR"

# The bundle's libraries that a CUDA machine lacks (oneDNN, OpenMPI, ...), unpacked for this run.
mkdir -p "$WORK/lib"
if [ -f "$HERE/lib.tar.xz" ]; then
  tar -xJf "$HERE/lib.tar.xz" -C "$WORK/lib" 2>/dev/null ||
    python3 -m tarfile -e "$HERE/lib.tar.xz" "$WORK/lib" ||
    echo "run.sh: could not unpack lib.tar.xz (neither tar with xz nor Python's tarfile worked)"
fi
libdirs=("$WORK/lib")
for py in python3 /opt/torch/.venv/bin/python3; do
  command -v "$py" >/dev/null 2>&1 || continue
  sp=$("$py" -c 'import site; print("\n".join(site.getsitepackages()))' 2>/dev/null) || continue
  for d in $sp; do
    for l in "$d"/nvidia/*/lib "$d"/nvidia/cu13/lib; do [ -d "$l" ] && libdirs+=("$l"); done
  done
done
for l in /usr/local/cuda/lib64 /usr/local/cuda/lib; do [ -d "$l" ] && libdirs+=("$l"); done
LD_LIBRARY_PATH="$(IFS=:; echo "${libdirs[*]}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH
for so in libcudart.so.13 libcublas.so.13 libcudnn.so.9 libnccl.so.2; do
  found=""
  for d in "${libdirs[@]}"; do [ -e "$d/$so" ] && found="$d/$so" && break; done
  echo "library $so: ${found:-NOT FOUND}"
done
# Load every CUDA module when a program starts: loaded lazily (CUDA's default), a kernel first launched while an
# NCCL kernel spins waiting for its peer (point-to-point transfers) can wait forever for the module load.
export CUDA_MODULE_LOADING=EAGER
echo "CUDA_MODULE_LOADING=$CUDA_MODULE_LOADING"

# A GPU: one that nvidia-smi lists, or, where a container has no nvidia-smi, a device node.
if command -v nvidia-smi >/dev/null 2>&1; then
  gpus="$(nvidia-smi -L 2>&1)"
  why="nvidia-smi -L: $(head -c 200 <<<"${gpus:-nothing}" | paste -sd' ')"
else
  gpus="$([ -e /dev/nvidia0 ] && echo "GPU 0: /dev/nvidia0 (no nvidia-smi)")"
  why="no nvidia-smi, no /dev/nvidia0"
fi
if ! grep -q '^GPU [0-9]' <<<"$gpus"; then
  echo "no GPU here ($why): the GPU steps are skipped"
  echo
  echo "== Tandem GPU bundle: nothing run (no GPU) =="
  exit 0
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "$gpus"
BIN_TESTS="$HERE/tests/gpu_tests"
JOBS=$(($(nproc) / 2 > 8 ? 8 : ($(nproc) / 2 > 1 ? $(nproc) / 2 : 1)))

# 1. Every GPU test, in chunks of separate processes, JOBS at once (two CPU threads each).
if wanted tests && [ "$(limit 180)" -lt 10 ]; then
  row "GPU tests" "skipped: out of time" 0
elif wanted tests; then
  t0=$SECONDS
  l=$(limit 180)
  echo
  TANDEM_PARITY_DIR="$HERE/tests/data" TANDEM_STREAM_CHECK=1 TANDEM_NUM_THREADS=2 \
    timeout -k 5 $((l + 60)) python3 "$HERE/run_chunks.py" --title "GPU tests" --jobs "$JOBS" --chunks 48 \
    --timeout 120 --deadline "$l" --report "$OUTDIR/gpu_tests.txt" --work "$WORK/tests" "$BIN_TESTS"
  case $? in
    0) row "GPU tests" "ok: $(head -1 "$OUTDIR/gpu_tests.txt" | sed 's/^[^:]*: //')" $((SECONDS - t0)) ;;
    1) row "GPU tests" "FAILED: $(head -1 "$OUTDIR/gpu_tests.txt" | sed 's/^[^:]*: //')" $((SECONDS - t0)) ;;
    *) row "GPU tests" "FAILED: the runner stopped (see run.log)" $((SECONDS - t0)) ;;
  esac
  cap "$OUTDIR/gpu_tests.txt"
fi

# 2. compute-sanitizer: memcheck on the CUDA kernel tests, racecheck on the kernels that use shared memory, both
# at once, minus tests that hung or crashed above. Lazy module loading here: instrumenting every module of cuDNN
# and cuBLAS at start-up would take the whole budget, and these suites use no NCCL.
if wanted sanitizers; then
  t0=$SECONDS
  sanitizer="$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)"
  if [ -z "$sanitizer" ]; then
    row "sanitizers" "skipped: no compute-sanitizer here" 0
  elif [ "$(limit 120)" -lt 10 ]; then
    row "sanitizers" "skipped: out of time" 0
  else
    l=$(limit 120)
    pids=()
    bad="$(sed -n 's/^  \(HUNG\|CRASHED\) \([^:]*\):.*/\2/p' "$OUTDIR/gpu_tests.txt" 2>/dev/null | paste -sd:)"
    echo
    for tool in memcheck racecheck; do
      if [ $tool = memcheck ]; then
        suites="CudaSentinel.*:CudaReduce.*:CudaSoftmax.*:CudaRandom.*:CudaIndex.*:CudaGemm.*" chunks=6
      else
        suites="CudaReduce.*:CudaSoftmax.*" chunks=2
      fi
      CUDA_MODULE_LOADING=LAZY TANDEM_NUM_THREADS=2 timeout -k 5 $((l + 30)) python3 "$HERE/run_chunks.py" \
        --title "$tool" --jobs "$chunks" --chunks "$chunks" --timeout "$l" --deadline "$l" \
        --fail-output '^========= (?!(COMPUTE-SANITIZER|ERROR SUMMARY|RACECHECK SUMMARY)\b)' \
        --report "$WORK/$tool.txt" --work "$WORK/$tool" "$sanitizer" --tool "$tool" --report-api-errors no \
        "$BIN_TESTS" --gtest_filter="$suites${bad:+-$bad}" >"$WORK/$tool.out" 2>&1 &
      pids+=($!)
    done
    wait "${pids[@]}"  # these two only (a plain wait would also wait for run.log's tee)
    for tool in memcheck racecheck; do
      grep -v '^  chunk ' "$WORK/$tool.out"
      cat "$WORK/$tool.txt" >>"$OUTDIR/sanitizers.txt" 2>/dev/null || cat "$WORK/$tool.out" >>"$OUTDIR/sanitizers.txt"
      result="$(grep -m1 "^$tool: [0-9]* tests" "$WORK/$tool.out" | sed 's/^[^:]*: //')"
      if grep -q "^$tool: .* 0 failed, 0 skipped, 0 hung, 0 crashed, 0 not run" "$WORK/$tool.out"; then
        row "$tool" "ok: $result" $((SECONDS - t0))
      else
        row "$tool" "FAILED: ${result:-no summary (see run.log)}" $((SECONDS - t0))
      fi
    done
    cap "$OUTDIR/sanitizers.txt"
  fi
fi

# 3. The programs, briefly: train on GPU 0, Cyclic DP in its three modes on 3 SM partitions, Pipe-BD's two
# workloads on 4 (and the compression one with --cuda-graph).
if wanted programs; then
  echo
  echo "== programs (output in programs.txt)"
  synthetic="synthetic:n=4096,classes=10,h=32,w=32,c=3"
  program "train" 45 "$HERE/tools/train/train" --device cuda:0 --model resnet18:cifar --dataset "$synthetic" \
    --batch 128 --epochs 1 --steps-per-epoch 32 --log-every 8
  for mode in dp-workers mp zero; do
    program "cyclic $mode" 30 "$HERE/tools/cyclic/cyclic" --workers cuda:0/3 --mode "$mode" --rule cdp-v2 \
      --micro-batches 3 --stages 3 --dataset "$synthetic" --batch 64 --max-rounds 24 --log-every 8 \
      --test-subset 512
  done
  TAIL_LINES=16 program "bd_bench" 75 "$HERE/bench/bd/bd_bench" --workload both --input 32 --batch 256 \
    --steps 6 --workers cuda:0/4
  # The compression workload again with its compute instructions replayed from CUDA graphs: beside the eager
  # table above, what graphs save where 32x32 blocks are launch-bound.
  TAIL_LINES=12 program "bd_bench --cuda-graph" 40 "$HERE/bench/bd/bd_bench" --workload compression --input 32 \
    --batch 256 --steps 6 --workers cuda:0/4 --cuda-graph
fi

# 4. models_bench beside PyTorch (f32 with TF32, and PyTorch's bf16 autocast), batch 256 at 224 and 32, and at 32
# with CUDA graphs.
if wanted models; then
  echo
  echo "== models_bench"
  timed "models_bench" 100 "$HERE/bench/models/models_bench" --device=cuda:0 --batch=256 --sizes=224,32 \
    --models=resnet18,resnet50,mobilenet_v2 --min-time=0.3 --benchmark_out="$OUTDIR/models_bench.json" \
    --benchmark_out_format=json
  # At 32x32, where launches dominate, the same models with each iteration replayed from a CUDA graph: a column
  # beside PyTorch eager (its JSON stays in the work folder; speed.json holds its figures).
  timed "models_bench --cuda-graph" 40 "$HERE/bench/models/models_bench" --device=cuda:0 --batch=256 --sizes=32 \
    --models=resnet18,resnet50,mobilenet_v2 --modes=fwd_bwd,step --cuda-graph --min-time=0.3 \
    --benchmark_out="$WORK/models_bench_graph.json" --benchmark_out_format=json
  torch_py="$(torch_python)"
  if [ -z "$torch_py" ]; then
    row "PyTorch (speed.py)" "skipped: no Python with torch and torchvision" 0
  else
    cases=(--models resnet18,resnet50,mobilenet_v2 --sizes 224,32 --batch 256)
    # Tandem's figures beside PyTorch's when models_bench wrote them whole; else PyTorch alone.
    if python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$OUTDIR/models_bench.json" 2>/dev/null; then
      cases=(--tandem "$OUTDIR/models_bench.json")
    fi
    graphed=()
    if [ "${cases[0]}" = --tandem ] &&
      python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$WORK/models_bench_graph.json" 2>/dev/null; then
      graphed=(--tandem-graph "$WORK/models_bench_graph.json")
    fi
    timed "PyTorch (speed.py)" 120 "$torch_py" "$HERE/torch/speed.py" "${cases[@]}" --bf16 --min-time 0.3 \
      --out "$WORK/speed" "${graphed[@]}"
    [ -f "$WORK/speed.json" ] && cp "$WORK/speed.json" "$OUTDIR/speed.json"
  fi
fi

# 5. kernels_bench: the memory-bound kernels against the device's copy bandwidth; conv_api_bench: cuDNN's legacy
# convolution calls (as Tandem makes them) against its graph API for the convolutions of the models_bench cases,
# which decides the API Tandem keeps (it starts no new shape after 45 s and prints its sums for what it timed).
if wanted kernels; then
  echo
  echo "== kernels_bench"
  timed "kernels_bench" 45 "$HERE/bench/kernels_bench" --benchmark_min_time=0.05 \
    --benchmark_out="$OUTDIR/kernels_bench.json" --benchmark_out_format=json
  TAIL_LINES=4 program "conv_api_bench" 60 "$HERE/bench/conv_api_bench" --batch 256 --sizes 224,32 \
    --models resnet18,resnet50,mobilenet_v2 --budget 45
fi

# 6. The kernel profiler's tables of one ResNet-50 fwd_bwd step (models_bench --profile: CUPTI's kernel times, or
# one stderr line saying why not and host timers), then PyTorch's profiler tables of the same step
# (torch/profile_step.py: per kernel and per op), both into profile.txt.
if wanted profile; then
  if ! "$HERE/bench/models/models_bench" --help 2>&1 | grep -qE -- '^ +--profile( |$)'; then
    row "profile" "skipped: models_bench has no --profile yet" 0
  else
    echo
    echo "== profile of one ResNet-50 fwd_bwd step (output in profile.txt)"
    timed "profile" 60 "$HERE/bench/models/models_bench" --device=cuda:0 --batch=256 --sizes=224 \
      --models=resnet50 --modes=fwd_bwd --min-time=0.1 --profile >"$OUTDIR/profile.txt" 2>&1
    grep -m1 "tandem: profiler" "$OUTDIR/profile.txt" || true
    sed -n '/^profile: /,$p' "$OUTDIR/profile.txt" | head -n 70
  fi
  torch_py="$(torch_python)"
  if [ -z "$torch_py" ]; then
    row "PyTorch profile" "skipped: no Python with torch and torchvision" 0
  else
    echo
    echo "== PyTorch's profile of the same step (output appended to profile.txt)"
    timed "PyTorch profile" 60 "$torch_py" "$HERE/torch/profile_step.py" --model resnet50 --size 224 --batch 256 \
      --mode fwd_bwd >"$WORK/torch_profile.txt" 2>&1
    printf '\n' >>"$OUTDIR/profile.txt"
    cat "$WORK/torch_profile.txt" >>"$OUTDIR/profile.txt"
    sed -n '/^profile: /,$p' "$WORK/torch_profile.txt" | head -n 70
  fi
  cap "$OUTDIR/profile.txt"
fi

for f in models_bench.json speed.json kernels_bench.json; do cap "$OUTDIR/$f"; done
echo
echo "== Tandem GPU bundle results ($((SECONDS - START_S)) s) =="
printf '%-22s %6s  %s\n' "step" "s" "result"
for r in "${rows[@]}"; do
  IFS='|' read -r step result secs <<<"$r"
  printf '%-22s %6s  %s\n' "$step" "$secs" "$result"
done
exit "$failed"
