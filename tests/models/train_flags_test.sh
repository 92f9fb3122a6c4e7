#!/usr/bin/env bash
# tools:train's command line: --help exits 0, bad flags print one error line plus the usage and exit 2.
set -u
train="$1"
fail() { echo "FAIL: $*"; exit 1; }

"$train" --help > out.txt 2>&1 || fail "--help exited $?"
grep -q "^usage: train" out.txt || fail "--help prints no usage"

for args in "--bogus 1" "--epochs 0" "--batch x" "--model resnet99" "--optimizer lbfgs" "--lr" \
            "--dataset nonsense:x" "--schedule linear --dataset synthetic:n=64,h=8,w=8" \
            "--eval-only /nonexistent.safetensors --resume /nonexistent.safetensors --dataset synthetic:n=64,h=8,w=8"; do
  # shellcheck disable=SC2086
  "$train" $args > out.txt 2> err.txt
  rc=$?
  [ "$rc" -eq 2 ] || fail "'$args' exited $rc, expected 2"
  # The first line is the error (after the note that the devices are simulated, on the simulated GPU).
  first="$(grep -v '^tandem: the .* CUDA device(s) are simulated' err.txt | head -n 1)"
  echo "$first" | grep -q "^train: " || fail "'$args': the first line is not an error: $first"
  grep -q "^usage: train" err.txt || fail "'$args': no usage after the error"
done
# --eval-only of a missing file: an error naming the file (exit 1), no training.
"$train" --dataset synthetic:n=64,h=8,w=8 --batch 16 --eval-only /nonexistent/w.safetensors > out.txt 2> err.txt
rc=$?
[ "$rc" -ne 0 ] || fail "--eval-only of a missing file exited 0"
grep -q "/nonexistent/w.safetensors" err.txt || fail "--eval-only error does not name the file: $(cat err.txt)"
grep -q "epoch" out.txt && fail "--eval-only trained"
# --precision bf16: trains (a few steps of a small model), saying the policy in its first lines.
"$train" --model resnet18:cifar,width=4 --dataset synthetic:n=64,h=8,w=8 --batch 16 --steps-per-epoch 2 \
  --precision bf16 --no-eval > out.txt 2> err.txt || fail "--precision bf16 exited $?: $(cat err.txt)"
grep -q "^precision: bf16 (" out.txt || fail "--precision bf16 does not say the policy: $(cat out.txt)"
grep -q "^epoch 1/1: train loss" out.txt || fail "--precision bf16 did not finish its epoch: $(cat out.txt)"
echo "PASS"
