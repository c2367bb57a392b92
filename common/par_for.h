/* par_for.h - a range [0, n) cut into contiguous parts run on several
 * threads, for the start-up's element-wise passes over the whole state (the
 * initial state's conversions into StarPU's buffers). With 16 cores and an
 * 8B model's 8 x 10^9 parameters, one thread converting fp32 to bf16 and
 * copying the fp32 masters was about as long as the random draw on all of
 * them (docs/gpu.md, "Start-up"). The parts are disjoint, so whatever fn
 * writes per element does not depend on the thread count. */
#ifndef SG_PAR_FOR_H
#define SG_PAR_FOR_H

#include <stdint.h>

/* Ranges of fewer elements than this are not split. */
#define SG_PAR_FOR_MIN ((int64_t)1 << 20)

/* Calls fn(ctx, lo, hi) over [0, n) in at most `threads` contiguous parts of
 * at least SG_PAR_FOR_MIN elements each (the last part the remainder), one
 * on this thread and the rest on threads started here; a thread that
 * cannot start leaves its part to this one. Returns the parts run. */
int sg_par_for(int64_t n, int threads, void (*fn)(void *ctx, int64_t lo, int64_t hi), void *ctx);

#endif /* SG_PAR_FOR_H */
