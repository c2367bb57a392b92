#!/usr/bin/env python3
"""lr_schedule_ref.py - the learning rate and Adam betas of each optimizer
update under a DeepSpeed config's "scheduler", computed two ways that do not
share code with stepgraph's runtime/train/lr_schedule.c:

  lr_schedule_ref.py formula CONFIG N    this file's own reading of the five
                                         schedules of DeepSpeed 0.19.8
  lr_schedule_ref.py deepspeed CONFIG N  DeepSpeed's classes themselves
                                         (deepspeed.runtime.lr_schedules,
                                         over a torch.optim.AdamW), stepped as
                                         DeepSpeed's engine steps them

Both print N lines "lr beta1 beta2" for updates 0 .. N-1 (update k is the
optimizer step after k applied ones). CONFIG is a DeepSpeed config or a run
config with an inline "deepspeed_config" object. Exit 2 on bad arguments,
3 when `deepspeed` cannot be imported.
"""
import json
import math
import sys


def ds_section(path):
    with open(path) as f:
        cfg = json.load(f)
    if isinstance(cfg.get("deepspeed_config"), dict):
        cfg = cfg["deepspeed_config"]
    opt = (cfg.get("optimizer") or {}).get("params") or {}
    sched = cfg.get("scheduler")
    return opt, sched


class Schedule:
    """A scheduler as an object with DeepSpeed's protocol: built before the
    first update (iteration -1), step() after every applied update."""

    def __init__(self, opt, sched):
        self.base_lr = opt.get("lr", 1e-3)
        self.betas = tuple(opt.get("betas", (0.9, 0.999)))
        self.kind = sched["type"] if sched else None
        self.p = dict(sched.get("params") or {}) if sched else {}
        self.p = {k: v for k, v in self.p.items() if v is not None}
        self.iteration = -1

    def step(self):
        self.iteration += 1

    # -- warm-up shared by three schedules
    def _warmup(self):
        w = max(2, self.p.get("warmup_num_steps", 1000))
        i = self.iteration
        if self.p.get("warmup_type", "log") == "linear":
            return w, i / w
        return w, math.log(i + 1) / math.log(w)

    def lr(self):
        p, i = self.p, self.iteration
        if self.kind is None:
            return self.base_lr
        if self.kind in ("WarmupLR", "WarmupDecayLR"):
            lo = p.get("warmup_min_lr", 0.0)
            hi = p.get("warmup_max_lr", self.base_lr if self.kind == "WarmupLR" else 0.001)
            if i < 0:
                return lo
            w, g = self._warmup()
            if i >= w:
                if self.kind == "WarmupLR":
                    g = 1.0
                else:
                    t = p["total_num_steps"]
                    g = max(0.0, (t - i) / max(1.0, t - w))
            return lo + (hi - lo) * g
        if self.kind == "WarmupCosineLR":
            if i < 0:
                return 0.0
            w, g = self._warmup()
            if i < w:
                r0 = p.get("warmup_min_ratio", 0.0)
                return self.base_lr * (r0 + g * (1.0 - r0))
            done = min(1.0, (i - w + 1) / max(1, p["total_num_steps"] - w))
            floor_r = p.get("cos_min_ratio", 0.0001)
            ratio = floor_r + (1.0 - floor_r) * 0.5 * (1.0 + math.cos(math.pi * done))
            return self.base_lr * max(0.0, ratio)
        if self.kind == "OneCycle":
            lo, hi = p["cycle_min_lr"], p["cycle_max_lr"]
            if i < 0:
                return lo
            s = self._cycle_position()
            if s is not None:
                return lo + (hi - lo) * s
            d = self._decay_intervals(p.get("decay_lr_rate", 0.0))
            return lo if d is None else lo / (1.0 + p["decay_lr_rate"] * d)
        if self.kind == "LRRangeTest":
            lo = p.get("lr_range_test_min_lr", 1e-3)
            if i < 0:
                return lo
            n = (i + 1) / p.get("lr_range_test_step_size", 2000)
            if p.get("lr_range_test_staircase", False):
                n = math.floor(n)
            return lo * (1.0 + p.get("lr_range_test_step_rate", 1.0) * n)
        raise ValueError("unknown scheduler " + self.kind)

    # -- OneCycle
    def _sizes(self):
        s1 = float(self.p.get("cycle_first_step_size", 2000))
        s2 = float(self.p.get("cycle_second_step_size", s1))
        return s1, s2

    def _cycle_position(self):
        """0 -> 1 -> 0 over the cycle; None once the cycle is over."""
        s1, s2 = self._sizes()
        if self.iteration >= s1 + s2:
            return None
        frac = (self.iteration + 1) / (s1 + s2)
        frac -= math.floor(frac)
        up = s1 / (s1 + s2)
        return frac / up if frac <= up else (1.0 - frac) / (1.0 - up)

    def _decay_intervals(self, rate):
        size = self.p.get("decay_step_size", 0)
        if size == 0 or rate == 0:
            return None
        s1, s2 = self._sizes()
        return (self.iteration - (s1 + s2) + 1) / size

    def betas_now(self):
        p = self.p
        if self.kind != "OneCycle" or not p.get("cycle_momentum", True):
            return self.betas
        lo, hi = p.get("cycle_min_mom", 0.8), p.get("cycle_max_mom", 0.9)
        if self.iteration < 0:
            return lo, 0.99
        s = self._cycle_position()
        if s is not None:
            return hi - (hi - lo) * s, 0.99
        d = self._decay_intervals(p.get("decay_mom_rate", 0.0))
        return (hi if d is None else hi * (1.0 + p["decay_mom_rate"] * d)), 0.99


def formula(path, n):
    opt, sched = ds_section(path)
    s = Schedule(opt, sched)
    for _ in range(n):
        b1, b2 = s.betas_now()
        print(repr(s.lr()), repr(b1), repr(b2))
        s.step()


def deepspeed(path, n):
    import contextlib
    rows = []
    # DeepSpeed logs to stdout (its accelerator notice on import, warnings
    # from the schedulers): all of that goes to stderr, the figures to stdout
    with contextlib.redirect_stdout(sys.stderr):
        try:
            import torch
            from deepspeed.runtime import lr_schedules
        except Exception as e:  # noqa: BLE001 - any import failure means "not here"
            sys.stderr.write("deepspeed cannot be imported: %s\n" % e)
            return 3
        opt, sched = ds_section(path)
        w = torch.nn.Parameter(torch.zeros(1))
        optim = torch.optim.AdamW([w], lr=opt.get("lr", 1e-3),
                                  betas=tuple(opt.get("betas", (0.9, 0.999))))
        obj = None
        if sched:
            params = {k: v for k, v in (sched.get("params") or {}).items() if v is not None}
            obj = getattr(lr_schedules, sched["type"])(optim, **params)
        for _ in range(n):
            g = optim.param_groups[0]
            rows.append((float(g["lr"]), float(g["betas"][0]), float(g["betas"][1])))
            if obj is not None:
                obj.step()
    for r in rows:
        print(*map(repr, r))
    return 0


def main(argv):
    if len(argv) != 4 or argv[1] not in ("formula", "deepspeed"):
        sys.stderr.write(__doc__)
        return 2
    if argv[1] == "formula":
        formula(argv[2], int(argv[3]))
        return 0
    return deepspeed(argv[2], int(argv[3]))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
