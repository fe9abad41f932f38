"""Checks that amp and selective recompute compose: the planned peak (arena
plus persistent bytes, from gmopt-compile --report-json) of the pipeline with
both is at most that of either alone.

    python3 peaks_compose.py SELECTIVE.json AMP.json BOTH.json
"""

import json
import sys


def peak(path):
    with open(path) as f:
        report = json.load(f)
    return report["arena_bytes"] + report["persistent_bytes"]


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    selective, amp, both = (peak(p) for p in sys.argv[1:])
    print(f"selective {selective} amp {amp} both {both}")
    if both > selective or both > amp:
        sys.exit(f"amp with selective recompute plans {both} bytes, more than "
                 f"selective alone ({selective}) or amp alone ({amp})")
    print("composes: both <= selective, both <= amp")


if __name__ == "__main__":
    main()
