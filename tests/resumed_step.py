"""resumed_step.py REF.jsonl RESUMED.jsonl - a resumed run's one step against a reference.

Reads both runs' metrics (`stepgraph run --metrics`, one JSON object per
step) with the standard json module. RESUMED must hold exactly one step; its
loss must be a finite float equal to REF's loss at the same step number (bit
for bit: the same step of the same run, computed again). Prints that step
number; exit status 1 naming the step and both values otherwise.
"""
import json
import math
import sys


def main():
    ref = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[1]))}
    rows = [json.loads(line) for line in open(sys.argv[2])]
    if len(rows) != 1:
        sys.exit("%s: %d steps, expected 1" % (sys.argv[2], len(rows)))
    step, loss = rows[0]["step"], rows[0]["loss"]
    if not isinstance(loss, float) or not math.isfinite(loss):
        sys.exit("step %s: loss %r is not a finite number" % (step, loss))
    if step not in ref:
        sys.exit("step %s: not in the reference %s" % (step, sys.argv[1]))
    if ref[step] != loss:
        sys.exit("step %s: loss %r, the uninterrupted run's %r" % (step, loss, ref[step]))
    print(step)


main()
