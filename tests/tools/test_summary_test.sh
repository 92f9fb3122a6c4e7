#!/usr/bin/env bash
# tools/test_summary.py, the counter behind the last line of `tools/tandem test`: a target that crashed after
# writing only passing cases is a failure (Bazel's status wins), a target without results is a failure, a case
# skipped in one build and passed in another is passed, and one skipped everywhere is skipped.
set -euo pipefail
SUMMARY="$1"
work="$(mktemp -d "${TEST_TMPDIR:-/tmp}/summary.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# case_xml DIR CASES...: a GoogleTest XML with one case per argument, "name" (passed) or "name:skipped".
case_xml() {
  local dir="$1"; shift
  mkdir -p "$dir"
  {
    echo '<testsuites><testsuite name="S">'
    for c in "$@"; do
      case "$c" in
        *:skipped) echo "<testcase classname=\"S\" name=\"${c%:skipped}\"><skipped message=\"x.cc:1&#10;needs a GPU\"/></testcase>" ;;
        *) echo "<testcase classname=\"S\" name=\"$c\"/>" ;;
      esac
    done
    echo '</testsuite></testsuites>'
  } >"$dir/test.xml"
}
# bep FILE LABEL=STATUS...: build events with each target's overall status.
bep() {
  local file="$1"; shift
  : >"$file"
  for pair in "$@"; do
    printf '{"id":{"testSummary":{"label":"%s"}},"testSummary":{"overallStatus":"%s"}}\n' "${pair%%=*}" "${pair#*=}" >>"$file"
  done
}

# Build A: //t:ok passes, //t:crash wrote a passing case and then crashed, //t:gone wrote nothing,
# //t:gpu skipped its case.
case_xml "$work/a/t/ok" one two
case_xml "$work/a/t/crash" one
case_xml "$work/a/t/gpu" k:skipped
bep "$work/a.bep" //t:ok=PASSED //t:crash=FAILED //t:gone=FAILED //t:gpu=PASSED
printf '//t:ok\n//t:crash\n//t:gone\n//t:gpu\n' | python3 "$SUMMARY" collect A "$work/a" "$work/a.bep" 3 "$work/a.json"
# Build B: //t:gpu runs its case; //t:ok skips one of its own there and passes the other.
case_xml "$work/b/t/gpu" k
case_xml "$work/b/t/ok" one:skipped two
bep "$work/b.bep" //t:gpu=PASSED //t:ok=PASSED
printf '//t:gpu\n//t:ok\n' | python3 "$SUMMARY" collect B "$work/b" "$work/b.bep" 0 "$work/b.json"
# Build C: a case skipped there only.
case_xml "$work/c/t/only" z:skipped
bep "$work/c.bep" //t:only=PASSED
printf '//t:only\n' | python3 "$SUMMARY" collect C "$work/c" "$work/c.bep" 0 "$work/c.json"

rc=0
python3 "$SUMMARY" report "$work/a.json" "$work/b.json" "$work/c.json" >"$work/out" || rc=$?
cat "$work/out"
fail() { echo "FAIL: $*"; exit 1; }
# Passed: ok.one, ok.two, crash.one, gpu.k (passed in B). Failed: crash (target), gone (target). Skipped: only.z.
[ "$(tail -n 1 "$work/out")" = "4 passed, 2 failed, 1 skipped" ] || fail "last line: $(tail -n 1 "$work/out")"
[ "$rc" -ne 0 ] || fail "report exited 0 with failures"
grep -q '^FAILED (A): //t:crash: FAILED' "$work/out" || fail "the crashed target is not named"
grep -q '^FAILED (A): //t:gone: did not build or did not run' "$work/out" || fail "the target without results is not named"
grep -q '^skipped in every build (1): needs a GPU$' "$work/out" || fail "the skip reason is not grouped"
echo PASS
