/* render_svg.c - DOT to SVG through Graphviz's `dot`, written atomically. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/atomic_file.h"
#include "runtime/cli/cli.h"

int sg_render_svg(const char *dot_path, const char *svg_path, sg_error *err)
{
    sg_atomic_file f;
    int rc = sg_atomic_open(&f, svg_path, err);
    if (rc)
        return rc;
    fflush(f.fp);
    pid_t pid = fork();
    if (pid < 0) {
        sg_atomic_abort(&f);
        return sg_error_set(err, SG_EIO, "cannot start Graphviz: %s", strerror(errno));
    }
    if (pid == 0) {
        /* child: dot writes the SVG into the temporary file */
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
