#!/usr/bin/env bash
# tools/cache_trim.py, which keeps the launcher's Bazel disk cache under TANDEM_CACHE_MAX_GIB: over the limit, the
# least recently used entries (the later of written and read) go until three quarters of the limit are left;
# under it nothing goes; files outside ac/ and cas/ are never touched; a bad limit is refused by name.
set -euo pipefail
TRIM="$(realpath "$1")"
source "$2"

cache="$work/disk"
mkdir -p "$cache/ac/0a" "$cache/cas/1b" "$cache/cas/2c" "$cache/tmp-in-progress"
# entry NAME DAYS_WRITTEN [DAYS_READ]: a 256 KiB entry written DAYS_WRITTEN days ago, read DAYS_READ days ago.
entry() {
  head -c 262144 /dev/urandom >"$cache/$1"
  touch -m -d "-$2 days" "$cache/$1"
  touch -a -d "-${3:-$2} days" "$cache/$1"
}
# Eight entries, 2 MiB; a limit of 1 MiB keeps 768 KiB: the three used last.
entry ac/0a/w1 1
entry cas/1b/w2 2
entry cas/2c/w3 3
entry cas/1b/w4 4
entry ac/0a/w5 5
entry cas/2c/w6 6
entry cas/1b/w7 7
entry cas/2c/w8_read_today 8 0
head -c 4000000 /dev/urandom >"$cache/tmp-in-progress/partial"
touch -d "-30 days" "$cache/tmp-in-progress/partial"

out="$(python3 "$TRIM" "$cache" --max-gib 0.1 2>&1)" || fail "under the limit: exit $?"
[ -z "$out" ] || fail "under the limit it said something: $out"
[ "$(find "$cache/ac" "$cache/cas" -type f | wc -l)" -eq 8 ] || fail "under the limit an entry went"

out="$(python3 "$TRIM" "$cache" --max-gib 0.0009765625 2>&1)" || fail "over the limit: exit $?"
has "removed its 5 least recently used entries" "$out" "trimming 2 MiB to a limit of 1 MiB"
has "TANDEM_CACHE_MAX_GIB" "$out" "trimming 2 MiB to a limit of 1 MiB"
kept="$(cd "$cache" && find ac cas -type f | sort | tr '\n' ' ')"
[ "$kept" = "ac/0a/w1 cas/1b/w2 cas/2c/w8_read_today " ] || fail "kept $kept, not the three used last"
[ -f "$cache/tmp-in-progress/partial" ] || fail "a file outside ac/ and cas/ was removed"

out="$(python3 "$TRIM" "$cache" --max-gib 0 2>&1)" || fail "limit 0: exit $?"
[ "$(find "$cache/ac" "$cache/cas" -type f | wc -l)" -eq 3 ] || fail "limit 0 (no limit) removed entries"
python3 "$TRIM" "$work/absent" --max-gib 1 || fail "an absent cache (a first build) is not an error"

for bad in abc -1 nan; do
  rc=0
  out="$(python3 "$TRIM" "$cache" --max-gib "$bad" 2>&1)" || rc=$?
  [ "$rc" -eq 2 ] || fail "limit '$bad': exit $rc, expected 2"
  has "TANDEM_CACHE_MAX_GIB" "$out" "limit '$bad'"
done
finish
