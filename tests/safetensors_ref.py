#!/usr/bin/env python3
"""safetensors_ref.py - an independent safetensors reader and writer for
tests/test_weights.c, written from the format description with struct and
json only (no safetensors or numpy package needed).

  safetensors_ref.py write OUT        write the reference file the C test reads
  safetensors_ref.py check F32 BF16   check two files written by stepgraph from
                                      the same fp32 values: layout, F32 payload,
                                      BF16 = fp32 rounded to nearest even

Exit status 0 when all is well; messages on stderr otherwise.
"""
import json
import math
import struct
import sys


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def bf16_rne(bits):
    """fp32 bit pattern -> bf16 bit pattern, round to nearest even."""
    if (bits & 0x7FFFFFFF) > 0x7F800000:
        return (bits >> 16) | 0x40
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


def write_reference(path):
    # Known values; the C test checks them exactly.
    a = [i * 0.5 - 1.0 for i in range(6)]                 # F32 (2, 3)
    b = [0x3F80, 0xC000, 0x3EAA, 0x7F80]                  # BF16 bits: 1, -2, 0.33203125, inf
    c = [1.0, -0.5, 65504.0, 2.0 ** -24]                  # F16 (2, 2)
    blobs = [
        ("a", "F32", [2, 3], struct.pack("<6f", *a)),
        ("b", "BF16", [4], struct.pack("<4H", *b)),
        ("c", "F16", [2, 2], struct.pack("<4e", *c)),
    ]
    # Data in the order c, a, b to check the reader follows the offsets, and
    # keys in another order in the header; no padding: the header length is
    # not a multiple of 8, so the data are unaligned.
    order = ["c", "a", "b"]
    offsets, off = {}, 0
    for name in order:
        blob = [x for x in blobs if x[0] == name][0][3]
        offsets[name] = (off, off + len(blob))
        off += len(blob)
    header = {"__metadata__": {"format": "pt", "writer": "python"}}
    for name, dtype, shape, blob in reversed(blobs):
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": list(offsets[name])}
    h = json.dumps(header, separators=(",", ":")).encode()
    if len(h) % 8 == 0:
        h += b" "  # keep it unaligned on purpose (spaces are allowed)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for name in order:
            f.write([x for x in blobs if x[0] == name][0][3])


def read(path):
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: too short")
    (n,) = struct.unpack("<Q", raw[:8])
    if n % 8 != 0:
        raise ValueError(f"{path}: header length {n} is not a multiple of 8")
    htext = raw[8:8 + n].decode("utf-8")
    if not htext.rstrip(" ").endswith("}"):
        raise ValueError(f"{path}: header padding is not spaces")
    header = json.loads(htext)
    data = raw[8 + n:]
    meta = header.pop("__metadata__", {})
    spans = sorted((v["data_offsets"][0], v["data_offsets"][1], k) for k, v in header.items())
    at = 0
    for b, e, k in spans:
        if b != at:
            raise ValueError(f"{path}: {k}: offsets not contiguous ({b} != {at})")
        at = e
    if at != len(data):
        raise ValueError(f"{path}: data section {len(data)} bytes, tensors cover {at}")
    sizes = {"F32": 4, "BF16": 2, "F16": 2}
    for k, v in header.items():
        numel = math.prod(v["shape"])
        b, e = v["data_offsets"]
        if numel * sizes[v["dtype"]] != e - b:
            raise ValueError(f"{path}: {k}: shape {v['shape']} does not match offsets")
    return header, meta, data


def check(path32, path16):
    h32, m32, d32 = read(path32)
    h16, m16, d16 = read(path16)
    if m32.get("format") != "pt" or m16.get("format") != "pt":
        raise ValueError("metadata format != pt")
    if list(h32) != list(h16):
        raise ValueError("the two files list different tensors")
    count = 0
    for name, v in h32.items():
        w = h16[name]
        if v["dtype"] != "F32" or w["dtype"] != "BF16" or v["shape"] != w["shape"]:
            raise ValueError(f"{name}: dtype/shape {v} vs {w}")
        b, e = v["data_offsets"]
        vals = struct.unpack(f"<{(e - b) // 4}I", d32[b:e])
        b2, e2 = w["data_offsets"]
        halves = struct.unpack(f"<{(e2 - b2) // 2}H", d16[b2:e2])
        for i, (x, h) in enumerate(zip(vals, halves)):
            if bf16_rne(x) != h:
                raise ValueError(f"{name}[{i}]: fp32 {x:#010x} -> bf16 {h:#06x}, "
                                 f"expected {bf16_rne(x):#06x}")
            count += 1
    print(f"# python checked {len(h32)} tensors, {count} values")


def main(argv):
    if len(argv) == 3 and argv[1] == "write":
        write_reference(argv[2])
    elif len(argv) == 4 and argv[1] == "check":
        check(argv[2], argv[3])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except (ValueError, KeyError, OSError, json.JSONDecodeError) as e:
        print(f"safetensors_ref.py: {e}", file=sys.stderr)
        sys.exit(1)
