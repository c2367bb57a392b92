/* rank_save.c - a checkpoint saved by several data-parallel ranks (rank_save.h). */
#define _POSIX_C_SOURCE 200809L
#include "runtime/train/rank_save.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/io/checkpoint.h"
#include "runtime/io/checkpoint_parts.h"

/* This rank's part of unit u in a checkpoint of several ranks: its shard
 * [rank x shard, (rank + 1) x shard) clipped to the unit, or, for a unit
 * every rank holds whole, all of it on rank 0 and nothing elsewhere. */
static void rank_part(const sg_rank_save_args *t, int u, int64_t *lo, int64_t *hi, int64_t *shard)
{
    int64_t p = sg_model_unit_params(t->model, u);
    *shard = sg_unit_shard_elems(t->model, t->spec, u);
    *lo = sg_unit_shard_offset(t->model, t->spec, u, t->rank);
    if (*shard < p) {
        *hi = *lo + *shard < p ? *lo + *shard : p;
        if (*hi < *lo)
            *hi = *lo;
    } else {
        *shard = 0;
        *hi = t->rank == 0 ? p : 0;
    }
}

/* Whether any rank failed (rc != 0 here or elsewhere): every rank learns it,
 * the failed rank keeps its message, the others name the first failed rank.
 * The host communicator's barrier of a save. */
static int agree(const sg_rank_save_args *t, int rc, const char *what, sg_error *err)
{
    double failed = rc ? (double)(t->rank + 1) : 0.0;
    sg_error e2;
    int rc2 = sg_dist_host_allreduce(t->dist, &failed, 1, SG_COMM_MAX, &e2);
    if (rc)
        return rc;
    if (rc2) {
        *err = e2;
        return rc2;
    }
    if (failed > 0)
        return sg_error_set(err, SG_EIO, "rank %d: %s: rank %d failed (its message says why)",
                            t->rank, what, (int)failed - 1);
    return SG_OK;
}

/* The weights of sharded units, gathered to rank 0 a unit at a time while
 * rank 0 writes the model file: rank 0's fill of a tensor of a unit not yet
 * gathered names the unit to every rank (a sum in which the others add 0),
 * and every rank sends its shard of it; -1 ends. */
typedef struct gather {
    const sg_rank_save_args *t;
    int unit;           /* the unit recv holds; -1 none */
    float *send, *recv; /* one shard; rank 0: the shards of every rank, end to end */
    int64_t *offset;    /* per tensor: where it starts in its unit */
    int rc;             /* the first failure here */
    sg_error err;
} gather;

static int announce(const gather *g, int u, sg_error *err)
{
    double v = g->t->rank == 0 ? (double)u : 0.0;
    int rc = sg_dist_host_allreduce(g->t->dist, &v, 1, SG_COMM_SUM, err);
    return rc ? -2 : (int)v;
}

/* Every rank: its shard of unit u (sharded) into rank 0's recv. A rank
 * whose buffers cannot be read sends zeros and keeps the failure: no rank
 * is left waiting in the gather. */
static int gather_unit(gather *g, int u)
{
    const sg_rank_save_args *t = g->t;
    int64_t lo, hi, shard;
    rank_part(t, u, &lo, &hi, &shard);
    memset(g->send, 0, (size_t)shard * sizeof(float));
    if (sg_state_reader_fill_unit(t->state, SG_SET_WEIGHTS, u, lo, hi - lo, g->send) && !g->rc)
        g->rc = sg_error_set(&g->err, SG_EINVAL,
                             "rank %d: cannot read unit %d's weights back "
                             "from StarPU's buffers",
                             t->rank, u);
    sg_error e;
    int rc = sg_dist_host_gather(t->dist, g->send, g->recv, (size_t)shard, &e);
    if (rc && !g->rc) {
        g->rc = rc;
        g->err = e;
    }
    g->unit = rc ? -1 : u;
    return rc;
}

/* Rank 0's source of the model file's tensors (sg_tensor_source): a unit
 * every rank holds whole from its own buffers, a sharded one gathered. */
static int gathered_fill(void *ctx, int set, int i, float *out)
{
    gather *g = ctx;
    const sg_rank_save_args *t = g->t;
    int u = t->w->unit[i];
    int64_t lo, hi, shard;
    rank_part(t, u, &lo, &hi, &shard);
    if (set != SG_SET_WEIGHTS)
        return SG_EINVAL;
    if (!shard)
        return sg_state_reader_fill(t->state, set, i, out);
    if (g->unit != u) {
        sg_error e;
        if (announce(g, u, &e) != u) {
            if (!g->rc) {
                g->rc = SG_EIO;
                g->err = e;
            }
            return SG_EIO;
        }
        if (gather_unit(g, u))
            return SG_EIO;
    }
    memcpy(out, g->recv + g->offset[i], (size_t)t->w->info[i].numel * sizeof *out);
    return g->rc;
}

/* The other ranks: their shards of the units rank 0 names, until -1. */
static void serve_gathers(gather *g)
{
    for (;;) {
        sg_error e;
        int u = announce(g, -1, &e);
        if (u == -2 && !g->rc) {
            g->rc = SG_EIO;
            g->err = e;
        }
        if (u < 0)
            return;
        gather_unit(g, u);
    }
}

static int partition_fill(void *ctx, int set, int u, int64_t lo, int64_t n, float *out)
{
    return sg_state_reader_fill_unit(ctx, set, u, lo, n, out);
}

/* Several ranks, no step in flight on any rank (the host communicator is
 * safe): every rank writes its optimizer partition into the save's
 * temporary directory, rank 0 writes the model file with the weights of
 * every sharded unit gathered as it goes and, once every rank has written,
 * switches `latest`. */
int sg_rank_save(const sg_rank_save_args *t, sg_dtype dtype, sg_error *err)
{
    const sg_run_options *r = t->run;
    int nunits = sg_model_num_units(t->model);
    int64_t step = t->st->step, max_shard = 0, shard;
    int64_t *lo = calloc((size_t)nunits + 1, sizeof *lo);
    int64_t *hi = calloc((size_t)nunits + 1, sizeof *hi);
    gather g = {.t = t, .unit = -1};
    g.offset = calloc((size_t)t->w->ntensors + 1, sizeof *g.offset);
    int rc = lo && hi && g.offset ? SG_OK : sg_error_set(err, SG_ENOMEM, "out of memory");
    for (int u = 0; u < nunits && !rc; u++) {
        rank_part(t, u, &lo[u], &hi[u], &shard);
        if (shard > max_shard)
            max_shard = shard;
    }
    if (!rc)
        sg_weights_unit_offsets(t->w, g.offset);
    if (!rc && max_shard > 0) {
        g.send = malloc((size_t)max_shard * sizeof(float));
        g.recv = t->rank == 0 ? malloc((size_t)max_shard * (size_t)t->world * sizeof(float)) : NULL;
        if (!g.send || (t->rank == 0 && !g.recv))
            rc = sg_error_set(err, SG_ENOMEM,
                              "out of memory gathering the weights (%lld "
                              "floats)",
                              (long long)(max_shard * (t->rank == 0 ? t->world : 1)));
    }
    /* one name on every rank: rank 0's process id */
    double id = t->rank == 0 ? (double)getpid() : 0.0;
    if (!rc)
        rc = sg_dist_host_allreduce(t->dist, &id, 1, SG_COMM_SUM, err);
    char tmp[SG_PATH_MAX + 96];
    if (!rc)
        rc = sg_checkpoint_stage(r->save, step, (long)id, t->rank == 0, tmp, sizeof tmp, err);
    if ((rc = agree(t, rc, "saving a checkpoint", err)))
        goto out;
    /* 1. each rank's partition (masters and moments of its shard) */
    sg_unit_source part = {partition_fill, t->state};
    rc = sg_checkpoint_write_part(tmp, t->rank, t->world, t->model, t->st, &part, lo, hi, err);
    /* 2. rank 0: the whole model, as one rank writes it, the others sending
     * their shards as it asks (every rank takes part, even after a failure
     * above, so that none waits in a gather) */
    if (t->rank == 0) {
        sg_tensor_source gathered = {gathered_fill, &g};
        t->w->source = &gathered;
        if (!rc)
            rc = sg_checkpoint_write_weights(tmp, t->w, step, t->model, dtype, r->save_shard_size,
                                             err);
        t->w->source = NULL;
        sg_error e;
        if (announce(&g, -1, &e) == -2 && !g.rc) {
            g.rc = SG_EIO;
            g.err = e;
        }
    } else {
        serve_gathers(&g);
    }
    if (g.rc && (!rc || t->rank == 0)) { /* the gather's cause over the writer's */
        rc = g.rc;
        *err = g.err;
    }
    /* 3. once every rank has written: the switch (rank 0) */
    rc = agree(t, rc, "saving a checkpoint", err);
    if (t->rank == 0)
        rc = rc ? (sg_checkpoint_abandon(tmp), rc)
                : sg_checkpoint_commit(r->save, step, (long)id, r->save_keep, err);
out:
    free(lo);
    free(hi);
    free(g.offset);
    free(g.send);
    free(g.recv);
    return rc;
}
