# The checks the shell tests of tests/tools share (sourced): fail, has, lacks, finish, and $work, a scratch
# folder removed at exit.
work="$(mktemp -d "${TEST_TMPDIR:-/tmp}/check.XXXXXX")"
trap 'rm -rf "$work"' EXIT
failures=0

# fail MESSAGE: a check failed.
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# has TEXT OUTPUT WHAT: OUTPUT (of WHAT) contains TEXT.
has() {
  case "$2" in
    *"$1"*) ;;
    *) fail "$3 does not say '$1':"$'\n'"$2" ;;
  esac
}

# lacks TEXT OUTPUT WHAT: OUTPUT (of WHAT) does not contain TEXT.
lacks() {
  case "$2" in
    *"$1"*) fail "$3 says '$1':"$'\n'"$2" ;;
  esac
}

# finish: PASS and exit 0, or the number of failed checks and exit 1.
finish() {
  if [ "$failures" -gt 0 ]; then
    echo "$failures check(s) failed"
    exit 1
  fi
  echo "PASS"
  exit 0
}
