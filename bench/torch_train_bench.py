#!/usr/bin/python3
"""The training step of `stepgraph run` (configs/default.json) written in plain
PyTorch, timed on the same cores: the yardstick of scripts/bench_train.sh.

Usage: torch_train_bench.py [--threads N] [--steps S] [--warmup W]
                            [--model models/tiny-llama.json] [--data TEXT]
                            [--seq 256] [--micro-batch 4] [--accum 1] [--seed 42]
                            [--compile] [--eager-attention] [--bf16] [--losses FILE]

Same workload as stepgraph's run, step for step:
  model    the decoder of the model file (Llama block, tied embeddings as
           tiny-llama or a separate lm_head as bench-3m), the layer math of
           tests/torch_model_ref.py (RMSNorm, rotary embedding, grouped-query
           attention with repeat_kv, SwiGLU) in an nn.Module with bias-free
           nn.Linear; fp32, or with --bf16 the forward and loss under
           torch.autocast("cpu", torch.bfloat16) (PyTorch's bf16 mixed
           precision: bf16 matrix products, oneDNN's AMX kernels where the CPU
           has them; fp32 parameters, gradients and optimizer)
  batch    --accum micro-batches of --micro-batch sequences per optimizer step
           (DeepSpeed's train_micro_batch_size_per_gpu x
           gradient_accumulation_steps): each micro-batch's mean loss / accum is
           back-propagated, the gradients add up, then one clipped update; the
           loss shown is the mean over the micro-batches, as stepgraph's.
           --batch B is --micro-batch B --accum 1 (the old spelling)
  weights  stepgraph's initialisation (runtime/io/weights.c sg_weights_init:
           N(0, 0.02) from a counter-based splitmix64 keyed by seed and tensor
           name, RMSNorm gains 1), so both start from the same point
  data     the same text as byte tokens, cut into windows of T+1 bytes at
           multiples of T and visited in the same shuffled order
           (runtime/io/data_loader.c: xoshiro256** Fisher-Yates, seed + epoch)
  update   torch.optim.AdamW(foreach=True), lr 1e-3, betas (0.9, 0.95),
           eps 1e-8, weight decay 0.01; stepgraph's WarmupLR (linear over 20
           steps, DeepSpeed's convention of lr 0 on the first update, see
           runtime/train/lr_schedule.c) set on the param group before each step;
           torch.nn.utils.clip_grad_norm_(1.0)
Attention: torch 1.13 has no F.scaled_dot_product_attention (it came in 2.0),
so it is the matmul-softmax attention with a causal mask from
torch_model_ref.py, what a 1.13 user writes; with torch >= 2.0 SDPA
(is_causal=True) is used unless --eager-attention.
--compile: the model goes through torch.compile (torch >= 2, the inductor
backend: C++ kernels built with the system compiler during the first steps,
which the warm-up steps leave out); when it fails the run goes on in eager
mode and the output line says compile=failed.

Threads: torch.set_num_threads(N), and OPENBLAS_NUM_THREADS / OMP_NUM_THREADS
are set to N before torch is imported (Debian's torch does its matrix
products in the system OpenBLAS, whose own thread pool set_num_threads does
not size). A timed step is zero_grad + forward + backward + clipping +
optimizer step (the batch is built beforehand, as stepgraph's step time also
leaves out reading the batch); the figures cover the steps after the W
warm-up steps, like stepgraph's summary.

Data parallel (--dist ddp|fsdp, launched by torchrun: `python -m
torch.distributed.run --nproc_per_node N bench/torch_train_bench.py --dist ddp
--threads 1 ...`): the gloo backend; the global batch of a step is N x accum x
micro-batch sequences, the loader's draws of micro_batch sequences in order,
draw k*N + r going to rank r at micro-step k (stepgraph's order, docs/ranks.md);
the loss shown is the mean over every rank's micro-batches. ddp:
DistributedDataParallel, gradients all-reduced once per step (no_sync on the
micro-steps before the last); fsdp: FSDP2's fully_shard on every layer and the
root (parameters, gradients and optimizer state sharded, ZeRO-3), gradient sync
on the last micro-step only (torch >= 2.4). Only rank 0 prints.
--bind-rank pins rank r to the r-th allowed core (one core per rank).

Prints the loss of every 10th step to stderr (--losses FILE: every step's, to
FILE) and, on stdout, one line:
  torch_train torch=V dist=none|ddp|fsdp ranks=N threads=N steps=S warmup=W tokens_per_s=X
      mean_step_ms=Y median_step_ms=M min_step_ms=Z first_loss=A last_loss=B attention=KIND
      micro_batch=MB accum=GA compile=no|yes|failed dtype=fp32|bf16
"""
import argparse
import contextlib
import json
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "tiny-llama.json"))
    ap.add_argument("--data", default="/usr/share/vim/vim90/doc/version8.txt")
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=None,
                    help="sequences per step in one micro-batch (= --micro-batch B --accum 1)")
    ap.add_argument("--micro-batch", type=int, default=None)
    ap.add_argument("--accum", type=int, default=1)
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--bf16", action="store_true",
                    help="bf16 mixed precision: forward and loss under torch.autocast('cpu', "
                         "bfloat16), fp32 parameters, gradients and AdamW")
    ap.add_argument("--eager-attention", action="store_true",
                    help="matmul-softmax attention even when SDPA exists")
    ap.add_argument("--losses", metavar="FILE",
                    help="write every step's loss there, one a line (full precision)")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--dist", choices=("none", "ddp", "fsdp"), default="none",
                    help="data-parallel over the ranks torchrun started (gloo)")
    ap.add_argument("--bind-rank", action="store_true",
                    help="--dist: pin rank r to the r-th core this process may use")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup_lr_steps", type=int, default=20)
    a = ap.parse_args(argv)
    if a.threads < 1 or a.steps < 1 or a.warmup < 0 or a.warmup >= a.steps:
        ap.error("need threads >= 1, steps >= 1 and 0 <= warmup < steps")
    if a.batch is not None and a.micro_batch is not None:
        ap.error("give --batch or --micro-batch, not both")
    a.micro_batch = a.batch if a.batch is not None else (a.micro_batch or 4)
    if a.micro_batch < 1 or a.accum < 1 or a.seq < 1:
        ap.error("need --micro-batch >= 1, --accum >= 1 and --seq >= 1")
    return a


ARGS = parse_args(sys.argv[1:])
# before torch (and its BLAS) start their thread pools
os.environ.setdefault("OPENBLAS_NUM_THREADS", str(ARGS.threads))
os.environ.setdefault("OMP_NUM_THREADS", str(ARGS.threads))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "tests"))  # torch_model_ref.py, the tests' reference model
from torch_model_ref import apply_rope, attention, rms_norm  # noqa: E402

M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


# ---- stepgraph's initialisation (runtime/io/weights.c) ----------------------------

def mix64_np(z):
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def fnv1a(s):
    h = 0xCBF29CE484222325
    for c in s.encode():
        h = ((h ^ c) * 0x100000001B3) & M64
    return h


def sg_init(name, shape, seed, std=0.02):
    n = int(np.prod(shape))
    if name.endswith("norm.weight"):
        return torch.ones(shape)
    if name.endswith("bias"):
        return torch.zeros(shape)
    key = mix64((seed ^ fnv1a(name)) & M64)
    j = np.arange((n + 1) // 2, dtype=np.uint64)
    with np.errstate(over="ignore"):
        a = mix64_np(np.uint64(key) + (np.uint64(2) * j + np.uint64(1)) * np.uint64(GOLDEN))
        b = mix64_np(np.uint64(key) + (np.uint64(2) * j + np.uint64(2)) * np.uint64(GOLDEN))
    u1 = ((a >> np.uint64(11)) + np.uint64(1)).astype(np.float64) * 2.0 ** -53
    u2 = (b >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
    r = np.sqrt(-2.0 * np.log(u1)) * std
    x = np.empty(2 * len(j), dtype=np.float64)
    x[0::2] = r * np.cos(2 * math.pi * u2)
    x[1::2] = r * np.sin(2 * math.pi * u2)
    return torch.from_numpy(x[:n].astype(np.float32).reshape(shape))


# ---- stepgraph's batches (runtime/io/data_loader.c) -------------------------------

class Xoshiro:
    def __init__(self, seed):
        x = seed & M64
        self.s = []
        for _ in range(4):
            x = (x + GOLDEN) & M64
            self.s.append(mix64(x))

    def next(self):
        s = self.s
        rotl = lambda v, k: ((v << k) | (v >> (64 - k))) & M64
        out = (rotl((s[1] * 5) & M64, 7) * 9) & M64
        t = (s[1] << 17) & M64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        return out

    def below(self, n):  # Lemire, as rng_below
        m = (self.next() >> 32) * n
        lo = m & 0xFFFFFFFF
        if lo < n:
            t = ((1 << 32) - n) % n
            while lo < t:
                m = (self.next() >> 32) * n
                lo = m & 0xFFFFFFFF
        return m >> 32


def permutation(n, seed):
    perm = list(range(n))
    r = Xoshiro(seed)
    for i in range(n - 1, 0, -1):
        j = r.below(i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    return perm


class Batches:
    def __init__(self, path, B, T, seed):
        self.tok = np.fromfile(path, dtype=np.uint8).astype(np.int64)
        self.B, self.T, self.seed = B, T, seed
        self.nwindows = (len(self.tok) - 1) // T
        self.index, self.epoch, self.perm_epoch, self.perm = 0, 0, None, None

    def next(self):
        B, T = self.B, self.T
        x = np.empty((B, T), dtype=np.int64)
        y = np.empty((B, T), dtype=np.int64)
        for b in range(B):
            k = self.index + b
            ep = self.epoch + k // self.nwindows
            k %= self.nwindows
            if self.perm_epoch != ep:
                self.perm, self.perm_epoch = permutation(self.nwindows, self.seed + ep), ep
            start = self.perm[k] * T
            x[b] = self.tok[start:start + T]
            y[b] = self.tok[start + 1:start + T + 1]
        self.index += B
        self.epoch += self.index // self.nwindows
        self.index %= self.nwindows
        return torch.from_numpy(x), torch.from_numpy(y)


# ---- the model -------------------------------------------------------------------

HAVE_SDPA = hasattr(F, "scaled_dot_product_attention") and not ARGS.eager_attention


class Layer(torch.nn.Module):
    def __init__(self, H, Hq, Hkv, D, I, eps):
        super().__init__()
        self.Hq, self.Hkv, self.D, self.eps = Hq, Hkv, D, eps
        self.input_layernorm = torch.nn.Parameter(torch.ones(H))
        self.q_proj = torch.nn.Linear(H, Hq * D, bias=False)
        self.k_proj = torch.nn.Linear(H, Hkv * D, bias=False)
        self.v_proj = torch.nn.Linear(H, Hkv * D, bias=False)
        self.o_proj = torch.nn.Linear(Hq * D, H, bias=False)
        self.post_attention_layernorm = torch.nn.Parameter(torch.ones(H))
        self.gate_proj = torch.nn.Linear(H, I, bias=False)
        self.up_proj = torch.nn.Linear(H, I, bias=False)
        self.down_proj = torch.nn.Linear(I, H, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        n1 = rms_norm(x, self.input_layernorm, self.eps)
        q = self.q_proj(n1).view(B, T, self.Hq, self.D).transpose(1, 2)
        k = self.k_proj(n1).view(B, T, self.Hkv, self.D).transpose(1, 2)
        v = self.v_proj(n1).view(B, T, self.Hkv, self.D).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if HAVE_SDPA:
            rep = self.Hq // self.Hkv
            att = F.scaled_dot_product_attention(q, k.repeat_interleave(rep, dim=1),
                                                 v.repeat_interleave(rep, dim=1),
                                                 is_causal=True)
            att = att.transpose(1, 2).reshape(B, T, self.Hq * self.D)
        else:
            att = attention(q, k, v, 0)  # torch_model_ref: matmul, causal mask, softmax
        h = x + self.o_proj(att)
        n2 = rms_norm(h, self.post_attention_layernorm, self.eps)
        return h + self.down_proj(F.silu(self.gate_proj(n2)) * self.up_proj(n2))


class Decoder(torch.nn.Module):
    def __init__(self, cfg, T):
        super().__init__()
        H, V = cfg["hidden_size"], cfg["vocab_size"]
        Hq, Hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        D = cfg.get("head_dim") or H // Hq
        eps, theta = cfg["rms_norm_eps"], cfg["rope_theta"]
        if cfg.get("architecture") != "llama":
            raise SystemExit("torch_train_bench.py: only Llama models (got %r)" %
                             cfg.get("architecture"))
        self.eps = eps
        self.tied = bool(cfg.get("tie_word_embeddings"))
        self.embed_tokens = torch.nn.Embedding(V, H)
        # untied (bench-3m): lm_head is its own weight, initialised under its own name
        self.lm_head = None if self.tied else torch.nn.Linear(H, V, bias=False)
        self.layers = torch.nn.ModuleList(
            Layer(H, Hq, Hkv, D, cfg["intermediate_size"], eps)
            for _ in range(cfg["num_hidden_layers"]))
        self.norm = torch.nn.Parameter(torch.ones(H))
        inv = theta ** (-np.arange(0, D, 2, dtype=np.float64) / D)
        ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]
        emb = np.concatenate([ang, ang], axis=-1)
        self.register_buffer("cos", torch.from_numpy(np.cos(emb)).float())
        self.register_buffer("sin", torch.from_numpy(np.sin(emb)).float())

    def hf_named_parameters(self):
        yield "model.embed_tokens.weight", self.embed_tokens.weight
        for l, ly in enumerate(self.layers):
            p = f"model.layers.{l}."
            yield p + "input_layernorm.weight", ly.input_layernorm
            for s in ("q_proj", "k_proj", "v_proj", "o_proj"):
                yield p + f"self_attn.{s}.weight", getattr(ly, s).weight
            yield p + "post_attention_layernorm.weight", ly.post_attention_layernorm
            for s in ("gate_proj", "up_proj", "down_proj"):
                yield p + f"mlp.{s}.weight", getattr(ly, s).weight
        yield "model.norm.weight", self.norm
        if self.lm_head is not None:
            yield "lm_head.weight", self.lm_head.weight

    def forward(self, tokens, targets):
        x = self.embed_tokens(tokens)
        for ly in self.layers:
            x = ly(x, self.cos, self.sin)
        head = self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        logits = rms_norm(x, self.norm, self.eps) @ head.t()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


# ---- training ----------------------------------------------------------------

def lr_at(update, lr, warmup):
    """runtime/train/lr_schedule.c sg_lr_at (WarmupLR, linear, min 0) for update
    number `update` counted from 0."""
    it = update - 1
    if it < 0:
        return 0.0
    w = max(warmup, 2)
    return lr * (it / w if it < w else 1.0)


def main():
    a = ARGS
    torch.set_num_threads(a.threads)
    world, rank = 1, 0
    if a.dist != "none":
        import torch.distributed as dist
        dist.init_process_group("gloo")
        world, rank = dist.get_world_size(), dist.get_rank()
        if a.bind_rank:
            cores = sorted(os.sched_getaffinity(0))
            os.sched_setaffinity(0, {cores[rank % len(cores)]})
    if torch.get_num_threads() != a.threads:
        sys.exit("torch.set_num_threads(%d) gave %d" % (a.threads, torch.get_num_threads()))
    with open(a.model) as f:
        cfg = json.load(f)
    model = Decoder(cfg, a.seq)
    with torch.no_grad():
        for name, p in model.hf_named_parameters():
            p.copy_(sg_init(name, tuple(p.shape), a.seed))
    nparams = sum(p.numel() for p in model.parameters())
    if a.dist == "ddp":
        model = torch.nn.parallel.DistributedDataParallel(model)
    elif a.dist == "fsdp":
        try:
            from torch.distributed.fsdp import fully_shard
        except ImportError:
            sys.exit("torch_train_bench.py: --dist fsdp needs FSDP2 (torch >= 2.4), torch %s" %
                     torch.__version__)
        for ly in model.layers:
            fully_shard(ly)
        fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.01, foreach=True)
    # The loader hands out micro-batches in order, so accum draws of micro_batch
    # sequences are the same sequences as one draw of micro_batch x accum.
    data = Batches(a.data, a.micro_batch, a.seq, a.seed)
    # micro-step k of rank r: draw k * world + r of the step's world x accum draws
    batches = [[[data.next() for _ in range(world)][rank] for _ in range(a.accum)]
                for _ in range(a.steps)]
    kind = "sdpa" if HAVE_SDPA else "matmul-softmax"
    fwd, compiled = model, "no"
    if a.compile:
        if not hasattr(torch, "compile"):
            print("torch %s has no torch.compile: eager mode" % torch.__version__,
                  file=sys.stderr)
            compiled = "failed"
        else:
            fwd, compiled = torch.compile(model), "yes"
    if rank:
        sys.stderr = open(os.devnull, "w")
    print("torch %s, %d thread(s), %s: %d parameters, %d micro-batch(es) of %d x %d, "
          "%s attention, compile %s, %s" %
          (torch.__version__, a.threads, os.path.basename(a.model), nparams, a.accum,
           a.micro_batch, a.seq, kind, compiled, "bf16 autocast" if a.bf16 else "fp32"),
          file=sys.stderr)

    def sync_grads(on):
        if a.dist == "ddp":
            return contextlib.nullcontext() if on else model.no_sync()
        if a.dist == "fsdp":
            model.set_requires_gradient_sync(on)
        return contextlib.nullcontext()

    def autocast():
        if not a.bf16:
            return contextlib.nullcontext()
        return torch.autocast("cpu", dtype=torch.bfloat16)

    def step(mb):
        opt.zero_grad(set_to_none=True)
        total = torch.zeros(())
        for k, (x, y) in enumerate(mb):
            with sync_grads(k + 1 == len(mb)), autocast():
                loss = fwd(x, y)
                (loss / a.accum).backward()
            total += loss.detach()
        if world > 1:
            dist.all_reduce(total)
        return total.item() / (a.accum * world)

    times, losses = [], []
    for i, mb in enumerate(batches):
        for g in opt.param_groups:
            g["lr"] = lr_at(i, a.lr, a.warmup_lr_steps)
        t0 = time.perf_counter()
        if i == 0 and compiled == "yes":
            # torch.compile builds on the first call: fall back to eager if it cannot
            try:
                loss = step(mb)
            except Exception as e:  # noqa: BLE001 - any compiler failure
                print("torch.compile failed (%s: %s): eager mode" %
                      (type(e).__name__, str(e).splitlines()[0][:200] if str(e) else ""),
                      file=sys.stderr)
                fwd, compiled = model, "failed"
                loss = step(mb)
        else:
            loss = step(mb)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append(time.perf_counter() - t0)
        losses.append(loss)
        if not math.isfinite(loss):
            sys.exit("torch_train_bench.py: loss %r at step %d" % (loss, i + 1))
        if i == 0 or (i + 1) % 10 == 0 or i + 1 == a.steps:
            print("Step %d | Loss: %.4f | Time: %.2f ms" % (i + 1, losses[-1], times[-1] * 1e3),
                  file=sys.stderr)
    if world > 1:
        dist.destroy_process_group()
        if rank:
            return 0
    if a.losses:
        tmp = a.losses + ".tmp"
        with open(tmp, "w") as f:
            f.write("".join("%r\n" % x for x in losses))
        os.replace(tmp, a.losses)
    timed = times[a.warmup:]
    mean = sum(timed) / len(timed)
    median = sorted(timed)[len(timed) // 2]
    tokens = a.micro_batch * a.accum * a.seq * world
    print("torch_train torch=%s dist=%s ranks=%d threads=%d steps=%d warmup=%d tokens_per_s=%.1f "
          "mean_step_ms=%.3f median_step_ms=%.3f min_step_ms=%.3f first_loss=%.4f "
          "last_loss=%.4f attention=%s micro_batch=%d accum=%d compile=%s dtype=%s" %
          (torch.__version__, a.dist, world, a.threads, a.steps, a.warmup, tokens / mean, mean * 1e3,
           median * 1e3, min(timed) * 1e3, losses[0], losses[-1], kind, a.micro_batch,
           a.accum, compiled, "bf16" if a.bf16 else "fp32"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
