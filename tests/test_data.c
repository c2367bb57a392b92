/* test_data.c - the data loader (runtime/io/data_loader.c): llm.c shards of
 * both magics, windows and targets, shuffling (determinism, seeds, epochs),
 * exact resume, globs, data-parallel slices, text files, the default text,
 * and bad files whose messages name the file and the field.
 *
 * Files are written to a mkdtemp directory removed at the end.
 */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, nftw-free cleanup */

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/io/data_loader.h"
#include "tests/tap.h"
#include "tests/test_util.h"

static char dir[256];

static const char *tmp(const char *name)
{
    static char bufs[4][512];
    static int k;
    char *b = bufs[k++ % 4];
    snprintf(b, 512, "%s/%s", dir, name);
    return b;
}

/* llm.c shard: header (magic, version, count) then ntok tokens of width
 * bytes (2 or 4), tok[i] = f(i). count may lie about ntok. */
static void write_shard(const char *path, int32_t magic, int32_t version, int32_t count, int width,
                        uint64_t ntok, uint32_t (*f)(uint64_t, void *), void *ctx)
{
    FILE *fp = fopen(path, "wb");
    int32_t header[256] = {0};
    header[0] = magic;
    header[1] = version;
    header[2] = count;
    fwrite(header, 4, 256, fp);
    for (uint64_t i = 0; i < ntok; i++) {
        uint32_t t = f(i, ctx);
        if (width == 2) {
            uint16_t h = (uint16_t)t;
            fwrite(&h, 2, 1, fp);
        } else {
            fwrite(&t, 4, 1, fp);
        }
    }
    fclose(fp);
}

static uint32_t tok_mod(uint64_t i, void *ctx)
{
    return (uint32_t)(i % *(uint32_t *)ctx);
}

static uint32_t tok_big(uint64_t i, void *ctx)
{
    (void)ctx;
    return (uint32_t)(100000 + i);
}

/* shard s: token = s * 10000 + i (identifies shard and position) */
static uint32_t tok_shard(uint64_t i, void *ctx)
{
    return (uint32_t)(*(int *)ctx * 10000 + i);
}

static void write_bytes(const char *path, const void *p, size_t n)
{
    FILE *fp = fopen(path, "wb");
    if (n)
        fwrite(p, 1, n, fp);
    fclose(fp);
}

static void opts(sg_data_opts *o, int64_t B, int64_t T, int64_t V, uint64_t seed, int shuffle)
{
    sg_data_opts_default(o);
    o->batch = B;
    o->seq_len = T;
    o->vocab_size = V;
    o->seed = seed;
    o->shuffle = shuffle;
}

/* Row b of (inputs, targets) is window w of a stream where token i = i % mod. */
static int row_is_window(const int32_t *in, const int32_t *tg, int64_t T, uint64_t w, uint32_t mod)
{
    for (int64_t t = 0; t < T; t++) {
        uint64_t i = w * (uint64_t)T + (uint64_t)t;
        if (in[t] != (int32_t)(i % mod) || tg[t] != (int32_t)((i + 1) % mod))
            return 0;
    }
    return 1;
}

static void test_shards(void)
{
    uint32_t mod = 60000;
    write_shard(tmp("u16.bin"), SG_DATA_MAGIC_U16, 1, 1001, 2, 1001, tok_mod, &mod);
    sg_data_opts o;
    opts(&o, 4, 10, 65536, 1, 0);
    sg_data_loader dl;
    sg_error err = {0};
    int rc = sg_data_open(&dl, tmp("u16.bin"), &o, &err);
    is_int(rc, 0, "uint16 shard opens (%s)", err.msg);
    if (rc)
        return;
    is_int(dl.files[0].kind, SG_DATA_U16, "magic 20240520 read as uint16 tokens");
    is_int(dl.ntokens, 1001, "token count from header[2]");
    is_int(dl.nwindows, 100, "(1001 - 1) / 10 = 100 windows");
    int32_t in[40], tg[40];
    int good = 1;
    for (int k = 0; k < 25 && good; k++) {
        sg_data_next(&dl, in, tg, &err);
        for (int b = 0; b < 4; b++)
            good &= row_is_window(in + b * 10, tg + b * 10, 10, (uint64_t)(4 * k + b), mod);
    }
    ok(good, "unshuffled: batch k row b is window 4k+b, targets shifted by one");
    sg_data_next(&dl, in, tg, &err);
    ok(row_is_window(in, tg, 10, 0, mod) && dl.pos.epoch == 1 && dl.pos.index == 4,
       "after 100 windows the next epoch starts at window 0");
    sg_data_close(&dl);

    /* uint32 shard with values above 65535 */
    write_shard(tmp("u32.bin"), SG_DATA_MAGIC_U32, 7, 501, 4, 501, tok_big, NULL);
    opts(&o, 2, 50, 200000, 1, 0);
    rc = sg_data_open(&dl, tmp("u32.bin"), &o, &err);
    is_int(rc, 0, "uint32 shard opens (%s)", err.msg);
    if (rc)
        return;
    is_int(dl.files[0].kind, SG_DATA_U32, "magic 20240801 read as uint32 tokens");
    int32_t in2[100], tg2[100];
    sg_data_next(&dl, in2, tg2, &err);
    ok(in2[0] == 100000 && tg2[0] == 100001 && in2[50] == 100050 && tg2[99] == 100100,
       "uint32 tokens, rows at i*T, targets = next token");
    sg_data_close(&dl);
}

/* Window numbers of the next n batches. */
static void windows(sg_data_loader *dl, int n, uint64_t *out)
{
    int64_t B = dl->opts.batch;
    for (int k = 0; k < n; k++) {
        for (int64_t b = 0; b < B; b++)
            out[k * B + b] = sg_data_peek_window(dl, b);
        sg_data_next(dl, NULL, NULL, NULL);
    }
}

static void test_shuffle(void)
{
    uint32_t mod = 60000;
    sg_data_opts o;
    opts(&o, 4, 10, 0, 7, 1);
    sg_data_loader a, b, c;
    sg_error err = {0};
    int rc = sg_data_open(&a, tmp("u16.bin"), &o, &err);
    rc |= sg_data_open(&b, tmp("u16.bin"), &o, &err);
    o.seed = 8;
    rc |= sg_data_open(&c, tmp("u16.bin"), &o, &err);
    if (!ok(rc == 0, "three shuffled loaders open (%s)", err.msg))
        return;

    /* content matches the window number peeked */
    int32_t in[40], tg[40];
    uint64_t w0[4];
    for (int k = 0; k < 4; k++)
        w0[k] = sg_data_peek_window(&a, k);
    sg_data_next(&a, in, tg, &err);
    int good = 1;
    for (int k = 0; k < 4; k++)
        good &= row_is_window(in + 10 * k, tg + 10 * k, 10, w0[k], mod);
    ok(good, "shuffled rows hold the windows they claim");
    sg_data_next(&b, NULL, NULL, &err);

    /* 3 epochs: 75 batches of 4 windows */
    static uint64_t wa[300], wb[300], wc[300];
    windows(&a, 75, wa);
    windows(&b, 75, wb);
    sg_data_next(&c, NULL, NULL, &err);
    windows(&c, 75, wc);
    ok(memcmp(wa, wb, sizeof wa) == 0, "same seed: same order over 3 epochs");
    ok(memcmp(wa, wc, sizeof wa) != 0, "another seed: another order");
    /* a's first batch took epoch-0 windows 0..3, so wa[96..] starts epoch 1
     * at its 4th window: check each epoch is a permutation instead. */
    sg_data_loader d;
    opts(&o, 5, 10, 0, 7, 1);
    sg_data_open(&d, tmp("u16.bin"), &o, &err);
    static uint64_t wd[200];
    windows(&d, 40, wd);
    int perm_ok = 1;
    for (int e = 0; e < 2; e++) {
        int seen[100] = {0};
        for (int i = 0; i < 100; i++)
            if (wd[100 * e + i] >= 100 || seen[wd[100 * e + i]]++)
                perm_ok = 0;
    }
    ok(perm_ok, "each epoch visits every window exactly once");
    ok(memcmp(wd, wd + 100, 100 * sizeof *wd) != 0, "epoch 1 is reshuffled (seed + epoch)");
    int identity = 1;
    for (int i = 0; i < 100; i++)
        identity &= wd[i] == (uint64_t)i;
    ok(!identity, "the shuffled order is not the file order");
    sg_data_close(&d);

    /* exact resume */
    sg_data_pos pos = sg_data_tell(&a);
    static uint64_t after_a[80], after_r[80];
    windows(&a, 20, after_a);
    sg_data_loader r;
    opts(&o, 4, 10, 0, 7, 1);
    sg_data_open(&r, tmp("u16.bin"), &o, &err);
    rc = sg_data_seek(&r, pos, &err);
    is_int(rc, 0, "seek to a saved position (%s)", err.msg);
    windows(&r, 20, after_r);
    ok(memcmp(after_a, after_r, sizeof after_a) == 0,
       "resumed loader returns the same next 20 batches (epoch %llu, index %llu)",
       (unsigned long long)pos.epoch, (unsigned long long)pos.index);
    sg_data_close(&r);

    /* resume check with batch contents, across an epoch boundary */
    sg_data_loader s1, s2;
    sg_data_open(&s1, tmp("u16.bin"), &o, &err);
    for (int k = 0; k < 23; k++)
        sg_data_next(&s1, NULL, NULL, &err);
    sg_data_pos p = sg_data_tell(&s1);
    sg_data_open(&s2, tmp("u16.bin"), &o, &err);
    sg_data_seek(&s2, p, &err);
    int same = 1;
    for (int k = 0; k < 6; k++) {
        int32_t i1[40], t1[40], i2[40], t2[40];
        sg_data_next(&s1, i1, t1, &err);
        sg_data_next(&s2, i2, t2, &err);
        same &= !memcmp(i1, i2, sizeof i1) && !memcmp(t1, t2, sizeof t1);
    }
    ok(same && s1.pos.epoch == 1, "resumed batches identical across the epoch boundary");
    sg_data_pos bad = p;
    bad.nwindows = 99;
    rc = sg_data_seek(&s2, bad, &err);
    ok(rc == SG_EINVAL, "a position saved for other data is refused");
    like(err.msg, "99 windows", "  message gives the saved window count");
    sg_data_close(&s1);
    sg_data_close(&s2);
    sg_data_close(&a);
    sg_data_close(&b);
    sg_data_close(&c);
}

static void test_glob_and_ranks(void)
{
    mkdir(tmp("shards"), 0700);
    for (int s = 0; s < 3; s++) {
        char name[64];
        snprintf(name, sizeof name, "shards/train_%d.bin", s);
        /* 3 shards of 9*8+1+s tokens: 9 windows each (the extra s tokens are
         * not enough for a 10th) */
        write_shard(tmp(name), SG_DATA_MAGIC_U32, 7, 73 + s, 4, (uint64_t)(73 + s), tok_shard, &s);
    }
    sg_data_opts o;
    opts(&o, 3, 8, 0, 5, 1);
    sg_data_loader dl;
    sg_error err = {0};
    int rc = sg_data_open(&dl, tmp("shards/train_*.bin"), &o, &err);
    is_int(rc, 0, "glob pattern opens 3 shards (%s)", err.msg);
    if (rc)
        return;
    ok(dl.nfiles == 3 && dl.nwindows == 27, "3 shards x 9 windows");
    int good = 1;
    for (int k = 0; k < 18; k++) {
        int32_t in[24], tg[24];
        sg_data_next(&dl, in, tg, &err);
        for (int b = 0; b < 3; b++) {
            int32_t first = in[b * 8];
            int shard = first / 10000, pos = first % 10000;
            good &= pos % 8 == 0; /* starts at i*T of its shard */
            for (int t = 0; t < 8; t++)
                good &= in[b * 8 + t] == shard * 10000 + pos + t &&
                        tg[b * 8 + t] == shard * 10000 + pos + t + 1;
        }
    }
    ok(good, "windows start at i*T of their shard and never cross a shard boundary");
    sg_data_close(&dl);

    /* two ranks of world 2 read the two halves of a world-1 batch of 2B */
    sg_data_loader one, r0, r1;
    opts(&o, 6, 8, 0, 5, 1);
    sg_data_open(&one, tmp("shards/train_*.bin"), &o, &err);
    opts(&o, 3, 8, 0, 5, 1);
    o.world = 2;
    o.rank = 0;
    sg_data_open(&r0, tmp("shards/train_*.bin"), &o, &err);
    o.rank = 1;
    sg_data_open(&r1, tmp("shards/train_*.bin"), &o, &err);
    int split = 1;
    for (int k = 0; k < 12; k++) {
        int32_t a[48], b0[24], b1[24];
        sg_data_next(&one, a, NULL, &err);
        sg_data_next(&r0, b0, NULL, &err);
        sg_data_next(&r1, b1, NULL, &err);
        split &= !memcmp(a, b0, sizeof b0) && !memcmp(a + 24, b1, sizeof b1);
    }
    ok(split, "data-parallel ranks read consecutive slices of the global batch");
    sg_data_close(&one);
    sg_data_close(&r0);
    sg_data_close(&r1);

    /* explicit list, text and token shards mixed */
    const char *text = "It was the best of times, it was the worst of times.";
    write_bytes(tmp("dickens.txt"), text, strlen(text));
    const char *list[2] = {tmp("dickens.txt"), tmp("shards/train_0.bin")};
    opts(&o, 1, 8, 0, 0, 0);
    rc = sg_data_open_files(&dl, list, 2, &o, &err);
    is_int(rc, 0, "a list of a text file and a shard opens (%s)", err.msg);
    if (rc == 0) {
        int32_t in[8], tg[8];
        sg_data_next(&dl, in, tg, &err);
        ok(in[0] == 'I' && in[1] == 't' && tg[0] == 't' && tg[7] == 'h',
           "text file: bytes are tokens");
        ok(dl.files[0].nwindows == (strlen(text) - 1) / 8 && dl.nwindows == 6 + 9,
           "text windows counted like token windows");
        sg_data_close(&dl);
    }
}

static void test_default_text(void)
{
    char path[1024];
    sg_error err = {0};
    int rc = sg_data_default_text(path, sizeof path, &err);
    if (rc != 0) {
        like(err.msg, SG_DATA_DEFAULT_PACKAGE, "missing default text: message names the package");
        tap_skip(2, "default training text not installed");
        return;
    }
    tap_diag("default text: %s", path);
    sg_data_opts o;
    opts(&o, 4, 256, 256, 42, 1);
    sg_data_loader dl;
    rc = sg_data_open(&dl, path, &o, &err);
    is_int(rc, 0, "default text opens with vocab 256 (%s)", err.msg);
    ok(rc == 0 && dl.ntokens >= 1000000, "default text has >= 1 MB (%llu bytes)",
       rc == 0 ? (unsigned long long)dl.ntokens : 0ull);
    int32_t in[4 * 256], tg[4 * 256];
    int letters = 0;
    if (rc == 0 && sg_data_next(&dl, in, tg, &err) == 0)
        for (int i = 0; i < 4 * 256; i++)
            letters += (in[i] >= 'a' && in[i] <= 'z') || in[i] == ' ';
    ok(letters > 4 * 256 / 2, "default text is mostly lower-case letters and spaces (%d of %d)",
       letters, 4 * 256);
    if (rc == 0)
        sg_data_close(&dl);
}

/* STEPGRAPH_DEFAULT_TEXT names the default text (a machine without
 * vim-runtime); a file that cannot be read is an error naming it. */
static void test_default_text_env(void)
{
    char path[1024];
    sg_error err = {0};
    const char *named = tmp("default.txt");
    write_bytes(named, "hello", 5);
    setenv("STEPGRAPH_DEFAULT_TEXT", named, 1);
    int rc = sg_data_default_text(path, sizeof path, &err);
    ok(rc == 0 && strcmp(path, named) == 0, "STEPGRAPH_DEFAULT_TEXT is the default text (%s)",
       rc == 0 ? path : err.msg);
    setenv("STEPGRAPH_DEFAULT_TEXT", tmp("absent.txt"), 1);
    memset(&err, 0, sizeof err);
    rc = sg_data_default_text(path, sizeof path, &err);
    ok(rc == SG_ENOENT && strstr(err.msg, "STEPGRAPH_DEFAULT_TEXT=") &&
           strstr(err.msg, "absent.txt") && strstr(err.msg, "No such file"),
       "an unreadable STEPGRAPH_DEFAULT_TEXT is an error naming it (%s)", err.msg);
    unsetenv("STEPGRAPH_DEFAULT_TEXT");
}

/* Opens path with B 2, T 8, vocab V and expects code and substrings. */
static void expect_bad(const char *path, int64_t V, int code, const char *sub, const char *what)
{
    sg_data_opts o;
    opts(&o, 2, 8, V, 1, 1);
    sg_data_loader dl;
    sg_error err = {0};
    int rc = sg_data_open(&dl, path, &o, &err);
    if (rc == 0)
        sg_data_close(&dl);
    /* the message names the file (a pattern's message names the match) */
    const char *name = strchr(path, '*') ? sub : path;
    ok(rc == code && strstr(err.msg, sub) && strstr(err.msg, name), "%s: %s", what, err.msg);
    if (rc != code || !strstr(err.msg, sub) || !strstr(err.msg, name))
        tap_diag("  got %d \"%s\", expected %d with \"%s\" and the path", rc, err.msg, code, sub);
}

static void test_bad_files(void)
{
    uint32_t mod = 500;
    write_shard(tmp("magic.bin"), 20240521, 1, 100, 2, 100, tok_mod, &mod);
    expect_bad(tmp("magic.bin"), 0, SG_EINVAL, "header[0] (magic) is 20240521", "bad magic");
    write_shard(tmp("version.bin"), SG_DATA_MAGIC_U16, 2, 100, 2, 100, tok_mod, &mod);
    expect_bad(tmp("version.bin"), 0, SG_EINVAL, "header[1] (version) is 2, expected 1",
               "bad version");
    write_shard(tmp("version7.bin"), SG_DATA_MAGIC_U32, 1, 100, 4, 100, tok_mod, &mod);
    expect_bad(tmp("version7.bin"), 0, SG_EINVAL, "header[1] (version) is 1, expected 7",
               "uint32 shard with version 1");
    char junk[100] = {0};
    write_bytes(tmp("short.bin"), junk, sizeof junk);
    expect_bad(tmp("short.bin"), 0, SG_EINVAL, "truncated header: 100 bytes", "truncated header");
    write_shard(tmp("count.bin"), SG_DATA_MAGIC_U16, 1, 1000, 2, 100, tok_mod, &mod);
    expect_bad(tmp("count.bin"), 0, SG_EINVAL, "header[2] (token count) is 1000, which needs 3024",
               "token count larger than the file");
    write_shard(tmp("extra.bin"), SG_DATA_MAGIC_U16, 1, 90, 2, 100, tok_mod, &mod);
    expect_bad(tmp("extra.bin"), 0, SG_EINVAL, "20 bytes too many", "file longer than its count");
    write_shard(tmp("zero.bin"), SG_DATA_MAGIC_U16, 1, 0, 2, 0, tok_mod, &mod);
    expect_bad(tmp("zero.bin"), 0, SG_EINVAL, "header[2] (token count) is 0", "zero tokens");
    write_shard(tmp("vocab.bin"), SG_DATA_MAGIC_U16, 1, 100, 2, 100, tok_mod, &mod);
    expect_bad(tmp("vocab.bin"), 64, SG_EINVAL, "token 64 at position 64 (byte offset 1152)",
               "token >= vocab_size names the position");
    write_shard(tmp("window.bin"), SG_DATA_MAGIC_U16, 1, 8, 2, 8, tok_mod, &mod);
    expect_bad(tmp("window.bin"), 0, SG_EINVAL, "8 tokens, shorter than one window of T + 1 = 9",
               "shard shorter than one window");
    write_bytes(tmp("tiny.txt"), "abcdefgh", 8);
    expect_bad(tmp("tiny.txt"), 0, SG_EINVAL, "shorter than one window",
               "text shorter than a window");
    write_bytes(tmp("empty.txt"), "", 0);
    expect_bad(tmp("empty.txt"), 0, SG_EINVAL, "0 tokens", "empty text file");
    write_bytes(tmp("latin1.txt"), "caf\xe9 au lait, s'il vous pla\xeet", 29);
    expect_bad(tmp("latin1.txt"), 128, SG_EINVAL, "token 233 at position 3",
               "text byte >= vocab_size");
    expect_bad(tmp("nonexistent.bin"), 0, SG_ENOENT, "No such file", "missing file");
    expect_bad(tmp("shards"), 0, SG_EIO, "is a directory", "a directory");
    expect_bad(tmp("nothing_*.bin"), 0, SG_ENOENT, "no file matches", "glob without a match");

    /* one bad shard among good ones is named */
    write_shard(tmp("shards/train_9.bin"), 20240520, 1, 500, 2, 400, tok_mod, &mod);
    expect_bad(tmp("shards/train_*.bin"), 0, SG_EINVAL, "train_9.bin: header[2]",
               "a glob reports the bad shard by name");
    unlink(tmp("shards/train_9.bin"));

    sg_data_opts o;
    opts(&o, 0, 8, 0, 1, 1);
    sg_data_loader dl;
    sg_error err = {0};
    int rc = sg_data_open(&dl, tmp("u16.bin"), &o, &err);
    ok(rc == SG_EINVAL && strstr(err.msg, "batch 0"), "batch 0 is refused (%s)", err.msg);
}

int main(void)
{
    if (make_test_dir(dir, sizeof dir, "sg-test-data"))
        return tap_plan_skip_all("cannot create a temporary directory");
    test_shards();
    test_shuffle();
    test_glob_and_ranks();
    test_default_text();
    test_default_text_env();
    test_bad_files();
    rm_tree(dir);
    return tap_done();
}
