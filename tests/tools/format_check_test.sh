#!/usr/bin/env bash
# tools/format.py, the format check of `tools/tandem test`: in a scratch repository with the house style, a
# misformatted tracked source fails --check (named, with the line clang-format would change, nothing rewritten)
# and its summary case is failed; the plain run rewrites it to what clang-format gives; then --check passes.
# Untracked files and third_party/ are not checked.
set -euo pipefail
FORMAT="$(realpath "$1")"
STYLE="$(realpath "$2")"
SUMMARY="$(realpath "$3")"
work="$(mktemp -d "${TEST_TMPDIR:-/tmp}/format.XXXXXX")"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

mkdir -p "$work/tools" "$work/lib" "$work/third_party"
cp "$FORMAT" "$work/tools/format.py"
cp "$SUMMARY" "$work/tools/test_summary.py"
cp "$STYLE" "$work/.clang-format"
printf 'int twice(int x) { return 2 * x; }\n' >"$work/lib/good.cc"
printf 'int   thrice( int x ){return 3*x;}\n' >"$work/lib/bad.cc"
printf 'int   vendored( int x ){return x;}\n' >"$work/third_party/vendored.cc"
printf 'int   scratch( int x ){return x;}\n' >"$work/lib/untracked.cc"
git -C "$work" init -q
git -C "$work" add .clang-format tools lib/good.cc lib/bad.cc third_party

rc=0
out="$(python3 "$work/tools/format.py" --check --summary "$work/summary.json")" || rc=$?
[ "$rc" -eq 1 ] || fail "--check exited $rc on a misformatted file: $out"
grep -q "lib/bad.cc" <<<"$out" || fail "--check did not name lib/bad.cc: $out"
grep -q "^-int   thrice" <<<"$out" || fail "--check did not show the line it would change: $out"
grep -q "1 of 2 files differ" <<<"$out" || fail "--check should count 2 tracked sources (not third_party/), 1 differing: $out"
grep -q "good.cc\|untracked.cc\|vendored.cc" <<<"$(grep '^format:' <<<"$out")" && fail "named a file that is fine or not checked: $out"
grep -q '"failed"' "$work/summary.json" || fail "summary case not failed: $(cat "$work/summary.json")"
[ "$(cat "$work/lib/bad.cc")" = 'int   thrice( int x ){return 3*x;}' ] || fail "--check rewrote a file"

python3 "$work/tools/format.py" >/dev/null
[ "$(cat "$work/lib/bad.cc")" = 'int thrice(int x) { return 3 * x; }' ] || fail "not rewritten to the style: $(cat "$work/lib/bad.cc")"
[ "$(cat "$work/lib/untracked.cc")" = 'int   scratch( int x ){return x;}' ] || fail "an untracked file was rewritten"

python3 "$work/tools/format.py" --check --summary "$work/summary.json" >/dev/null || fail "--check fails after formatting"
grep -q '"passed"' "$work/summary.json" || fail "summary case not passed: $(cat "$work/summary.json")"
echo "PASSED"
