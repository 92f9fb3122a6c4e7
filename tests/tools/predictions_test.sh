#!/usr/bin/env bash
# The cost model's predictions where people read them, end to end on a small case each: models_bench --predict,
# kernels_bench --predict (one case, chosen by --benchmark_filter), bd_bench --project-gpus and cyclic
# --simulate --gpu print their figures and say they are predictions, not measurements; models_bench
# --compare-predictions puts --predict-json's predictions beside a profile of the same case. Outside the
# simulated-GPU build ($2 is "none") each prediction says that the counters come from the simulated GPU and exits 1.
set -u
source "$1"
build="$2" models_bench="$3" kernels_bench="$4" bd_bench="$5" cyclic="$6"

# exits NAME CODE RC: the run of NAME exited RC, which must be CODE.
exits() {
  [ "$3" -eq "$2" ] || fail "$1 exited $3, expected $2"
}

out="$("$models_bench" --predict h200 --models resnet18 --sizes 32 --modes fwd --batch 2 \
  --predict-json "$work/predictions.json" 2>&1)"
rc=$?
if [ "$build" = none ]; then
  exits "models_bench --predict" 1 "$rc"
  has "simulated GPU" "$out" "models_bench --predict"
  out="$("$kernels_bench" --predict h200 2>&1)"
  exits "kernels_bench --predict" 1 $?
  has "simulated GPU" "$out" "kernels_bench --predict"
  finish
fi

exits "models_bench --predict" 0 "$rc"
for text in "PREDICTIONS for NVIDIA H200" "not measurements" "== resnet18/32/fwd batch 2 on h200 (predicted)" \
  "images/s (predicted)"; do
  has "$text" "$out" "models_bench --predict"
done

# --cuda-graph: the same GPU time, and the host's time of one replay (two calls) instead of one call per op.
# step_ms N OUTPUT: the GPU's (N=1) or the host's (N=2) milliseconds in a --predict step line.
step_ms() { sed -nE "s/.*the longer of the GPU's ([0-9.]+) ms and the host's ([0-9.]+) ms.*/\\$1/p" <<<"$2"; }
eager="$out"
graphed="$("$models_bench" --predict h200 --models resnet18 --sizes 32 --modes fwd --batch 2 --cuda-graph 2>&1)"
exits "models_bench --predict --cuda-graph" 0 $?
has "(predicted, replayed from a CUDA graph)" "$graphed" "models_bench --predict --cuda-graph"
[ -n "$(step_ms 1 "$eager")" ] && [ "$(step_ms 1 "$eager")" = "$(step_ms 1 "$graphed")" ] ||
  fail "the graphed prediction's GPU time differs from the eager one's: $eager $graphed"
python3 - "$(step_ms 2 "$eager")" "$(step_ms 2 "$graphed")" <<'PY' || fail "host times: eager $(step_ms 2 "$eager") ms, graphed $(step_ms 2 "$graphed") ms"
import sys
eager, graphed = map(float, sys.argv[1:])
assert 0 < graphed < 0.1 < eager, (eager, graphed)  # two calls of ~19 us; ResNet-18's ops take milliseconds
PY

# The same case profiled on the simulated GPU beside its predictions: every op with kernels on both sides.
out="$("$models_bench" --models resnet18 --sizes 32 --modes fwd --batch 2 --min-time 0 \
  --compare-predictions "$work/predictions.json" 2>&1)"
exits "models_bench --compare-predictions" 0 $?
for text in "beside PREDICTED by the cost model for h200" "every op shown is both measured and predicted"; do
  has "$text" "$out" "models_bench --compare-predictions"
done
grep -qE '^conv2d +20 +20 +[0-9.]+ +[0-9.]+ +[0-9.]+$' <<<"$out" ||
  fail "models_bench --compare-predictions printed no conv2d row with both times: $out"

out="$("$kernels_bench" --predict h200 '--benchmark_filter=^relu/1048576$' 2>&1)"
exits "kernels_bench --predict" 0 $?
for text in "PREDICTED for NVIDIA H200" "not measured" "pred_pct_of_copy"; do
  has "$text" "$out" "kernels_bench --predict"
done
rows="$(grep -cE '^[a-z_0-9]+ +(n|batch) +[0-9]+ ' <<<"$out")"
[ "$rows" -eq 1 ] || fail "kernels_bench --predict --benchmark_filter=^relu/1048576$ printed $rows cases: $out"
grep -qE '^relu +n +1048576 ' <<<"$out" || fail "kernels_bench --predict printed no relu row: $out"

# Narrow teachers at 16x16: the simulated GPU records their blocks and stages in seconds.
out="$("$bd_bench" --project-gpus 4 --gpu h100 --workload compression --input 16 \
  --compression-teacher resnet18:cifar,classes=10,width=8 2>&1)"
exits "bd_bench --project-gpus" 0 $?
for text in "PROJECTED by the cost model" "not measured"; do
  has "$text" "$out" "bd_bench --project-gpus"
done
grep -qE '^TR\+DPU\+AHD +[0-9.]+x ' <<<"$out" || fail "bd_bench --project-gpus printed no TR+DPU+AHD speedup: $out"

out="$("$cyclic" --simulate --gpu h100 --model resnet18:cifar,width=4 --micro-batches 2 --stages 2 --batch 8 \
  --out "$work/cyclic" 2>&1)"
exits "cyclic --simulate --gpu" 0 $?
for text in "PROJECTED by the cost model" "not measured"; do
  has "$text" "$out" "cyclic --simulate --gpu"
done
grep -qE '^mp +cdp-v2 +2 +[0-9.]+ ' <<<"$out" || fail "cyclic --simulate --gpu printed no mp cdp-v2 row: $out"
finish
