#!/bin/sh
# test_host_copies.sh - the trainer holds no host copy of the model. StarPU's
# buffers hold the training state; the starting state goes into them a
# tensor at a time (runtime/train/state_source.c: the seeded initialisation
# or a checkpoint read by runtime/io/checkpoint.h's reader, through
# sg_exec_load_state_from), and one rank's save writes the files a tensor at
# a time from them (sg_state_reader), with no staging copy of the model
# either way (runtime/exec/exec_state.c).
#
# What is measured is the kernel's peak resident set of each run
# (getrusage's ru_maxrss of the child), on a Llama of 139.5 M parameters
# (vocabulary 131072 x hidden 512, untied: its embedding and head are 96% of
# it; the parameter count P is computed here from the dimensions), against
# StarPU's own count of its buffers, printed by the run ("peak memory, host
# ...: measured X MiB"), which test_memory_peak holds to the plan, and
# against the process's fixed part (binary, libraries, OpenBLAS, StarPU,
# data), measured the same way on tiny-llama (0.8 M parameters).
# Checks: what the process holds beyond StarPU's buffers grows by less than
# one fp32 copy of the weights (4 P bytes) from tiny-llama to the big model,
# in a run (measured 0.4-1.5 P; 9.5 P when the trainer kept its copies and
# loaded through a staging copy of the whole model), in a run that saves
# (measured 1.5 P; 6 P when a save read the state back into whole copies of
# the weights and moments, 20 P with the staging copy) and in a run that
# resumes from that checkpoint (12 P of copies when a load read the files
# whole). Then the big model's checkpoint, read back by a separate
# safetensors reader: every tensor, finite, and moments that are the run's;
# and the resumed step against the same step of an uninterrupted run.
# Prints TAP.
set -u
SG_TEST_NAME=host_copies
. "${SG_SRCDIR:-.}/tests/test_env.sh"
. "$SRC/tests/train_lib.sh"

plan 6
BIG=$SRC/tests/data/models/big-head-llama.json
# rss NAME ARGS...: runs stepgraph ARGS, output in NAME.out, its peak RSS in
# bytes in NAME.rss, its exit status in NAME.rc
rss() {
	run_name=$1
	shift
	"$PY" "$SRC/tests/peak_rss.py" "$TMP/$run_name" "$BIN" run "$SRC/configs/default.json" --steps 1 \
		--warmup_steps 0 --log_interval 1 "$@"
}
rss tiny --metrics "$TMP/tiny.jsonl"
rss tiny_save --save "$TMP/tiny_ck"
rss big --model "$BIG" --max_length 32 --metrics "$TMP/big.jsonl"
# a constant lr from the first step, so that the resumed steps depend on the
# saved moments as well as the weights
LR=scheduler.params.warmup_min_lr=0.001
rss big_save --model "$BIG" --max_length 32 --save "$TMP/big_ck" \
	--metrics "$TMP/big_save.jsonl" --set "$LR"
rss big_load --model "$BIG" --max_length 32 --load "$TMP/big_ck" \
	--metrics "$TMP/big_load.jsonl" --set "$LR" --steps 2
# the same three steps without a checkpoint, for the resume's reference
"$BIN" run "$SRC/configs/default.json" --steps 3 --warmup_steps 0 --model "$BIG" \
	--max_length 32 --metrics "$TMP/big_three.jsonl" --set "$LR" >"$TMP/big_three.out" 2>&1

cat >"$TMP/check.py" <<'PYEOF'
import json, math, re, sys
tmp, what = sys.argv[1], sys.argv[2]
MiB = 2**20
H, I, L, V = 512, 1024, 2, 131072
P = 2 * V * H + L * (4 * H * H + 3 * H * I + 2 * H) + H

def run(name):
    rc = int(open("%s/%s.rc" % (tmp, name)).read())
    out = open("%s/%s.out" % (tmp, name)).read()
    assert rc == 0, (name, rc, out[-2000:])
    m = re.search(r"peak memory, host \(one memory[^)]*\): measured ([\d.]+) MiB", out)
    assert m, (name, out[-2000:])
    return int(open("%s/%s.rss" % (tmp, name)).read()), float(m.group(1)) * MiB

def finite(name):
    losses = [json.loads(l)["loss"] for l in open("%s/%s.jsonl" % (tmp, name))]
    assert losses and all(math.isfinite(x) for x in losses), (name, losses)

if what == "steps":
    finite("tiny"); finite("big")
    (rt, st), (rb, sb) = run("tiny"), run("big")
    grew = (rb - sb) - (rt - st)
    print("# beyond StarPU's buffers: tiny %.1f MiB, big %.1f MiB; grew %.1f MiB, bound 4 P = "
          "%.1f MiB" % ((rt - st) / MiB, (rb - sb) / MiB, grew / MiB, 4 * P / MiB))
    assert grew < 4 * P, grew
elif what in ("save", "load"):
    finite("big_" + what)
    (rt, st), (rb, sb) = run("tiny_save"), run("big_" + what)
    grew = (rb - sb) - (rt - st)
    print("# with --" + what + ", beyond StarPU's buffers: tiny %.1f MiB, big %.1f MiB; grew %.1f MiB, "
          "bound 4 P = %.1f MiB" % ((rt - st) / MiB, (rb - sb) / MiB, grew / MiB, 4 * P / MiB))
    assert grew < 4 * P, grew
PYEOF
"$PY" "$TMP/check.py" "$TMP" steps
ok $? "during steps the process holds StarPU's buffers and its fixed part, no copy of the model"
"$PY" "$TMP/check.py" "$TMP" save
ok $? "a save holds no copy of the model either: it writes a tensor at a time from StarPU's buffers"
"$PY" "$TMP/check.py" "$TMP" load
ok $? "nor does a resume: it reads the checkpoint a tensor at a time into StarPU's buffers"

# The checkpoint written from StarPU's buffers: every tensor of the model,
# with its shape, finite, read by a reader written here (not stepgraph's);
# the norms' weights moved off their initial ones by one Adam step of lr at
# most 1e-3 (configs/default.json), so they stay within 0.01 of 1.
"$PY" - "$TMP/big_ck" <<'PYEOF'
import glob, json, math, struct, sys
d = sorted(glob.glob(sys.argv[1] + "/step-*"))[-1]
def read(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    head.pop("__metadata__", None)
    return raw[8 + n:], head
data, head = read(d + "/model.safetensors")
H, I, L, V = 512, 1024, 2, 131072
assert head["model.embed_tokens.weight"]["shape"] == [V, H]
assert head["lm_head.weight"]["shape"] == [V, H]
assert len(head) == 3 + 9 * L, sorted(head)
for name, t in head.items():
    a, b = t["data_offsets"]
    assert t["dtype"] == "F32" and b - a == 4 * math.prod(t["shape"]), name
    vals = struct.unpack("<%df" % ((b - a) // 4), data[a:b])
    assert all(math.isfinite(v) for v in vals), name
    if name.endswith("norm.weight"):
        assert all(abs(v - 1) < 0.01 for v in vals), name
    else:
        assert max(abs(v) for v in vals) > 0, name
state, shead = read(d + "/state.safetensors")
assert {k for k in shead} == {n + s for n in head for s in (".exp_avg", ".exp_avg_sq")}, sorted(shead)
PYEOF
ok $? "the big model's checkpoint: every tensor with its shape, finite, read by a separate reader"
"$PY" - "$TMP/big_ck" "$SRC/configs/deepspeed/zero0-cpu-tiny.json" <<'PYEOF'
import glob, json, math, struct, sys
d = sorted(glob.glob(sys.argv[1] + "/step-*"))[-1]
b1, b2 = json.load(open(sys.argv[2]))["optimizer"]["params"]["betas"]
raw = open(d + "/state.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
def tensor(name):
    a, b = head[name]["data_offsets"]
    return struct.unpack("<%df" % ((b - a) // 4), raw[8 + n + a:8 + n + b])
m, v = tensor("lm_head.weight.exp_avg"), tensor("lm_head.weight.exp_avg_sq")
# After one Adam step from zero moments, with ge the step's (clipped,
# decayed-or-not) gradient: m = (1-b1) ge and v = (1-b2) ge^2, so
# v = (1-b2)/(1-b1)^2 m^2 element by element, whatever ge is. An element
# whose gradient summed to exactly 0 has m = v = 0 (seen on an Intel CPU:
# cancellation is legitimate), so positivity is asked of most, not all.
c = (1 - b2) / (1 - b1) ** 2
bad = [i for i, (x, y) in enumerate(zip(m, v))
       if not (math.isfinite(y) and y >= 0 and abs(y - c * x * x) <= 1e-5 * c * x * x + 1e-30)]
assert not bad, (len(bad), bad[:5], [(m[i], v[i]) for i in bad[:5]])
pos = sum(1 for y in v if y > 0)
assert pos >= 0.99 * len(v), (pos, len(v))
print("# head: %d of %d second moments positive; v = %.4g m^2 everywhere" % (pos, len(v), c))
PYEOF
ok $? "the saved moments are one Adam step's (v = (1-b2)/(1-b1)^2 m^2 over the head, 99% nonzero)"
# the resumed run's steps 2 and 3 are the uninterrupted run's, bit for bit
# and finite (a load that lost the weights or the moments would differ)
"$PY" - "$TMP/big_three.jsonl" "$TMP/big_load.jsonl" <<'PYEOF'
import json, math, sys
full = [json.loads(l) for l in open(sys.argv[1])]
resumed = [json.loads(l) for l in open(sys.argv[2])]
assert len(full) == 3 and [r["step"] for r in resumed] == [2, 3], (full, resumed)
assert all(math.isfinite(r["loss"]) for r in full), full
assert [r["loss"] for r in resumed] == [r["loss"] for r in full[1:]], (full, resumed)
PYEOF
ok $? "the resumed run's steps 2 and 3 are the uninterrupted run's, bit for bit"
