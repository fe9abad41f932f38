#!/usr/bin/env python3
"""Checks a ZeRO-sharded gmopt-run against an unsharded reference run.

Usage: check_zero.py REF_LOG REF.pbseq REPORT.json RANKS LOG_0.. PBSEQ_0..

REF is single-process training over the global batch, or a ZeRO-0 run:
REF_LOG may then be the ranks' logs joined by commas and REF.pbseq one
rank's state (every rank holds all of it). In a data-parallel run rank 0
prints the global (mean over the ranks) loss and the other ranks print no
step lines unless run with --verbose (then the same losses), so rank 0's
losses are a run's losses. PBSEQ_R is rank R's --save-weights file (a
`{rank}` path), which is whole: the ranks' shards gathered.
REPORT.json is gmopt-compile --report-json of the sharded .gm: its
zero_buckets say which parameters each flat bucket holds, how many elements
and how big each rank's shard is. Passes when every step's loss equals
the reference loss, the other ranks are quiet or agree with rank 0, every
rank's checkpoint holds exactly the reference's tensors by name (the
parameters, the per-parameter moments, the step: the unsharded layout, no
shard), bit-identical across the ranks and equal to the reference's within
fp32 tolerance (max |a - b| <= 1e-5 * max |b| + 1e-7 per tensor), and each
rank's planned shard of every optimizer-state bucket is ceil(elements / N)
floats (1/N per rank, N the report's ranks: RANKS may be 1 for a run
resumed in one process from a sharded run's checkpoint).
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_data_parallel import check_rank_losses, losses, read_pbseq  # noqa: E402,E501


def close(got, want):
    scale = max((abs(v) for v in want), default=0.0)
    diff = max((abs(a - b) for a, b in zip(got, want)), default=0.0)
    return diff <= 1e-5 * scale + 1e-7, (diff / scale if scale else diff)


def main(argv):
    ref_log, ref_weights, report, ranks = argv[1], argv[2], argv[3], int(argv[4])
    logs, weights = argv[5:5 + ranks], argv[5 + ranks:5 + 2 * ranks]
    compiled = json.load(open(report))
    buckets, sharded_over = compiled["zero_buckets"], compiled["ranks"]
    failures = []
    ref_logs = [losses(log) for log in ref_log.split(",")]
    expected = ref_logs[0]
    for k, others in enumerate(ref_logs[1:], 1):
        if others and others != expected:
            failures.append("reference rank %d's losses differ from rank 0's" % k)
    check_rank_losses(expected, [losses(log) for log in logs], "reference",
                      failures)
    reference = read_pbseq(ref_weights)
    rank_tensors = [read_pbseq(path) for path in weights]
    for r, tensors in enumerate(rank_tensors):
        extra = sorted(set(tensors) - set(reference))
        if extra:
            failures.append("rank %d's checkpoint has %s, which the "
                            "reference has not" % (r, extra[0]))
    params = set(name for bucket in buckets for name in bucket["params"])
    worst = {True: 0.0, False: 0.0}
    for name in sorted(reference):
        values = [tensors.get(name) for tensors in rank_tensors]
        if any(v is None for v in values):
            failures.append("%s missing" % name)
            continue
        if any(v != values[0] for v in values[1:]):
            failures.append("ranks end with different %s" % name)
        ok, rel = close(values[0], reference[name])
        worst[name in params] = max(worst[name in params], rel)
        if not ok:
            failures.append("%s %s differs (relative %g)" % (
                "parameter" if name in params else "state", name, rel))
    print("%d parameters compared, max relative difference %.3g" %
          (len(params), worst[True]))
    print("%d other tensors (whole optimizer state, step) compared, max "
          "relative difference %.3g" % (len(reference) - len(params),
                                        worst[False]))
    shard_floats = total_floats = 0
    for bucket in buckets:
        shard, elements = bucket["shard_elements"], bucket["elements"]
        if shard != -(-elements // sharded_over):
            failures.append("a bucket of %d elements has shards of %d" %
                            (elements, shard))
        states = len(bucket["state_shards"])
        shard_floats += states * shard
        total_floats += states * elements
    print("optimizer state per rank: %d of %d floats (1/%.3g)" %
          (shard_floats, total_floats,
           total_floats / shard_floats if shard_floats else 0))
    for failure in failures:
        print("FAIL: " + failure)
    print("ZeRO matches the reference" if not failures else "ZeRO differs")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
