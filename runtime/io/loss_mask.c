/* loss_mask.c - the loss mask side file of a token shard (loss_mask.h). */
#define _POSIX_C_SOURCE 200809L /* mmap with -std=c11 */

#include "runtime/io/loss_mask.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MASK_HEADER_BYTES (256 * 4)

static int32_t le32(const unsigned char *p)
{
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24);
}

void sg_loss_mask_close(sg_loss_mask *m)
{
    if (m->map)
        munmap(m->map, m->map_len);
    memset(m, 0, sizeof *m);
}

/* The header and the bytes, once mapped. */
static int check(sg_loss_mask *m, const char *path, uint64_t ntokens, sg_error *err)
{
    const unsigned char *h = m->map;
    if (m->map_len < MASK_HEADER_BYTES)
        return sg_error_set(err, SG_EINVAL, "%s: %zu bytes, shorter than the %d-byte header", path,
                            m->map_len, MASK_HEADER_BYTES);
    int32_t magic = le32(h), version = le32(h + 4), count = le32(h + 8);
    if (magic != SG_LOSS_MASK_MAGIC)
        return sg_error_set(err, SG_EINVAL,
                            "%s: header[0] (magic) is %d, expected %d: not a "
                            "loss mask",
                            path, magic, SG_LOSS_MASK_MAGIC);
    if (version != SG_LOSS_MASK_VERSION)
        return sg_error_set(err, SG_EINVAL, "%s: header[1] (version) is %d, expected %d", path,
                            version, SG_LOSS_MASK_VERSION);
    if (count < 0 || (uint64_t)count != ntokens)
        return sg_error_set(err, SG_EINVAL,
                            "%s: header[2] (token count) is %d, but its shard "
                            "has %llu tokens",
                            path, count, (unsigned long long)ntokens);
    if (m->map_len != MASK_HEADER_BYTES + ntokens)
        return sg_error_set(err, SG_EINVAL,
                            "%s: %zu bytes, expected %llu (header and one byte "
                            "per token)",
                            path, m->map_len, (unsigned long long)(MASK_HEADER_BYTES + ntokens));
    m->bits = h + MASK_HEADER_BYTES;
    for (uint64_t i = 0; i < ntokens; i++) {
        if (m->bits[i] > 1)
            return sg_error_set(err, SG_EINVAL, "%s: token %llu has mask %u, expected 0 or 1", path,
                                (unsigned long long)i, m->bits[i]);
        m->trained += m->bits[i];
    }
    return SG_OK;
}

int sg_loss_mask_open(sg_loss_mask *m, const char *shard_path, uint64_t ntokens, sg_error *err)
{
    memset(m, 0, sizeof *m);
    char path[4096];
    if (snprintf(path, sizeof path, "%s%s", shard_path, SG_LOSS_MASK_SUFFIX) >= (int)sizeof path)
        return sg_error_set(err, SG_EINVAL, "%s: path too long", shard_path);
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    if (fd < 0)
        return errno == ENOENT ? SG_OK : sg_error_set(err, SG_EIO, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return sg_error_set(err, SG_EIO, "%s: not a readable regular file", path);
    }
    m->map_len = (size_t)st.st_size;
    m->map = m->map_len ? mmap(NULL, m->map_len, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    close(fd);
    if (m->map == MAP_FAILED) {
        m->map = NULL;
        return sg_error_set(err, SG_EIO, "%s: cannot map the file", path);
    }
    if (!m->map)
        return sg_error_set(err, SG_EINVAL, "%s: empty file", path);
    int rc = check(m, path, ntokens, err);
    if (rc)
        sg_loss_mask_close(m);
    return rc;
}
