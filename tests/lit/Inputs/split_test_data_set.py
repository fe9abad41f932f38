#!/usr/bin/env python3
"""Splits one test_data_set into N sets of 1/N of its batch each.

Usage: split_test_data_set.py SET_DIR N OUT_DIR

Writes OUT_DIR/test_data_set_0 .. test_data_set_{N-1}. The set's
manifest.json says which input_K.pb files are data (role "data"): each of
those is cut along its first axis into N equal consecutive slices, slice i
going to set i; every other input (parameters, optimizer state) is copied
to every set unchanged. Reference outputs (output_K.pb) are not copied: they
belong to the whole batch. A folder of the N sets fed to N data-parallel
ranks gives each rank the rows a single --inputs SET_DIR would (rank i takes
set i). A TensorProto is read and written here without protobuf: dims,
data_type, name and the contents (raw_data, or float_data / int32_data /
int64_data / double_data turned into raw_data).
"""
import json
import os
import struct
import sys

from check_data_parallel import varint  # noqa: E402  (same folder)

# TensorProto.data_type -> (element bytes, struct format of the typed field)
ELEMENT = {1: (4, "f"), 2: (1, "B"), 3: (1, "b"), 4: (2, "H"), 5: (2, "h"),
           6: (4, "i"), 7: (8, "q"), 9: (1, "B"), 10: (2, "H"), 11: (8, "d"),
           12: (4, "I"), 13: (8, "Q"), 16: (2, "H")}


def put_varint(value):
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def read_tensor(path):
    buf = open(path, "rb").read()
    dims, dtype, name, raw, typed = [], 1, "", None, []
    pos = 0
    while pos < len(buf):
        key, pos = varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = varint(buf, pos)
            if field == 1:
                dims.append(value)
            elif field == 2:
                dtype = value
            elif field in (5, 7, 11):
                typed.append(value)
        elif wire == 2:
            size, pos = varint(buf, pos)
            chunk = buf[pos:pos + size]
            pos += size
            if field == 1:  # packed dims
                at = 0
                while at < len(chunk):
                    value, at = varint(chunk, at)
                    dims.append(value)
            elif field == 8:
                name = chunk.decode()
            elif field == 9:
                raw = bytes(chunk)
            elif field in (5, 7, 11):  # packed varint data
                at = 0
                while at < len(chunk):
                    value, at = varint(chunk, at)
                    typed.append(value)
            elif field == 4:
                typed.extend(struct.unpack("<%df" % (size // 4), chunk))
            elif field == 10:
                typed.extend(struct.unpack("<%dd" % (size // 8), chunk))
            elif field in (13, 14):
                raise SystemExit("%s: external data is not supported" % path)
        elif wire == 5:
            if field == 4:
                typed.append(struct.unpack("<f", buf[pos:pos + 4])[0])
            pos += 4
        elif wire == 1:
            if field == 10:
                typed.append(struct.unpack("<d", buf[pos:pos + 8])[0])
            pos += 8
        else:
            raise SystemExit("%s: unexpected wire type %d" % (path, wire))
    if raw is None:
        size, fmt = ELEMENT[dtype]
        if dtype in (1, 11):
            raw = struct.pack("<%d%s" % (len(typed), fmt), *typed)
        else:
            # Varint fields hold two's-complement 64-bit values.
            signed = [v - (1 << 64) if v >= 1 << 63 and fmt.islower() else v
                      for v in typed]
            raw = struct.pack("<%d%s" % (len(signed), fmt), *signed)
    return dims, dtype, name, raw


def write_tensor(path, dims, dtype, name, raw):
    out = bytearray()
    for dim in dims:
        out += put_varint(1 << 3) + put_varint(dim)
    out += put_varint(2 << 3) + put_varint(dtype)
    encoded = name.encode()
    out += put_varint(8 << 3 | 2) + put_varint(len(encoded)) + encoded
    out += put_varint(9 << 3 | 2) + put_varint(len(raw)) + raw
    with open(path, "wb") as f:
        f.write(out)


def main(argv):
    if len(argv) != 4:
        raise SystemExit(__doc__.strip().splitlines()[2])
    source, parts, target = argv[1], int(argv[2]), argv[3]
    manifest = json.load(open(os.path.join(source, "manifest.json")))
    for i in range(parts):
        os.makedirs(os.path.join(target, "test_data_set_%d" % i), exist_ok=True)
    for entry in manifest["inputs"]:
        if not entry.get("file"):  # stored nowhere (zeros)
            continue
        dims, dtype, name, raw = read_tensor(os.path.join(source, entry["file"]))
        for i in range(parts):
            out = os.path.join(target, "test_data_set_%d" % i, entry["file"])
            if entry.get("role") != "data":
                write_tensor(out, dims, dtype, name, raw)
                continue
            if not dims or dims[0] % parts:
                raise SystemExit("%s: first axis %s is not a multiple of %d" %
                                 (entry["file"], dims[:1], parts))
            row = len(raw) // dims[0]
            rows = dims[0] // parts
            write_tensor(out, [rows] + dims[1:], dtype, name,
                         raw[i * rows * row:(i + 1) * rows * row])
    print("split %s into %d sets in %s" % (source, parts, target))


if __name__ == "__main__":
    main(sys.argv)
