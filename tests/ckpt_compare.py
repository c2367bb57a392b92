"""ckpt_compare.py A.safetensors B.safetensors RTOL [TENSOR_RTOL] - two weights files.

An independent reader (json + struct, not stepgraph's): parses each file's
8-byte little-endian header length, its JSON header and its F32 tensors,
and checks that both hold the same tensor names, shapes and dtypes (F32),
the same __metadata__ "step", that the whole model A is within RTOL of B in
relative L2 norm (||a - b|| / ||b|| over every element), and every tensor
within TENSOR_RTOL (default RTOL) the same way. Prints the differences and
how many elements differ; exit status 1 with the first offending tensor
otherwise.
"""
import json
import math
import struct
import sys


def read(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, t in header.items():
        if t["dtype"] != "F32":
            sys.exit("%s: %s: dtype %s, expected F32" % (path, name, t["dtype"]))
        begin, end = t["data_offsets"]
        count = (end - begin) // 4
        if count != math.prod(t["shape"]):
            sys.exit("%s: %s: %d values for shape %s" % (path, name, count, t["shape"]))
        tensors[name] = (t["shape"], struct.unpack("<%df" % count, body[begin:end]))
    return meta, tensors


def main():
    (ma, a), (mb, b), rtol = read(sys.argv[1]), read(sys.argv[2]), float(sys.argv[3])
    trtol = float(sys.argv[4]) if len(sys.argv) > 4 else rtol
    if sorted(a) != sorted(b):
        sys.exit("tensor names differ: %s" % sorted(set(a) ^ set(b)))
    if ma.get("step") != mb.get("step"):
        sys.exit("__metadata__.step differs: %r, %r" % (ma.get("step"), mb.get("step")))
    worst, differ, total, num_all, den_all = 0.0, 0, 0, 0.0, 0.0
    for name in sorted(a):
        (sa, va), (sb, vb) = a[name], b[name]
        if sa != sb:
            sys.exit("%s: shape %s, expected %s" % (name, sa, sb))
        num = sum((x - y) ** 2 for x, y in zip(va, vb))
        den = sum(y * y for y in vb)
        num_all += num
        den_all += den
        rel = math.sqrt(num / den) if den > 0 else math.sqrt(num)
        if not math.isfinite(rel) or rel > trtol:
            sys.exit("%s: relative L2 difference %.3g above %g" % (name, rel, trtol))
        worst = max(worst, rel)
        differ += sum(x != y for x, y in zip(va, vb))
        total += len(va)
    whole = math.sqrt(num_all / den_all) if den_all > 0 else math.sqrt(num_all)
    if not math.isfinite(whole) or whole > rtol:
        sys.exit("the whole model: relative L2 difference %.3g above %g" % (whole, rtol))
    print("whole model: relative L2 difference %.3g; largest of a tensor %.3g (%d tensors); "
          "%d of %d elements differ" % (whole, worst, len(a), differ, total))


main()
