#!/usr/bin/python3
"""eval_ref.py - the validation loss of a run (runtime/train/eval.h), computed
independently of stepgraph, for tests/test_eval.sh.

  eval_ref.py MODEL.json WEIGHTS SHARD T NWINDOWS [nomask]
      prints the mean cross-entropy over every trained target of the
      shard's first NWINDOWS windows (file order, window i = tokens
      [i T, i T + T]), each window's mean weighted by its targets; targets
      whose token has mask 0 in SHARD.mask are ignored (transformers' -100),
      unless "nomask" is given. Then its exp (the perplexity) and the
      targets counted, on one line.
The model is tests/torch_model_ref.py's plain-torch Llama in float64
(tests/instruct_ref.py reads the windows and the weights).
"""
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import instruct_ref  # noqa: E402


def main(argv):
    model_json, weights, shard, T, nwin = argv[1], argv[2], argv[3], int(argv[4]), int(argv[5])
    use_mask = len(argv) < 7 or argv[6] != "nomask"
    model = instruct_ref.model_of(model_json, weights, T)
    total, count = 0.0, 0
    for i in range(nwin):
        tokens, targets = instruct_ref.read_window(shard, T, use_mask, i)
        c = sum(1 for t in targets if t != -100)
        if c == 0:
            continue
        out, _ = model.forward(torch.tensor(tokens), torch.tensor(targets), torch.float64)
        total += out.item() * c
        count += c
    loss = total / count
    print("%.12g %.12g %d" % (loss, math.exp(loss), count))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
