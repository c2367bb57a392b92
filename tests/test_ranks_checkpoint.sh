#!/bin/sh
# test_ranks_checkpoint.sh - checkpoints with several ranks (docs/ranks.md,
# "Checkpoints"): 2 ranks save (each its optimizer partition, rank 0 the
# gathered weights) and resume; compared with independent readers
# (tests/ranks_compare.py on the metrics, tests/ckpt_compare.py on the
# weights file):
# - the layout (latest, model.safetensors, one optim.rank<r>-of-2 per rank,
#   no state.safetensors, no leftover);
# - resume with the same dp: the losses and norms of the uninterrupted run,
#   bit for bit (ZeRO 3 with gathered and persistent units, accumulation 2;
#   ZeRO 2 saved as bf16: the fp32 masters come from the partitions);
# - the gathered weights file equals the 1-rank run's (same global batch,
#   3 steps): relative L2 difference within 1e-6 over the whole model, 1e-5
#   per tensor (the runs differ by the rounding of the gradient sums, which
#   Adam's normalisation amplifies for near-zero gradients);
# - another dp, same global batch: 2 ranks of micro 3 resumed by 3 ranks of
#   micro 2, and 2 ranks of micro 1 by 1 rank of micro 2, continue the
#   uninterrupted run within 1e-5; another global batch is refused naming
#   both dp values;
# - a missing, truncated, foreign or inconsistent partition is refused
#   naming the file; a negative second moment or a NaN master in a
#   partition (read a range at a time, once StarPU has started) ends the run
#   before its first step, naming the file, the tensor and the element;
# - 2 ranks start from a plain weights file as 1 rank does;
# - SuperOffload (optimizer offloaded in sub-groups) and fp16 with dynamic
#   loss scaling while steps overflow (the scaler's state per rank file):
#   resumed bit for bit, the skipped steps and scales too;
# - save_interval with 2 steps in flight: every checkpoint kept, and a step
#   directory named directly resumes bit for bit;
# - a save that fails on rank 1 only (file-size limit, as a full disk) fails
#   on every rank, `latest` still naming the previous checkpoint.
# Skips without mpirun or MPI support. Prints TAP.
set -u
SG_TEST_NAME=ranks_ck
. "${SG_SRCDIR:-.}/tests/test_env.sh"

. "$SRC/tests/ranks_env.sh"

# ds NAME MICRO ACCUM ZERO-JSON: a DeepSpeed config (ranks_env.sh)
# run NAME NP DS ARGS...: NP ranks under mpirun (NP 0: one process, no mpirun)
run() {
	name=$1 np=$2 cfg=$3
	shift 3
	if [ "$np" -eq 0 ]; then
		"$BIN" run "$TMP/$cfg.json" --max_length 32 --ncpus 1 --metrics "$TMP/$name.jsonl" \
			"$@" >"$TMP/$name.out" 2>"$TMP/$name.err"
	else
		timeout 300 "$MPIRUN_BIN" --oversubscribe --bind-to none -np "$np" \
			sh "$TMP/rank.sh" "$BIN" run "$TMP/$cfg.json" --dp_size "$np" --max_length 32 \
			--ncpus 1 --metrics "$TMP/$name.jsonl" "$@" >"$TMP/$name.out" 2>"$TMP/$name.err"
	fi
	echo $? >"$TMP/$name.rc"
}
# tail_of FULL K: the steps after K of FULL's metrics, into FULL.tail.jsonl
tail_of() {
	tail -n +$(($2 + 1)) "$TMP/$1.jsonl" >"$TMP/$1.tail.jsonl"
}
# same FULL RESUMED RTOL: both ran; RESUMED's steps = FULL's last ones
same() {
	[ "$(cat "$TMP/$1.rc")" = 0 ] && [ "$(cat "$TMP/$2.rc")" = 0 ] &&
		"$PY" "$SRC/tests/ranks_compare.py" "$TMP/$1.tail.jsonl" "$TMP/$2.jsonl" "$3" \
			>"$TMP/$2.cmp" 2>&1
	s=$?
	[ $s -eq 0 ] || cat "$TMP/$2.cmp" "$TMP/$1.err" "$TMP/$2.err" | head -20 | sed 's/^/# /'
	sed 's/^/# /' "$TMP/$2.cmp"
	return $s
}

plan 18
# 1-3. ZeRO 3 (gathered units sharded, the small ones persistent and whole),
# accumulation 2: 6 steps, against 3 saved + 3 resumed
ds z3 1 2 '{"stage": 3}'
run z3_full 2 z3 --steps 6
run z3_a 2 z3 --steps 3 --save "$TMP/ck3"
CK=$TMP/ck3/step-00000003
[ "$(cat "$TMP/z3_a.rc")" = 0 ] && [ "$(cat "$TMP/ck3/latest")" = step-00000003 ] &&
	[ -f "$CK/model.safetensors" ] && [ -f "$CK/config.json" ] &&
	[ -f "$CK/optim.rank0-of-2.safetensors" ] && [ -f "$CK/optim.rank1-of-2.safetensors" ] &&
	! [ -e "$CK/state.safetensors" ] && [ "$(ls -A "$TMP/ck3" | wc -l)" -eq 2 ] &&
	[ "$(ls "$CK" | wc -l)" -eq 4 ]
ok $? "2 ranks save: latest, config.json, model.safetensors, optim.rank0-of-2 and optim.rank1-of-2, nothing else"
run z3_b 2 z3 --steps 3 --load "$TMP/ck3"
tail_of z3_full 3
same z3_full z3_b 0 && grep -q "^Step 4 |" "$TMP/z3_b.out"
ok $? "ZeRO 3, 2 ranks: saved at step 3, resumed to 6: steps 4-6 as uninterrupted, bit for bit"
ds z3one 2 2 '{"stage": 3}'
run z3_one 0 z3one --steps 3 --save "$TMP/ck1"
[ "$(cat "$TMP/z3_one.rc")" = 0 ] &&
	"$PY" "$SRC/tests/ckpt_compare.py" "$CK/model.safetensors" \
		"$TMP/ck1/step-00000003/model.safetensors" 1e-6 1e-5 >"$TMP/w.cmp" 2>&1
s=$?
sed 's/^/# /' "$TMP/w.cmp"
ok $s "gathered weights file of 2 ranks = 1 rank's (micro 2): whole model within 1e-6, each tensor 1e-5 (relative L2)"

# 4. ZeRO 2 saved as bf16: the weights file is rounded, the masters are not
ds z2 1 1 '{"stage": 2}'
run z2_full 2 z2 --steps 6
run z2_a 2 z2 --steps 3 --save "$TMP/ckb" --save_dtype bf16
run z2_b 2 z2 --steps 3 --load "$TMP/ckb"
tail_of z2_full 3
same z2_full z2_b 0
ok $? "ZeRO 2, 2 ranks, saved as bf16: resumed steps 4-6 bit for bit (fp32 masters in the partitions)"

# 5-6. another dp, the same global batch
ds m3 3 1 '{"stage": 2}'
ds m2 2 1 '{"stage": 2}'
run m3_full 2 m3 --steps 6
run m3_a 2 m3 --steps 3 --save "$TMP/ckm"
run m3_b 3 m2 --steps 3 --load "$TMP/ckm"
tail_of m3_full 3
same m3_full m3_b 1e-5 && grep -q "^Step 4 |" "$TMP/m3_b.out"
ok $? "2 ranks of micro 3 saved at step 3, resumed by 3 ranks of micro 2: steps 4-6 within 1e-5"
ds z2two 2 2 '{"stage": 2}'
run r1 0 z2two --steps 3 --load "$TMP/ck3"
tail_of z3_full 3
same z3_full r1 1e-5 && grep -q "^Step 4 |" "$TMP/r1.out"
ok $? "2 ranks of micro 1 (ZeRO 3) resumed by 1 rank of micro 2 (ZeRO 2): steps 4-6 within 1e-5"

# 7. another global batch: refused on every rank, naming both dp values
run bad 3 z3 --steps 1 --load "$TMP/ck3"
[ "$(cat "$TMP/bad.rc")" != 0 ] && [ "$(cat "$TMP/bad.rc")" != 124 ] &&
	grep -q "rank [012]: .*micro batch x dp_size: here 1 x 3; the checkpoint was written by dp_size 2" "$TMP/bad.err" &&
	! grep -q "^Step" "$TMP/bad.out"
ok $? "3 ranks of micro 1 from a 2-rank checkpoint of micro 1: refused naming dp 3 and dp 2"

# 8-10. a missing or corrupt partition: refused naming the file
cp -r "$TMP/ck3" "$TMP/ckmiss"
rm "$TMP/ckmiss/step-00000003/optim.rank1-of-2.safetensors"
run miss 2 z3 --steps 1 --load "$TMP/ckmiss"
[ "$(cat "$TMP/miss.rc")" != 0 ] && [ "$(cat "$TMP/miss.rc")" != 124 ] &&
	grep -q "optim.rank1-of-2.safetensors is missing" "$TMP/miss.err"
ok $? "missing optim.rank1-of-2.safetensors: refused naming it"
cp -r "$TMP/ck3" "$TMP/ckcut"
f=$TMP/ckcut/step-00000003/optim.rank1-of-2.safetensors
head -c 100000 "$f" >"$f.cut" && mv "$f.cut" "$f"
run cut 2 z3 --steps 1 --load "$TMP/ckcut"
[ "$(cat "$TMP/cut.rc")" != 0 ] && [ "$(cat "$TMP/cut.rc")" != 124 ] &&
	grep -q "optim.rank1-of-2.safetensors" "$TMP/cut.err" && ! grep -q "^Step" "$TMP/cut.out"
ok $? "truncated optim.rank1-of-2.safetensors: refused naming it"
# a partition of another run (ZeRO 2: every unit sharded) in rank 1's place
cp -r "$TMP/ck3" "$TMP/ckmix"
cp "$TMP/ckm/step-00000003/optim.rank1-of-2.safetensors" "$TMP/ckmix/step-00000003/"
run mix 0 z3one --steps 1 --load "$TMP/ckmix"
[ "$(cat "$TMP/mix.rc")" != 0 ] && grep -q "optim.rank1-of-2.safetensors: unit .*starts at element" "$TMP/mix.err" &&
	! grep -q "^Step" "$TMP/mix.out"
ok $? "rank 1's partition from another run (other layout): refused naming it"
# rank 0's partition with unit 1's offset moved: the partitions do not tile it
cp -r "$TMP/ck3" "$TMP/ckgap"
"$PY" - "$TMP/ckgap/step-00000003/optim.rank0-of-2.safetensors" <<'PYEOF'
import struct, sys
p = sys.argv[1]
b = open(p, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = b[8:8 + n]
h2 = h.replace(b'"unit.1.offset":"0"', b'"unit.1.offset":"1"')
assert h2 != h, h[:200]
open(p, "wb").write(b[:8] + h2 + b[8 + n:])
PYEOF
run gap 0 z3one --steps 1 --load "$TMP/ckgap"
[ "$(cat "$TMP/gap.rc")" != 0 ] && grep -q "optim.rank0-of-2.safetensors: unit 1: this partition starts at element 1" "$TMP/gap.err" &&
	! grep -q "^Step" "$TMP/gap.out"
ok $? "partitions that do not tile a unit (an offset moved): refused naming the file"

# 11. a plain weights file: every rank reads it and takes its shard
run wone 0 z3one --steps 3 --load "$TMP/ck1/step-00000003/model.safetensors"
run wtwo 2 z3 --steps 3 --load "$TMP/ck1/step-00000003/model.safetensors"
cp "$TMP/wone.jsonl" "$TMP/wone.tail.jsonl"
same wone wtwo 1e-5 && ! grep -q "^Step 4 |" "$TMP/wtwo.out"
ok $? "2 ranks from a weights file = 1 rank from it (micro 2) within 1e-5, a new run (step 1)"
# 12. a Hugging Face directory (its config.json)
run hone 0 z3one --steps 3 --load "$TMP/ck3/step-00000003/config.json"
run htwo 2 z3 --steps 3 --load "$TMP/ck3/step-00000003/config.json"
cp "$TMP/hone.jsonl" "$TMP/hone.tail.jsonl"
same hone htwo 1e-5
ok $? "2 ranks from a Hugging Face directory (a 2-rank step's config.json) = 1 rank within 1e-5"

# 14. rank 1 alone runs out of room while writing its partition: every rank
# fails, naming rank 1's file; `latest` still names step 3, which resumes
cp -r "$TMP/ck3" "$TMP/ckfull"
cat >"$TMP/rankfs.sh" <<'SHEOF'
export STARPU_HOME="$STARPU_HOME.${OMPI_COMM_WORLD_RANK:-0}"
mkdir -p "$STARPU_HOME"
trap '' XFSZ
[ "${OMPI_COMM_WORLD_RANK:-0}" = 1 ] && exec prlimit --fsize=1000000 "$@"
exec "$@"
SHEOF
timeout 300 "$MPIRUN_BIN" --oversubscribe --bind-to none -np 2 sh "$TMP/rankfs.sh" "$BIN" run \
	"$TMP/z3.json" --dp_size 2 --max_length 32 --ncpus 1 --steps 1 --load "$TMP/ckfull" \
	--save "$TMP/ckfull" >"$TMP/full.out" 2>"$TMP/full.err"
rc=$?
run full_b 2 z3 --steps 3 --load "$TMP/ckfull"
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "rank 1: .*optim.rank1-of-2.safetensors" "$TMP/full.err" &&
	[ "$(cat "$TMP/ckfull/latest")" = step-00000003 ] && ! [ -e "$TMP/ckfull/step-00000004" ] &&
	same z3_full full_b 0
s=$?
[ $s -eq 0 ] || sed 's/^/# /' "$TMP/full.err" | head -5
ok $s "a save failing on rank 1 only (file-size limit): refused naming its file, latest still step 3, which resumes bit for bit"

# 15. save_interval 2, lookahead 2, 6 steps: step-2, -4 and -6 kept; step-2
# named directly (not through latest) resumes bit for bit
run iv 2 z3 --steps 6 --save "$TMP/ckiv" --save_interval 2 --save_keep 0 --lookahead 2
run iv_b 2 z3 --steps 4 --load "$TMP/ckiv/step-00000002"
tail_of z3_full 2
[ "$(cat "$TMP/ckiv/latest")" = step-00000006 ] &&
	[ "$(ls "$TMP/ckiv" | tr '\n' ' ')" = "latest step-00000002 step-00000004 step-00000006 " ] &&
	same z3_full iv_b 0 && grep -q "^Step 3 |" "$TMP/iv_b.out"
ok $? "save_interval 2 with lookahead 2: steps 2, 4, 6 saved; step-00000002 named directly resumes steps 3-6 bit for bit"

# 16. SuperOffload (CPU Adam on sub-groups of each rank's partition)
ds so 1 1 '{"stage": 3, "sub_group_size": 100000, "offload_optimizer": {"device": "cpu", "super_offload": true}}'
run so_full 2 so --steps 8
run so_a 2 so --steps 4 --save "$TMP/ckso"
run so_b 2 so --steps 4 --load "$TMP/ckso"
tail_of so_full 4
same so_full so_b 0
ok $? "SuperOffload, 2 ranks: saved at step 4, resumed to 8: steps 5-8 bit for bit"
# 17. fp16, dynamic scale 2^22: steps overflow and are skipped around the save
cat >"$TMP/fp.json" <<JEOF
{"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "betas": [0.9, 0.95], "weight_decay": 0.01}},
 "gradient_clipping": 1.0, "zero_optimization": {"stage": 3},
 "fp16": {"enabled": true, "initial_scale_power": 22, "hysteresis": 2, "loss_scale_window": 2}}
JEOF
run fp_full 2 fp --steps 8
run fp_a 2 fp --steps 4 --save "$TMP/ckfp"
run fp_b 2 fp --steps 4 --load "$TMP/ckfp"
[ "$(cat "$TMP/fp_full.rc")" = 0 ] && [ "$(cat "$TMP/fp_b.rc")" = 0 ] &&
	"$PY" - "$TMP/fp_full.jsonl" "$TMP/fp_b.jsonl" <<'PYEOF'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])][4:]
b = [json.loads(l) for l in open(sys.argv[2])]
key = lambda r: (r["step"], r["skipped"], r["loss_scale"], r["loss"], r["grad_norm"])
assert len(a) == 4 and [key(r) for r in a] == [key(r) for r in b], (a, b)
assert any(r["skipped"] for r in a), "no step skipped: the check would not test the scaler"
PYEOF
ok $? "fp16 dynamic scale, 2 ranks: resumed steps 5-8 skip and scale as uninterrupted, same losses"

# 18. values read a range at a time after StarPU starts: a negative second
# moment in rank 1's partition (2 ranks) and a NaN master in rank 0's (1
# rank), each named with its file, tensor and element
cat >"$TMP/plant.py" <<'PYEOF'
import json, struct, sys
path, kind, value = sys.argv[1], sys.argv[2], float(sys.argv[3])
b = bytearray(open(path, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
name = sorted(k for k in h if k.endswith("." + kind))[0]
e = 3 if h[name]["shape"][0] > 3 else 0
at = 8 + n + h[name]["data_offsets"][0] + 4 * e
b[at:at + 4] = struct.pack("<f", value)
open(path, "wb").write(bytes(b))
print("%s: %s: element %d is" % (path.rsplit("/", 1)[1], name, e))
PYEOF
cp -r "$TMP/ck3" "$TMP/ckneg"
cp -r "$TMP/ck3" "$TMP/cknan"
want_neg=$("$PY" "$TMP/plant.py" "$TMP/ckneg/step-00000003/optim.rank1-of-2.safetensors" exp_avg_sq -1)
want_nan=$("$PY" "$TMP/plant.py" "$TMP/cknan/step-00000003/optim.rank0-of-2.safetensors" master nan)
run neg 2 z3 --steps 1 --load "$TMP/ckneg"
run nan 0 z3one --steps 1 --load "$TMP/cknan"
s=1
[ "$(cat "$TMP/neg.rc")" != 0 ] && grep -qF "$want_neg -1 (not finite or negative)" "$TMP/neg.err" &&
	! grep -q "^Step" "$TMP/neg.out" && [ "$(cat "$TMP/nan.rc")" != 0 ] &&
	grep -qF "$want_nan nan (not finite)" "$TMP/nan.err" && ! grep -q "^Step" "$TMP/nan.out" && s=0
[ $s -eq 0 ] || { echo "# want: $want_neg / $want_nan"; tail -n 3 "$TMP/neg.err" "$TMP/nan.err" | sed 's/^/# /'; }
ok $s "a negative second moment (2 ranks) and a NaN master (1 rank) in a partition: refused before the first step, naming the file, tensor and element"
