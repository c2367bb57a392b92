#!/usr/bin/env python3
"""hf_shard.py - writes a Hugging Face model directory's weights the way
transformers' save_pretrained shards them, from one safetensors file, with
struct and json only (an independent writer for tests/test_hf_dir.sh).

  hf_shard.py IN.safetensors OUTDIR NSHARDS [MODE]
  hf_shard.py --compare DIR FILE.safetensors MAX_SHARD_BYTES
                 DIR's weights (index and shards, read as transformers
                 does) hold exactly FILE's tensors, byte for byte, each
                 once, every shard within MAX_SHARD_BYTES unless it holds
                 one tensor; prints the shard count

Tensors go to shards model-0000K-of-0000N.safetensors round-robin, listed by
model.safetensors.index.json ({"metadata": {"total_size": B}, "weight_map":
{...}}). MODE breaks the result on purpose, for the error tests:
  missing-shard   the index names a shard that is not written
  wrong-shard     the index puts the first tensor in the wrong shard
  twice           the first tensor is written into two shards
  bad-name        a shard is named "../x.safetensors" in the index
"""
import json
import os
import struct
import sys


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    body = data[8 + n:]
    tensors = []
    for name, t in header.items():
        a, b = t["data_offsets"]
        tensors.append((name, t["dtype"], t["shape"], body[a:b]))
    tensors.sort(key=lambda x: x[0])
    return tensors


def write(path, tensors):
    header, off, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        blobs.append(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def compare(d, ref, limit):
    with open(os.path.join(d, "model.safetensors.index.json")) as f:
        index = json.load(f)
    wmap = index["weight_map"]
    want = {t[0]: t for t in read(ref)}
    assert set(wmap) == set(want), "index and file list different tensors"
    seen = {}
    for shard in sorted(set(wmap.values())):
        assert "/" not in shard, shard
        tensors = read(os.path.join(d, shard))
        size = sum(len(t[3]) for t in tensors)
        assert size <= limit or len(tensors) == 1, "%s: %d bytes > %d" % (shard, size, limit)
        for t in tensors:
            assert t[0] not in seen, "%s twice" % t[0]
            assert wmap[t[0]] == shard, "%s: index says %s, found in %s" % (t[0], wmap[t[0]], shard)
            assert t == want[t[0]], "%s differs" % t[0]
            seen[t[0]] = shard
    assert set(seen) == set(want), "tensors missing from the shards"
    total = sum(len(t[3]) for t in want.values())
    assert index["metadata"]["total_size"] == total, "total_size"
    print(len(set(wmap.values())))


def main():
    if sys.argv[1] == "--compare":
        compare(sys.argv[2], sys.argv[3], int(float(sys.argv[4])))
        return
    src, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    mode = sys.argv[4] if len(sys.argv) > 4 else ""
    tensors = read(src)
    os.makedirs(out, exist_ok=True)
    names = ["model-%05d-of-%05d.safetensors" % (k + 1, n) for k in range(n)]
    shards = [[] for _ in range(n)]
    wmap = {}
    for i, t in enumerate(tensors):
        shards[i % n].append(t)
        wmap[t[0]] = names[i % n]
    if mode == "twice":
        shards[1].append(tensors[0])
    if mode == "wrong-shard":
        wmap[tensors[0][0]] = names[1]
    for k in range(n):
        if mode == "missing-shard" and k == n - 1:
            continue
        write(os.path.join(out, names[k]), shards[k])
    if mode == "bad-name":
        wmap[tensors[0][0]] = "../" + names[0]
    total = sum(len(t[3]) for t in tensors)
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": wmap}, f, indent=2)


main()
