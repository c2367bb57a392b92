/* state_source.h - where a run's starting state comes from, a tensor at a
 * time: a checkpoint, a weights file or a Hugging Face directory (--load,
 * runtime/io/checkpoint.h's reader), or the seeded initialisation
 * (sg_weights_init), and Adagrad's initial sum of squares where the run
 * does not resume one. Its fill is what sg_exec_load_state_from (exec.h)
 * writes into StarPU's buffers, so that no copy of the model is made. */
#ifndef SG_STATE_SOURCE_H
#define SG_STATE_SOURCE_H

#include <stdint.h>

#include "runtime/io/checkpoint.h"

typedef struct sg_state_source {
    sg_tensor_source src;        /* fill: sg_state_source_fill, ctx: this */
    sg_checkpoint_reader reader; /* --load */
    int have_reader;
    const sg_weights *shape;
    uint64_t seed;
    double std;
    float initial_squares; /* Adagrad's initial_accumulator_value (0: none) */
    int resumed;
} sg_state_source;

/* load: a path for sg_checkpoint_open, or "" for the seeded initialisation.
 * Fills shape (names, shapes, units; no values) and st (a checkpoint's
 * metadata, or a fresh run's step 0 and scaler defaults; no moments), and
 * *resumed. Errors are sg_checkpoint_open's. */
int sg_state_source_open(sg_state_source *s, const char *load, const sg_model *m, uint64_t seed,
                         sg_weights *shape, sg_train_state *st, int *resumed,
                         sg_config_warnings *warn, sg_error *err);
/* Adagrad's starting sum of squares where the moments are not resumed. */
void sg_state_source_set_initial_squares(sg_state_source *s, float v);
/* The message of the last failed fill (a checkpoint's bad tensor). */
const sg_error *sg_state_source_error(const sg_state_source *s);
void sg_state_source_close(sg_state_source *s);

#endif
