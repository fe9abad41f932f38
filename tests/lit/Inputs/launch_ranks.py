#!/usr/bin/env python3
"""Starts N gmopt-run ranks torchrun-style, without any MPI launcher.

Usage: launch_ranks.py N OUTDIR [--limit S] [--linger S] [--watch R]
                       [--rank-env R:K=V]... -- COMMAND ARGS...

Every rank gets RANK, WORLD_SIZE=N, LOCAL_RANK, MASTER_ADDR=127.0.0.1 and
MASTER_PORT (a port that was free a moment ago) in its environment, as
torchrun sets them; `{rank}` in COMMAND or ARGS becomes the rank.
--rank-env R:K=V sets K=V for rank R only (e.g. another WORLD_SIZE). Rank
R's stdout and stderr go to OUTDIR/rank.R.txt. The launcher waits for rank
--watch (default 0), then --linger seconds (default 10) for the others, and
kills what still runs then (a rank that hangs on purpose); everything still running after
--limit seconds (default 120) is killed too, which the report says - a
hang is never silent. Prints one line per rank, `rank R: exit CODE` or
`rank R: killed (still running ...)`, and exits 0.
"""
import os
import signal
import socket
import subprocess
import sys
import time


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def main(argv):
    separator = argv.index("--")
    options, command = argv[1:separator], argv[separator + 1:]
    ranks, outdir = int(options[0]), options[1]
    limit, linger, watch, rank_env = 120.0, 10.0, 0, {}
    rest = options[2:]
    while rest:
        flag, value = rest[0], rest[1]
        rest = rest[2:]
        if flag == "--limit":
            limit = float(value)
        elif flag == "--linger":
            linger = float(value)
        elif flag == "--watch":
            watch = int(value)
        elif flag == "--rank-env":
            rank, assignment = value.split(":", 1)
            key, val = assignment.split("=", 1)
            rank_env.setdefault(int(rank), {})[key] = val
        else:
            raise SystemExit("unknown option " + flag)
    os.makedirs(outdir, exist_ok=True)
    port = free_port()
    processes = []
    for rank in range(ranks):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(ranks),
                   LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port))
        env.update(rank_env.get(rank, {}))
        log = open(os.path.join(outdir, "rank.%d.txt" % rank), "w")
        args = [part.replace("{rank}", str(rank)) for part in command]
        processes.append(subprocess.Popen(args, stdout=log,
                                          stderr=subprocess.STDOUT, env=env))
    start = time.monotonic()
    outcome = {}
    deadline = start + limit
    while len(outcome) < ranks and time.monotonic() < deadline:
        for rank, process in enumerate(processes):
            if rank not in outcome and process.poll() is not None:
                outcome[rank] = "exit %d" % process.returncode
                if rank == watch:
                    deadline = min(deadline, time.monotonic() + linger)
        time.sleep(0.05)
    for rank, process in enumerate(processes):
        if rank not in outcome:
            process.send_signal(signal.SIGKILL)
            process.wait()
            outcome[rank] = ("killed (still running %s)" %
                             ("after rank %d exited" % watch
                              if watch in outcome else
                              "at the launcher's limit"))
    for rank in range(ranks):
        print("rank %d: %s" % (rank, outcome[rank]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
