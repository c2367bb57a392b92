#!/usr/bin/env python3
"""plot_metrics.py - an SVG plot of `stepgraph run --metrics` files: loss
against step (left panel) and tokens/s against step (right panel), one line
per file, labelled with the file's name. Plain Python (json only), no
plotting library.

usage: plot_metrics.py METRICS.jsonl... -o PLOT.svg [--title TEXT]

A line of a metrics file is one step: {"step", "loss", "tokens_per_s", ...}.
A file with no finite loss is an error naming it.
"""
import argparse
import json
import math
import os
import sys

W, H, PAD = 460, 300, 48
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf")


def read(path):
    steps, loss, tps = [], [], []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except ValueError as e:
                sys.exit("plot_metrics: %s:%d: not JSON: %s" % (path, n, e))
            x = r.get("loss")
            if isinstance(x, (int, float)) and math.isfinite(x):
                steps.append(r.get("step", len(steps) + 1))
                loss.append(float(x))
                t = r.get("tokens_per_s")
                tps.append(float(t) if isinstance(t, (int, float)) and math.isfinite(t) else None)
    if not loss:
        sys.exit("plot_metrics: %s: no step with a finite loss" % path)
    return steps, loss, tps


def nice_range(vals):
    lo, hi = min(vals), max(vals)
    if hi == lo:
        hi = lo + 1
    pad = 0.05 * (hi - lo)
    return lo - pad, hi + pad


def panel(x0, title, series, ylabel):
    """series: [(label, colour, [(x, y)...])]"""
    out = ['<g transform="translate(%d,0)">' % x0,
           '<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>'
           % (PAD, PAD / 2, W - PAD - 10, H - PAD - PAD / 2),
           '<text x="%d" y="16" font-size="13" font-weight="bold">%s</text>' % (PAD, title)]
    pts = [p for _, _, s in series for p in s]
    if not pts:
        out.append('<text x="%d" y="%d" font-size="12">no data</text>' % (PAD + 10, H / 2))
        return out + ["</g>"]
    xlo, xhi = nice_range([p[0] for p in pts])
    ylo, yhi = nice_range([p[1] for p in pts])
    sx = lambda x: PAD + (x - xlo) / (xhi - xlo) * (W - PAD - 10)
    sy = lambda y: H - PAD - (y - ylo) / (yhi - ylo) * (H - 1.5 * PAD)
    for k in range(5):
        y = ylo + k * (yhi - ylo) / 4
        out.append('<text x="%d" y="%.1f" font-size="10" text-anchor="end">%.4g</text>'
                   % (PAD - 4, sy(y) + 3, y))
        x = xlo + k * (xhi - xlo) / 4
        out.append('<text x="%.1f" y="%d" font-size="10" text-anchor="middle">%.0f</text>'
                   % (sx(x), H - PAD + 14, x))
    out.append('<text x="%d" y="%d" font-size="11" text-anchor="middle">step</text>'
               % ((W + PAD) / 2, H - 8))
    out.append('<text x="12" y="%d" font-size="11" transform="rotate(-90 12 %d)" '
               'text-anchor="middle">%s</text>' % (H / 2, H / 2, ylabel))
    for i, (label, colour, s) in enumerate(series):
        path = " ".join("%.1f,%.1f" % (sx(x), sy(y)) for x, y in s)
        out.append('<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>'
                   % (colour, path))
        out.append('<text x="%d" y="%d" font-size="11" fill="%s">%s</text>'
                   % (W - 160, PAD + 4 + 14 * i, colour, label))
    return out + ["</g>"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("metrics", nargs="+")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--title", default="stepgraph run")
    a = ap.parse_args()
    runs = [(os.path.basename(p).rsplit(".", 1)[0], read(p)) for p in a.metrics]
    loss = [(n, COLOURS[i % len(COLOURS)], list(zip(r[0], r[1]))) for i, (n, r) in enumerate(runs)]
    tps = [(n, COLOURS[i % len(COLOURS)], [(x, y) for x, y in zip(r[0], r[2]) if y is not None])
           for i, (n, r) in enumerate(runs)]
    svg = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="sans-serif">' % (2 * W, H + 20),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="%d" font-size="12" fill="#444">%s</text>' % (PAD, H + 14, a.title)]
    svg += panel(0, "Loss", loss, "loss")
    svg += panel(W, "Throughput", tps, "tokens/s")
    svg.append("</svg>")
    tmp = a.output + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(svg) + "\n")
    os.replace(tmp, a.output)


if __name__ == "__main__":
    main()
