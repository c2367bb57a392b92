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
# uninterrupted run's step 3. Skips without mpirun or MPI support. Prints
# TAP.
set -u
SG_TEST_NAME=ranks_host_copies
. "${SG_SRCDIR:-.}/tests/test_env.sh"
. "$SRC/tests/ranks_env.sh"

echo "1..3"
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
