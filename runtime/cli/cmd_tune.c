/* cmd_tune.c - `stepgraph tune`: every combination of machines, policies,
 * priority settings and varied config knobs, simulated (sim_client.h), then
 * reported (tune_report.h). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "common/atomic_file.h"
#include "common/clock.h"
#include "runtime/cli/cli.h"
#include "runtime/sim/sim_client.h"
#include "runtime/tune/tune_report.h"

#define MAX_LIST 32
#define MAX_VALUES 64

static void tune_help(void)
{
    printf("usage: stepgraph tune CONFIG [--machines M1,M2] [--sched P1,P2,...]\n"
           "                      [--vary KEY=LO:HI:STEP | --vary KEY=V1,V2,...]...\n"
           "                      [--priorities both|on|off] [--out PREFIX] [--jobs N]\n"
           "                      [--steps N] [--cost history|fitted] [--set KEY=VALUE]...\n"
           "                      [run options]\n"
           "\n"
           "Simulates CONFIG's step graph (see `stepgraph simulate --help`) for every\n"
           "combination of machine, StarPU policy, priority setting and varied knob, then\n"
           "writes PREFIX.csv, PREFIX.md (every point, the best setting per machine, and\n"
           "what graph-aware priorities change) and PREFIX.svg (step time against each\n"
           "varied knob, one line per policy, one panel per machine), and prints the\n"
           "Markdown. A point whose peak memory exceeds the machine's is marked\n"
           "infeasible, with the numbers, and not simulated. A simulation that fails is\n"
           "marked failed with its message; the exit status is 1 when every one failed,\n"
           "0 with a warning when some did.\n"
           "\n"
           "  --machines LIST    machine models (default gh200,mi300a)\n"
           "  --sched LIST       policies (default eager,lws,dmda,dmdas,heteroprio)\n"
           "  --vary KEY=SPEC    a DeepSpeed key (dotted, e.g. offload_optimizer.ratio,\n"
           "                     zero_optimization.sub_group_size) or a run option\n"
           "                     (max_length, optimizer_tile, lookahead...): LO:HI:STEP\n"
           "                     (inclusive) or a list of numbers or of words\n"
           "                     (cast_placement=cpu,gpu,auto; optimizer_tile=auto,0); up\n"
           "                     to %d\n"
           "  --priorities MODE  both (default): priority-aware policies (dmdas, prio,\n"
           "                     heteroprio...) with and without bottom-level priorities;\n"
           "                     on / off: one setting for all\n"
           "  -o, --out PREFIX   output files (default tune)\n"
           "  -j, --jobs N       simulations at once, 1 to 256 (default: the CPU count)\n"
           "  --steps N          steps per simulation, 1 to 100 (default 3, the last\n"
           "                     reported)\n"
           "  --cost C           on calibrated machines: history (default: StarPU's\n"
           "                     recorded task times) or fitted (per-device fits of the\n"
           "                     calibration's node times: sizes it did not run, e.g. a\n"
           "                     larger model; see `stepgraph simulate --help`)\n"
           "\n",
           SG_TUNE_MAX_VARY);
    static const char *const own[] = {"steps"}; /* this command has its own --steps */
    sg_cli_print_run_flags_except(own, 1);
}

/* Splits "a,b,c" into at most max pieces (pointers into the copy). */
static int split_list(char *copy, const char **out, int max)
{
    int n = 0;
    for (char *save = NULL, *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save))
        if (*t && n < max)
            out[n++] = t;
    return n;
}

typedef struct knob {
    char key[64];
    int is_run_option;         /* passed as --key value, else --set key=value */
    double values[MAX_VALUES]; /* numbers, or for a word knob the words' indices */
    int nvalues;
    int nwords; /* > 0: the values are words (cast_placement=cpu,gpu) */
    char words[SG_TUNE_MAX_WORDS][24];
} knob;

static int parse_vary(const char *spec, knob *k, sg_error *err)
{
    const char *eq = strchr(spec, '=');
    if (!eq || eq == spec || (size_t)(eq - spec) >= sizeof k->key)
        return sg_error_set(err, SG_EINVAL, "--vary %s: expected KEY=LO:HI:STEP or KEY=V1,V2",
                            spec);
    snprintf(k->key, sizeof k->key, "%.*s", (int)(eq - spec), spec);
    const char *v = eq + 1;
    double lo, hi, step;
    char tail;
    if (sscanf(v, "%lf:%lf:%lf%c", &lo, &hi, &step, &tail) == 3) {
        if (!(step > 0) || hi < lo)
            return sg_error_set(err, SG_EINVAL, "--vary %s: need LO <= HI and STEP > 0", spec);
        k->nvalues = 0;
        for (int i = 0; lo + i * step <= hi + step * 1e-9; i++) {
            if (k->nvalues == MAX_VALUES)
                return sg_error_set(err, SG_EINVAL, "--vary %s: more than %d values", spec,
                                    MAX_VALUES);
            /* rounded so that 0.1 steps print as 0.7, not 0.7000000000000001 */
            k->values[k->nvalues++] = round((lo + i * step) * 1e9) / 1e9;
        }
        return SG_OK;
    }
    char copy[1024];
    snprintf(copy, sizeof copy, "%s", v);
    const char *items[MAX_VALUES];
    int n = split_list(copy, items, MAX_VALUES);
    /* numbers, or else words (a run option such as cast_placement, or "auto") */
    int words = 0;
    for (int i = 0; i < n; i++) {
        char *end;
        strtod(items[i], &end);
        words |= *end || end == items[i];
    }
    if (words && n > SG_TUNE_MAX_WORDS)
        return sg_error_set(err, SG_EINVAL, "--vary %s: more than %d words", spec,
                            SG_TUNE_MAX_WORDS);
    for (int i = 0; i < n; i++) {
        if (words) {
            if (!items[i][0] || strlen(items[i]) >= sizeof k->words[i])
                return sg_error_set(err, SG_EINVAL,
                                    "--vary %s: \"%s\": a value of 1 to %zu "
                                    "characters",
                                    spec, items[i], sizeof k->words[i] - 1);
            snprintf(k->words[i], sizeof k->words[i], "%s", items[i]);
            k->values[i] = i;
        } else {
            k->values[i] = strtod(items[i], NULL);
        }
    }
    k->nwords = words ? n : 0;
    k->nvalues = n;
    if (!n)
        return sg_error_set(err, SG_EINVAL, "--vary %s: no values", spec);
    return SG_OK;
}

/* Run options are set as flags; DeepSpeed keys through --set. */
static void classify_knob(knob *k)
{
    sg_run_options scratch;
    sg_error ignored = {0};
    sg_run_options_defaults(&scratch);
    char value[32];
    if (k->nwords)
        snprintf(value, sizeof value, "%s", k->words[0]);
    else
        snprintf(value, sizeof value, "%.10g", k->values[0]);
    k->is_run_option =
        !strchr(k->key, '.') && sg_run_option_set(&scratch, k->key, value, &ignored) == SG_OK;
}

/* A DeepSpeed knob must name a key the config reader knows: a typo would
 * otherwise vary nothing, the simulations only warning about it. The config
 * is loaded once more with the knob's first value (as a point passes it); an
 * unknown-key warning naming the key, or an error, refuses the --vary. */
static int check_ds_knob(const knob *k, char **rest, int nrest, const sg_cli_opt *opts, int nopts,
                         sg_error *err)
{
    char set[160], needle[96];
    if (k->nwords)
        snprintf(set, sizeof set, "%s=%s", k->key, k->words[0]);
    else
        snprintf(set, sizeof set, "%s=%.10g", k->key, k->values[0]);
    snprintf(needle, sizeof needle, "unknown key %s ", k->key);
    char **args = calloc((size_t)nrest + 3, sizeof *args);
    sg_config *c = calloc(1, sizeof *c);
    int rc = (!args || !c) ? sg_error_set(err, SG_ENOMEM, "out of memory") : SG_OK;
    if (!rc) {
        for (int i = 0; i < nrest; i++)
            args[i] = rest[i];
        args[nrest] = "--set";
        args[nrest + 1] = set;
        if ((rc = sg_cli_load_config_ex(nrest + 2, args, opts, nopts, c, 0, err)))
            sg_error_prefix(err, "--vary %s: ", k->key);
    }
    for (int w = 0; !rc && w < c->warnings.count; w++)
        if (strstr(c->warnings.msg[w], needle))
            rc = sg_error_set(err, SG_EINVAL, "--vary %s: not a key stepgraph reads (%s)", k->key,
                              c->warnings.msg[w]);
    free(args);
    free(c);
    return rc;
}

static int priority_aware(const char *sched)
{
    return strstr(sched, "prio") || !strncmp(sched, "dmdas", 5);
}

typedef struct tune_run {
    sg_tune_set set;
    knob knobs[SG_TUNE_MAX_VARY];
    int nknobs;
    char **pass; /* the user's run options and --set */
    int npass;
    const char *config;
    int steps;
    int fitted_costs; /* --cost fitted: every machine is a calibrated one */
    sg_sim_machine *machines;
    int nmachines;
    /* per point: the arguments it adds */
    char (*set_args)[SG_TUNE_MAX_VARY][96];
    int *machine_of;
} tune_run;

static int build_points(tune_run *t, const char *const *scheds, int nscheds, const char *prio,
                        sg_error *err)
{
    int combos = 1;
    for (int k = 0; k < t->nknobs; k++)
        combos *= t->knobs[k].nvalues;
    size_t cap = (size_t)t->nmachines * (size_t)combos * (size_t)nscheds * 2;
    t->set.points = calloc(cap, sizeof *t->set.points);
    t->set_args = calloc(cap, sizeof *t->set_args);
    t->machine_of = calloc(cap, sizeof *t->machine_of);
    if (!t->set.points || !t->set_args || !t->machine_of)
        return sg_error_set(err, SG_ENOMEM, "out of memory");
    for (int m = 0; m < t->nmachines; m++)
        for (int c = 0; c < combos; c++)
            for (int s = 0; s < nscheds; s++)
                for (int pr = 1; pr >= 0; pr--) {
                    int want = !strcmp(prio, "both") ? (pr == 1 || priority_aware(scheds[s]))
                               : !strcmp(prio, "on") ? pr == 1
                                                     : pr == 0;
                    if (!want)
                        continue;
                    int i = t->set.npoints++;
                    sg_tune_point *p = &t->set.points[i];
                    snprintf(p->machine, sizeof p->machine, "%s", t->machines[m].machine.name);
                    snprintf(p->sched, sizeof p->sched, "%s", scheds[s]);
                    p->priorities = pr;
                    t->machine_of[i] = m;
                    for (int k = 0, rest = c; k < t->nknobs; k++) {
                        const knob *kb = &t->knobs[k];
                        p->vary[k] = kb->values[rest % kb->nvalues];
                        rest /= kb->nvalues;
                        if (kb->nwords)
                            snprintf(t->set_args[i][k], sizeof t->set_args[i][k], "%s=%s", kb->key,
                                     kb->words[(int)p->vary[k]]);
                        else
                            snprintf(t->set_args[i][k], sizeof t->set_args[i][k], "%s=%.10g",
                                     kb->key, p->vary[k]);
                    }
                }
    return SG_OK;
}

/* Room for the flag names of a point's run-option knobs ("--max_length"). */
typedef char knob_flags[SG_TUNE_MAX_VARY][80];

/* The request of point i: the user's arguments, then the point's knobs as
 * "--key value" (run options) or --set key=value (args, sets and flags are
 * the caller's, filled here). */
static void request_for(tune_run *t, int i, char **args, const char **sets, knob_flags flags,
                        sg_sim_request *rq)
{
    int na = 0, ns = 0;
    for (int a = 0; a < t->npass; a++)
        args[na++] = t->pass[a];
    for (int k = 0; k < t->nknobs; k++) {
        if (t->knobs[k].is_run_option) {
            char *eq = strchr(t->set_args[i][k], '=');
            snprintf(flags[k], sizeof flags[k], "--%s", t->knobs[k].key);
            args[na++] = flags[k];
            args[na++] = eq + 1;
        } else {
            sets[ns++] = t->set_args[i][k];
        }
    }
    sg_tune_point *p = &t->set.points[i];
    *rq = (sg_sim_request){.config = t->config,
                           .args = args,
                           .nargs = na,
                           .sets = sets,
                           .nsets = ns,
                           .sm = &t->machines[t->machine_of[i]],
                           .sched = p->sched,
                           .priorities = p->priorities,
                           .steps = t->steps,
                           .fitted_costs = t->fitted_costs};
}

/* calibrated: measured task times need not respect the roofline; the bound
 * is the work of the times used (sim_report.c, docs/simulate.md) */
static void fill_point(sg_tune_point *p, const sg_sim_report *r, int calibrated)
{
    if (calibrated) {
        p->bound_s = isfinite(r->work_bound_s) ? r->work_bound_s : 0;
        snprintf(p->bound_by, sizeof p->bound_by, "%s",
                 !(p->bound_s > 0)                  ? ""
                 : !strcmp(r->work_bound_by, "GPU") ? "GPU workers' busy time"
                                                    : "CPU workers' busy time");
    }
    p->status = SG_TUNE_OK;
    p->step_s = r->step_s;
    p->tflops = r->tflops;
    p->mfu = r->mfu;
    p->gpu_busy = r->ncuda > 0 ? r->gpu_busy : NAN;
    p->adam_hidden = r->adam_hidden;
}

/* Points i and j share a config (and so a graph and a fit): same machine,
 * same knob values; only the policy or the priority setting differ. */
static int same_config(const tune_run *t, int i, int j)
{
    if (t->machine_of[i] != t->machine_of[j])
        return 0;
    for (int k = 0; k < t->nknobs; k++)
        if (t->set.points[i].vary[k] != t->set.points[j].vary[k])
            return 0;
    return 1;
}

static int simulate_all(tune_run *t, const char *workdir, int jobs, sg_error *err)
{
    int n = t->set.npoints, next = 0, done = 0, active = 0, tty = isatty(2);
    double t0 = sg_monotonic_s(); /* the sweep's start, for the progress's time left */
    int *point_of = calloc((size_t)jobs, sizeof *point_of); /* per job slot */
    sg_sim_job *slots = calloc((size_t)jobs, sizeof *slots);
    char **args = calloc((size_t)(t->npass + 2 * SG_TUNE_MAX_VARY + 1), sizeof *args);
    char *fitted = calloc((size_t)n + 1, 1); /* points run again on the fitted costs */
    if (!point_of || !slots || !args || !fitted) {
        free(point_of);
        free(slots);
        free(args);
        free(fitted);
        return sg_error_set(err, SG_ENOMEM, "out of memory");
    }
    int rc = SG_OK, prc = SG_OK;
    double bound_s = 0, tokens = 0;
    const char *bound_by = "";
    sg_sim_point pt;
    sg_error perr = {0};
    while ((next < n || active > 0) && !rc) {
        while (next < n && active < jobs && !rc) {
            int i = next++;
            const char *sets[SG_TUNE_MAX_VARY];
            knob_flags flags;
            sg_sim_request rq;
            request_for(t, i, args, sets, flags, &rq);
            /* points come machine by machine, knob values by knob values:
             * a config is compiled and checked once for all its policies */
            if (i == 0 || !same_config(t, i, i - 1)) {
                memset(&perr, 0, sizeof perr);
                prc = sg_sim_prepare(&rq, i == 0, &pt, &perr);
                bound_s = prc ? 0 : sg_sim_point_lower_bound(&pt, &rq.sm->machine, NULL, &bound_by);
                tokens = prc ? 0
                             : (double)pt.spec.dp_size * (double)pt.spec.micro_batch *
                                   (double)pt.spec.grad_accum * (double)pt.spec.seq_len;
            }
            sg_tune_point *p = &t->set.points[i];
            p->bound_s = bound_s;
            p->tokens = tokens;
            snprintf(p->bound_by, sizeof p->bound_by, "%s", bound_s > 0 ? bound_by : "");
            if (prc) {
                /* a knob value the config refuses is that point's failure */
                p->status = SG_TUNE_FAILED;
                snprintf(p->note, sizeof p->note, "%.255s", perr.msg);
                sg_tune_progress(++done, n, p->machine, tty, sg_monotonic_s() - t0);
                continue;
            }
            if (!pt.fit.fits) {
                p->status = SG_TUNE_INFEASIBLE;
                snprintf(p->note, sizeof p->note, "%s", pt.fit.why);
                sg_tune_progress(++done, n, p->machine, tty, sg_monotonic_s() - t0);
                continue;
            }
            int slot;
            for (slot = 0; slots[slot].pid; slot++)
                ;
            rc = sg_sim_start(&rq, workdir, i, &slots[slot], err);
            point_of[slot] = i;
            active += !rc;
        }
        if (active == 0)
            continue;
        sg_sim_report rep;
        int src;
        sg_error serr = {0};
        int slot = sg_sim_wait_any(slots, jobs, &rep, &src, &serr);
        if (slot < 0) {
            rc = sg_error_set(err, src, "%s", serr.msg);
            break;
        }
        active--;
        int i = point_of[slot];
        sg_tune_point *p = &t->set.points[i];
        if (src && !fitted[i] && t->machines[t->machine_of[i]].machine.calibration_dir[0] &&
            sg_sim_history_lacks_size(serr.msg)) {
            /* the calibrated history lacks this point's task sizes: the
             * costs fitted on its node times predict them (as simulate) */
            const char *sets[SG_TUNE_MAX_VARY];
            knob_flags flags;
            sg_sim_request rq;
            request_for(t, i, args, sets, flags, &rq);
            rq.fitted_costs = 1;
            fitted[i] = 1;
            rc = sg_sim_start(&rq, workdir, i, &slots[slot], err);
            point_of[slot] = i;
            active += !rc;
            continue;
        }
        if (src) {
            p->status = SG_TUNE_FAILED;
            snprintf(p->note, sizeof p->note, "%.255s", serr.msg);
        } else {
            fill_point(p, &rep, t->machines[t->machine_of[i]].machine.calibration_dir[0] != 0);
            if (fitted[i])
                snprintf(p->note, sizeof p->note,
                         "task times fitted on the node times: the "
                         "calibrated history lacks these task sizes");
        }
        char what[128];
        snprintf(what, sizeof what, "%s %s", p->machine, p->sched);
        sg_tune_progress(++done, n, what, tty, sg_monotonic_s() - t0);
    }
    while (active > 0) {
        sg_sim_report rep;
        int src;
        sg_error ignored = {0};
        if (sg_sim_wait_any(slots, jobs, &rep, &src, &ignored) < 0)
            break;
        active--;
    }
    free(point_of);
    free(slots);
    free(args);
    free(fitted);
    return rc;
}

/* Refused before simulating: the directory PREFIX goes in must be writable. */
static int check_out(const char *prefix, sg_error *err)
{
    char dir[4096];
    const char *slash = strrchr(prefix, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - prefix) + 1 : 1, slash ? prefix : ".");
    if (access(dir, W_OK) != 0)
        return sg_error_set(err, SG_EIO, "--out %s: cannot write in %s: %s", prefix, dir,
                            strerror(errno));
    return SG_OK;
}

static int write_file(const char *prefix, const char *ext, int (*fn)(const sg_tune_set *, FILE *),
                      const sg_tune_set *set, sg_error *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s.%s", prefix, ext);
    sg_atomic_file af;
    int rc = sg_atomic_open(&af, path, err);
    if (rc)
        return rc;
    if ((rc = fn(set, af.fp)))
        return sg_atomic_fail(&af, rc, err);
    return sg_atomic_commit(&af, err);
}

static int tune(tune_run *t, int argc, char **argv, sg_error *err)
{
    const char *machines = "gh200,mi300a", *scheds = "eager,lws,dmda,dmdas,heteroprio";
    const char *prio = "both", *out = "tune", *jobs_s = NULL, *steps = "3", *cost = "history";
    sg_cli_opt opts[] = {
        {"machines", NULL, &machines, NULL}, {"sched", NULL, &scheds, NULL},
        {"priorities", NULL, &prio, NULL},   {"out", "o", &out, NULL},
        {"jobs", "j", &jobs_s, NULL},        {"steps", NULL, &steps, NULL},
        {"cost", NULL, &cost, NULL},
    };
    const int nopts = (int)(sizeof opts / sizeof opts[0]);
    /* --vary may repeat: taken out before the shared parser sees the rest */
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    sg_config *cfg = calloc(1, sizeof *cfg);
    int nrest = 0, rc = (!rest || !cfg) ? sg_error_set(err, SG_ENOMEM, "out of memory") : SG_OK;
    for (int i = 0; i < argc && !rc; i++) {
        if (strcmp(argv[i], "--vary") != 0) {
            rest[nrest++] = argv[i];
            continue;
        }
        if (i + 1 >= argc)
            rc = sg_error_set(err, SG_EINVAL, "option --vary needs KEY=SPEC");
        else if (t->nknobs == SG_TUNE_MAX_VARY)
            rc = sg_error_set(err, SG_EINVAL, "at most %d --vary", SG_TUNE_MAX_VARY);
        else
            rc = parse_vary(argv[++i], &t->knobs[t->nknobs++], err);
    }
    if (!rc)
        rc = sg_cli_load_config(nrest, rest, opts, nopts, cfg, err);
    t->pass = calloc((size_t)nrest + 1, sizeof *t->pass);
    if (!rc && !t->pass)
        rc = sg_error_set(err, SG_ENOMEM, "out of memory");
    if (!rc)
        sg_cli_split_args(nrest, rest, opts, nopts, &t->config, t->pass, &t->npass);
    if (!rc && strcmp(cost, "history") && strcmp(cost, "fitted"))
        rc = sg_error_set(err, SG_EINVAL, "--cost %s: expected history or fitted", cost);
    t->fitted_costs = !strcmp(cost, "fitted");
    if (!rc && strcmp(prio, "both") && strcmp(prio, "on") && strcmp(prio, "off"))
        rc = sg_error_set(err, SG_EINVAL, "--priorities %s: expected both, on or off", prio);
    char *end;
    long nsteps = strtol(steps, &end, 10);
    if (!rc && (*end || nsteps < 1 || nsteps > 100))
        rc = sg_error_set(err, SG_EINVAL, "--steps %s: expected 1 to 100", steps);
    t->steps = (int)nsteps;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    long jobs = jobs_s ? strtol(jobs_s, &end, 10) : (ncpu > 0 ? ncpu : 1);
    if (!rc && jobs_s && (*end || jobs < 1 || jobs > 256))
        rc = sg_error_set(err, SG_EINVAL, "--jobs %s: expected 1 to 256", jobs_s);
    for (int k = 0; k < t->nknobs; k++) {
        classify_knob(&t->knobs[k]);
        if (!rc && !t->knobs[k].is_run_option)
            rc = check_ds_knob(&t->knobs[k], rest, nrest, opts, nopts, err);
        snprintf(t->set.keys[k], sizeof t->set.keys[k], "%s", t->knobs[k].key);
        t->set.nwords[k] = t->knobs[k].nwords;
        for (int w = 0; w < t->knobs[k].nwords; w++)
            snprintf(t->set.words[k][w], sizeof t->set.words[k][w], "%s", t->knobs[k].words[w]);
    }
    t->set.nvary = t->nknobs;
    char mcopy[1024], scopy[1024], workdir[4096] = "";
    const char *mnames[MAX_LIST], *snames[MAX_LIST];
    snprintf(mcopy, sizeof mcopy, "%s", machines);
    snprintf(scopy, sizeof scopy, "%s", scheds);
    int nm = split_list(mcopy, mnames, MAX_LIST), ns = split_list(scopy, snames, MAX_LIST);
    if (!rc && (!nm || !ns))
        rc = sg_error_set(err, SG_EINVAL, "--machines and --sched need at least one name");
    if (!rc)
        rc = check_out(out, err);
    if (!rc)
        rc = sg_sim_workdir_make(workdir, sizeof workdir, err);
    t->machines = calloc((size_t)(nm ? nm : 1), sizeof *t->machines);
    if (!rc && !t->machines)
        rc = sg_error_set(err, SG_ENOMEM, "out of memory");
    for (int m = 0; m < nm && !rc; m++, t->nmachines++) {
        rc = sg_sim_machine_open(&t->machines[m], mnames[m], workdir, err);
        /* fitted costs come from a calibration's node times */
        if (!rc && t->fitted_costs && !t->machines[m].machine.calibration_dir[0])
            rc = sg_error_set(err, SG_EINVAL,
                              "--cost fitted: %s is a modelled machine "
                              "(roofline costs); it needs one that `stepgraph calibrate` "
                              "measured",
                              t->machines[m].machine.name);
    }
    if (!rc)
        rc = build_points(t, snames, ns, prio, err);
    if (!rc) {
        fprintf(stderr, "stepgraph: tune: %d simulations (%d at a time)\n", t->set.npoints,
                (int)jobs);
        rc = simulate_all(t, workdir, (int)jobs, err);
    }
    if (!rc)
        rc = write_file(out, "csv", sg_tune_write_csv, &t->set, err);
    if (!rc)
        rc = write_file(out, "md", sg_tune_write_markdown, &t->set, err);
    if (!rc)
        rc = write_file(out, "svg", sg_tune_write_svg, &t->set, err);
    if (!rc) {
        sg_tune_write_markdown(&t->set, stdout);
        printf("\nWrote %s.csv, %s.md and %s.svg\n", out, out, out);
        /* the files hold every point's note; the exit status says whether any
         * simulation failed: all of them is an error, some a warning */
        int nfailed = 0, nok = 0;
        for (int i = 0; i < t->set.npoints; i++) {
            nfailed += t->set.points[i].status == SG_TUNE_FAILED;
            nok += t->set.points[i].status == SG_TUNE_OK;
        }
        if (nfailed && nfailed == t->set.npoints)
            rc = sg_error_set(err, SG_EINVAL,
                              "tune: every one of the %d simulations failed "
                              "(%s.md gives each one's message)",
                              nfailed, out);
        else if (nfailed)
            fprintf(stderr,
                    "stepgraph: warning: tune: %d of %d simulations failed (%s.md gives "
                    "each one's message); %d simulated\n",
                    nfailed, t->set.npoints, out, nok);
    }
    sg_sim_workdir_remove(workdir);
    free(rest);
    free(cfg);
    return rc;
}

int sg_cmd_tune(int argc, char **argv)
{
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            tune_help();
            return 0;
        }
    sg_error err = {0};
    tune_run *t = calloc(1, sizeof *t);
    int rc = t ? tune(t, argc, argv, &err) : sg_error_set(&err, SG_ENOMEM, "out of memory");
    if (rc)
        fprintf(stderr, "stepgraph: %s\n", err.msg[0] ? err.msg : sg_strerror(rc));
    if (t) {
        free(t->set.points);
        free(t->set_args);
        free(t->machine_of);
        free(t->machines);
        free(t->pass);
        free(t);
    }
    return rc ? 1 : 0;
}
