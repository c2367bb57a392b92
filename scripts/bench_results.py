#!/usr/bin/env python3
"""bench_results.py - the figures and the JSON files of the GPU benchmark
(scripts/bench_gpu_suite.py): the seed's TFLOPS formula, the model's
parameter count, MFU, and the result documents under docs/results/ with
their schema check (docs/results/README.md describes the schema).

Usage:
  bench_results.py check FILE...        validate result files (exit 1 on a problem)
  bench_results.py table FILE           the rows as a Markdown table (for the README)
  bench_results.py flops --model models/llama-3.1-8b.json --seq 4096 --batch 4
                         [--no-checkpointing] [--step-ms MS] [--peak 989]
                                        the seed's TFLOPs per step (and TFLOPS, MFU)

Standard library only: it runs under Debian's python3 here and the GPU
machine's Python 3.12.
"""
import argparse
import json
import math
import os
import re
import sys

SCHEMA_VERSION = 1
# dense bf16 peak of an H100 SXM (and of an H200: the same chip's tensor cores)
DEFAULT_PEAK_TFLOPS = 989.0


# ---- FLOPs --------------------------------------------------------------------------

def llama_params(m):
    """All parameters of a Llama model description (models/NAME.json, Hugging
    Face key names): embedding, per layer q/k/v/o (+ biases when
    attention_bias) + SwiGLU (gate, up, down) + two RMSNorm gains, the final
    norm, and the head unless tied. Llama-3.1-8B: 8,030,261,248."""
    h = m["hidden_size"]
    heads = m["num_attention_heads"]
    kv = m.get("num_key_value_heads", heads)
    hd = m.get("head_dim") or h // heads
    inter = m["intermediate_size"]
    L = m["num_hidden_layers"]
    V = m["vocab_size"]
    attn = h * heads * hd + 2 * h * kv * hd + heads * hd * h
    if m.get("attention_bias"):
        attn += heads * hd + 2 * kv * hd
    layer = attn + 3 * h * inter + 2 * h
    head = 0 if m.get("tie_word_embeddings") else V * h
    return V * h + L * layer + h + head


def seed_tflop_per_sequence(params, layers, hidden, seq, checkpointing):
    """DeepSpeedExamples' estimate_transformer_tflops (training/
    DeepSpeed-SuperOffload/finetune_zero3.py): TFLOPs of one sequence's
    step, (2 c P s + 4 c L h s^2) / 1e12 with c = 4 under activation
    checkpointing (the recompute counted), else 3."""
    c = 4 if checkpointing else 3
    return (2 * c * params * seq + 4 * c * layers * hidden * seq * seq) / 1e12


def seed_tflops(step_ms, micro_batch, params, layers, hidden, seq, checkpointing):
    """The example's TFLOPS: micro batch x per-sequence TFLOPs / step seconds."""
    if not step_ms or step_ms <= 0:
        return None
    return micro_batch * seed_tflop_per_sequence(params, layers, hidden, seq,
                                                 checkpointing) / (step_ms / 1000.0)


def model_mfu(step_ms, micro_batch, params, layers, hidden, seq, peak_tflops):
    """MFU of the model's FLOPs (the same formula with c = 3: no recompute
    counted) against the GPU's dense bf16 peak, as a fraction."""
    t = seed_tflops(step_ms, micro_batch, params, layers, hidden, seq, False)
    return None if t is None else t / peak_tflops


# ---- documents ----------------------------------------------------------------------

def make_row(system, mode, step_ms, tflops_seed, gpu_busy=None, **extra):
    """One run: system (stepgraph, deepspeed, pytorch), mode (what ran),
    mean step in ms, seed-formula TFLOPS, GPU busy share (0..1) where known;
    extra keys (status, note, mfu, median_step_ms, command, ...) as given."""
    row = {"system": system, "mode": mode, "step_ms": step_ms, "tflops_seed": tflops_seed,
           "gpu_busy": gpu_busy}
    row.update(extra)
    return row


def make_doc(date, device, model, seq, micro_batch, rows, **extra):
    doc = {"schema": SCHEMA_VERSION, "date": date, "device": device, "model": model,
           "seq": seq, "micro_batch": micro_batch, "rows": list(rows)}
    doc.update(extra)
    return doc


def _num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def validate(doc):
    """The problems of a result document (an empty list when it is valid)."""
    p = []
    if not isinstance(doc, dict):
        return ["the document is not a JSON object"]
    if not isinstance(doc.get("date"), str) or \
            not re.match(r"^\d{4}-\d\d-\d\d(T\d\d:\d\d(:\d\d)?(Z|[+-]\d\d:?\d\d)?)?$",
                         doc.get("date") or ""):
        p.append("date: expected an ISO date (YYYY-MM-DD[THH:MM[:SS]Z]), got %r"
                 % (doc.get("date"),))
    for k in ("device", "model"):
        if not isinstance(doc.get(k), str) or not doc.get(k):
            p.append("%s: expected a non-empty string, got %r" % (k, doc.get(k)))
    for k in ("seq", "micro_batch"):
        v = doc.get(k)
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            p.append("%s: expected an integer >= 1, got %r" % (k, v))
    rows = doc.get("rows")
    if not isinstance(rows, list):
        return p + ["rows: expected a list, got %r" % (rows,)]
    for i, r in enumerate(rows):
        where = "rows[%d]" % i
        if not isinstance(r, dict):
            p.append("%s: expected an object" % where)
            continue
        for k in ("system", "mode"):
            if not isinstance(r.get(k), str) or not r.get(k):
                p.append("%s.%s: expected a non-empty string, got %r" % (where, k, r.get(k)))
        for k in ("step_ms", "tflops_seed", "gpu_busy"):
            if k not in r:
                p.append("%s.%s: missing (null where not known)" % (where, k))
        status = r.get("status", "ok")
        for k in ("step_ms", "tflops_seed"):
            v = r.get(k)
            if v is None:
                if status == "ok":
                    p.append("%s.%s: null in a row whose status is ok" % (where, k))
            elif not _num(v) or v <= 0:
                p.append("%s.%s: expected a number > 0 or null, got %r" % (where, k, v))
        v = r.get("gpu_busy")
        if v is not None and (not _num(v) or v < 0 or v > 1):
            p.append("%s.gpu_busy: expected a fraction from 0 to 1 or null, got %r" % (where, v))
        if not isinstance(status, str) or not status:
            p.append("%s.status: expected a string, got %r" % (where, status))
    return p


def write_doc(path, doc):
    """Validates doc and writes it atomically (a file beside, then renamed)."""
    problems = validate(doc)
    if problems:
        raise ValueError("%s: not written: %s" % (path, "; ".join(problems)))
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)


def _fmt(v, f):
    return "n/a" if v is None else f % v


def table(doc):
    """The rows as a Markdown table, for the README."""
    out = ["%s, sequence %d, micro batch %d; %s, %s" % (doc["model"], doc["seq"],
                                                        doc["micro_batch"], doc["device"],
                                                        doc["date"]),
           "",
           "| system | mode | step (ms) | TFLOPS (seed formula) | MFU | GPU busy | status |",
           "|---|---|---:|---:|---:|---:|---|"]
    for r in doc["rows"]:
        out.append("| %s | %s | %s | %s | %s | %s | %s |" % (
            r["system"], r["mode"], _fmt(r.get("step_ms"), "%.1f"),
            _fmt(r.get("tflops_seed"), "%.1f"),
            _fmt(None if r.get("mfu") is None else 100 * r["mfu"], "%.1f%%"),
            _fmt(None if r.get("gpu_busy") is None else 100 * r["gpu_busy"], "%.1f%%"),
            r.get("status", "ok") + (": " + r["note"] if r.get("note") else "")))
    return "\n".join(out)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check")
    c.add_argument("files", nargs="+")
    t = sub.add_parser("table")
    t.add_argument("file")
    f = sub.add_parser("flops")
    f.add_argument("--model", required=True)
    f.add_argument("--seq", type=int, required=True)
    f.add_argument("--batch", type=int, required=True)
    f.add_argument("--no-checkpointing", dest="ckpt", action="store_false")
    f.add_argument("--step-ms", type=float)
    f.add_argument("--peak", type=float, default=DEFAULT_PEAK_TFLOPS)
    a = ap.parse_args(argv)
    if a.cmd == "check":
        bad = 0
        for path in a.files:
            try:
                with open(path) as fh:
                    problems = validate(json.load(fh))
            except (OSError, ValueError) as e:
                problems = [str(e)]
            for q in problems:
                print("%s: %s" % (path, q))
            bad += bool(problems)
        return 1 if bad else 0
    if a.cmd == "table":
        with open(a.file) as fh:
            print(table(json.load(fh)))
        return 0
    with open(a.model) as fh:
        m = json.load(fh)
    P = llama_params(m)
    per_seq = seed_tflop_per_sequence(P, m["num_hidden_layers"], m["hidden_size"], a.seq, a.ckpt)
    print("params %d; TFLOPs per step %.6f (micro batch %d x %.6f per sequence, c = %d)"
          % (P, a.batch * per_seq, a.batch, per_seq, 4 if a.ckpt else 3))
    if a.step_ms:
        tf = seed_tflops(a.step_ms, a.batch, P, m["num_hidden_layers"], m["hidden_size"],
                         a.seq, a.ckpt)
        mfu = model_mfu(a.step_ms, a.batch, P, m["num_hidden_layers"], m["hidden_size"],
                        a.seq, a.peak)
        print("step %.3f ms: TFLOPS %.3f (seed formula), MFU %.2f%% of %.0f (model FLOPs)"
              % (a.step_ms, tf, 100 * mfu, a.peak))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
