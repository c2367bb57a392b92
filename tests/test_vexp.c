/* test_vexp.c - sg_vexp and sg_vsigmoid (codelets/cpu/vexp.h) against the C
 * library's double-precision exp, rounded to float: the error in units in
 * the last place over the whole fp32 range of e^x, the special values (NaN
 * stays NaN, -inf gives 0, +inf gives +inf, overflow gives +inf), the shift,
 * in-place use, and that an element's result does not depend on where it
 * sits in the array (the vector body and the masked tail agree). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "codelets/cpu/vexp.h"
#include "tests/tap.h"

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static double uniform(double lo, double hi)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return lo + (hi - lo) * (double)(g_rng >> 11) / 9007199254740992.0;
}

/* distance in representable floats between two finite non-negative floats */
static int64_t ulps(float a, float b)
{
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    return ia > ib ? (int64_t)ia - ib : (int64_t)ib - ia;
}

int main(void)
{
    tap_plan(11);
    tap_diag("implementation: %s", sg_vexp_isa());

    /* 1. e^x over [-87, 88] (normal results): at most 2 ulp from exp() */
    enum { N = 1 << 20 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    if (!x || !y)
        return 1;
    for (int i = 0; i < N; i++)
        x[i] = (float)uniform(-87.0, 88.0);
    x[0] = 0.0f;
    x[1] = 1.0f;
    x[2] = -1.0f;
    sg_vexp(y, x, N, 0.0f);
    int64_t worst = 0;
    int worst_i = 0;
    for (int i = 0; i < N; i++) {
        int64_t u = ulps(y[i], (float)exp((double)x[i]));
        if (u > worst)
            worst = u, worst_i = i;
    }
    ok(worst <= 2, "e^x, 2^20 points in [-87, 88]: worst %lld ulp (x = %.9g)", (long long)worst,
       (double)x[worst_i]);
    ok(y[0] == 1.0f, "e^0 = 1 exactly (%.9g)", (double)y[0]);

    /* 2. subnormal and underflowing results: absolute error below 2 subnormal steps */
    float tiny_err = 0.0f;
    for (int i = 0; i < 4096; i++)
        x[i] = (float)uniform(-110.0, -87.0);
    sg_vexp(y, x, 4096, 0.0f);
    for (int i = 0; i < 4096; i++) {
        float e = fabsf(y[i] - (float)exp((double)x[i]));
        tiny_err = e > tiny_err ? e : tiny_err;
    }
    ok(tiny_err <= 2.9e-45f, "e^x in [-110, -87] (subnormal or 0): worst absolute error %g",
       (double)tiny_err);

    /* 3. special values */
    float sp[6] = {NAN, -INFINITY, INFINITY, 89.0f, -200.0f, 88.8f};
    float sy[6];
    sg_vexp(sy, sp, 6, 0.0f);
    ok(isnan(sy[0]) && sy[1] == 0.0f && isinf(sy[2]) && sy[2] > 0 && isinf(sy[3]) &&
           sy[4] == 0.0f && isinf(sy[5]),
       "NaN -> NaN, -inf -> 0, +inf -> inf, e^89 and e^88.8 -> inf, e^-200 -> 0 (%g %g %g %g %g "
       "%g)",
       (double)sy[0], (double)sy[1], (double)sy[2], (double)sy[3], (double)sy[4], (double)sy[5]);

    /* 4. shift and in-place: e^(x - s) into x itself */
    float a[37], b[37];
    for (int i = 0; i < 37; i++)
        a[i] = b[i] = (float)uniform(-5.0, 5.0);
    sg_vexp(a, a, 37, 2.5f);
    int64_t w4 = 0;
    for (int i = 0; i < 37; i++) {
        int64_t u = ulps(a[i], (float)exp((double)(b[i] - 2.5f)));
        w4 = u > w4 ? u : w4;
    }
    ok(w4 <= 2, "in place with shift 2.5: worst %lld ulp", (long long)w4);

    /* 5. position independence: each length 1..40, each offset */
    int same = 1;
    float ref[40], got[40];
    for (int i = 0; i < 40; i++)
        b[i % 37] = (float)uniform(-20.0, 20.0);
    for (int i = 0; i < 37; i++)
        sg_vexp(&ref[i], &b[i], 1, 0.0f);
    for (int len = 1; len <= 37 && same; len++)
        for (int off = 0; off + len <= 37 && same; off++) {
            sg_vexp(got, b + off, (size_t)len, 0.0f);
            for (int i = 0; i < len; i++)
                if (memcmp(&got[i], &ref[off + i], 4))
                    same = 0;
        }
    ok(same, "an element's e^x is the same whatever the array's length and offset");

    /* 6-8. sigmoid: against 1 / (1 + exp(-x)) in double, rounded */
    for (int i = 0; i < N; i++)
        x[i] = (float)uniform(-30.0, 30.0);
    sg_vsigmoid(y, x, N);
    int64_t ws = 0;
    for (int i = 0; i < N; i++) {
        int64_t u = ulps(y[i], (float)(1.0 / (1.0 + exp(-(double)x[i]))));
        ws = u > ws ? u : ws;
    }
    ok(ws <= 3, "sigmoid, 2^20 points in [-30, 30]: worst %lld ulp", (long long)ws);
    float ss[5] = {NAN, -INFINITY, INFINITY, -120.0f, 0.0f}, sr[5];
    sg_vsigmoid(sr, ss, 5);
    ok(isnan(sr[0]) && sr[1] == 0.0f && sr[2] == 1.0f && sr[3] == 0.0f && sr[4] == 0.5f,
       "sigmoid: NaN -> NaN, -inf -> 0, +inf -> 1, -120 -> 0, 0 -> 0.5 (%g %g %g %g %g)",
       (double)sr[0], (double)sr[1], (double)sr[2], (double)sr[3], (double)sr[4]);

    /* 9. max: the scalar `x > m ? x : m` loop, exactly, NaN passed over */
    int max_same = 1;
    for (int len = 0; len <= 40 && max_same; len++)
        for (int k = 0; k < 3 && max_same; k++) {
            float v[40], init = k == 0 ? -INFINITY : (float)uniform(-3.0, 3.0);
            for (int i = 0; i < len; i++)
                v[i] = (float)uniform(-5.0, 5.0);
            if (k == 2 && len > 3)
                v[len / 2] = NAN;
            float want = init;
            for (int i = 0; i < len; i++)
                want = v[i] > want ? v[i] : want;
            float got = sg_vmax(v, (size_t)len, init);
            max_same = memcmp(&got, &want, 4) == 0;
        }
    ok(max_same, "max of lengths 0..40, with and without NaN: as the scalar loop, bit for bit");

    /* 10-11. exp with its sum: the values of sg_vexp, the sum within float
     * rounding of a double sum, and the same bits on a second call */
    int vals_same = 1, again_same = 1;
    double worst_sum = 0.0;
    for (int len = 1; len <= 300; len += 7) {
        float v[300], e1[300], e2[300];
        for (int i = 0; i < len; i++)
            v[i] = (float)uniform(-12.0, 2.0);
        float s1 = sg_vexp_sum(e1, v, (size_t)len, 1.5f);
        sg_vexp(e2, v, (size_t)len, 1.5f);
        vals_same &= memcmp(e1, e2, (size_t)len * 4) == 0;
        double ref = 0.0;
        for (int i = 0; i < len; i++)
            ref += exp((double)v[i] - 1.5);
        double rel = fabs(s1 - ref) / ref;
        worst_sum = rel > worst_sum ? rel : worst_sum;
        float s2 = sg_vexp_sum(e2, v, (size_t)len, 1.5f);
        again_same &= memcmp(&s1, &s2, 4) == 0;
    }
    ok(vals_same && worst_sum <= 1e-6,
       "exp with sum, lengths 1..295: values as sg_vexp, sum within %.1e of a double sum",
       worst_sum);
    ok(again_same, "exp with sum: the same bits on a second call");

    free(x);
    free(y);
    return tap_done();
}
