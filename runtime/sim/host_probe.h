/* host_probe.h - figures of this host that `calibrate` writes into a machine
 * model: copy bandwidth (one core, and every core at once) and clock. */
#ifndef SG_HOST_PROBE_H
#define SG_HOST_PROBE_H

/* Copy bandwidth in GB/s (bytes read + written) of `threads` threads each
 * copying a buffer of its own at the same time, summed over them; best of 3
 * rounds. threads = 1: what one CPU worker streams; the host's online cores:
 * the socket's share the tasks of a step split between them. 0 when the
 * buffers or threads could not be had. */
double sg_host_copy_gbs(int threads);

/* The first "cpu MHz" of /proc/cpuinfo, in GHz (2 when unknown). */
double sg_host_cpu_ghz(void);

#endif
