"""Reads a gmopt --timeline page and prints what it shows, one fact a line,
for FileCheck: the page must be one well-formed SVG (parsed as XML) with
no script; per panel its band elements by category (a band is a <path> or
<rect> of class `band CATEGORY` with a <title>), its peak (exact bytes,
step and node from the marker's <title>) and its recompute regions. With
a report (gmopt-compile --report-json, or gmopt-run's, whose plan figures
are under "plan"), it also says whether the optimized panel's peak is the
plan's live-byte bound plus its persistent bytes at the bound's step, and
whether the baseline's peak is the eager baseline the report states
(gmopt-compile's estimate; gmopt-run --baseline's measured peak).

usage: timeline_check.py PAGE.html [REPORT.json]
"""
import json
import re
import sys
import xml.etree.ElementTree as ET

SVG = "{http://www.w3.org/2000/svg}"

page = open(sys.argv[1], encoding="utf-8").read()
print("scripts %d" % page.count("<script"))
svgs = re.findall(r"<svg\b.*?</svg>", page, re.S)
print("svg %d" % len(svgs))
root = ET.fromstring(svgs[0])
panels = [g for g in root.iter(SVG + "g") if g.get("class") == "panel"]
print("panels %d" % len(panels))
peaks = []
for index, panel in enumerate(panels):
    title = panel.find(SVG + "text").text
    counts = {}
    for element in panel.iter():
        cls = (element.get("class") or "").split()
        if element.tag in (SVG + "path", SVG + "rect") and cls[:1] == ["band"]:
            if element.find(SVG + "title") is not None:
                counts[cls[1]] = counts.get(cls[1], 0) + 1
    print("panel %d '%s' bands %s" % (index, title, " ".join(
        "%s=%d" % item for item in sorted(counts.items()))))
    peak = [g for g in panel.iter(SVG + "g") if g.get("class") == "peak"]
    text = peak[0].find(SVG + "title").text
    match = re.match(r"peak .* \((\d+) bytes\) at step (\d+): (.+)", text)
    peaks.append((int(match.group(1)), int(match.group(2))))
    print("panel %d peak %s bytes at step %s: %s" % ((index,) + match.groups()))
    regions = [r for r in panel.iter(SVG + "rect")
               if r.get("class") == "recompute"]
    print("panel %d recompute regions %d" % (index, len(regions)))

if len(sys.argv) > 2:
    report = json.load(open(sys.argv[2]))
    plan = report["plan"] if isinstance(report.get("plan"), dict) else report
    bound = plan["lower_bound_bytes"] + plan["persistent_bytes"]
    print("optimized peak is the plan's bound + persistent: %s" %
          ("yes" if peaks[-1] == (bound, plan["lower_bound_step"]) else
           "no (%d at %d, plan %d at %d)" % (peaks[-1] + (
               bound, plan["lower_bound_step"]))))
    # gmopt-compile's estimate, or gmopt-run --baseline's measured peak.
    if "eager_baseline_bytes" in plan:
        print("baseline peak is the eager baseline: %s" %
              ("yes" if peaks[0][0] == plan["eager_baseline_bytes"] else
               "no (%d, report %d)" % (peaks[0][0],
                                       plan["eager_baseline_bytes"])))
