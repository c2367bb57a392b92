#!/usr/bin/env python3
"""bench_nvme_ds.py - DeepSpeed's ZeRO-Infinity step on this machine, the peer
of scripts/bench_nvme.sh: the same Llama shape as a stepgraph model file,
ZeRO-3 with offload_optimizer {"device": "nvme"}, on the CPU accelerator.

usage: bench_nvme_ds.py --model MODEL.json --seq T --steps N --nvme-path DIR
                        [--sub-group-size S] [--buffer-count B] [--threads N]

Runs in a Python that has deepspeed and torch (~/.cache/stepgraph/venv-bench).
DeepSpeed's nvme swapping needs its async_io op (libaio): when the op cannot
be built here the script prints `unavailable: REASON` and exits 3, so the
caller says why instead of a ratio. The model: embedding, Llama decoder
layers (RMSNorm, rotary q/k, grouped-query attention through SDPA, SwiGLU),
final norm and head, bias-free nn.Linear, fp32; tokens are random. A step
is forward + backward + engine.step(); the disk bytes a step reads and
writes are /proc/self/io's read_bytes and write_bytes around it (the
block device's bytes, which O_DIRECT reads and writes reach).

Prints one JSON line per step {"step", "ms", "read_bytes", "write_bytes",
"loss"} and a last line {"done": true, "deepspeed": VERSION, "torch":
VERSION}.
"""
import argparse
import json
import os
import sys
import time


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--nvme-path", required=True)
    ap.add_argument("--sub-group-size", type=int, default=100000000)
    ap.add_argument("--buffer-count", type=int, default=4)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    return ap.parse_args()


def proc_io():
    vals = {}
    with open("/proc/self/io") as f:
        for line in f:
            k, v = line.split(":")
            vals[k] = int(v)
    return vals["read_bytes"], vals["write_bytes"]


def build(cfg, T, torch):
    F = torch.nn.functional
    H, V, L = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    Hq, Hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = cfg.get("head_dim") or H // Hq
    I, eps, theta = cfg["intermediate_size"], cfg["rms_norm_eps"], cfg["rope_theta"]
    inv = theta ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    cos, sin = torch.cat([ang, ang], -1).cos().float(), torch.cat([ang, ang], -1).sin().float()

    def norm(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    def rope(x):
        h = x.shape[-1] // 2
        return x * cos + torch.cat([-x[..., h:], x[..., :h]], -1) * sin

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.n1, self.n2 = torch.nn.Parameter(torch.ones(H)), torch.nn.Parameter(torch.ones(H))
            self.qkv = torch.nn.ModuleList(torch.nn.Linear(H, n * D, bias=False)
                                           for n in (Hq, Hkv, Hkv))
            self.o = torch.nn.Linear(Hq * D, H, bias=False)
            self.mlp = torch.nn.ModuleList(torch.nn.Linear(a, b, bias=False)
                                           for a, b in ((H, I), (H, I), (I, H)))

        def forward(self, x):
            B = x.shape[0]
            n = norm(x, self.n1)
            q, k, v = (p(n).view(B, T, -1, D).transpose(1, 2) for p in self.qkv)
            r = Hq // Hkv
            a = F.scaled_dot_product_attention(rope(q), rope(k).repeat_interleave(r, 1),
                                               v.repeat_interleave(r, 1), is_causal=True)
            x = x + self.o(a.transpose(1, 2).reshape(B, T, Hq * D))
            n = norm(x, self.n2)
            return x + self.mlp[2](F.silu(self.mlp[0](n)) * self.mlp[1](n))

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(V, H)
            self.blocks = torch.nn.ModuleList(Block() for _ in range(L))
            self.norm = torch.nn.Parameter(torch.ones(H))
            self.tied = bool(cfg.get("tie_word_embeddings"))
            self.head = None if self.tied else torch.nn.Linear(H, V, bias=False)

        def forward(self, tok, tgt):
            x = self.emb(tok)
            for b in self.blocks:
                x = b(x)
            w = self.emb.weight if self.tied else self.head.weight
            logits = norm(x, self.norm) @ w.t()
            return F.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1))

    return Model()


def main():
    a = parse()
    os.environ.setdefault("OMP_NUM_THREADS", str(a.threads))
    for k, v in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29517"), ("RANK", "0"),
                 ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0")):
        os.environ.setdefault(k, v)
    try:
        import torch
        import deepspeed
        from deepspeed.ops.op_builder import AsyncIOBuilder
    except ImportError as e:
        print("unavailable: %s" % e)
        sys.exit(3)
    if not AsyncIOBuilder().is_compatible(verbose=False):
        print("unavailable: DeepSpeed's async_io op is not compatible here (it needs libaio: "
              "the libaio-dev package)")
        sys.exit(3)
    try:
        AsyncIOBuilder().load(verbose=False)
    except Exception as e:  # noqa: BLE001 - any build failure means: no nvme peer
        print("unavailable: DeepSpeed's async_io op does not build here: %s" % str(e)[:200])
        sys.exit(3)
    torch.set_num_threads(a.threads)
    cfg = json.load(open(a.model))
    deepspeed.init_distributed(dist_backend="gloo")
    model = build(cfg, a.seq, torch)
    os.makedirs(a.nvme_path, exist_ok=True)
    ds = {"train_micro_batch_size_per_gpu": 1,
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
          "zero_optimization": {"stage": 3, "sub_group_size": a.sub_group_size,
                                "offload_optimizer": {"device": "nvme",
                                                      "nvme_path": a.nvme_path,
                                                      "buffer_count": a.buffer_count}}}
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                           config=ds)
    g = torch.Generator().manual_seed(0)
    V = cfg["vocab_size"]
    for s in range(1, a.steps + 1):
        tok = torch.randint(0, V, (1, a.seq), generator=g)
        tgt = torch.randint(0, V, (1, a.seq), generator=g)
        r0, w0 = proc_io()
        t0 = time.perf_counter()
        loss = engine(tok, tgt)
        engine.backward(loss)
        engine.step()
        ms = (time.perf_counter() - t0) * 1e3
        r1, w1 = proc_io()
        print(json.dumps({"step": s, "ms": round(ms, 3), "read_bytes": r1 - r0,
                          "write_bytes": w1 - w0, "loss": float(loss)}), flush=True)
    print(json.dumps({"done": True, "deepspeed": deepspeed.__version__,
                      "torch": torch.__version__}), flush=True)


if __name__ == "__main__":
    main()
