#!/usr/bin/env python3
"""Checks a ZeRO-sharded gmopt-run against an unsharded reference run.

Usage: check_zero.py REF_LOG REF.pbseq REPORT.json RANKS LOG_0.. PBSEQ_0..

REF is single-process training over the global batch, or a ZeRO-0 run:
REF_LOG may then be the ranks' logs joined by commas and REF.pbseq one
rank's state (every rank holds all of it). In a data-parallel run rank 0
prints the global (mean over the ranks) loss and the other ranks print no
step lines unless run with --verbose (then the same losses), so rank 0's
losses are a run's losses.
REPORT.json is gmopt-compile --report-json of the sharded .gm: its
zero_buckets say which parameters each flat bucket holds, how many elements
and how big each rank's shard is. Passes when every step's loss equals
the reference loss, the other ranks are quiet or agree with rank 0, every rank ends with bit-identical
parameters equal to the reference ones within fp32 tolerance (max |a - b|
<= 1e-5 * max |b| + 1e-7 per tensor), each rank holds exactly one shard of
every optimizer-state bucket (so ranks * shard elements, the padded bucket,
is the whole state: 1/N per rank) and the ranks' shards, concatenated and
unpadded, equal the reference's per-parameter moments within the same
tolerance, with the padding zero.
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
    buckets = json.load(open(report))["zero_buckets"]
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
    params = [name for bucket in buckets for name in bucket["params"]]
    worst = 0.0
    for name in params:
        values = [tensors.get(name) for tensors in rank_tensors]
        if any(v is None for v in values) or name not in reference:
            failures.append("parameter %s missing" % name)
            continue
        if any(v != values[0] for v in values[1:]):
            failures.append("ranks end with different %s" % name)
        ok, rel = close(values[0], reference[name])
        worst = max(worst, rel)
        if not ok:
            failures.append("parameter %s differs (relative %g)" % (name, rel))
    print("%d parameters compared, max relative difference %.3g" %
          (len(params), worst))
    shard_floats = total_floats = 0
    worst = 0.0
    for b, bucket in enumerate(buckets):
        shard = bucket["shard_elements"]
        for k, state in enumerate(bucket["state_shards"]):
            shards = [tensors.get(state) for tensors in rank_tensors]
            if any(s is None or len(s) != shard for s in shards):
                failures.append("rank shard of %s missing or not %d floats" %
                                (state, shard))
                continue
            shard_floats += shard
            flat = [v for s in shards for v in s]
            total_floats += bucket["elements"]
            if any(v != 0.0 for v in flat[bucket["elements"]:]):
                failures.append("padding of %s is not zero" % state)
            offset = 0
            for name in bucket["params"]:
                want = reference.get("%s.momentum%d" % (name, k))
                if want is None:
                    failures.append("reference has no %s.momentum%d" % (name, k))
                    continue
                got = flat[offset:offset + len(want)]
                offset += len(want)
                ok, rel = close(got, want)
                worst = max(worst, rel)
                if not ok:
                    failures.append("%s.momentum%d differs (relative %g)" %
                                    (name, k, rel))
    print("optimizer state per rank: %d of %d floats (1/%.3g), max relative "
          "difference %.3g" % (shard_floats, total_floats,
                               total_floats / shard_floats if shard_floats
                               else 0, worst))
    for failure in failures:
        print("FAIL: " + failure)
    print("ZeRO matches the reference" if not failures else "ZeRO differs")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
