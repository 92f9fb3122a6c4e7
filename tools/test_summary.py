#!/usr/bin/env python3
"""Test results of `tools/tandem test`: collects each build's GoogleTest cases, then prints one line per build
and the merged last line "N passed, N failed, N skipped".

  test_summary.py collect NAME TESTLOGS BEP_JSON BAZEL_RC OUT_JSON   (test labels on stdin)
  test_summary.py report RESULT_JSON...

A build's line counts runs. The last line counts test cases (target and case name) once over all builds: a
case failed if it failed in any build, passed if it passed in one and failed in none, and skipped only if it
was skipped wherever it ran (e.g. a CUDA test skips in the build against NVIDIA's libraries on a machine
without a GPU, and runs in the simulated-GPU build). A target that Bazel reports as failed (a crash or a
timeout after its cases passed, a build error) is a failure even when every case it wrote passed.
`tools/fuzz.py --summary` writes a RESULT_JSON of the same form, one case per fuzz target; `tools/format.py
--summary` and `tools/function_length.py --summary` one case each.
"""
import collections
import json
import os
import sys
import xml.etree.ElementTree as ET


def write_result(path, name, cases, notes):
    """Writes a RESULT_JSON for `report` from a check that runs outside Bazel (tools/format.py,
    tools/function_length.py): `cases` maps each case to "passed", "failed" or "skipped"."""
    with open(path, "w") as f:
        json.dump({"name": name, "cases": cases, "notes": notes, "reasons": {}}, f)


def target_statuses(bep_path):
    """Label -> Bazel's overall status of that test target in this invocation."""
    statuses = {}
    if not os.path.exists(bep_path):
        return statuses
    with open(bep_path, errors="replace") as f:
        for line in f:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            summary = event.get("id", {}).get("testSummary")
            if summary and "testSummary" in event:
                statuses[summary["label"]] = event["testSummary"].get("overallStatus", "NO_STATUS")
    return statuses


def collect(name, logs, bep_path, bazel_rc, out_path):
    labels = sys.stdin.read().split()
    statuses = target_statuses(bep_path)
    cases, notes, reasons = {}, [], {}
    for label in labels:
        pkg, _, target = label.lstrip("/").partition(":")
        d = os.path.join(logs, pkg, target)
        status = statuses.get(label)
        xml_path = os.path.join(d, "test.xml")
        if status is None or not os.path.exists(xml_path):
            cases[label + " (target)"] = "failed"
            notes.append(label + ": did not build or did not run")
            continue
        try:
            found = list(ET.parse(xml_path).getroot().iter("testcase"))
        except ET.ParseError:
            found = []
        all_passed = True
        for case in found:
            key = "%s %s.%s" % (label, case.get("classname", ""), case.get("name", ""))
            skipped = case.find("skipped")
            if case.find("failure") is not None or case.find("error") is not None:
                cases[key] = "failed"
                all_passed = False
            elif skipped is not None or case.get("result") == "skipped" or case.get("status") == "notrun":
                cases[key] = "skipped"
                message = (skipped.get("message", "") if skipped is not None else "").strip().splitlines()
                # GoogleTest puts "file:line" first, then the reason given to GTEST_SKIP.
                reasons[key] = message[-1].strip() if message else ""
            else:
                cases[key] = "passed"
        if status != "PASSED":
            # Bazel's own verdict wins: a crash, a timeout or a non-zero exit after the cases were written.
            if all_passed or not found:
                cases[label + " (target)"] = "failed"
            notes.append("%s: %s (%s)" % (label, status, os.path.join(d, "test.log")))
    if bazel_rc not in (0, 3, 4) and not notes:
        cases["(build)"] = "failed"
        notes.append("the build failed outside any test (see the Bazel output above)")
    with open(out_path, "w") as f:
        json.dump({"name": name, "cases": cases, "notes": notes, "reasons": reasons}, f)


def counts(cases):
    c = collections.Counter(cases.values())
    return "%d passed, %d failed, %d skipped" % (c["passed"], c["failed"], c["skipped"])


def report(paths):
    builds = []
    for p in paths:
        with open(p) as f:
            builds.append(json.load(f))
    merged, reasons = {}, {}
    rank = {"failed": 2, "passed": 1, "skipped": 0}
    for b in builds:
        print("%-48s %s" % (b["name"] + ":", counts(b["cases"])))
        for key, status in b["cases"].items():
            if key not in merged or rank[status] > rank[merged[key]]:
                merged[key] = status
            if status == "skipped":
                reasons.setdefault(key, b["reasons"].get(key, ""))
    for b in builds:
        for n in b["notes"]:
            print("FAILED (%s): %s" % (b["name"], n))
        for key, status in sorted(b["cases"].items()):
            if status == "failed" and not key.endswith("(target)") and key != "(build)":
                print("FAILED (%s): %s" % (b["name"], key))
    skipped = collections.Counter()
    for key, status in merged.items():
        if status == "skipped":
            skipped[reasons.get(key) or "(no reason given)"] += 1
    for reason, n in skipped.most_common():
        print("skipped in every build (%d): %s" % (n, reason))
    print(counts(merged))
    return 1 if any(s == "failed" for s in merged.values()) else 0


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "collect" and len(sys.argv) == 7:
        collect(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6])
        return 0
    if len(sys.argv) >= 3 and sys.argv[1] == "report":
        return report(sys.argv[2:])
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
