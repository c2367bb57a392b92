/* weights_common.h - what the weights files (runtime/io/weights.c) and the
 * training-state files (train_state.c) share: a model's tensor list, one
 * aligned block for several arrays per tensor, shape checks and their
 * messages, lists of names for "missing"/"extra" messages, the finite
 * check of values read. Not a public header: weights.h is the interface.
 */
#ifndef SG_WEIGHTS_COMMON_H
#define SG_WEIGHTS_COMMON_H

#include "runtime/io/weights.h"

#include <stdint.h>

#define ALIGN_FLOATS 16 /* 64 bytes: a cache line, and any SIMD width */
#define LIST_MAX 3      /* names listed in a missing/extra message */

/* Appends up to LIST_MAX names, then "and N more". */
typedef struct name_list {
    char text[600];
    int count;
} name_list;

/* Every tensor of m in unit order; *unit_out gets each tensor's unit. */
int sg_weights_model_tensors(const sg_model *m, sg_tensor_info **info_out, int **unit_out,
                             int *n_out, sg_error *err);

/* One zeroed block for `copies` arrays per tensor, each 64-byte aligned;
 * calloc keeps untouched pages lazy for big models. */
float *sg_weights_alloc_block(const sg_tensor_info *info, int n, int copies, float ***ptrs,
                              int64_t *numel_out);

sg_st_entry sg_weights_tensor_entry(const sg_tensor_info *t, sg_dtype dtype, const float *data,
                                    const sg_tensor_source *source, int set, int i);

int sg_weights_same_shape(const sg_st_tensor *t, const sg_tensor_info *want);

/* "path: tensor: shape [a, b] in the file, expected [c, d]" */
int sg_weights_shape_error(const char *path, const char *name, const sg_st_tensor *t,
                           const sg_tensor_info *want, sg_error *err);

void sg_weights_list_add(name_list *l, const char *name);

void sg_weights_list_finish(name_list *l);

int sg_weights_check_finite(const char *path, const char *name, const float *x, int64_t n,
                            int nonneg, sg_error *err);

/* Model names sorted, for the "not in the model" check. */
const char **sg_weights_sorted_names(const sg_tensor_info *info, int n);

int sg_weights_in_sorted(const char **s, int n, const char *name);

#endif
