#!/usr/bin/python3
"""Usage: patch-gm-name.py IN.gm OUT.gm OLD NEW [--last]

Replaces the name OLD by NEW (same length; `%ff` in NEW stands for the byte
0xff) in the payload of a .gm file - every occurrence, or with --last only
the last one - and writes OUT.gm with the header's CRC-32 recomputed, so
that the loader gets past the CRC check to the names."""

import struct
import sys
import zlib

HEADER = 24


def main():
    source, target, old, new = sys.argv[1:5]
    last = "--last" in sys.argv[5:]
    old = old.encode()
    new = new.encode().replace(b"%ff", b"\xff")
    assert len(old) == len(new), "the names must have the same length"
    with open(source, "rb") as f:
        data = f.read()
    header, payload = data[:HEADER], data[HEADER:]
    assert payload.count(old) >= 1, "the name does not occur"
    if last:
        at = payload.rindex(old)
        payload = payload[:at] + new + payload[at + len(old):]
    else:
        payload = payload.replace(old, new)
    header = header[:20] + struct.pack("<I", zlib.crc32(payload))
    with open(target, "wb") as f:
        f.write(header + payload)
    return 0


if __name__ == "__main__":
    sys.exit(main())
