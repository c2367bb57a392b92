#!/usr/bin/env python3
"""The peers of scripts/bench_gpu_suite.py: one Hugging Face Llama
(transformers' LlamaForCausalLM built from models/NAME.json, random weights)
trained the way its users train it on one GPU, timed step by step.

Usage: hf_gpu_peer.py --mode deepspeed|fsdp2|gpu|gpu-compile --model models/llama-3.1-8b.json
                      [--seq 4096] [--batch 4] [--steps 5] [--warmup 2]
                      [--no-checkpointing] [--seed 42]
                      [--ds-config FILE] [--gradient-clipping default|X]
                      [--device cpu] [--count-params]

Modes:
  deepspeed    DeepSpeedExamples' training/DeepSpeed-SuperOffload/finetune_zero3.py,
               as its finetune_llama-8b_1gpu.sh runs it: the model in bf16
               (attn_implementation sdpa: the example's default flash_attention_2
               is not installed on the GPU machines), gradient checkpointing
               (use_reentrant False), DeepSpeedCPUAdam(model.parameters(),
               lr=0.001, betas=(0.9, 0.999)) as its create_optimizer makes it,
               deepspeed.initialize with --ds-config (the example's config,
               unchanged), then per step engine(**batch), engine.backward(loss),
               engine.step(). --gradient-clipping X sets the config's
               gradient_clipping (default: the config's, i.e. DeepSpeed's own
               default when the config has none: 1.0 since v0.19.3).
  fsdp2        PyTorch FSDP2 on one GPU: fully_shard on every decoder layer and on
               the model with CPUOffloadPolicy(pin_memory=True) and
               MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32); fp32
               parameters, gradients and torch.optim.AdamW (lr 1e-5, weight decay
               0.01) on the CPU.
  gpu          everything on the GPU, eager: fp32 parameters, torch.autocast(bf16),
               AdamW(fused=True), clip_grad_norm_(1.0).
  gpu-compile  the same with the model wrapped in torch.compile.

--device cpu runs the gpu, gpu-compile and fsdp2 modes on the CPU (a smoke test
with a tiny model; FSDP2 then without CPUOffloadPolicy); --count-params builds
the model on the meta device and prints its parameter count
(tests/test_bench_suite.sh runs both where a Python with transformers is given).

Data: random token ids (seeded), labels = inputs, the model's own loss. A
timed step runs from before the forward to after the optimizer step with the
device synchronized at both ends (the example times without the final
synchronize; with it the step's GPU work is counted whole). Steps after
--warmup are the figures.

Prints progress on stderr and one line on stdout:
  peer_result {"mode": ..., "status": "ok"|"oom"|"failed", "step_ms": [...],
               "losses": [...], "params": P, "peak_gpu_gib": X, "gpu_busy": F,
               "note": ..., "ds_phases_ms": {...}}
(gpu_busy: NVML's utilization over the timed steps as a fraction, null where
NVML cannot be read or on the CPU; ds_phases_ms, deepspeed mode with the
config's wall_clock_breakdown on: the mean over the timed steps of DeepSpeed's
own timers, fwd_microstep, bwd_microstep, step_microstep ... in ms).
Exit status 0 when the line says ok or oom, 1 when the run failed, 2 when a
package it needs is missing or the arguments are wrong.
"""
import argparse
import json
import os
import sys
import time


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", required=True, choices=("deepspeed", "fsdp2", "gpu", "gpu-compile"))
    ap.add_argument("--model", required=True, help="a model description (models/NAME.json)")
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=5, help="steps run, warm-up included")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--no-checkpointing", dest="checkpointing", action="store_false")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--count-params", action="store_true",
                    help="build the model on the meta device, print its parameter count, exit")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="cpu: a smoke test of the gpu, gpu-compile and fsdp2 modes with a "
                    "tiny model (tests/test_bench_suite.sh)")
    ap.add_argument("--ds-config", help="the DeepSpeed config (deepspeed mode)")
    ap.add_argument("--gradient-clipping", default="default",
                    help="deepspeed mode: 'default' (the config's) or a number")
    a = ap.parse_args(argv)
    if a.seq < 1 or a.batch < 1 or a.steps < 1 or not 0 <= a.warmup < a.steps:
        ap.error("need --seq, --batch, --steps >= 1 and 0 <= --warmup < --steps")
    if a.mode == "deepspeed" and not a.ds_config:
        ap.error("--mode deepspeed needs --ds-config")
    if a.mode == "deepspeed" and a.device == "cpu":
        ap.error("--mode deepspeed runs on cuda only")
    if a.gradient_clipping != "default":
        try:
            float(a.gradient_clipping)
        except ValueError:
            ap.error("--gradient-clipping %s: expected 'default' or a number"
                     % a.gradient_clipping)
    return a


def hf_config(path):
    """transformers' LlamaConfig from a models/NAME.json description."""
    from transformers import LlamaConfig
    with open(path) as f:
        m = json.load(f)
    if m.get("architecture", "llama") != "llama":
        raise SystemExit("hf_gpu_peer.py: %s: only Llama models" % path)
    keys = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings",
            "rms_norm_eps", "rope_theta", "rope_scaling", "tie_word_embeddings",
            "attention_bias")
    cfg = LlamaConfig(**{k: m[k] for k in keys if k in m})
    cfg.use_cache = False
    return cfg


def build_model(cfg, dtype, device):
    """Random weights, initialised on the GPU (seconds, where the CPU takes
    minutes for 8B), as transformers' from_config draws them."""
    import torch
    from transformers import AutoModelForCausalLM
    with torch.device(device):
        try:
            return AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation="sdpa")
        except TypeError:  # transformers before 4.56 names it torch_dtype
            return AutoModelForCausalLM.from_config(cfg, torch_dtype=dtype,
                                                    attn_implementation="sdpa")


def one_process_group(backend):
    """A process group of one, as the launcher would set it up."""
    for k, v in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"),
                 ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29581")):
        os.environ.setdefault(k, v)
    import torch.distributed as dist
    if not dist.is_initialized():
        dist.init_process_group(backend, rank=0, world_size=1)


def setup_deepspeed(a, model, note):
    import deepspeed
    from deepspeed.ops.adam import DeepSpeedCPUAdam
    with open(a.ds_config) as f:
        ds = json.load(f)
    if a.gradient_clipping != "default":
        ds["gradient_clipping"] = float(a.gradient_clipping)
    note.append("deepspeed %s, gradient_clipping %s" % (
        deepspeed.__version__, ds.get("gradient_clipping", "unset (DeepSpeed's default)")))
    one_process_group("nccl")
    deepspeed.init_distributed(dist_backend="nccl")
    # finetune_zero3.py's create_optimizer: its DEFAULT_OPTIMIZER_LR and betas
    opt = DeepSpeedCPUAdam(model.parameters(), lr=0.001, betas=(0.9, 0.999))
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=ds)
    engine.train()

    def step(x):
        loss = engine(input_ids=x, labels=x).loss
        engine.backward(loss)
        engine.step()
        return loss
    # the example's wall_clock_breakdown: DeepSpeed's own timers of the
    # step's phases (device-synchronized), as its log prints them
    if hasattr(engine, "get_wall_clock_timers"):
        step.phases = lambda: dict(engine.get_wall_clock_timers() or {})
    return step


# DeepSpeed's micro-step timers (deepspeed/utils/timer.py names), in ms
DS_PHASES = ("fwd_microstep", "bwd_microstep", "bwd_inner_microstep",
             "bwd_allreduce_microstep", "step_microstep")


def mean_phases(snapshots):
    """{phase: mean ms} over the timed steps' snapshots of DeepSpeed's
    timers, for the phases every snapshot has; None without any."""
    keys = [k for k in DS_PHASES if snapshots and all(k in s for s in snapshots)]
    if not keys:
        return None
    return {k: round(sum(float(s[k]) for s in snapshots) / len(snapshots), 3) for k in keys}


def torch_update(loss, model, opt):
    """The backward and update of a plain PyTorch loop (clipping at 1.0)."""
    import torch
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


def setup_fsdp2(a, model, note):
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
    one_process_group("nccl" if a.device == "cuda" else "gloo")
    mesh = init_device_mesh(a.device, (1,))
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    # the CPU smoke test keeps the parameters where they are
    kw = {"offload_policy": CPUOffloadPolicy(pin_memory=True)} if a.device == "cuda" else {}
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh, mp_policy=mp, **kw)
    fully_shard(model, mesh=mesh, mp_policy=mp, **kw)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.01)
    note.append("torch %s FSDP2%s" % (torch.__version__,
                                      ", CPUOffloadPolicy" if kw else " (CPU smoke test)"))

    def step(x):
        return torch_update(model(input_ids=x, labels=x).loss, model, opt)
    return step


def setup_gpu(a, model, note):
    import torch
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.01, fused=True)
    fwd = torch.compile(model) if a.mode == "gpu-compile" else model
    dev = a.device
    note.append("torch %s, %s" % (torch.__version__,
                                  "torch.compile" if a.mode == "gpu-compile" else "eager"))

    def step(x):
        with torch.autocast(dev, dtype=torch.bfloat16):
            loss = fwd(input_ids=x, labels=x).loss
        return torch_update(loss, model, opt)
    return step


class BusySampler:
    """NVML's GPU utilization (the share of each sample period in which a
    kernel ran; torch.cuda.utilization, which needs nvidia-ml-py) read ten
    times a second over the timed steps: the peers' GPU busy, where
    stepgraph's comes from its trace."""

    def __init__(self):
        import threading
        self.samples, self.stop, self.thread = [], threading.Event(), None
        self.threading = threading

    def start(self):
        import torch
        try:
            torch.cuda.utilization()
        except Exception:  # no NVML: not measured
            return

        def loop():
            while not self.stop.is_set():
                try:
                    self.samples.append(torch.cuda.utilization())
                except Exception:  # NVML gone: what was read stands
                    return
                self.stop.wait(0.1)
        self.thread = self.threading.Thread(target=loop, daemon=True)
        self.thread.start()

    def finish(self):
        self.stop.set()
        if self.thread:
            self.thread.join()
        return round(sum(self.samples) / len(self.samples) / 100.0, 4) if self.samples else None


def run(a, result):
    import torch
    torch.manual_seed(a.seed)
    cfg = hf_config(a.model)
    # bf16 weights as the example loads them; fp32 where an optimizer keeps them
    dtype = torch.bfloat16 if a.mode == "deepspeed" else torch.float32
    t0 = time.time()
    model = build_model(cfg, dtype, a.device)
    result["params"] = sum(p.numel() for p in model.parameters())
    if a.checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    note = []
    if a.mode == "deepspeed":
        step = setup_deepspeed(a, model, note)
    elif a.mode == "fsdp2":
        step = setup_fsdp2(a, model, note)
    else:
        step = setup_gpu(a, model, note)
    result["startup_s"] = round(time.time() - t0, 2)
    gen = torch.Generator(device=a.device).manual_seed(a.seed)
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    busy = BusySampler()
    phases = []
    for i in range(a.steps):
        if i == a.warmup and a.device == "cuda":
            busy.start()
        x = torch.randint(0, cfg.vocab_size, (a.batch, a.seq), device=a.device, generator=gen)
        sync()
        t = time.perf_counter()
        loss = step(x)
        sync()
        ms = (time.perf_counter() - t) * 1000.0
        result["losses"].append(float(loss.item()))
        if i >= a.warmup:
            result["step_ms"].append(round(ms, 3))
            if hasattr(step, "phases"):
                phases.append(step.phases())
        print("hf_gpu_peer %s: step %d %.1f ms loss %.4f" % (a.mode, i + 1, ms,
                                                            result["losses"][-1]),
              file=sys.stderr, flush=True)
    result["gpu_busy"] = busy.finish()
    if phases:
        result["ds_phases_ms"] = mean_phases(phases)
    if a.device == "cuda":
        result["peak_gpu_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    result["note"] = "; ".join(note + ["attn sdpa", "checkpointing %s" %
                                       ("on" if a.checkpointing else "off")])
    result["status"] = "ok"


def main(argv):
    a = parse_args(argv)
    if a.count_params:  # no memory: the shapes only
        import torch
        model = build_model(hf_config(a.model), torch.bfloat16, "meta")
        print(sum(p.numel() for p in model.parameters()))
        return 0
    result = {"mode": a.mode, "status": "failed", "step_ms": [], "losses": [],
              "params": None, "peak_gpu_gib": None, "gpu_busy": None, "note": ""}
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
        if a.mode == "deepspeed":
            import deepspeed  # noqa: F401
    except ImportError as e:
        result["note"] = "missing package: %s" % e
        print("peer_result " + json.dumps(result), flush=True)
        return 2
    import torch
    rc = 0
    try:
        run(a, result)
    except torch.cuda.OutOfMemoryError as e:
        result["status"] = "oom"
        result["note"] = "out of GPU memory: %s" % str(e).split("\n")[0]
    except Exception as e:  # the suite records the failure and goes on
        result["note"] = "%s: %s" % (type(e).__name__, str(e).split("\n")[0][:300])
        import traceback
        traceback.print_exc()
        rc = 1
    print("peer_result " + json.dumps(result), flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
