#!/usr/bin/env python3
"""Copies a .pbseq TensorProto sequence without the tensor named NAME.

Usage: drop_tensor.py IN.pbseq NAME OUT.pbseq
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_data_parallel import varint  # noqa: E402


def encode(value):
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def name_of(entry):
    pos = 0
    while pos < len(entry):
        key, pos = varint(entry, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            _, pos = varint(entry, pos)
        elif wire == 2:
            size, pos = varint(entry, pos)
            if field == 8:
                return entry[pos:pos + size].decode()
            pos += size
        elif wire == 5:
            pos += 4
        elif wire == 1:
            pos += 8
    return ""


def main(argv):
    buf = open(argv[1], "rb").read()
    count, pos = varint(buf, 0)
    kept = []
    for _ in range(count):
        size, pos = varint(buf, pos)
        entry = buf[pos:pos + size]
        pos += size
        if name_of(entry) != argv[2]:
            kept.append(entry)
    if len(kept) == count:
        sys.exit("%s holds no tensor named %s" % (argv[1], argv[2]))
    with open(argv[3], "wb") as out:
        out.write(encode(len(kept)))
        for entry in kept:
            out.write(encode(len(entry)) + entry)


if __name__ == "__main__":
    main(sys.argv)
