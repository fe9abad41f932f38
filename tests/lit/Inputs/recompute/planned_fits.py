"""Reads gmopt-opt --pass-statistics (stdin) and prints whether the planned peak (plan-buffers'
arena-bytes + persistent-bytes) fits recompute's memory-limit: `fits` or `over: PEAK > LIMIT`."""
import re
import sys

text = sys.stdin.read()


def stat(name):
    match = re.search(r"^\s+\(S\)\s+(\d+)\s+" + re.escape(name) + r"\s", text, re.M)
    if not match:
        sys.exit(f"no statistic {name}")
    return int(match.group(1))


peak = stat("arena-bytes") + stat("persistent-bytes")
limit = stat("memory-limit")
print("fits" if peak <= limit else f"over: {peak} > {limit}")
