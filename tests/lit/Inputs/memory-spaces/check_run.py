"""Reads gmopt-run's --report-json for a training graph that moves one tensor to host memory and back
(argv[1]) and for the same graph without the copies (argv[2]), and prints what memory-spaces/run.test
checks: the measured device peak equals the planned one in both runs and is lower with the round trip,
and the measured host peak equals the planned host arena, which is argv[3] bytes (the moved tensor)."""
import json
import sys

with_copies, without, moved = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), int(sys.argv[3])
for name, report in (("with copies", with_copies), ("without", without)):
    measured, planned = report["optimized"]["peak_bytes"], report["plan"]["planned_bytes"]
    print(f"{name}: device peak " + ("planned == measured" if measured == planned else f"planned {planned} != measured {measured}"))
peak, base = with_copies["optimized"]["peak_bytes"], without["optimized"]["peak_bytes"]
print("device peak lower with copies" if peak < base else f"device peak {peak} not below {base}")
host = (with_copies["optimized"]["host_peak_bytes"], with_copies["optimized"]["host_arena_bytes"],
        with_copies["plan"]["host_arena_bytes"])
print("host arena is the moved tensor" if host == (moved,) * 3 else f"host figures {host}, tensor {moved}")
print(f"without copies: host arena {without['plan']['host_arena_bytes']}")
