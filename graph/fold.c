/* fold.c - repeated units of a step graph folded into one box each (fold.h). */
#define _POSIX_C_SOURCE 200809L

#include "graph/fold.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/op_kinds.h"

/* A member: a unit (key = layer) or a sub-group outside units. */
typedef struct member {
    int is_subgroup;
    int64_t key;
    char *shape; /* malloc'ed signature */
    int nodes;
    int cls; /* index of the first member with the same shape */
} member;

/* name with the digits after "layer", "sg" and ".t" blanked: fwd.layer#.mb0,
 * adam_cpu.sg#.t# */
static void normalise(const char *name, char *out, size_t size)
{
    size_t j = 0;
    for (size_t i = 0; name[i] && j + 1 < size;) {
        int tok = !strncmp(name + i, "layer", 5) ? 5
                  : !strncmp(name + i, "sg", 2)  ? 2
                  : !strncmp(name + i, ".t", 2)  ? 2
                                                 : 0;
        if (tok && name[i + tok] >= '0' && name[i + tok] <= '9') {
            for (int k = 0; k < tok && j + 1 < size; k++)
                out[j++] = name[i + k];
            i += (size_t)tok;
            while (name[i] >= '0' && name[i] <= '9')
                i++;
            if (j + 1 < size)
                out[j++] = '#';
        } else {
            out[j++] = name[i++];
        }
    }
    out[j] = '\0';
}

static int member_of(const sg_node *n, int *is_subgroup, int64_t *key)
{
    if (n->layer >= 0) {
        *is_subgroup = 0;
        *key = n->layer;
        return 1;
    }
    if (n->subgroup >= 0 && n->tile >= 0) {
        /* a chunk of a CPU sub-group's optimizer chain (optimizer tiles) */
        *is_subgroup = SG_FOLD_CHUNK;
        *key = (int64_t)n->subgroup * SG_FOLD_CHUNK_KEY + n->tile;
        return 1;
    }
    if (n->subgroup >= 0) {
        *is_subgroup = 1;
        *key = n->subgroup;
        return 1;
    }
    return 0;
}

/* Appends text to a growing string. */
static int append(char **s, size_t *len, size_t *cap, const char *text)
{
    size_t t = strlen(text);
    if (*len + t + 1 > *cap) {
        size_t nc = (*cap ? *cap * 2 : 256);
        while (nc < *len + t + 1)
            nc *= 2;
        char *p = realloc(*s, nc);
        if (!p)
            return -1;
        *s = p;
        *cap = nc;
    }
    memcpy(*s + *len, text, t + 1);
    *len += t;
    return 0;
}

int sg_fold_compute(const sg_graph *g, sg_fold *f)
{
    memset(f, 0, sizeof *f);
    f->nnodes = g->nnodes;
    f->group_of = malloc((size_t)(g->nnodes > 0 ? g->nnodes : 1) * sizeof *f->group_of);
    int *indeg = calloc((size_t)g->nnodes + 1, sizeof *indeg);
    int *outdeg = calloc((size_t)g->nnodes + 1, sizeof *outdeg);
    int *mem_of = malloc((size_t)(g->nnodes > 0 ? g->nnodes : 1) * sizeof *mem_of);
    member *m = calloc((size_t)g->nnodes + 1, sizeof *m);
    int nm = 0, rc = SG_OK;
    if (!f->group_of || !indeg || !outdeg || !mem_of || !m)
        rc = SG_ENOMEM;
    /* edges inside a member only: where a unit meets a sub-group boundary
     * or a neighbour does not change its shape */
    for (int e = 0; rc == SG_OK && e < g->nedges; e++) {
        const sg_node *a = &g->nodes[g->edges[e].from], *b = &g->nodes[g->edges[e].to];
        int sa, sb;
        int64_t ka, kb;
        if (member_of(a, &sa, &ka) && member_of(b, &sb, &kb) && sa == sb && ka == kb) {
            outdeg[g->edges[e].from]++;
            indeg[g->edges[e].to]++;
        }
    }
    /* members in order of first appearance, and each one's shape */
    for (int i = 0; rc == SG_OK && i < g->nnodes; i++) {
        const sg_node *n = &g->nodes[i];
        f->group_of[i] = -1;
        mem_of[i] = -1;
        int sub;
        int64_t key;
        if (!member_of(n, &sub, &key))
            continue;
        int k = 0;
        while (k < nm && !(m[k].is_subgroup == sub && m[k].key == key))
            k++;
        if (k == nm) {
            m[nm++] = (member){.is_subgroup = sub, .key = key, .cls = -1};
        }
        mem_of[i] = k;
        char nm_buf[SG_IR_NAME_MAX], line[SG_IR_NAME_MAX + 96];
        normalise(n->name, nm_buf, sizeof nm_buf);
        snprintf(line, sizeof line, "%s|%d|%d|%s|%d|%d;", sg_op_kind_name(n->kind), (int)n->device,
                 n->micro_step, nm_buf, indeg[i], outdeg[i]);
        size_t len = m[k].shape ? strlen(m[k].shape) : 0, cap = m[k].shape ? len + 1 : 0;
        if (append(&m[k].shape, &len, &cap, line))
            rc = SG_ENOMEM;
        m[k].nodes++;
    }
    /* classes: the first member of each shape (units and sub-groups apart) */
    for (int k = 0; rc == SG_OK && k < nm; k++)
        for (int j = 0; j <= k && m[k].cls < 0; j++)
            if (m[j].is_subgroup == m[k].is_subgroup && !strcmp(m[j].shape, m[k].shape))
                m[k].cls = j;
    /* one group per class with more than one member */
    int *group_of_member = malloc((size_t)(nm > 0 ? nm : 1) * sizeof *group_of_member);
    if (rc == SG_OK && !group_of_member)
        rc = SG_ENOMEM;
    for (int k = 0; rc == SG_OK && k < nm; k++) {
        group_of_member[k] = -1;
        if (m[k].cls == k)
            continue;
        int c = m[k].cls, gi = group_of_member[c] >= 0 ? group_of_member[c] : -1;
        /* the group of class c is remembered on its first folded member */
        for (int j = 0; j < k && gi < 0; j++)
            if (m[j].cls == c && j != c)
                gi = group_of_member[j];
        if (gi < 0) {
            sg_fold_group *ng = realloc(f->groups, (size_t)(f->ngroups + 1) * sizeof *ng);
            if (!ng) {
                rc = SG_ENOMEM;
                break;
            }
            f->groups = ng;
            gi = f->ngroups++;
            f->groups[gi] = (sg_fold_group){.is_subgroup = m[k].is_subgroup,
                                            .like = m[c].key,
                                            .first = m[k].key,
                                            .last = m[k].key};
        }
        sg_fold_group *gr = &f->groups[gi];
        group_of_member[k] = gi;
        gr->count++;
        gr->nodes += m[k].nodes;
        if (m[k].key < gr->first)
            gr->first = m[k].key;
        if (m[k].key > gr->last)
            gr->last = m[k].key;
    }
    for (int i = 0; rc == SG_OK && i < g->nnodes; i++)
        if (mem_of[i] >= 0)
            f->group_of[i] = group_of_member[mem_of[i]];
    for (int gi = 0; rc == SG_OK && gi < f->ngroups; gi++) {
        sg_fold_group *gr = &f->groups[gi];
        char a[32], b[32], like[48];
        if (gr->is_subgroup == SG_FOLD_CHUNK) {
            snprintf(a, sizeof a, "sg%d.t%d", (int)(gr->first / SG_FOLD_CHUNK_KEY),
                     (int)(gr->first % SG_FOLD_CHUNK_KEY));
            snprintf(b, sizeof b, "sg%d.t%d", (int)(gr->last / SG_FOLD_CHUNK_KEY),
                     (int)(gr->last % SG_FOLD_CHUNK_KEY));
            snprintf(like, sizeof like, "chunk sg%d.t%d", (int)(gr->like / SG_FOLD_CHUNK_KEY),
                     (int)(gr->like % SG_FOLD_CHUNK_KEY));
            snprintf(gr->label, sizeof gr->label,
                     "%d optimizer chunks between %s and %s, same "
                     "shape as %s: %d tasks",
                     gr->count, a, b, like, gr->nodes);
            continue;
        }
        if (gr->is_subgroup) {
            snprintf(a, sizeof a, "%d", (int)gr->first);
            snprintf(b, sizeof b, "%d", (int)gr->last);
            snprintf(like, sizeof like, "sub-group %d", (int)gr->like);
        } else {
            sg_unit_label(g, (int)gr->first, a, sizeof a);
            sg_unit_label(g, (int)gr->last, b, sizeof b);
            sg_unit_label(g, (int)gr->like, like, sizeof like);
        }
        const char *what = gr->is_subgroup ? "sub-group" : "unit";
        int stride = gr->count > 1 ? (int)((gr->last - gr->first) / (gr->count - 1)) : 1;
        int regular = gr->count > 1 && stride * (gr->count - 1) == gr->last - gr->first;
        if (gr->count == 1)
            snprintf(gr->label, sizeof gr->label, "%s %s, same shape as %s: %d tasks", what, a,
                     like, gr->nodes);
        else if (regular && stride == 1)
            snprintf(gr->label, sizeof gr->label, "%ss %s-%s (%d), same shape as %s: %d tasks",
                     what, a, b, gr->count, like, gr->nodes);
        else if (regular)
            snprintf(gr->label, sizeof gr->label,
                     "%ss %s-%s, every %d (%d), same shape as %s: "
                     "%d tasks",
                     what, a, b, stride, gr->count, like, gr->nodes);
        else
            snprintf(gr->label, sizeof gr->label,
                     "%d %ss between %s and %s, same shape as %s: "
                     "%d tasks",
                     gr->count, what, a, b, like, gr->nodes);
    }
    for (int k = 0; k < nm; k++)
        free(m[k].shape);
    free(m);
    free(mem_of);
    free(indeg);
    free(outdeg);
    free(group_of_member);
    if (rc)
        sg_fold_free(f);
    return rc;
}

void sg_fold_free(sg_fold *f)
{
    free(f->group_of);
    free(f->groups);
    memset(f, 0, sizeof *f);
}
