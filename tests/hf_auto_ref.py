"""hf_auto_ref.py - fill a DeepSpeed config's "auto" values with transformers'
own HfTrainerDeepSpeedConfig, and compare with what `stepgraph config`
printed (tests/test_auto_vs_transformers.sh).

usage: python hf_auto_ref.py DS_CONFIG HIDDEN_SIZE DP_SIZE STEPS STEPGRAPH_OUT [ARG=VALUE...]

STEPGRAPH_OUT: what `stepgraph config` wrote, its warnings included.

ARG=VALUE are TrainingArguments fields (learning_rate=3e-4, bf16=true,
warmup_steps=0.1...); the others keep transformers' dataclass defaults. Prints
one line per "auto" key of the config:
    ok KEY hf=VALUE stepgraph=VALUE
    not ok KEY hf=VALUE stepgraph=VALUE
and "not ok" for a key stepgraph filled that the Trainer did not.

Only trainer_config_process and trainer_config_finalize run (transformers'
code); what they call on the config object (find_config_node, get_value,
is_true, is_false, is_zero3) comes from Accelerate's HfDeepSpeedConfig, which
needs torch: a small stand-in below gives those five their documented
meaning on a plain dict.
"""
import dataclasses
import json
import math
import re
import sys
import types

import transformers.integrations.deepspeed as hfds
from transformers.training_args import TrainingArguments


class DictConfig:
    """The config queries HfTrainerDeepSpeedConfig uses, over self.config."""

    def find_config_node(self, ds_key_long):
        node = self.config
        parts = ds_key_long.split(".")
        for p in parts[:-1]:
            node = node.get(p)
            if node is None:
                return None, parts[-1]
        return node, parts[-1]

    def get_value(self, ds_key_long, default=None):
        node, key = self.find_config_node(ds_key_long)
        return default if node is None else node.get(key, default)

    def is_true(self, ds_key_long):
        v = self.get_value(ds_key_long)
        return False if v is None else bool(v)

    def is_false(self, ds_key_long):
        v = self.get_value(ds_key_long)
        return False if v is None else not bool(v)

    def is_zero3(self):
        return self.get_value("zero_optimization.stage") == 3


class Ref(hfds.HfTrainerDeepSpeedConfig, DictConfig):
    def __init__(self, config):  # not the Trainer's: it would need Accelerate
        self.config = config
        self._dtype = None
        self.mismatches = []


def training_args(dp_size, overrides):
    """A plain object with TrainingArguments' defaults and fields, and its
    real get_warmup_steps."""
    a = types.SimpleNamespace()
    for f in dataclasses.fields(TrainingArguments):
        if f.default is not dataclasses.MISSING:
            setattr(a, f.name, f.default)
    for k, v in overrides.items():
        cur = getattr(a, k)
        if isinstance(cur, bool):
            v = v.lower() in ("1", "true", "yes", "on")
        elif isinstance(cur, int) and re.fullmatch(r"-?\d+", v):
            v = int(v)
        else:
            v = float(v)
        setattr(a, k, v)
    a.world_size = dp_size
    a.get_warmup_steps = types.MethodType(TrainingArguments.get_warmup_steps, a)
    return a


def autos(obj, path=""):
    for k, v in obj.items():
        p = path + k
        if isinstance(v, dict):
            yield from autos(v, p + ".")
        elif v == "auto":
            yield p


def get(obj, path):
    for p in path.split("."):
        obj = obj[p]
    return obj


def same(hf, sg):
    """hf: the Trainer's value; sg: stepgraph's printed JSON text."""
    if hf == "auto":
        return False
    sg = json.loads(sg)
    if isinstance(hf, list):
        return len(hf) == len(sg) and all(same(a, json.dumps(b)) for a, b in zip(hf, sg))
    if isinstance(hf, bool) or isinstance(sg, bool):
        return hf is sg
    return math.isclose(float(hf), float(sg), rel_tol=1e-8, abs_tol=0.0)


def main():
    ds_path, hidden, dp, steps, sg_out = sys.argv[1:6]
    overrides = dict(a.split("=", 1) for a in sys.argv[6:])
    with open(ds_path) as f:
        config = json.load(f)
    keys = list(autos(config))
    hfds.torch = types.SimpleNamespace(bfloat16="bf16", float16="fp16", float32="fp32")
    ref = Ref(config)
    args = training_args(int(dp), overrides)
    model = types.SimpleNamespace(config=types.SimpleNamespace(hidden_size=int(hidden)))
    ref.trainer_config_process(args)
    ref.trainer_config_finalize(args, model, int(steps))

    printed = {}
    with open(sg_out) as f:
        text = f.read()
        for line in text.splitlines(True):
            m = re.match(r"^  (\S+) = (\S+) \((.*)\)$", line.rstrip("\n"))
            if m:
                printed[m.group(1)] = (m.group(2), m.group(3))
    for k in keys:
        hf = get(ref.config, k)
        sg = printed.pop(k, None)
        if hf == "auto":
            # the Trainer leaves it; stepgraph must say what it does with it:
            # a filled line that says so, or the warning that DeepSpeed drops it
            dropped = '%s: "auto" that the Hugging Face Trainer does not fill' % k in text
            good = (sg is not None and 'left "auto"' in sg[1]) or (sg is None and dropped)
        else:
            good = sg is not None and same(hf, sg[0])
        print("%s %s hf=%s stepgraph=%s" % ("ok" if good else "not ok", k, json.dumps(hf),
                                            sg[0] if sg else "(not printed)"))
    for k, (v, src) in printed.items():
        print("not ok %s hf=(not auto) stepgraph=%s (%s)" % (k, v, src))


if __name__ == "__main__":
    main()
