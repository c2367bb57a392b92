#!/usr/bin/python3
"""Compares a stepgraph run's losses with a reference's, for the tests.

Usage: compare_losses.py METRICS REF --steps N --rel TOL --learns DROP [--per-step]

METRICS is `stepgraph run --metrics`'s JSONL (one object with "loss" per
step; an evaluation's lines, with "eval_loss", are left out), REF one loss per line (the reference's). Passes (exit 0) when both
hold N losses, all finite, the reference's last loss is below its first by
more than DROP (a reference that does not learn would make the check
vacuous), and every loss is within TOL relative of the reference's. Prints
the worst difference (and, with --per-step, every step) as TAP comments.
"""
import argparse
import json
import math
import sys


def main(argv):
    ap = argparse.ArgumentParser(usage=__doc__)
    ap.add_argument("metrics")
    ap.add_argument("ref")
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--rel", type=float, required=True)
    ap.add_argument("--learns", type=float, required=True)
    ap.add_argument("--per-step", action="store_true")
    a = ap.parse_args(argv[1:])
    rows = [json.loads(line) for line in open(a.metrics)]
    sg = [r["loss"] for r in rows if "eval_loss" not in r]
    ref = [float(line) for line in open(a.ref)]
    if not (len(sg) == len(ref) == a.steps):
        print("# expected %d losses each: %r %r" % (a.steps, sg, ref))
        return 1
    if not all(isinstance(x, float) and math.isfinite(x) for x in sg + ref):
        print("# a loss is not a finite number: %r %r" % (sg, ref))
        return 1
    if not ref[-1] < ref[0] - a.learns:
        print("# the reference does not learn (a vacuous check): %r" % ref)
        return 1
    rel = [abs(x - r) / abs(r) for x, r in zip(sg, ref)]
    for i, (x, r) in enumerate(zip(sg, ref)):
        if a.per_step:
            print("# step %d: stepgraph %.9f reference %.9f rel %.1e" % (i + 1, x, r, rel[i]))
    print("# worst relative difference %.2e (allowed %.0e)" % (max(rel), a.rel))
    return 0 if max(rel) <= a.rel else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
