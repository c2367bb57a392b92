/* weights_common.c - the tensor lists, storage and checks that the weights
 * and training-state files share (weights_common.h). */

#define _POSIX_C_SOURCE 200809L /* strdup with -std=c11 */

#include "runtime/io/weights_common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t padded(int64_t numel)
{
    return (numel + ALIGN_FLOATS - 1) / ALIGN_FLOATS * ALIGN_FLOATS;
}

/* Every tensor of m in unit order; *unit_out gets each tensor's unit. */
int sg_weights_model_tensors(const sg_model *m, sg_tensor_info **info_out, int **unit_out,
                             int *n_out, sg_error *err)
{
    int nu = sg_model_num_units(m), n = 0;
    for (int u = 0; u < nu; u++) {
        int k = sg_model_unit_tensors(m, u, NULL, 0);
        if (k < 0)
            return sg_error_set(err, SG_EINVAL, "model %s: cannot list the tensors of unit %d",
                                m->name, u);
        n += k;
    }
    sg_tensor_info *info = calloc((size_t)(n > 0 ? n : 1), sizeof *info);
    int *unit = calloc((size_t)(n > 0 ? n : 1), sizeof *unit);
    if (!info || !unit) {
        free(info);
        free(unit);
        return sg_error_set(err, SG_ENOMEM, "model %s: out of memory", m->name);
    }
    int at = 0;
    for (int u = 0; u < nu; u++) {
        int k = sg_model_unit_tensors(m, u, info + at, n - at);
        for (int i = 0; i < k; i++)
            unit[at + i] = u;
        at += k;
    }
    *info_out = info;
    *unit_out = unit;
    *n_out = n;
    return SG_OK;
}

/* One zeroed block for `copies` arrays per tensor, each 64-byte aligned;
 * calloc keeps untouched pages lazy for big models. */
float *sg_weights_alloc_block(const sg_tensor_info *info, int n, int copies, float ***ptrs,
                              int64_t *numel_out)
{
    int64_t total = 0, numel = 0;
    for (int i = 0; i < n; i++) {
        total += padded(info[i].numel) * copies;
        numel += info[i].numel;
    }
    float *block = calloc((size_t)total + ALIGN_FLOATS, sizeof(float));
    if (!block)
        return NULL;
    uintptr_t a = ((uintptr_t)block + 63) & ~(uintptr_t)63;
    float *p = (float *)a;
    for (int c = 0; c < copies; c++) {
        ptrs[c] = malloc((size_t)(n > 0 ? n : 1) * sizeof(float *));
        if (!ptrs[c]) {
            for (int k = 0; k < c; k++)
                free(ptrs[k]);
            free(block);
            return NULL;
        }
    }
    for (int c = 0; c < copies; c++)
        for (int i = 0; i < n; i++) {
            ptrs[c][i] = p;
            p += padded(info[i].numel);
        }
    if (numel_out)
        *numel_out = numel;
    return block;
}

/* An entry's fill: the index is tensor * 3 + set (sg_tensor_source). */
static int source_fill(void *ctx, int index, float *out)
{
    const sg_tensor_source *src = ctx;
    return src->fill(src->ctx, index % 3, index / 3, out);
}

sg_st_entry sg_weights_tensor_entry(const sg_tensor_info *t, sg_dtype dtype, const float *data,
                                    const sg_tensor_source *source, int set, int i)
{
    return (sg_st_entry){.name = t->name,
                         .dtype = dtype,
                         .src_dtype = SG_F32,
                         .ndim = t->ndim,
                         .shape = t->shape,
                         .data = data,
                         .fill = data ? NULL : source_fill,
                         .fill_ctx = (void *)source,
                         .fill_index = 3 * i + set};
}

static void shape_str(int ndim, const int64_t *shape, char *buf, size_t size)
{
    size_t n = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < ndim && n < size; d++)
        n += (size_t)snprintf(buf + n, size - n, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (n < size)
        snprintf(buf + n, size - n, "]");
}

int sg_weights_same_shape(const sg_st_tensor *t, const sg_tensor_info *want)
{
    if (t->ndim != want->ndim)
        return 0;
    for (int d = 0; d < want->ndim; d++)
        if (t->shape[d] != want->shape[d])
            return 0;
    return 1;
}

/* "path: tensor: shape [a, b] in the file, expected [c, d]" */
int sg_weights_shape_error(const char *path, const char *name, const sg_st_tensor *t,
                           const sg_tensor_info *want, sg_error *err)
{
    char got[160], exp[160];
    shape_str(t->ndim, t->shape, got, sizeof got);
    shape_str(want->ndim, want->shape, exp, sizeof exp);
    return sg_error_set(err, SG_EINVAL, "%s: %s: shape %s in the file, expected %s", path, name,
                        got, exp);
}

void sg_weights_list_add(name_list *l, const char *name)
{
    size_t n = strlen(l->text);
    if (l->count < LIST_MAX && n < sizeof l->text)
        snprintf(l->text + n, sizeof l->text - n, "%s%s", l->count ? ", " : "", name);
    l->count++;
}

void sg_weights_list_finish(name_list *l)
{
    size_t n = strlen(l->text);
    if (l->count > LIST_MAX && n < sizeof l->text)
        snprintf(l->text + n, sizeof l->text - n, " and %d more", l->count - LIST_MAX);
}

int sg_weights_check_finite(const char *path, const char *name, const float *x, int64_t n,
                            int nonneg, sg_error *err)
{
    for (int64_t k = 0; k < n; k++) {
        if (!isfinite(x[k]))
            return sg_error_set(err, SG_EINVAL, "%s: %s: non-finite value %g at index %lld", path,
                                name, (double)x[k], (long long)k);
        if (nonneg && x[k] < 0)
            return sg_error_set(err, SG_EINVAL,
                                "%s: %s: negative value %g at index %lld (a second moment is "
                                ">= 0)",
                                path, name, (double)x[k], (long long)k);
    }
    return SG_OK;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Model names sorted, for the "not in the model" check. */
const char **sg_weights_sorted_names(const sg_tensor_info *info, int n)
{
    const char **s = malloc((size_t)(n > 0 ? n : 1) * sizeof *s);
    if (!s)
        return NULL;
    for (int i = 0; i < n; i++)
        s[i] = info[i].name;
    qsort(s, (size_t)n, sizeof *s, cmp_str);
    return s;
}

int sg_weights_in_sorted(const char **s, int n, const char *name)
{
    return bsearch(&name, s, (size_t)n, sizeof *s, cmp_str) != NULL;
}
