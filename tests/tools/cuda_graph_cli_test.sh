#!/usr/bin/env bash
# train, models_bench and distill with --cuda-graph end to end on a GPU (the simulated one in the cudasim build): the
# step is captured (its node count said) and replayed, distill's workers replay their compute instructions (its
# table says how many), and all exit 0. Without a GPU: skipped.
set -u
train="$1" models_bench="$2" distill="$3"
fail() { echo "FAIL: $*"; exit 1; }

out="$("$train" --device cuda:0 --model resnet18:cifar,width=4 --dataset synthetic:n=64,h=8,w=8,classes=4 \
  --batch 16 --epochs 1 --no-eval --log-every 1 --cuda-graph 2>&1)"
rc=$?
case "$out" in
  *"no CUDA GPU is available here"*)
    echo "SKIP: no GPU"
    exit 0
    ;;
esac
[ "$rc" -eq 0 ] || fail "train --cuda-graph exited $rc: $out"
grep -q "cuda graph: the step is [0-9]* nodes, replayed with one launch" <<<"$out" ||
  fail "train --cuda-graph did not capture the step: $out"

out="$("$models_bench" --device=cuda:0 --batch=2 --sizes=32 --models=mobilenet_v2 --modes=step --cuda-graph \
  --min-time=0 2>&1)" || fail "models_bench --cuda-graph exited $?: $out"
grep -q "graph_nodes=[0-9]" <<<"$out" || fail "models_bench --cuda-graph reports no graph_nodes: $out"
# 3 steps of TR on 2 SM partitions: per worker 2 teacher and 2 student keys, each run eagerly, then captured and
# replayed, then replayed: 8 graphs, 16 replays.
out="$("$distill" --teacher "resnet18:cifar,width=4,classes=10" --student separable \
  --dataset "synthetic:n=24,h=16,w=16,c=3" --batch 8 --profile-trials 1 --strategy tr --workers cuda:0/2 \
  --cuda-graph 2>&1)" || fail "distill --cuda-graph exited $?: $out"
grep -q "TR          cuda graph: 16 compute instructions replayed from 8 graphs, 8 run eagerly" <<<"$out" ||
  fail "distill --cuda-graph did not replay as expected: $out"
echo "PASS"
