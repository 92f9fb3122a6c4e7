#!/usr/bin/env bash
# The cost model's predictions where people read them, end to end on a small case each: models_bench --predict,
# kernels_bench --predict (one case, chosen by --benchmark_filter), bd_bench --project-gpus and cyclic
# --simulate --gpu print their figures and say they are predictions, not measurements. Outside the simulated-GPU
# build ($1 is "none") each says that the counters come from the simulated GPU and exits 1.
set -u
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# expect NAME CODE OUTPUT RC TEXT...: a run of NAME that exited RC with OUTPUT exited CODE and said every TEXT.
expect() {
  local name="$1" code="$2" output="$3" rc="$4"
  shift 4
  [ "$rc" -eq "$code" ] || fail "$name exited $rc, expected $code: $output"
  for text in "$@"; do
    case "$output" in
      *"$text"*) ;;
      *) fail "$name did not say '$text': $output" ;;
    esac
  done
}

build="$1" models_bench="$2" kernels_bench="$3" bd_bench="$4" cyclic="$5"
scratch="$(mktemp -d "${TEST_TMPDIR:-/tmp}/predictions.XXXXXX")"

out="$("$models_bench" --predict h200 --models resnet18 --sizes 32 --modes fwd --batch 8 2>&1)"
rc=$?
if [ "$build" = none ]; then
  expect "models_bench --predict" 1 "$out" "$rc" "simulated GPU"
  out="$("$kernels_bench" --predict h200 2>&1)"
  expect "kernels_bench --predict" 1 "$out" $? "simulated GPU"
else
  expect "models_bench --predict" 0 "$out" "$rc" "PREDICTIONS for NVIDIA H200" "not measurements" \
    "== resnet18/32/fwd batch 8 on h200 (predicted)" "images/s (predicted)"

  out="$("$kernels_bench" --predict h200 '--benchmark_filter=^relu/1048576$' 2>&1)"
  expect "kernels_bench --predict" 0 "$out" $? "PREDICTED for NVIDIA H200" "not measured" "pred_pct_of_copy"
  rows="$(grep -cE '^[a-z_0-9]+ +(n|batch) +[0-9]+ ' <<<"$out")"
  [ "$rows" -eq 1 ] || fail "kernels_bench --predict --benchmark_filter=^relu/1048576$ printed $rows cases: $out"
  grep -qE '^relu +n +1048576 ' <<<"$out" || fail "kernels_bench --predict printed no relu row: $out"

  # Narrow teachers at 16x16: the simulated GPU records their blocks and stages in seconds.
  out="$("$bd_bench" --project-gpus 4 --gpu h100 --workload compression --input 16 \
    --compression-teacher resnet18:cifar,classes=10,width=8 2>&1)"
  expect "bd_bench --project-gpus" 0 "$out" $? "PROJECTED by the cost model" "not measured" "TR+DPU+AHD"
  grep -qE '^TR\+DPU\+AHD +[0-9.]+x ' <<<"$out" || fail "bd_bench --project-gpus printed no TR+DPU+AHD speedup: $out"

  out="$("$cyclic" --simulate --gpu h100 --model resnet18:cifar,width=4 --micro-batches 2 --stages 2 --batch 8 \
    --out "$scratch/cyclic" 2>&1)"
  expect "cyclic --simulate --gpu" 0 "$out" $? "PROJECTED by the cost model" "not measured"
  grep -qE '^mp +cdp-v2 +2 +[0-9.]+ ' <<<"$out" || fail "cyclic --simulate --gpu printed no mp cdp-v2 row: $out"
fi
rm -rf "$scratch"

if [ "$failures" -gt 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all prediction checks passed ($build build)"
