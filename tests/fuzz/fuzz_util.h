/* fuzz_util.h - helpers shared by the libFuzzer targets of tests/fuzz/.
 *
 * The loaders under test read files (mmap, size checks), so most targets
 * write the input to a file in a per-process temporary directory and call
 * the loader on it: the code path is exactly the one `stepgraph` takes.
 * The directory is $SG_FUZZ_TMPDIR, else /dev/shm, else $TMPDIR or /tmp.
 */
#ifndef SG_FUZZ_UTIL_H
#define SG_FUZZ_UTIL_H
#define _POSIX_C_SOURCE 200809L

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/model.h"

/* The process's scratch directory, made on first use, removed at exit. */
static char fuzz_dir[256];

__attribute__((unused)) static void fuzz_cleanup(void)
{
    if (fuzz_dir[0]) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", fuzz_dir);
        if (system(cmd) != 0)
            fprintf(stderr, "fuzz: could not remove %s\n", fuzz_dir);
    }
}

__attribute__((unused)) static const char *fuzz_tmpdir(void)
{
    if (!fuzz_dir[0]) {
        /* tmpfs when there is one: on a disk, creating a file per input
         * costs milliseconds and the fuzzer runs 10x slower */
        const char *t = getenv("SG_FUZZ_TMPDIR");
        if (!t || !*t)
            t = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
        snprintf(fuzz_dir, sizeof fuzz_dir, "%s/sgfuzz.XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(fuzz_dir))
            abort();
        atexit(fuzz_cleanup);
    }
    return fuzz_dir;
}

/* Writes data to <tmpdir>/name; the full path goes to path (size >= 300). */
__attribute__((unused)) static void fuzz_write(const char *name, const void *data, size_t size,
                                               char *path)
{
    snprintf(path, 300, "%s/%s", fuzz_tmpdir(), name);
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0)
        abort();
}

/* NUL-terminated copy of the input (for the text entry points). */
__attribute__((unused)) static char *fuzz_strdup(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        abort();
    memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

/* A micro Llama (one layer, tied embeddings) for the weights and training
 * state targets: small enough that a valid file is a few kilobytes. The seed
 * files in corpus/weights and corpus/train_state were written for it by
 * tests/fuzz/gen_seeds.c. */
static const char fuzz_micro_model[] =
    "{\"name\": \"micro-llama\", \"architecture\": \"llama\", \"hidden_size\": 8,"
    " \"intermediate_size\": 16, \"num_hidden_layers\": 1, \"num_attention_heads\": 2,"
    " \"num_key_value_heads\": 1, \"head_dim\": 4, \"vocab_size\": 16,"
    " \"max_position_embeddings\": 64, \"tie_word_embeddings\": true,"
    " \"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0}";

/* The micro Llama, parsed once. */
__attribute__((unused)) static const sg_model *fuzz_micro(void)
{
    static sg_model *m;
    sg_error err = {0};
    if (!m) {
        m = calloc(1, sizeof *m);
        if (!m || sg_model_parse(fuzz_micro_model, "micro", m, &err) != SG_OK)
            abort();
    }
    return m;
}

#endif /* SG_FUZZ_UTIL_H */
