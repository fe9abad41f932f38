#!/usr/bin/env python3
"""Checks a data-parallel gmopt-run against single-process training.

Usage: check_data_parallel.py [--rtol R] SINGLE_LOG SINGLE.pbseq RANKS LOG_0.. PBSEQ_0..

Each log holds gmopt-run's `step K: loss L` lines; in a data-parallel run
the loss is already the mean over the ranks (each rank's loss is the mean
over its equal share of the global batch), printed by rank 0, while the
other ranks print no step lines unless run with --verbose (then the same
global losses). Passes when, for every step, rank 0's loss equals the
single-process loss, every other rank is quiet or agrees with rank 0
exactly, every rank ends with
bit-identical parameters, and those equal the single-process parameters
within fp32 tolerance: per tensor max |a - b| <= R * max |b| + 1e-7, and
per step |loss - single loss| <= R * |single loss| + 1e-6, with R = --rtol
(default 1e-5).

Why not bit-equal: the ranks sum their half-batch gradients (each a mean
over its half) and halve the sum, where one process reduces the whole
batch at once, so the fp32 additions run in another order (about 1e-7
relative per step on mlp under SGD). AdamW magnifies that: its update
m / (sqrt(v) + eps) is about lr * sign(g) per element, so where a gradient
element is within rounding of eps or of zero the two runs can step it
differently, and the moments carry the difference on; the Transformer
tests (data-parallel-gpt.test) state their own R for it.
A .pbseq is a varint count, then per tensor a varint size and a serialized
onnx.TensorProto (read here without protobuf: name, data_type, raw_data or
float_data).
"""
import re
import struct
import sys


def varint(buf, pos):
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def tensor(buf):
    name, raw, floats, dtype = "", None, [], 1
    pos = 0
    while pos < len(buf):
        key, pos = varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = varint(buf, pos)
            if field == 2:
                dtype = value
        elif wire == 2:
            size, pos = varint(buf, pos)
            chunk = buf[pos:pos + size]
            pos += size
            if field == 8:
                name = chunk.decode()
            elif field == 9:
                raw = chunk
            elif field == 4:
                floats = list(struct.unpack("<%df" % (size // 4), chunk))
        elif wire == 5:
            if field == 4:
                floats.append(struct.unpack("<f", buf[pos:pos + 4])[0])
            pos += 4
        elif wire == 1:
            pos += 8
        else:
            raise ValueError("unexpected wire type %d" % wire)
    if dtype != 1:
        return name, None
    if raw is not None:
        floats = list(struct.unpack("<%df" % (len(raw) // 4), raw))
    return name, floats


def read_pbseq(path):
    buf = open(path, "rb").read()
    count, pos = varint(buf, 0)
    tensors = {}
    for _ in range(count):
        size, pos = varint(buf, pos)
        name, values = tensor(buf[pos:pos + size])
        pos += size
        if values is not None:
            tensors[name] = values
    return tensors


def losses(path):
    return [float(m.group(1)) for m in
            re.finditer(r"^step \d+: loss (\S+)", open(path).read(), re.M)]


def check_rank_losses(expected, per_rank, label, failures, rtol=1e-5):
    """Rank 0 prints the global losses; the other ranks are quiet or print
    the same. Compares rank 0's with \p expected step by step (printing one
    line each) and appends what differs to \p failures."""
    for k, others in enumerate(per_rank[1:], 1):
        if others and others != per_rank[0]:
            failures.append("rank %d's losses differ from rank 0's" % k)
    quiet = sum(1 for others in per_rank[1:] if not others)
    print("%d of %d other ranks printed no step lines" %
          (quiet, len(per_rank) - 1))
    if not expected or len(per_rank[0]) != len(expected):
        failures.append("step counts differ: %s vs %s" %
                        (len(expected), len(per_rank[0])))
        return
    for step, want in enumerate(expected):
        got = per_rank[0][step]
        ok = abs(got - want) <= rtol * abs(want) + 1e-6
        print("step %d: %s %.6f ranks' mean %.6f %s" %
              (step + 1, label, want, got, "ok" if ok else "MISMATCH"))
        if not ok:
            failures.append("loss of step %d" % (step + 1))


def main(argv):
    rtol = 1e-5
    if argv[1] == "--rtol":
        rtol = float(argv[2])
        argv = argv[:1] + argv[3:]
    single_log, single_weights, ranks = argv[1], argv[2], int(argv[3])
    logs, weights = argv[4:4 + ranks], argv[4 + ranks:4 + 2 * ranks]
    failures = []
    expected = losses(single_log)
    check_rank_losses(expected, [losses(log) for log in logs], "single",
                      failures, rtol)
    reference = read_pbseq(single_weights)
    rank_tensors = [read_pbseq(path) for path in weights]
    for k, tensors in enumerate(rank_tensors[1:], 1):
        if tensors != rank_tensors[0]:
            failures.append("rank %d's parameters differ from rank 0's" % k)
    worst, worst_name = 0.0, "-"
    for name, want in reference.items():
        got = rank_tensors[0].get(name)
        if got is None or len(got) != len(want):
            failures.append("parameter %s missing or resized" % name)
            continue
        scale = max(abs(v) for v in want) if want else 0.0
        diff = max((abs(a - b) for a, b in zip(got, want)), default=0.0)
        relative = diff / scale if scale else diff
        if relative > worst:
            worst, worst_name = relative, name
        if diff > rtol * scale + 1e-7:
            failures.append("parameter %s differs by %g" % (name, diff))
    print("%d float tensors compared, max relative difference %.3g "
          "(tolerance %.3g; worst %s)" % (len(reference), worst, rtol,
                                          worst_name))
    for failure in failures:
        print("FAIL: " + failure)
    print("data-parallel matches single-process" if not failures else
          "data-parallel differs")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
