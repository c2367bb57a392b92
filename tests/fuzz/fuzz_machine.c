/* fuzz_machine.c - a machine model file (sg_machine_load) and the cost model
 * made from it. */
#include "tests/fuzz/fuzz_util.h"

#include "runtime/config/machine.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[300];
    fuzz_write("machine.json", data, size, path);
    sg_machine *m = calloc(1, sizeof *m);
    sg_error err = {0};
    if (!m)
        abort();
    if (sg_machine_load(path, m, &err) == SG_OK) {
        sg_cost_model cm;
        sg_machine_cost_model(m, SG_F32, &cm);
        sg_machine_cost_model(m, SG_BF16, &cm);
        sg_machine_cost_model(m, SG_F16, &cm);
    }
    free(m);
    return 0;
}
