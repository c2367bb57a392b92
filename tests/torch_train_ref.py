#!/usr/bin/python3
"""PyTorch reference for tests/test_train_vs_torch.sh: a few training steps
of a whole Llama model, with torch's own AdamW, gradient-norm clipping and
cross-entropy; the forward is tests/torch_model_ref.py's (plain torch ops
after Hugging Face's modeling_llama.py).

Usage:
  torch_train_ref.py prepare DIR [moe|gptoss|qwen2|mistral|phi3|mixtral]
      writes DIR/model.json (odd
      sizes; "moe": a Qwen3-MoE model, top 2 of 6 experts, renormalised, with
      a load-balancing loss of weight 0.05; "gptoss": a GPT-OSS model, top 2
      of 6 experts, biases, sinks, a sliding layer (window 5) then a full one,
      YaRN, the same loss weight, its gate_up biases wide enough for the
      SwiGLU clamps to cut; "qwen2": q/k/v biases; "mistral": every layer
      sliding, window 5; "phi3": fused qkv_proj and gate_up_proj;
      "mixtral": top 2 of 6 experts under Mixtral's names, window 5, the
      same loss weight),
      DIR/init.safetensors (the initial weights, F32, Hugging Face names) and
      DIR/data.bin (an llm.c uint16 shard holding exactly B windows of T
      tokens, so every step's batch is those B windows: the loader's
      per-epoch permutation only reorders the rows)
  torch_train_ref.py grads DIR
      writes DIR/grads.npz: d loss / d every parameter at the initial
      weights on the same batch (float64), and DIR/clamps.npz: how many
      GPT-OSS gate and up values the SwiGLU clamps cut, of how many
  torch_train_ref.py train DIR STEPS LR BETA1 BETA2 EPS WD CLIP [SCHEDULE]
      prints one loss per step (float64 model, computed before the step's
      update), as the metrics of `stepgraph run` hold them; SCHEDULE: a file
      of lines "lr beta1 beta2" (tests/lr_schedule_ref.py's output) or "lr
      beta1 beta2 eps weight_decay", one per update, set on the optimizer
      before each. The optimizer is torch's AdamW, unless the environment
      says SG_REF_OPTIMIZER=lion (the Lion class below, from the paper;
      EPS unused) or SG_REF_OPTIMIZER=adagrad:LR_DECAY:INITIAL_ACCUMULATOR
      (torch.optim.Adagrad; BETA1 and BETA2 unused)
"""
import json
import math
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_model_ref import Model  # noqa: E402

B, T = 2, 16
MODEL = {
    "name": "odd-llama", "architecture": "llama",
    "source": "tests/torch_train_ref.py: odd sizes (3 heads of 24, 1 KV head, vocab 97)",
    "hidden_size": 72, "intermediate_size": 100, "num_hidden_layers": 2,
    "num_attention_heads": 3, "num_key_value_heads": 1, "head_dim": 24,
    "vocab_size": 97, "max_position_embeddings": 64, "tie_word_embeddings": False,
    "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "attention_bias": False,
}
MOE_MODEL = {
    "name": "odd-moe", "architecture": "qwen3_moe",
    "source": "tests/torch_train_ref.py: odd sizes, top 2 of 6 experts of width 40",
    "hidden_size": 72, "moe_intermediate_size": 40, "num_hidden_layers": 2,
    "num_attention_heads": 3, "num_key_value_heads": 1, "head_dim": 24,
    "vocab_size": 97, "max_position_embeddings": 64, "tie_word_embeddings": False,
    "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "attention_bias": False,
    "num_experts": 6, "num_experts_per_tok": 2, "norm_topk_prob": True,
    "router_aux_loss_coef": 0.05,
}
OSS_MODEL = {
    "name": "odd-gpt-oss", "architecture": "gpt_oss",
    "source": "tests/torch_train_ref.py: odd sizes, top 2 of 6 experts of width 40",
    "hidden_size": 72, "moe_intermediate_size": 40, "num_hidden_layers": 2,
    "num_attention_heads": 3, "num_key_value_heads": 1, "head_dim": 24,
    "vocab_size": 97, "max_position_embeddings": 64, "tie_word_embeddings": False,
    "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "attention_bias": True,
    "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "beta_fast": 32.0, "beta_slow": 1.0,
                     "original_max_position_embeddings": 8, "truncate": False},
    "num_local_experts": 6, "num_experts_per_tok": 2, "router_aux_loss_coef": 0.05,
    "sliding_window": 5, "layer_types": ["sliding_attention", "full_attention"],
}

QWEN2_MODEL = dict(MODEL, name="odd-qwen2", architecture="qwen2", attention_bias=True)
MISTRAL_MODEL = dict(MODEL, name="odd-mistral", architecture="mistral", sliding_window=5)
PHI3_MODEL = dict(MODEL, name="odd-phi3", architecture="phi3")
MIXTRAL_MODEL = dict(MODEL, name="odd-mixtral", architecture="mixtral", intermediate_size=40,
                     source="tests/torch_train_ref.py: odd sizes, top 2 of 6 experts of width 40",
                     sliding_window=5, num_local_experts=6, num_experts_per_tok=2,
                     router_aux_loss_coef=0.05)
del PHI3_MODEL["attention_bias"], MISTRAL_MODEL["attention_bias"], MIXTRAL_MODEL["attention_bias"]
KINDS = {"moe": MOE_MODEL, "gptoss": OSS_MODEL, "qwen2": QWEN2_MODEL, "mistral": MISTRAL_MODEL,
         "phi3": PHI3_MODEL, "mixtral": MIXTRAL_MODEL}


def oss_layer_shapes(m, p):
    H, D, E, F = m["hidden_size"], m["head_dim"], m["num_local_experts"], m["moe_intermediate_size"]
    Hq, Hkv = m["num_attention_heads"], m["num_key_value_heads"]
    return [(p + "input_layernorm.weight", (H,)),
            (p + "self_attn.q_proj.weight", (Hq * D, H)), (p + "self_attn.q_proj.bias", (Hq * D,)),
            (p + "self_attn.k_proj.weight", (Hkv * D, H)), (p + "self_attn.k_proj.bias", (Hkv * D,)),
            (p + "self_attn.v_proj.weight", (Hkv * D, H)), (p + "self_attn.v_proj.bias", (Hkv * D,)),
            (p + "self_attn.o_proj.weight", (H, Hq * D)), (p + "self_attn.o_proj.bias", (H,)),
            (p + "self_attn.sinks", (Hq,)),
            (p + "post_attention_layernorm.weight", (H,)),
            (p + "mlp.router.weight", (E, H)), (p + "mlp.router.bias", (E,)),
            (p + "mlp.experts.gate_up_proj", (E, H, 2 * F)),
            (p + "mlp.experts.gate_up_proj_bias", (E, 2 * F)),
            (p + "mlp.experts.down_proj", (E, F, H)),
            (p + "mlp.experts.down_proj_bias", (E, H))]


def mlp_shapes(m, p):
    H = m["hidden_size"]
    if m["architecture"] == "phi3":  # Phi3MLP: gate and up in one (2F, H)
        F = m["intermediate_size"]
        return [(p + "mlp.gate_up_proj.weight", (2 * F, H)), (p + "mlp.down_proj.weight", (H, F))]
    if m["architecture"] == "mixtral":
        E, F = m["num_local_experts"], m["intermediate_size"]
        out = [(p + "block_sparse_moe.gate.weight", (E, H))]
        for e in range(E):
            q = p + f"block_sparse_moe.experts.{e}."
            out += [(q + "w1.weight", (F, H)), (q + "w2.weight", (H, F)), (q + "w3.weight", (F, H))]
        return out
    if "num_experts" not in m:
        F = m["intermediate_size"]
        return [(p + "mlp.gate_proj.weight", (F, H)), (p + "mlp.up_proj.weight", (F, H)),
                (p + "mlp.down_proj.weight", (H, F))]
    E, F = m["num_experts"], m["moe_intermediate_size"]
    out = [(p + "mlp.gate.weight", (E, H))]
    for e in range(E):
        q = p + f"mlp.experts.{e}."
        out += [(q + "gate_proj.weight", (F, H)), (q + "up_proj.weight", (F, H)),
                (q + "down_proj.weight", (H, F))]
    return out


def tensor_shapes(m):
    H, V, D = m["hidden_size"], m["vocab_size"], m["head_dim"]
    moe = "num_experts" in m
    Hq, Hkv = m["num_attention_heads"], m["num_key_value_heads"]
    out = [("model.embed_tokens.weight", (V, H))]
    for l in range(m["num_hidden_layers"]):
        p = f"model.layers.{l}."
        if m["architecture"] == "gpt_oss":
            out += oss_layer_shapes(m, p)
            continue
        out += [(p + "input_layernorm.weight", (H,))]
        if m["architecture"] == "phi3":  # Phi3Attention: q, k, v rows in one tensor
            out += [(p + "self_attn.qkv_proj.weight", ((Hq + 2 * Hkv) * D, H))]
        else:
            for j, rows in (("q", Hq * D), ("k", Hkv * D), ("v", Hkv * D)):
                out += [(p + f"self_attn.{j}_proj.weight", (rows, H))]
                if m["architecture"] == "qwen2":  # Qwen2Attention: q/k/v biases
                    out += [(p + f"self_attn.{j}_proj.bias", (rows,))]
        out += [(p + "self_attn.o_proj.weight", (H, Hq * D))]
        if moe:  # Qwen3: QK-norm (the loader's order: after the projections)
            out += [(p + "self_attn.q_norm.weight", (D,)), (p + "self_attn.k_norm.weight", (D,))]
        out += [(p + "post_attention_layernorm.weight", (H,))] + mlp_shapes(m, p)
    out.append(("model.norm.weight", (H,)))
    if not m["tie_word_embeddings"]:
        out.append(("lm_head.weight", (V, H)))
    return out


def write_safetensors(path, tensors):
    header, blobs, at = {}, [], 0
    for name, a in tensors:
        b = np.ascontiguousarray(a, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_safetensors(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for k, v in header.items():
        assert v["dtype"] == "F32", (k, v["dtype"])
        b, e = v["data_offsets"]
        out[k] = np.frombuffer(raw[8 + n + b:8 + n + e], dtype="<f4").reshape(v["shape"])
    return out


def prepare(d, kind=""):
    rng = np.random.default_rng(1234)
    model = KINDS.get(kind, MODEL)
    json.dump(model, open(os.path.join(d, "model.json"), "w"), indent=1)
    tensors = []
    for name, shape in tensor_shapes(model):
        if name.endswith("norm.weight"):   # around 1, not 1: the norms' gradients matter
            a = 1.0 + 0.1 * rng.standard_normal(shape)
        elif name.endswith("gate_up_proj_bias"):  # some gate > 7, some |up| > 7: the clamps
            a = 4.0 * rng.standard_normal(shape)
        elif name.endswith("sinks"):
            a = rng.standard_normal(shape)
        else:
            a = 0.05 * rng.standard_normal(shape)
        tensors.append((name, a.astype(np.float32)))
    write_safetensors(os.path.join(d, "init.safetensors"), tensors)
    ntok = B * T + 1                        # B windows: tokens [i*T, i*T + T]
    toks = rng.integers(0, MODEL["vocab_size"], ntok).astype("<u2")
    hdr = np.zeros(256, dtype="<i4")
    hdr[0], hdr[1], hdr[2] = 20240520, 1, ntok
    with open(os.path.join(d, "data.bin"), "wb") as f:
        f.write(hdr.tobytes() + toks.tobytes())


def setup(d):
    torch.set_num_threads(1)
    m = json.load(open(os.path.join(d, "model.json")))
    w = read_safetensors(os.path.join(d, "init.safetensors"))
    dtype = torch.float64
    params = {k: torch.tensor(v, dtype=dtype, requires_grad=True) for k, v in w.items()}
    args = {"H": m["hidden_size"], "L": m["num_hidden_layers"],
            "Hq": m["num_attention_heads"], "Hkv": m["num_key_value_heads"],
            "D": m["head_dim"], "F": m.get("intermediate_size", 0), "V": m["vocab_size"],
            "B": B, "T": T, "tie": int(m["tie_word_embeddings"]), "qk_norm": 0, "window": 0,
            "eps": m["rms_norm_eps"], "theta": m["rope_theta"]}
    if "num_experts" in m:
        args.update({"F": 0, "qk_norm": 1, "E": m["num_experts"], "K": m["num_experts_per_tok"],
                     "Fm": m["moe_intermediate_size"], "norm_topk": int(m["norm_topk_prob"]),
                     "aux_coef": m["router_aux_loss_coef"]})
    sliding = set()
    args["arch"] = m["architecture"]
    if m.get("sliding_window") and m["architecture"] in ("mistral", "mixtral"):
        args["window"], sliding = m["sliding_window"], set(range(m["num_hidden_layers"]))
    if m["architecture"] == "mixtral":  # the router always renormalises
        args.update({"F": 0, "E": m["num_local_experts"], "K": m["num_experts_per_tok"],
                     "Fm": m["intermediate_size"], "norm_topk": 1,
                     "aux_coef": m["router_aux_loss_coef"]})
    if m["architecture"] == "gpt_oss":
        rs = m["rope_scaling"]
        factor = rs["factor"]
        args.update({"F": 0, "qk_norm": 0, "E": m["num_local_experts"],
                     "K": m["num_experts_per_tok"], "Fm": m["moe_intermediate_size"],
                     "norm_topk": 0, "aux_coef": m["router_aux_loss_coef"], "arch": "gpt_oss",
                     "window": m["sliding_window"], "yarn_factor": factor,
                     "yarn_beta_fast": rs["beta_fast"], "yarn_beta_slow": rs["beta_slow"],
                     "yarn_orig_max": rs["original_max_position_embeddings"],
                     "yarn_truncate": int(rs["truncate"]),
                     "yarn_att_factor": 0.1 * math.log(factor) + 1.0})
        sliding = {l for l, t in enumerate(m["layer_types"]) if t == "sliding_attention"}
    model = Model(args, sliding, params)
    raw = open(os.path.join(d, "data.bin"), "rb").read()
    toks = np.frombuffer(raw[1024:], dtype="<u2").astype(np.int64)
    x = np.stack([toks[i * T:i * T + T] for i in range(B)])
    y = np.stack([toks[i * T + 1:i * T + T + 1] for i in range(B)])
    tokens, targets = torch.from_numpy(x.reshape(-1)), torch.from_numpy(y.reshape(-1))
    return model, params, tokens, targets, dtype


def grads(d):
    model, params, tokens, targets, dtype = setup(d)
    loss, _ = model.forward(tokens, targets, dtype)
    loss.backward()
    np.savez(os.path.join(d, "clamps.npz"), gate=model.clamped[0], up=model.clamped[1],
             total=model.clamped[2])
    np.savez(os.path.join(d, "grads.npz"),
             **{k: (p.grad if p.grad is not None else torch.zeros_like(p)).numpy()
                for k, p in params.items()})


class Lion(torch.optim.Optimizer):
    """Lion as Chen et al. 2023 ("Symbolic Discovery of Optimization
    Algorithms", Algorithm 2) state it, with decoupled weight decay:
    c = b1 m + (1 - b1) g; p = p (1 - lr wd) - lr sign(c) (torch.sign: 0 at 0);
    m = b2 m + (1 - b2) g. Written here from the paper, not from stepgraph."""

    def __init__(self, params, lr, betas, weight_decay):
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            lr, (b1, b2), wd = group["lr"], group["betas"], group["weight_decay"]
            for p in group["params"]:
                m = self.state[p].setdefault("exp_avg", torch.zeros_like(p))
                c = b1 * m + (1 - b1) * p.grad
                p.mul_(1 - lr * wd).add_(torch.sign(c), alpha=-lr)
                m.mul_(b2).add_(p.grad, alpha=1 - b2)


def make_optimizer(params, lr, b1, b2, eps, wd):
    kind = os.environ.get("SG_REF_OPTIMIZER", "adamw").split(":")
    if kind[0] == "lion":
        return Lion(params, lr=lr, betas=(b1, b2), weight_decay=wd)
    if kind[0] == "adagrad":
        return torch.optim.Adagrad(params, lr=lr, lr_decay=float(kind[1]), weight_decay=wd,
                                   initial_accumulator_value=float(kind[2]), eps=eps)
    assert kind[0] == "adamw", "SG_REF_OPTIMIZER: adamw, lion or adagrad:LR_DECAY:INIT"
    # DeepSpeed's AdamW is torch's: decoupled weight decay on every parameter
    return torch.optim.AdamW(params, lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)


def train(d, steps, lr, b1, b2, eps, wd, clip, schedule=None):
    model, params, tokens, targets, dtype = setup(d)
    plan = []
    if schedule:
        with open(schedule) as f:
            plan = [tuple(map(float, line.split())) for line in f if line.strip()]
        assert len(plan) >= steps, "the schedule has fewer updates than steps"
    opt = make_optimizer(list(params.values()), lr, b1, b2, eps, wd)
    for k in range(steps):
        if plan:  # torch's AdamW reads lr and betas from the group at each step
            group = opt.param_groups[0]
            group["lr"], group["betas"] = plan[k][0], (plan[k][1], plan[k][2])
            if len(plan[k]) == 5:
                group["eps"], group["weight_decay"] = plan[k][3], plan[k][4]
        opt.zero_grad()
        loss, _ = model.forward(tokens, targets, dtype)
        loss.backward()
        for p in params.values():  # an expert no token picked: a zero gradient, as DeepSpeed
            if p.grad is None:     # (weight decay and Adam's moments still apply)
                p.grad = torch.zeros_like(p)
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(list(params.values()), clip)
        opt.step()
        assert math.isfinite(loss.item())
        print(repr(loss.item()))


def main(argv):
    if len(argv) in (3, 4) and argv[1] == "prepare":
        prepare(argv[2], argv[3] if len(argv) == 4 else "")
    elif len(argv) == 3 and argv[1] == "grads":
        grads(argv[2])
    elif len(argv) in (10, 11) and argv[1] == "train":
        train(argv[2], int(argv[3]), *map(float, argv[4:10]), *argv[10:])
    else:
        sys.stderr.write(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
