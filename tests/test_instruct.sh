#!/bin/sh
# test_instruct.sh - instruction data: loss masks (runtime/io/loss_mask.h) and
# scripts/prepare_instruct.py.
#
# Always: a shard and its mask written here with struct (tests/instruct_ref.py)
# train one step of tiny-llama at lr 0 (WarmupLR's first update), so the saved
# weights are the step's own; the step's loss must equal, within 1e-5
# relative, the mean cross-entropy over the unmasked targets computed by a
# plain-torch Llama (tests/torch_model_ref.py, float64) from those weights,
# with transformers' -100 on the masked labels; the same loss without the
# mask differs (the mask is read), broken masks are refused naming the file.
# With the `tokenizers` package ($STEPGRAPH_TOKENIZE_VENV, default
# ~/.cache/stepgraph/venv-bench, as scripts/tokenize.sh sets it up):
# alpaca-style and chat records under a hand-written WordLevel tokenizer,
# whose trained tokens are exactly the responses (hand-worked ids), bad
# records counted by kind, the pad and pack layouts, over-long records
# dropped or truncated. Prints TAP.
set -u
SG_TEST_NAME=instruct
. "${SG_SRCDIR:-.}/tests/test_env.sh"
. "$SRC/tests/train_lib.sh"
VENV=${STEPGRAPH_TOKENIZE_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/stepgraph/venv-bench}
REF="$SRC/tests/instruct_ref.py"
T=16
# one window of 16 + 1 tokens: a "prompt" of 6, a "response" of 5, padding of 2, ...
IDS=$("$PY" -c "print(','.join(str((i * 37 + 11) % 256) for i in range(17)))")
MASK="0,0,0,0,0,0,1,1,1,1,1,0,0,1,1,0,0"
"$PY" "$REF" write "$TMP/s.bin" $T "$IDS" "$MASK"
ONE="--max_length $T --steps 1 --warmup_steps 0 --log_interval 1 --set train_micro_batch_size_per_gpu=1 --set gradient_accumulation_steps=1"
"$BIN" run "$SRC/configs/default.json" --data "$TMP/s.bin" $ONE --save "$TMP/ck" \
	--metrics "$TMP/m.jsonl" >"$TMP/m.out" 2>&1
ok $? "one step on a masked shard (lr 0: the saved weights are the step's)"
loss=$("$PY" -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["loss"])' "$TMP/m.jsonl")
ref=$("$PY" "$REF" loss "$SRC/models/tiny-llama.json" "$TMP/ck/step-00000001/model.safetensors" "$TMP/s.bin" $T 2>&1)
refall=$("$PY" "$REF" loss "$SRC/models/tiny-llama.json" "$TMP/ck/step-00000001/model.safetensors" "$TMP/s.bin" $T nomask 2>&1)
echo "# stepgraph $loss, reference with the mask $ref, without $refall"
"$PY" -c 'import math,sys; a,b,c=map(float,sys.argv[1:]); sys.exit(not (math.isfinite(a) and abs(a-b) <= 1e-5*abs(b) and abs(c-b) > 1e-3*abs(b)))' \
	"$loss" "$ref" "$refall"
ok $? "the loss is the mean over the unmasked targets (transformers' -100 labels), within 1e-5; without the mask it is another"
grep -q "loss mask: 7 of the 17 tokens of masked shards are targets" "$TMP/m.out"
ok $? "run says how many tokens the mask trains"
# refusals, naming the mask file
cp "$TMP/s.bin" "$TMP/bad.bin"
"$PY" "$REF" write "$TMP/short.bin" $T "$IDS" "0,1"
cp "$TMP/short.bin.mask" "$TMP/bad.bin.mask"
fails_run() { # NAME TEXT DATA
	"$BIN" run "$SRC/configs/default.json" --data "$3" $ONE >"$TMP/$1.out" 2>&1
	[ $? -ne 0 ] && grep -qF -- "$2" "$TMP/$1.out" && ! grep -q "^Step" "$TMP/$1.out"
}
fails_run count "bad.bin.mask: header[2] (token count) is 2, but its shard has 17 tokens" "$TMP/bad.bin"
ok $? "a mask of another token count: refused, naming the file"
"$PY" "$REF" write "$TMP/two.bin" $T "$IDS" "0,0,0,0,0,0,2,1,1,1,1,0,0,1,1,0,0"
fails_run two "two.bin.mask: token 6 has mask 2, expected 0 or 1" "$TMP/two.bin"
ok $? "a mask byte other than 0 or 1: refused, naming the file and the token"

if ! [ -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import tokenizers' 2>/dev/null; then
	skip "no tokenizers package in $VENV" 6
	done_testing
	exit
fi
VPY=$VENV/bin/python
PREP="$SRC/scripts/prepare_instruct.py"
WL="$SRC/tests/data/tokenizers/wordlevel.json"
cat >"$TMP/a.jsonl" <<'EOF'
{"instruction": "the cat", "input": "", "output": "sat on the mat."}
{"instruction": "a dog", "input": "the mat", "output": "a dog sat."}
{"instruction": "no output here"}
{"instruction": "", "output": "the"}
not json
{"messages": [{"role": "user", "content": "the cat"}, {"role": "assistant", "content": "sat on a mat."}]}
{"messages": [{"role": "narrator", "content": "the"}]}
EOF
"$VPY" "$PREP" --tokenizer "$WL" --out "$TMP/o" --max-length 64 "$TMP/a.jsonl" 2>"$TMP/prep.err"
ok $? "prepare_instruct.py: alpaca and chat records with a WordLevel tokenizer"
# read back with struct: the targets (mask 1) of each 64-token record
"$PY" - "$TMP/o" <<'PYEOF'
import json, struct, sys
d = sys.argv[1]
rep = json.load(open(d + "/prepare-report.json"))
assert rep["read"] == 7 and rep["used"] == 3, rep
assert rep["bad"] == {"missing_field": 1, "empty": 1, "invalid_json": 1, "unknown_role": 1}, rep
raw = open(d + "/train_000000.bin", "rb").read()
n = struct.unpack("<256i", raw[:1024])[2]
ids = struct.unpack("<%dH" % n, raw[1024:])
mask = open(d + "/train_000000.bin.mask", "rb").read()[1024:]
assert n == 3 * 64 + 1 == len(mask), (n, len(mask))
# the vocabulary: [UNK] 0, <|endoftext|> 1, the 2, cat 3, sat 4, on 5, mat 6, . 7, a 8, dog 9
want = [[4, 5, 2, 6, 7, 1],           # "sat on the mat." then the end token
        [8, 9, 4, 7, 1],              # "a dog sat."
        [4, 5, 8, 6, 0, 0, 0]]        # chatml: "sat on a mat.<|im_end|>\n": the pre-tokenizer
                                      # keeps ".<|" together ([UNK]), then im_end, |> ([UNK])
for r in range(3):
    rec, m = ids[64 * r:64 * r + 64], mask[64 * r:64 * r + 64]
    got = [t for t, b in zip(rec, m) if b]
    assert got == want[r], (r, got, want[r])
    first = m.index(1)
    assert all(m[first:first + len(want[r])]), (r, list(m))  # one run of targets
    assert m[0] == 0 and sum(m) == len(want[r]), r
print("# prepare: 3 records of 64 tokens; targets", want)
PYEOF
ok $? "the trained tokens are exactly each response (and its end token); bad records counted by kind"
grep -q "7 records read, 3 used (0 truncated), 4 bad (empty 1, invalid_json 1, missing_field 1, unknown_role 1)" "$TMP/prep.err"
ok $? "the report line names every kind of bad record"
"$VPY" "$PREP" --tokenizer "$WL" --out "$TMP/p" --max-length 64 --pack "$TMP/a.jsonl" 2>/dev/null &&
	"$PY" -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["layout"]=="pack" and r["train_tokens"] < 3*64 and r["trained_tokens"]==18, r' "$TMP/p/prepare-report.json"
ok $? "--pack: the records back to back, the same 18 targets"
# the records are 32, 45 and 20 tokens long (targets from 26, 40 and 13 on)
"$VPY" "$PREP" --tokenizer "$WL" --out "$TMP/short" --max-length 30 "$TMP/a.jsonl" "$TMP/a.jsonl" 2>"$TMP/short.err"
r1=$?
"$VPY" "$PREP" --tokenizer "$WL" --out "$TMP/cut" --max-length 30 --truncate "$TMP/a.jsonl" "$TMP/a.jsonl" 2>"$TMP/cut.err"
r2=$?
[ $r1 -eq 0 ] && grep -q "2 used (0 truncated), 12 bad (.*over_long 4" "$TMP/short.err" && [ $r2 -eq 0 ] &&
	grep -q "4 used (2 truncated), 10 bad (.*nothing_to_train 2" "$TMP/cut.err"
ok $? "records over --max-length: counted as over-long, or cut with --truncate (a cut that leaves no target: counted too)"
"$BIN" run "$SRC/configs/default.json" --data "$TMP/o/train_*.bin" --max_length 64 --steps 2 \
	--set gradient_accumulation_steps=1 --metrics "$TMP/o.jsonl" >"$TMP/o.out" 2>&1 &&
	grep -q "loss mask: 18 of the 193 tokens" "$TMP/o.out"
ok $? "run trains on the prepared shards with their mask"
done_testing
