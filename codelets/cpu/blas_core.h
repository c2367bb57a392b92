/* blas_core.h - make OpenBLAS use the kernels this CPU can run.
 *
 * Debian 12's OpenBLAS (0.3.21, built DYNAMIC_ARCH) picks its kernels from
 * the CPU's model number when it loads. A CPU newer than its tables (Intel's
 * Emerald Rapids, family 6 model 207, for one) falls back to "Prescott",
 * the SSE3 kernels: sgemm then runs at about an eighth of what the same core
 * reaches with its AVX-512 kernels (16.8 against 127.9 GFLOP/s measured on
 * such a core, 2048 x 688 x 256). OpenBLAS reads OPENBLAS_CORETYPE once, at
 * load time, so the choice can only be made before the program starts:
 * sg_blas_core_select() re-executes the program with OPENBLAS_CORETYPE set
 * when OpenBLAS chose a core older than the instructions this CPU has.
 *
 * An OPENBLAS_CORETYPE already in the environment is the user's choice and
 * is kept. Without OpenBLAS (another BLAS), nothing happens. */
#ifndef SG_CODELETS_CPU_BLAS_CORE_H
#define SG_CODELETS_CPU_BLAS_CORE_H

#include <stddef.h>

/* Call first thing in main(), before any thread starts. Returns only when
 * no re-execution was needed or it failed (then OpenBLAS keeps its own
 * choice); on success the process image is replaced. */
void sg_blas_core_select(char **argv);

/* The kernel set OpenBLAS would be best given on this CPU ("Cooperlake",
 * "SkylakeX", "Haswell"), or NULL when OpenBLAS's own choice (current, a
 * core name as openblas_get_corename() gives it) is not older than what the
 * CPU can run. Exposed for the tests. */
const char *sg_blas_core_better(const char *current);

/* One line for `stepgraph version`: the BLAS, its kernels and who chose
 * them, e.g. "BLAS: OpenBLAS 0.3.21, kernels Cooperlake (chosen by
 * stepgraph; OpenBLAS's own choice: Prescott)". */
void sg_blas_core_describe(char *out, size_t size);

#endif
