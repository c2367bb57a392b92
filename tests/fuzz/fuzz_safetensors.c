/* fuzz_safetensors.c - the safetensors reader (sg_st_open on a file): every
 * tensor found by name and read as fp32, every metadata value looked up. */
#include "tests/fuzz/fuzz_util.h"

#include "runtime/io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[300];
    fuzz_write("t.safetensors", data, size, path);
    sg_st_file f;
    sg_error err = {0};
    if (sg_st_open(path, &f, &err) == SG_OK) {
        for (int i = 0; i < f.ntensors; i++) {
            const sg_st_tensor *t = sg_st_find(&f, f.tensors[i].name);
            if (t != &f.tensors[i])
                abort(); /* lookup by name must find the tensor itself */
            /* numel * dtype size bytes lie in a file of `size` bytes */
            float *out = malloc((size_t)t->numel * sizeof *out + 1);
            if (!out)
                abort();
            sg_st_read_f32(t, out);
            free(out);
        }
        for (int i = 0; i < f.nmeta; i++)
            if (!sg_st_meta_get(&f, f.meta[i].key))
                abort();
        sg_st_find(&f, "missing");
        sg_st_close(&f);
        char buf[64];
        sg_st_read_meta(path, "step", buf, sizeof buf, &err);
    }
    return 0;
}
