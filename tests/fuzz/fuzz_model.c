/* fuzz_model.c - a model description from JSON text (sg_model_parse), then
 * everything computed from it: per-unit tensors, parameter counts and the
 * `stepgraph model info` text. */
#include "tests/fuzz/fuzz_util.h"

#include "models/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_strdup(data, size);
    sg_model *m = calloc(1, sizeof *m);
    sg_error err = {0};
    if (!m)
        abort();
    if (sg_model_parse(text, "fuzz.json", m, &err) == SG_OK) {
        int nu = sg_model_num_units(m);
        for (int u = 0; u < nu; u++) {
            int n = sg_model_unit_tensors(m, u, NULL, 0);
            if (n > 0) {
                sg_tensor_info *t = calloc((size_t)n, sizeof *t);
                if (!t)
                    abort();
                if (sg_model_unit_tensors(m, u, t, n) != n)
                    abort(); /* the count and the listing disagree */
                free(t);
            }
            sg_model_unit_params(m, u);
            sg_model_unit_active_params(m, u);
        }
        sg_model_total_params(m);
        sg_model_active_params(m);
        char buf[256]; /* small on purpose: the truncation path */
        sg_model_format_info(m, buf, sizeof buf);
        char *big = malloc(1 << 16);
        if (!big)
            abort();
        sg_model_format_info(m, big, 1 << 16);
        free(big);
    }
    free(m);
    free(text);
    return 0;
}
