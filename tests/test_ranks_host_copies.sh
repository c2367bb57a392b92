#!/bin/sh
# test_ranks_host_copies.sh - with several ranks too, a save and a resume
# hold no copy of the model. Each rank writes its optimizer partition from
# its own buffers a unit's range at a time, rank 0 writes the model file a
# tensor at a time with each sharded unit gathered when its first tensor is
# written (runtime/train/rank_save.c), and a resume reads the partitions a
# tensor's range at a time (runtime/io/checkpoint_parts.h) into StarPU's
# buffers.
#
# Measured: the peak resident set of each of 2 ranks (ZeRO 3, micro batch 1,
# sequence 32; tests/peak_rss.py) on a Llama of 139.5 M parameters
# (tests/data/models/big-head-llama.json; P computed here from its
# dimensions), in a run of 2 steps, in the same run saving at its end and
# in a run resuming from that checkpoint. Checks, per rank: the save and
# the resume peak less than 2 P bytes above the run's peak (measured 0-5
# MiB; 3.6 P and 4.5 P for the save, 5.0 P and 5.9 P for the resume when
# they went through whole host copies of the weights and moments); both
# finish with finite losses, the resume at step 3 with the loss of the
# uninterrupted run's step 3. And the check before anything is allocated
# counts every rank on the host: 2 ranks of ZeRO 0 whose plan is 0.6 of
# this machine's RAM each (the model's layers chosen from /proc/meminfo)
# are refused, naming both figures, before StarPU starts, though one rank
# alone would fit. Skips without mpirun or MPI support. Prints TAP.
set -u
SG_TEST_NAME=ranks_host_copies
. "${SG_SRCDIR:-.}/tests/test_env.sh"
. "$SRC/tests/ranks_env.sh"

plan 4
cat >"$TMP/z3.json" <<'JEOF'
{"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "betas": [0.9, 0.95], "weight_decay": 0.01}},
 "gradient_clipping": 1.0, "zero_optimization": {"stage": 3}}
JEOF
# ranks NAME ARGS...: 2 ranks, each's output, status and peak RSS in
# NAME.r<rank>.{out,rc,rss}
ranks() {
	name=$1
	shift
	timeout 600 "$MPIRUN_BIN" --oversubscribe --bind-to none -np 2 \
		sh "$TMP/rank.sh" "$PY" "$SRC/tests/peak_rss.py" "$TMP/$name" \
		"$BIN" run "$TMP/z3.json" --dp_size 2 --model "$SRC/tests/data/models/big-head-llama.json" \
		--max_length 32 --ncpus 1 --warmup_steps 0 --log_interval 1 \
		--metrics "$TMP/$name.jsonl" "$@" >"$TMP/$name.mpi" 2>&1
}
ranks run --steps 3
ranks save --steps 2 --save "$TMP/ck"
ranks load --steps 1 --load "$TMP/ck"

cat >"$TMP/check.py" <<'PYEOF'
import json, math, sys
tmp, what = sys.argv[1], sys.argv[2]
MiB = 2**20
H, I, L, V = 512, 1024, 2, 131072
P = 2 * V * H + L * (4 * H * H + 3 * H * I + 2 * H) + H

def peak(name, rank):
    base = "%s/%s.r%d" % (tmp, name, rank)
    rc = int(open(base + ".rc").read())
    assert rc == 0, (name, rank, open(base + ".out").read()[-2000:])
    return int(open(base + ".rss").read())

def losses(name):
    rows = [json.loads(l) for l in open("%s/%s.jsonl" % (tmp, name))]
    assert rows and all(math.isfinite(r["loss"]) for r in rows), (name, rows)
    return {r["step"]: r["loss"] for r in rows}

if what in ("save", "load"):
    for rank in (0, 1):
        base, got = peak("run", rank), peak(what, rank)
        print("# rank %d: peak RSS %.1f MiB in the run, %.1f MiB with --%s (%+.1f MiB; bound "
              "2 P = %.1f MiB)" % (rank, base / MiB, got / MiB, what, (got - base) / MiB,
                                   2 * P / MiB))
        assert got - base < 2 * P, (rank, got - base)
    losses(what)
else:
    full, resumed = losses("run"), losses("load")
    assert list(resumed) == [3] and resumed[3] == full[3], (full, resumed)
PYEOF
"$PY" "$TMP/check.py" "$TMP" save
ok $? "2 ranks, a save: no rank's peak grows by a copy of the model (partitions a range at a time, weights gathered a unit at a time)"
"$PY" "$TMP/check.py" "$TMP" load
ok $? "2 ranks, a resume: no rank's peak grows by a copy of the model (partitions read a tensor's range at a time)"
"$PY" "$TMP/check.py" "$TMP" steps
ok $? "2 ranks, the resumed step 3 has the loss of the uninterrupted run's step 3"

# 4. 2 ranks whose plans fit the RAM one at a time but not together
"$PY" - "$TMP/fit.json" <<'PYEOF'
import json, sys
ram = int(open("/proc/meminfo").read().split()[1]) * 1024
H, I, V = 2048, 5632, 32000
per_layer = 4 * H * H + 3 * H * I + 2 * H
# fp32 ZeRO 0: weights, gradients and two moments, 16 bytes a parameter
layers = max(1, round((0.6 * ram / 16 - 2 * V * H - H) / per_layer))
json.dump({"name": "fit-ranks-llama", "architecture": "llama", "hidden_size": H,
           "intermediate_size": I, "num_hidden_layers": layers, "num_attention_heads": 16,
           "num_key_value_heads": 16, "head_dim": 128, "vocab_size": V,
           "max_position_embeddings": 1024, "tie_word_embeddings": False,
           "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "attention_bias": False},
          open(sys.argv[1], "w"))
PYEOF
cat >"$TMP/z0.json" <<'JEOF'
{"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 0}}
JEOF
timeout 120 "$MPIRUN_BIN" --oversubscribe --bind-to none -np 2 sh "$TMP/rank.sh" "$BIN" run \
	"$TMP/z0.json" --dp_size 2 --model "$TMP/fit.json" --max_length 32 --ncpus 1 --steps 1 \
	--save "$TMP/fit_ck" >"$TMP/fit.out" 2>"$TMP/fit.err"
echo $? >"$TMP/fit.rc"
"$PY" - "$TMP" <<'PYEOF'
import os, re, sys
tmp = sys.argv[1]
ram = int(open("/proc/meminfo").read().split()[1]) * 1024 / 2**30
err, out = open(tmp + "/fit.err").read(), open(tmp + "/fit.out").read()
assert int(open(tmp + "/fit.rc").read()) != 0 and "Step" not in out, out[-2000:]
assert not os.path.exists(tmp + "/fit_ck"), "the refused run created its checkpoint directory"
for rank in (0, 1):
    m = re.search(r"rank %d: this run needs at least ([\d.]+) GiB of main memory and the machine "
                  r"has ([\d.]+) GiB: the step's plan holds ([\d.]+) GiB there on each of the 2 "
                  r"ranks on this host" % rank, err)
    assert m, err[-2000:]
    need, has, each = map(float, m.groups())
    print("# rank %d: needs %.1f GiB = 2 x %.1f, the machine has %.1f" % (rank, need, each, has))
    assert abs(need - 2 * each) <= 0.1 and each < has < need and abs(has - ram) < 0.2, m.groups()
PYEOF
ok $? "2 ranks of ZeRO 0 at 0.6 of the RAM each: refused before StarPU starts, counting both ranks' plans (one alone fits)"
