/* inspect.c — per-layer report of a loaded model (table or JSON). */
#include "daemon/inspect.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "daemon/hostmem.h"
#include "daemon/memplan.h"
#include "daemon/model.h"
#include "daemon/safetensors.h"
#include "kernels/dispatch.h"
#include "kernels/refgemm.h"

#define INSPECT_MAX_WARN 64
#define INSPECT_MAX_META 16

typedef struct warn_list {
    char *msg[INSPECT_MAX_WARN];
    size_t n, dropped;
} warn_list;

static void collect_warn(void *ctx, const char *msg)
{
    warn_list *w = ctx;
    if (w->n < INSPECT_MAX_WARN && (w->msg[w->n] = strdup(msg)) != NULL)
        w->n++;
    else
        w->dropped++;
}

/* Metadata strings come from the file: printable ASCII only, bounded. */
static void clean(const char *s, char *buf, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; s[i] && o + 4 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        buf[o++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    if (s[0] && o + 4 >= cap && strlen(s) > o) {
        memcpy(buf + o, "...", 3);
        o += 3;
    }
    buf[o] = '\0';
}

/* |w| a z12 window covers: e7 in [base, base + 7] is the biased exponent
 * range [2 base, 2 base + 15], i.e. [2^(2 base - 127), 2^(2 base - 111)).
 * Base 0 holds biased exponent 0 too: zeros and subnormals, so from 0. */
static int window_lo_exp(uint32_t base)
{
    return 2 * (int)base - 127;
}
static int window_hi_exp(uint32_t base)
{
    return 2 * (int)base + 16 - 127;
}

static const char *format_name(pj_format f)
{
    return f == PJ_FMT_BF16 ? "bf16" : f == PJ_FMT_Z12 ? "z12" : f == PJ_FMT_SPLIT ? "split" : "?";
}

/* PROJD_FORCE_ENGINE's engine name as the cuda backend would take it
 * (its knobs cut off), into buf; "" when unset, or when it names no engine
 * (projd would refuse to start; the plan ignores it, and says so). */
static const char *env_force_engine(char *buf, size_t len, int *bad)
{
    const char *fe = getenv("PROJD_FORCE_ENGINE");
    *bad = 0;
    snprintf(buf, len, "%.*s", fe ? (int)strcspn(fe, ":") : 0, fe ? fe : "");
    if (buf[0] && pj_eng_from_name(buf) < 0) {
        *bad = 1;
        buf[0] = 0;
    }
    return buf;
}

/* Host memory: what the layers hold, what a start needs free (the loader's
 * bound, daemon/model.h), and what this process could take before the
 * report's own load, so that an operator sees how many instances fit. */
typedef struct host_report {
    int known;         /* h was read */
    pj_hostmem h;      /* before the load */
    uint64_t held;     /* the loaded layers' stored bytes */
    uint64_t need;     /* the loader's bound: held at least, plus the largest conversion copy */
    uint64_t per_next; /* the bound's held part: what each further instance adds */
} host_report;

/* Instances that fit side by side in what was free: they load in turn
 * (daemon/loadturn.h), so one conversion copy at a time. */
static uint64_t instances_fit(const host_report *r)
{
    uint64_t copy = r->need - r->per_next;
    if (!r->known || !r->per_next || r->h.avail < r->need)
        return 0;
    return (r->h.avail - copy) / r->per_next;
}

/* A cgroup's memory.high leaves less than avail: the loader warns past it
 * (it throttles, it does not kill: daemon/hostmem.h). */
static int high_binds(const host_report *r)
{
    return r->known && r->h.high_set && r->h.high_room < r->h.avail;
}

static void print_host(FILE *out, const host_report *r)
{
    fprintf(out,
            "in host memory: the layers hold %s; a start needs at least %s free (the loader's "
            "check, with the largest layer's conversion copy)\n",
            pj_hostmem_size(r->held).s, pj_hostmem_size(r->need).s);
    if (!r->known) {
        fprintf(out, "  (the memory free to this process is not known: no MemAvailable)\n");
        return;
    }
    char where[384];
    pj_hostmem_describe(&r->h, where, sizeof where);
    const uint64_t n = instances_fit(r);
    fprintf(out,
            "  free to this process before this report loaded the model: %s (%s): room for %llu "
            "instance%s loading in turn\n",
            pj_hostmem_size(r->h.avail).s, where, (unsigned long long)n, n == 1 ? "" : "s");
    /* An operator's shell is not in a unit: its limits are not these. */
    if (r->h.cg_version)
        fprintf(out,
                "  (read in the cgroup %s, this command's own: a unit's MemoryMax= and "
                "MemoryHigh= are seen from inside it, as by systemd-run --scope -p "
                "MemoryMax=<size> projctl inspect ...)\n",
                r->h.own_cgroup);
    if (high_binds(r))
        fprintf(out,
                "  of it below the memory.high of the cgroup %s (%s, %s in use): %s; past that "
                "the kernel throttles the load\n",
                r->h.high_cgroup, pj_hostmem_size(r->h.high_limit).s,
                pj_hostmem_size(r->h.high_used).s, pj_hostmem_size(r->h.high_room).s);
}

static void print_plan(FILE *out, const pj_memplan *p, const char *force, int force_bad)
{
    const double mib = 1024.0 * 1024.0;
    fprintf(out,
            "on the cuda backend (shapes.max_m %u): weights take at least %.1f MiB of device "
            "memory: stored formats %.1f MiB + bf16 copies of %u of %u z12 layers %.1f MiB\n",
            p->max_m, (double)(p->stored + p->bf16_copies) / mib, (double)p->stored / mib,
            p->copied, p->z12_layers, (double)p->bf16_copies / mib);
    if (p->max_m > PJ_ENG_MAX_GEMV_M && p->bf16_copies > p->copies_decode)
        fprintf(out,
                "  (z12 layers keep a bf16 copy for m > %d; with shapes.max_m <= %d at least "
                "%.1f MiB, requests of m up to %d only)\n",
                PJ_ENG_MAX_GEMV_M, PJ_ENG_MAX_GEMV_M, (double)(p->stored + p->copies_decode) / mib,
                PJ_ENG_MAX_GEMV_M);
    if (force[0])
        fprintf(out, "  (counted with PROJD_FORCE_ENGINE=%s of this environment)\n", force);
    else if (force_bad)
        fprintf(out, "  (PROJD_FORCE_ENGINE of this environment names no engine: left out; projd "
                     "would refuse to start with it)\n");
}

static void print_text(FILE *out, const pj_model *m, const pj_st_file *st, const warn_list *wl,
                       const pj_memplan *plan, const char *force, int force_bad,
                       const host_report *host)
{
    fprintf(out, "model %s: %llu bytes, %u layers\n", m->path, (unsigned long long)m->file_bytes,
            m->n_layers);
    size_t nm = st ? pj_st_meta_count(st) : 0;
    for (size_t i = 0; i < nm && i < INSPECT_MAX_META; i++) {
        const char *k, *v;
        char ck[80], cv[160];
        pj_st_meta_at(st, i, &k, &v);
        clean(k, ck, sizeof ck);
        clean(v, cv, sizeof cv);
        fprintf(out, "  %s = %s\n", ck, cv);
    }
    fprintf(out, "load %.1f ms, convert + verify %.1f ms on %u thread%s\n\n", m->load_ms,
            m->convert_ms, m->load_threads, m->load_threads == 1 ? "" : "s");

    int wn = 5, wt = 6;
    for (uint32_t i = 0; i < m->n_layers; i++) {
        int a = (int)strlen(m->layers[i].name), b = (int)strlen(m->layers[i].tensor);
        wn = a > wn ? a : wn;
        wt = b > wt ? b : wt;
    }
    fprintf(out, "%-*s  %-*s  %13s  %5s  %-5s  %-6s  %12s  %12s  %6s  %10s  %8s  %-8s  %s\n", wn,
            "layer", wt, "tensor", "N x K", "max_n", "dtype", "stored", "stored bytes",
            "bf16 bytes", "ratio", "exceptions", "rate", "digest", "window");
    size_t tot_s = 0, tot_b = 0, tot_e = 0;
    for (uint32_t i = 0; i < m->n_layers; i++) {
        const pj_model_layer *L = &m->layers[i];
        char nk[32], win[80] = "-", exc[16] = "-", rate[16] = "-";
        snprintf(nk, sizeof nk, "%u x %u", L->w.n, L->w.k);
        if (L->w.fmt == PJ_FMT_Z12) {
            if (L->z_base == 0)
                snprintf(win, sizeof win, "e7 [0, 7]: |w| in [0, 2^%d)", window_hi_exp(0));
            else
                snprintf(win, sizeof win, "e7 [%u, %u]: |w| in [2^%d, 2^%d)", L->z_base,
                         L->z_base + 7, window_lo_exp(L->z_base), window_hi_exp(L->z_base));
            snprintf(exc, sizeof exc, "%u", L->n_exc);
            snprintf(rate, sizeof rate, "%.4f%%", 100.0 * L->exc_rate);
        }
        fprintf(out,
                "%-*s  %-*s  %13s  %5u  %-5s  %-6s  %12zu  %12zu  %6.4f  %10s  %8s  %08x  %s\n", wn,
                L->name, wt, L->tensor, nk, L->max_n, pj_st_dtype_name((pj_st_dtype)L->src_dtype),
                format_name(L->w.fmt), L->stored_bytes, L->bf16_bytes,
                (double)L->stored_bytes / (double)L->bf16_bytes, exc, rate, L->digest, win);
        tot_s += L->stored_bytes;
        tot_b += L->bf16_bytes;
        tot_e += L->n_exc;
    }
    fprintf(out, "%-*s  %-*s  %13s  %5s  %-5s  %-6s  %12zu  %12zu  %6.4f  %10zu\n", wn, "total", wt,
            "", "", "", "", "", tot_s, tot_b, (double)tot_s / (double)tot_b, tot_e);
    for (uint32_t i = 0; i < m->n_layers; i++) {
        const pj_model_layer *L = &m->layers[i];
        if (L->w.fmt == PJ_FMT_Z12 && L->n_exc)
            fprintf(out,
                    "%s: at most %u exceptions in one 16-row block (rows %u-%u), %.1f on "
                    "average%s\n",
                    L->name, L->blk_exc_max, L->blk_exc_max_row,
                    pj_model_layer_busiest_block_end(L), pj_model_layer_block_exc_mean(L),
                    pj_model_layer_heavy_block(L)
                        ? ": far above the rest, that block's CTA of the z12 GEMV finishes last; "
                          "a table tuned on other weights may run the z12 GEMV where cuBLAS is "
                          "faster here (tune on this model: deploy/README.md)"
                        : "");
    }
    print_host(out, host);
    print_plan(out, plan, force, force_bad);
    for (size_t i = 0; i < wl->n; i++)
        fprintf(out, "warning: %s\n", wl->msg[i]);
    if (wl->dropped)
        fprintf(out, "warning: %zu more warnings not shown\n", wl->dropped);
}

static int print_json(FILE *out, const pj_model *m, const pj_st_file *st, const warn_list *wl,
                      const pj_memplan *plan, const char *force, const host_report *host)
{
    cJSON *root = cJSON_CreateObject(), *meta, *layers, *total, *warns;
    if (!root)
        return -ENOMEM;
    cJSON_AddStringToObject(root, "model", m->path);
    cJSON_AddNumberToObject(root, "file_bytes", (double)m->file_bytes);
    cJSON_AddNumberToObject(root, "load_ms", m->load_ms);
    cJSON_AddNumberToObject(root, "convert_ms", m->convert_ms);
    cJSON_AddNumberToObject(root, "load_threads", m->load_threads);
    meta = cJSON_AddObjectToObject(root, "metadata");
    for (size_t i = 0; st && meta && i < pj_st_meta_count(st) && i < INSPECT_MAX_META; i++) {
        const char *k, *v;
        pj_st_meta_at(st, i, &k, &v);
        cJSON_AddStringToObject(meta, k, v);
    }
    layers = cJSON_AddArrayToObject(root, "layers");
    size_t tot_s = 0, tot_b = 0, tot_e = 0;
    for (uint32_t i = 0; layers && i < m->n_layers; i++) {
        const pj_model_layer *L = &m->layers[i];
        cJSON *l = cJSON_CreateObject();
        if (!l || !cJSON_AddItemToArray(layers, l)) {
            cJSON_Delete(l);
            break;
        }
        cJSON_AddStringToObject(l, "name", L->name);
        cJSON_AddStringToObject(l, "tensor", L->tensor);
        cJSON_AddNumberToObject(l, "n", L->w.n);
        cJSON_AddNumberToObject(l, "k", L->w.k);
        cJSON_AddNumberToObject(l, "max_n", L->max_n);
        cJSON_AddStringToObject(l, "dtype", pj_st_dtype_name((pj_st_dtype)L->src_dtype));
        cJSON_AddStringToObject(l, "format", format_name(L->w.fmt));
        char dg[12];
        snprintf(dg, sizeof dg, "%08x", L->digest);
        cJSON_AddStringToObject(l, "digest", dg);
        cJSON_AddNumberToObject(l, "stored_bytes", (double)L->stored_bytes);
        cJSON_AddNumberToObject(l, "bf16_bytes", (double)L->bf16_bytes);
        cJSON_AddNumberToObject(l, "ratio", (double)L->stored_bytes / (double)L->bf16_bytes);
        if (L->w.fmt == PJ_FMT_Z12) {
            cJSON_AddNumberToObject(l, "exceptions", L->n_exc);
            cJSON_AddNumberToObject(l, "exception_rate", L->exc_rate);
            cJSON_AddNumberToObject(l, "block_exceptions_max", L->blk_exc_max);
            cJSON_AddNumberToObject(l, "block_exceptions_max_row", L->blk_exc_max_row);
            cJSON_AddBoolToObject(l, "block_exceptions_heavy", pj_model_layer_heavy_block(L));
            cJSON *w = cJSON_AddObjectToObject(l, "window");
            if (w) {
                cJSON_AddNumberToObject(w, "base", L->z_base);
                cJSON_AddNumberToObject(w, "e7_last", L->z_base + 7);
                cJSON_AddNumberToObject(w, "exp2_min", window_lo_exp(L->z_base));
                cJSON_AddNumberToObject(w, "exp2_max", window_hi_exp(L->z_base));
                /* exp2_min is the window's smallest normal; base 0 also
                 * takes 0 and the subnormals. */
                cJSON_AddBoolToObject(w, "covers_zero", L->z_base == 0);
            }
        } else {
            cJSON_AddNumberToObject(l, "exceptions", 0);
            cJSON_AddNumberToObject(l, "exception_rate", 0);
            cJSON_AddNullToObject(l, "window");
        }
        if (L->engine[0])
            cJSON_AddStringToObject(l, "engine", L->engine);
        if (L->tuned_as[0])
            cJSON_AddStringToObject(l, "tuned_as", L->tuned_as);
        tot_s += L->stored_bytes;
        tot_b += L->bf16_bytes;
        tot_e += L->n_exc;
    }
    total = cJSON_AddObjectToObject(root, "total");
    if (total) {
        cJSON_AddNumberToObject(total, "stored_bytes", (double)tot_s);
        cJSON_AddNumberToObject(total, "bf16_bytes", (double)tot_b);
        cJSON_AddNumberToObject(total, "ratio", (double)tot_s / (double)tot_b);
        cJSON_AddNumberToObject(total, "exceptions", (double)tot_e);
    }
    cJSON *hm = cJSON_AddObjectToObject(root, "host_memory");
    if (hm) {
        cJSON_AddNumberToObject(hm, "held_bytes", (double)host->held);
        cJSON_AddNumberToObject(hm, "start_bytes", (double)host->need);
        if (host->known) {
            cJSON_AddNumberToObject(hm, "available_bytes", (double)host->h.avail);
            cJSON_AddNumberToObject(hm, "swap_bytes", (double)host->h.swap);
            cJSON_AddNumberToObject(hm, "instances", (double)instances_fit(host));
        } else {
            cJSON_AddNullToObject(hm, "available_bytes");
            cJSON_AddNullToObject(hm, "swap_bytes");
            cJSON_AddNullToObject(hm, "instances");
        }
        if (host->known && host->h.cg_version)
            cJSON_AddStringToObject(hm, "cgroup_read", host->h.own_cgroup);
        else
            cJSON_AddNullToObject(hm, "cgroup_read");
        if (host->known && host->h.cg_binds) {
            cJSON_AddStringToObject(hm, "cgroup", host->h.cgroup);
            cJSON_AddNumberToObject(hm, "cgroup_limit_bytes", (double)host->h.cg_limit);
        } else {
            cJSON_AddNullToObject(hm, "cgroup");
            cJSON_AddNullToObject(hm, "cgroup_limit_bytes");
        }
        if (high_binds(host)) {
            cJSON_AddStringToObject(hm, "memory_high_cgroup", host->h.high_cgroup);
            cJSON_AddNumberToObject(hm, "memory_high_room_bytes", (double)host->h.high_room);
        } else {
            cJSON_AddNullToObject(hm, "memory_high_cgroup");
            cJSON_AddNullToObject(hm, "memory_high_room_bytes");
        }
    }
    cJSON *dev = cJSON_AddObjectToObject(root, "cuda_weights");
    if (dev) {
        cJSON_AddNumberToObject(dev, "max_m", plan->max_m);
        cJSON_AddNumberToObject(dev, "bytes", (double)(plan->stored + plan->bf16_copies));
        cJSON_AddNumberToObject(dev, "stored_bytes", (double)plan->stored);
        cJSON_AddNumberToObject(dev, "bf16_copy_bytes", (double)plan->bf16_copies);
        cJSON_AddNumberToObject(dev, "z12_layers", plan->z12_layers);
        cJSON_AddNumberToObject(dev, "z12_layers_copied", plan->copied);
        cJSON_AddNumberToObject(dev, "bf16_copy_bytes_max_m_32", (double)plan->copies_decode);
        if (force[0])
            cJSON_AddStringToObject(dev, "force_engine", force);
    }
    warns = cJSON_AddArrayToObject(root, "warnings");
    for (size_t i = 0; warns && i < wl->n; i++)
        cJSON_AddItemToArray(warns, cJSON_CreateString(wl->msg[i]));
    char *s = cJSON_Print(root);
    cJSON_Delete(root);
    if (!s)
        return -ENOMEM;
    fprintf(out, "%s\n", s);
    free(s);
    return 0;
}

int pj_inspect_print(FILE *out, const pj_config *cfg, const char *model_path, int json, char *err,
                     size_t errlen)
{
    pj_config *c = malloc(sizeof *c);
    if (!c) {
        snprintf(err, errlen, "inspect: out of memory");
        return -ENOMEM;
    }
    if (cfg)
        *c = *cfg;
    else
        pj_config_defaults(c);
    if (model_path)
        snprintf(c->model.path, sizeof c->model.path, "%s", model_path);

    warn_list wl = {0};
    pj_model *m = NULL;
    pj_st_file *st = NULL;
    /* The file the load read, kept for its metadata: opening the path
     * again could report another file's (one put there since). */
    host_report host = {0};
    host.known = pj_hostmem_read(pj_model_host_root(), &host.h) == 0;
    int rc = pj_model_load_file(c, &m, &st, collect_warn, &wl, err, errlen);
    if (rc == 0) {
        pj_model_host_need need;
        pj_model_host_need_of(c, st, &need);
        host.need = need.held + need.transient;
        host.per_next = need.held;
        for (uint32_t i = 0; i < m->n_layers; i++)
            host.held += m->layers[i].stored_bytes;
        pj_memplan plan;
        char force[PJ_CFG_NAME];
        int force_bad;
        pj_memplan_weights(m, c->shapes.max_m, env_force_engine(force, sizeof force, &force_bad),
                           &plan);
        if (json)
            rc = print_json(out, m, st, &wl, &plan, force, &host);
        else
            print_text(out, m, st, &wl, &plan, force, force_bad, &host);
        if (rc)
            snprintf(err, errlen, "inspect: out of memory rendering JSON");
        else if (fflush(out) != 0 || ferror(out)) {
            rc = -EIO;
            snprintf(err, errlen, "inspect: cannot write the report");
        }
    }
    pj_st_close(st);
    pj_model_free(m);
    for (size_t i = 0; i < wl.n; i++)
        free(wl.msg[i]);
    free(c);
    return rc;
}
