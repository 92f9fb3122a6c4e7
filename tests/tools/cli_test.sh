#!/usr/bin/env bash
# Every program's command line (tools/flags): --help exits 0 and lists each flag the program had before CLI11
# took over its parsing; a bad number and an unknown flag exit 2 naming the flag and the value; a GPU asked for
# where there is none exits 1 with "<program>: device cuda:0 was requested but no CUDA GPU ...", never an abort.
set -u
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# expect BIN CODE TEXT ARGS...: BIN ARGS exits with CODE and says TEXT (stdout or stderr).
expect() {
  local bin="$1" code="$2" text="$3"
  shift 3
  local output rc
  output="$("$bin" "$@" 2>&1)"
  rc=$?
  [ "$rc" -eq "$code" ] || fail "$(basename "$bin") $* exited $rc, expected $code: $output"
  case "$output" in
    *"$text"*) ;;
    *) fail "$(basename "$bin") $* did not say '$text': $output" ;;
  esac
}

# no_device BIN NAME ARGS...: BIN ARGS, with every GPU hidden (a real one and the simulated ones), exits 1 within
# 60 s saying "NAME: device cuda:0 was requested but no CUDA GPU is available here", and does not abort.
no_device() {
  local bin="$1" name="$2"
  shift 2
  local output rc
  output="$(CUDA_VISIBLE_DEVICES="" TANDEM_CUDASIM_DEVICES=0 timeout 60 "$bin" "$@" 2>&1)"
  rc=$?
  [ "$rc" -eq 1 ] || fail "$name $* without a GPU exited $rc, expected 1: $output"
  case "$output" in
    *"$name: device cuda:0 was requested but no CUDA GPU is available here"*) ;;
    *) fail "$name $* without a GPU did not say '$name: device cuda:0 was requested but no CUDA GPU ...': $output" ;;
  esac
  case "$output" in
    *"terminate called"*) fail "$name $* without a GPU aborted: $output" ;;
  esac
}

# help BIN NAME FLAG...: --help starts with "usage: NAME" and lists every FLAG.
help() {
  local bin="$1" name="$2"
  shift 2
  local output
  output="$("$bin" --help 2>&1)" || fail "$name --help exited $?"
  case "$output" in
    "usage: $name"*) ;;
    *) fail "$name --help does not start with 'usage: $name': $output" ;;
  esac
  for flag in "$@"; do
    grep -qE -- "^ +$flag( |$)" <<<"$output" || fail "$name --help does not list $flag"
  done
}

train="$1" cyclic="$2" distill="$3" demo="$4" pack="$5" bd_bench="$6" cyclic_bench="$7" models_bench="$8"
loader_bench="$9" kernels_bench="${10}" conv_api_bench="${11}" batch_norm_cpu_bench="${12}" fit="${13}"
op_bench="${14}"

help "$train" train --model --dataset --epochs --stop-after --batch --lr --optimizer --momentum --weight-decay \
  --label-smoothing --schedule --transform --device --checkpoint --resume --seed --workers --steps-per-epoch \
  --log-every --no-eval --eval-only --precision
expect "$train" 2 "train: --epochs needs an integer >= 1, got '1.5'" --epochs 1.5
expect "$train" 2 "train: unknown precision 'fp16' (expected f32 or bf16)" --precision fp16
expect "$train" 2 "train: --lr needs a number >= 0, got 'fast'" --lr fast
expect "$train" 2 "train: unknown flag '--colour'" --colour red
expect "$train" 2 "train: --batch needs a value" --batch

help "$cyclic" cyclic --model --dataset --train-transform --test-transform --subset --test-subset --rule \
  --micro-batches --stages --mode --sync --split --workers --batch --lr --momentum --weight-decay --nesterov \
  --lr-schedule --epochs --max-rounds --seed --out --log-every --record-rounds --eval-every --checkpoint --resume \
  --loader-threads --simulate --simulate-rounds --gpu --input
expect "$cyclic" 2 "cyclic: --batch needs an integer >= 1, got '8x'" --batch 8x
expect "$cyclic" 2 "cyclic: unknown modelled GPU 'a100' (known: h100, h200)" --simulate --gpu a100
expect "$cyclic" 2 "cyclic: --eval-every needs a number >= 0, got '-1'" --eval-every=-1
expect "$cyclic" 2 "cyclic: unknown flag '--colour'" --colour red

help "$distill" distill --teacher --teacher-weights --student --cells --student-seed --dataset --subset --augment \
  --batch --epochs --stop-after --steps-per-epoch --optimizer --lr --momentum --no-nesterov --weight-decay \
  --lr-schedule --teacher-bn --seed --loader-threads --cuda-graph --strategy --workers --comm --memory-limit \
  --plan-model --plan --profile --profile-trials --out --resume
expect "$distill" 2 "distill: --cells needs an integer >= 1, got '0'" --teacher resnet18 --dataset synthetic --cells 0
expect "$distill" 2 "distill: unknown flag '--colour'" --teacher resnet18 --dataset synthetic --colour red
expect "$distill" 2 "distill: --cuda-graph needs CUDA workers" --teacher resnet18 --dataset synthetic --workers cpu:2 \
  --cuda-graph

help "$demo" "tools/tandem demo" --epochs --teacher-epochs --workers --subset --test-subset --batch --cache-dir --seed
expect "$demo" 2 "demo: --batch needs an integer >= 4, got '2'" --batch 2
expect "$demo" 2 "demo: --seed needs an integer >= 0, got 'one'" --seed one
expect "$demo" 2 "demo: unknown flag '--colour'" --colour red
expect "$demo" 2 "demo: unexpected argument 'now'" now

help "$pack" pack --input --output --split --shards --shard-mb
expect "$pack" 2 "pack: --shard-mb needs an integer >= 1, got '1e3'" --input synthetic --output x --shard-mb 1e3
expect "$pack" 2 "pack: unknown flag '--colour'" --input synthetic --output x --colour red

help "$bd_bench" bd_bench --workload --input --batch --workers --steps --nas-teacher --compression-teacher --cells \
  --project --profile-trials --plan-model --cuda-graph --json --project-gpus --gpu --sm-partitions
expect "$bd_bench" 2 "bd_bench: --project needs an integer >= 1, got 'x'" --project 4,x
expect "$bd_bench" 2 "bd_bench: unknown modelled GPU 'v100'" --project-gpus 4 --gpu v100
expect "$bd_bench" 2 "bd_bench: --project-gpus needs an integer >= 1, got '0'" --project-gpus 0
expect "$bd_bench" 2 "bd_bench: unknown plan model 'paper'" --plan-model paper
expect "$bd_bench" 2 "bd_bench: unknown flag '--colour'" --colour red
expect "$bd_bench" 2 "bd_bench: --cuda-graph with --project-gpus: projections run no workers" --project-gpus 4 \
  --cuda-graph

help "$cyclic_bench" cyclic_bench --model --batch --size --rounds --reps --configs
expect "$cyclic_bench" 2 "cyclic_bench: --rounds needs an integer >= 1, got 'many'" --rounds many
expect "$cyclic_bench" 2 "cyclic_bench: --configs: bad config '4x'" --configs 2x2,4x
expect "$cyclic_bench" 2 "cyclic_bench: unknown flag '--colour'" --colour red

help "$models_bench" models_bench --device --batch --sizes --models --modes --nchw --min-time --predict --predict-json \
  --no-bn-fusion --precision
expect "$models_bench" 2 "models_bench: unknown modelled GPU 'a100'" --predict a100
expect "$models_bench" 2 "models_bench: unknown precision 'f16' (expected f32 or bf16)" --precision f16
expect "$models_bench" 0 "--benchmark_filter" --help  # Google Benchmark's flags follow its own
expect "$models_bench" 2 "models_bench: --sizes needs an integer >= 1, got 'big'" --sizes=32,big
expect "$models_bench" 2 "models_bench: --min-time needs a number >= 0, got 'x'" --min-time=x

help "$loader_bench" loader_bench
expect "$loader_bench" 2 "loader_bench: unknown flag '--colour'" --colour red

help "$kernels_bench" kernels_bench --predict
expect "$kernels_bench" 0 "--benchmark_filter" --help
expect "$kernels_bench" 2 "kernels_bench: unknown modelled GPU 'h300'" --predict h300

help "$op_bench" op_bench --filter --device --elements --min-time --dtype --forward-only
expect "$op_bench" 2 "op_bench: --device: cpu, cuda or all, not 'gpu'" --device gpu
expect "$op_bench" 2 "op_bench: --elements needs an integer >= 0, got '-1'" --elements -1
expect "$op_bench" 2 "op_bench: unknown flag '--colour'" --colour red

help "$fit" fit --dir --no-record
expect "$fit" 2 "fit: unknown flag '--colour'" --colour red

help "$conv_api_bench" conv_api_bench --device --batch --sizes --models --iters --nchw --runtime-compiled --budget
expect "$conv_api_bench" 2 "conv_api_bench: --iters needs an integer >= 1, got '0'" --iters 0
expect "$conv_api_bench" 2 "conv_api_bench: --device must be a GPU (cuda or cuda:N)" --device cpu
expect "$conv_api_bench" 2 "conv_api_bench: unknown flag '--colour'" --colour red

help "$batch_norm_cpu_bench" batch_norm_cpu_bench --reps
expect "$batch_norm_cpu_bench" 2 "batch_norm_cpu_bench: --reps needs an integer >= 1, got '0'" --reps 0

# Every program that can run on a GPU, asked for one where none is (cyclic_bench, loader_bench and pack run on
# the CPU only and take no device).
scratch="$(mktemp -d "${TEST_TMPDIR:-/tmp}/cli.XXXXXX")"
no_device "$train" train --device cuda:0 --dataset synthetic
for mode in dp-workers mp zero; do
  no_device "$cyclic" cyclic --workers cuda:0/3 --mode "$mode"
done
no_device "$distill" distill --teacher resnet18 --dataset synthetic --workers cuda:0/4
no_device "$demo" demo --workers cuda:0/4 --cache-dir "$scratch/demo"
[ ! -e "$scratch/demo" ] || fail "demo --workers cuda:0/4 without a GPU made its cache (trained its teacher?) first"
for workload in nas compression; do
  no_device "$bd_bench" bd_bench --workload "$workload" --workers cuda:0/4
done
no_device "$models_bench" models_bench --device=cuda:0
no_device "$kernels_bench" kernels_bench  # GPU 0 always
no_device "$conv_api_bench" conv_api_bench
no_device "$op_bench" op_bench --device cuda
rm -rf "$scratch"

if [ "$failures" -gt 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all command-line checks passed"
