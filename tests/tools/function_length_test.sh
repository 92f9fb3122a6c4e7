#!/usr/bin/env bash
# tools/function_length.py, the function-length check of `tools/tandem test`, on a scratch repository: a
# 121-line function fails it (named, with its line and length, summary case failed) and a 120-line one passes;
# a lambda or local class inside a function counts towards it, a class or namespace body does not, a member
# function defined in its class is checked on its own, braces in comments, strings and preprocessor lines are
# ignored; tests/, third_party/ and untracked files are not checked; unbalanced braces are an error.
set -euo pipefail
source "$1"
CHECK="$(realpath "$2")"
SUMMARY="$(realpath "$3")"

# lines N: N numbered statement lines.
lines() { for ((i = 1; i <= $1; i++)); do echo "  x += $i;"; done; }
# function NAME N: a free function of N lines in all.
function_of() { echo "int $1(int x) {"; lines $(($2 - 2)); echo "}"; }

mkdir -p "$work/tools" "$work/lib" "$work/tests" "$work/third_party"
cp "$CHECK" "$work/tools/function_length.py"
cp "$SUMMARY" "$work/tools/test_summary.py"
function_of too_long 121 >"$work/lib/too_long.cc"
{
  echo "// { an open brace in a comment"
  echo "#define OPEN {"
  echo "template <typename T>"
  echo "int just_fits(T x) {  // the template line counts: 120 lines in all"
  echo '  const char* s = "}}}";'
  echo "  char c = '}';"
  echo "  auto twice = [&](int y) {"
  lines 50
  echo "    return 2 * y;"
  echo "  };"
  lines 61
  echo "  return twice(x) + s[0] + c;"
  echo "}"
} >"$work/lib/just_fits.cc"
{
  echo "int with_lambda(int x) {"
  echo "  auto f = [&](int y) {"
  lines 115
  echo "    return y;"
  echo "  };"
  echo "  return f(x);"
  echo "}"
} >"$work/lib/with_lambda.cc"
{
  echo "int with_local_class(int x) {"
  echo "  struct Local {"
  echo "    int get(int x) {"
  lines 113
  echo "      return x;"
  echo "    }"
  echo "  };"
  echo "  return Local().get(x);"
  echo "}"
} >"$work/lib/with_local_class.cc"
{
  echo "namespace outer {"
  echo "class Widget {"
  echo " public:"
  for ((k = 0; k < 60; k++)); do echo "  int small_$k(int x) const { return x + $k; }"; done
  echo " private:"
  echo "  int member_too_long(int x) {"
  lines 119
  echo "  }"
  echo "  std::vector<int> v_{1, 2, 3};"
  echo "};"
  echo "Widget::Widget(int a) : a_{a}, b_(a) {"
  lines 119
  echo "}"
  for ((k = 0; k < 60; k++)); do echo "int free_$k(int x) { return x; }"; done
  echo "}  // namespace outer"
} >"$work/lib/widget.h"
function_of in_a_test 200 >"$work/tests/in_a_test.cc"
function_of vendored 200 >"$work/third_party/vendored.cc"
function_of untracked 200 >"$work/lib/untracked.cc"
git -C "$work" init -q
git -C "$work" add tools lib/too_long.cc lib/just_fits.cc lib/with_lambda.cc lib/with_local_class.cc lib/widget.h \
  tests third_party

rc=0
out="$(python3 "$work/tools/function_length.py" --summary "$work/summary.json" 2>&1)" || rc=$?
[ "$rc" -eq 1 ] || fail "exited $rc with functions over 120 lines"
has "lib/too_long.cc:1: too_long (121 lines)" "$out" "the check"
has "lib/with_lambda.cc:1: with_lambda (121 lines)" "$out" "the check (a lambda counts towards its function)"
has "lib/with_local_class.cc:1: with_local_class (121 lines)" "$out" "the check (a local class counts)"
has "lib/widget.h:65: member_too_long (121 lines)" "$out" "the check (a member function defined in its class)"
has "lib/widget.h:188: Widget::Widget (121 lines)" "$out" "the check (a constructor with brace initializers)"
has "5 functions over 120 lines in 5 files" "$out" "the check (5 tracked sources outside tests/, third_party/)"
for ok in just_fits outer "Widget (" small_ free_ in_a_test vendored untracked; do
  lacks ": $ok" "$out" "the check (not too long, not a function or not checked)"
done
has '"failed"' "$(cat "$work/summary.json")" "the summary"
has "too_long.cc:1: too_long (121 lines)" "$(cat "$work/summary.json")" "the summary's note"

out="$(python3 "$work/tools/function_length.py" lib/just_fits.cc --max 119 2>&1)" || true
has "lib/just_fits.cc:3: just_fits (120 lines)" "$out" "--max 119"

git -C "$work" rm -q --cached lib/too_long.cc lib/with_lambda.cc lib/with_local_class.cc lib/widget.h
out="$(python3 "$work/tools/function_length.py" --summary "$work/summary.json" 2>&1)" || fail "fails on a 120-line function: $out"
has "0 functions over 120 lines in 1 files" "$out" "the check"
has '"passed"' "$(cat "$work/summary.json")" "the summary"

printf 'int broken(int x) {\n  if (x) {\n  return x;\n}\n' >"$work/lib/broken.cc"
rc=0
out="$(python3 "$work/tools/function_length.py" lib/broken.cc 2>&1)" || rc=$?
[ "$rc" -eq 1 ] || fail "exited $rc on unbalanced braces"
has "lib/broken.cc: the '{' at line 1 is never closed" "$out" "the check on unbalanced braces"
finish
