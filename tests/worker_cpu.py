#!/usr/bin/env python3
"""worker_cpu.py - the CPU time StarPU's worker threads use in each phase of a
run, read from /proc while the run goes on (tests/test_idle_workers.sh).

Usage: worker_cpu.py OUT.json COMMAND...

Runs COMMAND (killed after 600 s), samples every 10 ms the user and system time of its threads
named "CPU <n>" (StarPU's CPU workers), and notes the time and the workers'
total at each line of its standard output. Writes OUT.json:
  {"rc": ..., "lines": [[text, wall_s, worker_cpu_s], ...], "workers": N}
where wall_s counts from the start and worker_cpu_s is the sum over the
workers seen so far (a thread that ended keeps its last figure).
"""
import json
import os
import subprocess
import sys
import threading
import time

TICK = os.sysconf("SC_CLK_TCK")
LIMIT_S = 600


def thread_times(pid):
    """{tid: cpu seconds} of the process's threads named "CPU <n>"."""
    out = {}
    base = "/proc/%d/task" % pid
    try:
        tids = os.listdir(base)
    except OSError:
        return out
    for tid in tids:
        try:
            with open("%s/%s/comm" % (base, tid)) as f:
                comm = f.read().strip()
            if not comm.startswith("CPU "):
                continue
            with open("%s/%s/stat" % (base, tid)) as f:
                stat = f.read()
        except OSError:
            continue
        # the fields after the name in parentheses: utime and stime are the
        # 12th and 13th of them (proc(5): fields 14 and 15)
        rest = stat[stat.rindex(")") + 2:].split()
        out[tid] = (int(rest[11]) + int(rest[12])) / TICK
    return out


def main():
    out_path, cmd = sys.argv[1], sys.argv[2:]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    seen = {}
    samples = [(0.0, 0.0)]  # (wall_s, workers' total), in order
    done = threading.Event()

    def sample():
        while not done.is_set():
            seen.update(thread_times(proc.pid))
            samples.append((time.monotonic() - start, sum(seen.values())))
            time.sleep(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    # a run that never ends (a worker left paused) is killed: rc -9
    killer = threading.Timer(LIMIT_S, proc.kill)
    killer.start()
    arrivals = [(line.rstrip("\n"), time.monotonic() - start) for line in proc.stdout]
    rc = proc.wait()
    killer.cancel()
    done.set()
    sampler.join()
    lines = []
    for text, at in arrivals:
        # the last sample taken before the line arrived: what follows the
        # line in the run (its shutdown) is not counted at it
        before = [cpu for wall, cpu in samples if wall <= at]
        lines.append([text, at, before[-1]])
    with open(out_path, "w") as f:
        json.dump({"rc": rc, "lines": lines, "workers": len(seen)}, f)


if __name__ == "__main__":
    main()
