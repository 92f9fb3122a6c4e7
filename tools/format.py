#!/usr/bin/env python3
"""Applies or checks the house style (.clang-format) on every tracked C++ and CUDA source.

usage:
  tools/format.py [--check] [--summary OUT_JSON] [FILE...]

Without --check, rewrites the files that differ from the style. With --check, rewrites nothing and lists each
file that differs with the first lines clang-format would change; exit status 1 when any does. --summary
writes the result in the format of tools/test_summary.py (one case), so `tools/tandem test` counts it.
FILEs default to the tracked *.h, *.cc, *.cu and *.cuh files outside third_party/.
"""
import argparse
import difflib
import os
import shutil
import subprocess
import sys

from test_summary import write_result

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE_ENDINGS = (".h", ".cc", ".cu", ".cuh")


def clang_format():
    for name in ("clang-format-14", "clang-format"):
        path = shutil.which(name)
        if path:
            return path
    raise SystemExit("tools/format.py: clang-format not found (Debian package clang-format-14; "
                     "`tools/tandem deps` installs it)")


def tracked_sources():
    out = subprocess.run(["git", "-C", ROOT, "ls-files", "-z"], check=True, capture_output=True).stdout
    return sorted(p for p in out.decode().split("\0")
                  if p.endswith(SOURCE_ENDINGS) and not p.startswith("third_party/"))


def formatted(tool, path):
    with open(os.path.join(ROOT, path), "rb") as f:
        original = f.read()
    result = subprocess.run([tool, "--style=file", "--assume-filename=" + os.path.join(ROOT, path)],
                            input=original, capture_output=True, cwd=ROOT)
    if result.returncode != 0:
        raise RuntimeError("%s: clang-format failed: %s" % (path, result.stderr.decode(errors="replace").strip()))
    return original, result.stdout


def first_changes(path, before, after, lines=6):
    diff = difflib.unified_diff(before.decode(errors="replace").splitlines(),
                                after.decode(errors="replace").splitlines(), path, path + " (formatted)", n=0,
                                lineterm="")
    return [line for _, line in zip(range(lines + 2), diff)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="only report files that differ (exit 1 if any)")
    ap.add_argument("--summary", help="write the result for tools/test_summary.py report here")
    ap.add_argument("files", nargs="*", help="files relative to the repository root (default: all tracked sources)")
    args = ap.parse_args()
    tool = clang_format()
    files = args.files or tracked_sources()
    differing, errors = [], []
    for path in files:
        try:
            before, after = formatted(tool, path)
        except (OSError, RuntimeError) as e:
            errors.append(str(e))
            continue
        if before == after:
            continue
        differing.append(path)
        if args.check:
            print("\n".join(first_changes(path, before, after)))
        else:
            with open(os.path.join(ROOT, path), "wb") as f:
                f.write(after)
    for e in errors:
        print("error: " + e, file=sys.stderr)
    verb = "differ from" if args.check else "were rewritten to"
    print("format: %d of %d files %s .clang-format%s" % (len(differing), len(files), verb,
                                                         ": " + " ".join(differing) if differing else ""))
    failed = bool(errors) or (args.check and bool(differing))
    if args.summary:
        notes = errors + (["%d files differ from .clang-format (tools/tandem format rewrites them): %s" %
                           (len(differing), " ".join(differing))] if args.check and differing else [])
        write_result(args.summary, "format (clang-format, %d files)" % len(files),
                     {"//:.clang-format (check)": "failed" if failed else "passed"}, notes)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
