#!/usr/bin/env bash
# tools/gpu_bundle/run_chunks.py on a stand-in GoogleTest binary (gtest_standin): the test that hangs and the
# one that crashes, in different chunks, are both named, the tests after them in their chunks still run, every
# other test is counted, and the whole run ends at its deadline; --fail-output turns a reported line into a failure.
set -u
RUN_CHUNKS="$1" STANDIN="$2"
work="$(mktemp -d "${TEST_TMPDIR:-/tmp}/chunks.XXXXXX")"
trap 'rm -rf "$work"' EXIT
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
# has TEXT NAME OUTPUT: OUTPUT (of the run NAME) contains TEXT.
has() {
  case "$3" in
    *"$1"*) ;;
    *) fail "$2 does not say '$1':"$'\n'"$3" ;;
  esac
}

# 17 tests in 4 chunks of 5, 4, 4, 4: chunk 1 ends with Stall.Hangs then Stall.AfterTheHang, chunk 3 with
# Gamma.Crashes then Gamma.AfterTheCrash.
start=$(date +%s)
out="$(python3 "$RUN_CHUNKS" --chunks 4 --jobs 2 --timeout 5 --report "$work/report.txt" --work "$work/logs" \
  "$STANDIN" 2>&1)"
rc=$?
[ "$rc" -eq 1 ] || fail "a run with failures exited $rc, expected 1"
has "tests: 17 tests" "the run" "$out"
has "13 passed, 1 failed, 1 skipped, 1 hung, 1 crashed, 0 not run" "the run" "$out"
has "HUNG Stall.Hangs: chunk 1, no result within 5 s; its output: / the stand-in's hang begins" "the run" "$out"
has "CRASHED Gamma.Crashes: chunk 3, killed by SIGSEGV; its output: / the stand-in's crash begins" "the run" "$out"
has "FAILED Beta.Fails: " "the run" "$out"
has "the stand-in's failure" "the run" "$out"
has "HUNG Stall.Hangs (no result within 5 s); its 1 later tests go to chunk" "the run" "$out"
has "CRASHED Gamma.Crashes (killed by SIGSEGV); its 1 later tests go to chunk" "the run" "$out"
[ $(($(date +%s) - start)) -lt 40 ] || fail "the run took $(($(date +%s) - start)) s for a 5 s chunk timeout"
report="$(cat "$work/report.txt" 2>/dev/null)"
has "== FAILED Beta.Fails" "the report" "$report"
has "Expected equality of these values:" "the report" "$report"
has "== HUNG Stall.Hangs: the end of chunk 1's log" "the report" "$report"
has "== CRASHED Gamma.Crashes: the end of chunk 3's log" "the report" "$report"
if command -v gdb >/dev/null; then
  has "backtraces of the hung process (gdb):" "the report" "$report"
fi

# The deadline (4 s) stops the hung chunk: its test and the one after it are not run, and nothing is called hung.
start=$(date +%s)
out="$(python3 "$RUN_CHUNKS" --chunks 4 --jobs 2 --timeout 60 --deadline 4 "$STANDIN" 2>&1)"
[ $(($(date +%s) - start)) -lt 20 ] || fail "a run with a 4 s deadline took $(($(date +%s) - start)) s"
has "12 passed, 1 failed, 1 skipped, 0 hung, 1 crashed, 2 not run" "the run with a deadline" "$out"
has "NOT RUN Stall.Hangs (stopped when the time ran out)" "the run with a deadline" "$out"

# The binary's own arguments apply to the listing too: only passing tests here, exit status 0.
out="$(python3 "$RUN_CHUNKS" --chunks 3 "$STANDIN" --gtest_filter='Alpha.*:Small/*' 2>&1)"
rc=$?
[ "$rc" -eq 0 ] || fail "a run where every test passes exited $rc"
has "6 passed, 0 failed, 0 skipped, 0 hung, 0 crashed, 0 not run" "the passing run" "$out"

# --fail-output: a passed test whose output matches (as a compute-sanitizer report would) fails.
out="$(python3 "$RUN_CHUNKS" --fail-output "stand-in's rep" "$STANDIN" --gtest_filter='Gamma.One:Alpha.*' 2>&1)"
rc=$?
[ "$rc" -eq 1 ] || fail "a run with a flagged output exited $rc, expected 1"
has "3 passed, 1 failed, 0 skipped" "the run with --fail-output" "$out"
has "FAILED Gamma.One: the stand-in's report" "the run with --fail-output" "$out"

# A binary that cannot list its tests.
out="$(python3 "$RUN_CHUNKS" /bin/false 2>&1)"
rc=$?
[ "$rc" -eq 2 ] || fail "a binary that cannot list its tests: exit $rc, expected 2"
has "could not list the tests of /bin/false" "the listing failure" "$out"

if [ "$failures" -gt 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "PASS"
