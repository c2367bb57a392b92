/* fuzz_parts.c - an optimizer partition of a checkpoint written by several
 * ranks (runtime/io/checkpoint_parts.h: sg_parts_open's checks, then
 * sg_parts_read of every unit's parameters in the three sets, whole and in
 * a middle range) for a micro Llama, as the one file of a checkpoint of 1
 * rank. */
#include "tests/fuzz/fuzz_util.h"

#include "runtime/io/checkpoint_parts.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const sg_model *m = fuzz_micro();
    sg_error err = {0};
    char path[300], name[64];
    sg_checkpoint_part_name(name, sizeof name, 0, 1);
    fuzz_write(name, data, size, path);
    sg_train_state st;
    sg_parts_reader r;
    if (sg_train_state_describe(&st, m, &err) != SG_OK)
        abort();
    if (sg_parts_open(fuzz_tmpdir(), 1, m, &st, &r, &err) == SG_OK) {
        for (int u = 0; u < sg_model_num_units(m); u++) {
            int64_t n = sg_model_unit_params(m, u);
            /* each read into a buffer of exactly its size: ASan sees a write past it */
            int64_t ranges[2][2] = {{0, n}, {n / 3, n / 3}};
            for (int set = SG_SET_WEIGHTS; set <= SG_SET_EXP_AVG_SQ; set++)
                for (int k = 0; k < 2; k++) {
                    float *out = malloc((size_t)(ranges[k][1] > 0 ? ranges[k][1] : 1) * 4);
                    if (!out)
                        abort();
                    (void)sg_parts_read(&r, set, u, ranges[k][0], ranges[k][1], out, &err);
                    free(out);
                }
        }
        sg_parts_close(&r);
    }
    sg_train_state_free(&st);
    return 0;
}
