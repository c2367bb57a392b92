#!/usr/bin/python3
"""PyTorch reference for tests/test_cpu_ops.c.

Usage: torch_ops_ref.py OP DIR [OP DIR ...]

For each pair, reads DIR/args.txt ("name value" lines) and the inputs the C
test wrote as raw little-endian files (NAME.f32, NAME.i32, NAME.u16, NAME.u32),
computes the op's forward and, with autograd, its backward from the upstream
gradient the C test wrote, in fp32 the way Hugging Face's modeling code does,
and writes the results as raw little-endian files (NAME.f32, NAME.f64,
NAME.u16, NAME.u32) into the same DIR. Several pairs per run: torch is
imported once. Prints nothing on stdout (the caller's stdout is TAP).
"""
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F


class Case:
    def __init__(self, d):
        self.dir = d
        self.args = {}
        with open(os.path.join(d, "args.txt")) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2:
                    self.args[parts[0]] = parts[1]

    def i(self, name):
        return int(self.args[name])

    def f(self, name):
        return float(self.args[name])

    def load(self, name, ext, shape=None):
        dtype = {"f32": "<f4", "i32": "<i4", "u16": "<u2", "u32": "<u4"}[ext]
        a = np.fromfile(os.path.join(self.dir, name + "." + ext), dtype=dtype)
        return a.reshape(shape) if shape is not None else a

    def t(self, name, shape, grad=False):
        x = torch.from_numpy(self.load(name, "f32", shape).copy())
        return x.requires_grad_(grad)

    def save(self, name, a):
        a = a.detach().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)
        ext, dtype = {
            np.dtype(np.float32): ("f32", "<f4"),
            np.dtype(np.float64): ("f64", "<f8"),
            np.dtype(np.uint16): ("u16", "<u2"),
            np.dtype(np.uint32): ("u32", "<u4"),
        }[a.dtype]
        np.ascontiguousarray(a, dtype=dtype).tofile(os.path.join(self.dir, name + "." + ext))


# ---- ops ---------------------------------------------------------------------


def op_embedding(c):
    N, V, C = c.i("N"), c.i("V"), c.i("C")
    tokens = torch.from_numpy(c.load("tokens", "i32").astype(np.int64))
    table = c.t("table", (V, C), grad=True)
    out = F.embedding(tokens, table)
    out.backward(c.t("dout", (N, C)))
    c.save("out", out)
    c.save("dtable", table.grad)


def hf_rmsnorm(x, w, eps):
    # LlamaRMSNorm / Qwen3RMSNorm in fp32
    variance = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(variance + eps))


def op_rmsnorm(c):
    N, C, eps = c.i("N"), c.i("C"), c.f("eps")
    x = c.t("x", (N, C), grad=True)
    w = c.t("w", (C,), grad=True)
    y = hf_rmsnorm(x, w, eps)
    y.backward(c.t("dout", (N, C)))
    c.save("out", y)
    c.save("rstd", torch.rsqrt(x.detach().pow(2).mean(-1) + eps))
    c.save("dx", x.grad)
    c.save("dw", w.grad)


def op_qknorm(c):
    # Qwen3: q_norm(q_proj(x).view(B, T, H, D)), a norm over D with weight (D)
    B, T, H, D, eps = c.i("B"), c.i("T"), c.i("H"), c.i("D"), c.f("eps")
    x = c.t("x", (B, T, H * D), grad=True)
    w = c.t("w", (D,), grad=True)
    y = hf_rmsnorm(x.view(B, T, H, D), w, eps)
    y.backward(c.t("dout", (B, T, H, D)))
    c.save("out", y)
    c.save("dx", x.grad)
    c.save("dw", w.grad)


def inv_freq_default(D, theta):
    return theta ** (-np.arange(0, D, 2, dtype=np.float64) / D)


def inv_freq_llama3(D, theta, factor, low, high, orig):
    # transformers' _compute_llama3_parameters, in float64
    inv = inv_freq_default(D, theta)
    low_wavelen, high_wavelen = orig / low, orig / high
    wavelen = 2 * math.pi / inv
    inv_l = np.where(wavelen > low_wavelen, inv / factor, inv)
    smooth = (orig / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * inv_l / factor + smooth * inv_l
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, inv_l)


def tables(T, inv):
    ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]  # (T, D/2)
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


def op_rope_table(c):
    T, D, theta = c.i("T"), c.i("D"), c.f("theta")
    if c.i("llama3"):
        inv = inv_freq_llama3(D, theta, c.f("factor"), c.f("low"), c.f("high"), c.f("orig"))
    else:
        inv = inv_freq_default(D, theta)
    cos, sin = tables(T, inv)
    c.save("cos", cos)
    c.save("sin", sin)


def op_rope_table_yarn(c):
    # transformers' _compute_yarn_parameters, restated: a ramp between the
    # interpolated (/ factor) and extrapolated frequencies over the dimensions
    # that turn beta_fast .. beta_slow times over the original context, and
    # cos, sin times the attention factor 0.1 ln(factor) + 1
    T, D, theta, factor = c.i("T"), c.i("D"), c.f("theta"), c.f("factor")
    orig, truncate = c.f("orig"), c.i("truncate")
    def corr_dim(rot):
        return D * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(theta))
    low, high = corr_dim(32.0), corr_dim(1.0)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, D - 1)
    if low == high:
        high += 0.001
    extra = inv_freq_default(D, theta)
    ramp = np.clip((np.arange(D // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    inv = extra / factor * ramp + extra * (1 - ramp)
    att = 0.1 * math.log(factor) + 1.0
    ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]
    c.save("cos", (np.cos(ang) * att).astype(np.float32))
    c.save("sin", (np.sin(ang) * att).astype(np.float32))


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def op_rope(c):
    B, T, Hq, Hkv, D = c.i("B"), c.i("T"), c.i("Hq"), c.i("Hkv"), c.i("D")
    cos, sin = tables(T, inv_freq_default(D, c.f("theta")))
    cos = torch.from_numpy(np.concatenate([cos, cos], -1))  # (T, D) as HF builds it
    sin = torch.from_numpy(np.concatenate([sin, sin], -1))
    q = c.t("q", (B, T, Hq, D), grad=True)
    k = c.t("k", (B, T, Hkv, D), grad=True)
    # HF's apply_rotary_pos_emb on (B, H, T, D) with cos, sin unsqueezed at dim 1
    qh, kh = q.transpose(1, 2), k.transpose(1, 2)
    cu, su = cos[None, None], sin[None, None]
    q_out = (qh * cu + rotate_half(qh) * su).transpose(1, 2)
    k_out = (kh * cu + rotate_half(kh) * su).transpose(1, 2)
    grads = [c.t("dq_out", (B, T, Hq, D)), c.t("dk_out", (B, T, Hkv, D))]
    torch.autograd.backward([q_out, k_out], grads)
    c.save("q_out", q_out)
    c.save("k_out", k_out)
    c.save("dq", q.grad)
    c.save("dk", k.grad)


def op_attention(c):
    B, T, Hq, Hkv, D, W = c.i("B"), c.i("T"), c.i("Hq"), c.i("Hkv"), c.i("D"), c.i("W")
    q = c.t("q", (B, T, Hq, D), grad=True)
    k = c.t("k", (B, T, Hkv, D), grad=True)
    v = c.t("v", (B, T, Hkv, D), grad=True)
    # eager attention as in transformers' Llama/Qwen3: (B, H, T, D), repeat_kv
    rep = Hq // Hkv
    qh = q.transpose(1, 2)
    kh = k.transpose(1, 2).repeat_interleave(rep, dim=1)
    vh = v.transpose(1, 2).repeat_interleave(rep, dim=1)
    scores = torch.matmul(qh, kh.transpose(2, 3)) * (D ** -0.5)  # (B, Hq, T, T)
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    visible = j <= i
    if W > 0:
        visible &= j > i - W
    scores = scores.masked_fill(~visible, float("-inf"))
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32)
    out = torch.matmul(probs, vh).transpose(1, 2)  # (B, T, Hq, D)
    out.backward(c.t("dout", (B, T, Hq, D)))
    c.save("out", out)
    c.save("lse", torch.logsumexp(scores.detach(), dim=-1))  # (B, Hq, T)
    c.save("dq", q.grad)
    c.save("dk", k.grad)
    c.save("dv", v.grad)


def op_swiglu(c):
    N, n_ff = c.i("N"), c.i("F")
    gate = c.t("gate", (N, n_ff), grad=True)
    up = c.t("up", (N, n_ff), grad=True)
    h = F.silu(gate) * up
    h.backward(c.t("dh", (N, n_ff)))
    c.save("h", h)
    c.save("dgate", gate.grad)
    c.save("dup", up.grad)


def op_linear(c):
    N, n_in, n_out = c.i("N"), c.i("in"), c.i("out")
    x = c.t("x", (N, n_in), grad=True)
    W = c.t("W", (n_out, n_in), grad=True)
    b = c.t("b", (n_out,), grad=True) if c.i("bias") else None
    y = F.linear(x, W, b)
    y.backward(c.t("dy", (N, n_out)))
    c.save("y", y)
    c.save("dx", x.grad)
    c.save("dW", W.grad)
    if b is not None:
        c.save("db", b.grad)


def op_cross_entropy(c):
    N, V, dloss = c.i("N"), c.i("V"), c.f("dloss")
    logits = c.t("logits", (N, V), grad=True)
    targets = c.load("targets", "i32").astype(np.int64)
    targets[targets < 0] = -1
    loss = F.cross_entropy(logits, torch.from_numpy(targets), ignore_index=-1)
    loss.backward(torch.tensor(dloss, dtype=torch.float32))
    c.save("loss", np.array([loss.item(), float((targets >= 0).sum())], dtype=np.float64))
    c.save("lse", torch.logsumexp(logits.detach(), dim=-1))
    c.save("dlogits", logits.grad)


def op_cast(c):
    all16 = c.load("all16", "u16")  # every 16-bit pattern
    x32 = c.load("x32", "u32")  # fp32 bit patterns
    # bfloat16: torch's conversions
    bf = torch.from_numpy(all16.astype(np.int16)).view(torch.bfloat16)
    c.save("bf16_to_f32", bf.float().numpy().view(np.uint32))
    f = torch.from_numpy(x32.view(np.float32).copy())
    c.save("f32_to_bf16", f.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16))
    # binary16: numpy's conversions
    c.save("f16_to_f32", all16.view(np.float16).astype(np.float32).view(np.uint32))
    with np.errstate(all="ignore"):
        c.save("f32_to_f16", x32.view(np.float32).astype(np.float16).view(np.uint16))


def op_grad_norm(c):
    x = c.load("x", "f32").astype(np.float64)
    c.save("sumsq", np.array([np.sum(x * x)], dtype=np.float64))


OPS = {name[3:]: fn for name, fn in globals().items() if name.startswith("op_")}


def main(argv):
    if len(argv) < 3 or len(argv) % 2 == 0:
        sys.stderr.write("usage: torch_ops_ref.py OP DIR [OP DIR ...]\n")
        return 2
    torch.manual_seed(0)
    for op, d in zip(argv[1::2], argv[2::2]):
        if op not in OPS:
            known = " ".join(sorted(OPS))
            sys.stderr.write("torch_ops_ref.py: unknown op %r (known: %s)\n" % (op, known))
            return 2
        OPS[op](Case(d))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
