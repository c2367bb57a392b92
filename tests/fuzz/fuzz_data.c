/* fuzz_data.c - an llm.c token shard (sg_data_open on a .bin file), read
 * with a few batch shapes: batches, tell, seek. */
#include "tests/fuzz/fuzz_util.h"

#include "runtime/io/data_loader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[300];
    fuzz_write("shard.bin", data, size, path);
    /* B, T, vocab, shuffle, rank, world */
    static const int64_t shapes[][6] = {
        {1, 1, 0, 0, 0, 1},
        {2, 3, 256, 1, 1, 2},
        {3, 7, 50257, 1, 0, 1},
    };
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        sg_data_opts o;
        sg_data_opts_default(&o);
        o.batch = shapes[k][0];
        o.seq_len = shapes[k][1];
        o.vocab_size = shapes[k][2];
        o.shuffle = (int)shapes[k][3];
        o.rank = (int)shapes[k][4];
        o.world = (int)shapes[k][5];
        sg_data_loader dl;
        sg_error err = {0};
        if (sg_data_open(&dl, path, &o, &err) != SG_OK)
            continue;
        int32_t in[64], tg[64];
        sg_data_pos start = sg_data_tell(&dl);
        for (int s = 0; s < 4; s++)
            if (sg_data_next(&dl, in, tg, &err) != SG_OK)
                abort(); /* the file did not change: no error possible */
        sg_data_peek_window(&dl, 0);
        if (sg_data_seek(&dl, start, &err) != SG_OK)
            abort();
        sg_data_next(&dl, NULL, tg, &err);
        sg_data_close(&dl);
    }
    return 0;
}
