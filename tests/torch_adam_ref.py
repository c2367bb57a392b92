#!/usr/bin/env python3
"""torch_adam_ref.py - PyTorch reference for tests/test_adam.c.

Usage: torch_adam_ref.py DIR --n N --steps S --optim adamw|adam|adagrad
           --lr X --beta1 X --beta2 X --eps X --wd X
           --bias-correction 0|1 --grad-scale X [--lr-decay X]

Reads DIR/p0.f32 (initial fp32 parameters, raw little-endian, N values) and
DIR/g1.f32 .. DIR/gS.f32 (one fp32 gradient per step), runs S steps of
torch.optim.AdamW (decoupled decay) or torch.optim.Adam (L2 decay) with
gradients g * grad_scale (multiplied in fp32, as the C kernel does), and writes
the final parameters and moments to DIR/p_ref.f32, m_ref.f32 (exp_avg) and
v_ref.f32 (exp_avg_sq). Hyper-parameters may be written as C99 hex floats
(%a) so the script sees exactly the float32 values the C test used.

--optim adagrad runs torch.optim.Adagrad (lr, lr_decay, weight_decay, eps;
single-tensor path) instead: v_ref.f32 is its state "sum", m_ref.f32 zeros
(Adagrad has no first moment; the kernel must leave m as it was, zero).

torch has no switch for bias correction: with --bias-correction 0 the same
formulas are written out with torch tensor ops in torch's own order (after
checking that this hand-written version reproduces torch.optim exactly with
bias correction on).

Exit status: 0 done, 2 bad usage or input, 3 torch missing, 4 the
hand-written reference disagrees with torch.optim.
"""
import argparse
import math
import os
import sys


def parse_float(s):
    try:
        return float.fromhex(s) if "0x" in s.lower() else float(s)
    except ValueError:
        raise argparse.ArgumentTypeError("not a number: %r" % s)


def read_f32(torch, path, n):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) != 4 * n:
        sys.exit("torch_adam_ref: %s: %d bytes, expected %d" % (path, len(data), 4 * n))
    return torch.frombuffer(bytearray(data), dtype=torch.float32).clone()


def write_f32(t, path):
    with open(path, "wb") as f:
        f.write(t.detach().contiguous().numpy().tobytes())


def by_hand(torch, a, p, grads):
    """torch.optim.AdamW/Adam single-tensor path (1.13), op for op."""
    p = p.clone()
    m = torch.zeros_like(p)
    v = torch.zeros_like(p)
    for step, g in enumerate(grads, start=1):
        if a.optim == "adamw":
            p.mul_(1 - a.lr * a.wd)
        elif a.wd != 0:
            g = g.add(p, alpha=a.wd)
        m.mul_(a.beta1).add_(g, alpha=1 - a.beta1)
        v.mul_(a.beta2).addcmul_(g, g, value=1 - a.beta2)
        bc1 = 1 - a.beta1 ** step if a.bias_correction else 1.0
        bc2 = 1 - a.beta2 ** step if a.bias_correction else 1.0
        denom = (v.sqrt() / math.sqrt(bc2)).add_(a.eps)
        p.addcdiv_(m, denom, value=-(a.lr / bc1))
    return p, m, v


def with_optim(torch, a, p0, grads):
    p = torch.nn.Parameter(p0.clone())
    cls = torch.optim.AdamW if a.optim == "adamw" else torch.optim.Adam
    opt = cls([p], lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps,
              weight_decay=a.wd)
    for g in grads:
        p.grad = g.clone()
        opt.step()
    st = opt.state[p]
    return p.detach(), st["exp_avg"], st["exp_avg_sq"]


def with_adagrad(torch, a, p0, grads):
    import inspect
    p = torch.nn.Parameter(p0.clone())
    kw = {}
    if "foreach" in inspect.signature(torch.optim.Adagrad).parameters:
        kw["foreach"] = False  # the single-tensor path the C kernel follows
    opt = torch.optim.Adagrad([p], lr=a.lr, lr_decay=a.lr_decay, weight_decay=a.wd,
                              eps=a.eps, **kw)
    for g in grads:
        p.grad = g.clone()
        opt.step()
    return p.detach(), torch.zeros_like(p0), opt.state[p]["sum"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--optim", choices=("adamw", "adam", "adagrad"), default="adamw")
    for k, d in (("lr", 1e-3), ("beta1", 0.9), ("beta2", 0.999), ("eps", 1e-8),
                 ("wd", 0.0), ("grad-scale", 1.0), ("lr-decay", 0.0)):
        ap.add_argument("--" + k, type=parse_float, default=d)
    ap.add_argument("--bias-correction", type=int, choices=(0, 1), default=1)
    a = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("torch_adam_ref: torch is not installed", file=sys.stderr)
        return 3
    torch.set_num_threads(1)

    p0 = read_f32(torch, os.path.join(a.dir, "p0.f32"), a.n)
    scale = torch.tensor(a.grad_scale, dtype=torch.float32)
    grads = [read_f32(torch, os.path.join(a.dir, "g%d.f32" % s), a.n) * scale
             for s in range(1, a.steps + 1)]

    if a.optim == "adagrad":
        p, m, v = with_adagrad(torch, a, p0, grads)
    elif a.bias_correction:
        p, m, v = with_optim(torch, a, p0, grads)
    else:
        # Check the hand-written steps against torch.optim first.
        a.bias_correction = 1
        ref = with_optim(torch, a, p0, grads)
        mine = by_hand(torch, a, p0, grads)
        for name, x, y in zip("pmv", ref, mine):
            if not torch.equal(x, y):
                print("torch_adam_ref: hand-written %s differs from torch.optim "
                      "(max %g)" % (name, (x - y).abs().max().item()),
                      file=sys.stderr)
                return 4
        a.bias_correction = 0
        p, m, v = by_hand(torch, a, p0, grads)

    write_f32(p, os.path.join(a.dir, "p_ref.f32"))
    write_f32(m, os.path.join(a.dir, "m_ref.f32"))
    write_f32(v, os.path.join(a.dir, "v_ref.f32"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
