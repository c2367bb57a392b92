#!/usr/bin/env python3
"""The PyTorch peer of scripts/bench_gpu.sh: one training step of a Llama
model (models/NAME.json) on one GPU, written the way a PyTorch user writes it,
timed step by step.

Usage: torch_gpu_bench.py --mode offload|gpu|deepspeed|superoffload [--model llama-3.2-1b] [--seq 4096]
                          [--batch 4] [--steps 12] [--warmup 3] [--threads N]
                          [--peak 989] [--device cuda|cpu] [--dtype bf16|fp32]
                          [--attention auto|sdpa-gqa|sdpa-repeat|matmul]
                          [--no-checkpointing] [--seed 42]
                          [--ds-config configs/deepspeed/superoffload-llama-3.2-1b.json]

Modes:
  offload  "the optimizer on the CPU", plain PyTorch (no overlap: the baseline):
           bf16 parameters on the GPU for the forward and backward; fp32 master
           weights in pinned host memory with torch.optim.AdamW(foreach=True)
           on the CPU (torch.set_num_threads(--threads)). Each step: forward and
           backward on the GPU; every bf16 gradient copied device-to-host
           (non_blocking, into a pinned bf16 buffer per tensor), synchronize;
           on the CPU the gradients cast to the fp32 master gradients,
           clip_grad_norm_(1.0), AdamW step, the master weights cast to bf16
           into the same pinned buffers and copied host-to-device (non_blocking),
           synchronize. Gradients and weights cross PCIe in bf16, as stepgraph's
           d2h / h2d copies do.
  gpu      everything on the GPU: fp32 parameters, torch.autocast(bfloat16)
           compute, clip_grad_norm_(1.0), AdamW(fused=True). When it does not
           fit (torch.cuda.OutOfMemoryError) the result line says status=oom and
           the exit status is 0.
  deepspeed      DeepSpeed itself (import deepspeed; one process, its NCCL group of
                 one): deepspeed.initialize on the same model with --ds-config (the
                 config stepgraph's GPU benchmark runs, micro batch set to --batch)
                 less its SuperOffload keys: ZeRO-3 with the optimizer offloaded to the
                 CPU (DeepSpeedCPUAdam, JIT-built on first use), bf16. Each step:
                 loss = engine(x, y); engine.backward(loss); engine.step().
  superoffload   the same with the config as it is: offload_optimizer's
                 super_offload, ratio and cpuadam_cores_perc (DeepSpeed >= 0.18).
                 Without deepspeed importable these two modes exit 2 saying so.
All: activation checkpointing per decoder layer
(torch.utils.checkpoint.checkpoint(use_reentrant=False); --no-checkpointing
turns it off), attention by F.scaled_dot_product_attention(is_causal=True)
with enable_gqa=True where the torch has it (2.5+), else with the key/value
heads repeated, else (torch < 2.0) matmul-softmax with a causal mask.
The layer math is Hugging Face's modeling_llama.py (RMSNorm in fp32, rotary
embedding with the "llama3" frequency scaling of rope_scaling when the model
has it, SwiGLU MLP, tied or untied head, cross-entropy on fp32 logits).
AdamW: lr 1e-5, betas (0.9, 0.999), eps 1e-8, weight decay 0.01 (those of
configs/deepspeed/superoffload-llama-3.2-1b.json). Weights N(0, 0.02) with
torch.manual_seed(--seed), norms 1; data uniform random token ids from a
generator seeded with --seed (their content does not change the speed).

A timed step is zero_grad to the end of the optimizer step (with the CUDA
device synchronized before and after); the figures cover the steps after
the --warmup first ones. TFLOPS is the step log's (docs/flops.md, models/flops.c):
DeepSpeedExamples' estimate_transformer_tflops, B (2 c P s + 4 c L h s^2) per
step with P every parameter, c = 4 with activation checkpointing, 3 without,
divided by the mean step time; mfu = model TFLOPS / --peak as a fraction (0.40
= 40%), model FLOPs B (6 P_ne s + 6 L q s^2): P_ne without the input
embedding (kept when tied), q the query width, no recompute.

--device cpu is a smoke test (a tiny model, e.g. --model tiny-llama): the
same code on the CPU, no pinned memory, foreach AdamW in place of the fused
one when the torch has no fused CPU AdamW; it runs with torch 1.13.

Prints the loss of some steps and a line
  torch_gpu_info torch=V device=NAME attention=KIND threads=N params=P
      dtype=D checkpointing=0|1 peak_mem_gib=X first_loss=A last_loss=B
to stderr and, on stdout, one line:
  torch_gpu mode=M model=NAME seq=T batch=B steps=S warmup=W mean_step_ms=X
      median_step_ms=Y tokens_per_s=Z tflops=F mfu=P status=ok
(status=oom with n/a figures when it did not fit).
"""
import argparse
import json
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=("offload", "gpu", "deepspeed", "superoffload"),
                    required=True)
    ap.add_argument("--ds-config", default=os.path.join(
        ROOT, "configs", "deepspeed", "superoffload-llama-3.2-1b.json"),
        help="the DeepSpeed config of the deepspeed and superoffload modes")
    ap.add_argument("--model", default="llama-3.2-1b",
                    help="models/NAME.json or a path to a model JSON (default llama-3.2-1b)")
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=12, help="steps run, warm-up included")
    ap.add_argument("--warmup", type=int, default=3, help="first steps left out of the figures")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                    help="torch.set_num_threads (CPU AdamW); default: all cores")
    ap.add_argument("--peak", type=float, default=989.0,
                    help="GPU dense bf16 peak in TFLOP/s for mfu (default 989, H100 SXM)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16",
                    help="compute dtype (default bf16; fp32 is for --device cpu smoke runs)")
    ap.add_argument("--attention", choices=("auto", "sdpa-gqa", "sdpa-repeat", "matmul"),
                    default="auto")
    ap.add_argument("--no-checkpointing", dest="checkpointing", action="store_false",
                    help="no activation checkpointing (c = 3 in the TFLOPS formula)")
    ap.add_argument("--seed", type=int, default=42)
    a = ap.parse_args(argv)
    if a.seq < 1 or a.batch < 1 or a.threads < 1 or a.steps < 1:
        ap.error("--seq, --batch, --threads and --steps must be >= 1")
    if a.warmup < 0 or a.warmup >= a.steps:
        ap.error("need 0 <= --warmup < --steps (got warmup %d, steps %d)" % (a.warmup, a.steps))
    if not a.peak > 0:
        ap.error("--peak must be > 0")
    if a.mode in ("deepspeed", "superoffload"):
        try:
            with open(a.ds_config) as f:
                json.load(f)
        except (OSError, ValueError) as e:
            ap.error("--ds-config %s: %s" % (a.ds_config, e))
    if a.device == "cuda" and a.dtype != "bf16":
        ap.error("--dtype fp32 is for --device cpu only (the GPU modes compute in bf16)")
    return a


def model_path(name):
    """NAME.json in $STEPGRAPH_MODELS_DIR or models/, or a path as given."""
    if os.path.isfile(name):
        return name
    dirs = [d for d in (os.environ.get("STEPGRAPH_MODELS_DIR"), os.path.join(ROOT, "models"))
            if d]
    for d in dirs:
        p = os.path.join(d, name if name.endswith(".json") else name + ".json")
        if os.path.isfile(p):
            return p
    raise SystemExit("torch_gpu_bench.py: no model %r (looked in %s)" % (name, ", ".join(dirs)))


def load_model_config(name):
    path = model_path(name)
    with open(path) as f:
        cfg = json.load(f)
    if cfg.get("architecture", "llama") != "llama":
        raise SystemExit("torch_gpu_bench.py: %s: only Llama models (architecture %r)" %
                         (path, cfg.get("architecture")))
    for key in ("num_local_experts", "num_experts", "sliding_window", "layer_types"):
        if cfg.get(key):
            raise SystemExit("torch_gpu_bench.py: %s: %s is not supported here" % (path, key))
    cfg.setdefault("name", os.path.splitext(os.path.basename(path))[0])
    return cfg


def step_flops(P, L, h, B, s, checkpointing):
    """models/flops.c sg_flops_seed: the step log's TFLOPS times seconds * 1e12."""
    c = 4.0 if checkpointing else 3.0
    return B * (2.0 * c * P * s + 4.0 * c * L * h * s * s)


def model_flops(P_ne, L, q, B, s):
    """models/flops.c sg_flops_model: model FLOPs, what MFU divides."""
    return B * (6.0 * P_ne * s + 6.0 * L * q * s * s)


def rope_inv_freq(D, theta, scaling):
    """inv_freq (D/2 values, float64 list) as transformers'
    _compute_default_rope_parameters / _compute_llama3_parameters and
    codelets/cpu/rope.c sg_rope_table_llama3 compute it."""
    inv = [theta ** (-(2.0 * i) / D) for i in range(D // 2)]
    if not scaling:
        return inv
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        return inv
    if kind != "llama3":
        raise SystemExit("torch_gpu_bench.py: rope_scaling type %r is not supported" % kind)
    factor = float(scaling.get("factor", 8.0))
    low = float(scaling.get("low_freq_factor", 1.0))
    high = float(scaling.get("high_freq_factor", 4.0))
    orig = float(scaling.get("original_max_position_embeddings", 8192))
    low_wavelen, high_wavelen = orig / low, orig / high
    out = []
    for f in inv:
        wavelen = 2.0 * math.pi / f
        if wavelen > low_wavelen:  # long wavelengths: interpolated
            f = f / factor
        elif wavelen >= high_wavelen:  # between: blend of scaled and unscaled
            smooth = (orig / wavelen - low) / (high - low)
            f = (1.0 - smooth) * f / factor + smooth * f
        out.append(f)
    return out


# Only parse_args, model_path, load_model_config, step_flops and rope_inv_freq
# above run without torch (the driver and the tests can import them).

def build_model(cfg, T, dev, cdt, attention_kind="auto", checkpointing=True, pdt=None):
    """The model of a model JSON for sequences of T tokens, parameters in pdt
    (default fp32) on dev, its forward (tokens, targets) -> mean cross-entropy;
    attention_kind auto picks the best this torch has for compute dtype cdt.
    Returns (model, attention kind, its label)."""
    import torch
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint
    pdt = pdt or torch.float32  # offload casts the GPU copy to bf16 after the init
    half = (torch.bfloat16, torch.float16)  # upcast to fp32 where HF does (fp64: tests)

    H, V, L = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    Hq = cfg["num_attention_heads"]
    Hkv = cfg.get("num_key_value_heads") or Hq
    D = cfg.get("head_dim") or H // Hq
    I, eps = cfg["intermediate_size"], cfg["rms_norm_eps"]
    tied = bool(cfg.get("tie_word_embeddings"))
    abias, mbias = bool(cfg.get("attention_bias")), bool(cfg.get("mlp_bias"))

    # ---- attention: pick what this torch offers --------------------------------
    have_sdpa = hasattr(F, "scaled_dot_product_attention")

    def sdpa_gqa_works():
        if not have_sdpa:
            return False
        try:
            q = torch.zeros(1, 4, 8, 16, device=dev, dtype=cdt)
            k = torch.zeros(1, 2, 8, 16, device=dev, dtype=cdt)
            F.scaled_dot_product_attention(q, k, k, is_causal=True, enable_gqa=True)
            return True
        except (TypeError, RuntimeError):
            return False

    attn = attention_kind
    if attn == "auto":
        attn = "sdpa-gqa" if Hq == Hkv and have_sdpa else (
            "sdpa-gqa" if sdpa_gqa_works() else "sdpa-repeat" if have_sdpa else "matmul")
    elif attn.startswith("sdpa") and not have_sdpa:
        raise SystemExit("torch_gpu_bench.py: torch %s has no scaled_dot_product_attention"
                         % torch.__version__)
    elif attn == "sdpa-gqa" and Hq != Hkv and not sdpa_gqa_works():
        raise SystemExit("torch_gpu_bench.py: torch %s: scaled_dot_product_attention has no "
                         "enable_gqa" % torch.__version__)
    rep = Hq // Hkv
    attn_label = "sdpa" if attn.startswith("sdpa") and rep == 1 else attn

    def attention(q, k, v):  # (B, Hq, T, D), (B, Hkv, T, D) x 2 -> (B, T, Hq*D)
        if attn == "sdpa-gqa":
            o = (F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
                 if rep > 1 else F.scaled_dot_product_attention(q, k, v, is_causal=True))
        else:
            if rep > 1:  # repeat_kv
                k = k.repeat_interleave(rep, dim=1)
                v = v.repeat_interleave(rep, dim=1)
            if attn == "sdpa-repeat":
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:  # eager attention: matmul, causal mask, softmax in fp32
                s = (q @ k.transpose(2, 3)) * (q.shape[-1] ** -0.5)
                mask = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
                s = s.masked_fill(mask, float("-inf"))
                o = torch.softmax(s, dim=-1, dtype=torch.float32 if q.dtype in half
                                  else q.dtype).to(q.dtype) @ v
        return o.transpose(1, 2).reshape(q.shape[0], T, Hq * D)

    # ---- the model ----------------------------------------------------------------
    def rms_norm(x, w):  # LlamaRMSNorm: in fp32, back to the input dtype, times w
        dt = x.dtype
        x = x.float() if dt in half else x
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        return w * x.to(dt)

    def rotate_half(x):
        n = x.shape[-1] // 2
        return torch.cat((-x[..., n:], x[..., :n]), dim=-1)

    def lin(i, o, bias):
        return torch.nn.Linear(i, o, bias=bias, device=dev, dtype=pdt)

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.input_layernorm = torch.nn.Parameter(torch.ones(H, device=dev, dtype=pdt))
            self.q_proj = lin(H, Hq * D, abias)
            self.k_proj = lin(H, Hkv * D, abias)
            self.v_proj = lin(H, Hkv * D, abias)
            self.o_proj = lin(Hq * D, H, abias)
            self.post_attention_layernorm = torch.nn.Parameter(
                torch.ones(H, device=dev, dtype=pdt))
            self.gate_proj = lin(H, I, mbias)
            self.up_proj = lin(H, I, mbias)
            self.down_proj = lin(I, H, mbias)

        def forward(self, x, cos, sin):
            b = x.shape[0]
            n1 = rms_norm(x, self.input_layernorm)
            q = self.q_proj(n1).view(b, T, Hq, D).transpose(1, 2)
            k = self.k_proj(n1).view(b, T, Hkv, D).transpose(1, 2)
            v = self.v_proj(n1).view(b, T, Hkv, D).transpose(1, 2)
            cos, sin = cos.to(q.dtype), sin.to(q.dtype)  # as HF: tables in the compute dtype
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            h = x + self.o_proj(attention(q, k, v.to(q.dtype)))
            n2 = rms_norm(h, self.post_attention_layernorm)
            return h + self.down_proj(F.silu(self.gate_proj(n2)) * self.up_proj(n2))

    class Decoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = torch.nn.Embedding(V, H, device=dev, dtype=pdt)
            self.layers = torch.nn.ModuleList(Layer() for _ in range(L))
            self.norm = torch.nn.Parameter(torch.ones(H, device=dev, dtype=pdt))
            self.lm_head = None if tied else lin(H, V, False)
            inv = torch.tensor(rope_inv_freq(D, float(cfg["rope_theta"]),
                                             cfg.get("rope_scaling")), dtype=torch.float64)
            ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
            emb = torch.cat((ang, ang), dim=-1)  # (T, D), HF's cat(freqs, freqs)
            # plain attributes, not buffers: .to(bf16) must leave them fp32
            tdt = torch.float64 if pdt == torch.float64 else torch.float32
            self.cos = emb.cos().to(dev, tdt)
            self.sin = emb.sin().to(dev, tdt)

        def forward(self, tokens, targets):
            x = self.embed_tokens(tokens)
            for ly in self.layers:
                if checkpointing:
                    x = checkpoint(ly, x, self.cos, self.sin, use_reentrant=False)
                else:
                    x = ly(x, self.cos, self.sin)
            x = rms_norm(x, self.norm)
            w = self.embed_tokens.weight if tied else self.lm_head.weight
            logits = F.linear(x, w)
            if logits.dtype in half:  # HF: the loss on fp32 logits
                logits = logits.float()
            return F.cross_entropy(logits.view(-1, V), targets.reshape(-1))

    model = Decoder()
    return model, attn, attn_label


SUPER_OFFLOAD_KEYS = ("super_offload", "ratio", "cpuadam_cores_perc")


def deepspeed_config(a):
    """--ds-config with the micro batch of --batch; SuperOffload's keys kept in the
    superoffload mode only."""
    with open(a.ds_config) as f:
        c = json.load(f)
    c["train_micro_batch_size_per_gpu"] = a.batch
    c["gradient_accumulation_steps"] = 1
    c["wall_clock_breakdown"] = False
    c["steps_per_print"] = 10 ** 9
    off = c.setdefault("zero_optimization", {}).setdefault("offload_optimizer", {})
    if a.mode == "deepspeed":
        for k in SUPER_OFFLOAD_KEYS:
            off.pop(k, None)
    elif not off.get("super_offload"):
        raise SystemExit("torch_gpu_bench.py: %s: offload_optimizer.super_offload is not set"
                         % a.ds_config)
    return c


def start_deepspeed(a, model, on_gpu):
    """deepspeed.initialize in one process (its own process group of one)."""
    try:
        import deepspeed
    except ImportError as e:
        print("torch_gpu_bench.py: the %s mode needs deepspeed (%s)" % (a.mode, e),
              file=sys.stderr)
        sys.exit(2)
    for k, v in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"),
                 ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29571")):
        os.environ.setdefault(k, v)
    deepspeed.init_distributed(dist_backend="nccl" if on_gpu else "gloo")
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                           config=deepspeed_config(a))
    return engine, deepspeed.__version__


def main(argv):
    a = parse_args(argv)
    cfg = load_model_config(a.model)
    # before torch starts its thread pools
    os.environ.setdefault("OMP_NUM_THREADS", str(a.threads))
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(a.threads))
    import torch

    torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("torch_gpu_bench.py: torch %s sees no CUDA device (--device cpu is the "
                         "smoke test)" % torch.__version__)
    cdt = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    on_gpu = dev.type == "cuda"

    def sync():
        if on_gpu:
            torch.cuda.synchronize()

    B, T = a.batch, a.seq
    H, V, L = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]

    oom_types = tuple(t for t in (getattr(torch.cuda, "OutOfMemoryError", None),) if t)

    def is_oom(e):
        return isinstance(e, oom_types) or (isinstance(e, RuntimeError) and
                                            "out of memory" in str(e))

    def report_oom(e, what):
        print("torch_gpu_bench.py: %s mode does not fit on %s (%s): %s" %
              (a.mode, dev_name, what, str(e).split("\n")[0]), file=sys.stderr)
        print("torch_gpu mode=%s model=%s seq=%d batch=%d steps=%d warmup=%d mean_step_ms=n/a "
              "median_step_ms=n/a tokens_per_s=n/a tflops=n/a mfu=n/a status=oom" %
              (a.mode, cfg["name"], T, B, a.steps, a.warmup))
        sys.stdout.flush()
        return 0

    dev_name = torch.cuda.get_device_name(dev) if on_gpu else "cpu"
    torch.manual_seed(a.seed)
    try:
        model, attn, attn_label = build_model(cfg, T, dev, cdt, a.attention, a.checkpointing)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if p.dim() == 1 and "norm" in name:
                    p.fill_(1.0)
                elif name.endswith("bias"):
                    p.zero_()
                else:
                    p.normal_(0.0, 0.02)
        params = list(model.parameters())  # a tied weight once
        nparams = sum(p.numel() for p in params)
        g = torch.Generator().manual_seed(a.seed)
        batches = []
        for _ in range(a.steps):
            t = torch.randint(0, V, (B, T + 1), generator=g)
            batches.append((t[:, :-1].contiguous().to(dev), t[:, 1:].contiguous().to(dev)))

        adam = dict(lr=1e-5, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
        if a.mode in ("deepspeed", "superoffload"):
            engine, ds_version = start_deepspeed(a, model, on_gpu)
        elif a.mode == "offload":
            pin = on_gpu
            # fp32 master weights and gradients on the host, AdamW on the CPU
            masters = []
            for p in params:
                m = p.detach().to("cpu", copy=True)
                masters.append(m.pin_memory() if pin else m)
            for m in masters:
                m.grad = torch.zeros_like(m)
            # one bf16 (compute dtype) buffer per tensor: gradients down, weights up
            stage = [torch.empty(m.shape, dtype=cdt, pin_memory=pin) for m in masters]
            model.to(cdt)  # the GPU copy for compute
            params = list(model.parameters())
            opt = torch.optim.AdamW(masters, foreach=True, **adam)
        else:
            if on_gpu:
                opt = torch.optim.AdamW(params, fused=True, **adam)
                opt_kind = "fused"
            else:
                try:
                    opt = torch.optim.AdamW(params, fused=True, **adam)
                    opt_kind = "fused"
                except (TypeError, RuntimeError, ValueError):
                    opt = torch.optim.AdamW(params, foreach=True, **adam)
                    opt_kind = "foreach"
            autocast_dt = cdt
    except Exception as e:  # noqa: BLE001
        if is_oom(e):
            return report_oom(e, "setting up")
        raise

    def step_offload(x, y):
        for p in params:
            p.grad = None
        loss = model(x, y)
        loss.backward()
        with torch.no_grad():
            for p, buf in zip(params, stage):
                if p.grad is None:
                    buf.zero_()
                else:
                    buf.copy_(p.grad, non_blocking=True)
            sync()
            for m, buf in zip(masters, stage):
                m.grad.copy_(buf)
        torch.nn.utils.clip_grad_norm_(masters, 1.0)
        opt.step()
        with torch.no_grad():
            for m, buf in zip(masters, stage):
                buf.copy_(m)
            for p, buf in zip(params, stage):
                p.copy_(buf, non_blocking=True)
        sync()
        return loss

    def step_gpu(x, y):
        opt.zero_grad(set_to_none=True)
        if autocast_dt == torch.float32:  # --device cpu --dtype fp32: no autocast
            loss = model(x, y)
        else:
            with torch.autocast(device_type=dev.type, dtype=autocast_dt):
                loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sync()
        return loss

    def step_deepspeed(x, y):
        loss = engine(x, y)
        engine.backward(loss)
        engine.step()
        sync()
        return loss

    if a.mode in ("deepspeed", "superoffload"):
        step = step_deepspeed
        what = "DeepSpeed %s, ZeRO-3, optimizer offloaded to the CPU%s (%s)" % (
            ds_version, ", SuperOffload" if a.mode == "superoffload" else "", a.ds_config)
    elif a.mode == "offload":
        step = step_offload
        what = "%s params on %s, fp32 master + AdamW(foreach) on the CPU" % (a.dtype, dev.type)
    else:
        step = step_gpu
        what = "fp32 params, %s, AdamW(%s) on %s" % (
            "autocast bf16" if a.dtype == "bf16" else "no autocast", opt_kind, dev.type)
    print("torch %s on %s, %d thread(s): %s, %d parameters, batch %d x %d, %s attention, "
          "checkpointing %s; %s" % (torch.__version__, dev_name, a.threads, cfg["name"], nparams,
                                    B, T, attn_label, "on" if a.checkpointing else "off", what),
          file=sys.stderr)
    if on_gpu:
        torch.cuda.reset_peak_memory_stats()
    times, losses = [], []
    try:
        for i, (x, y) in enumerate(batches):
            sync()
            t0 = time.perf_counter()
            loss = step(x, y)
            sync()
            times.append(time.perf_counter() - t0)
            losses.append(loss.item())
            if i < 3 or (i + 1) % 10 == 0 or i + 1 == a.steps:
                print("Step %d | Loss: %.4f | Time: %.2f ms" % (i + 1, losses[-1], times[-1] * 1e3),
                      file=sys.stderr)
    except Exception as e:  # noqa: BLE001
        if is_oom(e):
            return report_oom(e, "step %d" % (len(times) + 1))
        raise
    timed = times[a.warmup:]
    mean = sum(timed) / len(timed)
    st = sorted(timed)
    median = (st[(len(st) - 1) // 2] + st[len(st) // 2]) / 2
    tflops = step_flops(nparams, L, H, B, T, a.checkpointing) / mean / 1e12
    p_ne = nparams if cfg.get("tie_word_embeddings") else nparams - V * H
    q = cfg["num_attention_heads"] * (cfg.get("head_dim") or H // cfg["num_attention_heads"])
    model_tflops = model_flops(p_ne, L, q, B, T) / mean / 1e12
    peak_gib = torch.cuda.max_memory_allocated() / 2 ** 30 if on_gpu else float("nan")
    print("torch_gpu_info torch=%s device=%s attention=%s threads=%d params=%d dtype=%s "
          "checkpointing=%d peak_mem_gib=%.2f first_loss=%.4f last_loss=%.4f" %
          (torch.__version__, dev_name.replace(" ", "_"), attn_label, a.threads, nparams, a.dtype,
           int(a.checkpointing), peak_gib, losses[0], losses[-1]), file=sys.stderr)
    print("torch_gpu mode=%s model=%s seq=%d batch=%d steps=%d warmup=%d mean_step_ms=%.3f "
          "median_step_ms=%.3f tokens_per_s=%.1f tflops=%.2f mfu=%.4f status=ok" %
          (a.mode, cfg["name"], T, B, a.steps, a.warmup, mean * 1e3, median * 1e3,
           B * T / mean, tflops, model_tflops / a.peak))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
