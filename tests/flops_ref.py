#!/usr/bin/env python3
"""flops_ref.py - the three FLOP counts of docs/flops.md, evaluated from a
model JSON's sizes with Python integers: a reference for the tests of the
step log, the metrics and simulate, independent of models/flops.c. Dense
Llama-style models only (attention q, k, v, o without bias, SwiGLU MLP, two
RMSNorms a layer, a final norm; tied or untied head).

Usage: flops_ref.py MODEL_JSON SEQS SEQ_LEN CHECKPOINTING(0|1) SECONDS
prints "seed model megatron" in TFLOP/s (FLOP / SECONDS / 1e12).
"""
import json
import sys


def params(m):
    """Every parameter (a tied head once) and P_ne (less the input embedding
    when untied; tied: the shared matrix counts, as the head)."""
    h, L, V = m["hidden_size"], m["num_hidden_layers"], m["vocab_size"]
    q = m["num_attention_heads"] * m["head_dim"]
    kv = m["num_key_value_heads"] * m["head_dim"]
    layer = h * q + 2 * h * kv + q * h + 3 * h * m["intermediate_size"] + 2 * h
    tied = m["tie_word_embeddings"]
    P = V * h + L * layer + h + (0 if tied else V * h)
    return P, (P if tied else P - V * h)


def rates(m, seqs, s, ckpt, seconds):
    h, L, V = m["hidden_size"], m["num_hidden_layers"], m["vocab_size"]
    q = m["num_attention_heads"] * m["head_dim"]
    c = 4 if ckpt else 3
    P, Pne = params(m)
    seed = seqs * (2 * c * P * s + 4 * c * L * h * s * s)
    model = seqs * (6 * Pne * s + 6 * L * q * s * s)
    meg = 24 * c * seqs * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h))
    return [f / seconds / 1e12 for f in (seed, model, meg)]


if __name__ == "__main__":
    model = json.load(open(sys.argv[1]))
    r = rates(model, int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1", float(sys.argv[5]))
    print(" ".join("%.17g" % x for x in r))
