#!/usr/bin/env bash
# tools:distill from the command line: --help, bad flags and configurations (exit 2 with a message), a small
# run with its files, a resumed run, and the stitched students (separable and supernet) evaluated by tools:train.
set -u
distill="$1"
train="$2"
out="${TEST_TMPDIR:-/tmp}/distill_cli"
rm -rf "$out"
failures=0

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# expect_exit CODE TEXT -- COMMAND...: the command exits with CODE and prints TEXT (stdout or stderr).
expect_exit() {
  local code="$1" text="$2"
  shift 3
  local output rc
  output="$("$@" 2>&1)"
  rc=$?
  [ "$rc" -eq "$code" ] || fail "'$*' exited $rc, expected $code: $output"
  case "$output" in
    *"$text"*) ;;
    *) fail "'$*' did not say '$text': $output" ;;
  esac
}

# model_spec_of FILE: the model spec a safetensors file's metadata records (its JSON header: an 8-byte
# little-endian length, then the header).
model_spec_of() {
  python3 -c '
import json, struct, sys
f = open(sys.argv[1], "rb")
n = struct.unpack("<Q", f.read(8))[0]
print(json.loads(f.read(n))["__metadata__"]["tandem.model"])' "$1"
}

base=(--teacher "resnet18:cifar,width=4,classes=10" --student separable --dataset "synthetic:n=16,h=16,w=16,c=3"
      --batch 8 --profile-trials 1)

expect_exit 0 "usage: distill" -- "$distill" --help
expect_exit 2 "unknown flag '--bogus'" -- "$distill" "${base[@]}" --bogus
expect_exit 2 "--batch needs an integer" -- "$distill" "${base[@]}" --batch x
expect_exit 2 "--teacher is required" -- "$distill" --dataset synthetic
expect_exit 2 "strategy 'fast' is not one of" -- "$distill" "${base[@]}" --strategy fast
expect_exit 2 "--memory-limit needs a positive size" -- "$distill" "${base[@]}" --memory-limit lots
expect_exit 2 "unknown plan model 'paper'" -- "$distill" "${base[@]}" --plan-model paper
expect_exit 2 "--memory-limit needs --plan-model tandem" -- "$distill" "${base[@]}" --plan-model pipe-bd --memory-limit 1GiB
expect_exit 2 "unknown model 'resnet7'" -- "$distill" "${base[@]}" --teacher resnet7
expect_exit 2 "cpu:x" -- "$distill" "${base[@]}" --workers cpu:x
expect_exit 2 "8 workers need at least 8 blocks" -- "$distill" "${base[@]}" --workers cpu:8 --strategy tr
expect_exit 2 "the plan uses" -- "$distill" "${base[@]}" --workers cpu:2 --plan <(echo '{"stages": [{"first": 0, "last": 3, "replicas": 3}]}')

# A run of two strategies for one of two epochs, then its resumption.
expect_exit 0 "TR+DPU+AHD" -- "$distill" "${base[@]}" --workers cpu:2 --strategy tr,ahd --epochs 2 --stop-after 1 --out "$out"
for f in profile.json plan.json summary.json tr/block0.safetensors tr/block3.safetensors tr/student.safetensors \
         tr/trace.json ahd/student.safetensors; do
  [ -s "$out/$f" ] || fail "missing $out/$f"
done
expect_exit 0 "block 3:" -- "$distill" "${base[@]}" --workers cpu:2 --strategy tr,ahd --epochs 2 --resume --out "$out"
# The plan it saved can be given back by hand.
expect_exit 0 "from $out/plan.json" -- "$distill" "${base[@]}" --workers cpu:2 --strategy ahd --plan "$out/plan.json" \
  --profile "$out/profile.json"

# The paper's planner on the saved profile; the summary gives both models' step times and the measured one.
expect_exit 0 "AHD step time: predicted" -- "$distill" "${base[@]}" --workers cpu:2 --strategy ahd --epochs 2 \
  --plan-model pipe-bd --profile "$out/profile.json"

# tools:train evaluates the stitched student.
spec="$(model_spec_of "$out/tr/student.safetensors")"
[ "$spec" = "resnet18:cifar,width=4,classes=10,separable,seed=0" ] || fail "student spec '$spec'"
expect_exit 0 "test accuracy of" -- "$train" --model "$spec" --dataset "synthetic:n=16,h=16,w=16,c=3" --batch 8 \
  --eval-only "$out/tr/student.safetensors" --workers 0 --device cpu

# A supernet student: its stitched model is the registry's supernet student of the teacher.
expect_exit 0 "TR" -- "$distill" --teacher "mobilenet_v2:cifar,width_mult=0.25,classes=10" --student supernet \
  --cells 1 --dataset "synthetic:n=32,h=32,w=32,c=3" --batch 16 --strategy tr --workers cpu:2 --out "$out/sn"
spec="$(model_spec_of "$out/sn/tr/student.safetensors")"
[ "$spec" = "mobilenet_v2:cifar,width_mult=0.25,classes=10,supernet=1,image=32,seed=0" ] || fail "supernet student spec '$spec'"
expect_exit 0 "test accuracy of" -- "$train" --model "$spec" --dataset "synthetic:n=32,h=32,w=32,c=3" --batch 16 \
  --eval-only "$out/sn/tr/student.safetensors" --workers 0 --device cpu

if [ "$failures" -gt 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all tools:distill checks passed"
