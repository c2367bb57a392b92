#!/usr/bin/env python3
"""bench_gpu_suite.py - the GPU benchmark users care about, in one device call
(issue 39 items 4-5, issue 41 item 4): DeepSpeedExamples' SuperOffload
fine-tune of Llama-3.1-8B on one GPU (bf16, ZeRO-3, activation
checkpointing, sequence 4096, micro batch 4) by stepgraph at tune's best
setting and by its peers, then Llama-3.2-1B by stepgraph against PyTorch
with everything on the GPU. Run it through scripts/bench_gpu_suite.sh (which
unpacks the carry and installs DeepSpeed's wheels); --dry-run prints the
plan and every command and runs nothing.

Stages, in order of value, each under its own time cap (seconds), within
--budget (the list with the caps: --help's end, or --dry-run); a stage that
would start with less than MIN_STAGE_S left, or whose host memory is not
free, is skipped with a note, and the result files are written again after
every stage.

Writes into --out (default $OUT, else bench-gpu-out): bench-llama-3.1-8b.json
and bench-llama-3.2-1b.json (docs/results/README.md: the schema),
summary.md (the stages: result, seconds, note), logs.txt (every command's
output) and results.tar.gz (tune's tables, the calibrated machine,
stepgraph's trace); at most 5 files, within the device tool's 8.
"""
import argparse
import datetime
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import bench_results as br  # noqa: E402

MIN_STAGE_S = 20
GIB = 2**30

# The DeepSpeed configs of DeepSpeedExamples' training/DeepSpeed-SuperOffload/
# finetune_llama-8b_1gpu.sh (its llama-8b_${MODE}_config.json heredocs, with
# BATCH_SIZE 4), as they are: data, not code.
EXAMPLE_DS_CONFIGS = {
    "superoffload": {
        "train_batch_size": 4,
        "gradient_accumulation_steps": 1,
        "bf16": {"enabled": True},
        "zero_optimization": {
            "stage": 3, "overlap_comm": False, "reduce_bucket_size": 4e8,
            "sub_group_size": 4e8,
            "offload_optimizer": {"device": "cpu", "pin_memory": True, "ratio": 0.80,
                                  "super_offload": True, "cpuadam_cores_perc": 0.90}},
        "wall_clock_breakdown": True,
    },
}
# "zerooffload": the same but for offload_optimizer's three SuperOffload keys
EXAMPLE_DS_CONFIGS["zerooffload"] = json.loads(json.dumps(EXAMPLE_DS_CONFIGS["superoffload"]))
EXAMPLE_DS_CONFIGS["zerooffload"]["zero_optimization"]["offload_optimizer"] = {
    "device": "cpu", "pin_memory": True}

CFG_8B = "configs/llama-3.1-8b-superoffload.json"
CFG_1B = "configs/llama-3.2-1b-superoffload-gpu.json"
MODEL_8B = "models/llama-3.1-8b.json"
MODEL_1B = "models/llama-3.2-1b.json"
SEQ, BATCH = 4096, 4

# host memory each run needs free before it starts, in bytes per parameter:
# stepgraph's plan (`stepgraph graph configs/llama-3.1-8b-superoffload.json
# --summary`: "peak memory, host: 95.8 GiB", 12.8 bytes a parameter, rounded
# up), DeepSpeed's and FSDP2's CPU optimizer (fp32 master, moments and
# gradients: 16). A run that cannot have it is skipped.
HOST_BYTES_PER_PARAM = {"stepgraph": 13, "deepspeed": 16, "fsdp2": 16}


class Stage:
    def __init__(self, name, cap, what, model=None, host=None, gpu=True):
        self.name, self.cap, self.what = name, cap, what
        self.model, self.host, self.gpu = model, host, gpu


# In order of value; the first eight fit one 600 s device call (their caps,
# 515 s, and the wrapper's carry and wheels, WRAPPER_S, within --budget 570):
# the 8B comparison, then the 1B one. tune simulates (no GPU work): on the
# machine model shipped for the GPU seen, or on the machine a calibrate of an
# earlier call left in --work, with its fitted costs.
STAGES = [
    Stage("env", 15, "the machine", gpu=False),
    Stage("tune_8b", 40, "stepgraph tune, 8B (the GPU's machine model, or the calibrated one)"),
    Stage("sg_8b", 150, "stepgraph run, 8B", MODEL_8B, "stepgraph"),
    Stage("ds_so_noclip", 110, "DeepSpeed super_offload, gradient_clipping 0", MODEL_8B,
          "deepspeed"),
    Stage("ds_so", 100, "DeepSpeed super_offload, default clipping", MODEL_8B, "deepspeed"),
    Stage("tune_1b", 20, "stepgraph tune, 1B (as tune_8b)"),
    Stage("sg_1b", 45, "stepgraph run, 1B", MODEL_1B, "stepgraph"),
    Stage("pt_1b_eager", 35, "PyTorch all on the GPU, eager, 1B"),
    Stage("calibrate", 100, "stepgraph calibrate, 1B (for a later call's tune)", MODEL_1B,
          "stepgraph"),
    Stage("pt_1b_compile", 90, "PyTorch all on the GPU, torch.compile, 1B"),
    Stage("ds_zo", 100, "DeepSpeed ZeRO-3 offload (zerooffload)", MODEL_8B, "deepspeed"),
    Stage("fsdp2_8b", 100, "PyTorch FSDP2 CPUOffloadPolicy, 8B", MODEL_8B, "fsdp2"),
]
# seconds bench_gpu_suite.sh spends before this script (the carry unpacked,
# DeepSpeed's wheels installed), within the budget, which counts from its start
WRAPPER_S = 30
# the machine models shipped for the lent GPUs (configs/machines/), by the
# name nvidia-smi gives; tune runs on them until a calibrate has run
GPU_MACHINES = [("H200", "h200"), ("H100 PCIe", "h100-pcie"), ("H100", "h100-sxm")]
DEFAULT_MACHINE = "h200"
STAGE_NAMES = [s.name for s in STAGES]


def parse_args(argv):
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n", 1)[1] + "\nstages (cap in seconds):\n" +
        "\n".join("  %-14s %4d  %s" % (s.name, s.cap, s.what) for s in STAGES))
    ap.add_argument("--budget", type=int, default=570,
                    help="seconds for all stages (default 570: a 600 s device call)")
    ap.add_argument("--only", help="comma-separated stages to run (env always runs)")
    ap.add_argument("--skip", help="comma-separated stages to leave out")
    ap.add_argument("--steps", type=int, default=4, help="steps per 8B run (default 4)")
    ap.add_argument("--warmup", type=int, default=2, help="of them left out (default 2)")
    ap.add_argument("--steps-1b", type=int, default=6, help="steps per 1B run (default 6)")
    ap.add_argument("--warmup-1b", type=int, default=3)
    ap.add_argument("--cal-steps", type=int, default=4, help="calibrate's steps (default 4)")
    ap.add_argument("--peak", type=float, default=br.DEFAULT_PEAK_TFLOPS,
                    help="dense bf16 TFLOP/s for MFU (default 989: H100 SXM, H200)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                    help="tune's simulations at once (default: the CPUs)")
    ap.add_argument("--bin", default=os.environ.get("BIN", "./stepgraph"),
                    help="the stepgraph binary (default $BIN, else ./stepgraph)")
    ap.add_argument("--python", default=os.environ.get("PYTHON", sys.executable),
                    help="the Python with CUDA torch for the peers (default: this one)")
    ap.add_argument("--out", default=os.environ.get("OUT") or "bench-gpu-out")
    ap.add_argument("--work", default=os.path.join(os.environ.get("TMPDIR") or "/tmp",
                                                   "bench-gpu-work"),
                    help="scratch directory, outside --out (the device tool brings back at "
                    "most 8 files from $OUT); a later call on the same machine finds there "
                    "the calibrated machine, tune's choices and the rows so far, and adds "
                    "to them (default $TMPDIR/bench-gpu-work)")
    ap.add_argument("--fresh", action="store_true", help="empty --work first")
    ap.add_argument("--config-8b", default=CFG_8B, help="the 8B run config (default %(default)s)")
    ap.add_argument("--config-1b", default=CFG_1B, help="the 1B run config (default %(default)s)")
    ap.add_argument("--sg-args", default="",
                    help="more arguments for stepgraph's calibrate, tune and run (one string; "
                    "tests run the chain on a tiny model with it)")
    ap.add_argument("--ncuda", type=int, default=1,
                    help="stepgraph's CUDA workers (default 1; 0 for the tests' CPU chain)")
    ap.add_argument("--no-memory-check", dest="memory_check", action="store_false",
                    help="start the runs whatever host memory is free (tests)")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and the commands")
    a = ap.parse_args(argv)
    for opt in ("only", "skip"):
        for n in (getattr(a, opt) or "").split(","):
            if n and n not in STAGE_NAMES:
                ap.error("--%s: no stage %r (stages: %s)" % (opt, n, ", ".join(STAGE_NAMES)))
    if a.budget < MIN_STAGE_S:
        ap.error("--budget %d: at least %d seconds" % (a.budget, MIN_STAGE_S))
    for n, lo in (("steps", 2), ("steps_1b", 2), ("cal_steps", 1)):
        if getattr(a, n) < lo:
            ap.error("--%s must be >= %d" % (n.replace("_", "-"), lo))
    if not 0 <= a.warmup < a.steps or not 0 <= a.warmup_1b < a.steps_1b:
        ap.error("the warm-up must be shorter than the run (--warmup < --steps)")
    return a


def selected(a):
    only = set(filter(None, (a.only or "").split(",")))
    skip = set(filter(None, (a.skip or "").split(",")))
    return [s for s in STAGES
            if s.name == "env" or ((not only or s.name in only) and s.name not in skip)]


# ---- the commands ------------------------------------------------------------------

class Ctx:
    """What the stages share: paths, tune's choices, the documents."""

    def __init__(self, a):
        self.a = a
        self.out = a.out
        self.work = None  # WORK in the dry run's commands
        self.machine = None           # the calibrated machine's JSON
        self.gpu_machine = DEFAULT_MACHINE  # the shipped model of the GPU seen
        self.best = {}                # model -> (args list, predicted ms, note)
        self.docs = {}
        self.device = "unknown (no GPU seen)"
        self.have_gpu = False

    def w(self, *p):
        return os.path.join(self.work or "WORK", *p)


def sg_extra(c):
    return shlex.split(c.a.sg_args)


def tune_cmd(c, cfg, prefix, varies, extra):
    # fitted costs need a calibrated machine's node times
    extra = extra if c.machine else [x for x in extra if x not in ("--cost", "fitted")]
    cmd = [c.a.bin, "tune", cfg, "--machines", c.machine or c.gpu_machine,
           # the second step, after one in flight: the steady state the run measures
           "--sched", "dmda,dmdas", "--priorities", "on", "--steps", "2",
           "--jobs", str(c.a.jobs), "--out", c.w(prefix)] + extra + sg_extra(c)
    for v in varies:
        cmd += ["--vary", v]
    return cmd


def stepgraph_run_cmd(c, cfg, steps, warmup, tag, args):
    return [c.a.bin, "run", cfg, "--ncuda", str(c.a.ncuda), "--steps", str(steps),
            "--warmup_steps", str(warmup), "--log_interval", "1",
            "--metrics", c.w(tag + ".jsonl"), "--trace", c.w(tag + "-trace.json")] + \
        sg_extra(c) + args


def peer_cmd(c, mode, model, steps, warmup, extra=()):
    return [c.a.python, os.path.join("bench", "hf_gpu_peer.py"), "--mode", mode,
            "--model", model, "--seq", str(SEQ), "--batch", str(BATCH), "--steps", str(steps),
            "--warmup", str(warmup)] + list(extra)


def commands(c, name):
    """The commands of stage `name` (a list of argv lists)."""
    a = c.a
    if name == "env":
        return [["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                 "--format=csv,noheader"],
                [a.python, "-c", "import torch; print('torch', torch.__version__, "
                 "torch.cuda.is_available())"],
                [a.bin, "version"],
                # StarPU's main-memory limit is 90% of what hwloc sees on the NUMA node
                ["sh", "-c", "grep -h MemTotal /proc/meminfo /sys/devices/system/node/node*/meminfo;"
                 " grep MemAvailable /proc/meminfo"]]
    if name == "calibrate":
        return [[a.bin, "calibrate", a.config_1b, "--name", "gb-gpu", "--out", c.w("machines"),
                 "--steps", str(a.cal_steps), "--base", "h100-pcie", "--ncuda", str(a.ncuda)] +
                sg_extra(c)]
    if name == "tune_8b":  # --cost fitted when calibrated
        return [tune_cmd(c, a.config_8b, "tune-8b", ["offload_optimizer.ratio=0.5,0.8,1",
                                                     "cast_placement=cpu,gpu,fused"],
                         ["--cost", "fitted"])]
    if name == "tune_1b":
        return [tune_cmd(c, a.config_1b, "tune-1b", ["offload_optimizer.ratio=0,0.5,0.9"], [])]
    if name in ("sg_8b", "sg_1b"):
        big = name == "sg_8b"
        args = c.best.get("8b" if big else "1b", ([], None, ""))[0]
        return [stepgraph_run_cmd(c, a.config_8b if big else a.config_1b,
                                  a.steps if big else a.steps_1b,
                                  a.warmup if big else a.warmup_1b, name, args)]
    if name.startswith("ds_"):
        conf = "zerooffload" if name == "ds_zo" else "superoffload"
        extra = ["--ds-config", c.w("ds-%s.json" % conf)]
        if name == "ds_so_noclip":
            extra += ["--gradient-clipping", "0"]
        return [peer_cmd(c, "deepspeed", MODEL_8B, a.steps, a.warmup, extra)]
    if name == "fsdp2_8b":
        return [peer_cmd(c, "fsdp2", MODEL_8B, a.steps, a.warmup)]
    if name.startswith("pt_1b"):
        mode = "gpu-compile" if name.endswith("compile") else "gpu"
        return [peer_cmd(c, mode, MODEL_1B, a.steps_1b, a.warmup_1b)]
    raise KeyError(name)


def host_need(stage):
    """Bytes of host memory stage's run needs free (0: not checked)."""
    if not stage.host:
        return 0
    with open(os.path.join(ROOT, stage.model)) as f:
        p = br.llama_params(json.load(f))
    return p * HOST_BYTES_PER_PARAM[stage.host]


def calls(stages, budget):
    """The device call each stage falls in when every stage takes its cap:
    a call holds the wrapper's WRAPPER_S and stages up to the budget, and
    the next call (--only the rest, on the still-warm machine) the rest."""
    out, call, used = [], 1, WRAPPER_S
    for s in stages:
        if used + s.cap > budget and used > WRAPPER_S:
            call, used = call + 1, WRAPPER_S
        used += s.cap
        out.append(call)
    return out


def dry_run(c, stages):
    total = 0
    print("bench_gpu_suite: plan for a budget of %d s (stages in order of value; a stage is "
          "skipped, with a note, when under %d s are left or its host memory is not free)"
          % (c.a.budget, MIN_STAGE_S))
    print("  %-14s %5s %7s %9s %4s  %s" % ("stage", "cap", "by", "host GiB", "call", "what"))
    where = calls(stages, c.a.budget)
    for s, call in zip(stages, where):
        total += s.cap
        need = host_need(s)
        print("  %-14s %5d %7d %9s %4d  %s" % (s.name, s.cap, total,
                                              "%.0f" % (need / GIB) if need else "-", call,
                                              s.what))
    print("caps add up to %d s against a budget of %d s (%d s before this script)"
          % (total, c.a.budget, WRAPPER_S))
    for k in range(1, max(where or [1]) + 1):
        names = [s.name for s, call in zip(stages, where) if call == k]
        print("call %d: %s (%d s of caps)" % (k, ",".join(names),
                                             sum(s.cap for s, call in zip(stages, where)
                                                 if call == k)))
    print("commands (WORK: the scratch directory, --work; tune's best setting is added to the "
          "stepgraph runs):")
    for s in stages:
        for cmd in commands(c, s.name):
            print("  %s: %s" % (s.name, " ".join(shlex.quote(x) for x in cmd)))
    print("writes %s/{bench-llama-3.1-8b.json, bench-llama-3.2-1b.json, summary.md, logs.txt, "
          "results.tar.gz}" % c.out)
    return 0


# ---- running ------------------------------------------------------------------------

def mem_available():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def numa_memory():
    """The NUMA nodes' MemTotal added up, in bytes (None where not readable):
    what hwloc reports, and StarPU takes 90% of as its limit at its start."""
    import glob
    total = 0
    for path in glob.glob("/sys/devices/system/node/node*/meminfo"):
        try:
            with open(path) as f:
                m = re.search(r"MemTotal:\s+(\d+) kB", f.read())
        except OSError:
            m = None
        if m:
            total += int(m.group(1)) * 1024
    return total or None


def mem_total():
    with open("/proc/meminfo") as f:
        return int(re.search(r"MemTotal:\s+(\d+) kB", f.read()).group(1)) * 1024


def plug_memory(nbytes):
    """Writes one byte in every page of nbytes of fresh memory, then frees it.
    On these virtual machines the NUMA node's memory was seen to grow as
    memory was used (13.1 to 23.1 GiB here, with the RAM unchanged), and
    StarPU's limit is read from it at its start (docs/gpu.md): this gives the
    node its memory before a run that needs it. Returns the seconds taken."""
    import mmap
    t = time.time()
    m = mmap.mmap(-1, nbytes)
    try:
        import numpy as np
        np.frombuffer(m, dtype=np.uint8)[::4096] = 1
    except ImportError:
        for off in range(0, nbytes, 4096):
            m[off] = 1
    m.close()
    return time.time() - t


def ensure_node_memory(need, log):
    """When the NUMA nodes hold under 95% of the RAM and a run needs more
    than StarPU would allow, plugs what is available (less 4 GiB); a note."""
    node, total, avail = numa_memory(), mem_total(), mem_available()
    if not node or not avail or node >= 0.95 * total or 0.9 * node >= need:
        return ""
    secs = plug_memory(max(avail - 4 * GIB, 0))
    after = numa_memory()
    note = "NUMA memory %.1f GiB of %.1f, after writing %.1f GiB in %.1f s: %.1f GiB" % (
        node / GIB, total / GIB, (avail - 4 * GIB) / GIB, secs, (after or 0) / GIB)
    log.write(note + "\n")
    return note


def wait_for_memory(need, seconds=20):
    """MemAvailable once it covers need (the last run's memory may still be
    going back), or the last reading after `seconds`."""
    end = time.time() + seconds
    while True:
        got = mem_available()
        if got is None or got >= need or time.time() >= end:
            return got
        time.sleep(1)


def run_cmd(cmd, cap, log):
    """Runs cmd in its own process group for at most cap seconds; returns
    (exit status or None on timeout, output)."""
    log.write("$ %s\n" % " ".join(shlex.quote(x) for x in cmd))
    log.flush()
    try:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             cwd=ROOT, start_new_session=True, text=True, errors="replace")
    except OSError as e:
        log.write("cannot start: %s\n" % e)
        return 127, str(e)
    try:
        out, _ = p.communicate(timeout=max(cap, 1))
        rc = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        rc = None
    log.write(out or "")
    log.write("\n[exit %s]\n" % ("timeout after %d s" % cap if rc is None else rc))
    log.flush()
    return rc, out or ""


def grab(pattern, text, cast=float):
    m = re.findall(pattern, text)
    return cast(m[-1]) if m else None


def model_dims(path):
    with open(os.path.join(ROOT, path)) as f:
        m = json.load(f)
    return br.llama_params(m), m["num_hidden_layers"], m["hidden_size"]


def figures(c, model, step_ms):
    P, L, h = model_dims(model)
    return {"tflops_seed": br.seed_tflops(step_ms, BATCH, P, L, h, SEQ, True),
            "mfu": br.model_mfu(step_ms, BATCH, P, L, h, SEQ, c.a.peak)}


def doc_for(c, model):
    name = os.path.splitext(os.path.basename(model))[0]
    if name not in c.docs:
        c.docs[name] = br.make_doc(
            datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            c.device, name, SEQ, BATCH, [], peak_tflops=c.a.peak, stages=[],
            formula="DeepSpeedExamples estimate_transformer_tflops: micro_batch x "
                    "(2 c P s + 4 c L h s^2) / step, c = 4 (activation checkpointing)")
    return c.docs[name]


def add_row(c, model, system, mode, step_ms, gpu_busy=None, status="ok", **extra):
    f = figures(c, model, step_ms) if step_ms else {"tflops_seed": None, "mfu": None}
    row = br.make_row(system, mode, step_ms, f["tflops_seed"], gpu_busy, mfu=f["mfu"],
                      status=status, **extra)
    doc_for(c, model)["rows"].append(row)
    return row


def parse_tune(c, key, prefix, out):
    """tune's best point (most tokens/s among those that ran) as run arguments."""
    path = c.w(prefix + ".csv")
    if not os.path.exists(path):
        return "no %s.csv" % prefix
    import csv
    with open(path) as f:
        rows = [r for r in csv.DictReader(f) if r.get("status") == "ok"]
    if not rows:
        return "no point of tune ran"
    best = max(rows, key=lambda r: float(r["tokens_per_s"]))
    args, said = ["--sched", best["sched"]], ["sched " + best["sched"]]
    if "offload_optimizer.ratio" in best:
        args += ["--set", "offload_optimizer.ratio=" + best["offload_optimizer.ratio"]]
        said.append("ratio " + best["offload_optimizer.ratio"] +
                    (" (no optimizer offload)" if float(best["offload_optimizer.ratio"]) == 0
                     else ""))
    if "cast_placement" in best:
        args += ["--cast_placement", best["cast_placement"]]
        said.append("cast_placement " + best["cast_placement"])
    on = os.path.basename(c.machine) if c.machine else c.gpu_machine
    c.best[key] = (args, float(best["step_ms"]), "tune's best on %s: %s" % (on, ", ".join(said)))
    return "%s; predicted %.1f ms" % (c.best[key][2], float(best["step_ms"]))


def stage_result(c, s, rc, out):
    """(ok, note) for a finished stage, adding its rows to the documents."""
    a = c.a
    if s.name == "env":
        m = re.search(r"^(NVIDIA[^,\n]*, \d+ MiB, [^\n]*)$", out, re.M)
        if m:
            c.device = m.group(1).strip()
            c.have_gpu = True
        if os.environ.get("BENCH_ASSUME_GPU") == "1":  # tests: the GPU stages run anyway
            c.have_gpu = True
        c.gpu_machine = next((mc for name, mc in GPU_MACHINES if name in c.device),
                             DEFAULT_MACHINE)
        cpu = ""
        try:
            with open("/proc/cpuinfo") as f:
                cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")),
                           "")
        except OSError:
            pass
        c.device += "; %s, %d CPUs" % (cpu or "CPU ?", os.cpu_count() or 0)
        for d in c.docs.values():
            d["device"] = c.device
        return True, "%s; tune on %s" % (c.device, c.machine or c.gpu_machine)
    if s.name == "calibrate":
        path = c.w("machines", "gb-gpu.json")
        if rc == 0 and os.path.exists(path):
            c.machine = path
            ms = grab(r"measured step ([0-9.]+) ms", out)
            return True, "calibrated machine %s; measured step %s ms" % (path, ms)
        return False, "no calibrated machine (exit %s)" % rc
    if s.name.startswith("tune_"):
        key = s.name[5:]
        note = parse_tune(c, key, "tune-" + key, out)
        return key in c.best, note
    if s.name in ("sg_8b", "sg_1b"):
        key = "8b" if s.name == "sg_8b" else "1b"
        model = s.model
        # the mean of the steps after the warm-up, from the summary
        ms = grab(r"Step time: mean ([0-9.]+) ms", out)
        busy = grab(r"GPU: busy ([0-9.]+)% of the last step", out)
        hidden = grab(r"CPU Adam [0-9.]+ ms, ([0-9.]+)% of it under GPU work", out)
        start = grab(r"start-up: ([0-9.]+) s", out)
        args, pred, why = c.best.get(key, ([], None, "tune did not run: the config's settings"))
        extra = {"startup_s": start, "hidden_adam": None if hidden is None else hidden / 100,
                 "gpu_busy_source": None if busy is None else "trace",
                 "note": why, "args": " ".join(args)}
        if pred and ms:
            extra.update(predicted_step_ms=pred, prediction_error=(pred - ms) / ms)
        ok = rc == 0 and ms is not None
        add_row(c, model, "stepgraph", "SuperOffload, " + (why if args else "config as is"),
                ms if ok else None, None if busy is None else busy / 100,
                "ok" if ok else ("timeout" if rc is None else "failed"), **extra)
        if not ok:
            last = out.strip().splitlines()[-1:] or [""]
            return False, "%s: %s" % ("timed out" if rc is None else "exit %s" % rc, last[0][:200])
        # the start-up's parts, for the summary (docs/gpu.md, "Start-up")
        parts = re.findall(r"start-up: (.*)", out)
        return True, "step %s ms, GPU busy %s%%, start-up %s%s" % (
            ms, busy, parts[-1] if parts else "%s s" % start,
            "" if not pred else ", predicted %.1f ms" % pred)
    # the peers: their result line
    m = re.search(r"^peer_result (\{.*\})$", out, re.M)
    res = json.loads(m.group(1)) if m else {"status": "timeout" if rc is None else "failed",
                                            "step_ms": [], "note": out.strip()[-200:]}
    steps = res.get("step_ms") or []
    ms = sum(steps) / len(steps) if steps and res.get("status") == "ok" else None
    system = "deepspeed" if s.name.startswith("ds_") else "pytorch"
    mode = {"ds_so": "super_offload, example config (default clipping)",
            "ds_so_noclip": "super_offload, example config, gradient_clipping 0",
            "ds_zo": "ZeRO-3 offload, example zerooffload config",
            "fsdp2_8b": "FSDP2 CPUOffloadPolicy", "pt_1b_eager": "all on the GPU, eager",
            "pt_1b_compile": "all on the GPU, torch.compile"}[s.name]
    busy = res.get("gpu_busy") if ms is not None else None
    add_row(c, s.model or MODEL_1B, system, mode, ms, busy, res.get("status", "failed"),
            gpu_busy_source=None if busy is None else "nvml",
            note=res.get("note", ""), startup_s=res.get("startup_s"),
            ds_phases_ms=res.get("ds_phases_ms"),
            median_step_ms=sorted(steps)[len(steps) // 2] if steps else None)
    return ms is not None, "%s: mean step %s ms (%s)" % (res.get("status"), ms, res.get("note"))


def start_prebuild(c):
    """DeepSpeed JIT-builds its CPU Adam (ninja, the CPUs) on first use: started
    beside tune, whose result is simulated time, so that no measured run pays it."""
    f = open(c.w("ds-cpu-adam-build.log"), "w")
    try:
        p = subprocess.Popen([c.a.python, "-c", "from deepspeed.ops.op_builder import "
                              "CPUAdamBuilder; CPUAdamBuilder().load()"], cwd=ROOT,
                             stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    except OSError:
        f.close()
        return None
    return (p, f, time.time())


def finish_prebuild(pb, deadline, log):
    """Waits for the build (up to the deadline) before a DeepSpeed run."""
    p, f, t = pb
    if p.poll() is None:
        try:
            p.wait(timeout=max(min(deadline - time.time(), 120), 1))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    if not f.closed:
        f.close()
        log.write("DeepSpeed CPU Adam prebuild: exit %s after %.0f s\n" % (p.returncode,
                                                                         time.time() - t))


def resume(c):
    """An earlier call's state in --work: the calibrated machine, tune's
    choices, the result documents (their rows and stages carry on)."""
    path = c.w("machines", "gb-gpu.json")
    if os.path.exists(path):
        c.machine = path
    try:
        with open(c.w("best.json")) as f:
            c.best = {k: tuple(v) for k, v in json.load(f).items()}
    except (OSError, ValueError):
        pass
    stages = []
    for model in (MODEL_8B, MODEL_1B):
        name = os.path.splitext(os.path.basename(model))[0]
        try:
            with open(c.w("bench-%s.json" % name)) as f:
                doc = json.load(f)
        except (OSError, ValueError):
            continue
        if not br.validate(doc):
            c.docs[name] = doc
            c.device = doc.get("device", c.device)
            stages = doc.get("stages", stages)
    return list(stages)


def write_outputs(c, log_rows, t0):
    os.makedirs(c.out, exist_ok=True)
    for name, doc in c.docs.items():
        doc["stages"] = [r for r in log_rows]
        br.write_doc(os.path.join(c.out, "bench-%s.json" % name), doc)
        br.write_doc(c.w("bench-%s.json" % name), doc)  # for a later call (resume)
    with open(c.w("best.json"), "w") as f:
        json.dump(c.best, f)
    lines = ["# bench_gpu_suite", "", "- device: %s" % c.device,
             "- budget %d s, used %.0f s" % (c.a.budget, time.time() - t0), "",
             "| stage | result | seconds | note |", "|---|---|---:|---|"]
    lines += ["| %s | %s | %.0f | %s |" % (r["stage"], r["result"], r["seconds"],
                                           r["note"].replace("|", "/")) for r in log_rows]
    with open(os.path.join(c.out, "summary.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return "\n".join(lines)


def run_all(c, stages):
    a = c.a
    t0 = float(os.environ.get("BENCH_T0", time.time()))
    deadline = t0 + a.budget
    c.work = os.path.abspath(a.work)
    if a.fresh and os.path.isdir(c.work):
        import shutil
        shutil.rmtree(c.work)
    os.makedirs(os.path.join(c.work, "machines"), exist_ok=True)
    log_rows = resume(c)
    os.makedirs(c.out, exist_ok=True)
    for conf, d in EXAMPLE_DS_CONFIGS.items():
        with open(c.w("ds-%s.json" % conf), "w") as f:
            json.dump(d, f, indent=1)
    os.environ.setdefault("STARPU_HOME", c.w("starpu"))  # StarPU's bus figures, measured once
    os.makedirs(os.environ["STARPU_HOME"], exist_ok=True)
    os.environ.setdefault("STARPU_SILENT", "1")
    os.environ["PYTHONUNBUFFERED"] = "1"
    doc_for(c, MODEL_8B)
    doc_for(c, MODEL_1B)
    prebuild = None
    with open(os.path.join(c.out, "logs.txt"), "w") as log:
        for s in stages:
            if s.name.startswith("tune_") and prebuild is None and \
                    any(x.name.startswith("ds_") for x in stages):
                prebuild = start_prebuild(c)
            if s.name.startswith("ds_") and prebuild is not None:
                finish_prebuild(prebuild, deadline, log)
            left = deadline - time.time()
            start = time.time()
            note, result = "", "skip"
            if left < MIN_STAGE_S:
                note = "no time left (%.0f s of the budget)" % max(left, 0)
            elif s.gpu and not c.have_gpu:
                note = "no GPU (nvidia-smi listed none)"
            else:
                need = host_need(s) if a.memory_check else 0
                got = wait_for_memory(need) if need else None
                plugged = ensure_node_memory(need, log) if need and s.host == "stepgraph" \
                    else ""
                if need and got is not None and got < need:
                    note = "host memory: needs %.0f GiB free, %.0f GiB available" % (
                        need / GIB, got / GIB)
                else:
                    cap = int(min(s.cap, left))
                    log.write("=================== %s (cap %d s)\n" % (s.name, cap))
                    out_all, rc = "", 0
                    for cmd in commands(c, s.name):
                        rc, out = run_cmd(cmd, int(min(cap - (time.time() - start),
                                                       deadline - time.time())), log)
                        out_all += out
                        if rc is None:
                            break
                    ok, note = stage_result(c, s, rc, out_all)
                    note = "; ".join(x for x in (note, plugged) if x)
                    result = "pass" if ok else ("timeout" if rc is None else "fail")
            log_rows.append({"stage": s.name, "result": result,
                             "seconds": round(time.time() - start, 1), "note": note,
                             "started": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                      time.gmtime(start))})
            print("bench_gpu_suite: %-14s %-7s %5.0f s  %s" % (s.name, result,
                                                              time.time() - start, note),
                  flush=True)
            write_outputs(c, log_rows, t0)
    with tarfile.open(os.path.join(c.out, "results.tar.gz"), "w:gz") as tf:
        for n in sorted(os.listdir(c.work)):
            p = os.path.join(c.work, n)
            # tune's tables, the calibrated machine, the runs' metrics and (when not
            # too large for the device tool's 16 MiB a file) their traces
            if n.startswith(("tune-", "sg_")) or n == "machines":
                if not n.endswith("-trace.json") or os.path.getsize(p) < (40 << 20):
                    tf.add(p, arcname=n)
    print(write_outputs(c, log_rows, t0))
    return 0


def main(argv):
    a = parse_args(argv)
    c = Ctx(a)
    stages = selected(a)
    if a.dry_run:
        return dry_run(c, stages)
    return run_all(c, stages)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
