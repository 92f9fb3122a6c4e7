#!/usr/bin/env bash
# Runs every GPU test and benchmark of the bundle on a GPU machine and prints one results table.
# The machine must have a CUDA 13 driver; cuDNN, cuBLAS, NCCL and cudart are taken from PyTorch's
# Python packages (site-packages/nvidia/*/lib) or /usr/local/cuda. Usage: gpu-bundle/run.sh [OUTDIR]
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUTDIR="${1:-${OUT:-$HERE/results}}"
mkdir -p "$OUTDIR"

# Find the CUDA libraries.
libdirs=("$HERE/lib")
for py in python3 /opt/torch/.venv/bin/python3; do
  command -v "$py" >/dev/null 2>&1 || continue
  sp=$("$py" -c 'import site,sys; print("\n".join(site.getsitepackages()))' 2>/dev/null) || continue
  for d in $sp; do
    for l in "$d"/nvidia/*/lib "$d"/nvidia/cu13/lib; do [ -d "$l" ] && libdirs+=("$l"); done
  done
done
for l in /usr/local/cuda/lib64 /usr/local/cuda/lib; do [ -d "$l" ] && libdirs+=("$l"); done
LD_LIBRARY_PATH="$(IFS=:; echo "${libdirs[*]}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH
# Load every CUDA module when a program starts: loaded lazily (CUDA's default), a kernel first launched while an
# NCCL kernel spins waiting for its peer (point-to-point transfers) can wait forever for the module load.
export CUDA_MODULE_LOADING=EAGER
echo "CUDA_MODULE_LOADING=$CUDA_MODULE_LOADING"
for so in libcudart.so.13 libcublas.so.13 libcudnn.so.9 libnccl.so.2; do
  found=""
  for d in "${libdirs[@]}"; do [ -e "$d/$so" ] && found="$d/$so" && break; done
  echo "library $so: ${found:-NOT FOUND}"
done
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "nvidia-smi: not available"

rows=()
# Tests: one binary holding every GPU test (they skip without a GPU, so 'skipped' here means no GPU).
if [ -x "$HERE/tests/gpu_tests" ]; then
  TANDEM_PARITY_DIR="$HERE/tests/data" "$HERE/tests/gpu_tests" --gtest_output="xml:$OUTDIR/gpu_tests.xml" >"$OUTDIR/gpu_tests.log" 2>&1
  rc=$?
  summary=$(python3 - "$OUTDIR/gpu_tests.xml" <<'PY'
import sys, xml.etree.ElementTree as ET
try:
    cases = list(ET.parse(sys.argv[1]).getroot().iter("testcase"))
except Exception as e:
    print("no XML (%s)" % e); sys.exit()
f = sum(1 for c in cases if c.find("failure") is not None)
s = sum(1 for c in cases if c.find("skipped") is not None or c.get("result") == "skipped")
print("%d passed, %d failed, %d skipped" % (len(cases) - f - s, f, s))
for c in cases:
    if c.find("failure") is not None:
        print("  FAILED %s.%s" % (c.get("classname"), c.get("name")))
PY
)
  rows+=("gpu_tests (exit $rc)|$(echo "$summary" | head -1)")
  echo "$summary"
fi
# Benchmarks: each bench binary with its GPU defaults; Google Benchmark ones also write JSON.
for b in $(find "$HERE/bench" -type f -perm -u+x -not -name '*.so*' 2>/dev/null | sort); do
  name=$(basename "$b")
  args=()
  if strings "$b" 2>/dev/null | grep -q benchmark_out; then
    args=(--benchmark_out="$OUTDIR/$name.json" --benchmark_out_format=json)
  fi
  start=$(date +%s)
  timeout 900 "$b" "${args[@]}" >"$OUTDIR/$name.txt" 2>&1
  rc=$?
  rows+=("$name (exit $rc, $(( $(date +%s) - start )) s)|output in $name.txt")
  echo "== $name =="
  cat "$OUTDIR/$name.txt"
done

echo
echo "== Tandem GPU bundle results =="
printf '%-40s %s\n' "binary" "result"
for r in "${rows[@]}"; do printf '%-40s %s\n' "${r%%|*}" "${r#*|}"; done
