#!/bin/sh
# test_eager_ops.sh - the op lists of the eager attention cost
# (runtime/sim/eager_attention.c, docs/simulate.md "Eager attention") against
# the ops PyTorch runs. Debian's torch executes the two eager attention
# forwards as transformers writes them (GPT-OSS's with sinks and a softmax in
# the logits' dtype; Llama's softmax upcast to fp32), bf16, grouped-query,
# and autograd's backward; a dispatch mode records every aten op. Over the
# score-sized tensors (B H T^2 values, the sink column included), the ops
# other than views and the products must be the ones the lists name, and
# their bytes per score element what the lists count: GPT-OSS 22 forward
# (11 bf16 passes) and 30 backward (15), Llama 28 and 28. Two rules are the
# lists' and not visible to the mode: slice_backward fills its zeros before
# the copy (one more write), and the max's scatter into fresh zeros runs in
# place in PyTorch 2 (the mode makes it out of place). The products must be 2
# forward and 4 backward, and the q-sized copies 3 forward and 2 backward.
# A list with one op removed must fail (control). Prints TAP.
set -u
SG_TEST_NAME=eager_ops
. "${SG_SRCDIR:-.}/tests/test_env.sh"
if ! "$PY" -c 'import torch; from torch.utils._python_dispatch import TorchDispatchMode' \
	>/dev/null 2>&1; then
	skip_all "needs python3 with torch (a dispatch mode)"
fi
cat >"$TMP/ops.py" <<'PYEOF'
import json, sys
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

B, H, HKV, T, D = 2, 4, 2, 64, 8  # (B, H, T, T) scores, 8 times a q-sized tensor
S, Q = B * H * T * T, B * H * T * D
VIEWS = {"slice", "unsqueeze", "expand", "_unsafe_view", "_reshape_alias", "transpose",
         "detach", "squeeze", "view", "is_same_size", "t", "permute", "select", "alias",
         "as_strided", "ones_like"}


class Record(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        ins = [a for a in tree_flatten((args, kwargs or {}))[0] if isinstance(a, torch.Tensor)]
        outs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
        self.ops.append((func.__name__.split(".")[0], ins, outs))
        return out


def tally(ops):
    """(element-wise ops over the scores, their bytes per score, products,
    q-sized copies)"""
    names, nbytes, products, copies = [], 0, 0, 0
    for name, ins, outs in ops:
        if name in VIEWS:
            continue
        big = [t for t in ins + outs if t.numel() >= 0.9 * S]
        if name == "bmm":
            products += 1
            continue
        if not big:
            copies += name in ("clone", "copy_") and any(t.numel() == Q for t in outs + ins)
            continue
        names.append(name)
        if name == "scatter":  # PyTorch 2: scatter_ into the fresh zeros
            continue
        nbytes += sum(t.element_size() for t in big)
        if name == "slice_backward":  # the zero fill before the copy
            nbytes += sum(t.element_size() for t in outs if t.numel() >= 0.9 * S)
    return names, nbytes, products, copies


def repeat_kv(x, n):  # transformers' repeat_kv
    b, h, t, d = x.shape
    return x[:, :, None].expand(b, h, n, t, d).reshape(b, h * n, t, d)


def run(sinks):
    torch.manual_seed(0)
    q = torch.randn(B, H, T, D, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(B, HKV, T, D, dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(B, HKV, T, D, dtype=torch.bfloat16, requires_grad=True)
    s = torch.randn(H, dtype=torch.bfloat16, requires_grad=True)
    mask = torch.triu(torch.full((T, T), -1e4), 1).to(torch.bfloat16)[None, None]
    mask = mask.expand(B, 1, T, T).contiguous()  # (B, 1, T, T), as transformers builds it
    rec = Record()
    with rec:
        ks, vs = repeat_kv(k, H // HKV), repeat_kv(v, H // HKV)
        w = torch.matmul(q, ks.transpose(2, 3)) * D ** -0.5
        w = w + mask
        if sinks:  # modeling_gpt_oss.py
            logits = torch.cat([w, s.reshape(1, -1, 1, 1).expand(B, -1, T, -1)], dim=-1)
            logits = logits - logits.max(dim=-1, keepdim=True).values
            p = F.softmax(logits, dim=-1, dtype=logits.dtype)[..., :-1]
        else:  # modeling_llama.py
            p = F.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
        p = F.dropout(p, p=0.0, training=True)
        o = torch.matmul(p, vs).transpose(1, 2).contiguous()
        nf = len(rec.ops)
        o.backward(torch.ones_like(o))
    return tally(rec.ops[:nf]), tally(rec.ops[nf:])


print(json.dumps({"gpt_oss": run(True), "llama": run(False)}))
PYEOF
"$PY" "$TMP/ops.py" >"$TMP/ops.json" 2>"$TMP/ops.err"
ok $? "torch runs both eager attentions forward and backward" || sed 's/^/# /' "$TMP/ops.err"

# check WANT: the lists of runtime/sim/eager_attention.c against ops.json
check() {
	"$PY" - "$TMP/ops.json" "$1" <<'PYEOF'
import json, sys
got = json.load(open(sys.argv[1]))
want = json.loads(sys.argv[2])
bad = []
for model, sides in want.items():
    for i, side in enumerate(("forward", "backward")):
        names, nbytes, products, copies = got[model][i]
        w_names, w_bytes, w_products, w_copies = sides[i]
        if sorted(names) != sorted(w_names):
            bad.append("%s %s: ops %s, the list says %s" % (model, side, names, w_names))
        if abs(nbytes - w_bytes) > 1e-9:
            bad.append("%s %s: %g bytes a score, the list says %g" % (model, side, nbytes, w_bytes))
        if products != w_products or copies != w_copies:
            bad.append("%s %s: %d products and %d q-sized copies, the list says %d and %d" % (
                model, side, products, copies, w_products, w_copies))
print("; ".join(bad) if bad else "as listed")
sys.exit(1 if bad else 0)
PYEOF
}
LISTS='{"gpt_oss": [[["mul", "add", "cat", "max", "sub", "_softmax"], 22, 2, 3],
	[["slice_backward", "_softmax_backward_data", "neg", "sum", "zeros", "scatter", "add", "mul"],
	 30, 4, 2]],
 "llama": [[["mul", "add", "_to_copy", "_softmax", "_to_copy"], 28, 2, 3],
	[["_to_copy", "_softmax_backward_data", "_to_copy", "mul"], 28, 4, 2]]}'
out=$(check "$LISTS")
ok $? "the eager op lists are the ops PyTorch runs, with the bytes they count: $out"
# control: GPT-OSS's forward without the max subtraction
BAD=$(printf '%s' "$LISTS" | sed 's/"max", "sub", "_softmax"\], 22/"_softmax"], 18/')
out=$(check "$BAD")
[ $? -ne 0 ]
ok $? "control: a list that misses the max subtraction fails ($out)"
done_testing
