#!/usr/bin/python3
"""transformers' own model classes as a second reference for
tests/test_families.sh (optional: used where a python with transformers is
at hand, e.g. SG_TRANSFORMERS_PYTHON=~/.cache/stepgraph/venv-NAME/bin/python;
tests/torch_model_ref.py is the reference that needs torch only).

Usage: transformers_ref.py DIR STEPS LR BETA1 BETA2 EPS WD CLIP
       transformers_ref.py load STEPDIR DIR
  DIR as tests/torch_train_ref.py prepare wrote it (model.json in
  stepgraph's keys, init.safetensors under the family's Hugging Face names,
  data.bin). Builds Qwen2ForCausalLM, MistralForCausalLM, Phi3ForCausalLM or
  MixtralForCausalLM from the same sizes (eager attention, no dropout, no
  padding index, float64), loads the weights by name (strict: every tensor
  of the class must be in the file and no other), trains STEPS steps of
  torch's AdamW with gradient-norm clipping on the same batch and prints one
  loss per step, computed before the step's update: the mean cross-entropy
  of the logits against the next tokens, plus router_aux_loss_coef times the
  model's own aux_loss for Mixtral (output_router_logits).
  "load": AutoModelForCausalLM.from_pretrained(STEPDIR) (a step directory
  stepgraph saved: its config.json and model.safetensors; every tensor the
  class has must be there and no other) in float64, and prints its loss on
  DIR's batch, as above.
"""
import json
import os
import sys

import numpy as np
import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_train_ref import B, T, read_safetensors  # noqa: E402

CLASSES = {"qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
           "mistral": ("MistralConfig", "MistralForCausalLM"),
           "phi3": ("Phi3Config", "Phi3ForCausalLM"),
           "mixtral": ("MixtralConfig", "MixtralForCausalLM")}


def build(m):
    arch = m["architecture"]
    cfg_cls, model_cls = (getattr(transformers, c) for c in CLASSES[arch])
    kw = dict(hidden_size=m["hidden_size"], intermediate_size=m["intermediate_size"],
              num_hidden_layers=m["num_hidden_layers"],
              num_attention_heads=m["num_attention_heads"],
              num_key_value_heads=m["num_key_value_heads"], vocab_size=m["vocab_size"],
              max_position_embeddings=m["max_position_embeddings"],
              rms_norm_eps=m["rms_norm_eps"], rope_theta=m["rope_theta"],
              tie_word_embeddings=m["tie_word_embeddings"], pad_token_id=None,
              attention_dropout=0.0, hidden_act="silu", attn_implementation="eager")
    if arch in ("mistral", "mixtral", "phi3"):
        kw["sliding_window"] = m.get("sliding_window")
    if arch == "qwen2":
        kw["use_sliding_window"] = False
    if arch == "phi3":
        kw.update(resid_pdrop=0.0, embd_pdrop=0.0, rope_scaling=None,
                  original_max_position_embeddings=m["max_position_embeddings"])
    if arch == "mixtral":
        kw.update(num_local_experts=m["num_local_experts"],
                  num_experts_per_tok=m["num_experts_per_tok"], router_jitter_noise=0.0,
                  router_aux_loss_coef=m["router_aux_loss_coef"], output_router_logits=True)
    assert m.get("head_dim", m["hidden_size"] // m["num_attention_heads"]) * \
        m["num_attention_heads"] == m["hidden_size"], "head_dim must be hidden / heads here"
    model = model_cls(cfg_cls(**kw)).double()
    model.train()
    return model


def batch(d):
    raw = open(os.path.join(d, "data.bin"), "rb").read()
    toks = np.frombuffer(raw[1024:], dtype="<u2").astype(np.int64)
    x = torch.from_numpy(np.stack([toks[i * T:i * T + T] for i in range(B)]))
    y = torch.from_numpy(np.stack([toks[i * T + 1:i * T + T + 1] for i in range(B)]))
    return x, y


def loss_of(model, x, y):
    cfg = model.config
    router = getattr(cfg, "output_router_logits", False)
    out = model(input_ids=x, use_cache=False, **({"output_router_logits": True} if router else {}))
    loss = torch.nn.functional.cross_entropy(out.logits.reshape(-1, cfg.vocab_size), y.reshape(-1))
    if router:
        loss = loss + cfg.router_aux_loss_coef * out.aux_loss
    return loss


def load(step_dir, d):
    model, info = transformers.AutoModelForCausalLM.from_pretrained(
        step_dir, output_loading_info=True, torch_dtype=torch.float64,
        attn_implementation="eager")
    bad = {k: v for k, v in info.items() if v}
    assert not bad, bad
    model.train()  # as in training: no dropout (the configs have none), no cache
    x, y = batch(d)
    with torch.no_grad():
        print(repr(loss_of(model, x, y).item()))
    return 0


def main(argv):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    if len(argv) == 4 and argv[1] == "load":
        return load(argv[2], argv[3])
    if len(argv) != 9:
        sys.stderr.write(__doc__)
        return 2
    d, steps = argv[1], int(argv[2])
    lr, b1, b2, eps, wd, clip = map(float, argv[3:9])
    m = json.load(open(os.path.join(d, "model.json")))
    model = build(m)
    w = {k: torch.tensor(v, dtype=torch.float64) for k, v in
         read_safetensors(os.path.join(d, "init.safetensors")).items()}
    model.load_state_dict(w, strict=True)
    x, y = batch(d)
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_of(model, x, y)
        loss.backward()
        for p in params:  # an expert no token picked: a zero gradient, as DeepSpeed
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(params, clip)
        opt.step()
        print(repr(loss.item()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
