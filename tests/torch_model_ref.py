#!/usr/bin/python3
"""PyTorch reference for tests/test_block.c: a whole decoder-only model
(embedding, Llama / Qwen3 decoder layers, final norm, head, cross-entropy),
written with plain torch ops after Hugging Face's modeling_llama.py,
modeling_qwen3.py and modeling_qwen3_moe.py (transformers is not needed).
Qwen3-MoE layers (model.txt has "E" > 0): Qwen3MoeSparseMoeBlock's router
(softmax in fp32 precision or better, torch.topk, optional renormalisation),
one SwiGLU MLP per expert applied to the tokens that picked it, and
load_balancing_loss_func over the router logits of every layer, concatenated,
added to the loss times router_aux_loss_coef (as Qwen3MoeForCausalLM does
with output_router_logits).

Other families (model.txt's "arch"), after transformers' modeling files:
qwen2 (Qwen2Attention: q/k/v biases, used when the tensors are there);
mistral (every layer sliding when model.txt's "window" is set; the layers
are listed as sliding); phi3 (Phi3Attention's fused qkv_proj, split into
the first heads*D rows for q, the next kv*D for k, the rest for v;
Phi3MLP's gate_up_proj, its first half gate, its second up); mixtral
(MixtralSparseMoeBlock: router "block_sparse_moe.gate", softmax over every
expert, top-k, the k weights renormalised; expert e's w1 gate, w3 up, w2
down).

GPT-OSS layers (model.txt has "arch gpt_oss"), after the published formulas
of transformers' modeling_gpt_oss.py (restated, not its code): q/k/v/o with
biases; the attention softmax over the scaled scores plus one learned sink
logit per head, the sink's column dropped after it; sliding-window layers;
rotary tables with YaRN (modeling_rope_utils' _compute_yarn_parameters:
ramp between interpolated and extrapolated frequencies, cos and sin times
the attention factor); GptOssTopKRouter: a linear with bias, top-k on the
logits, softmax over the k; GptOssExperts: gate_up = x @ W + b with gate and
up the even and odd columns, gate clamped above at 7, up to [-7, 7], out =
((up + 1) * gate * sigmoid(1.702 gate)) @ W_down + b_down; the
load-balancing loss on the raw router logits as for Qwen3-MoE.

Usage: torch_model_ref.py DIR [DIR ...]

Each DIR holds what the C test wrote (raw little-endian files):
  model.txt    "key value" lines: sizes, eps, theta, flags, B, T, dtype and
               "sliding L" for each sliding-window layer L (HF index)
  tensors.txt  "name numel" per parameter tensor, in the order of params.f32
  params.f32   every parameter tensor, concatenated (fp32)
  tokens.i32, targets.i32   (B*T); a negative target is ignored
and receives, computed in `dtype` (float64 unless model.txt says float32)
with autograd:
  loss.f64     the mean cross-entropy over the non-ignored targets (+ the MoE
               auxiliary loss)
  grads.f64    d loss / d parameter, concatenated in the order of params.f32
  hidden.f64   the output of each unit but the head: embedding, layers 1..L,
               (L+1, B*T, H)
  dhidden.f64  d loss / d each of those outputs, same shape
Prints nothing on stdout (the caller's stdout is TAP).
"""
import os
import sys

import numpy as np
import torch


def read_args(d):
    args, sliding = {}, set()
    with open(os.path.join(d, "model.txt")) as f:
        for line in f:
            k, v = line.split()
            if k == "sliding":
                sliding.add(int(v))
            else:
                args[k] = v
    return args, sliding


def read_params(d, dtype):
    names, sizes = [], []
    with open(os.path.join(d, "tensors.txt")) as f:
        for line in f:
            name, numel = line.split()
            names.append(name)
            sizes.append(int(numel))
    flat = np.fromfile(os.path.join(d, "params.f32"), dtype="<f4")
    if flat.size != sum(sizes):
        raise ValueError(f"{d}: params.f32 has {flat.size} floats, tensors.txt {sum(sizes)}")
    params, at = {}, 0
    for name, n in zip(names, sizes):
        t = torch.from_numpy(flat[at:at + n].astype(np.float64)).to(dtype)
        params[name] = t.requires_grad_(True)
        at += n
    return names, params


def rms_norm(x, w, eps):
    # LlamaRMSNorm / Qwen3RMSNorm
    variance = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(variance + eps))


def rope_tables(T, D, theta, dtype):
    # inv_freq = theta^(-2i/D); HF duplicates the half tables: emb = cat(f, f)
    inv = theta ** (-np.arange(0, D, 2, dtype=np.float64) / D)
    ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]
    emb = np.concatenate([ang, ang], axis=-1)                  # (T, D)
    return (torch.from_numpy(np.cos(emb)).to(dtype), torch.from_numpy(np.sin(emb)).to(dtype))


def yarn_tables(T, D, theta, factor, beta_fast, beta_slow, orig_max, truncate, att_factor, dtype):
    # the published YaRN formulas (float64 here)
    import math
    def corr_dim(rot):
        return D * math.log(orig_max / (rot * 2 * math.pi)) / (2 * math.log(theta))
    low, high = corr_dim(beta_fast), corr_dim(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, D - 1)
    if low == high:
        high += 0.001
    extra = theta ** (-np.arange(0, D, 2, dtype=np.float64) / D)
    inter = extra / factor
    ramp = np.clip((np.arange(D // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    inv = inter * ramp + extra * (1 - ramp)
    ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]
    emb = np.concatenate([ang, ang], axis=-1)
    return (torch.from_numpy(np.cos(emb) * att_factor).to(dtype),
            torch.from_numpy(np.sin(emb) * att_factor).to(dtype))


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x, cos, sin):  # x (B, heads, T, D), cos/sin (T, D)
    return x * cos + rotate_half(x) * sin


def attention(q, k, v, window, sinks=None):
    # eager_attention_forward: q (B, Hq, T, D), k, v (B, Hkv, T, D); sinks
    # (Hq): GPT-OSS's extra softmax column per head, dropped after it
    B, Hq, T, D = q.shape
    rep = Hq // k.shape[1]
    k = k.repeat_interleave(rep, dim=1)                        # repeat_kv
    v = v.repeat_interleave(rep, dim=1)
    s = (q @ k.transpose(2, 3)) * D ** -0.5                    # (B, Hq, T, T)
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    allowed = j <= i
    if window > 0:  # transformers' sliding_window_overlay: kv_idx > q_idx - window
        allowed = allowed & (j > i - window)
    s = s.masked_fill(~allowed, float("-inf"))
    if sinks is not None:
        col = sinks.view(1, Hq, 1, 1).expand(B, Hq, T, 1)
        p = torch.softmax(torch.cat([s, col], dim=-1), dim=-1)[..., :-1]
    else:
        p = torch.softmax(s, dim=-1)
    return (p @ v).transpose(1, 2).reshape(B, T, Hq * D)


class Model:
    def __init__(self, args, sliding, params):
        g = lambda k: int(args[k])
        self.H, self.L, self.Hq, self.Hkv = g("H"), g("L"), g("Hq"), g("Hkv")
        self.D, self.F, self.V = g("D"), g("F"), g("V")
        self.B, self.T = g("B"), g("T")
        self.tie, self.qk_norm = g("tie"), g("qk_norm")
        self.window = g("window")
        self.eps, self.theta = float(args["eps"]), float(args["theta"])
        self.sliding = sliding
        self.p = params
        self.E = int(args.get("E", 0))
        if self.E:
            self.K, self.Fm = g("K"), g("Fm")
            self.norm_topk = g("norm_topk")
            self.aux_coef = float(args["aux_coef"])
        self.router_logits = []
        self.clamped = [0, 0, 0]  # GPT-OSS: gate values cut, up values cut, of
        self.arch = args.get("arch", "")
        self.oss = self.arch == "gpt_oss"
        self.yarn = None
        if "yarn_factor" in args:
            self.yarn = tuple(float(args[k]) for k in (
                "yarn_factor", "yarn_beta_fast", "yarn_beta_slow", "yarn_orig_max",
                "yarn_truncate", "yarn_att_factor"))

    def w(self, name):
        return self.p.get(name)

    def linear(self, x, prefix):
        y = x @ self.w(prefix + ".weight").view(-1, x.shape[-1]).t()
        b = self.w(prefix + ".bias")
        return y + b if b is not None else y

    def layer(self, x, l, cos, sin):
        B, T, D = self.B, self.T, self.D
        pre = f"model.layers.{l}."
        n1 = rms_norm(x, self.w(pre + "input_layernorm.weight"), self.eps)
        if self.arch == "phi3":  # one projection; q, k, v its consecutive column blocks
            qkv = self.linear(n1, pre + "self_attn.qkv_proj")
            qw, kw = self.Hq * D, self.Hkv * D
            q = qkv[..., :qw].reshape(B, T, self.Hq, D)
            k = qkv[..., qw:qw + kw].reshape(B, T, self.Hkv, D)
            v = qkv[..., qw + kw:].reshape(B, T, self.Hkv, D)
        else:
            q = self.linear(n1, pre + "self_attn.q_proj").view(B, T, self.Hq, D)
            k = self.linear(n1, pre + "self_attn.k_proj").view(B, T, self.Hkv, D)
            v = self.linear(n1, pre + "self_attn.v_proj").view(B, T, self.Hkv, D)
        if self.qk_norm:  # Qwen3: over head_dim, before rope
            q = rms_norm(q, self.w(pre + "self_attn.q_norm.weight"), self.eps)
            k = rms_norm(k, self.w(pre + "self_attn.k_norm.weight"), self.eps)
        q = apply_rope(q.transpose(1, 2), cos, sin)
        k = apply_rope(k.transpose(1, 2), cos, sin)
        window = self.window if l in self.sliding else 0
        att = attention(q, k, v.transpose(1, 2), window, self.w(pre + "self_attn.sinks"))
        h = x + self.linear(att, pre + "self_attn.o_proj")
        n2 = rms_norm(h, self.w(pre + "post_attention_layernorm.weight"), self.eps)
        if self.E and self.oss:
            return h + self.oss_moe(n2, pre)
        if self.E:
            return h + self.moe(n2, pre)
        if self.arch == "phi3":
            gate, up = self.linear(n2, pre + "mlp.gate_up_proj").chunk(2, dim=-1)
            return h + self.linear(up * torch.nn.functional.silu(gate), pre + "mlp.down_proj")
        gate = self.linear(n2, pre + "mlp.gate_proj")
        up = self.linear(n2, pre + "mlp.up_proj")
        return h + self.linear(torch.nn.functional.silu(gate) * up, pre + "mlp.down_proj")

    def moe(self, x, pre):
        # Qwen3MoeSparseMoeBlock: route each token to its top-k experts
        xs = x.reshape(-1, self.H)                                  # (N, H)
        mix = self.arch == "mixtral"
        logits = self.linear(xs, pre + ("block_sparse_moe.gate" if mix else "mlp.gate"))
        self.router_logits.append(logits)
        probs = torch.softmax(logits, dim=-1)
        weights, selected = torch.topk(probs, self.K, dim=-1)       # (N, K)
        if self.norm_topk:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(xs)
        for e in range(self.E):
            tok, slot = torch.where(selected == e)
            if tok.numel() == 0:
                continue
            xe = xs[tok]
            if mix:  # MixtralBlockSparseTop2MLP: w2(silu(w1 x) * w3 x)
                ep = pre + f"block_sparse_moe.experts.{e}."
                g, u, dn = ep + "w1", ep + "w3", ep + "w2"
            else:
                ep = pre + f"mlp.experts.{e}."
                g, u, dn = ep + "gate_proj", ep + "up_proj", ep + "down_proj"
            ye = self.linear(torch.nn.functional.silu(self.linear(xe, g)) * self.linear(xe, u), dn)
            out = out.index_add(0, tok, ye * weights[tok, slot, None])
        return out.view_as(x)

    def oss_moe(self, x, pre):
        # GptOssMLP: router with bias, top-k on the logits, softmax over the k
        xs = x.reshape(-1, self.H)
        logits = self.linear(xs, pre + "mlp.router")                # (N, E)
        self.router_logits.append(logits)
        top, selected = torch.topk(logits, self.K, dim=-1)
        weights = torch.softmax(top, dim=-1)                        # (N, K)
        gu_w = self.w(pre + "mlp.experts.gate_up_proj").view(self.E, self.H, 2 * self.Fm)
        gu_b = self.w(pre + "mlp.experts.gate_up_proj_bias").view(self.E, 2 * self.Fm)
        dn_w = self.w(pre + "mlp.experts.down_proj").view(self.E, self.Fm, self.H)
        dn_b = self.w(pre + "mlp.experts.down_proj_bias").view(self.E, self.H)
        out = torch.zeros_like(xs)
        for e in range(self.E):
            tok, slot = torch.where(selected == e)
            if tok.numel() == 0:
                continue
            gu = xs[tok] @ gu_w[e] + gu_b[e]
            gate, up = gu[:, 0::2], gu[:, 1::2]
            self.clamped[0] += int((gate > 7.0).sum())
            self.clamped[1] += int((up.abs() > 7.0).sum())
            self.clamped[2] += gate.numel()
            gate = gate.clamp(max=7.0)
            up = up.clamp(min=-7.0, max=7.0)
            y = ((up + 1) * (gate * torch.sigmoid(1.702 * gate))) @ dn_w[e] + dn_b[e]
            out = out.index_add(0, tok, y * weights[tok, slot, None])
        return out.view_as(x)

    def aux_loss(self):
        # load_balancing_loss_func: every layer's router logits concatenated
        logits = torch.cat(self.router_logits, dim=0)               # (L N, E)
        probs = torch.softmax(logits, dim=-1)
        _, selected = torch.topk(probs, self.K, dim=-1)
        mask = torch.nn.functional.one_hot(selected, self.E).to(probs.dtype)  # (L N, K, E)
        tokens_per_expert = mask.mean(dim=0)                        # (K, E)
        prob_per_expert = probs.mean(dim=0)                         # (E)
        return self.E * (tokens_per_expert * prob_per_expert.unsqueeze(0)).sum()

    def forward(self, tokens, targets, dtype):
        self.router_logits = []
        table = self.w("model.embed_tokens.weight").view(self.V, self.H)
        x = table[tokens].view(self.B, self.T, self.H)
        hidden = [x]
        if self.yarn:
            f, bf, bs, om, tr, af = self.yarn
            cos, sin = yarn_tables(self.T, self.D, self.theta, f, bf, bs, om, tr != 0, af, dtype)
        else:
            cos, sin = rope_tables(self.T, self.D, self.theta, dtype)
        for l in range(self.L):
            x = self.layer(x, l, cos, sin)
            hidden.append(x)
        for h in hidden:
            h.retain_grad()
        n = rms_norm(x, self.w("model.norm.weight"), self.eps)
        W = table if self.tie else self.w("lm_head.weight").view(self.V, self.H)
        logits = (n @ W.t()).view(-1, self.V)
        loss = torch.nn.functional.cross_entropy(logits, targets, ignore_index=-100)
        if self.E and self.aux_coef:
            loss = loss + self.aux_coef * self.aux_loss()
        return loss, hidden


def save(d, name, a):
    np.ascontiguousarray(a, dtype="<f8").tofile(os.path.join(d, name))


def run(d):
    args, sliding = read_args(d)
    dtype = torch.float32 if args.get("dtype") == "float32" else torch.float64
    names, params = read_params(d, dtype)
    tokens = torch.from_numpy(np.fromfile(os.path.join(d, "tokens.i32"), dtype="<i4")
                              .astype(np.int64))
    targets = np.fromfile(os.path.join(d, "targets.i32"), dtype="<i4").astype(np.int64)
    targets = torch.from_numpy(np.where(targets < 0, -100, targets))  # HF's ignore index
    model = Model(args, sliding, params)
    loss, hidden = model.forward(tokens, targets, dtype)
    loss.backward()
    save(d, "loss.f64", [loss.item()])
    # an expert no token picked has no gradient: zeros
    save(d, "grads.f64", np.concatenate([
        (params[n].grad.double().numpy() if params[n].grad is not None
         else np.zeros(params[n].numel())).ravel() for n in names]))
    save(d, "hidden.f64", np.stack([h.detach().double().numpy() for h in hidden]))
    save(d, "dhidden.f64", np.stack([h.grad.double().numpy() for h in hidden]))


def main(argv):
    torch.set_num_threads(1)
    for d in argv[1:]:
        run(d)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
