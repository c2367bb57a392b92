/* disk_tier.c - ZeRO-Infinity's disk tier of a step graph (disk_tier.h). */
#include "graph/disk_tier.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

int sg_disk_tier_holds(const sg_step_spec *spec, const sg_buffer *b)
{
    if (!b->persistent || b->space != SG_MEM_HOST)
        return 0;
    if (spec->nvme_optimizer && (b->role == SG_BUF_MASTER || b->role == SG_BUF_MOMENTS))
        return 1;
    return spec->nvme_param && b->role == SG_BUF_PARAM_PIECE;
}

/* The bytes access a of a node touches (a chunk's overlap of a piece, or
 * the whole buffer). */
static int64_t access_bytes(const sg_graph *g, const sg_access *a)
{
    return a->bytes > 0 ? a->bytes : g->buffers[a->buffer].bytes;
}

/* Units: the pieces on disk per unit. */
typedef struct tier_scan {
    int64_t *unit_bytes; /* per unit */
    int nunits_max;
} tier_scan;

static void end_tile(sg_disk_tier *t, int64_t bytes)
{
    if (bytes <= 0)
        return;
    t->ntiles++;
    if (bytes > t->tile_bytes)
        t->tile_bytes = bytes;
}

/* A tile is one (sub-group, tile) of the masters and moments on disk: the
 * compiler declares a chunk's master and moments one after the other, so a
 * tile's buffers are consecutive among those on disk. */
static void scan_buffers(const sg_graph *g, const sg_step_spec *spec, tier_scan *sc,
                         sg_disk_tier *t)
{
    int cur_sg = -2, cur_tile = -2;
    int64_t cur = 0;
    for (int b = 0; b < g->nbuffers; b++) {
        const sg_buffer *x = &g->buffers[b];
        if (!sg_disk_tier_holds(spec, x))
            continue;
        if (x->role == SG_BUF_PARAM_PIECE) {
            t->param_bytes += x->bytes;
            if (x->unit >= 0 && x->unit < sc->nunits_max)
                sc->unit_bytes[x->unit] += x->bytes;
            continue;
        }
        t->optimizer_bytes += x->bytes;
        if (x->subgroup != cur_sg || x->tile != cur_tile) {
            end_tile(t, cur);
            cur = 0;
            cur_sg = x->subgroup;
            cur_tile = x->tile;
        }
        cur += x->bytes;
    }
    end_tile(t, cur);
    for (int u = 0; u < sc->nunits_max; u++)
        if (sc->unit_bytes[u] > 0) {
            t->nunits++;
            if (sc->unit_bytes[u] > t->unit_bytes)
                t->unit_bytes = sc->unit_bytes[u];
        }
}

int sg_disk_tier_node_bytes(const sg_graph *g, const sg_step_spec *spec, int64_t *read,
                            int64_t *write, int *prefetch)
{
    /* an optimizer buffer on disk: read at its first access of the step,
     * written back after the last task that writes it (later readers of
     * the step find it still in RAM) */
    int *first = malloc((size_t)(g->nbuffers + 1) * sizeof *first);
    int *last = malloc((size_t)(g->nbuffers + 1) * sizeof *last);
    char *dirty = calloc((size_t)g->nbuffers + 1, 1);
    if (!first || !last || !dirty) {
        free(first);
        free(last);
        free(dirty);
        return SG_ENOMEM;
    }
    for (int b = 0; b < g->nbuffers; b++)
        first[b] = last[b] = -1;
    for (int i = 0; i < g->nnodes; i++) {
        const sg_node *nd = &g->nodes[i];
        read[i] = write[i] = 0;
        prefetch[i] = 0;
        for (int a = 0; a < nd->naccess; a++) {
            const sg_access *ac = &nd->access[a];
            const sg_buffer *b = &g->buffers[ac->buffer];
            if (!sg_disk_tier_holds(spec, b))
                continue;
            if (b->role == SG_BUF_PARAM_PIECE) {
                /* every use reads from disk, every update writes back */
                read[i] += (ac->mode & SG_R) ? access_bytes(g, ac) : 0;
                write[i] += (ac->mode & SG_W) ? access_bytes(g, ac) : 0;
                continue;
            }
            if (first[ac->buffer] < 0)
                first[ac->buffer] = i;
            if (ac->mode & SG_W) {
                last[ac->buffer] = i;
                dirty[ac->buffer] = 1;
            }
        }
    }
    for (int b = 0; b < g->nbuffers; b++) {
        if (first[b] < 0)
            continue;
        read[first[b]] += g->buffers[b].bytes;
        prefetch[first[b]] = 1;
        if (dirty[b])
            write[last[b]] += g->buffers[b].bytes;
    }
    free(first);
    free(last);
    free(dirty);
    return SG_OK;
}

/* The step's disk traffic: the nodes' (sg_disk_tier_node_bytes) summed. */
static int traffic(const sg_graph *g, const sg_step_spec *spec, sg_disk_tier *t)
{
    size_t n = (size_t)(g->nnodes > 0 ? g->nnodes : 1);
    int64_t *r = malloc(n * sizeof *r), *w = malloc(n * sizeof *w);
    int *pf = malloc(n * sizeof *pf);
    int rc = r && w && pf ? sg_disk_tier_node_bytes(g, spec, r, w, pf) : SG_ENOMEM;
    for (int i = 0; !rc && i < g->nnodes; i++) {
        t->read_bytes += r[i];
        t->write_bytes += w[i];
    }
    free(r);
    free(w);
    free(pf);
    return rc;
}

int sg_disk_tier_compute(const sg_graph *g, const sg_step_spec *spec, sg_disk_tier *t)
{
    memset(t, 0, sizeof *t);
    if (!spec->nvme_optimizer && !spec->nvme_param)
        return SG_OK;
    t->active = 1;
    int nunits = 0;
    for (int b = 0; b < g->nbuffers; b++)
        if (g->buffers[b].unit + 1 > nunits)
            nunits = g->buffers[b].unit + 1;
    tier_scan sc = {calloc((size_t)nunits + 1, sizeof(int64_t)), nunits};
    if (!sc.unit_bytes)
        return SG_ENOMEM;
    scan_buffers(g, spec, &sc, t);
    free(sc.unit_bytes);
    t->buffer_count =
        spec->nvme_buffer_count > 0 ? spec->nvme_buffer_count : SG_DISK_BUFFER_COUNT_DEFAULT;
    t->param_buffer_count = spec->nvme_param_buffer_count > 0 ? spec->nvme_param_buffer_count
                                                              : SG_DISK_PARAM_BUFFER_COUNT_DEFAULT;
    t->optimizer_ram = (t->buffer_count < t->ntiles ? t->buffer_count : t->ntiles) * t->tile_bytes;
    t->param_ram =
        (t->param_buffer_count < t->nunits ? t->param_buffer_count : t->nunits) * t->unit_bytes;
    /* never more than what is on disk (a few large units or tiles) */
    if (t->param_ram > t->param_bytes)
        t->param_ram = t->param_bytes;
    if (t->optimizer_ram > t->optimizer_bytes)
        t->optimizer_ram = t->optimizer_bytes;
    t->ram_bytes = t->optimizer_ram + t->param_ram;
    t->bytes = t->optimizer_bytes + t->param_bytes;
    return traffic(g, spec, t);
}

int64_t sg_disk_tier_ram_saved(const sg_disk_tier *t)
{
    int64_t d = t->bytes - t->ram_bytes;
    return d > 0 ? d : 0;
}

void sg_disk_tier_apply(sg_summary *s, const sg_disk_tier *t)
{
    if (!t->active)
        return;
    s->peak_bytes[SG_MEM_HOST] -= sg_disk_tier_ram_saved(t);
    s->persistent_bytes[SG_MEM_HOST] -= t->bytes;
    s->disk_bytes = t->bytes;
    s->disk_ram_bytes = t->ram_bytes;
    s->disk_read_bytes = t->read_bytes;
    s->disk_write_bytes = t->write_bytes;
    s->disk_buffer_count = t->buffer_count;
    s->disk_tile_bytes = t->tile_bytes;
    s->disk_param_ram_bytes = t->param_ram;
    s->disk_param_buffer_count = t->param_buffer_count;
}

double sg_disk_tier_seconds(const sg_summary *s, const sg_cost_model *cm)
{
    return (cm->disk_read_bw > 0 ? (double)s->disk_read_bytes / cm->disk_read_bw : 0) +
           (cm->disk_write_bw > 0 ? (double)s->disk_write_bytes / cm->disk_write_bw : 0);
}

static double mib(int64_t b)
{
    return (double)b / 1048576.0;
}

int sg_disk_tier_print(const sg_summary *s, FILE *out)
{
    if (s->disk_bytes <= 0)
        return SG_OK;
    const double gib = 1073741824.0;
    fprintf(out,
            "disk tier (nvme): %.1f MiB on disk; RAM working set %.1f MiB, in the host "
            "peak above",
            mib(s->disk_bytes), mib(s->disk_ram_bytes));
    if (s->disk_ram_bytes > s->disk_param_ram_bytes)
        fprintf(out, "; optimizer: %lld tiles (buffer_count) of at most %.1f MiB",
                (long long)s->disk_buffer_count, mib(s->disk_tile_bytes));
    if (s->disk_param_ram_bytes > 0)
        fprintf(out, "; parameters: %lld units' pieces (buffer_count), %.1f MiB",
                (long long)s->disk_param_buffer_count, mib(s->disk_param_ram_bytes));
    fprintf(out, "\n");
    fprintf(out, "disk bytes per step: read %.1f MiB, written %.1f MiB\n", mib(s->disk_read_bytes),
            mib(s->disk_write_bytes));
    if (s->disk_capacity_bytes > 0)
        fprintf(out, "disk: %.1f GiB needed of %.1f GiB: %s\n", (double)s->disk_bytes / gib,
                s->disk_capacity_bytes / gib,
                (double)s->disk_bytes <= s->disk_capacity_bytes ? "fits" : "DOES NOT FIT");
    return ferror(out) ? SG_EIO : SG_OK;
}

void sg_disk_tier_json(const sg_summary *s, FILE *out)
{
    if (s->disk_bytes <= 0)
        return;
    fprintf(out,
            "\"disk\":{\"bytes\":%" PRId64 ",\"ram_bytes\":%" PRId64 ",\"read_bytes\":%" PRId64
            ",\"write_bytes\":%" PRId64 ",\"buffer_count\":%" PRId64 ",\"tile_bytes\":%" PRId64
            ",\"param_ram_bytes\":%" PRId64 ",\"capacity_bytes\":%.0f},",
            s->disk_bytes, s->disk_ram_bytes, s->disk_read_bytes, s->disk_write_bytes,
            s->disk_buffer_count, s->disk_tile_bytes, s->disk_param_ram_bytes,
            s->disk_capacity_bytes);
}
