#!/usr/bin/env bash
# gpu-bundle/run.sh on a stand-in bundle whose binaries, nvidia-smi, compute-sanitizer and PyTorch interpreter
# are scripts that record how they were called. Without a GPU it says so at once and runs nothing. With a
# (stand-in) GPU it runs every step in order with the bundle's libraries unpacked onto LD_LIBRARY_PATH: the tests
# in chunks with eager CUDA module loading, the sanitizers (a reported race fails the run), the programs on
# cuda:0, cuda:0/3 and cuda:0/4, models_bench and speed.py --bf16 on its JSON, kernels_bench, conv_api_bench
# (its table in programs.txt), skips Tandem's profile (the stub has no --profile) and runs PyTorch's
# (torch/profile_step.py) into profile.txt; OUTDIR keeps at most 8 files of at most 16 MiB. A step that hangs ends
# when the budget does.
set -u
source "$1"
RUN_SH="$2" RUN_CHUNKS="$3"

b="$work/bundle"
mkdir -p "$b/tests" "$b/tools/train" "$b/tools/cyclic" "$b/bench/bd" "$b/bench/models" "$b/torch" "$work/stubs"
cp "$RUN_SH" "$b/run.sh"
cp "$RUN_CHUNKS" "$b/run_chunks.py"
mkdir "$work/libs" && echo "stand-in library" >"$work/libs/libstandin.so.1"
tar -cJf "$b/lib.tar.xz" -C "$work/libs" libstandin.so.1
export STUB_CALLS="$work/calls"
# stub PATH BODY: an executable script at PATH that records "its name, CUDA_MODULE_LOADING, its arguments".
stub() {
  local record='echo "$(basename "$0") ${CUDA_MODULE_LOADING:-unset} $*" >>"$STUB_CALLS"'
  printf '#!/usr/bin/env bash\n%s\n%s\n' "$record" "$2" >"$1"
  chmod +x "$1"
}
stub "$work/stubs/nvidia-smi" '[ -n "${STUB_NO_GPU:-}" ] && { echo "NVIDIA-SMI has failed: no driver"; exit 9; }
[ "$1" = -L ] && echo "GPU 0: NVIDIA Stand-in (UUID: GPU-0)" || echo "NVIDIA Stand-in, 81559 MiB, 580.00"'
# compute-sanitizer --tool T --report-api-errors no APP ARGS...: runs APP; racecheck reports a race.
stub "$work/stubs/compute-sanitizer" '[ "$2" = racecheck ] && export STUB_RACE=1
shift 4
exec "$@"'
# A GoogleTest binary of four tests, with --gtest_list_tests and --gtest_filter (positive patterns) as GoogleTest
# has them.
stub "$b/tests/gpu_tests" 'filter="*"
list=0
for a in "$@"; do
  case "$a" in
    --gtest_list_tests) list=1 ;;
    --gtest_filter=*) filter="${a#--gtest_filter=}" ;;
  esac
done
IFS=: read -ra patterns <<<"${filter%%-*}"
suite=""
for t in CudaReduce.Sum CudaReduce.Max CudaGemm.Small Other.One; do
  for p in "${patterns[@]}"; do
    [[ "$t" == $p ]] || continue
    if [ $list = 1 ]; then
      [ "${t%%.*}." = "$suite" ] || { suite="${t%%.*}."; echo "$suite"; }
      echo "  ${t#*.}"
    else
      echo "[ RUN      ] $t"
      [ -n "${STUB_RACE:-}" ] && [ "$t" = CudaReduce.Max ] && echo "========= Error: Race reported between two writes"
      echo "[       OK ] $t (0 ms)"
    fi
    break
  done
done'
stub "$b/tools/train/train" 'lib="${LD_LIBRARY_PATH%%:*}/libstandin.so.1"
[ -f "$lib" ] && echo "train libraries unpacked" >>"$STUB_CALLS"
head -c $((17 * 1024 * 1024)) /dev/zero | tr "\0" x
echo
echo "train: the last line"'
stub "$b/tools/cyclic/cyclic" ''
stub "$b/bench/bd/bd_bench" 'echo "TR+DPU+AHD 2.23x"'
stub "$b/bench/models/models_bench" 'for a in "$@"; do
  case "$a" in --benchmark_out=*) echo "{\"benchmarks\": []}" >"${a#--benchmark_out=}" ;; esac
done
echo "model            size  batch mode          ms/iter     images/s"'
stub "$b/bench/kernels_bench" '[ -n "${STUB_HANG:-}" ] && sleep 600
echo "relu 82.2%"'
stub "$b/bench/conv_api_bench" 'echo "conv_api_bench: graph API / legacy, GPU time over the shapes both ran: 0.950 (graph faster in 10 of 18 cases)"'
stub "$work/stubs/torch-python" 'case "$1" in */profile_step.py) echo "profile: PyTorch (stub) per kernel" ;; esac
while [ $# -gt 0 ]; do
  [ "$1" = --out ] && echo "{}" >"$2.json" && echo "x" >"$2.csv"
  shift
done'
export PATH="$work/stubs:$PATH" TANDEM_BUNDLE_TORCH_PYTHON="$work/stubs/torch-python"

# No GPU: nothing runs, and the run ends at once.
start=$SECONDS
out="$(STUB_NO_GPU=1 bash "$b/run.sh" "$work/out0" 2>&1)"
rc=$?
[ "$rc" -eq 0 ] || fail "run.sh without a GPU exited $rc"
has "no GPU here (nvidia-smi -L: NVIDIA-SMI has failed: no driver): the GPU steps are skipped" "$out" \
  "run.sh without a GPU"
[ $((SECONDS - start)) -lt 30 ] || fail "run.sh without a GPU took $((SECONDS - start)) s"
grep -qv '^nvidia-smi ' "$STUB_CALLS" && fail "run.sh without a GPU ran: $(grep -v '^nvidia-smi ' "$STUB_CALLS")"
[ "$(ls "$work/out0")" = run.log ] || fail "run.sh without a GPU left $(ls "$work/out0") in OUTDIR, not run.log"
rm -f "$STUB_CALLS"

# A GPU: every step, in order.
out="$(CUDA_MODULE_LOADING=LAZY bash "$b/run.sh" "$work/out" 2>&1)"
rc=$?
[ "$rc" -eq 1 ] || fail "run.sh with a race reported exited $rc, expected 1"
calls="$(cat "$STUB_CALLS" 2>/dev/null)"
has "GPU tests: 4 tests" "$out" "run.sh"
has "4 passed, 0 failed, 0 skipped, 0 hung, 0 crashed, 0 not run" "$out" "run.sh"
has "gpu_tests EAGER --gtest_color=no --gtest_filter=CudaReduce.Sum" "$calls" "the test binary's calls"
has "compute-sanitizer LAZY --tool memcheck --report-api-errors no $b/tests/gpu_tests --gtest_filter=CudaSentinel.*" \
  "$calls" "the sanitizer's calls"
has "compute-sanitizer LAZY --tool racecheck" "$calls" "the sanitizer's calls"
has "memcheck: 3 tests" "$out" "run.sh"
has "FAILED CudaReduce.Max: ========= Error: Race reported between two writes" "$out" "run.sh"
has "train libraries unpacked" "$calls" "the train stub"
has "train EAGER --device cuda:0 " "$calls" "the programs' calls"
for mode in dp-workers mp zero; do
  has "cyclic EAGER --workers cuda:0/3 --mode $mode " "$calls" "the programs' calls"
done
has "bd_bench EAGER --workload both --input 32 --batch 256 --steps 6 --workers cuda:0/4" "$calls" "the programs' calls"
has "bd_bench EAGER --workload compression --input 32 --batch 256 --steps 6 --workers cuda:0/4 --cuda-graph" "$calls" \
  "the programs' calls"
has "train: the last line" "$out" "run.sh"
has "models_bench EAGER --device=cuda:0 --batch=256 --sizes=224,32 --models=resnet18,resnet50,mobilenet_v2" \
  "$calls" "the benchmarks' calls"
has "torch-python EAGER $b/torch/speed.py --tandem $work/out/models_bench.json --bf16" "$calls" "speed.py's call"
has "models_bench EAGER --device=cuda:0 --batch=256 --sizes=32 --models=resnet18,resnet50,mobilenet_v2 --modes=fwd_bwd,step --cuda-graph" \
  "$calls" "the benchmarks' calls"
grep -qE -- "speed.py --tandem $work/out/models_bench.json --bf16 .*--tandem-graph [^ ]*/models_bench_graph.json" <<<"$calls" ||
  fail "speed.py was not given the graphed run: $calls"
has "kernels_bench EAGER --benchmark_min_time" "$calls" "the benchmarks' calls"
has "conv_api_bench EAGER --batch 256 --sizes 224,32 --models resnet18,resnet50,mobilenet_v2 --budget 45" "$calls" \
  "the benchmarks' calls"
has "graph faster in 10 of 18 cases" "$out" "run.sh (conv_api_bench's last lines)"
grep -qE '^profile +0  skipped: models_bench has no --profile yet' <<<"$out" || fail "run.sh ran the profile hook"
has "torch-python EAGER $b/torch/profile_step.py --model resnet50 --size 224 --batch 256 --mode fwd_bwd" "$calls" \
  "profile_step.py's call"
has "profile: PyTorch (stub) per kernel" "$out" "run.sh (PyTorch's profile)"
has "profile: PyTorch (stub) per kernel" "$(cat "$work/out/profile.txt")" "profile.txt"
has "racecheck" "$(grep -A20 '== Tandem GPU bundle results' <<<"$out" | grep FAILED)" "the results table's failures"
order="$(grep -oE '^(GPU tests:|memcheck:|== programs|== models_bench|== kernels_bench|== PyTorch.s profile|== Tandem GPU bundle results)' \
  <<<"$out" | uniq | paste -sd'|')"
[ "$order" = "GPU tests:|memcheck:|== programs|== models_bench|== kernels_bench|== PyTorch's profile|== Tandem GPU bundle results" ] ||
  fail "run.sh's steps came in the order $order"
[ "$(find "$work/out" -type f | wc -l)" -le 8 ] || fail "run.sh left more than 8 files: $(ls "$work/out")"
big="$(find "$work/out" -type f -size +16M)"
[ -z "$big" ] || fail "run.sh left files over 16 MiB: $big"
has "cut from" "$(tail -c 200 "$work/out/programs.txt")" "programs.txt (17 MiB of train output)"
has "== Tandem GPU bundle results" "$(cat "$work/out/run.log")" "run.log"

# A step that hangs: stopped when the budget runs out, and said so.
start=$SECONDS
out="$(STUB_HANG=1 TANDEM_BUNDLE_STEPS=kernels TANDEM_BUNDLE_BUDGET_S=8 bash "$b/run.sh" "$work/out2" 2>&1)"
rc=$?
[ "$rc" -eq 1 ] || fail "run.sh with a hung step exited $rc, expected 1"
[ $((SECONDS - start)) -lt 30 ] || fail "run.sh with an 8 s budget took $((SECONDS - start)) s"
has "kernels_bench" "$(grep 'cut at its limit of' <<<"$out")" "run.sh with a hung kernels_bench"

finish
