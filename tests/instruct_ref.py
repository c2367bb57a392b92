#!/usr/bin/python3
"""instruct_ref.py - the loss of one masked batch, computed independently of
stepgraph, for tests/test_instruct.sh.

  instruct_ref.py write SHARD T IDS MASK   an llm.c shard (uint16) and its loss
                                           mask (runtime/io/loss_mask.h's layout),
                                           written here with struct; IDS and MASK
                                           are comma lists
  instruct_ref.py loss MODEL.json WEIGHTS SHARD T
                                           prints the mean cross-entropy of the
                                           shard's first window (B = 1) with the
                                           targets whose token has mask 0 set to
                                           -100, transformers' ignored label;
                                           "nomask" as a 5th argument ignores the
                                           mask (the control)
The model is tests/torch_model_ref.py's plain-torch Llama (float64), its
weights read from a safetensors file by tests/safetensors_ref.py.
"""
import json
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_ref  # noqa: E402
import torch_model_ref  # noqa: E402


def write(shard, ids, mask):
    n = len(ids)
    with open(shard, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
        f.write(struct.pack("<%dH" % n, *ids))
    with open(shard + ".mask", "wb") as f:
        f.write(struct.pack("<256i", 20261128, 1, len(mask), *([0] * 253)))
        f.write(bytes(mask))


def read_window(shard, T, use_mask, i=0):
    """Window i of the shard (tokens [i T, i T + T], runtime/io/data_loader.h):
    its inputs and its targets, -100 where the mask says 0."""
    raw = open(shard, "rb").read()
    n = struct.unpack("<256i", raw[:1024])[2]
    ids = struct.unpack("<%dH" % n, raw[1024:1024 + 2 * n])[i * T:i * T + T + 1]
    mask = [1] * (T + 1)
    if use_mask:
        mask = list(open(shard + ".mask", "rb").read()[1024 + i * T:1024 + i * T + T + 1])
    targets = [ids[t + 1] if mask[t + 1] else -100 for t in range(T)]
    return list(ids[:T]), targets


def model_of(model_json, weights, T):
    """tests/torch_model_ref.py's Llama (float64, B = 1, T) with the weights of a
    safetensors file."""
    m = json.load(open(model_json))
    args = {"H": m["hidden_size"], "L": m["num_hidden_layers"],
            "Hq": m["num_attention_heads"], "Hkv": m["num_key_value_heads"],
            "D": m["head_dim"], "F": m["intermediate_size"], "V": m["vocab_size"],
            "B": 1, "T": T, "tie": int(m["tie_word_embeddings"]), "qk_norm": 0, "window": 0,
            "eps": m["rms_norm_eps"], "theta": m["rope_theta"]}
    header, _, data = safetensors_ref.read(weights)
    params = {}
    for name, v in header.items():
        assert v["dtype"] == "F32", (name, v["dtype"])
        b, e = v["data_offsets"]
        a = np.frombuffer(data[b:e], dtype="<f4").astype(np.float64)
        params[name] = torch.from_numpy(a.copy()).requires_grad_(True)
    return torch_model_ref.Model({k: str(v) for k, v in args.items()}, set(), params)


def loss(model_json, weights, shard, T, use_mask):
    model = model_of(model_json, weights, T)
    tokens, targets = read_window(shard, T, use_mask)
    out, _ = model.forward(torch.tensor(tokens), torch.tensor(targets), torch.float64)
    return out.item()


def main(argv):
    if argv[1] == "write":
        write(argv[2], [int(x) for x in argv[4].split(",")], [int(x) for x in argv[5].split(",")])
        return 0
    print("%.12g" % loss(argv[2], argv[3], argv[4], int(argv[5]),
                         len(argv) < 7 or argv[6] != "nomask"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
