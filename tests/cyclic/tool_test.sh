#!/bin/bash
# tools:cyclic end to end: --help, clear errors (exit 2), unit-time timelines, a short training with its outputs,
# and resuming from its checkpoint.
set -u
bin="$1"
out="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*"; exit 1; }

"$bin" --help | grep -q "usage: cyclic" || fail "--help"

expect_exit2() {
  local what="$1" needle="$2"
  shift 2
  local err
  err=$("$bin" "$@" 2>&1 >/dev/null)
  local rc=$?
  [ "$rc" -eq 2 ] || fail "$what: exit $rc (want 2): $err"
  echo "$err" | grep -q "$needle" || fail "$what: message '$err' lacks '$needle'"
}
common=(--subset 256 --test-subset 64 --batch 8 --model resnet18:cifar,width=4 --max-rounds 2)
expect_exit2 "N out of range" "micro-batches N must be in" --micro-batches 0 "${common[@]}"
expect_exit2 "S out of range" "stages S must be in" --stages 65 "${common[@]}"
expect_exit2 "S above the units" "only 13 units" --stages 14 "${common[@]}"
expect_exit2 "mp on too few workers" "needs 4 workers" --mode mp --workers cpu:2 "${common[@]}"
expect_exit2 "unknown rule" "unknown update rule" --rule cdp-v3
expect_exit2 "unknown flag" "unknown flag" --frobnicate 1
expect_exit2 "bad split" "no unit named" --split conv1,layer9.0 --stages 2 "${common[@]}"

mkdir -p "$out/run"
# --out folders are created, parents included.
"$bin" --simulate --micro-batches 3 --stages 3 --out "$out/sim/nested/.." >/dev/null || fail "--simulate"
touch "$out/a-file"
msg="$("$bin" --simulate --micro-batches 3 --stages 3 --out "$out/a-file/sim" 2>&1)" && fail "--out under a file succeeded"
echo "$msg" | grep -q "cannot create the folder .*a-file/sim" || fail "--out under a file: unclear error: $msg"
for f in timeline_dp.csv timeline_cdp-v1.csv activations_sim.csv comm_sim.csv; do
  [ -s "$out/sim/$f" ] || fail "--simulate did not write $f"
done
# The CDP column of the stored activations is N(S+1)/2 = 6 in the steady state.
awk -F, 'NR > 1 && $1 >= 4 && $1 < 12 && $3 != 6 { bad = 1 } END { exit bad }' "$out/sim/activations_sim.csv" ||
  fail "CDP stored activations are not constant"

"$bin" --rule cdp-v2 --micro-batches 2 --stages 2 --subset 256 --test-subset 64 --batch 8 \
  --model resnet18:cifar,width=4 --max-rounds 4 --log-every 2 --out "$out/run" \
  --checkpoint "$out/run/ck.safetensors" >"$out/run/stdout" || fail "training: $(cat "$out/run/stdout")"
for f in log.csv eval.csv memory.csv memory_wall.csv comm.csv trace.json summary.json ck.safetensors; do
  [ -s "$out/run/$f" ] || fail "training did not write $f"
done
[ "$(wc -l < "$out/run/log.csv")" -eq 3 ] || fail "log.csv should have a header and 2 lines"
grep -q '"rule": "cdp-v2"' "$out/run/summary.json" || fail "summary.json"

"$bin" --rule cdp-v2 --micro-batches 2 --stages 2 --subset 256 --test-subset 64 --batch 8 \
  --model resnet18:cifar,width=4 --max-rounds 6 --log-every 2 --resume "$out/run/ck.safetensors" \
  >"$out/resume.txt" || fail "resume: $(cat "$out/resume.txt")"
grep -q "resumed from .* at round 4" "$out/resume.txt" || fail "resume did not start at round 4"
grep -q "^round      6" "$out/resume.txt" || fail "resume did not train to round 6"
expect_exit2 "resume with another rule" "another rule" --rule dp --micro-batches 2 --stages 2 --subset 256 \
  --batch 8 --model resnet18:cifar,width=4 --max-rounds 6 --resume "$out/run/ck.safetensors"
echo PASS
