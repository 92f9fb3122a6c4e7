#!/usr/bin/env python3
"""Builds the readers' libFuzzer targets (the file readers and the spec reader) with clang and runs each for a
bounded time.

  tools/fuzz.py [--seconds N] [--readers idx,cifar,...] [--summary OUT_JSON]

Bazel builds Tandem with g++; libFuzzer needs clang, so this script compiles the sources the readers need
(SOURCES below: the one place that lists them) directly with clang++ -fsanitize=fuzzer,address,undefined, one
target per reader from tests/fuzz/fuzz_target.cc. Objects are cached under $TANDEM_CACHE_DIR/fuzz (default
~/.cache/tandem/fuzz) and rebuilt when a source or a header it includes changes. The growing corpus lives
there too; it starts from the seed inputs the targets write (tests/fuzz/fuzz_readers.cc) and the committed
regression cases. An input that crashes a reader, hangs it (over --timeout s) or makes it allocate more than
--malloc-limit-mb at once is copied to tests/fuzz/regressions/<reader>/ (replayed by the Bazel test
//tests/fuzz:regressions_test) and the reader counts as failed. --summary writes the results in the format of
tools/test_summary.py (one case per reader), so `tools/tandem test` counts them in its last line.
"""
import argparse
import concurrent.futures
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
READERS = ["idx", "cifar", "image", "packed", "safetensors", "checkpoint", "spec"]
# What the readers and the harness need, relative to ROOT (globs).
SOURCES = [
    "data/*.cc",
    "runtime/*/*.cc",
    "kernels/cpu/*.cc",
    "kernels/cpu/nn/*.cc",
    "models/*.cc",
    "models/zoo/*.cc",
    "tests/data_loading/dataset_files.cc",
    "tests/fuzz/fuzz_readers.cc",
]
EXCLUDE = ["runtime/progress/progress.cc"]
CUDA = "/usr/local/cuda"
CXXFLAGS = ["-std=c++17", "-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined",
            "-fno-sanitize-recover=all", "-I" + ROOT, "-I" + CUDA + "/include", "-pthread"]
LIBS = ["-ljpeg", "-lpng", "-lz", "-ldnnl", "-lgomp", "-L" + CUDA + "/lib64", "-Wl,-rpath," + CUDA + "/lib64", "-lcudart", "-pthread"]
# Crash kinds libFuzzer writes as artifacts (slow-unit-* are reports, not failures).
FAILURE_PREFIXES = ("crash-", "leak-", "timeout-", "oom-")


def log(msg):
    sys.stderr.write("[fuzz] %s\n" % msg)
    sys.stderr.flush()


def find_clang():
    for name in ("clang++-14", "clang++"):
        path = shutil.which(name)
        if path:
            return path
    raise SystemExit("[fuzz] clang++ not found: install clang-14 and libclang-rt-14-dev (tools/tandem deps does)")


def up_to_date(obj, dep_file):
    """The object exists and is newer than its source and every header it included (from the .d file)."""
    if not os.path.exists(obj) or not os.path.exists(dep_file):
        return False
    with open(dep_file) as f:
        deps = f.read().replace("\\\n", " ").split(":", 1)[-1].split()
    t = os.path.getmtime(obj)
    return all(os.path.exists(d) and os.path.getmtime(d) <= t for d in deps)


def compile_one(clang, src, extra, obj_dir):
    key = hashlib.sha1((src + " " + " ".join(CXXFLAGS + extra)).encode()).hexdigest()[:16]
    base = os.path.join(obj_dir, os.path.basename(src)[:-3] + "-" + key)
    obj, dep = base + ".o", base + ".d"
    if up_to_date(obj, dep):
        return obj, None
    cmd = [clang] + CXXFLAGS + extra + ["-MMD", "-MF", dep, "-c", os.path.join(ROOT, src), "-o", obj]
    started = time.time()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        return obj, p.stdout
    # The object is as old as the sources it was compiled from: one edited during the compilation is newer.
    os.utime(obj, (started, started))
    return obj, None


def build(clang, readers, out_dir, jobs):
    """Compiles (incrementally) and links one binary per reader; returns {reader: path}."""
    obj_dir = os.path.join(out_dir, "obj")
    os.makedirs(obj_dir, exist_ok=True)
    sources = sorted({os.path.relpath(p, ROOT) for g in SOURCES for p in glob.glob(os.path.join(ROOT, g))} -
                     set(EXCLUDE))
    tasks = [(s, ["-fsanitize=fuzzer-no-link"]) for s in sources]
    tasks += [("tests/fuzz/fuzz_target.cc", ["-fsanitize=fuzzer-no-link", '-DTANDEM_FUZZ_READER="%s"' % r])
              for r in readers]
    log("compiling %d sources with %s (%d jobs; cached in %s)" % (len(tasks), clang, jobs, obj_dir))
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        results = list(pool.map(lambda t: compile_one(clang, t[0], t[1], obj_dir), tasks))
    errors = [err for _, err in results if err]
    if errors:
        raise RuntimeError("compilation failed:\n" + "\n".join(errors)[:20000])
    common = [obj for (src, _), (obj, _) in zip(tasks, results) if src != "tests/fuzz/fuzz_target.cc"]
    mains = [obj for (src, _), (obj, _) in zip(tasks, results) if src == "tests/fuzz/fuzz_target.cc"]
    binaries = {}
    for reader, main_obj in zip(readers, mains):
        binary = os.path.join(out_dir, "fuzz_" + reader)
        cmd = [clang, "-fsanitize=fuzzer,address,undefined", "-o", binary, main_obj] + common + LIBS
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if p.returncode != 0:
            raise RuntimeError("linking %s failed:\n%s" % (binary, p.stdout[-20000:]))
        binaries[reader] = binary
    return binaries


def run_one(reader, binary, args, out_dir):
    """Fuzzes one reader for args.seconds; returns (passed, note)."""
    corpus = os.path.join(out_dir, "corpus", reader)
    regressions = os.path.join(ROOT, "tests", "fuzz", "regressions", reader)
    os.makedirs(corpus, exist_ok=True)
    work = tempfile.mkdtemp(prefix="fuzz-%s-" % reader, dir=out_dir)
    artifacts = os.path.join(work, "artifacts")
    os.makedirs(artifacts)
    env = dict(os.environ, TANDEM_FUZZ_SEED_DIR=corpus, TEST_TMPDIR=work, TANDEM_NUM_THREADS="1")
    cmd = [binary, "-max_total_time=%d" % args.seconds, "-timeout=%d" % args.timeout,
           "-rss_limit_mb=%d" % args.rss_limit_mb, "-malloc_limit_mb=%d" % args.malloc_limit_mb,
           "-max_len=%d" % args.max_len, "-use_value_profile=1", "-artifact_prefix=" + artifacts + "/",
           "-print_final_stats=1", corpus]
    if os.path.isdir(regressions):
        cmd.append(regressions)
    log("%s: %d s" % (reader, args.seconds))
    with open(os.path.join(work, "log.txt"), "w") as logf:
        try:
            rc = subprocess.run(cmd, stdout=logf, stderr=subprocess.STDOUT, env=env,
                                timeout=args.seconds + 10 * args.timeout + 300).returncode
        except subprocess.TimeoutExpired:
            rc = "killed: libFuzzer overran its time"
    found = sorted(f for f in os.listdir(artifacts) if f.startswith(FAILURE_PREFIXES))
    kept = []
    for f in found:
        os.makedirs(regressions, exist_ok=True)
        with open(os.path.join(artifacts, f), "rb") as src:
            data = src.read()
        name = f.split("-")[0] + "-" + hashlib.sha1(data).hexdigest()[:16]
        with open(os.path.join(regressions, name), "wb") as dst:
            dst.write(data)
        kept.append(os.path.join("tests/fuzz/regressions", reader, name))
    with open(os.path.join(work, "log.txt"), errors="replace") as logf:
        tail = logf.read()[-3000:]
    if rc == 0 and not found:
        shutil.rmtree(work, ignore_errors=True)
        return True, None
    log("%s FAILED (exit %s); log %s; kept %s\n%s" % (reader, rc, os.path.join(work, "log.txt"),
                                                    ", ".join(kept) or "no input", tail))
    return False, "fuzz %s: exit %s, input kept as %s (log %s)" % (reader, rc, ", ".join(kept) or "none",
                                                                 os.path.join(work, "log.txt"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=300, help="fuzzing time per reader (default 300)")
    ap.add_argument("--readers", default=",".join(READERS), help="comma-separated subset of " + ",".join(READERS))
    ap.add_argument("--summary", help="write results for tools/test_summary.py report here")
    ap.add_argument("--timeout", type=int, default=10, help="seconds one input may take (a hang beyond)")
    ap.add_argument("--max-len", type=int, default=8192, help="largest input in bytes")
    ap.add_argument("--malloc-limit-mb", type=int, default=512, help="largest single allocation allowed")
    ap.add_argument("--rss-limit-mb", type=int, default=2048)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="compilations and fuzz targets at once")
    args = ap.parse_args()
    readers = [r for r in args.readers.split(",") if r]
    unknown = [r for r in readers if r not in READERS]
    if unknown:
        ap.error("unknown reader(s) %s; known: %s" % (",".join(unknown), ",".join(READERS)))
    out_dir = os.path.join(os.environ.get("TANDEM_CACHE_DIR", os.path.expanduser("~/.cache/tandem")), "fuzz")
    cases, notes = {}, []
    try:
        binaries = build(find_clang(), readers, out_dir, args.jobs)
    except (RuntimeError, OSError) as e:
        log(str(e))
        binaries = {}
        cases["//tests/fuzz (build)"] = "failed"
        notes.append("the fuzz targets did not build (see the output above)")
    # libFuzzer runs one thread: one target per core at a time.
    with concurrent.futures.ThreadPoolExecutor(max(1, min(args.jobs, len(binaries) or 1))) as pool:
        results = pool.map(lambda r: (r, run_one(r, binaries[r], args, out_dir)), list(binaries))
        for reader, (ok, note) in results:
            cases["//tests/fuzz fuzz_%s" % reader] = "passed" if ok else "failed"
            if note:
                notes.append(note)
    for key, status in sorted(cases.items()):
        log("%s: %s" % (key, status))
    if args.summary:
        with open(args.summary, "w") as f:
            json.dump({"name": "fuzz (libFuzzer, %d s per reader)" % args.seconds, "cases": cases, "notes": notes,
                       "reasons": {}}, f)
    return 0 if cases and all(s == "passed" for s in cases.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
