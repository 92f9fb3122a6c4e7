#!/usr/bin/env bash
# gpu-bundle/run.sh runs the bundle's test binary and benchmarks with eager CUDA module loading (lazy loading
# can deadlock with NCCL's point-to-point kernels), whatever the caller's environment says. Stand-in binaries
# record the environment they get.
set -euo pipefail
RUN_SH="$1"
bundle="$(mktemp -d "${TEST_TMPDIR:-/tmp}/bundle.XXXXXX")"
trap 'rm -rf "$bundle"' EXIT
mkdir -p "$bundle/tests" "$bundle/bench/kernels"
cp "$RUN_SH" "$bundle/run.sh"
cat >"$bundle/tests/gpu_tests" <<'STUB'
#!/usr/bin/env bash
echo "${CUDA_MODULE_LOADING:-unset}" >"$(dirname "$0")/../tests_saw"
for a in "$@"; do
  case "$a" in --gtest_output=xml:*) printf '<testsuites><testsuite><testcase classname="A" name="b"/></testsuite></testsuites>\n' >"${a#--gtest_output=xml:}" ;; esac
done
STUB
cat >"$bundle/bench/kernels/kernels_bench" <<'STUB'
#!/usr/bin/env bash
echo "${CUDA_MODULE_LOADING:-unset}" >"$(dirname "$0")/../../bench_saw"
STUB
chmod +x "$bundle/tests/gpu_tests" "$bundle/bench/kernels/kernels_bench"

output="$(CUDA_MODULE_LOADING=LAZY bash "$bundle/run.sh" "$bundle/out" 2>&1)"
fail=0
for who in tests bench; do
  saw="$(cat "$bundle/${who}_saw" 2>/dev/null || echo "did not run")"
  if [ "$saw" != "EAGER" ]; then
    echo "FAIL: the $who binary ran with CUDA_MODULE_LOADING=$saw, not EAGER"
    fail=1
  fi
done
if ! grep -q "1 passed, 0 failed, 0 skipped" <<<"$output"; then
  echo "FAIL: run.sh did not report the stand-in test binary's result:"
  echo "$output"
  fail=1
fi
[ "$fail" = 0 ] && echo "PASS"
exit "$fail"
