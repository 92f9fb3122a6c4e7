#!/usr/bin/env bash
# tools/gpu_bundle/run_chunks.py on a stand-in GoogleTest binary (gtest_standin): the test that hangs and the
# one that crashes, in different chunks, are both named, the tests after them in their chunks still run, every
# other test is counted, and the whole run ends at its deadline; --fail-output turns a reported line into a failure.
set -u
source "$1"
RUN_CHUNKS="$2" STANDIN="$3"

# 17 tests in 4 chunks of 5, 4, 4, 4: chunk 1 ends with Stall.Hangs then Stall.AfterTheHang, chunk 3 with
# Gamma.Crashes then Gamma.AfterTheCrash.
start=$(date +%s)
out="$(python3 "$RUN_CHUNKS" --chunks 4 --jobs 2 --timeout 5 --report "$work/report.txt" --work "$work/logs" \
  "$STANDIN" 2>&1)"
rc=$?
[ "$rc" -eq 1 ] || fail "a run with failures exited $rc, expected 1"
has "tests: 17 tests" "$out" "the run"
has "13 passed, 1 failed, 1 skipped, 1 hung, 1 crashed, 0 not run" "$out" "the run"
has "HUNG Stall.Hangs: chunk 1, no result within 5 s; its output: / the stand-in's hang begins" "$out" "the run"
has "CRASHED Gamma.Crashes: chunk 3, killed by SIGSEGV; its output: / the stand-in's crash begins" "$out" "the run"
has "FAILED Beta.Fails: " "$out" "the run"
has "the stand-in's failure" "$out" "the run"
has "HUNG Stall.Hangs (no result within 5 s); its 1 later tests go to chunk" "$out" "the run"
has "CRASHED Gamma.Crashes (killed by SIGSEGV); its 1 later tests go to chunk" "$out" "the run"
[ $(($(date +%s) - start)) -lt 40 ] || fail "the run took $(($(date +%s) - start)) s for a 5 s chunk timeout"
report="$(cat "$work/report.txt" 2>/dev/null)"
has "== FAILED Beta.Fails" "$report" "the report"
has "Expected equality of these values:" "$report" "the report"
has "== HUNG Stall.Hangs: the end of chunk 1's log" "$report" "the report"
has "== CRASHED Gamma.Crashes: the end of chunk 3's log" "$report" "the report"
if command -v gdb >/dev/null; then
  has "backtraces of the hung process (gdb):" "$report" "the report"
fi

# The deadline (4 s) stops the hung chunk: its test and the one after it are not run, and nothing is called hung.
start=$(date +%s)
out="$(python3 "$RUN_CHUNKS" --chunks 4 --jobs 2 --timeout 60 --deadline 4 "$STANDIN" 2>&1)"
[ $(($(date +%s) - start)) -lt 20 ] || fail "a run with a 4 s deadline took $(($(date +%s) - start)) s"
has "12 passed, 1 failed, 1 skipped, 0 hung, 1 crashed, 2 not run" "$out" "the run with a deadline"
has "NOT RUN Stall.Hangs (stopped when the time ran out)" "$out" "the run with a deadline"

# The binary's own arguments apply to the listing too: only passing tests here, exit status 0.
out="$(python3 "$RUN_CHUNKS" --chunks 3 "$STANDIN" --gtest_filter='Alpha.*:Small/*' 2>&1)"
rc=$?
[ "$rc" -eq 0 ] || fail "a run where every test passes exited $rc"
has "6 passed, 0 failed, 0 skipped, 0 hung, 0 crashed, 0 not run" "$out" "the passing run"

# --fail-output: a passed test whose output matches (as a compute-sanitizer report would) fails.
out="$(python3 "$RUN_CHUNKS" --fail-output "stand-in's rep" "$STANDIN" --gtest_filter='Gamma.One:Alpha.*' 2>&1)"
rc=$?
[ "$rc" -eq 1 ] || fail "a run with a flagged output exited $rc, expected 1"
has "3 passed, 1 failed, 0 skipped" "$out" "the run with --fail-output"
has "FAILED Gamma.One: the stand-in's report" "$out" "the run with --fail-output"

# A binary that cannot list its tests.
out="$(python3 "$RUN_CHUNKS" /bin/false 2>&1)"
rc=$?
[ "$rc" -eq 2 ] || fail "a binary that cannot list its tests: exit $rc, expected 2"
has "could not list the tests of /bin/false" "$out" "the listing failure"

finish
