/* daemon_check.c — see daemon_check.h. */
#include "tests/helpers/daemon_check.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16.h"
#include "kernels/refgemm.h"
#include "tests/helpers/fixture.h"

const uint32_t PJC_MS[PJC_N_MS] = {1, 8, 16, 32, 128, 256};

static pj_model *g_model;
static uint16_t *g_x[PJ_CFG_MAX_LAYERS][PJC_N_MS][PJC_VARIANTS];
static uint16_t *g_y[PJ_CFG_MAX_LAYERS][PJC_N_MS][PJC_VARIANTS];

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

long pjc_env_long(const char *name, long def)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return def;
    char *end;
    long r = strtol(v, &end, 10);
    return *end ? def : r;
}

int pjc_init(char *model_path, size_t cap)
{
    if (pj_fixture_small_model(model_path, cap) != 0)
        return -EIO;
    if (g_model)
        return 0;
    pj_config cfg;
    pj_fixture_small_config(&cfg, model_path);
    char err[512];
    if (pj_model_load(&cfg, &g_model, NULL, NULL, err, sizeof err) != 0) {
        fprintf(stderr, "daemon_check: %s\n", err);
        return -EIO;
    }
    uint64_t seed = 12345;
    for (uint32_t l = 0; l < g_model->n_layers; l++) {
        const pj_weights *w = &g_model->layers[l].w;
        for (uint32_t mi = 0; mi < PJC_N_MS; mi++) {
            for (uint32_t v = 0; v < PJC_VARIANTS; v++) {
                uint32_t m = PJC_MS[mi];
                uint16_t *x = malloc((size_t)m * w->k * 2);
                uint16_t *y = malloc((size_t)m * w->n * 2);
                if (!x || !y)
                    return -ENOMEM;
                for (size_t i = 0; i < (size_t)m * w->k; i++) {
                    /* Uniform in (-2, 2), with an exact zero now and then. */
                    uint64_t r = splitmix(&seed);
                    float f = (r & 63) == 0
                                  ? 0.0f
                                  : (float)((double)(r >> 11) / 9007199254740992.0 * 4.0 - 2.0);
                    x[i] = pj_f32_to_bf16(f);
                }
                if (pj_ref_project(w, m, w->n, x, w->k, y, w->n) != 0)
                    return -ENOMEM;
                g_x[l][mi][v] = x;
                g_y[l][mi][v] = y;
            }
        }
    }
    return 0;
}

const pj_model *pjc_model(void)
{
    return g_model;
}

const uint16_t *pjc_ref_x(uint32_t layer, uint32_t mi, uint32_t variant)
{
    return g_x[layer][mi][variant];
}

const uint16_t *pjc_ref_y(uint32_t layer, uint32_t mi, uint32_t variant)
{
    return g_y[layer][mi][variant];
}

static uint32_t g_ring_slots;

void pjc_use_ring(uint32_t slots)
{
    g_ring_slots = slots;
}

int pjc_open(pjc_conn *t, const char *url, size_t xbytes, size_t ybytes, int timeout_ms, char *why,
             size_t whylen)
{
    memset(t, 0, sizeof *t);
    t->xs.fd = t->ys.fd = -1;
    /* A connect can land on a listener nng 1.5 has stopped, in the 100 ms
     * before the daemon replaces it (daemon/DAEMON.md, "The listener and
     * nng 1.5"): no WELCOME ever comes on it. A test that refuses or drops
     * connections just before makes that window likely, so a HELLO that
     * times out (and only that: a refusal is an answer) is tried again on a
     * fresh connection, three tries of a third of the timeout each; the
     * connection that answered keeps the full timeout. */
    const int hello_ms = timeout_ms / 3 > 0 ? timeout_ms / 3 : 1;
    int rc = -1;
    for (int i = 0; i < 3; i++) {
        if (i)
            pjt_close(&t->c);
        rc = pjt_connect(&t->c, url, hello_ms);
        if (rc != 0) {
            snprintf(why, whylen, "connect %s: %s", url, strerror(-rc));
            continue;
        }
        rc = pjt_hello(&t->c, "test");
        if (rc != PJ_OK)
            snprintf(why, whylen, "hello (try %d of 3): %d %s", i + 1, rc, t->c.err.msg);
        if (rc != -ETIMEDOUT)
            break;
    }
    if (rc != PJ_OK)
        return -1;
    t->c.timeout_ms = timeout_ms;
    nng_socket_set_ms(t->c.sock, NNG_OPT_RECVTIMEO, timeout_ms);
    nng_socket_set_ms(t->c.sock, NNG_OPT_SENDTIMEO, timeout_ms);
    if (pjt_shm_create(&t->xs, xbytes) != 0 || pjt_shm_create(&t->ys, ybytes) != 0) {
        snprintf(why, whylen, "shm_create: %s", strerror(errno));
        return -1;
    }
    rc = pjt_register_shm(&t->c, t->xs.name, xbytes, &t->xid);
    if (rc == PJ_OK)
        rc = pjt_register_shm(&t->c, t->ys.name, ybytes, &t->yid);
    if (rc != PJ_OK) {
        snprintf(why, whylen, "register: %d %s", rc, t->c.err.msg);
        return -1;
    }
    if (g_ring_slots) {
        rc = pjt_ring_attach(&t->c, g_ring_slots, PJ_RING_DEFAULT_SLOT);
        if (rc != PJ_OK) {
            snprintf(why, whylen, "ring attach: %d %s", rc, rc > 0 ? t->c.err.msg : strerror(-rc));
            return -1;
        }
    }
    return 0;
}

void pjc_close(pjc_conn *t)
{
    pjt_close(&t->c);
    pjt_shm_destroy(&t->xs);
    pjt_shm_destroy(&t->ys);
}

pj_op pjc_op(const pjc_conn *t, const pjc_shape *s)
{
    pj_op op = {.layer = s->layer,
                .m = PJC_MS[s->mi],
                .n = s->n,
                .x_buf = t->xid,
                .x_off = s->x_off * 2,
                .x_ld = s->x_ld,
                .y_buf = t->yid,
                .y_off = s->y_off * 2,
                .y_ld = s->y_ld};
    return op;
}

void pjc_fill_x(uint16_t *X, size_t count, const pjc_shape *s, uint32_t m, uint32_t k,
                const uint16_t *x)
{
    /* What is not a row of x (the gaps of a stride past k, the space
     * before x_off and after the last row) is a NaN: an engine that read
     * any of it would carry the NaN into y, which the checks see. Zeros
     * there would hide it (0 x w adds nothing). */
    for (size_t e = 0; e < count; e++)
        X[e] = PJC_X_OUTSIDE;
    for (uint32_t i = 0; i < m; i++)
        memcpy(X + s->x_off + i * s->x_ld, x + (size_t)i * k, (size_t)k * 2);
}

void pjc_stage(pjc_conn *t, const pjc_shape *s)
{
    pjc_fill_x(t->xs.p, t->xs.size / 2, s, PJC_MS[s->mi], g_model->layers[s->layer].w.k,
               g_x[s->layer][s->mi][s->variant]);
    memset(t->ys.p, 0xff, t->ys.size);
}

int pjc_verify(const pjc_conn *t, const pjc_shape *s, char *why, size_t whylen)
{
    const pj_weights *w = &g_model->layers[s->layer].w;
    uint32_t m = PJC_MS[s->mi];
    const uint16_t *ref = g_y[s->layer][s->mi][s->variant];
    const uint16_t *Y = t->ys.p;
    size_t count = t->ys.size / 2;
    for (size_t e = 0; e < count; e++) {
        uint16_t want = PJC_POISON;
        if (e >= s->y_off) {
            uint64_t r = (e - s->y_off) / s->y_ld, c = (e - s->y_off) % s->y_ld;
            if (r < m && c < s->n)
                want = ref[r * w->n + c];
        }
        if (Y[e] != want) {
            snprintf(why, whylen,
                     "layer %u m %u n %u (x_off %llu x_ld %llu y_off %llu y_ld %llu): y element "
                     "%zu is 0x%04x, expected 0x%04x",
                     s->layer, m, s->n, (unsigned long long)s->x_off, (unsigned long long)s->x_ld,
                     (unsigned long long)s->y_off, (unsigned long long)s->y_ld, e, Y[e], want);
            return -1;
        }
    }
    return 0;
}

int pjc_run(pjc_conn *t, const pjc_shape *s, char *why, size_t whylen)
{
    pjc_stage(t, s);
    pj_op op = pjc_op(t, s);
    pj_done d;
    pj_op_result res[1];
    int rc = pjt_project(&t->c, 0, &op, 1, &d, res);
    if (rc != PJ_OK) {
        snprintf(why, whylen, "PROJECT layer %u m %u n %u: %s (%d): %s", s->layer, PJC_MS[s->mi],
                 s->n, rc > 0 ? pj_status_name(rc) : strerror(-rc), rc, rc > 0 ? t->c.err.msg : "");
        return -1;
    }
    if (d.status != PJ_OK || d.n_ops != 1 || res[0].status != PJ_OK) {
        snprintf(why, whylen, "DONE status %d, op status %d", d.status, res[0].status);
        return -1;
    }
    return pjc_verify(t, s, why, whylen);
}

int pjc_chain_pair(uint32_t *a, uint32_t *b)
{
    for (uint32_t i = 0; i < g_model->n_layers; i++)
        for (uint32_t j = 0; j < g_model->n_layers; j++)
            if (i != j && g_model->layers[i].max_n == g_model->layers[i].w.n &&
                g_model->layers[i].w.n == g_model->layers[j].w.k) {
                *a = i;
                *b = j;
                return 0;
            }
    return -1;
}

int pjc_run_chain(pjc_conn *t, uint32_t a, uint32_t b, uint32_t mi, uint32_t variant, char *why,
                  size_t whylen)
{
    const pj_weights *wa = &g_model->layers[a].w, *wb = &g_model->layers[b].w;
    uint32_t m = PJC_MS[mi];
    size_t need = ((size_t)m * wa->n + (size_t)m * wb->n) * 2;
    if (wa->n != wb->k || need > t->ys.size || (size_t)m * wa->k * 2 > t->xs.size) {
        snprintf(why, whylen, "chain: layers %u -> %u do not fit", a, b);
        return -1;
    }
    memcpy(t->xs.p, g_x[a][mi][variant], (size_t)m * wa->k * 2);
    memset(t->ys.p, 0xff, t->ys.size);
    pj_op ops[2] = {
        {.layer = a,
         .m = m,
         .n = wa->n,
         .x_buf = t->xid,
         .x_off = 0,
         .x_ld = wa->k,
         .y_buf = t->yid,
         .y_off = 0,
         .y_ld = wa->n},
        {.layer = b,
         .m = m,
         .n = wb->n,
         .x_buf = t->yid,
         .x_off = 0,
         .x_ld = wb->k,
         .y_buf = t->yid,
         .y_off = (uint64_t)m * wa->n * 2,
         .y_ld = wb->n},
    };
    pj_done d;
    pj_op_result res[2];
    int rc = pjt_project(&t->c, 0, ops, 2, &d, res);
    if (rc != PJ_OK || d.status != PJ_OK || res[0].status != PJ_OK || res[1].status != PJ_OK) {
        snprintf(why, whylen, "chain %u -> %u m %u: rc %d status %d: %s", a, b, m, rc,
                 rc == PJ_OK ? d.status : -1, rc > 0 ? t->c.err.msg : "");
        return -1;
    }
    uint16_t *yb = malloc((size_t)m * wb->n * 2);
    if (!yb) {
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    pj_ref_project(wb, m, wb->n, g_y[a][mi][variant], wa->n, yb, wb->n);
    const uint16_t *Y = t->ys.p;
    int bad = memcmp(Y, g_y[a][mi][variant], (size_t)m * wa->n * 2) != 0 ||
              memcmp(Y + (size_t)m * wa->n, yb, (size_t)m * wb->n * 2) != 0;
    for (size_t e = (size_t)m * (wa->n + wb->n); !bad && e < t->ys.size / 2; e++)
        bad = Y[e] != PJC_POISON;
    free(yb);
    if (bad) {
        snprintf(why, whylen, "chain %u -> %u m %u: result differs from the reference", a, b, m);
        return -1;
    }
    return 0;
}

int pjc_sanity(pjc_conn *t, char *why, size_t whylen)
{
    const pj_weights *w = &g_model->layers[0].w;
    pjc_shape s = {.layer = 0,
                   .mi = 1,
                   .variant = 0,
                   .n = g_model->layers[0].max_n,
                   .x_off = 0,
                   .x_ld = w->k,
                   .y_off = 0,
                   .y_ld = g_model->layers[0].max_n};
    return pjc_run(t, &s, why, whylen);
}
