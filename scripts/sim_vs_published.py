#!/usr/bin/env python3
"""sim_vs_published.py - `stepgraph simulate` against measured training runs.

Usage: scripts/sim_vs_published.py [--bin ./stepgraph] [--only ID,ID] [--out DIR]
                                   [--steps N] [--list]

Simulates each row of ROWS (below) with `stepgraph simulate ... --json` and
prints a Markdown table: the measured figure, how it was counted, the
simulated step and its figure counted the same way, and the error.

TFLOPS rows are counted as DeepSpeedExamples reports SuperOffload
(training/DeepSpeed-SuperOffload, estimate_transformer_tflops): per sequence
2 c P s + 4 c L h s^2 FLOPs, c = 4 with activation checkpointing (the
recompute counted) and 3 without, P = all parameters (read from the model
file's "source", which states the count computed from the Hugging Face
config), divided by the step time. DeepSpeedExamples' script logs no TFLOPS
for an MoE model (GPT-OSS-20B): that row counts all its parameters too, the
reading under which the blog's figure is possible (docs/simulate.md).
Step-time rows compare milliseconds. The SuperOffload and ZeRO-Offload GH200
rows run the configs the example's finetune_<model>_1gpu.sh scripts write
(configs/published/).
Each row's model, seq, batch and checkpointing must be what was simulated
(the step's JSON settings), or the script stops: the count uses them; so
must its attention ("attention": fused unless the row passes
--attention eager).

Attention: DeepSpeedExamples' finetune_zero3.py loads the model with
--attn_implementation, default flash_attention_2 (fused: simulate's default);
the Llama-8B, Qwen3-14B and Phi-4 scripts leave it, the GPT-OSS-20B script
passes --attn_implementation eager, so its row simulates --attention eager.
The lent-machine peers ran SDPA (bench/torch_gpu_bench.py,
bench/hf_gpu_peer.py) and stepgraph its own fused kernel: fused.

--list prints each row's id, model, seq, batch, ckpt and stepgraph arguments
as one JSON object a line, simulating nothing (tests/test_gpu_cost_sim.sh).

A measured figure may be a range (lo, hi) where the sources give one: the
error is then given against both ends. "informed" rows were looked at while
the GPU kernel model was built (docs/simulate.md); "held back" rows were run
only after it was fixed, to test it. so-gpt-oss-20b is "informed (eager
cost)": its gap with the fused kernel is why the eager attention cost was
built, though none of that cost's figures comes from it.
"""
import argparse
import json
import os
import re
import subprocess
import sys

SO8 = "configs/llama-3.1-8b-superoffload.json"
# the configs DeepSpeedExamples' finetune_<model>_1gpu.sh scripts write
# (configs/published/, docs/config-keys.md "Shipped configs")
PUB = "configs/published/%s-%s.json"
ZERO_OFFLOAD = 'zero_optimization.offload_optimizer={"device":"cpu","pin_memory":true}'
DSE = ("DeepSpeedExamples training/DeepSpeed-SuperOffload README: 'up to ~500 TFLOPS on GH200"
       " ... about 50% higher throughput than ZeRO-Offload'")
BLOG = ("DeepSpeed SuperOffload blog (blogs/deepspeed-superoffload): GPT-OSS-20B, Qwen3-14B,"
        " Phi-4 on one GH200 'achieving 600 TFLOPS under modest settings (sequence length 4k,"
        " batch size 4)'")
SCRIPTS = ("DeepSpeedExamples training/DeepSpeed-SuperOffload/finetune_{llama-8b,qwen3-14b,phi-4,"
           "gpt-oss-20b}_1gpu.sh: the DeepSpeed config each writes (configs/published/)")
README_H100 = "stepgraph README 'On a GPU: an H100 (2026-11-26)', scripts/bench_gpu.sh"
README_H200 = "stepgraph README 'On a GPU: an H200 (2026-11-27)', scripts/bench_gpu.sh"

# id, system, run, model, seq, batch, ckpt, measured (lo, hi), unit, counted,
# sources, role, stepgraph arguments after `simulate`
ROWS = [
    dict(id="so-8b", system="1x GH200",
         run="DeepSpeed SuperOffload (ratio 0.8, buckets 4e8, flash_attention_2: fused)",
         model="llama-3.1-8b", seq=4096, batch=4, ckpt=True, measured=(500, 600), unit="TFLOPS",
         counted="estimate_transformer_tflops, 10 steps after 20 warm-up",
         source=(DSE, BLOG, SCRIPTS), role="informed",
         args=[PUB % ("llama-8b", "superoffload"), "--machine", "gh200"]),
    dict(id="so-qwen3-14b", system="1x GH200",
         run="DeepSpeed SuperOffload (ratio 0.9, buckets 4e8, flash_attention_2: fused)",
         model="qwen3-14b", seq=4096, batch=4, ckpt=True, measured=(500, 600), unit="TFLOPS",
         counted="estimate_transformer_tflops ('up to')", source=(DSE, BLOG, SCRIPTS),
         role="held back", args=[PUB % ("qwen3-14b", "superoffload"), "--machine", "gh200"]),
    dict(id="so-phi-4", system="1x GH200",
         run="DeepSpeed SuperOffload (ratio 0.9, buckets 4e8, flash_attention_2: fused)",
         model="phi-4", seq=4096, batch=4, ckpt=True, measured=(500, 600), unit="TFLOPS",
         counted="estimate_transformer_tflops ('up to')", source=(DSE, BLOG, SCRIPTS),
         role="held back", args=[PUB % ("phi-4", "superoffload"), "--machine", "gh200"]),
    # The blog gives seq 4K for this figure; the script today sets MAX_LENGTH
    # 8192. DeepSpeedExamples logs no TFLOPS for an MoE model; P is all 20.9B
    # parameters, the one count under which the figure is possible (with the
    # active ones, 600 would need a 1.04 s step). docs/simulate.md says more.
    # Its script passes --attn_implementation eager: --attention eager.
    dict(id="so-gpt-oss-20b", system="1x GH200",
         run="DeepSpeed SuperOffload (ratio 0.9, buckets 8e8, eager attention: "
             "--attn_implementation eager, simulated --attention eager)",
         model="gpt-oss-20b", seq=4096, batch=4, ckpt=True, measured=(500, 600), unit="TFLOPS",
         counted="estimate_transformer_tflops, P all parameters ('up to')",
         source=(DSE, BLOG, SCRIPTS), role="informed (eager cost)",
         args=[PUB % ("gpt-oss-20b", "superoffload"), "--machine", "gh200",
               "--max_length", "4096", "--attention", "eager"]),
    dict(id="zo-8b", system="1x GH200",
         run="DeepSpeed ZeRO-Offload (ZeRO-3, optimizer on the CPU, flash_attention_2: fused)",
         model="llama-3.1-8b", seq=4096, batch=4, ckpt=True, measured=(333, 400), unit="TFLOPS",
         counted="SuperOffload's ~500-600 over 1.5 ('about 50% higher')", source=(DSE, SCRIPTS),
         role="held back", args=[PUB % ("llama-8b", "zerooffload"), "--machine", "gh200"]),
    dict(id="gpu-1b-h100", system="1x H100 SXM (lent)", run="PyTorch 2.11, all on the GPU, fused AdamW",
         model="llama-3.2-1b", seq=2048, batch=4, ckpt=True, measured=(244.5, 244.5), unit="ms",
         counted="mean step after 2 warm-up", source=(README_H100,), role="held back",
         args=[SO8, "--machine", "h100-sxm", "--model", "llama-3.2-1b", "--max_length", "2048",
               "--set", 'zero_optimization={"stage":0}']),
    dict(id="zo-1b-h200", system="1x H200 (lent, 16 Xeon cores)",
         run="DeepSpeed 0.19.8 ZeRO-3, optimizer offloaded (DeepSpeedCPUAdam)",
         model="llama-3.2-1b", seq=2048, batch=4, ckpt=True, measured=(1562.1, 1562.1), unit="ms",
         counted="mean step after 2 warm-up", source=(README_H200,), role="held back",
         args=[SO8, "--machine", "h200", "--model", "llama-3.2-1b", "--max_length", "2048",
               "--set", ZERO_OFFLOAD, "--set", "zero_optimization.sub_group_size=1e8",
               "--set", "zero_optimization.reduce_bucket_size=1e8"]),
    dict(id="sg-1b-h200", system="1x H200 (lent, 16 Xeon cores)",
         run="stepgraph SuperOffload (ratio 0.9), its own CUDA kernels",
         model="llama-3.2-1b", seq=2048, batch=4, ckpt=True, measured=(1093.83, 1093.83), unit="ms",
         counted="mean step after 2 warm-up; every speculative step rolled back", source=(README_H200,),
         role="held back",
         # 72 of 72 sub-group steps rolled back, each a rollback pass then a
         # redo pass (the code of the time, before sg_adam_redo; its trace:
         # validation 5786.2 ms of CPU task time against Adam's 2892.5)
         args=["configs/llama-3.2-1b-superoffload-gpu.json", "--machine", "h200",
               "--max_length", "2048", "--rollback-passes", "2"]),
]


def model_facts(root, name):
    """(P, L, h) from models/NAME.json: P from its "source" sentence."""
    d = json.load(open(os.path.join(root, "models", name + ".json")))
    m = re.search(r"([0-9][0-9,]+) parameters", d.get("source", ""))
    if not m:
        raise SystemExit("sim_vs_published.py: models/%s.json states no parameter count" % name)
    return int(m.group(1).replace(",", "")), d["num_hidden_layers"], d["hidden_size"]


def dse_tflops(P, L, h, s, batch, ckpt, step_s):
    """DeepSpeedExamples' estimate_transformer_tflops over one step."""
    c = 4.0 if ckpt else 3.0
    per_seq = 2.0 * c * P * s + 4.0 * c * L * h * s * s
    return batch * per_seq / step_s / 1e12


def check_settings(r, res):
    """'' when the step simulated is the row's (model, seq, batch, ckpt,
    attention), else what differs."""
    st = res["settings"]
    got = dict(model=res["model"], seq=st["seq_len"], batch=st["micro_batch"] * st["grad_accum"],
               ckpt=st["activation_checkpointing"], attention=st.get("attention"))
    want = dict(r, attention="eager" if "eager" in r["args"] else "fused")
    return ", ".join("%s %s simulated, the row says %s" % (k, got[k], want[k])
                     for k in ("model", "seq", "batch", "ckpt", "attention")
                     if got[k] != want[k])


def error(sim, lo, hi):
    e = [(sim - v) / v * 100.0 for v in (lo, hi)]
    return "%+.1f%%" % e[0] if lo == hi else "%+.1f%% / %+.1f%%" % (e[0], e[1])


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="./stepgraph")
    ap.add_argument("--only", default="")
    ap.add_argument("--out", default="sim-vs-published")
    ap.add_argument("--steps", default="3")
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args()
    if a.list:
        for r in ROWS:
            print(json.dumps({k: r[k] for k in ("id", "model", "seq", "batch", "ckpt", "args")}))
        return 0
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.makedirs(a.out, exist_ok=True)
    only = set(x for x in a.only.split(",") if x)
    unknown = only - {r["id"] for r in ROWS}
    if unknown:
        raise SystemExit("sim_vs_published.py: --only: no row %s" % ",".join(sorted(unknown)))
    print("| row | system | run | model | seq | batch | ckpt | measured | counted | "
          "simulated step (ms) | simulated | error | role |")
    print("|---|---|---|---|---:|---:|---|---:|---|---:|---:|---:|---|")
    results = []
    for r in ROWS:
        if only and r["id"] not in only:
            continue
        js = os.path.join(a.out, r["id"] + ".json")
        cmd = [a.bin, "simulate"] + r["args"] + ["--steps", a.steps, "--json", js]
        p = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
        if p.returncode != 0:
            print("sim_vs_published.py: %s failed: %s" % (" ".join(cmd), p.stderr.strip()),
                  file=sys.stderr)
            return 1
        res = json.load(open(js))
        step_s = res["step_s"]
        bad = check_settings(r, res)
        if bad:
            print("sim_vs_published.py: row %s: %s" % (r["id"], bad), file=sys.stderr)
            return 1
        if r["unit"] == "TFLOPS":
            P, L, h = model_facts(root, r["model"])
            sim = dse_tflops(P, L, h, r["seq"], r["batch"], r["ckpt"], step_s)
        else:
            sim = step_s * 1e3
        lo, hi = r["measured"]
        meas = ("%g" % lo if lo == hi else "%g-%g" % (lo, hi)) + " " + r["unit"]
        print("| %s | %s | %s | %s | %d | %d | %s | %s | %s | %.1f | %.1f %s | %s | %s |" % (
            r["id"], r["system"], r["run"], r["model"], r["seq"], r["batch"],
            "yes" if r["ckpt"] else "no", meas, r["counted"], step_s * 1e3, sim, r["unit"],
            error(sim, lo, hi), r["role"]))
        sys.stdout.flush()
        results.append(dict(id=r["id"], step_ms=step_s * 1e3, simulated=sim, unit=r["unit"],
                            measured=[lo, hi], role=r["role"], command=" ".join(cmd)))
    json.dump(results, open(os.path.join(a.out, "results.json"), "w"), indent=1)
    print("\nSources:")
    for src in sorted({x for r in ROWS if not only or r["id"] in only for x in r["source"]}):
        print("- " + src)
    return 0


if __name__ == "__main__":
    sys.exit(main())
