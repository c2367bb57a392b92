/* render_svg.c - DOT to SVG through Graphviz's `dot`, written atomically. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <signal.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <sys/wait.h>
#include <unistd.h>

#include "common/atomic_file.h"
#include "common/cleanup.h"
#include "graph/export.h"
#include "runtime/cli/cli.h"

int sg_render_svg(const char *dot_path, const char *svg_path, sg_error *err)
{
    sg_atomic_file f;
    int rc = sg_atomic_open(&f, svg_path, err);
    if (rc)
        return rc;
    fflush(f.fp);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        sg_atomic_abort(&f);
        return sg_error_set(err, SG_EIO, "cannot start Graphviz: %s", strerror(errno));
    }
    if (pid == 0) {
        /* child: dot writes the SVG into the temporary file; it ends with
         * stepgraph (a killed graph command leaves no layout running) */
#ifdef __linux__
        if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != parent)
            _exit(126);
#else
        (void)parent;
#endif
        if (dup2(fileno(f.fp), STDOUT_FILENO) < 0)
            _exit(126);
        execlp("dot", "dot", "-Tsvg", dot_path, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        sg_atomic_abort(&f);
        if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
            return sg_error_set(err, SG_ENOTSUP,
                                "Graphviz 'dot' was not found (install the graphviz package)");
        return sg_error_set(err, SG_EIO, "Graphviz 'dot' failed on %s (status %d)", dot_path,
                            WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    }
    return sg_atomic_commit(&f, err);
}

int sg_render_graph_svg(const sg_graph *g, const sg_dot_style *style, const char *path,
                        sg_error *err)
{
    char dot_path[4096];
    if (snprintf(dot_path, sizeof dot_path, "%s.dot.XXXXXX", path) >= (int)sizeof dot_path)
        return sg_error_set(err, SG_EINVAL, "%s: path too long", path);
    int fd = mkstemp(dot_path);
    if (fd < 0)
        return sg_error_set(err, SG_EIO, "%s: cannot create a temporary file beside it: %s", path,
                            strerror(errno));
    int slot = sg_cleanup_add(dot_path);
    FILE *f = fdopen(fd, "w");
    errno = 0;
    int rc = f ? sg_export_dot_styled(g, style, f) : SG_EIO;
    int e = errno;
    if (f && fclose(f) != 0) {
        rc = SG_EIO;
        e = e ? e : errno;
    }
    if (rc)
        rc = sg_error_set(err, rc, "%s: cannot write its DOT file %s: %s", path, dot_path,
                          e ? strerror(e) : "write error");
    else
        rc = sg_render_svg(dot_path, path, err);
    unlink(dot_path);
    sg_cleanup_forget(slot);
    return rc;
}
