#!/usr/bin/env python3
"""torch_cuda_ops_ref.py - the GPU kernels of codelets/cuda/cuda_ops.h against
PyTorch, from the files tools/cuda_ops_dump wrote.

Usage: torch_cuda_ops_ref.py DIR|MANIFEST [...] [--device cuda|cpu]
                             [--ref auto|torch|fp32] [--markdown FILE] [--verbose]

DIR is what `cuda_ops_dump DIR --dtype D` was given (every DIR/*/manifest.json
is read, f32 first) or one DTYPE directory or manifest.json. For every case
the inputs are loaded as tensors of the dtype the kernel stored them in
("storage" in the manifest: a bf16 input becomes a bf16 tensor, exactly),
the op is recomputed with PyTorch on --device, and every output the kernel
wrote is compared. One line per output:

  DTYPE OP CASE OUTPUT  max_abs=... max_rel=... tol=... PASS|FAIL  [how torch computed it]

max_abs = max |kernel - torch| and max_rel = max_abs / max |torch| (relative to
the largest reference value, not element-wise: element-wise relative errors
of values that cancel to ~0 mean nothing). Non-finite values must match (NaN
where torch has NaN, the same infinity). Then "N passed, M failed". Exit
status 0 iff all pass; 1 if one fails; 2 bad usage, unreadable input, or no
CUDA device for --device cuda.

How PyTorch computes each op (--ref torch, the default on cuda: "what a
PyTorch user gets", in the storage dtype, with autograd for the backward):
  cast           x.to(dtype): torch's round-to-nearest-even conversion
  add_into       acc.add_(x)
  embedding      F.embedding; dtable.grad preset to dtable0, autograd adds
  rmsnorm        F.rms_norm (torch >= 2.4; else Hugging Face's LlamaRMSNorm:
                 fp32 normalisation, cast, times w); rstd in fp32, cast
  rope           Hugging Face's apply_rotary_pos_emb with rotate_half, cos and
                 sin cast to the dtype as LlamaRotaryEmbedding returns them
  swiglu         F.silu(gate) * up
  linear         F.linear(x, W, b); W.grad, b.grad preset to dW0, db0
  attention      F.scaled_dot_product_attention(is_causal=True), or with an
                 explicit boolean mask for a sliding window (key j visible to
                 query i iff i - window < j <= i), enable_gqa=True (torch >=
                 2.5; else k, v repeat_interleave'd; torch < 2.0: Hugging
                 Face's eager attention, fp32 softmax); lse (not returned by
                 SDPA) as logsumexp of the fp32 masked scores, cast
  cross_entropy  F.cross_entropy(logits.float(), targets, ignore_index=-1)
                 as Hugging Face's loss does (upcast logits), backward with
                 dloss; dlogits comes back in the dtype through .float()
  grad_norm      torch.nn.utils.clip_grad_norm_(max_norm=inf) over the three
                 buffers (per-tensor norms in the dtype, then their norm),
                 divided by the loss scale
  moe            Qwen3MoeSparseMoeBlock written from modeling_qwen3_moe.py in
                 fp32 (softmax, topk, norm_topk_prob, index_add of the
                 weighted experts) and load_balancing_loss_func; autograd of
                 sum(y * dy) + coef * aux
  moe_oss        GptOssTopKRouter + GptOssExperts from modeling_gpt_oss.py in
                 fp32 (bias, topk of the logits, softmax over them,
                 interleaved gate/up, clamps, (up + 1) * gate *
                 sigmoid(1.702 gate)); fails if a clamp cuts nothing
  attention_sinks GPT-OSS eager attention: the sink logit as an extra softmax
                 column, dropped before P V; fails if dsinks is all zero
  adam           torch.optim.AdamW / Adam (foreach=False) from the dumped
                 state (exp_avg, exp_avg_sq, step t-1), with the gradient
                 g.float() * (1 / loss_scale) then clip_grad_norm_(clip), as
                 GradScaler.unscale_ and gradient clipping do
  adagrad        torch.optim.Adagrad (foreach=False) from the dumped state
                 (sum, step t-1): lr_decay, weight_decay, eps
  lion           torch has no Lion: the update of Chen et al. 2023 written
                 with torch ops (c = b1*m + (1-b1)*g, p *= 1 - lr*wd,
                 p -= lr*sign(c), m = b2*m + (1-b2)*g), from the dumped m,
                 with the gradient unscaled and clipped as for adam
--ref fp32 (the default on cpu, where torch 1.13 lacks F.rms_norm, SDPA and
some bf16 kernels) computes the same formulas in fp32 from the same inputs
and rounds each result once to the storage dtype (the norm in float64);
Adam and cross-entropy are the same in both modes.
TF32 is off (torch.backends.cuda.matmul.allow_tf32 = False, matmul precision
"highest"): the kernels' fp32 GEMMs are fp32 (CUBLAS_COMPUTE_32F).

Tolerances, on max_rel (max |kernel - torch| / max |torch|). A rounding to
bf16 (8 significant bits, unit roundoff u = 2^-8) of a value no larger than
M = max |torch| moves it by at most half an ulp of M's binade, <= 2^-8 M;
each side's roundings add up:
  f32   1e-5 for element-wise ops, norms, cross-entropy, grad norm and Adam
        (fp32 math on both sides; only the order of the operations and the
        last ulp of expf differ); 1e-4 for the GEMMs (linear) and attention
        (sums of 64-384 products in another order and blocking; TF32 off).
  bf16  2^-7 (7.8e-3) = two roundings, one on each side: add_into, rstd, the
        lse outputs, linear y without bias and dx (cuBLAS accumulates in fp32
        on both sides and rounds once);
        2^-6 (1.6e-2) = four roundings, for everything where one side rounds
        more than once or reads bf16 intermediates: rmsnorm out (torch rounds
        x*rstd, then times w), swiglu h (silu rounded, then times up), rope
        (HF rounds cos, sin, both products and the sum), linear y with bias
        (the kernel rounds the GEMM output, then adds b) and dW, db (torch
        rounds the gradient, then W.grad += it), the gradients of rmsnorm and
        swiglu (bf16 intermediates in autograd; the kernel reads its bf16
        rstd), embedding dtable (bf16 atomics: one rounding per repeated
        id), attention out and gradients (flash kernels round P to bf16 before
        P V; the kernel's backward reads its bf16 out and lse), cross-entropy
        dlogits (the kernel reads its bf16 lse), grad_norm with --ref torch
        (torch rounds each norm to bf16).
  both  cross-entropy loss, Adam p, m, v and the norm Adam uses are fp32
        computations from the same stored values: 1e-5 in both runs. Adam
        also checks the update p - p0 on its own (max |update| ~ 1e-3, so the
        f32 rounding of p, ~2^-22 for |p| < 4, is ~2e-4 of it): 1e-3. Exact
        (0): casts (bit for bit, NaN for NaN), the embedding lookup,
        1/loss_scale and the non-finite flag.
Extra lines OUTPUT|saved (attention dq, dk, dv; cross-entropy dlogits) compare
the kernel's backward with the same formula in float64 on the kernel's own
saved out and lse (as stored, in the dtype), rounded once: 2^-7 in bf16, the
f32 tolerances in f32. They separate a wrong backward (fails there too) from
the precision the bf16 lse costs: a bf16 lse L is off by up to half an ulp,
2^-9 to 2^-8 of |L| (0.031 for 8 <= L < 16), so every P = exp(S - lse) of its
row is off by up to that much relative. With L ~ 9 (V = 1000) or up to 6 (T =
128) that alone is 4e-3 to 1.7e-2 of max |torch| here, and it grows with log V
and log T. A FAIL of dlogits, dq, dk or dv whose |saved line passes is that
(the kernels store lse in the dtype, cuda_ops.h), not a wrong backward.
"""
import argparse
import glob
import json
import os
import sys

import numpy as np

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover
    sys.stderr.write("torch_cuda_ops_ref: torch is not installed for %s\n" % sys.executable)
    sys.exit(2)

DT = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}

F32 = 1e-5
F32_GEMM = 1e-4
BF16_1 = 2.0 ** -7
BF16_2 = 2.0 ** -6
EXACT = 0.0

# (op, output) -> (tolerance in the f32 run, in the bf16 run)
TOLS = {
    ("cast", "y"): (EXACT, EXACT),
    ("add_into", "acc"): (F32, BF16_1),
    ("embedding", "out"): (EXACT, EXACT),
    ("embedding", "dtable"): (F32, BF16_2),
    ("rmsnorm", "out"): (F32, BF16_2),
    ("rmsnorm", "rstd"): (F32, BF16_1),
    ("rmsnorm", "dx"): (F32, BF16_2),
    ("rmsnorm", "dw"): (F32, BF16_2),
    ("rope", "out"): (F32, BF16_2),
    ("rope", "dx"): (F32, BF16_2),
    ("swiglu", "h"): (F32, BF16_2),
    ("swiglu", "dgate"): (F32, BF16_2),
    ("swiglu", "dup"): (F32, BF16_2),
    ("linear", "y"): (F32_GEMM, BF16_1),  # BF16_2 with a bias (see tolerance())
    ("linear", "dx"): (F32_GEMM, BF16_1),
    ("linear", "dW"): (F32_GEMM, BF16_2),
    ("linear", "db"): (F32_GEMM, BF16_2),
    ("attention", "out"): (F32_GEMM, BF16_2),
    ("attention", "lse"): (F32_GEMM, BF16_1),
    ("attention", "dq"): (F32_GEMM, BF16_2),
    ("attention", "dk"): (F32_GEMM, BF16_2),
    ("attention", "dv"): (F32_GEMM, BF16_2),
    ("attention", "dq|saved"): (F32_GEMM, BF16_1),
    ("attention", "dk|saved"): (F32_GEMM, BF16_1),
    ("attention", "dv|saved"): (F32_GEMM, BF16_1),
    ("cross_entropy", "loss"): (F32, F32),
    ("cross_entropy", "lse"): (F32, BF16_1),
    ("cross_entropy", "dlogits"): (F32, BF16_2),
    ("cross_entropy", "dlogits|saved"): (F32, BF16_1),
    ("grad_norm", "sumsq"): (F32, BF16_2),  # F32 in both runs with --ref fp32
    ("grad_norm", "norm"): (F32, BF16_2),
    ("grad_norm", "inv_scale"): (EXACT, EXACT),
    ("grad_norm", "nonfinite"): (EXACT, EXACT),
    ("adam", "norm"): (F32, F32),
    ("adam", "p"): (F32, F32),
    ("adam", "m"): (F32, F32),
    ("adam", "v"): (F32, F32),
    ("adam", "update"): (1e-3, 1e-3),
    ("adagrad", "p"): (F32, F32),
    ("adagrad", "v"): (F32, F32),
    ("lion", "norm"): (F32, F32),
    ("lion", "p"): (F32, F32),
    ("lion", "m"): (F32, F32),
}
# mixture of experts and attention sinks: 1e-5 for every output and gradient
# in f32, the picks exactly. Qwen3-MoE also in bf16 (2^-6: every GEMM output,
# the logits and the activations are rounded to bf16 on the kernel's side);
# GPT-OSS and the sinks are dumped in the f32 run only (in bf16 a value within
# an ulp of the clamp limit flips between cut and not, a near-tie of logits
# can flip a pick, and dsinks reads the bf16 lse: see the |saved lines above)
for _op, _outs in (("moe", ("logits", "probs", "topw", "aux", "y", "dlogits", "dx", "dWr",
                            "dWg", "dWu", "dWd")),
                   ("moe_oss", ("logits", "probs", "topw", "aux", "y", "dlogits", "dx", "dWr",
                                "dbr", "dgate_up", "dgate_up_bias", "ddown", "ddown_bias")),
                   ("attention_sinks", ("out", "lse", "dq", "dk", "dv", "dsinks"))):
    for _o in _outs:
        TOLS[(_op, _o)] = (F32, BF16_2 if _op == "moe" else None)
TOLS[("moe", "sel")] = (EXACT, EXACT)
TOLS[("moe_oss", "sel")] = (EXACT, None)


def tolerance(op, out, dtype, mode, params):
    if (op, out) not in TOLS:
        return None
    f32, bf16 = TOLS[(op, out)]
    if op == "grad_norm" and mode == "fp32" and out in ("sumsq", "norm"):
        return F32  # float64 sums of the same values on both sides
    if op == "linear" and out == "y" and int(params.get("bias", 0)):
        bf16 = BF16_2  # the kernel rounds x W^T, then x W^T + b
    return f32 if dtype == "f32" else bf16


# ---- a case --------------------------------------------------------------------------


class Case:
    def __init__(self, root, d, dev, mode):
        self.root, self.d, self.dev, self.mode = root, d, dev, mode
        self.op, self.name, self.dtype = d["op"], d["case"], d["dtype"]
        self.p = d.get("params", {})

    def arr(self, name, which="inputs"):
        e = self.d[which][name]
        path = os.path.join(self.root, e["file"])
        ext = path.rsplit(".", 1)[-1]
        dtype = {"f32": "<f4", "i32": "<i4"}[ext]
        a = np.fromfile(path, dtype=dtype)
        n = int(np.prod(e["shape"])) if e["shape"] else 1
        if a.size != n:
            raise ValueError("%s: %d values, the manifest says %s" % (path, a.size, e["shape"]))
        return a.reshape(e["shape"])

    def storage(self, name, which="inputs"):
        return self.d[which][name]["storage"]

    def t(self, name, grad=False, dtype=None):
        """Input `name` on the device, in its storage dtype (--ref torch) or in
        fp32 (--ref fp32), or in `dtype`; a leaf that requires grad if asked."""
        a = self.arr(name)
        s = self.storage(name)
        if s == "i32":
            return torch.from_numpy(a.astype(np.int64)).to(self.dev)
        x = torch.from_numpy(a.copy()).to(self.dev)
        if s in ("bf16", "f16"):  # the plumbing check: the values must be exact in s
            back = x.to(DT[s]).float()
            same = (back == x) | (torch.isnan(back) & torch.isnan(x))
            if not bool(same.all()):
                raise ValueError("%s/%s: input %s holds values that %s cannot"
                                 % (self.op, self.name, name, s))
        want = dtype or (DT[s] if self.mode == "torch" else torch.float32)
        x = x.to(want)
        return x.requires_grad_(True) if grad else x

    def rd(self, x, out):
        """x rounded once to the storage dtype of output `out` (as a tensor of that
        dtype: the comparison widens it)."""
        s = self.storage(out, "outputs")
        return x.detach().to(DT[s]) if s in DT else x.detach()

    @property
    def sdt(self):  # storage dtype of the case's tensors
        return DT[self.dtype]


# ---- ops -----------------------------------------------------------------------------


def op_cast(c):
    x = c.t("x", dtype=DT[c.p["from"]])
    return {"y": x.to(DT[c.p["to"]])}, "x.to(%s)" % c.p["to"]


def op_add_into(c):
    acc, x = c.t("acc0"), c.t("x")
    if c.mode == "torch":
        acc = acc.clone()
        acc.add_(x)
        return {"acc": acc}, "acc.add_(x)"
    return {"acc": c.rd(acc + x, "acc")}, "fp32 acc + x"


def op_embedding(c):
    tok = c.t("tokens")
    table = c.t("table", grad=True)
    table.grad = c.t("dtable0")
    out = F.embedding(tok, table)
    out.backward(c.t("dout"))
    if c.mode == "torch":
        return {"out": out, "dtable": table.grad}, "F.embedding, grad += (autograd)"
    return {"out": c.rd(out, "out"), "dtable": c.rd(table.grad, "dtable")}, "fp32 F.embedding"


def hf_rmsnorm(x, w, eps):
    # LlamaRMSNorm: normalise in fp32, back to the input dtype, times the weight
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return w * xf.to(x.dtype)


def op_rmsnorm(c):
    C, eps = int(c.p["C"]), float(c.p["eps"])
    x, w = c.t("x", grad=True), c.t("w", grad=True)
    w.grad = c.t("dw0")
    if c.mode == "torch" and hasattr(F, "rms_norm"):
        y, impl = F.rms_norm(x, (C,), w, eps), "F.rms_norm"
    else:
        y, impl = hf_rmsnorm(x, w, eps), "HF LlamaRMSNorm"
        if c.mode == "fp32":
            impl = "fp32 HF formula"
    y.backward(c.t("dout"))
    rstd = torch.rsqrt(x.detach().float().pow(2).mean(-1) + eps)
    res = {"out": y, "rstd": rstd, "dx": x.grad, "dw": w.grad}
    return {k: c.rd(v, k) for k, v in res.items()}, impl


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def op_rope(c):
    x = c.t("x", grad=True)  # (B, T, H, D)
    cos = c.t("cos", dtype=torch.float32)  # (T, D/2)
    sin = c.t("sin", dtype=torch.float32)
    # as LlamaRotaryEmbedding: (T, D) = cat(freqs, freqs), cast to the input dtype
    cos = torch.cat((cos, cos), -1).to(x.dtype)[None, :, None, :]
    sin = torch.cat((sin, sin), -1).to(x.dtype)[None, :, None, :]
    out = x * cos + rotate_half(x) * sin
    out.backward(c.t("dout"))
    impl = "HF apply_rotary_pos_emb" if c.mode == "torch" else "fp32 HF formula"
    return {"out": c.rd(out, "out"), "dx": c.rd(x.grad, "dx")}, impl


def op_swiglu(c):
    gate, up = c.t("gate", grad=True), c.t("up", grad=True)
    h = F.silu(gate) * up
    h.backward(c.t("dh"))
    impl = "F.silu(gate) * up" if c.mode == "torch" else "fp32 F.silu(gate) * up"
    return {"h": c.rd(h, "h"), "dgate": c.rd(gate.grad, "dgate"),
            "dup": c.rd(up.grad, "dup")}, impl


def op_linear(c):
    x, W = c.t("x", grad=True), c.t("W", grad=True)
    W.grad = c.t("dW0")
    b = None
    if int(c.p["bias"]):
        b = c.t("b", grad=True)
        b.grad = c.t("db0")
    y = F.linear(x, W, b)
    y.backward(c.t("dy"))
    res = {"y": y, "dx": x.grad, "dW": W.grad}
    if b is not None:
        res["db"] = b.grad
    impl = "F.linear, grad += (autograd)" if c.mode == "torch" else "fp32 F.linear"
    return {k: c.rd(v, k) for k, v in res.items()}, impl


def window_mask(T, W, dev):
    i = torch.arange(T, device=dev)[:, None]
    j = torch.arange(T, device=dev)[None, :]
    vis = j <= i
    if W > 0:
        vis = vis & (j > i - W)
    return vis  # (T, T), True: attend


def eager_attention(qh, kh, vh, vis, rep):
    # transformers' eager_attention_forward: repeat_kv, fp32 softmax, cast back
    kh = kh.repeat_interleave(rep, dim=1)
    vh = vh.repeat_interleave(rep, dim=1)
    D = qh.shape[-1]
    s = torch.matmul(qh, kh.transpose(2, 3)) * (D ** -0.5)
    s = s.masked_fill(~vis, float("-inf"))
    p = torch.softmax(s, dim=-1, dtype=torch.float32).to(qh.dtype)
    return torch.matmul(p, vh)


def op_attention(c):
    T, Hq, Hkv, D, W = (int(c.p[k]) for k in ("T", "Hq", "Hkv", "D", "window"))
    W = 0 if W >= T else W
    rep = Hq // Hkv
    q, k, v = c.t("q", grad=True), c.t("k", grad=True), c.t("v", grad=True)
    qh, kh, vh = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, H, T, D)
    vis = window_mask(T, W, q.device)
    sdpa = getattr(F, "scaled_dot_product_attention", None)
    if c.mode == "torch" and sdpa is not None:
        kw = {"is_causal": True} if W == 0 else {"attn_mask": vis}
        what = "is_causal" if W == 0 else "window mask"
        o = None
        if rep > 1:
            try:
                o = sdpa(qh, kh, vh, enable_gqa=True, **kw)
                impl = "SDPA(%s, enable_gqa)" % what
            except (TypeError, RuntimeError):
                o = None
        if o is None:
            ke, ve = kh.repeat_interleave(rep, dim=1), vh.repeat_interleave(rep, dim=1)
            o = sdpa(qh, ke, ve, **kw)
            impl = "SDPA(%s, repeat_interleave)" % what
    else:
        o = eager_attention(qh, kh, vh, vis, rep)
        impl = "HF eager attention" if c.mode == "torch" else "fp32 eager attention"
    out = o.transpose(1, 2)
    out.backward(c.t("dout"))
    with torch.no_grad():  # lse (B, Hq, T) in fp32
        qf, kf = qh.float(), kh.float().repeat_interleave(rep, dim=1)
        s = torch.matmul(qf, kf.transpose(2, 3)) * (D ** -0.5)
        lse = torch.logsumexp(s.masked_fill(~vis, float("-inf")), dim=-1)
    res = {"out": out, "lse": lse, "dq": q.grad, "dk": k.grad, "dv": v.grad}
    res = {kk: c.rd(vv, kk) for kk, vv in res.items()}
    res.update(attention_backward_saved(c, rep, vis))
    return res, impl + "; lse fp32"


def attention_backward_saved(c, rep, vis):
    """dq, dk, dv by FlashAttention-2's backward formulas in float64 from the
    inputs and the kernel's own saved out, lse (B, Hq, T), rounded to the
    dtype: what the kernel should give if nothing but its storage rounds."""
    D = int(c.p["D"])
    f64 = torch.float64
    q, k, v, do = (c.t(n, dtype=f64).transpose(1, 2) for n in ("q", "k", "v", "dout"))
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    out = torch.from_numpy(c.arr("out", "outputs")).to(c.dev, f64).transpose(1, 2)
    lse = torch.from_numpy(c.arr("lse", "outputs")).to(c.dev, f64)  # (B, Hq, T)
    s = torch.matmul(q, k.transpose(2, 3)) * D ** -0.5
    p = torch.exp(s - lse[..., None]).masked_fill(~vis, 0.0)
    dp = torch.matmul(do, v.transpose(2, 3))
    ds = p * (dp - (do * out).sum(-1, keepdim=True))
    dq = torch.matmul(ds, k) * D ** -0.5
    dk = torch.matmul(ds.transpose(2, 3), q) * D ** -0.5
    dv = torch.matmul(p.transpose(2, 3), do)
    B, Hq, T, _ = q.shape
    dk = dk.view(B, Hq // rep, rep, T, D).sum(2)
    dv = dv.view(B, Hq // rep, rep, T, D).sum(2)
    res = {"dq": dq.transpose(1, 2), "dk": dk.transpose(1, 2), "dv": dv.transpose(1, 2)}
    return {kk + "|saved": c.rd(vv, kk) for kk, vv in res.items()}


def op_cross_entropy(c):
    logits = c.t("logits", grad=True)
    tg = c.t("targets").clone()
    tg[tg < 0] = -1
    lf = logits.float()
    loss = F.cross_entropy(lf, tg, ignore_index=-1)
    loss.backward(torch.tensor(float(c.p["dloss"]), device=lf.device))
    lse = torch.logsumexp(lf.detach(), dim=-1)
    impl = ("F.cross_entropy(logits.float(), ignore_index=-1)" if c.mode == "torch"
            else "fp32 F.cross_entropy")
    # the kernel's backward formula in float64 on its own saved lse
    lg = c.t("logits", dtype=torch.float64)
    lse_k = torch.from_numpy(c.arr("lse", "outputs")).to(c.dev, torch.float64)
    ok = tg >= 0
    g = float(c.p["dloss"]) / max(int(ok.sum()), 1)
    d = torch.exp(lg - lse_k[:, None]) * g
    rows = torch.arange(lg.shape[0], device=lg.device)[ok]
    d[rows, tg[ok]] -= g
    d[~ok] = 0.0
    return {"loss": loss.detach().reshape(1), "lse": c.rd(lse, "lse"),
            "dlogits": c.rd(logits.grad, "dlogits"),
            "dlogits|saved": c.rd(d, "dlogits")}, impl


def op_grad_norm(c):
    ls = float(c.p["loss_scale"])
    gs = [c.t("g%d" % i) for i in range(3)]
    nonfinite = torch.tensor([int(any(bool((~torch.isfinite(g)).any()) for g in gs))],
                             dtype=torch.int32)
    inv = torch.tensor([1.0 / ls], dtype=torch.float32)
    if c.mode == "torch":
        params = []
        for g in gs:
            p = torch.zeros_like(g, requires_grad=True)
            p.grad = g.clone()
            params.append(p)
        total = torch.nn.utils.clip_grad_norm_(params, max_norm=float("inf"))
        sumsq = total.double() ** 2
        norm = total.double() / ls
        impl = "clip_grad_norm_ in %s / loss_scale" % c.dtype
    else:
        sumsq = sum((g.double() ** 2).sum() for g in gs)
        norm = torch.sqrt(sumsq) / ls
        impl = "float64 sum of squares"
        if bool(nonfinite[0]):
            norm = torch.tensor(float("inf"), dtype=torch.float64)
    return {"sumsq": sumsq.reshape(1), "norm": norm.reshape(1), "inv_scale": inv,
            "nonfinite": nonfinite}, impl


def op_adam(c):
    p = c.p
    t, ls, clip = int(p["t"]), float(p["loss_scale"]), float(p["clip"])
    param = torch.nn.Parameter(c.t("p0", dtype=torch.float32).clone())
    cls = torch.optim.AdamW if int(p["adamw"]) else torch.optim.Adam
    opt = cls([param], lr=float(p["lr"]), betas=(float(p["beta1"]), float(p["beta2"])),
              eps=float(p["eps"]), weight_decay=float(p["weight_decay"]), foreach=False)
    if not int(p["bias_correction"]):
        raise ValueError("torch has no Adam without bias correction")
    if t > 1:  # the state after t - 1 steps
        opt.state[param] = {"step": torch.tensor(float(t - 1)),
                            "exp_avg": c.t("m0", dtype=torch.float32).clone(),
                            "exp_avg_sq": c.t("v0", dtype=torch.float32).clone()}
    else:
        m0, v0 = c.arr("m0"), c.arr("v0")
        if m0.any() or v0.any():
            raise ValueError("adam t=1 with a non-zero state")
    g = c.t("g", dtype=torch.float32)  # the stored gradient (fp32 master gradient)
    res = {}
    if int(p["use_norm"]):
        g = g * torch.tensor(1.0 / ls, dtype=torch.float32, device=g.device)  # unscale_
        param.grad = g
        total = torch.nn.utils.clip_grad_norm_([param], max_norm=clip)  # in place
        res["norm"] = torch.stack([total.detach().float().reshape(()),
                                   torch.tensor(1.0 / ls, device=g.device)])
        impl = "%s(foreach=False) after unscale_ and clip_grad_norm_(%g)" % (cls.__name__, clip)
    else:
        param.grad = g
        impl = "%s(foreach=False)" % cls.__name__
    opt.step()
    st = opt.state[param]
    res.update({"p": param.detach(), "m": st["exp_avg"], "v": st["exp_avg_sq"]})
    res["update"] = param.detach().double() - c.t("p0", dtype=torch.float64)
    return res, impl


def unscaled_clipped_grad(c, param):
    """param.grad = the dumped gradient, unscaled and clipped as op_adam does;
    returns the norm output and a description."""
    p = c.p
    ls, clip = float(p["loss_scale"]), float(p["clip"])
    g = c.t("g", dtype=torch.float32)
    if not int(p["use_norm"]):
        param.grad = g
        return None, ""
    param.grad = g * torch.tensor(1.0 / ls, dtype=torch.float32, device=g.device)
    total = torch.nn.utils.clip_grad_norm_([param], max_norm=clip)
    norm = torch.stack([total.detach().float().reshape(()),
                        torch.tensor(1.0 / ls, device=g.device)])
    return norm, " after unscale_ and clip_grad_norm_(%g)" % clip


def op_adagrad(c):
    p = c.p
    t = int(p["t"])
    param = torch.nn.Parameter(c.t("p0", dtype=torch.float32).clone())
    opt = torch.optim.Adagrad([param], lr=float(p["lr"]), lr_decay=float(p["lr_decay"]),
                              weight_decay=float(p["weight_decay"]), eps=float(p["eps"]),
                              foreach=False)
    opt.state[param] = {"step": torch.tensor(float(t - 1)),
                        "sum": c.t("v0", dtype=torch.float32).clone()}
    norm, how = unscaled_clipped_grad(c, param)
    opt.step()
    res = {"p": param.detach(), "v": opt.state[param]["sum"]}
    if norm is not None:
        res["norm"] = norm
    return res, "Adagrad(foreach=False)" + how


def op_lion(c):
    p = c.p
    lr, wd = float(p["lr"]), float(p["weight_decay"])
    b1, b2 = float(p["beta1"]), float(p["beta2"])
    param = torch.nn.Parameter(c.t("p0", dtype=torch.float32).clone())
    m = c.t("m0", dtype=torch.float32).clone()
    norm, how = unscaled_clipped_grad(c, param)
    g = param.grad
    with torch.no_grad():
        d = m.mul(b1).add_(g, alpha=1 - b1)
        param.mul_(1 - lr * wd).add_(torch.sign(d), alpha=-lr)
        m.mul_(b2).add_(g, alpha=1 - b2)
    res = {"p": param.detach(), "m": m}
    if norm is not None:
        res["norm"] = norm
    return res, "Lion written with torch ops" + how


def got_adam_update(c):
    return c.arr("p", "outputs").astype(np.float64) - c.arr("p0").astype(np.float64)



# ---- mixture of experts and attention sinks (fp32; written from Hugging Face's
# modeling_qwen3_moe.py and modeling_gpt_oss.py, not from the kernels) ----------


def load_balancing_loss(probs, sel, E):
    """transformers' load_balancing_loss_func for one layer, no attention mask:
    E * sum over (k, e) of mean(one_hot(sel)) * mean(probs)."""
    expert_mask = F.one_hot(sel, E).float()            # (N, K, E)
    tokens_per_expert = expert_mask.mean(dim=0)        # (K, E)
    router_prob_per_expert = probs.mean(dim=0)         # (E)
    return (tokens_per_expert * router_prob_per_expert.unsqueeze(0)).sum() * E


def moe_layer(c, oss):
    N, H, F_, E, K = (int(c.p[k]) for k in ("N", "H", "F", "E", "K"))
    f32 = torch.float32
    x = c.t("x", grad=True, dtype=f32)
    h, dy = c.t("h", dtype=f32), c.t("dy", dtype=f32)
    Wr = c.t("Wr", grad=True, dtype=f32)
    params = {"Wr": Wr}
    if oss:  # GptOssTopKRouter: linear with bias, top-k of the logits, softmax over them
        br = c.t("br", grad=True, dtype=f32)
        params["br"] = br
        logits = F.linear(x, Wr, br)
        top_v, sel = torch.topk(logits, K, dim=-1)
        topw = torch.softmax(top_v, dim=1, dtype=f32)
        probs = torch.softmax(logits, dim=-1, dtype=f32)
        for n in ("gate_up", "gate_up_bias", "down", "down_bias"):
            params[n] = c.t(n, grad=True, dtype=f32)
    else:    # Qwen3MoeSparseMoeBlock: softmax, top-k, optional renormalisation
        logits = F.linear(x, Wr)
        probs = torch.softmax(logits, dim=1, dtype=f32)
        topw, sel = torch.topk(probs, K, dim=-1)
        if int(c.p["norm_topk_prob"]):
            topw = topw / topw.sum(dim=-1, keepdim=True)
        for n in ("Wg", "Wu", "Wd"):
            params[n] = c.t(n, grad=True, dtype=f32)
    logits.retain_grad()
    y = h.clone()
    limit, alpha = 7.0, 1.702
    cut_gate = cut_up = 0
    for e in range(E):
        tok, slot = torch.where(sel == e)
        if tok.numel() == 0:
            continue
        xe = x[tok]
        if oss:  # GptOssExperts
            gu = xe @ params["gate_up"][e] + params["gate_up_bias"][e]
            gate, up = gu[..., ::2], gu[..., 1::2]
            cut_gate += int((gate > limit).sum())
            cut_up += int((up.abs() > limit).sum())
            gate = gate.clamp(min=None, max=limit)
            up = up.clamp(min=-limit, max=limit)
            glu = gate * torch.sigmoid(gate * alpha)
            oe = ((up + 1) * glu) @ params["down"][e] + params["down_bias"][e]
        else:    # Qwen3MoeMLP
            oe = F.linear(F.silu(F.linear(xe, params["Wg"][e])) * F.linear(xe, params["Wu"][e]),
                          params["Wd"][e])
        y = y.index_add(0, tok, oe * topw[tok, slot, None])
    if oss and (cut_gate == 0 or cut_up == 0):
        raise ValueError("the clamps cut nothing (gate > 7: %d, |up| > 7: %d): the case "
                         "does not test them" % (cut_gate, cut_up))
    aux = load_balancing_loss(probs, sel, E)
    loss = (y * dy).sum() + float(c.p["aux_coef"]) * aux
    loss.backward()
    res = {"logits": logits, "probs": probs, "sel": sel.float(), "topw": topw, "aux": aux,
           "y": y, "dlogits": logits.grad, "dx": x.grad}
    for n, t in params.items():
        res["d" + n] = t.grad
    impl = "fp32 %s from HF formulas, autograd" % ("GptOssMLP" if oss else
                                                   "Qwen3MoeSparseMoeBlock")
    if oss:
        impl += "; clamps cut %d gate, %d up values" % (cut_gate, cut_up)
    return {k: v.detach() for k, v in res.items()}, impl


def op_moe(c):
    return moe_layer(c, False)


def op_moe_oss(c):
    return moe_layer(c, True)


def op_attention_sinks(c):
    """GptOssAttention's eager_attention_forward: the sink logit of each head
    as an extra softmax column, dropped before P V."""
    T, Hq, Hkv, D, W = (int(c.p[k]) for k in ("T", "Hq", "Hkv", "D", "window"))
    rep = Hq // Hkv
    f32 = torch.float32
    q, k, v = (c.t(n, grad=True, dtype=f32) for n in ("q", "k", "v"))
    sinks = c.t("sinks", grad=True, dtype=f32)
    qh, kh, vh = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    kh, vh = kh.repeat_interleave(rep, dim=1), vh.repeat_interleave(rep, dim=1)
    vis = window_mask(T, W if W < T else 0, q.device)
    s = torch.matmul(qh, kh.transpose(2, 3)) * (D ** -0.5)
    s = s.masked_fill(~vis, float("-inf"))
    B = q.shape[0]
    col = sinks.reshape(1, -1, 1, 1).expand(B, -1, T, 1)
    comb = torch.cat([s, col], dim=-1)
    lse = torch.logsumexp(comb, dim=-1)
    comb = comb - comb.max(dim=-1, keepdim=True).values
    p = torch.softmax(comb, dim=-1, dtype=f32)[..., :-1]
    out = torch.matmul(p, vh).transpose(1, 2)
    out.backward(c.t("dout", dtype=f32))
    if float(sinks.grad.abs().max()) == 0.0:
        raise ValueError("the sinks' gradient is zero: the case does not test it")
    res = {"out": out, "lse": lse, "dq": q.grad, "dk": k.grad, "dv": v.grad,
           "dsinks": sinks.grad}
    return {kk: vv.detach() for kk, vv in res.items()}, "fp32 HF GPT-OSS eager attention"

OPS = {name[3:]: fn for name, fn in globals().items() if name.startswith("op_")}
# references that are not outputs of the kernel: how to make the kernel's side
# (NAME|saved: the kernel's output NAME, against another reference)
DERIVED = {("adam", "update"): got_adam_update}


def got_derived(c, out):
    if (c.op, out) in DERIVED:
        return DERIVED[(c.op, out)](c)
    if out.endswith("|saved"):
        return c.arr(out[: -len("|saved")], "outputs")
    return None


# ---- comparison ------------------------------------------------------------------------


def compare(got, ref, tol):
    """(max_abs, max_rel, ok, note) of got against ref (numpy arrays)."""
    got = np.asarray(got, dtype=np.float64).reshape(-1)
    ref = np.asarray(ref, dtype=np.float64).reshape(-1)
    if got.size != ref.size:
        return float("nan"), float("nan"), False, "size %d vs %d" % (got.size, ref.size)
    fg, fr = np.isfinite(got), np.isfinite(ref)
    bad_nf = int(np.sum(fg != fr))
    both = ~fg & ~fr
    bad_nf += int(np.sum(both & (np.isnan(got) != np.isnan(ref))))
    inf_both = both & ~np.isnan(got) & ~np.isnan(ref)
    bad_nf += int(np.sum(inf_both & (got != ref)))
    fin = fg & fr
    diff = np.abs(got[fin] - ref[fin])
    max_abs = float(diff.max()) if diff.size else 0.0
    scale = float(np.abs(ref[fin]).max()) if diff.size else 0.0
    max_rel = max_abs / scale if scale > 0 else max_abs
    ok = bad_nf == 0 and (max_abs == 0.0 if tol == 0.0 else max_rel <= tol)
    note = ""
    if bad_nf:
        note = "%d non-finite mismatches" % bad_nf
    elif diff.size and not ok:
        i = np.flatnonzero(fin)[int(np.argmax(diff))]
        note = "worst [%d]: kernel %.9g, torch %.9g" % (i, got[i], ref[i])
    return max_abs, max_rel, ok, note


def to_numpy(x):
    if isinstance(x, torch.Tensor):
        x = x.detach()
        if x.dtype in (torch.bfloat16, torch.float16):
            x = x.float()
        return x.cpu().numpy()
    return np.asarray(x)


# ---- main ----------------------------------------------------------------------------------


def find_manifests(paths):
    out = []
    for p in paths:
        if os.path.isfile(p):
            out.append(p)
        elif os.path.isfile(os.path.join(p, "manifest.json")):
            out.append(os.path.join(p, "manifest.json"))
        else:
            found = glob.glob(os.path.join(p, "*", "manifest.json"))
            order = {"f32": 0, "bf16": 1, "f16": 2}
            found.sort(key=lambda f: (order.get(os.path.basename(os.path.dirname(f)), 9), f))
            if not found:
                raise FileNotFoundError("%s: no manifest.json in it or in its subdirectories" % p)
            out.extend(found)
    return out


def main(argv):
    ap = argparse.ArgumentParser(
        description="Compare the dumps of tools/cuda_ops_dump with PyTorch.",
        epilog="See the module docstring (head of this file) for the ops and tolerances.")
    ap.add_argument("paths", nargs="+", metavar="DIR|MANIFEST")
    ap.add_argument("--device", default="cuda", help="torch device (default cuda)")
    ap.add_argument("--ref", choices=("auto", "torch", "fp32"), default="auto",
                    help="torch: PyTorch's own ops in the storage dtype; fp32: the formulas "
                         "in fp32, rounded once; auto (default): torch on cuda, fp32 on cpu")
    ap.add_argument("--markdown", metavar="FILE", help="also write the table as Markdown")
    ap.add_argument("--verbose", action="store_true", help="worst element of every line")
    a = ap.parse_args(argv)

    dev = torch.device(a.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        sys.stderr.write("torch_cuda_ops_ref: --device %s but torch %s sees no CUDA device\n"
                         % (a.device, torch.__version__))
        return 2
    mode = a.ref if a.ref != "auto" else ("torch" if dev.type == "cuda" else "fp32")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    torch.manual_seed(0)

    try:
        manifests = find_manifests(a.paths)
    except FileNotFoundError as e:
        sys.stderr.write("torch_cuda_ops_ref: %s\n" % e)
        return 2

    dev_name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    header = ["torch %s on %s (%s), reference mode %s, TF32 off"
              % (torch.__version__, a.device, dev_name, mode)]
    rows, npass, nfail = [], 0, 0
    for man_path in manifests:
        try:
            with open(man_path) as f:
                man = json.load(f)
        except (OSError, ValueError) as e:
            sys.stderr.write("torch_cuda_ops_ref: %s: %s\n" % (man_path, e))
            return 2
        root = os.path.dirname(os.path.abspath(man_path))
        header.append("%s: dtype %s, seed %s, %s kernels, %d cases"
                      % (man_path, man.get("dtype"), man.get("seed"),
                         "emulated" if man.get("emulated") else "CUDA", len(man["cases"])))
        for d in man["cases"]:
            c = Case(root, d, dev, mode)
            if c.op not in OPS:
                rows.append((c.dtype, c.op, c.name, "-", None, None, None, False,
                             "no reference for this op", ""))
                nfail += 1
                continue
            try:
                refs, impl = OPS[c.op](c)
            except Exception as e:  # a failure of the reference is a failed line
                rows.append((c.dtype, c.op, c.name, "-", None, None, None, False,
                             "reference failed: %s: %s" % (type(e).__name__, e), ""))
                nfail += 1
                continue
            names = list(d["outputs"]) + [n for n in refs if n not in d["outputs"]]
            for out in names:
                tol = tolerance(c.op, out, c.dtype, mode, c.p)
                if out not in refs or tol is None:
                    rows.append((c.dtype, c.op, c.name, out, None, None, tol, False,
                                 "no reference or no tolerance for this output", impl))
                    nfail += 1
                    continue
                got = c.arr(out, "outputs") if out in d["outputs"] else got_derived(c, out)
                if got is None:
                    continue
                mabs, mrel, ok, note = compare(got, to_numpy(refs[out]), tol)
                rows.append((c.dtype, c.op, c.name, out, mabs, mrel, tol, ok, note, impl))
                npass += ok
                nfail += not ok

    def fmt(v):
        return "-" if v is None else ("%.2e" % v if v == v else "nan")

    lines = []
    for dtype, op, name, out, mabs, mrel, tol, ok, note, impl in rows:
        line = "%-4s %-13s %-28s %-13s max_abs=%-9s max_rel=%-9s tol=%-8s %s" % (
            dtype, op, name, out, fmt(mabs), fmt(mrel), fmt(tol), "PASS" if ok else "FAIL")
        if impl:
            line += "  [%s]" % impl
        if note and (not ok or a.verbose):
            line += "  (%s)" % note
        lines.append(line)
    for h in header:
        print("# " + h)
    for line in lines:
        print(line)
    summary = "%d passed, %d failed" % (npass, nfail)
    print(summary)

    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write("## CUDA kernels against PyTorch\n\n")
            for h in header:
                f.write("- %s\n" % h)
            f.write("\n| dtype | op | case | output | max abs err | max rel err "
                    "| tolerance | result | PyTorch reference |\n")
            f.write("|---|---|---|---|---|---|---|---|---|\n")
            for dtype, op, name, out, mabs, mrel, tol, ok, note, impl in rows:
                res = "pass" if ok else "**FAIL**" + (" (%s)" % note if note else "")
                f.write("| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n" % (
                    dtype, op, name, out.replace("|", "\\|"), fmt(mabs), fmt(mrel), fmt(tol), res,
                    impl.replace("|", "\\|")))
            f.write("\n**%s.** max rel err = max |kernel - torch| / max |torch| over the "
                    "tensor. Tolerances: f32 1e-5 (1e-4 GEMMs and attention); bf16 2^-7 "
                    "where each side rounds once, 2^-6 where either rounds more often or "
                    "reads bf16 intermediates (see tests/torch_cuda_ops_ref.py); exact for "
                    "casts. OUTPUT\\|saved: the kernel's backward against float64 math on "
                    "its own saved out, lse.\n" % summary)
    return 0 if nfail == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
