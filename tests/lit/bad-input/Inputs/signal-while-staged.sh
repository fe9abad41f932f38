#!/bin/bash
# Usage: signal-while-staged.sh SIGNAL DIR MODEL
#
# Runs gmopt-compile on MODEL with -o DIR/out.gm and --report-json DIR/fifo,
# a FIFO nobody reads, so that the run blocks at commit with its .gm staged
# in a temporary file; sends SIGNAL once that file exists and prints the
# exit status ("status 143" for SIGTERM). A run the signal does not end is
# killed after 10 s, so the test fails instead of hanging.
signal=$1 dir=$2 model=$3
# SIGINT and SIGTERM at their default action: a background job of a shell
# without job control starts with SIGINT ignored.
python3 -c 'import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
signal.signal(signal.SIGTERM, signal.SIG_DFL)
os.execvp(sys.argv[1], sys.argv[1:])' \
  gmopt-compile "$model" --dim batch=2 -o "$dir/out.gm" \
  --report-json "$dir/fifo" > /dev/null &
pid=$!
for _ in $(seq 600); do
  ls "$dir" | grep -q tmp && break
  sleep 0.1
done
sleep 1
kill "-$signal" "$pid"
for _ in $(seq 100); do
  kill -0 "$pid" 2> /dev/null || break
  sleep 0.1
done
kill -KILL "$pid" 2> /dev/null
wait "$pid"
echo "status $?"
