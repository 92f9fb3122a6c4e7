#!/usr/bin/env python3
"""Keeps Tandem's Bazel disk cache under a size limit.

Bazel (Debian's bazel-bootstrap) never removes anything from a --disk_cache: each build adds its outputs
(about 2 GiB for a cold `tools/tandem test`), so the cache grows until the disk is full and every build then
fails with "No space left on device". The launcher runs this before each build: when the cache's entries
(ac/ and cas/) hold more than the limit, the least recently used ones go, until they hold at most three
quarters of it. An entry's last use is the later of its modification time (written) and its access time (read
on a cache hit; with the relatime mount option the access time moves at most once a day, enough for an order
of days). Bazel treats a removed entry as a cache miss and runs the action again.
"""

import argparse
import os
import sys
import time

ENTRY_DIRS = ("ac", "cas")
GIB = 1 << 30


def entries(cache):
    """(last use, size, path) of every file under the cache's ac/ and cas/."""
    found = []
    for sub in ENTRY_DIRS:
        for root, _, files in os.walk(os.path.join(cache, sub)):
            for name in files:
                path = os.path.join(root, name)
                try:
                    st = os.stat(path)
                except OSError:  # removed by a concurrent build, or unreadable: left alone
                    continue
                found.append((max(st.st_mtime, st.st_atime), st.st_blocks * 512, path))
    return found


def trim(cache, max_bytes):
    """Removes the least recently used entries when they exceed max_bytes.

    Returns (entries removed, bytes freed, bytes kept, last use of the newest entry removed)."""
    found = entries(cache)
    total = sum(size for _, size, _ in found)
    if total <= max_bytes:
        return 0, 0, total, 0.0
    target = max_bytes * 3 // 4
    removed = freed = 0
    newest = 0.0
    for last_use, size, path in sorted(found):
        if total - freed <= target:
            break
        try:
            os.remove(path)
        except FileNotFoundError:  # removed by a concurrent build
            pass
        except OSError:  # not ours to remove (permissions): kept, and not counted
            continue
        removed += 1
        freed += size
        newest = last_use
    return removed, freed, total - freed, newest


def parse_size(text):
    """A size in GiB ("20", "0.5"); 0 turns trimming off."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"the disk cache's limit (TANDEM_CACHE_MAX_GIB) must be a number of GiB such as 20 or 0.5, not '{text}'")
    if value < 0 or value != value:
        raise argparse.ArgumentTypeError(f"the disk cache's limit (TANDEM_CACHE_MAX_GIB) must be a number of GiB >= 0, not {text}")
    return value


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("cache", help="the Bazel --disk_cache directory")
    parser.add_argument("--max-gib", type=parse_size, required=True,
                        help="the most its entries may hold, in GiB (0: no limit)")
    args = parser.parse_args()
    if args.max_gib == 0 or not os.path.isdir(args.cache):
        return 0
    removed, freed, kept, newest = trim(args.cache, int(args.max_gib * GIB))
    if removed:
        print(f"[tandem] the Bazel disk cache {args.cache} held more than {args.max_gib:g} GiB "
              f"(TANDEM_CACHE_MAX_GIB): removed its {removed} least recently used entries ({freed / GIB:.1f} GiB, "
              f"last used {time.strftime('%Y-%m-%d %H:%M', time.localtime(newest))} or before); "
              f"{kept / GIB:.1f} GiB kept", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
