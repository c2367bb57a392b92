/* gpu_kernels.c - a GPU task's time from how its kernels behave (gpu_kernels.h). */
#include "runtime/sim/gpu_kernels.h"

#include <math.h>

#include "runtime/sim/eager_attention.h"
#include "runtime/sim/gemm_model.h"

#define BF16_BYTES 2.0

double sg_attention_tflops(const sg_gpu_kernels *k, double d, double s, int backward)
{
    if (k->nattn < 1)
        return 0;
    double best = -1; /* the nearest head dimension among the points */
    for (int i = 0; i < k->nattn; i++)
        if (best < 0 || fabs(k->attn[i].head_dim - d) < fabs(best - d))
            best = k->attn[i].head_dim;
    /* the points of that head dimension just below and just above s */
    const sg_attn_point *lo = NULL, *hi = NULL;
    for (int i = 0; i < k->nattn; i++) {
        const sg_attn_point *p = &k->attn[i];
        if (p->head_dim != best)
            continue;
        if (p->seq <= s && (!lo || p->seq > lo->seq))
            lo = p;
        if (p->seq >= s && (!hi || p->seq < hi->seq))
            hi = p;
    }
    if (!lo)
        lo = hi;
    if (!hi)
        hi = lo;
    double a = backward ? lo->bwd_tflops : lo->fwd_tflops;
    double b = backward ? hi->bwd_tflops : hi->fwd_tflops;
    if (hi->seq == lo->seq)
        return a;
    double t = (log2(s) - log2(lo->seq)) / (log2(hi->seq) - log2(lo->seq));
    return a + t * (b - a);
}

/* One product y (M, N) = x (M, K) W^T; its backward is dx (M, K) = dy (M, N)
 * W (N, K) and dW (N, K) = dy^T (N, M) x (M, K). Adds its FLOPs and time. */
static void add_gemm(const sg_gpu_kernels *k, double m, double n, double kk, int backward,
                     double *flops, double *secs)
{
    if (m <= 0 || n <= 0 || kk <= 0)
        return;
    if (!backward) {
        *flops += 2 * m * n * kk;
        *secs += sg_gemm_seconds(k, m, n, kk);
        return;
    }
    *flops += 4 * m * n * kk;
    *secs += sg_gemm_seconds(k, m, kk, n) + sg_gemm_seconds(k, n, kk, m);
}

double sg_unit_gemm_flops_per_s(const sg_gpu_kernels *k, const sg_model *m, int unit,
                                int64_t tokens, int backward)
{
    double T = (double)tokens, H = (double)m->hidden_size;
    double q = (double)(m->num_heads * m->head_dim), kv = (double)(m->num_kv_heads * m->head_dim);
    double flops = 0, secs = 0;
    int head = sg_model_num_units(m) - 1;
    if (unit == 0)
        return 0;
    if (unit == head) {
        add_gemm(k, T, (double)m->vocab_size, H, backward, &flops, &secs); /* logits (T, V) */
    } else {
        add_gemm(k, T, q + 2 * kv, H, backward, &flops, &secs); /* q, k, v (T, q + 2kv) */
        add_gemm(k, T, H, q, backward, &flops, &secs);          /* o (T, H) */
        if (m->num_experts > 0) /* the router; the experts are tasks of their own */
            add_gemm(k, T, (double)m->num_experts, H, backward, &flops, &secs);
        else {
            double F = (double)m->intermediate_size;
            add_gemm(k, T, 2 * F, H, backward, &flops, &secs); /* gate and up (T, 2F) */
            add_gemm(k, T, H, F, backward, &flops, &secs);     /* down (T, H) */
        }
    }
    return secs > 0 ? flops / secs : 0;
}

double sg_unit_elementwise_bytes(const sg_model *m, int unit, int64_t tokens, int backward)
{
    double T = (double)tokens, H = (double)m->hidden_size, V = (double)m->vocab_size;
    double q = (double)(m->num_heads * m->head_dim), kv = (double)(m->num_kv_heads * m->head_dim);
    double F = m->num_experts > 0 ? 0 : (double)m->intermediate_size;
    int head = sg_model_num_units(m) - 1;
    double per_token; /* bytes per token, forward */
    if (unit == 0)
        per_token = BF16_BYTES * 2 * H; /* the embedding rows read and written */
    else if (unit == head)
        /* final norm (as a layer's, 36H) and the loss on fp32 logits: the
         * bf16 logits read, fp32 written, log-softmax read and written,
         * the target's gather: 14 bytes per logit */
        per_token = 36 * H + 14 * V;
    else
        /* two RMSNorms upcast to fp32 (to fp32, square, mean, scale, back
         * to bf16, times the weight: 36H bytes each); RoPE on q and k
         * (rotate_half's two slices and concatenation, two products, a sum:
         * 6 bf16 passes, 12 bytes per element); SwiGLU (silu(gate) read and
         * written, times up: 5 bf16 passes of F); two residual adds (3
         * passes of H each) */
        per_token = 72 * H + 12 * (q + kv) + 10 * F + 12 * H;
    return (backward ? 2.0 : 1.0) * per_token * T;
}

double sg_unit_gpu_seconds(const sg_gpu_kernels *k, const sg_model *m, int unit, int64_t tokens,
                           int64_t seq_len, sg_op_kind kind, double matmul_flops,
                           double attention_flops, sg_attention_impl attn)
{
    int backward = kind == SG_OP_BACKWARD;
    double s = 0;
    double rate = sg_unit_gemm_flops_per_s(k, m, unit, tokens, backward);
    if (matmul_flops > 0)
        s += matmul_flops / (rate > 0 ? rate : k->gemm_tflops * 1e12);
    if (attention_flops > 0 && attn == SG_ATTENTION_EAGER) {
        /* the full T x T scores of every layer, sliding or not: eager masks
         * them, it does not skip them */
        double batch = (double)tokens / (double)seq_len;
        s += sg_eager_attention_seconds(k, m, batch, (double)seq_len, backward);
    } else if (attention_flops > 0) {
        double seq = (double)seq_len;
        int layer = unit - 1;
        if (layer >= 0 && layer < SG_MODEL_MAX_LAYERS && m->layer_attn[layer] == SG_ATTN_SLIDING &&
            m->sliding_window > 0 && m->sliding_window < seq_len)
            seq = (double)m->sliding_window; /* a window's kernel works like a short sequence */
        double tf = sg_attention_tflops(k, (double)m->head_dim, seq, backward);
        /* the kernels' authors count the backward as 2.5 forwards, stepgraph as 2 */
        double counted = backward ? attention_flops * 2.5 / 2.0 : attention_flops;
        s += counted / (tf * 1e12);
    }
    return s + sg_unit_elementwise_bytes(m, unit, tokens, backward) / (k->hbm_gbs * 1e9);
}
