/* cmd_model.c - `stepgraph model info|list`. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/model.h"
#include "runtime/cli/cli.h"

static void model_help(void)
{
    printf("usage: stepgraph model info MODEL...   dimensions and parameter counts\n"
           "       stepgraph model list            shipped models with their totals\n"
           "\n"
           "MODEL is a name from 'model list' (e.g. llama-3.1-8b), a path to a model\n"
           "JSON file, or a Hugging Face model directory (or its config.json).\n"
           "Models are looked up in %s\n"
           "(set STEPGRAPH_MODELS_DIR to use another directory).\n",
           sg_models_dir());
}

static int load_named(const char *name, sg_model *m, sg_error *err)
{
    char path[4096];
    int rc = sg_model_resolve(name, NULL, path, sizeof path, err);
    if (rc || (rc = sg_model_load(path, m, err)))
        return rc;
    if (m->hf_ignored_keys[0])
        fprintf(stderr, "stepgraph: warning: %s: keys not used by stepgraph: %s\n", path,
                m->hf_ignored_keys);
    return SG_OK;
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int model_list(sg_model *m)
{
    const char *dir = sg_models_dir();
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "stepgraph: cannot open the models directory %s\n", dir);
        return 1;
    }
    char *names[512];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 512) {
        size_t len = strlen(e->d_name);
        if (len > 5 && !strcmp(e->d_name + len - 5, ".json"))
            names[n++] = strndup(e->d_name, len - 5);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, name_cmp);
    printf("%-16s %-10s %16s %16s\n", "model", "arch", "parameters", "active");
    int bad = 0;
    for (int i = 0; i < n; i++) {
        sg_error err = {0};
        if (load_named(names[i], m, &err) == SG_OK)
            printf("%-16s %-10s %16lld %16lld\n", names[i], sg_arch_name(m->arch),
                   (long long)sg_model_total_params(m), (long long)sg_model_active_params(m));
        else {
            fprintf(stderr, "stepgraph: %s\n", err.msg);
            bad = 1;
        }
        free(names[i]);
    }
    return bad;
}

int sg_cmd_model(int argc, char **argv)
{
    if (argc < 1 || !strcmp(argv[0], "--help") || !strcmp(argv[0], "-h")) {
        model_help();
        return argc < 1 ? 2 : 0;
    }
    sg_model *m = calloc(1, sizeof *m);
    if (!m)
        return 1;
    int status = 0;
    if (!strcmp(argv[0], "list")) {
        status = model_list(m);
    } else if (!strcmp(argv[0], "info")) {
        if (argc < 2) {
            fprintf(stderr, "stepgraph: model info needs a MODEL (name or path)\n");
            status = 2;
        }
        for (int i = 1; i < argc; i++) {
            sg_error err = {0};
            char text[8192];
            if (load_named(argv[i], m, &err)) {
                fprintf(stderr, "stepgraph: %s\n", err.msg);
                status = 1;
                continue;
            }
            sg_model_format_info(m, text, sizeof text);
            fputs(text, stdout);
            if (i + 1 < argc)
                putchar('\n');
        }
    } else {
        fprintf(stderr, "stepgraph: unknown model subcommand '%s' (expected info or list)\n",
                argv[0]);
        status = 2;
    }
    free(m);
    return status;
}
