/* data_loader.c - llm.c token shards and raw text to (B, T) batches (see
 * data_loader.h). */
#define _POSIX_C_SOURCE 200809L /* mmap, glob, strdup with -std=c11 */

#include "runtime/io/data_loader.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define HEADER_BYTES (SG_DATA_HEADER_INTS * 4)

/* ------------------------------------------------------------------------ */
/* PRNG: splitmix64 seeds xoshiro256** (Blackman and Vigna, public domain
 * algorithms). Same sequence on every platform, unlike rand().            */

typedef struct rng256 {
    uint64_t s[4];
} rng256;

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void rng_seed(rng256 *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(rng256 *r)
{
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

/* Uniform in [0, n), n <= 2^32, without modulo bias (Lemire's method). */
static uint32_t rng_below(rng256 *r, uint32_t n)
{
    uint64_t m = (rng_next(r) >> 32) * (uint64_t)n;
    uint32_t lo = (uint32_t)m;
    if (lo < n) {
        uint32_t t = (uint32_t)(-n) % n;
        while (lo < t) {
            m = (rng_next(r) >> 32) * (uint64_t)n;
            lo = (uint32_t)m;
        }
    }
    return (uint32_t)(m >> 32);
}

/* ------------------------------------------------------------------------ */
/* files                                                                     */

void sg_data_opts_default(sg_data_opts *o)
{
    memset(o, 0, sizeof *o);
    o->batch = 4;
    o->seq_len = 256;
    o->vocab_size = 0;
    o->seed = 42;
    o->shuffle = 1;
    o->rank = 0;
    o->world = 1;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int32_t le32(const unsigned char *p)
{
    uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    int32_t v;
    memcpy(&v, &u, 4);
    return v;
}

static uint32_t token_at(const sg_data_file *f, uint64_t i)
{
    const unsigned char *p = f->tokens;
    switch (f->kind) {
    case SG_DATA_TEXT: return p[i];
    case SG_DATA_U16: return (uint32_t)p[2 * i] | (uint32_t)p[2 * i + 1] << 8;
    case SG_DATA_U32:
        return (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 | (uint32_t)p[4 * i + 2] << 16 |
               (uint32_t)p[4 * i + 3] << 24;
    }
    return 0;
}

static size_t token_bytes(sg_data_kind k)
{
    return k == SG_DATA_TEXT ? 1 : k == SG_DATA_U16 ? 2 : 4;
}

static int bad_token(const sg_data_file *f, uint64_t i, uint32_t tok, int64_t vocab, sg_error *err)
{
    uint64_t off = (f->kind == SG_DATA_TEXT ? 0 : HEADER_BYTES) + i * token_bytes(f->kind);
    return sg_error_set(err, SG_EINVAL,
                        "%s: token %u at position %llu (byte offset %llu) is out of the model's "
                        "vocabulary (vocab_size %lld)%s",
                        f->path, tok, (unsigned long long)i, (unsigned long long)off,
                        (long long)vocab,
                        f->kind == SG_DATA_TEXT ? "; a text file has byte tokens 0..255" : "");
}

/* Every token < vocab; skipped when the token width cannot exceed it. */
static int scan_vocab(const sg_data_file *f, int64_t vocab, sg_error *err)
{
    if (vocab <= 0)
        return SG_OK;
    uint64_t limit = f->kind == SG_DATA_TEXT ? 256 : f->kind == SG_DATA_U16 ? 65536 : 1ull << 32;
    if ((uint64_t)vocab >= limit)
        return SG_OK;
    for (uint64_t i = 0; i < f->ntokens; i++) {
        uint32_t t = token_at(f, i);
        if (t >= (uint64_t)vocab)
            return bad_token(f, i, t, vocab, err);
    }
    return SG_OK;
}

static void file_close(sg_data_file *f)
{
    sg_loss_mask_close(&f->mask);
    if (f->map)
        munmap(f->map, f->map_len);
    free(f->path);
    memset(f, 0, sizeof *f);
}

/* Validates an llm.c header (the mapping holds at least HEADER_BYTES). */
static int check_header(sg_data_file *f, uint64_t size, sg_error *err)
{
    const unsigned char *h = f->map;
    int32_t magic = le32(h), version = le32(h + 4), count = le32(h + 8);
    int want_version;
    if (magic == SG_DATA_MAGIC_U16) {
        f->kind = SG_DATA_U16;
        want_version = SG_DATA_VERSION_U16;
    } else if (magic == SG_DATA_MAGIC_U32) {
        f->kind = SG_DATA_U32;
        want_version = SG_DATA_VERSION_U32;
    } else {
        return sg_error_set(err, SG_EINVAL,
                            "%s: header[0] (magic) is %d, expected %d (uint16 tokens) or %d "
                            "(uint32 tokens): not an llm.c token shard",
                            f->path, magic, SG_DATA_MAGIC_U16, SG_DATA_MAGIC_U32);
    }
    if (version != want_version)
        return sg_error_set(err, SG_EINVAL,
                            "%s: header[1] (version) is %d, expected %d for magic %d", f->path,
                            version, want_version, magic);
    if (count <= 0)
        return sg_error_set(err, SG_EINVAL, "%s: header[2] (token count) is %d, expected > 0",
                            f->path, count);
    uint64_t need = HEADER_BYTES + (uint64_t)count * token_bytes(f->kind);
    if (need > size)
        return sg_error_set(err, SG_EINVAL,
                            "%s: header[2] (token count) is %d, which needs %llu bytes, but the "
                            "file has %llu (truncated?)",
                            f->path, count, (unsigned long long)need, (unsigned long long)size);
    if (need < size)
        return sg_error_set(err, SG_EINVAL,
                            "%s: header[2] (token count) is %d, which needs %llu bytes, but the "
                            "file has %llu (%llu bytes too many)",
                            f->path, count, (unsigned long long)need, (unsigned long long)size,
                            (unsigned long long)(size - need));
    f->ntokens = (uint64_t)count;
    f->tokens = h + HEADER_BYTES;
    return SG_OK;
}

static int file_open(sg_data_file *f, const char *path, const sg_data_opts *o, sg_error *err)
{
    memset(f, 0, sizeof *f);
    f->path = strdup(path);
    if (!f->path)
        return sg_error_set(err, SG_ENOMEM, "%s: out of memory", path);
    /* O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused
     * below as not a regular file); it changes nothing for a regular file */
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    if (fd < 0) {
        int e = errno;
        file_close(f);
        return sg_error_set(err, e == ENOENT ? SG_ENOENT : SG_EIO, "%s: %s", path, strerror(e));
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        file_close(f);
        return sg_error_set(err, SG_EIO, "%s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        file_close(f);
        return sg_error_set(err, SG_EIO, "%s: %s", path,
                            S_ISDIR(st.st_mode) ? "is a directory (give a file or a glob pattern)"
                                                : "not a regular file");
    }
    uint64_t size = (uint64_t)st.st_size;
    int is_bin = ends_with(path, ".bin");
    if (is_bin && size < HEADER_BYTES) {
        close(fd);
        file_close(f);
        return sg_error_set(err, SG_EINVAL,
                            "%s: truncated header: %llu bytes, an llm.c token shard starts "
                            "with a %d-byte header (256 int32)",
                            path, (unsigned long long)size, HEADER_BYTES);
    }
    if (size > 0) {
        f->map_len = (size_t)size;
        f->map = mmap(NULL, f->map_len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (f->map == MAP_FAILED) {
            int e = errno;
            f->map = NULL;
            close(fd);
            file_close(f);
            return sg_error_set(err, SG_EIO, "%s: cannot map the file: %s", path, strerror(e));
        }
    }
    close(fd);
    int rc = SG_OK;
    if (is_bin) {
        rc = check_header(f, size, err);
    } else {
        f->kind = SG_DATA_TEXT;
        f->ntokens = size;
        f->tokens = f->map;
    }
    uint64_t T = (uint64_t)o->seq_len;
    if (rc == SG_OK && f->ntokens < T + 1)
        rc = sg_error_set(err, SG_EINVAL,
                          "%s: %llu tokens, shorter than one window of T + 1 = %llu tokens "
                          "(sequence length %llu)",
                          path, (unsigned long long)f->ntokens, (unsigned long long)(T + 1),
                          (unsigned long long)T);
    if (rc == SG_OK)
        rc = scan_vocab(f, o->vocab_size, err);
    if (rc == SG_OK && is_bin)
        rc = sg_loss_mask_open(&f->mask, path, f->ntokens, err);
    if (rc < 0) {
        file_close(f);
        return rc;
    }
    f->nwindows = (f->ntokens - 1) / T;
    return SG_OK;
}

/* ------------------------------------------------------------------------ */
/* loader                                                                    */

static int check_opts(const sg_data_opts *o, sg_error *err)
{
    if (o->batch < 1 || o->batch > (1 << 24))
        return sg_error_set(err, SG_EINVAL, "data: batch %lld is out of range (1..%d)",
                            (long long)o->batch, 1 << 24);
    if (o->seq_len < 1 || o->seq_len > (1 << 24))
        return sg_error_set(err, SG_EINVAL, "data: sequence length %lld is out of range (1..%d)",
                            (long long)o->seq_len, 1 << 24);
    if (o->batch * o->seq_len > INT32_MAX)
        return sg_error_set(err, SG_EINVAL, "data: batch x sequence length %lld is too large",
                            (long long)(o->batch * o->seq_len));
    if (o->vocab_size < 0)
        return sg_error_set(err, SG_EINVAL, "data: vocab_size %lld < 0", (long long)o->vocab_size);
    if (o->world < 1 || o->rank < 0 || o->rank >= o->world)
        return sg_error_set(err, SG_EINVAL, "data: rank %d of world %d is out of range", o->rank,
                            o->world);
    return SG_OK;
}

void sg_data_close(sg_data_loader *dl)
{
    if (!dl)
        return;
    for (int i = 0; i < dl->nfiles; i++)
        file_close(&dl->files[i]);
    free(dl->files);
    free(dl->first_window);
    free(dl->perm);
    memset(dl, 0, sizeof *dl);
}

int sg_data_open_files(sg_data_loader *dl, const char *const *paths, int n,
                       const sg_data_opts *opts, sg_error *err)
{
    memset(dl, 0, sizeof *dl);
    int rc = check_opts(opts, err);
    if (rc < 0)
        return rc;
    if (n < 1)
        return sg_error_set(err, SG_EINVAL, "data: no files given");
    dl->opts = *opts;
    dl->files = calloc((size_t)n, sizeof *dl->files);
    dl->first_window = calloc((size_t)n + 1, sizeof *dl->first_window);
    if (!dl->files || !dl->first_window) {
        sg_data_close(dl);
        return sg_error_set(err, SG_ENOMEM, "data: out of memory");
    }
    for (int i = 0; i < n; i++) {
        rc = file_open(&dl->files[i], paths[i], opts, err);
        if (rc < 0) {
            sg_data_close(dl);
            return rc;
        }
        dl->nfiles++;
        dl->first_window[i + 1] = dl->first_window[i] + dl->files[i].nwindows;
        dl->ntokens += dl->files[i].ntokens;
    }
    dl->nwindows = dl->first_window[n];
    /* The permutation is stored as uint32: 2^32 windows of even 64 tokens
     * are 275 billion tokens, far beyond a single run here. */
    if (dl->nwindows > UINT32_MAX) {
        uint64_t nw = dl->nwindows;
        sg_data_close(dl);
        return sg_error_set(err, SG_ENOTSUP,
                            "data: %llu windows is more than %u (use a longer sequence length "
                            "or fewer shards)",
                            (unsigned long long)nw, UINT32_MAX);
    }
    if (opts->shuffle) {
        dl->perm = malloc((size_t)dl->nwindows * sizeof *dl->perm);
        if (!dl->perm) {
            sg_data_close(dl);
            return sg_error_set(err, SG_ENOMEM, "data: out of memory for %llu windows",
                                (unsigned long long)dl->nwindows);
        }
    }
    dl->pos.nwindows = dl->nwindows;
    return SG_OK;
}

static int has_glob_chars(const char *s)
{
    return strpbrk(s, "*?[") != NULL;
}

int sg_data_open(sg_data_loader *dl, const char *spec, const sg_data_opts *opts, sg_error *err)
{
    memset(dl, 0, sizeof *dl);
    if (!spec || !*spec)
        return sg_error_set(err, SG_EINVAL, "data: empty path");
    if (!has_glob_chars(spec))
        return sg_data_open_files(dl, &spec, 1, opts, err);
    glob_t g;
    memset(&g, 0, sizeof g);
    int grc = glob(spec, 0, NULL, &g);
    if (grc == GLOB_NOMATCH || (grc == 0 && g.gl_pathc == 0)) {
        globfree(&g);
        return sg_error_set(err, SG_ENOENT, "%s: no file matches this pattern", spec);
    }
    if (grc != 0) {
        globfree(&g);
        return sg_error_set(err, grc == GLOB_NOSPACE ? SG_ENOMEM : SG_EIO,
                            "%s: cannot expand the pattern", spec);
    }
    if (g.gl_pathc > (size_t)INT32_MAX) {
        globfree(&g);
        return sg_error_set(err, SG_EINVAL, "%s: too many files", spec);
    }
    int rc = sg_data_open_files(dl, (const char *const *)g.gl_pathv, (int)g.gl_pathc, opts, err);
    globfree(&g);
    return rc;
}

/* Makes dl->perm the order of epoch ep. */
static void ensure_perm(sg_data_loader *dl, uint64_t ep)
{
    if (!dl->perm || (dl->perm_valid && dl->perm_epoch == ep))
        return;
    uint32_t n = (uint32_t)dl->nwindows;
    for (uint32_t i = 0; i < n; i++)
        dl->perm[i] = i;
    rng256 r;
    rng_seed(&r, dl->opts.seed + ep);
    for (uint32_t i = n - 1; i > 0; i--) {
        uint32_t j = rng_below(&r, i + 1);
        uint32_t t = dl->perm[i];
        dl->perm[i] = dl->perm[j];
        dl->perm[j] = t;
    }
    dl->perm_epoch = ep;
    dl->perm_valid = 1;
}

uint64_t sg_data_peek_window(sg_data_loader *dl, int64_t b)
{
    uint64_t k = dl->pos.index + (uint64_t)dl->opts.rank * (uint64_t)dl->opts.batch + (uint64_t)b;
    uint64_t ep = dl->pos.epoch + k / dl->nwindows;
    k %= dl->nwindows;
    ensure_perm(dl, ep);
    return dl->perm ? dl->perm[k] : k;
}

int sg_data_next(sg_data_loader *dl, int32_t *inputs, int32_t *targets, sg_error *err)
{
    const int64_t B = dl->opts.batch, T = dl->opts.seq_len, V = dl->opts.vocab_size;
    for (int64_t b = 0; b < B; b++) {
        uint64_t w = sg_data_peek_window(dl, b);
        int lo = 0, hi = dl->nfiles - 1; /* the file holding window w */
        while (lo < hi) {
            int mid = lo + (hi - lo + 1) / 2;
            if (dl->first_window[mid] <= w)
                lo = mid;
            else
                hi = mid - 1;
        }
        const sg_data_file *f = &dl->files[lo];
        uint64_t start = (w - dl->first_window[lo]) * (uint64_t)T;
        int32_t *in = inputs ? inputs + b * T : NULL; /* row b of (B, T) */
        int32_t *tg = targets ? targets + b * T : NULL;
        for (int64_t t = 0; t <= T; t++) {
            uint32_t tok = token_at(f, start + (uint64_t)t);
            if (V > 0 && tok >= (uint64_t)V)
                return bad_token(f, start + (uint64_t)t, tok, V, err);
            if (in && t < T)
                in[t] = (int32_t)tok;
            if (tg && t > 0)
                tg[t - 1] = f->mask.bits && !f->mask.bits[start + (uint64_t)t] ? -1 : (int32_t)tok;
        }
    }
    uint64_t step = (uint64_t)B * (uint64_t)dl->opts.world;
    dl->pos.index += step;
    dl->pos.epoch += dl->pos.index / dl->nwindows;
    dl->pos.index %= dl->nwindows;
    return SG_OK;
}

int sg_data_mask_stats(const sg_data_loader *dl, uint64_t *trained, uint64_t *tokens)
{
    int n = 0;
    *trained = *tokens = 0;
    for (int i = 0; i < dl->nfiles; i++)
        if (dl->files[i].mask.bits) {
            n++;
            *trained += dl->files[i].mask.trained;
            *tokens += dl->files[i].ntokens;
        }
    return n;
}

sg_data_pos sg_data_tell(const sg_data_loader *dl)
{
    return dl->pos;
}

int sg_data_seek(sg_data_loader *dl, sg_data_pos pos, sg_error *err)
{
    if (pos.nwindows != dl->nwindows)
        return sg_error_set(err, SG_EINVAL,
                            "data: the saved position is for %llu windows, these data have %llu "
                            "(other files or another sequence length?)",
                            (unsigned long long)pos.nwindows, (unsigned long long)dl->nwindows);
    if (pos.index >= dl->nwindows)
        return sg_error_set(err, SG_EINVAL,
                            "data: saved window index %llu is out of range (%llu windows)",
                            (unsigned long long)pos.index, (unsigned long long)dl->nwindows);
    dl->pos = pos;
    return SG_OK;
}

int sg_data_default_text(char *buf, size_t size, sg_error *err)
{
    const char *named = getenv("STEPGRAPH_DEFAULT_TEXT");
    if (named && named[0]) {
        if (access(named, R_OK) != 0)
            return sg_error_set(err, SG_ENOENT, "STEPGRAPH_DEFAULT_TEXT=%s: %s", named,
                                strerror(errno));
        if (snprintf(buf, size, "%s", named) >= (int)size)
            return sg_error_set(err, SG_EINVAL, "default text path too long for the buffer");
        return SG_OK;
    }
    glob_t g;
    memset(&g, 0, sizeof g);
    int rc = glob(SG_DATA_DEFAULT_GLOB, 0, NULL, &g);
    if (rc != 0 || g.gl_pathc == 0) {
        globfree(&g);
        return sg_error_set(err, SG_ENOENT,
                            "no default training text (%s): install the Debian package %s, or "
                            "give a text file or llm.c shards with --data",
                            SG_DATA_DEFAULT_GLOB, SG_DATA_DEFAULT_PACKAGE);
    }
    /* glob sorts: the last match is the newest vim (vim90 < vim91). */
    const char *p = g.gl_pathv[g.gl_pathc - 1];
    if (snprintf(buf, size, "%s", p) >= (int)size) {
        globfree(&g);
        return sg_error_set(err, SG_EINVAL, "default text path too long for the buffer");
    }
    globfree(&g);
    return SG_OK;
}
