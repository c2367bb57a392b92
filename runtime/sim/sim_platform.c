/* sim_platform.c - SimGrid platform and bus files of a machine (sim_platform.h). */
#define _POSIX_C_SOURCE 200809L
#include "runtime/sim/sim_platform.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "common/atomic_file.h"

/* StarPU's bus matrices have STARPU_MAXNODES (32) rows and columns. */
#define BUS_NODES 32

/* A simulated worker runs a task of t seconds as t * speed flops; the
 * speed only has to be the same everywhere. */
#define HOST_SPEED "1000000000f"

typedef struct link_matrix {
    double mbs[BUS_NODES][BUS_NODES]; /* MB/s, 0 on the diagonal, NAN = no node */
    double us[BUS_NODES][BUS_NODES];
} link_matrix;

/* Memory node 0 is RAM, nodes 1..g the GPUs. */
static void fill_links(const sg_machine *m, link_matrix *lm)
{
    int n = 1 + m->gpu_count;
    for (int a = 0; a < BUS_NODES; a++)
        for (int b = 0; b < BUS_NODES; b++) {
            double bw = -1, lat = m->latency_us;
            if (a >= n || b >= n)
                bw = -1;
            else if (a == b)
                bw = 0, lat = 0;
            else if (a == 0)
                bw = m->h2d_gbs * 1e3;
            else if (b == 0)
                bw = m->d2h_gbs * 1e3;
            else
                bw = m->gpu_gpu_gbs * 1e3;
            lm->mbs[a][b] = bw;
            lm->us[a][b] = lat;
        }
}

static int write_matrix(FILE *f, const link_matrix *lm, int latency)
{
    fprintf(f, "# to 0");
    for (int b = 1; b < BUS_NODES; b++)
        fprintf(f, "\t\tto %d", b);
    fprintf(f, "\t\t\n");
    for (int a = 0; a < BUS_NODES; a++) {
        for (int b = 0; b < BUS_NODES; b++) {
            double v = latency ? lm->us[a][b] : lm->mbs[a][b];
            if (lm->mbs[a][b] < 0)
                fprintf(f, "nan");
            else
                fprintf(f, "%f", v);
            fputc(b + 1 < BUS_NODES ? '\t' : '\n', f);
        }
    }
    return ferror(f) ? SG_EIO : SG_OK;
}

static void write_link(FILE *f, const char *id, double gbs, double latency_us)
{
    fprintf(f, "   <link id=\"%s\" bandwidth=\"%.0fBps\" latency=\"%.9fs\"/>\n", id, gbs * 1e9,
            latency_us * 1e-6);
}

static int write_xml(FILE *f, const sg_machine *m)
{
    fprintf(f,
            "<?xml version='1.0'?>\n"
            "<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
            "<!-- %s, one rank: written by stepgraph from its machine model -->\n"
            "<platform version=\"4.1\">\n"
            " <config id=\"General\">\n"
            "   <prop id=\"network/TCP-gamma\" value=\"-1\"></prop>\n"
            "   <prop id=\"network/latency-factor\" value=\"1\"></prop>\n"
            "   <prop id=\"network/bandwidth-factor\" value=\"1\"></prop>\n"
            "   <prop id=\"network/weight-S\" value=\"0.0\"></prop>\n"
            "   <prop id=\"network/crosstraffic\" value=\"0\"></prop>\n"
            " </config>\n"
            " <AS id=\"AS0\" routing=\"Full\">\n"
            "   <host id=\"MAIN\" speed=\"1f\"/>\n",
            m->name);
    for (int i = 0; i < m->cpu_cores; i++)
        fprintf(f, "   <host id=\"CPU%d\" speed=\"" HOST_SPEED "\"/>\n", i);
    /* unified memory: the GPU may use all of it (the step's peak is checked
     * against the one capacity before simulating) */
    double gpu_bytes = (m->unified_memory ? m->cpu_memory_gb : m->gpu_memory_gb) * 1e9;
    for (int g = 0; g < m->gpu_count; g++)
        fprintf(f,
                "   <host id=\"CUDA%d\" speed=\"" HOST_SPEED "\">\n"
                "     <prop id=\"model\" value=\"%s\"/>\n"
                "     <prop id=\"memsize\" value=\"%.0f\"/>\n"
                "     <prop id=\"memcpy_peer\" value=\"1\"/>\n"
                "   </host>\n",
                g, m->gpu_name[0] ? m->gpu_name : "GPU", gpu_bytes);
    fprintf(f, "   <host id=\"RAM\" speed=\"1f\"/>\n");
    char id[64];
    for (int g = 0; g < m->gpu_count; g++) {
        snprintf(id, sizeof id, "RAM-CUDA%d", g);
        write_link(f, id, m->h2d_gbs, m->latency_us);
        snprintf(id, sizeof id, "CUDA%d-RAM", g);
        write_link(f, id, m->d2h_gbs, m->latency_us);
        for (int h = 0; h < m->gpu_count; h++)
            if (h != g) {
                snprintf(id, sizeof id, "CUDA%d-CUDA%d", g, h);
                write_link(f, id, m->gpu_gpu_gbs, m->latency_us);
            }
    }
    for (int g = 0; g < m->gpu_count; g++) {
        fprintf(f,
                "   <route src=\"RAM\" dst=\"CUDA%d\" symmetrical=\"NO\"><link_ctn "
                "id=\"RAM-CUDA%d\"/></route>\n",
                g, g);
        fprintf(f,
                "   <route src=\"CUDA%d\" dst=\"RAM\" symmetrical=\"NO\"><link_ctn "
                "id=\"CUDA%d-RAM\"/></route>\n",
                g, g);
        for (int h = 0; h < m->gpu_count; h++)
            if (h != g)
                fprintf(f,
                        "   <route src=\"CUDA%d\" dst=\"CUDA%d\" symmetrical=\"NO\"><link_ctn "
                        "id=\"CUDA%d-CUDA%d\"/></route>\n",
                        g, h, g, h);
    }
    fprintf(f, " </AS>\n</platform>\n");
    return ferror(f) ? SG_EIO : SG_OK;
}

/* StarPU finds the bus directory by this file's presence; SimGrid mode
 * does not read its content. */
static int write_config(FILE *f, const sg_machine *m)
{
    fprintf(f,
            "# Current configuration\n%d # Number of CPUs\n%d # Number of CUDA devices\n"
            "0 # Number of OpenCL devices\n0 # Number of MPI devices\n",
            m->cpu_cores, m->gpu_count);
    return ferror(f) ? SG_EIO : SG_OK;
}

typedef struct file_job {
    const sg_machine *m;
    const link_matrix *lm;
    int kind; /* 0 xml, 1 bandwidth, 2 latency, 3 config */
} file_job;

static int write_one(const char *path, const file_job *j, sg_error *err)
{
    sg_atomic_file af;
    int rc = sg_atomic_open(&af, path, err);
    if (rc)
        return rc;
    rc = j->kind == 0   ? write_xml(af.fp, j->m)
         : j->kind == 3 ? write_config(af.fp, j->m)
                        : write_matrix(af.fp, j->lm, j->kind == 2);
    if (rc)
        return sg_atomic_fail(&af, rc, err);
    return sg_atomic_commit(&af, err);
}

static int make_dir(const char *path, sg_error *err)
{
    if (mkdir(path, 0777) != 0 && errno != EEXIST)
        return sg_error_set(err, SG_EIO, "%s: cannot create the directory (%s)", path,
                            strerror(errno));
    return SG_OK;
}

int sg_sim_write_platform(const sg_machine *m, const char *dir, const char *host, sg_error *err)
{
    if (m->gpu_count + 1 > BUS_NODES)
        return sg_error_set(err, SG_ENOTSUP,
                            "machine %s: %d GPUs per rank (StarPU simulates at "
                            "most %d memory nodes)",
                            m->name, m->gpu_count, BUS_NODES - 1);
    link_matrix lm;
    fill_links(m, &lm);
    char path[4200];
    snprintf(path, sizeof path, "%s/bus", dir);
    int rc = make_dir(dir, err);
    if (!rc)
        rc = make_dir(path, err);
    static const char *const suffix[] = {"platform.v4.xml", "bandwidth", "latency", "config"};
    for (int k = 0; k < 4 && !rc; k++) {
        file_job j = {m, &lm, k};
        snprintf(path, sizeof path, "%s/bus/%s.%s", dir, host, suffix[k]);
        rc = write_one(path, &j, err);
    }
    return rc;
}
