/* test_op_kinds.c - the table of node kinds (graph/op_kinds.h): complete and
 * consistent, names that round-trip, and each column against the rule it
 * documents, written out here independently of the table; and the step
 * compiler gives every node a device its kind allows and the link its kind
 * uses. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/compile.h"
#include "graph/export.h"
#include "graph/ir.h"
#include "graph/op_kinds.h"
#include "models/model.h"
#include "tests/tap.h"
#include "tests/test_util.h"

static int named(const sg_op_kind_info *info, const char *const *names)
{
    for (; *names; names++)
        if (!strcmp(info->name, *names))
            return 1;
    return 0;
}

static int is_colour(const char *c)
{
    if (!c || strlen(c) != 7 || c[0] != '#')
        return 0;
    for (int i = 1; i < 7; i++)
        if (!strchr("0123456789abcdefABCDEF", c[i]))
            return 0;
    return 1;
}

static void test_complete(void)
{
    int good = 1;
    for (int k = 0; k < SG_OP_KIND_COUNT; k++) {
        const sg_op_kind_info *info = sg_op_kind_info_of((sg_op_kind)k);
        char symbol[64];
        sg_op_kind parsed = SG_OP_KIND_COUNT;
        if (!info) {
            tap_diag("kind %d has no row", k);
            good = 0;
            continue;
        }
        snprintf(symbol, sizeof symbol, "sg_%s", info->name ? info->name : "");
        const char *why =
            (int)info->kind != k                                        ? "row out of place"
            : !info->name || !*info->name                               ? "no name"
            : strcmp(sg_op_kind_name((sg_op_kind)k), info->name)        ? "sg_op_kind_name differs"
            : sg_op_kind_parse(info->name, &parsed) || (int)parsed != k ? "name does not parse back"
            : !info->symbol || strcmp(info->symbol, symbol)             ? "symbol is not sg_<name>"
            : (unsigned)info->phase >= SG_PHASE_COUNT                   ? "no phase"
            : (unsigned)info->placement >= SG_PLACE_COUNT               ? "no placement"
            : (unsigned)info->cost_class >= SG_CLASS_COUNT              ? "no cost class"
            : !info->devices || (info->devices >> SG_DEV_COUNT)         ? "bad device mask"
            : info->optimizer_ctx != 0 && info->optimizer_ctx != 1      ? "optimizer_ctx not 0/1"
            : !is_colour(info->color)                                   ? "colour is not #rrggbb"
            : strcmp(sg_op_kind_color((sg_op_kind)k), info->color)      ? "sg_op_kind_color differs"
                                                                        : NULL;
        for (int j = 0; j < k && !why; j++) {
            const sg_op_kind_info *o = sg_op_kind_info_of((sg_op_kind)j);
            if (!strcmp(o->name, info->name))
                why = "name not unique";
            else if (!strcmp(o->color, info->color))
                why = "colour not unique";
        }
        if (why) {
            tap_diag("kind %d (%s): %s", k, info->name ? info->name : "?", why);
            good = 0;
        }
    }
    ok(good, "every kind has a row with a unique name, sg_<name> symbol, phase, placement, "
             "cost class, devices and a unique colour");
    is_int(SG_OP_KIND_COUNT, 19, "19 kinds");

    sg_op_kind out = SG_OP_FORWARD;
    is_int(sg_op_kind_parse("no_such_kind", &out), SG_EINVAL, "parse: an unknown name is refused");
    is_int(sg_op_kind_parse(NULL, &out), SG_EINVAL, "parse: no name is refused");
    ok(out == SG_OP_FORWARD, "parse: a refused name leaves the kind alone");
    ok(sg_op_kind_info_of(SG_OP_KIND_COUNT) == NULL && sg_op_kind_info_of((sg_op_kind)-1) == NULL,
       "no row outside the enum");
    is_str(sg_op_kind_name(SG_OP_KIND_COUNT), "?", "the name of an unknown kind is ?");
    is_str(sg_op_kind_color(SG_OP_KIND_COUNT), "#ffffff", "the colour of an unknown kind is white");
    ok(sg_op_kind_class(SG_OP_KIND_COUNT) == SG_CLASS_ELEMENTWISE,
       "an unknown kind costs as elementwise");

    /* class names are machine-model JSON keys */
    static const char *const classes[] = {"gemm",          "elementwise", "optimizer_cpu",
                                          "optimizer_gpu", "copy",        "collective"};
    int cgood = SG_CLASS_COUNT == 6;
    for (int c = 0; c < SG_CLASS_COUNT && cgood; c++)
        cgood = !strcmp(sg_op_class_name((sg_op_class)c), classes[c]);
    ok(cgood,
       "cost class names: gemm, elementwise, optimizer_cpu, optimizer_gpu, copy, collective");
    static const char *const phases[] = {"forward", "backward", "optimizer", "transfer"};
    int pgood = SG_PHASE_COUNT == 4;
    for (int p = 0; p < SG_PHASE_COUNT && pgood; p++)
        pgood = !strcmp(sg_phase_name((sg_phase)p), phases[p]);
    ok(pgood, "phase names: forward, backward, optimizer, transfer");
}

/* The documented rules, by kind name. */
static void test_rules(void)
{
    static const char *const gemm[] = {"forward",    "recompute",      "backward",
                                       "moe_expert", "moe_expert_bwd", NULL};
    static const char *const collective[] = {"allgather", "reduce_scatter", "allreduce", NULL};
    static const char *const copy[] = {"d2h", "h2d", NULL};
    static const char *const cpu_only[] = {"d2h", "overflow_check", "loss_scale", NULL};
    static const char *const optimizer_ctx[] = {"adam_cpu", "validate", "cast", NULL};
    /* batch tiles put forward, recompute, backward and grad_sum nodes on CPUs */
    static const char *const on_cpu[] = {"adam_cpu",    "validate",       "cast",     "forward",
                                         "recompute",   "backward",       "grad_sum", "moe_expert",
                                         "moe_combine", "moe_expert_bwd", NULL};
    /* the MoE kinds may sit on GPUs in graphs and simulations (a real run
     * with CUDA workers refuses MoE models: their CUDA codelets have never
     * run on a GPU) */
    static const char *const on_gpu[] = {
        "forward",     "recompute",      "backward",   "grad_sum", "cast",
        "grad_norm",   "overflow_check", "loss_scale", "adam_gpu", "moe_expert",
        "moe_combine", "moe_expert_bwd", NULL};
    int place = 1, ctx = 1, phase = 1, cls = 1, dev = 1, rule = 1;
    for (int k = 0; k < SG_OP_KIND_COUNT; k++) {
        const sg_op_kind_info *i = sg_op_kind_info_of((sg_op_kind)k);
        int link = named(i, collective) || named(i, copy);

        /* placement on a CUDA machine: D2H, overflow check and loss scale
         * CPU only, H2D on the CUDA side, casts either, others by device */
        sg_placement want_place = named(i, cpu_only)         ? SG_PLACE_CPU
                                  : !strcmp(i->name, "h2d")  ? SG_PLACE_CUDA
                                  : !strcmp(i->name, "cast") ? SG_PLACE_EITHER
                                                             : SG_PLACE_NODE;
        if (i->placement != want_place) {
            tap_diag("%s: placement %d, expected %d", i->name, i->placement, want_place);
            place = 0;
        }
        if (i->optimizer_ctx != named(i, optimizer_ctx)) {
            tap_diag("%s: optimizer_ctx %d", i->name, i->optimizer_ctx);
            ctx = 0;
        }

        /* wall_clock_breakdown: transfers are the link nodes */
        sg_phase want_phase = link ? SG_PHASE_TRANSFER
                              : !strcmp(i->name, "forward") || !strcmp(i->name, "moe_expert") ||
                                      !strcmp(i->name, "moe_combine")
                                  ? SG_PHASE_FORWARD
                              : !strcmp(i->name, "backward") || !strcmp(i->name, "recompute") ||
                                      !strcmp(i->name, "grad_sum") ||
                                      !strcmp(i->name, "moe_expert_bwd")
                                  ? SG_PHASE_BACKWARD
                                  : SG_PHASE_OPTIMIZER;
        if (i->phase != want_phase) {
            tap_diag("%s: phase %s, expected %s", i->name, sg_phase_name(i->phase),
                     sg_phase_name(want_phase));
            phase = 0;
        }

        sg_op_class want_cls = named(i, gemm)                 ? SG_CLASS_GEMM
                               : named(i, collective)         ? SG_CLASS_COLLECTIVE
                               : named(i, copy)               ? SG_CLASS_COPY
                               : !strcmp(i->name, "adam_cpu") ? SG_CLASS_OPTIMIZER_CPU
                               : !strcmp(i->name, "adam_gpu") ? SG_CLASS_OPTIMIZER_GPU
                                                              : SG_CLASS_ELEMENTWISE;
        if (i->cost_class != want_cls || sg_op_kind_class((sg_op_kind)k) != want_cls) {
            tap_diag("%s: cost class %s, expected %s", i->name, sg_op_class_name(i->cost_class),
                     sg_op_class_name(want_cls));
            cls = 0;
        }
        sg_cost_rule want_rule = !strcmp(i->name, "validate") ? SG_COST_OVERHEAD : SG_COST_ROOFLINE;
        if (i->cost_rule != want_rule) {
            tap_diag("%s: cost rule %d", i->name, i->cost_rule);
            rule = 0;
        }

        unsigned want_dev = (link ? SG_ON(LINK) : 0) | (named(i, on_cpu) ? SG_ON(CPU) : 0) |
                            (named(i, on_gpu) ? SG_ON(GPU) : 0);
        if (i->devices != want_dev) {
            tap_diag("%s: devices 0x%x, expected 0x%x", i->name, i->devices, want_dev);
            dev = 0;
        }
        /* the timeline used to count every link node as transfer */
        if ((i->phase == SG_PHASE_TRANSFER) != (i->devices == SG_ON(LINK))) {
            tap_diag("%s: a transfer phase without a link device, or the reverse", i->name);
            phase = 0;
        }
    }
    ok(place, "placement: d2h, overflow_check, loss_scale CPU only; h2d CUDA; cast either; "
              "the rest by device");
    ok(ctx, "optimizer context: adam_cpu, validate and cast (their CPU nodes)");
    ok(phase, "phases: forward, moe_expert and moe_combine; backward, recompute, grad_sum and "
              "moe_expert_bwd; transfers are the link kinds; the rest optimizer");
    ok(cls, "cost classes as the machine models' efficiencies expect");
    ok(rule, "only validate costs a task's overhead alone");
    ok(dev, "devices: link kinds on links, adam_cpu and validate on CPUs; cast, forward, "
            "recompute, backward, grad_sum and the MoE kinds on either");
}

/* Every node the compiler emits has a device its kind's row allows. */
static int devices_allowed(const sg_model *m, const sg_step_spec *s, const char *label)
{
    sg_graph g;
    sg_error err = {0};
    sg_graph_init(&g);
    if (sg_compile_step(m, s, &g, &err)) {
        tap_diag("%s: compile failed: %s", label, err.msg);
        sg_graph_free(&g);
        return 0;
    }
    int good = 1;
    for (int n = 0; n < g.nnodes && good; n++) {
        const sg_node *nd = &g.nodes[n];
        const sg_op_kind_info *info = sg_op_kind_info_of(nd->kind);
        if (!(info->devices & (1u << nd->device))) {
            tap_diag("%s: %s is a %s node on %s", label, nd->name, info->name,
                     sg_device_class_name(nd->device));
            good = 0;
        }
        /* the simulator tells a copy's direction by its link */
        sg_link_dir want = info->cost_class == SG_CLASS_COLLECTIVE ? SG_LINK_NET
                           : !strcmp(info->name, "d2h")            ? SG_LINK_D2H
                           : !strcmp(info->name, "h2d")            ? SG_LINK_H2D
                                                                   : SG_LINK_NONE;
        if (nd->link != want) {
            tap_diag("%s: %s uses link %s", label, nd->name, sg_link_dir_name(nd->link));
            good = 0;
        }
    }
    sg_graph_free(&g);
    return good;
}

static void test_compiled(void)
{
    sg_model *m = calloc(1, sizeof *m);
    if (!m || load_model("tiny-llama", m)) {
        ok(0, "tiny-llama model loads");
        free(m);
        return;
    }
    int cases = 0, good = 0;
    for (int stage = 0; stage <= 3; stage++)
        for (int offload = 0; offload <= 1; offload++)
            for (int super = 0; super <= 1; super++)
                for (int prec = 0; prec < 6; prec++) {
                    int tiled = prec >= 3; /* batch tiles: two of one sequence */
                    if ((offload && stage == 0) || (super && (!offload || stage != 3)))
                        continue;
                    sg_step_spec s;
                    if (super)
                        superoffload_spec(&s, 0.5);
                    else
                        sg_step_spec_defaults(&s);
                    s.zero_stage = stage;
                    s.offload_optimizer = offload;
                    s.offload_ratio = offload ? 0.5 : 1.0;
                    s.compute_dtype = prec % 3 == 0 ? SG_F32 : prec % 3 == 1 ? SG_BF16 : SG_F16;
                    s.batch_tile = tiled;
                    s.activation_checkpointing = 1;
                    s.grad_accum = 2;
                    s.micro_batch = 2;
                    s.seq_len = 64;
                    s.sub_group_size = 150000;
                    s.param_persistence_threshold = 0;
                    char label[96];
                    snprintf(label, sizeof label, "stage %d offload %d super %d %s%s", stage,
                             offload, super, sg_dtype_name(s.compute_dtype), tiled ? " tiled" : "");
                    cases++;
                    good += devices_allowed(m, &s, label);
                }
    tap_diag("%d compiled cases", cases);
    ok(cases >= 40 && good == cases,
       "compiled graphs (untiled and batch-tiled): every node's device is one its kind's row "
       "allows, and its link the one its kind uses");
    free(m);
}

int main(void)
{
    test_complete();
    test_rules();
    test_compiled();
    return tap_done();
}
