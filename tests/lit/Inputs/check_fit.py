"""Checks gmopt-compile --memory-limit's and gmopt-run's JSON reports.

  check_fit.py compile REPORT      every candidate marked fitting has a planned
                                   peak within the limit; the choice fits, has
                                   the least predicted time (objective time)
                                   or extra FLOPs (objective flops) among
                                   those that fit, and is what was compiled
  check_fit.py sweep KEY REPORT... the reports' limits fall and their choices'
                                   KEY (extra_flops, predicted_seconds) never
                                   falls
  check_fit.py amp REPORT fp32|any without --allow-amp only fp32 candidates
  check_fit.py run COMPILE RUN      the run's measured peak is within the
                                   compile report's limit
  check_fit.py losses RUN_A RUN_B   the two runs' per-step losses are equal
  check_fit.py maxbatch REPORT     the answer fits, the value above it was
                                   compiled and does not fit
"""
import json
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def fail(message):
    print("check_fit: FAIL: " + message)
    sys.exit(1)


def check_compile(fit, report=None):
    limit = fit["limit_bytes"]
    candidates = fit["candidates"]
    for c in candidates:
        if c["fits"] and c["planned_peak_bytes"] > limit:
            fail("candidate %s fits but peaks at %d > %d" % (c, c["planned_peak_bytes"], limit))
        if not c["fits"] and c["planned"] and c["planned_peak_bytes"] <= limit:
            fail("candidate %s within the limit is not marked fitting" % c)
    chosen = fit["chosen"]
    if chosen is None:
        fail("nothing chosen")
    best = candidates[chosen]
    if not best["fits"]:
        fail("the choice does not fit")
    key = "extra_flops" if fit["objective"] == "flops" else "predicted_seconds"
    for c in candidates:
        if c["fits"] and c[key] < best[key]:
            fail("candidate %s has less %s than the choice" % (c, key))
    if report is not None:
        if report["planned_bytes"] > limit:
            fail("compiled plan peaks at %d > %d" % (report["planned_bytes"], limit))
        if report["accumulate"] != best["accumulate"]:
            fail("compiled accumulate %d, chose %d" % (report["accumulate"], best["accumulate"]))
    print("check_fit: ok: %d candidates, choice %s/K=%d/%s within %d" % (
        len(candidates), best["amp"], best["accumulate"], best["recompute"], limit))
    return best


def main(argv):
    mode = argv[1]
    if mode == "compile":
        report = load(argv[2])
        check_compile(report["memory_fit"], report)
    elif mode == "amp":
        fit = load(argv[2])["memory_fit"]
        amps = sorted({c["amp"] for c in fit["candidates"]})
        if argv[3] == "fp32" and amps != ["fp32"]:
            fail("amp candidates without --allow-amp: %s" % amps)
        print("check_fit: ok: amp settings weighed: " + ",".join(amps))
    elif mode == "run":
        limit = load(argv[2])["memory_fit"]["limit_bytes"]
        run = load(argv[3])
        peak = run["optimized"]["peak_bytes"]
        if peak > limit:
            fail("measured peak %d > limit %d" % (peak, limit))
        print("check_fit: ok: measured peak %d within %d" % (peak, limit))
    elif mode == "losses":
        a, b = load(argv[2])["losses"], load(argv[3])["losses"]
        if a != b:
            fail("losses differ: %s vs %s" % (a, b))
        print("check_fit: ok: %d equal losses" % len(a))
    elif mode == "sweep":
        key = argv[2]
        fits = [load(path)["memory_fit"] for path in argv[3:]]
        for before, after in zip(fits, fits[1:]):
            if after["limit_bytes"] >= before["limit_bytes"]:
                fail("limits do not fall: %d then %d" % (before["limit_bytes"], after["limit_bytes"]))
            a, b = before["candidates"][before["chosen"]], after["candidates"][after["chosen"]]
            check_compile(after)
            if b[key] < a[key]:
                fail("%s falls from %s to %s as the limit falls to %d" % (key, a[key], b[key], after["limit_bytes"]))
        print("check_fit: ok: %s never falls over %d limits" % (key, len(fits)))
    elif mode == "maxbatch":
        answer = load(argv[2])["max_batch"]
        value = answer["value"]
        probes = {p["value"]: p for p in answer["probes"]}
        if not probes.get(value, {}).get("fits"):
            fail("the answer %d was not compiled fitting" % value)
        if value + 1 not in probes or probes[value + 1]["fits"]:
            fail("%d + 1 was not compiled, or fits" % value)
        check_compile(answer["fit"])
        print("check_fit: ok: %s=%d fits, %d does not (%s dominates)" % (
            answer["dim"], value, value + 1, answer["dominant"]))
    else:
        fail("unknown mode " + mode)


main(sys.argv)
