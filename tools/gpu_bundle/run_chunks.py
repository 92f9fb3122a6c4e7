#!/usr/bin/env python3
"""Runs a GoogleTest binary's tests in chunks, each in its own process with a time limit, several at once, so
that a test which hangs or crashes costs one chunk and is named. Prints a line per chunk as it ends, then one
summary (passed, failed with messages, skipped, hung, crashed, not run); --report also writes the failures' full
messages and the end of each hung or crashed chunk's log (with every thread's backtrace when gdb is present).

A chunk is a --gtest_filter list of consecutive tests (from --gtest_list_tests). When a chunk hangs or crashes,
the test that was running (the last one its log shows started without a result) is the culprit, and the tests
after it in the chunk run again as a new chunk. Exit status: 0 when every test passed or skipped, 1 otherwise,
2 when the tests could not be listed.
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

STARTED = re.compile(r"^\[ RUN +\] (\S+)")
ENDED = re.compile(r"^\[ +(OK|FAILED|SKIPPED) +\] (\S+?),?( |$)")
OUTCOME = {"OK": "passed", "FAILED": "failed", "SKIPPED": "skipped"}
ORDER = ["passed", "failed", "skipped", "hung", "crashed", "not run"]
LOG_TAIL_LINES = 60
MESSAGE_LINES = 40


def list_tests(binary, args):
    """The binary's test names (Suite.Name), in its order, without the disabled ones."""
    r = subprocess.run([binary] + args + ["--gtest_list_tests"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, errors="replace", timeout=120)
    if r.returncode != 0:
        raise RuntimeError("exit status %d: %s" % (r.returncode, (r.stderr + r.stdout)[-2000:]))
    names, suite = [], None
    for line in r.stdout.splitlines():
        if not line.strip():
            continue
        if not line.startswith(" "):
            word = line.split()[0]
            suite = word if word.endswith(".") else None  # e.g. "Running main() from ..." is no suite
        elif suite:
            name = line.split()[0]
            if not suite.startswith("DISABLED_") and not name.startswith("DISABLED_"):
                names.append(suite + name)
    return names


def split(names, count):
    """At most `count` runs of consecutive names, of near-equal sizes."""
    count = max(1, min(count, len(names)))
    size, extra = divmod(len(names), count)
    chunks, start = [], 0
    for i in range(count):
        end = start + size + (1 if i < extra else 0)
        chunks.append(names[start:end])
        start = end
    return chunks


def read_log(path):
    """Each ended test's outcome, each started test's output lines, and the test started last without an end
    (None when every started test ended)."""
    outcomes, output, running = {}, {}, None
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            m = STARTED.match(line)
            if m:
                running = m.group(1)
                output[running] = []
                continue
            m = ENDED.match(line)
            if m and m.group(2) == running:
                outcomes[running] = OUTCOME[m.group(1)]
                running = None
            elif running:
                output[running].append(line)
    return outcomes, output, running


def log_tail(path):
    with open(path, errors="replace") as f:
        return f.read().splitlines()[-LOG_TAIL_LINES:]


def exit_text(code):
    if code < 0:
        try:
            return "killed by " + signal.Signals(-code).name
        except ValueError:
            return "killed by signal %d" % -code
    return "exit status %d" % code


def backtraces(pid):
    """Every thread's backtrace of the process, when gdb is present ([] otherwise)."""
    if not shutil.which("gdb"):
        return []
    try:
        r = subprocess.run(["gdb", "-p", str(pid), "-batch", "-nx", "-ex", "thread apply all bt 25"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
                           errors="replace", timeout=30)
        return ["backtraces of the hung process (gdb):"] + r.stdout.splitlines()
    except subprocess.TimeoutExpired:
        return ["gdb took over 30 s to print the hung process's backtraces"]


class Chunk:
    def __init__(self, number, names):
        self.number, self.names = number, names
        self.proc = self.log = self.path = self.started = None
        self.backtraces = []


class Runner:
    def __init__(self, o):
        self.o = o
        self.work = o.work or tempfile.mkdtemp(prefix="run_chunks.")
        os.makedirs(self.work, exist_ok=True)
        self.results = {}  # name -> (outcome, lines: the message, or how the chunk ended and the test's output)
        self.notes = []  # the report's extra sections: logs of hung and crashed chunks
        self.pending, self.running, self.chunks = [], [], 0
        self.fail_output = re.compile(o.fail_output) if o.fail_output else None

    def add_chunk(self, names):
        self.chunks += 1
        self.pending.append(Chunk(self.chunks, names))
        return self.chunks

    def start(self, c):
        c.path = os.path.join(self.work, "chunk%d.log" % c.number)
        c.log = open(c.path, "w")
        c.started = time.monotonic()
        cmd = [self.o.binary] + self.o.args + ["--gtest_color=no", "--gtest_filter=" + ":".join(c.names)]
        c.proc = subprocess.Popen(cmd, stdout=c.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  start_new_session=True)
        self.running.append(c)

    def stop(self, c, why):
        if why == "timeout":
            c.backtraces = backtraces(c.proc.pid)
        os.killpg(c.proc.pid, signal.SIGKILL)
        c.proc.wait()

    def finish(self, c, why):
        """Records a chunk's results; `why`: None (it exited), "timeout" or "deadline" (it was stopped)."""
        c.log.close()
        outcomes, output, culprit = read_log(c.path)
        for name, outcome in outcomes.items():
            if name in c.names:
                lines = output.get(name, [])
                flagged = [l for l in lines if self.fail_output and self.fail_output.search(l)]
                self.results[name] = ("failed", flagged) if outcome == "passed" and flagged else (outcome, lines)
        code = c.proc.returncode
        how = {"timeout": "no result within %.0f s" % self.o.timeout,
               "deadline": "stopped when the time ran out"}.get(why, exit_text(code))
        note = ""
        if culprit in c.names:
            outcome = {"timeout": "hung", "deadline": "not run"}.get(why, "crashed")
            self.results[culprit] = (outcome, ["chunk %d, %s; its output:" % (c.number, how)] + output[culprit])
            note = "; %s %s (%s)" % (outcome.upper(), culprit, how)
            self.notes.append("%s %s: the end of chunk %d's log\n%s" % (
                outcome.upper(), culprit, c.number, "\n".join(log_tail(c.path) + c.backtraces)))
            later = c.names[c.names.index(culprit) + 1:]
            if later and why != "deadline":
                note += "; its %d later tests go to chunk %d" % (len(later), self.add_chunk(later))
        elif why is not None or code not in (0, 1):
            note = "; ended outside any test (%s)" % how
            self.notes.append("chunk %d ended outside any test (%s): the end of its log\n%s" % (
                c.number, how, "\n".join(log_tail(c.path))))
        counts = {}
        for name in c.names:
            if name in self.results:
                counts[self.results[name][0]] = counts.get(self.results[name][0], 0) + 1
        print("  chunk %d/%d, %d tests: %s, %.0f s%s" % (
            c.number, self.chunks, len(c.names), ", ".join("%d %s" % (counts[k], k) for k in ORDER if k in counts)
            or "no results", time.monotonic() - c.started, note), flush=True)

    def run(self, names):
        o = self.o
        deadline = time.monotonic() + o.deadline if o.deadline > 0 else None
        for chunk in split(names, o.chunks):
            self.add_chunk(chunk)
        print("%s: %d in %d chunks, %d at once, %.0f s each at most%s" % (
            o.title, len(names), self.chunks, o.jobs, o.timeout, ", %.0f s in all" % o.deadline if deadline else ""),
            flush=True)
        while self.pending or self.running:
            out_of_time = deadline is not None and time.monotonic() >= deadline
            while self.pending and len(self.running) < o.jobs and not out_of_time:
                self.start(self.pending.pop(0))
            if out_of_time and not self.running:
                break
            time.sleep(0.05)
            now = time.monotonic()
            for c in list(self.running):
                why = None
                if c.proc.poll() is None:
                    if now - c.started > o.timeout:
                        why = "timeout"
                    elif deadline is not None and now >= deadline:
                        why = "deadline"
                    else:
                        continue
                    self.stop(c, why)
                self.running.remove(c)
                self.finish(c, why)

    def summary(self, names, seconds):
        for name in names:
            self.results.setdefault(name, ("not run", []))
        counts = {k: sum(1 for r in self.results.values() if r[0] == k) for k in ORDER}
        lines = ["%s: %d tests, %.0f s: %s" % (self.o.title, len(names), seconds,
                                               ", ".join("%d %s" % (counts[k], k) for k in ORDER))]
        for kind in ("failed", "hung", "crashed"):
            for name in names:
                outcome, detail = self.results[name]
                if outcome == kind:
                    text = " / ".join(l.strip() for l in detail if l.strip())
                    lines.append("  %s %s: %s" % (kind.upper(), name, text[:300] + ("..." if len(text) > 300 else "")))
        if counts["not run"]:
            lines.append("  NOT RUN: %d tests (the time ran out, or their chunk ended outside a test)" %
                         counts["not run"])
        return lines, counts


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="chunks run at once")
    ap.add_argument("--chunks", type=int, default=32, help="chunks the tests are split into")
    ap.add_argument("--timeout", type=float, default=120, help="seconds a chunk may run")
    ap.add_argument("--deadline", type=float, default=0, help="seconds for everything (0: no limit); chunks "
                    "still running then are stopped, their unfinished tests count as not run")
    ap.add_argument("--report", help="write the summary, the failures' messages and the logs of hung and "
                    "crashed chunks to this file")
    ap.add_argument("--work", help="folder for the chunks' logs (default: a new temporary one)")
    ap.add_argument("--title", default="tests", help="what the summary calls the tests")
    ap.add_argument("--fail-output", metavar="REGEX", help="a passed test whose output has a line matching REGEX "
                    "(e.g. a compute-sanitizer report) counts as failed, with those lines as its message")
    ap.add_argument("binary")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="passed to every run of the binary")
    o = ap.parse_args()
    t0 = time.monotonic()
    try:
        names = list_tests(o.binary, o.args)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        print("%s: could not list the tests of %s: %s" % (o.title, o.binary, e), flush=True)
        return 2
    runner = Runner(o)
    runner.run(names)
    lines, counts = runner.summary(names, time.monotonic() - t0)
    print("\n".join(lines), flush=True)
    if o.report:
        with open(o.report, "w") as f:
            f.write("\n".join(lines) + "\n")
            for name in names:
                outcome, detail = runner.results[name]
                if outcome == "failed":
                    f.write("\n== FAILED %s\n%s\n" % (name, "\n".join(detail[:MESSAGE_LINES])))
            for note in runner.notes:
                f.write("\n== %s\n" % note)
    bad = sum(counts[k] for k in ("failed", "hung", "crashed", "not run"))
    return 1 if bad or runner.notes else 0


if __name__ == "__main__":
    sys.exit(main())
