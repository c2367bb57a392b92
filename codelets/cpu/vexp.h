/* vexp.h - e^x over arrays, for the softmaxes, the loss and SwiGLU's
 * sigmoid.
 *
 * A scalar expf per element was about 8% of a bench-3m training step (the
 * attention softmax forward and backward and SwiGLU's gate). On a CPU with
 * AVX-512F these functions evaluate 16 lanes at once: x = k ln2 + r with
 * |r| <= ln2 / 2 (ln2 split in two so that k ln2 is exact), e^r by its Taylor
 * series to r^7 (truncation below 1e-8 relative, under half an fp32 ulp),
 * then 2^k by vscalefps, which gives 0 below e^-150 and +inf above e^89
 * without a branch. NaN stays NaN. tests/test_vexp checks it against a
 * double-precision exp rounded to float: at most 2 ulp over [-87, 88]
 * (1 ulp measured over 2^20 points).
 * Elsewhere: glibc's expf, element by element.
 *
 * An element's result depends only on its value (the last, partial vector
 * is computed with masked lanes, not by a scalar loop), so splitting an
 * array differently never changes a result. */
#ifndef SG_CODELETS_CPU_VEXP_H
#define SG_CODELETS_CPU_VEXP_H

#include <stddef.h>

/* y[i] = e^(x[i] - shift) for i < n; y may be x. */
void sg_vexp(float *y, const float *x, size_t n, float shift);

/* The largest of init and x[0..n) (an x that is NaN is passed over, as
 * `x > m ? x : m` does); exact, so the same as a scalar loop. */
float sg_vmax(const float *x, size_t n, float init);

/* sg_vexp(y, x, n, shift), returning the sum of the y[i]. With AVX-512 the
 * sum is taken over 16 lanes (element i in lane i mod 16) then the lanes in
 * a fixed order: the same bits on every call with the same inputs, but not
 * those of a left-to-right sum (within float rounding of it). */
float sg_vexp_sum(float *y, const float *x, size_t n, float shift);

/* y[i] = 1 / (1 + e^-x[i]) for i < n (0 for x -> -inf, 1 for +inf); y may be x. */
void sg_vsigmoid(float *y, const float *x, size_t n);

/* Which implementation runs here: "avx512f" or "scalar". */
const char *sg_vexp_isa(void);

#endif
