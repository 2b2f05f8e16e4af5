/* fuzz_trace.c — arbitrary bytes as a projload trace (client/trace.h).
 *
 * Beyond "does not crash", the harness checks the parser's promises:
 * - a refused trace yields one non-empty line naming the trace, and keeps
 *   the requests of the lines before the bad one, each well formed;
 * - an accepted trace holds only values in the documented ranges, its name
 *   list has no two equal names and every op points into it;
 * - pj_trace_write's text parses back to the same requests (t_us, client,
 *   layer names, m, n), so a trace projload writes (gen, record) is one it
 *   reads;
 * - every request's signature is terminated at any capacity and says how
 *   long the whole would be;
 * - resolving against a small WELCOME either maps every op onto one of its
 *   layers, within max_m and the layer's rows, or fails with a message. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok)
{
    if (!ok)
        __builtin_trap();
}

static void check_message(const char *err, const char *file)
{
    check(err[0] != '\0');
    check(strchr(err, '\n') == NULL);
    check(strncmp(err, file, strlen(file)) == 0);
}

/* The ranges the header promises, and an index that agrees with the list. */
static void check_trace(const pj_trace *t)
{
    size_t ops = 0, timed = 0;
    for (size_t r = 0; r < t->n_reqs; r++) {
        const pj_trace_req *q = &t->reqs[r];
        check(q->op0 == ops);
        check(q->n_ops >= 1 && q->n_ops <= PJ_TRACE_MAX_OPS);
        check(q->t_us >= -1 && q->t_us <= PJ_TRACE_MAX_T_US);
        check(q->client <= PJ_TRACE_MAX_CLIENT);
        check(q->line >= 1);
        timed += q->t_us >= 0;
        for (uint32_t i = 0; i < q->n_ops; i++) {
            const pj_trace_op *o = &t->ops[q->op0 + i];
            check(o->name < t->n_names);
            check(o->m >= 1 && o->m <= PJ_TRACE_MAX_M);
            check(o->n_req <= PJ_TRACE_MAX_N);
            check(o->layer == -1);
        }
        ops += q->n_ops;
    }
    check(ops == t->n_ops);
    check(timed == t->n_timed);
    check(t->n_names <= PJ_WIRE_MAX_LAYERS_ALL);
    for (size_t i = 0; i < t->n_names; i++) {
        size_t len = strnlen(t->names[i], PJ_TRACE_NAME_MAX + 1);
        check(len >= 1 && len <= PJ_TRACE_NAME_MAX);
        for (size_t j = 0; j < i; j++)
            check(strcmp(t->names[i], t->names[j]) != 0);
    }
}

/* Same requests, by value (names compared as text, not by index). */
static void check_same(const pj_trace *a, const pj_trace *b)
{
    check(a->n_reqs == b->n_reqs && a->n_ops == b->n_ops);
    for (size_t r = 0; r < a->n_reqs; r++) {
        const pj_trace_req *p = &a->reqs[r], *q = &b->reqs[r];
        check(p->t_us == q->t_us && p->client == q->client && p->n_ops == q->n_ops);
        for (uint32_t i = 0; i < p->n_ops; i++) {
            const pj_trace_op *x = &a->ops[p->op0 + i], *y = &b->ops[q->op0 + i];
            check(x->m == y->m && x->n_req == y->n_req);
            check(strcmp(a->names[x->name], b->names[y->name]) == 0);
        }
    }
}

static void check_signatures(const pj_trace *t)
{
    char full[8192], small[17];
    size_t shown = t->n_reqs < 4 ? t->n_reqs : 4;
    for (size_t r = 0; r < shown; r++) {
        size_t need = pj_trace_signature(t, r, NULL, NULL, full, sizeof full);
        if (need < sizeof full)
            check(strlen(full) == need);
        /* 0 (nothing written), 1 (the NUL alone), 17, and exactly the
         * length (one byte short of the NUL). */
        const size_t caps[] = {0, 1, sizeof small, need < sizeof small ? need : sizeof small};
        for (size_t c = 0; c < sizeof caps / sizeof caps[0]; c++) {
            memset(small, 'x', sizeof small);
            size_t need2 = pj_trace_signature(t, r, NULL, NULL, small, caps[c]);
            check(need2 == need);
            if (caps[c] == 0) {
                check(small[0] == 'x');
                continue;
            }
            check(memchr(small, '\0', caps[c]) != NULL);
            check(strncmp(small, full, strlen(small)) == 0);
        }
    }
}

static void check_resolve(pj_trace *t)
{
    static pj_welcome w;
    if (!w.version) {
        static const struct {
            const char *name;
            uint32_t n, k;
        } l[] = {{"qkv_gate", 320, 256}, {"o", 256, 192}, {"a", 64, 64}, {"unpooler", 512, 256}};
        w.version = 1;
        w.backend = 1;
        w.max_m = 256;
        w.max_ops_per_request = 8;
        w.n_layers = 4;
        for (int i = 0; i < 4; i++) {
            snprintf(w.layers[i].name, sizeof w.layers[i].name, "%s", l[i].name);
            w.layers[i].n = l[i].n;
            w.layers[i].k = l[i].k;
        }
    }
    char err[512] = "";
    if (pj_trace_resolve(t, &w, err, sizeof err) != 0) {
        check_message(err, t->file);
        return;
    }
    for (size_t r = 0; r < t->n_reqs; r++) {
        check(t->reqs[r].n_ops <= w.max_ops_per_request);
        for (uint32_t i = 0; i < t->reqs[r].n_ops; i++) {
            const pj_trace_op *o = &t->ops[t->reqs[r].op0 + i];
            check(o->layer >= 0 && (uint32_t)o->layer < w.n_layers);
            const pj_wire_layer *L = &w.layers[o->layer];
            check(strcmp(L->name, t->names[o->name]) == 0);
            check(o->m <= w.max_m);
            check(o->n == (o->n_req ? o->n_req : L->n) && o->n <= L->n);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pj_trace t;
    char err[512];
    pj_trace_init(&t, "fuzz.jsonl");
    err[0] = '\0';
    int rc = pj_trace_parse(&t, (const char *)data, size, err, sizeof err);
    check_trace(&t);
    if (rc != 0) {
        check_message(err, "fuzz.jsonl");
        pj_trace_free(&t);
        return 0;
    }
    check(t.n_reqs >= 1);
    check_signatures(&t);

    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    check(f != NULL);
    check(pj_trace_write(&t, f, "fuzz") == 0);
    check(fclose(f) == 0);
    pj_trace back;
    pj_trace_init(&back, "back.jsonl");
    err[0] = '\0';
    check(pj_trace_parse(&back, text, len, err, sizeof err) == 0);
    check_trace(&back);
    check_same(&t, &back);
    free(text);
    pj_trace_free(&back);

    check_resolve(&t);
    pj_trace_free(&t);
    return 0;
}
