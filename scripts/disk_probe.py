#!/usr/bin/env python3
"""disk_probe.py - the sequential bandwidth of the disk under a directory.

Writes SIZE MiB of random bytes to a file there with O_DIRECT (no page
cache: the bytes reach the device, not RAM) in CHUNK MiB requests, fsyncs,
then reads the file back with O_DIRECT, and removes it. Prints one JSON
line: {"dir", "bytes", "write_gbs", "read_gbs", "write_s", "read_s"} in
decimal GB/s, as machine files state disks (docs/config-keys.md).

usage: disk_probe.py DIR [--size-mib N] [--chunk-mib N]
"""
import argparse
import json
import mmap
import os
import sys
import time


def probe(directory, size_mib, chunk_mib):
    chunk = chunk_mib << 20
    n = max(1, size_mib // chunk_mib)
    # O_DIRECT needs an aligned buffer: an anonymous mapping is page aligned
    buf = mmap.mmap(-1, chunk)
    # random bytes, so that no layer below can compress or skip zeros
    block = os.urandom(1 << 20)
    for off in range(0, chunk, len(block)):
        buf[off:off + len(block)] = block[:chunk - off]
    path = os.path.join(directory, ".stepgraph-disk-probe.%d" % os.getpid())
    try:
        fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC | os.O_DIRECT, 0o600)
    except OSError as e:
        sys.exit("disk_probe: %s: O_DIRECT open failed: %s (a filesystem without O_DIRECT, "
                 "e.g. tmpfs, cannot be probed)" % (path, e.strerror))
    try:
        t0 = time.perf_counter()
        for _ in range(n):
            if os.write(fd, buf) != chunk:
                sys.exit("disk_probe: %s: short write" % path)
        os.fsync(fd)
        write_s = time.perf_counter() - t0
        os.close(fd)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        t0 = time.perf_counter()
        for _ in range(n):
            if os.readv(fd, [buf]) != chunk:
                sys.exit("disk_probe: %s: short read" % path)
        read_s = time.perf_counter() - t0
    finally:
        os.close(fd)
        os.unlink(path)
    total = n * chunk
    return {"dir": directory, "bytes": total, "write_gbs": round(total / write_s / 1e9, 3),
            "read_gbs": round(total / read_s / 1e9, 3), "write_s": round(write_s, 3),
            "read_s": round(read_s, 3)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--size-mib", type=int, default=2048)
    ap.add_argument("--chunk-mib", type=int, default=16)
    a = ap.parse_args()
    if a.size_mib < 1 or a.chunk_mib < 1:
        sys.exit("disk_probe: --size-mib and --chunk-mib must be at least 1")
    if not os.path.isdir(a.dir):
        sys.exit("disk_probe: %s is not a directory" % a.dir)
    print(json.dumps(probe(a.dir, a.size_mib, a.chunk_mib)))


if __name__ == "__main__":
    main()
