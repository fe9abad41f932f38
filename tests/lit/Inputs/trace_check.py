"""Reads a gmopt-run --trace file (Chrome trace events) and prints what it
holds, one fact a line, for FileCheck: the tracks, the micro-step slices,
the node slices per micro-step (and whether that is the compiled module's
node count, from gmopt-compile --report-json's "nodes"), the counter events
and their categories, and whether every node slice lies inside its
micro-step and the slices follow one another.

usage: trace_check.py TRACE.json [REPORT.json]
"""
import json
import sys

trace = json.load(open(sys.argv[1]))
events = trace["traceEvents"]
names = sorted(e["args"]["name"] for e in events if e["ph"] == "M")
print("tracks: %s" % ", ".join(names))
steps = [e for e in events if e["ph"] == "X" and e["cat"] == "step"]
nodes = [e for e in events if e["ph"] == "X" and e["cat"] == "node"]
counters = [e for e in events if e["ph"] == "C"]
print("micro-steps %d" % len(steps))
per_step = []
inside = True
ordered = True
for step in steps:
    begin, end = step["ts"], step["ts"] + step["dur"]
    mine = [n for n in nodes if begin <= n["ts"] <= end]
    per_step.append(len(mine))
    last = begin
    for n in mine:
        inside &= n["dur"] >= 0 and n["ts"] + n["dur"] <= end + 1
        ordered &= n["ts"] >= last
        last = n["ts"] + n["dur"]
print("node slices per micro-step: %s" % " ".join(map(str, per_step)))
print("every node slice inside its micro-step: %s" % ("yes" if inside else "no"))
print("node slices in order: %s" % ("yes" if ordered else "no"))
print("node slices name an op and a node: %s" % (
    "yes" if all(n["name"] and "node" in n["args"] for n in nodes) else "no"))
print("counters %d for %d node slices, categories: %s" % (
    len(counters), len(nodes),
    " ".join(sorted(counters[0]["args"])) if counters else "none"))
if len(sys.argv) > 2:
    expected = json.load(open(sys.argv[2]))["nodes"]
    print("slices per micro-step are the module's nodes: %s" % (
        "yes" if set(per_step) == {expected} else
        "no (%s, module %d)" % (per_step, expected)))
