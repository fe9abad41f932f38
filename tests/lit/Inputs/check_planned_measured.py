#!/usr/bin/env python3
"""Checks that every given gmopt-run --report-json has planned bytes == measured peak.

Usage: check_planned_measured.py REPORT.json...

Prints `REPORT: planned P measured M equal` (or `DIFFER`) per report; exits 1
if any differ.
"""
import json
import os
import sys


def main(paths):
    failed = False
    for path in paths:
        with open(path) as f:
            report = json.load(f)
        planned = report["plan"]["planned_bytes"]
        measured = report["optimized"]["peak_bytes"]
        same = planned == measured
        failed |= not same
        print("%s: planned %d measured %d %s" %
              (os.path.basename(path), planned, measured, "equal" if same else "DIFFER"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
