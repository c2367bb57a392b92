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

/* Several ranks, no step in flight on any rank (the host communicator is
 * safe): every rank writes its optimizer partition into the save's
 * temporary directory, the weights are gathered to rank 0, which writes the
 * model file and, once every rank has written, switches `latest`. */
int sg_rank_save(const sg_rank_save_args *t, sg_dtype dtype, sg_error *err)
{
    const sg_run_options *r = t->run;
    int nunits = sg_model_num_units(t->model);
    int64_t step = t->st->step, max_shard = 0, shard;
    int64_t *lo = calloc((size_t)nunits + 1, sizeof *lo);
    int64_t *hi = calloc((size_t)nunits + 1, sizeof *hi);
    float *send = NULL, *recv = NULL;
    int rc = lo && hi ? SG_OK : sg_error_set(err, SG_ENOMEM, "out of memory");
    for (int u = 0; u < nunits && !rc; u++) {
        rank_part(t, u, &lo[u], &hi[u], &shard);
        if (shard > max_shard)
            max_shard = shard;
    }
    if (!rc && max_shard > 0) {
        send = malloc((size_t)max_shard * sizeof(float));
        recv = t->rank == 0 ? malloc((size_t)max_shard * (size_t)t->world * sizeof(float)) : NULL;
        if (!send || (t->rank == 0 && !recv))
            rc = sg_error_set(err, SG_ENOMEM, "out of memory gathering the weights");
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
    rc = sg_checkpoint_write_part(tmp, t->rank, t->world, t->model, t->w, t->st, lo, hi, err);
    /* 2. the weights of every sharded unit to rank 0 (every rank takes part,
     * even after a failure above, so that none waits in the gather) */
    int rc_gather = SG_OK;
    for (int u = 0; u < nunits && !rc_gather; u++) {
        int64_t l, h;
        rank_part(t, u, &l, &h, &shard);
        if (!shard)
            continue;
        memset(send, 0, (size_t)shard * sizeof(float));
        sg_unit_slice(t->w->ntensors, t->w->info, t->w->unit, t->w->data, u, l, h - l, send, 0);
        rc_gather = sg_dist_host_gather(t->dist, send, recv, (size_t)shard, rc ? NULL : err);
        if (!rc_gather && t->rank == 0)
            sg_unit_slice(t->w->ntensors, t->w->info, t->w->unit, t->w->data, u, 0,
                          sg_model_unit_params(t->model, u), recv, 1);
    }
    if (!rc)
        rc = rc_gather;
    /* 3. rank 0: the whole model, as one rank writes it */
    if (!rc && t->rank == 0)
        rc = sg_checkpoint_write_weights(tmp, t->w, step, t->model, dtype, r->save_shard_size,
                                         err);
    /* 4. once every rank has written: the switch (rank 0) */
    rc = agree(t, rc, "saving a checkpoint", err);
    if (t->rank == 0)
        rc = rc ? (sg_checkpoint_abandon(tmp), rc)
                : sg_checkpoint_commit(r->save, step, (long)id, r->save_keep, err);
out:
    free(lo);
    free(hi);
    free(send);
    free(recv);
    return rc;
}

