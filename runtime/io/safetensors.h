/* safetensors.h - read and write the safetensors format.
 *
 * Layout (https://huggingface.co/docs/safetensors):
 *   8 bytes   N, little-endian uint64: length of the header
 *   N bytes   JSON object {"NAME": {"dtype": "F32", "shape": [d0, ...],
 *             "data_offsets": [begin, end]}, ..., "__metadata__": {str: str}},
 *             padded with spaces
 *   rest      the data section; [begin, end) are byte offsets into it
 *
 * The reader maps the file and checks everything before handing out a
 * pointer: header length against the file size, the JSON, every entry's
 * fields, dtype (F32, BF16, F16; other safetensors dtypes are a clear
 * "not supported" error), shape product x dtype size == offsets span, offsets
 * in range, contiguous and non-overlapping (as Hugging Face's own reader
 * requires), unique names. Every message starts with the file name and names
 * the tensor or field.
 *
 * The writer pads the header to a multiple of 8 bytes with spaces and writes
 * through common/atomic_file.h: a failed write leaves an existing file at
 * the path untouched.
 */
#ifndef SG_SAFETENSORS_H
#define SG_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h"
#include "common/error.h"

#define SG_ST_MAX_DIMS 8
/* Hugging Face's reader refuses headers over 100 MB; so does this one. */
#define SG_ST_MAX_HEADER 100000000ull

/* Tensors use common/dtype.h's sg_dtype; the reader and writer take SG_F32,
 * SG_BF16 and SG_F16 (sizes: sg_dtype_size). */

/* "F32", "BF16", "F16", "I32" (the safetensors spelling). */
const char *sg_st_dtype_name(sg_dtype dt);

/* Conversions between fp32 and bf16/f16 are the kernels' (codelets/cpu/ops.h). */
#include "codelets/cpu/ops.h"

/* One tensor of an open file. */
typedef struct sg_st_tensor {
    char *name;
    sg_dtype dtype;
    int ndim;
    int64_t shape[SG_ST_MAX_DIMS];
    int64_t numel;
    uint64_t begin, end;       /* offsets into the data section */
    const unsigned char *data; /* into the mapping; may be unaligned */
} sg_st_tensor;

typedef struct sg_st_meta {
    const char *key;
    const char *value;
} sg_st_meta;

typedef struct sg_st_file {
    char *path;
    void *map; /* whole file, read-only */
    size_t map_len;
    uint64_t header_len; /* N */
    int ntensors;
    sg_st_tensor *tensors; /* in header order */
    int *by_name;          /* indices sorted by name (lookup) */
    int nmeta;
    sg_st_meta *meta; /* strings owned by the file */
} sg_st_file;

/* Maps and validates path. Errors: SG_ENOENT (no such file), SG_EIO
 * (unreadable), SG_EINVAL (malformed), SG_ENOTSUP (valid safetensors with a
 * dtype stepgraph does not read). On error f is left closed. */
int sg_st_open(const char *path, sg_st_file *f, sg_error *err);
void sg_st_close(sg_st_file *f);

/* The tensor named name, or NULL. O(log n). */
const sg_st_tensor *sg_st_find(const sg_st_file *f, const char *name);
/* A __metadata__ value, or NULL. */
const char *sg_st_meta_get(const sg_st_file *f, const char *key);

/* Copies a tensor into out (numel floats), converting BF16/F16 to fp32. */
void sg_st_read_f32(const sg_st_tensor *t, float *out);
/* The same, then gives the mapping's pages of the tensor back (a load that
 * reads each tensor once does not keep the files resident). */
void sg_st_read_f32_release(const sg_st_tensor *t, float *out);
/* Both for elements [lo, lo + n) of the tensor (0 <= lo <= lo + n <= numel). */
void sg_st_read_f32_range(const sg_st_tensor *t, int64_t lo, int64_t n, float *out);
void sg_st_read_f32_range_release(const sg_st_tensor *t, int64_t lo, int64_t n, float *out);

/* One tensor to write: data holds numel values of src_dtype (native byte
 * order, little-endian hosts only); they are written as dtype. Supported
 * conversions: same dtype, or F32 source to BF16/F16. */
typedef struct sg_st_entry {
    const char *name;
    sg_dtype dtype;     /* in the file */
    sg_dtype src_dtype; /* of data */
    int ndim;
    const int64_t *shape;
    const void *data;
    /* data NULL: fill(fill_ctx, fill_index, out) writes the numel fp32
     * values (src_dtype F32) into out right before they are written, into a
     * buffer the writer holds for that tensor alone (a source that is not
     * in memory as a whole: the trainer's save, runtime/train/train.c);
     * non-zero: the values could not be had, and the file is not written */
    int (*fill)(void *ctx, int index, float *out);
    void *fill_ctx;
    int fill_index;
} sg_st_entry;

/* Writes n tensors (in this order, contiguous) and nmeta metadata pairs.
 * Names must be unique and not "__metadata__"; metadata keys unique. */
int sg_st_write(const char *path, const sg_st_entry *t, int n, const sg_st_meta *meta, int nmeta,
                sg_error *err);

/* Reads one __metadata__ value of a file into buf without keeping the file
 * open (e.g. the "step" of a weights file). SG_ENOENT when the key is
 * absent. */
int sg_st_read_meta(const char *path, const char *key, char *buf, size_t size, sg_error *err);

#endif /* SG_SAFETENSORS_H */
