/* step_log.c - the step and summary lines, metrics JSONL (see step_log.h). */
#include "runtime/train/step_log.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>

/* snprintf into a buffer piece by piece; len counts what the whole text
 * needs even once the buffer is full. */
typedef struct sbuf {
    char *buf;
    size_t n, len;
} sbuf;

__attribute__((format(printf, 2, 3))) static void sb_printf(sbuf *b, const char *fmt, ...)
{
    size_t off = b->len < b->n ? b->len : b->n;
    char dummy[1];
    char *dst = b->n ? b->buf + off : dummy;
    size_t room = b->n ? b->n - off : 0;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(room ? dst : NULL, room, fmt, ap);
    va_end(ap);
    if (k > 0)
        b->len += (size_t)k;
}

static sbuf sb_start(char *buf, size_t n)
{
    if (n)
        buf[0] = '\0';
    return (sbuf){buf, n, 0};
}

static int sb_result(const sbuf *b)
{
    return b->len > (size_t)2147483647 ? 2147483647 : (int)b->len;
}

/* "%.<prec>f" or "n/a" */
static void sb_num(sbuf *b, double v, int prec)
{
    if (isnan(v))
        sb_printf(b, "n/a");
    else
        sb_printf(b, "%.*f", prec, v);
}

int sg_format_step_line(char *buf, size_t n, int64_t step, double loss, double ms, double tflops,
                        double tokens_per_s)
{
    sbuf b = sb_start(buf, n);
    sb_printf(&b, "Step %lld | Loss: %.4f | Time: %.2f ms | TFLOPS: ", (long long)step, loss, ms);
    sb_num(&b, tflops, 2);
    sb_printf(&b, " | Tokens/s: %.1f", tokens_per_s);
    return sb_result(&b);
}

int sg_format_breakdown_line(char *buf, size_t n, const sg_phase_times *p)
{
    sbuf b = sb_start(buf, n);
    const char *names[4] = {"forward", "backward", "optimizer", "transfer"};
    double v[4] = {p->forward_s, p->backward_s, p->optimizer_s, p->transfer_s};
    sb_printf(&b, "time (ms)");
    for (int i = 0; i < 4; i++) {
        sb_printf(&b, " | %s: ", names[i]);
        sb_num(&b, v[i] * 1e3, 2);
    }
    return sb_result(&b);
}

/* --- summary ------------------------------------------------------------ */

void sg_step_stats_init(sg_step_stats *st)
{
    memset(st, 0, sizeof *st);
}

static void set_add(struct sg_step_set *s, int64_t step, double seconds, double tokens,
                    double tflops, double model_tflops)
{
    if (s->steps == 0) {
        s->first_step = step;
        s->min_s = s->max_s = seconds;
    }
    s->last_step = step;
    s->steps++;
    s->seconds += seconds;
    s->tokens += tokens;
    if (isfinite(tflops))
        s->tflop += tflops * seconds;
    else
        s->tflops_missing = 1;
    if (isfinite(model_tflops))
        s->model_tflop += model_tflops * seconds;
    else
        s->model_missing = 1;
    if (seconds < s->min_s)
        s->min_s = seconds;
    if (seconds > s->max_s)
        s->max_s = seconds;
}

void sg_step_stats_add(sg_step_stats *st, int64_t step, double seconds, double tokens,
                       const sg_step_rates *rates, int is_warmup)
{
    double tf = rates ? rates->tflops : NAN, mtf = rates ? rates->model_tflops : NAN;
    set_add(&st->all, step, seconds, tokens, tf, mtf);
    if (!is_warmup)
        set_add(&st->timed, step, seconds, tokens, tf, mtf);
}

int64_t sg_step_stats_summary(const sg_step_stats *st, sg_step_summary *out)
{
    memset(out, 0, sizeof *out);
    const struct sg_step_set *s = &st->timed;
    if (s->steps == 0 && st->all.steps > 0) {
        s = &st->all;
        out->all_warmup = 1;
    }
    out->warmup_excluded = out->all_warmup ? 0 : st->all.steps - st->timed.steps;
    out->steps = s->steps;
    out->mean_s = out->min_s = out->max_s = out->tokens_per_s = out->tflops = NAN;
    out->model_tflops = NAN;
    if (s->steps == 0)
        return 0;
    out->first_step = s->first_step;
    out->last_step = s->last_step;
    out->mean_s = s->seconds / (double)s->steps;
    out->min_s = s->min_s;
    out->max_s = s->max_s;
    if (s->seconds > 0.0) {
        out->tokens_per_s = s->tokens / s->seconds;
        if (!s->tflops_missing)
            out->tflops = s->tflop / s->seconds;
        if (!s->model_missing)
            out->model_tflops = s->model_tflop / s->seconds;
    }
    return out->steps;
}

static void sb_bytes(sbuf *b, int64_t bytes)
{
    const double KiB = 1024.0, MiB = KiB * 1024.0, GiB = MiB * 1024.0;
    double v = (double)bytes;
    if (bytes < 0)
        sb_printf(b, "n/a");
    else if (v >= GiB)
        sb_printf(b, "%.2f GiB", v / GiB);
    else if (v >= MiB)
        sb_printf(b, "%.1f MiB", v / MiB);
    else if (v >= KiB)
        sb_printf(b, "%.1f KiB", v / KiB);
    else
        sb_printf(b, "%lld B", (long long)bytes);
}

int sg_step_stats_format_summary(const sg_step_stats *st, const sg_mem_peak *peaks, int npeaks,
                                 char *buf, size_t n)
{
    sbuf b = sb_start(buf, n);
    sg_step_summary s;
    sg_step_stats_summary(st, &s);
    if (s.steps == 0) {
        sb_printf(&b, "Summary: no steps ran\n");
    } else {
        if (s.steps == 1)
            sb_printf(&b, "Summary: 1 step (step %lld)", (long long)s.first_step);
        else
            sb_printf(&b, "Summary: %lld steps (%lld..%lld)", (long long)s.steps,
                      (long long)s.first_step, (long long)s.last_step);
        if (s.all_warmup)
            sb_printf(&b, ", all warm-up steps (figures include them)\n");
        else if (s.warmup_excluded > 0)
            sb_printf(&b, ", %lld warm-up step%s excluded\n", (long long)s.warmup_excluded,
                      s.warmup_excluded == 1 ? "" : "s");
        else
            sb_printf(&b, "\n");
        sb_printf(&b, "  Step time: mean %.2f ms | min %.2f ms | max %.2f ms\n", s.mean_s * 1e3,
                  s.min_s * 1e3, s.max_s * 1e3);
        sb_printf(&b, "  Throughput: ");
        sb_num(&b, s.tokens_per_s, 1);
        sb_printf(&b, " tokens/s | TFLOPS: ");
        sb_num(&b, s.tflops, 2);
        sb_printf(&b, " | Model TFLOPS: ");
        sb_num(&b, s.model_tflops, 2);
        sb_printf(&b, "\n");
    }
    if (npeaks > 0 && peaks) {
        sb_printf(&b, "  Peak memory:");
        for (int i = 0; i < npeaks; i++) {
            sb_printf(&b, "%s %s ", i ? " |" : "", peaks[i].name ? peaks[i].name : "?");
            sb_bytes(&b, peaks[i].bytes);
        }
        sb_printf(&b, "\n");
    }
    return sb_result(&b);
}

/* --- metrics JSONL ------------------------------------------------------ */

int sg_metrics_open(sg_metrics *m, const char *path, sg_error *err)
{
    memset(m, 0, sizeof *m);
    if (snprintf(m->path, sizeof m->path, "%s", path) >= (int)sizeof m->path)
        return sg_error_set(err, SG_EINVAL, "%s: path too long", path);
    m->fp = fopen(path, "w");
    if (!m->fp)
        return sg_error_set(err, SG_EIO, "%s: cannot write the metrics file: %s", path,
                            strerror(errno));
    return SG_OK;
}

/* `"key":value` with 10 significant digits, null when not finite */
static void json_num(FILE *fp, const char *key, double v)
{
    if (isfinite(v))
        fprintf(fp, "\"%s\":%.17g", key, v);
    else
        fprintf(fp, "\"%s\":null", key);
}

int sg_metrics_write_step(sg_metrics *m, int64_t step, double loss, const sg_update_hyper *h,
                          double grad_norm, double loss_scale, double seconds, double tokens_per_s,
                          const sg_step_rates *rates, int skipped, const sg_phase_times *phases)
{
    if (!m->fp)
        return SG_EIO;
    if (m->err_no)
        return SG_EIO;
    FILE *fp = m->fp;
    fprintf(fp, "{\"step\":%lld,", (long long)step);
    json_num(fp, "loss", loss);
    fputc(',', fp);
    json_num(fp, "lr", h->lr);
    fputc(',', fp);
    json_num(fp, "beta1", h->beta1);
    fputc(',', fp);
    json_num(fp, "beta2", h->beta2);
    fputc(',', fp);
    json_num(fp, "grad_norm", grad_norm);
    fputc(',', fp);
    json_num(fp, "loss_scale", loss_scale);
    fputc(',', fp);
    json_num(fp, "time_ms", seconds * 1e3);
    fputc(',', fp);
    json_num(fp, "tokens_per_s", tokens_per_s);
    fputc(',', fp);
    json_num(fp, "tflops", rates->tflops);
    fputc(',', fp);
    json_num(fp, "model_tflops", rates->model_tflops);
    fputc(',', fp);
    json_num(fp, "megatron_tflops", rates->megatron_tflops);
    fputc(',', fp);
    json_num(fp, "mfu", rates->mfu);
    fprintf(fp, ",\"skipped\":%s", skipped ? "true" : "false");
    if (phases) {
        fputs(",\"phases_ms\":{", fp);
        json_num(fp, "forward", phases->forward_s * 1e3);
        fputc(',', fp);
        json_num(fp, "backward", phases->backward_s * 1e3);
        fputc(',', fp);
        json_num(fp, "optimizer", phases->optimizer_s * 1e3);
        fputc(',', fp);
        json_num(fp, "transfer", phases->transfer_s * 1e3);
        fputc('}', fp);
    }
    fputs("}\n", fp);
    if (fflush(fp) != 0 || ferror(fp)) {
        m->err_no = errno ? errno : EIO;
        return SG_EIO;
    }
    return SG_OK;
}

int sg_metrics_write_eval(sg_metrics *m, int64_t step, double eval_loss, double eval_ppl,
                          int64_t eval_tokens, double seconds)
{
    if (!m->fp || m->err_no)
        return SG_EIO;
    FILE *fp = m->fp;
    fprintf(fp, "{\"step\":%lld,", (long long)step);
    json_num(fp, "eval_loss", eval_loss);
    fputc(',', fp);
    json_num(fp, "eval_ppl", eval_ppl);
    fprintf(fp, ",\"eval_tokens\":%lld,", (long long)eval_tokens);
    json_num(fp, "eval_time_ms", seconds * 1e3);
    fputs("}\n", fp);
    if (fflush(fp) != 0 || ferror(fp)) {
        m->err_no = errno ? errno : EIO;
        return SG_EIO;
    }
    return SG_OK;
}

int sg_metrics_close(sg_metrics *m, sg_error *err)
{
    if (!m->fp)
        return SG_OK;
    int e = m->err_no;
    if (fclose(m->fp) != 0 && !e)
        e = errno ? errno : EIO;
    m->fp = NULL;
    if (e)
        return sg_error_set(err, SG_EIO, "%s: writing metrics failed: %s", m->path, strerror(e));
    return SG_OK;
}
