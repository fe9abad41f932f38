#!/usr/bin/env python3
"""Starts N gmopt-run ranks torchrun-style, without any MPI launcher.

Usage: launch_ranks.py N OUTDIR [--limit S] [--linger S] [--watch R]
                       [--rank-env R:K=V]... [--no-secret 1]
                       [--stranger silent|half|bare-hello] -- COMMAND ARGS...

Every rank gets RANK, WORLD_SIZE=N, LOCAL_RANK, MASTER_ADDR=127.0.0.1 and
MASTER_PORT (a port that was free a moment ago) in its environment, as
torchrun sets them, and a world secret: GMOPT_WORLD_SECRET, fresh for the
launch, unless the environment already holds GMOPT_WORLD_SECRET or
GMOPT_WORLD_SECRET_FILE (or --no-secret 1: none); `{rank}` in COMMAND or
ARGS becomes the rank. --rank-env R:K=V sets K=V for rank R only (e.g.
another WORLD_SIZE; an empty V unsets K). --stranger starts rank 0 alone,
connects a client that is no rank to MASTER_PORT once rank 0 listens - it
sends nothing (silent), 10 bytes of a message header (half), or the bare
hello of gmopt's first TCP world claiming RANK=1 (bare-hello) - and only
then starts the other ranks; the client holds its connection until the
ranks are done, and the report ends with a line about it. Rank
R's stdout and stderr go to OUTDIR/rank.R.txt. The launcher waits for rank
--watch (default 0), then --linger seconds (default 10) for the others, and
kills what still runs then (a rank that hangs on purpose); everything still running after
--limit seconds (default 120) is killed too, which the report says - a
hang is never silent. Prints one line per rank, `rank R: exit CODE` or
`rank R: killed (still running ...)`, and exits 0.
"""
import os
import secrets
import signal
import socket
import struct
import subprocess
import sys
import time

MAGIC = 0x676D6F70  # "gmop", TcpWorld.cpp's kMagic


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def connect_stranger(port, mode, ranks, limit):
    """Connects to rank 0 once it listens and sends what `mode` says."""
    header = struct.pack("<IIQQ", MAGIC, 1, 0, 8)
    payload = {"silent": b"", "half": header[:10],
               "bare-hello": header + struct.pack("<ii", 1, ranks)}[mode]
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            client.connect(("127.0.0.1", port))
            client.sendall(payload)
            return client
        except OSError:
            client.close()
            time.sleep(0.02)
    return None


def main(argv):
    separator = argv.index("--")
    options, command = argv[1:separator], argv[separator + 1:]
    ranks, outdir = int(options[0]), options[1]
    limit, linger, watch, rank_env = 120.0, 10.0, 0, {}
    no_secret, stranger_mode = False, None
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
        elif flag == "--no-secret":
            no_secret = value == "1"
        elif flag == "--stranger":
            if value not in ("silent", "half", "bare-hello"):
                raise SystemExit("unknown --stranger " + value)
            stranger_mode = value
        elif flag == "--rank-env":
            rank, assignment = value.split(":", 1)
            key, val = assignment.split("=", 1)
            rank_env.setdefault(int(rank), {})[key] = val
        else:
            raise SystemExit("unknown option " + flag)
    os.makedirs(outdir, exist_ok=True)
    port = free_port()
    world_env = dict(os.environ)
    if no_secret:
        world_env.pop("GMOPT_WORLD_SECRET", None)
        world_env.pop("GMOPT_WORLD_SECRET_FILE", None)
    elif ("GMOPT_WORLD_SECRET" not in world_env and
          "GMOPT_WORLD_SECRET_FILE" not in world_env):
        world_env["GMOPT_WORLD_SECRET"] = secrets.token_hex(32)
    processes = []
    stranger, stranger_report = None, None
    start = time.monotonic()
    for rank in range(ranks):
        env = dict(world_env, RANK=str(rank), WORLD_SIZE=str(ranks),
                   LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port))
        for key, val in rank_env.get(rank, {}).items():
            if val:
                env[key] = val
            else:
                env.pop(key, None)
        log = open(os.path.join(outdir, "rank.%d.txt" % rank), "w")
        args = [part.replace("{rank}", str(rank)) for part in command]
        processes.append(subprocess.Popen(args, stdout=log,
                                          stderr=subprocess.STDOUT, env=env))
        if rank == 0 and stranger_mode:
            stranger = connect_stranger(port, stranger_mode, ranks, limit)
            stranger_report = (
                "stranger (%s): connected before rank 1 started" %
                stranger_mode if stranger else
                "stranger (%s): could not connect" % stranger_mode)
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
    if stranger:
        stranger.close()
    if stranger_report:
        print(stranger_report)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
