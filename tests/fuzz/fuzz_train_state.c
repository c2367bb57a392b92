/* fuzz_train_state.c - a training-state file (sg_train_state_load: Adam
 * moments and resume metadata) for a micro Llama. */
#include "tests/fuzz/fuzz_util.h"

#include "runtime/io/weights.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const sg_model *m = fuzz_micro();
    sg_error err = {0};
    char path[300];
    fuzz_write("state.safetensors", data, size, path);
    sg_train_state s;
    if (sg_train_state_load(path, m, &s, &err) == SG_OK)
        sg_train_state_free(&s);
    return 0;
}
