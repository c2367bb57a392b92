/* fuzz_train_state.c - a training-state file (sg_train_state_load: Adam
 * moments and resume metadata) for a micro Llama. */
#include "tests/fuzz/fuzz_util.h"

#include "runtime/io/weights.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static sg_model *m;
    sg_error err = {0};
    if (!m) {
        m = calloc(1, sizeof *m);
        if (!m || sg_model_parse(fuzz_micro_model, "micro", m, &err) != SG_OK)
            abort();
    }
    char path[300];
    fuzz_write("state.safetensors", data, size, path);
    sg_train_state s;
    if (sg_train_state_load(path, m, &s, &err) == SG_OK)
        sg_train_state_free(&s);
    return 0;
}
