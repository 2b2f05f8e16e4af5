/* projctl — talk to projd: status, layers, stats, one-off projections checked
 * against the CPU reference, model inspection and generation, and an IPC
 * latency table. Exit status: 0 ok, 1 failure (or a --check mismatch),
 * 2 usage error.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client/projd.h"
#include "config/config.h"
#include "daemon/inspect.h"
#include "daemon/model.h"
#include "daemon/modelgen.h"
#include "kernels/bf16.h"
#include "kernels/refgemm.h"

#define EXIT_USAGE 2

/* ---- options ----------------------------------------------------------------- */

typedef struct opts {
    /* global */
    const char *socket;
    const char *config;
    int timeout_ms;
    int help;
    /* commands */
    const char *cmd;
    const char *layer;
    long m, n;
    int check;
    uint64_t seed;
    long repeat;
    const char *model;
    int json;
    const char *out;
    const char *preset;
    long count;
    const char *positional;
    pj_config cfg;
} opts;

static const char *usage_main =
    "usage: projctl [--socket URL] [--config FILE] [--timeout MS] COMMAND [options]\n"
    "\n"
    "commands:\n"
    "  status                      is projd up: ping, backend, device, layers, uptime\n"
    "  layers                      the model's layers as the daemon serves them\n"
    "  stats [--json]              the daemon's counters\n"
    "  project --layer L --m M     one projection on random input, optionally checked\n"
    "  inspect MODEL [--json]      what a model file becomes when projd loads it\n"
    "  mkmodel --out PATH          write a generated model (safetensors)\n"
    "  bench-ipc [--count N]       round-trip latency table (PING, tiny projection)\n"
    "\n"
    "global options:\n"
    "  --socket URL   daemon socket (default: the config's socket.url, else $PROJD_SOCKET,\n"
    "                 else ipc:///run/projd/projd.sock if it exists, else\n"
    "                 ipc://$XDG_RUNTIME_DIR/projd/projd.sock, else "
    "ipc:///tmp/projd-<uid>/projd.sock)\n"
    "  --config FILE  config applied on top of the built-in defaults (as projd takes it)\n"
    "  --timeout MS   per-request timeout (default 30000)\n"
    "  --help         this text; `projctl COMMAND --help` for a command\n";

typedef struct cmd_help {
    const char *name;
    const char *text;
} cmd_help;

static const cmd_help helps[] = {
    {"status", "usage: projctl status\n"
               "  Pings projd and prints the round trip, backend, device, layer count,\n"
               "  limits and uptime.\n"},
    {"layers", "usage: projctl layers\n"
               "  The layers from WELCOME: index, name, n (rows a request may use), k, format,\n"
               "  and the m values with captured graphs.\n"},
    {"stats", "usage: projctl stats [--json]\n"
              "  The daemon's STATS document, flattened to one 'key value' line each, or\n"
              "  as the raw JSON with --json.\n"},
    {"project", "usage: projctl project --layer L --m M [--n N] [--check] [--model PATH]\n"
                "                       [--seed S] [--repeat R]\n"
                "  Allocates shared-memory x (M x K) and y (M x N), fills x with random bf16\n"
                "  (seeded), poisons y with 0xFFFF (NaN) before every run, runs R times and\n"
                "  prints the latency (client round trip and daemon time, p50 and min).\n"
                "  L is a layer name or index; N defaults to the layer's full n.\n"
                "  --check  compares y with the CPU reference computed from the model file\n"
                "           (--model PATH, else $PROJD_MODEL, else the config's model.path):\n"
                "           max abs error, relative error ||y-ref||/||ref||, bit-exact count and\n"
                "           mismatches; exit 1 on a mismatch. The cpu backend must be bit-exact;\n"
                "           other backends may differ by accumulation order (tolerance 2^-7\n"
                "           relative plus 1e-3 of the reference's rms).\n"},
    {"inspect", "usage: projctl inspect [MODEL] [--json]\n"
                "  Loads MODEL (default: $PROJD_MODEL, else the config's model.path) as projd\n"
                "  would, with the config's layer list, and reports each layer's stored format,\n"
                "  bytes and 12-bit exceptions. Needs no daemon.\n"},
    {"mkmodel", "usage: projctl mkmodel --out PATH [--preset reference|small] [--seed N]\n"
                "  Writes the generated model (default preset reference, seed 1). Same seed\n"
                "  and preset give the same bytes. Needs no daemon.\n"},
    {"bench-ipc", "usage: projctl bench-ipc [--count N]\n"
                  "  N round trips (default 2000) of PING and of a projection with m = 1 on\n"
                  "  the smallest layer; prints p50/p99/min in microseconds.\n"},
};

static const char *help_for(const char *cmd)
{
    for (size_t i = 0; i < sizeof helps / sizeof helps[0]; i++)
        if (strcmp(helps[i].name, cmd) == 0)
            return helps[i].text;
    return NULL;
}

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "projctl: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(see projctl --help)\n");
    return EXIT_USAGE;
}

static int parse_long(const char *name, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "projctl: %s: expected an integer in %ld..%ld, got \"%s\"\n", name, lo, hi,
                s);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_u64(const char *name, const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s || *end || s[0] == '-') {
        fprintf(stderr, "projctl: %s: expected an unsigned integer, got \"%s\"\n", name, s);
        return -1;
    }
    *out = v;
    return 0;
}

/* Options may come before or after the command. Returns 0 or EXIT_USAGE. */
static int parse_args(int argc, char **argv, opts *o)
{
    memset(o, 0, sizeof *o);
    o->timeout_ms = PROJD_DEFAULT_TIMEOUT_MS;
    o->seed = 1;
    o->repeat = 1;
    o->count = 2000;
    o->m = -1;
    o->n = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = NULL;
        char name[64];
        if (a[0] == '-' && a[1] == '-') {
            const char *eq = strchr(a, '=');
            size_t nl = eq ? (size_t)(eq - a) : strlen(a);
            if (nl >= sizeof name)
                return usage_error("unknown option %s", a);
            memcpy(name, a, nl);
            name[nl] = '\0';
            if (eq)
                val = eq + 1;
        } else if (strcmp(a, "-h") == 0) {
            snprintf(name, sizeof name, "--help");
        } else {
            if (!o->cmd)
                o->cmd = a;
            else if (!o->positional)
                o->positional = a;
            else
                return usage_error("unexpected argument %s", a);
            continue;
        }
        /* flags without a value */
        if (!strcmp(name, "--help") || !strcmp(name, "--check") || !strcmp(name, "--json")) {
            if (val)
                return usage_error("%s takes no value", name);
            if (!strcmp(name, "--help"))
                o->help = 1;
            else if (!strcmp(name, "--check"))
                o->check = 1;
            else
                o->json = 1;
            continue;
        }
        static const char *const with_value[] = {
            "--socket", "--config", "--timeout", "--layer",  "--m",     "--n", "--seed",
            "--repeat", "--model",  "--out",     "--preset", "--count", NULL};
        int known = 0;
        for (int k = 0; with_value[k]; k++)
            known |= !strcmp(name, with_value[k]);
        if (!known)
            return usage_error("unknown option %s", name);
        if (!val) {
            if (i + 1 >= argc)
                return usage_error("%s needs a value", name);
            val = argv[++i];
        }
        long v;
        if (!strcmp(name, "--socket"))
            o->socket = val;
        else if (!strcmp(name, "--config"))
            o->config = val;
        else if (!strcmp(name, "--timeout")) {
            if (parse_long(name, val, 1, 3600 * 1000, &v))
                return EXIT_USAGE;
            o->timeout_ms = (int)v;
        } else if (!strcmp(name, "--layer"))
            o->layer = val;
        else if (!strcmp(name, "--m")) {
            if (parse_long(name, val, 1, 1 << 20, &o->m))
                return EXIT_USAGE;
        } else if (!strcmp(name, "--n")) {
            if (parse_long(name, val, 1, 1 << 20, &o->n))
                return EXIT_USAGE;
        } else if (!strcmp(name, "--seed")) {
            if (parse_u64(name, val, &o->seed))
                return EXIT_USAGE;
        } else if (!strcmp(name, "--repeat")) {
            if (parse_long(name, val, 1, 10000000, &o->repeat))
                return EXIT_USAGE;
        } else if (!strcmp(name, "--model"))
            o->model = val;
        else if (!strcmp(name, "--out"))
            o->out = val;
        else if (!strcmp(name, "--preset"))
            o->preset = val;
        else if (!strcmp(name, "--count")) {
            if (parse_long(name, val, 1, 100000000, &o->count))
                return EXIT_USAGE;
        }
    }
    return 0;
}

/* ---- shared helpers ------------------------------------------------------------- */

static int load_config(opts *o)
{
    char err[1024];
    pj_config_defaults(&o->cfg);
    if (o->config && pj_config_apply_file(&o->cfg, o->config, err, sizeof err) != 0) {
        fprintf(stderr, "projctl: %s\n", err);
        return -1;
    }
    return 0;
}

/* --socket, else the config's socket.url when --config gave one, else the
 * library's default resolution. */
static const char *socket_url(const opts *o)
{
    if (o->socket)
        return o->socket;
    if (o->config && o->cfg.socket.url[0])
        return o->cfg.socket.url;
    return NULL;
}

static int connect_daemon(const opts *o, projd_conn **c)
{
    projd_error e;
    if (projd_connect(socket_url(o), "projctl", c, &e) != 0) {
        fprintf(stderr, "projctl: %s\n", e.msg);
        return -1;
    }
    projd_set_timeout_ms(*c, o->timeout_ms);
    return 0;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile of a sorted array. */
static double pct(const double *v, size_t n, double p)
{
    if (n == 0)
        return NAN;
    size_t r = (size_t)ceil(p * (double)n);
    if (r < 1)
        r = 1;
    if (r > n)
        r = n;
    return v[r - 1];
}

static void format_uuid(const uint8_t u[16], char *out, size_t len)
{
    int zero = 1;
    for (int i = 0; i < 16; i++)
        zero &= u[i] == 0;
    if (zero) {
        snprintf(out, len, "none");
        return;
    }
    snprintf(out, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
             u[14], u[15]);
}

/* Layer by name or by index; -1 with a message when absent. */
static int find_layer(projd_conn *c, const char *arg)
{
    int i = projd_layer_find(c, arg);
    if (i >= 0)
        return i;
    const projd_info *inf = projd_info_get(c);
    char *end;
    long v = strtol(arg, &end, 10);
    if (*arg && !*end && v >= 0 && (uint32_t)v < inf->n_layers)
        return (int)v;
    fprintf(stderr, "projctl: no layer \"%s\"; the daemon serves:", arg);
    for (uint32_t k = 0; k < inf->n_layers; k++)
        fprintf(stderr, " %s", inf->layers[k].name);
    fprintf(stderr, "\n");
    return -1;
}

/* ---- status, layers, stats --------------------------------------------------------- */

static int cmd_status(opts *o)
{
    projd_conn *c;
    if (connect_daemon(o, &c))
        return 1;
    projd_error e;
    uint64_t t0 = now_ns();
    int rc = projd_ping(c, &e);
    double rtt_us = (double)(now_ns() - t0) / 1e3;
    if (rc) {
        fprintf(stderr, "projctl: %s\n", e.msg);
        projd_close(c);
        return 1;
    }
    const projd_info *inf = projd_info_get(c);
    char uuid[64];
    format_uuid(inf->device_uuid, uuid, sizeof uuid);
    printf("projd at %s: up (ping %.1f us)\n", projd_url(c), rtt_us);
    printf("  protocol   v%u\n", inf->version);
    printf("  backend    %s\n", projd_backend_name(inf->backend));
    printf("  device     %s\n", uuid);
    printf("  layers     %u\n", inf->n_layers);
    printf("  limits     max_m %u, ops/request %u, buffers %u, message %u bytes\n", inf->max_m,
           inf->max_ops_per_request, inf->max_buffers, inf->max_message_bytes);
    char *json = NULL;
    if (projd_stats_json(c, &json, &e) == 0) {
        cJSON *doc = cJSON_Parse(json);
        cJSON *up = doc ? cJSON_GetObjectItemCaseSensitive(doc, "uptime_s") : NULL;
        if (cJSON_IsNumber(up)) {
            long s = (long)up->valuedouble;
            printf("  uptime     %ld s (%ldd %02ldh %02ldm %02lds)\n", s, s / 86400, s / 3600 % 24,
                   s / 60 % 60, s % 60);
        } else {
            printf("  uptime     unknown (no uptime_s in STATS)\n");
        }
        cJSON_Delete(doc);
        free(json);
    } else {
        printf("  uptime     unknown (STATS: %s)\n", e.msg);
    }
    projd_close(c);
    return 0;
}

static int cmd_layers(opts *o)
{
    projd_conn *c;
    if (connect_daemon(o, &c))
        return 1;
    const projd_info *inf = projd_info_get(c);
    printf("%-5s %-24s %8s %8s  %s\n", "index", "name", "n", "k", "format");
    for (uint32_t i = 0; i < inf->n_layers; i++) {
        const pj_wire_layer *l = &inf->layers[i];
        printf("%-5u %-24s %8u %8u  %s\n", i, l->name, l->n, l->k, projd_format_name(l->format));
    }
    printf("m: 1..%u; graphs captured for m in {", inf->max_m);
    for (uint32_t i = 0; i < inf->n_shapes; i++)
        printf("%s%u", i ? ", " : "", inf->shapes[i]);
    printf("}\n");
    projd_close(c);
    return 0;
}

/* One "key value" line per scalar; nested keys joined with '.', array
 * elements as key[i]; arrays of plain values on one line. */
static void flatten(const cJSON *j, char *key, size_t keylen, size_t at)
{
    if (cJSON_IsObject(j)) {
        for (const cJSON *ch = j->child; ch; ch = ch->next) {
            int n = snprintf(key + at, keylen - at, "%s%s", at ? "." : "", ch->string);
            size_t next = n < 0 ? at : at + (size_t)n;
            flatten(ch, key, keylen, next < keylen ? next : keylen - 1);
        }
        return;
    }
    if (cJSON_IsArray(j)) {
        int plain = 1;
        for (const cJSON *ch = j->child; ch; ch = ch->next)
            plain &= !cJSON_IsObject(ch) && !cJSON_IsArray(ch);
        if (plain) {
            printf("%-40s ", key);
            for (const cJSON *ch = j->child; ch; ch = ch->next) {
                char *s = cJSON_PrintUnformatted(ch);
                printf("%s%s", s ? s : "?", ch->next ? " " : "");
                free(s);
            }
            printf("\n");
            return;
        }
        int i = 0;
        for (const cJSON *ch = j->child; ch; ch = ch->next, i++) {
            int n = snprintf(key + at, keylen - at, "[%d]", i);
            size_t next = n < 0 ? at : at + (size_t)n;
            flatten(ch, key, keylen, next < keylen ? next : keylen - 1);
        }
        return;
    }
    if (cJSON_IsString(j)) {
        printf("%-40s %s\n", key, j->valuestring);
        return;
    }
    char *s = cJSON_PrintUnformatted(j);
    printf("%-40s %s\n", key, s ? s : "?");
    free(s);
}

static int cmd_stats(opts *o)
{
    projd_conn *c;
    if (connect_daemon(o, &c))
        return 1;
    projd_error e;
    char *json;
    int rc = projd_stats_json(c, &json, &e);
    projd_close(c);
    if (rc) {
        fprintf(stderr, "projctl: %s\n", e.msg);
        return 1;
    }
    if (o->json) {
        printf("%s\n", json);
        free(json);
        return 0;
    }
    cJSON *doc = cJSON_Parse(json);
    if (!doc) {
        fprintf(stderr, "projctl: STATS reply is not JSON; raw text follows\n%s\n", json);
        free(json);
        return 1;
    }
    char key[512] = "";
    flatten(doc, key, sizeof key, 0);
    cJSON_Delete(doc);
    free(json);
    return 0;
}

/* ---- project ------------------------------------------------------------------------ */

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* x: uniform in [-1, 1), as bf16. */
static void fill_random(uint16_t *x, size_t count, uint64_t seed)
{
    uint64_t s = seed;
    for (size_t i = 0; i < count; i++) {
        double u = (double)(splitmix64(&s) >> 11) * 0x1p-53;
        x[i] = pj_f32_to_bf16((float)(2.0 * u - 1.0));
    }
}

static void model_warn(void *ctx, const char *msg)
{
    (void)ctx;
    fprintf(stderr, "projctl: model: %s\n", msg);
}

static const char *model_path(const opts *o)
{
    if (o->model)
        return o->model;
    const char *env = getenv("PROJD_MODEL");
    if (env && env[0])
        return env;
    return o->cfg.model.path;
}

typedef struct check_result {
    double max_abs, rel;
    size_t exact, mismatches, total;
} check_result;

/* Compares y with ref (m x n, both row stride n). exact: any bit difference
 * is a mismatch; otherwise |y - ref| may be 2^-7 |ref| + 1e-3 rms(ref). A NaN
 * in y (the poison left in place) is always a mismatch. */
static check_result compare(const uint16_t *y, const uint16_t *ref, size_t count, int exact)
{
    check_result r = {0};
    double sum_d2 = 0, sum_r2 = 0;
    for (size_t i = 0; i < count; i++) {
        double b = pj_bf16_to_f32(ref[i]);
        sum_r2 += b * b;
    }
    double rms = count ? sqrt(sum_r2 / (double)count) : 0;
    for (size_t i = 0; i < count; i++) {
        double a = pj_bf16_to_f32(y[i]), b = pj_bf16_to_f32(ref[i]);
        double d = fabs(a - b);
        int same = y[i] == ref[i];
        r.exact += same;
        if (isnan(a) || isnan(b)) {
            if (!same)
                r.mismatches++;
            r.max_abs = INFINITY;
            continue;
        }
        sum_d2 += d * d;
        if (d > r.max_abs)
            r.max_abs = d;
        if (exact ? !same : d > 0x1p-7 * fabs(b) + 1e-3 * rms)
            r.mismatches++;
    }
    r.total = count;
    r.rel = sum_r2 > 0 ? sqrt(sum_d2) / sqrt(sum_r2) : (sum_d2 > 0 ? INFINITY : 0);
    if (r.max_abs == INFINITY)
        r.rel = NAN;
    return r;
}

static int cmd_project(opts *o)
{
    if (!o->layer || o->m < 0) {
        fputs(help_for("project"), stderr);
        return EXIT_USAGE;
    }
    projd_conn *c;
    if (connect_daemon(o, &c))
        return 1;
    int status = 1;
    projd_buffer *xb = NULL, *yb = NULL;
    pj_model *model = NULL;
    uint16_t *ref = NULL;
    double *lat = NULL, *dlat = NULL;
    projd_error e;
    const projd_info *inf = projd_info_get(c);
    int li = find_layer(c, o->layer);
    if (li < 0)
        goto out;
    const pj_wire_layer *L = &inf->layers[li];
    uint32_t m = (uint32_t)o->m, k = L->k;
    uint32_t n = o->n > 0 ? (uint32_t)o->n : L->n;

    /* The reference first: a wrong model path should fail before any work. */
    if (o->check) {
        pj_config cfg = o->cfg;
        snprintf(cfg.model.path, sizeof cfg.model.path, "%s", model_path(o));
        char err[1024];
        int rc = pj_model_load(&cfg, &model, model_warn, NULL, err, sizeof err);
        if (rc) {
            fprintf(stderr, "projctl: --check needs the model: %s\n", err);
            goto out;
        }
        int mi = pj_model_find(model, L->name);
        if (mi < 0) {
            fprintf(stderr, "projctl: --check: layer %s is not in %s with this config\n", L->name,
                    cfg.model.path);
            goto out;
        }
        const pj_weights *w = &model->layers[mi].w;
        if (w->k != k || w->n < n) {
            fprintf(stderr,
                    "projctl: --check: %s in %s is %u x %u, the daemon serves %u x %u: not the "
                    "same model\n",
                    L->name, cfg.model.path, w->n, w->k, L->n, k);
            goto out;
        }
    }

    size_t xcount = (size_t)m * k, ycount = (size_t)m * n;
    if (projd_shm_create(c, xcount * 2, &xb, &e) || projd_shm_create(c, ycount * 2, &yb, &e)) {
        fprintf(stderr, "projctl: %s\n", e.msg);
        goto out;
    }
    uint16_t *x = projd_buffer_ptr(xb), *y = projd_buffer_ptr(yb);
    fill_random(x, xcount, o->seed);
    projd_op op = {.layer = (uint32_t)li,
                   .m = m,
                   .n = n,
                   .x_buf = projd_buffer_id(xb),
                   .x_off = 0,
                   .x_ld = k,
                   .y_buf = projd_buffer_id(yb),
                   .y_off = 0,
                   .y_ld = n};
    lat = calloc((size_t)o->repeat, sizeof *lat);
    dlat = calloc((size_t)o->repeat, sizeof *dlat);
    if (!lat || !dlat) {
        fprintf(stderr, "projctl: out of memory\n");
        goto out;
    }
    projd_result res;
    for (long r = 0; r < o->repeat; r++) {
        memset(y, 0xff, ycount * 2); /* 0xFFFF: a NaN, so an unwritten element shows */
        int rc = projd_project(c, &op, 1, 0, &res, &e);
        if (rc) {
            /* The daemon's text usually names its code already. */
            const char *code = projd_strerror(rc);
            if (rc > 0 && !strstr(e.msg, code))
                fprintf(stderr, "projctl: %s (%s)\n", e.msg, code);
            else
                fprintf(stderr, "projctl: %s\n", e.msg);
            goto out;
        }
        lat[r] = (double)res.total_ns / 1e3;
        dlat[r] = (double)(res.queue_ns + res.exec_ns) / 1e3;
    }
    qsort(lat, (size_t)o->repeat, sizeof *lat, cmp_double);
    qsort(dlat, (size_t)o->repeat, sizeof *dlat, cmp_double);
    printf("layer %s (%u): m %u, n %u, k %u, %s backend, engine %u\n", L->name, li, m, n, k,
           projd_backend_name(inf->backend), res.ops[0].engine);
    printf("latency over %ld run%s: round trip p50 %.1f us, min %.1f us; daemon p50 %.1f us, "
           "min %.1f us\n",
           o->repeat, o->repeat == 1 ? "" : "s", pct(lat, (size_t)o->repeat, 0.5), lat[0],
           pct(dlat, (size_t)o->repeat, 0.5), dlat[0]);
    if (!o->check) {
        status = 0;
        goto out;
    }
    ref = malloc(ycount * 2);
    if (!ref) {
        fprintf(stderr, "projctl: out of memory for the reference\n");
        goto out;
    }
    const pj_weights *w = &model->layers[pj_model_find(model, L->name)].w;
    int rc = pj_ref_project(w, m, n, x, k, ref, n);
    if (rc) {
        fprintf(stderr, "projctl: reference projection failed: %s\n", strerror(-rc));
        goto out;
    }
    int exact = inf->backend == 1;
    check_result cr = compare(y, ref, ycount, exact);
    printf("check against the CPU reference (%s): max abs error %.3g, relative error %.3g\n",
           exact ? "bit-exact expected" : "tolerance", cr.max_abs, cr.rel);
    printf("  bit-exact %zu / %zu elements, mismatches %zu\n", cr.exact, cr.total, cr.mismatches);
    if (cr.mismatches) {
        printf("MISMATCH\n");
        goto out;
    }
    printf("OK\n");
    status = 0;
out:
    free(lat);
    free(dlat);
    free(ref);
    pj_model_free(model);
    projd_buffer_release(xb, NULL);
    projd_buffer_release(yb, NULL);
    projd_close(c);
    return status;
}

/* ---- inspect, mkmodel ----------------------------------------------------------------- */

static int cmd_inspect(opts *o)
{
    const char *path = o->positional ? o->positional : model_path(o);
    char err[1024];
    int rc = pj_inspect_print(stdout, &o->cfg, path, o->json, err, sizeof err);
    if (rc) {
        fprintf(stderr, "projctl: inspect: %s\n", err);
        return 1;
    }
    return 0;
}

static int cmd_mkmodel(opts *o)
{
    if (!o->out) {
        fputs(help_for("mkmodel"), stderr);
        return EXIT_USAGE;
    }
    pj_modelgen_opts g = {.seed = o->seed, .preset = PJ_MODELGEN_REFERENCE};
    if (o->preset) {
        g.preset = pj_modelgen_preset_from_name(o->preset);
        if (g.preset < 0)
            return usage_error("--preset: expected reference or small, got \"%s\"", o->preset);
    }
    char err[1024];
    uint64_t t0 = now_ns();
    int rc = pj_modelgen_write(o->out, &g, err, sizeof err);
    if (rc) {
        fprintf(stderr, "projctl: mkmodel: %s\n", err);
        return 1;
    }
    size_t nl;
    const pj_modelgen_layer *ls = pj_modelgen_layers(g.preset, &nl);
    printf("wrote %s: preset %s, seed %" PRIu64 ", %zu layers, %.1f s\n", o->out,
           pj_modelgen_preset_name(g.preset), g.seed, nl, (double)(now_ns() - t0) / 1e9);
    for (size_t i = 0; i < nl; i++)
        printf("  %-10s %-18s %5u x %-5u %s\n", ls[i].name, ls[i].tensor, ls[i].n, ls[i].k,
               ls[i].dtype == PJ_ST_F32 ? "f32" : "bf16");
    return 0;
}

/* ---- bench-ipc ------------------------------------------------------------------------ */

static void print_row(const char *what, double *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_double);
    printf("%-34s %8zu %9.1f %9.1f %9.1f\n", what, n, pct(v, n, 0.5), pct(v, n, 0.99), v[0]);
}

static int cmd_bench_ipc(opts *o)
{
    projd_conn *c;
    if (connect_daemon(o, &c))
        return 1;
    int status = 1;
    size_t count = (size_t)o->count, warm = count / 10 + 10;
    double *v = calloc(count, sizeof *v);
    projd_buffer *xb = NULL, *yb = NULL;
    projd_error e;
    if (!v)
        goto out;
    const projd_info *inf = projd_info_get(c);
    printf("projd at %s, %s backend; %zu round trips each (after %zu warm-up)\n", projd_url(c),
           projd_backend_name(inf->backend), count, warm);
    printf("%-34s %8s %9s %9s %9s\n", "request", "count", "p50 us", "p99 us", "min us");
    for (size_t i = 0; i < warm + count; i++) {
        uint64_t t0 = now_ns();
        if (projd_ping(c, &e)) {
            fprintf(stderr, "projctl: %s\n", e.msg);
            goto out;
        }
        if (i >= warm)
            v[i - warm] = (double)(now_ns() - t0) / 1e3;
    }
    print_row("PING", v, count);

    /* The smallest layer by weight bytes: the projection is as cheap as the
     * daemon gets, so the row is mostly IPC. */
    int best = -1;
    for (uint32_t i = 0; i < inf->n_layers; i++)
        if (best < 0 || (uint64_t)inf->layers[i].n * inf->layers[i].k <
                            (uint64_t)inf->layers[best].n * inf->layers[best].k)
            best = (int)i;
    if (best < 0) {
        printf("(no layers: no projection row)\n");
        status = 0;
        goto out;
    }
    const pj_wire_layer *L = &inf->layers[best];
    if (projd_shm_create(c, (size_t)L->k * 2, &xb, &e) ||
        projd_shm_create(c, (size_t)L->n * 2, &yb, &e)) {
        fprintf(stderr, "projctl: %s\n", e.msg);
        goto out;
    }
    fill_random(projd_buffer_ptr(xb), L->k, 1);
    projd_op op = {.layer = (uint32_t)best,
                   .m = 1,
                   .n = L->n,
                   .x_buf = projd_buffer_id(xb),
                   .x_ld = L->k,
                   .y_buf = projd_buffer_id(yb),
                   .y_ld = L->n};
    double *d = calloc(count, sizeof *d);
    if (!d)
        goto out;
    projd_result res;
    for (size_t i = 0; i < warm + count; i++) {
        if (projd_project(c, &op, 1, 0, &res, &e)) {
            fprintf(stderr, "projctl: %s\n", e.msg);
            free(d);
            goto out;
        }
        if (i >= warm) {
            v[i - warm] = (double)res.total_ns / 1e3;
            d[i - warm] = (double)(res.queue_ns + res.exec_ns) / 1e3;
        }
    }
    char what[128];
    snprintf(what, sizeof what, "PROJECT m=1 %s (%ux%u)", L->name, L->n, L->k);
    print_row(what, v, count);
    snprintf(what, sizeof what, "  of which in the daemon");
    print_row(what, d, count);
    free(d);
    status = 0;
out:
    free(v);
    projd_buffer_release(xb, NULL);
    projd_buffer_release(yb, NULL);
    projd_close(c);
    return status;
}

/* ---- main ------------------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc;
    if (!o.cmd) {
        fputs(usage_main, o.help ? stdout : stderr);
        return o.help ? 0 : EXIT_USAGE;
    }
    const char *h = help_for(o.cmd);
    if (!h)
        return usage_error("unknown command %s", o.cmd);
    if (o.help) {
        fputs(h, stdout);
        return 0;
    }
    if (o.positional && strcmp(o.cmd, "inspect") != 0)
        return usage_error("unexpected argument %s", o.positional);
    if (load_config(&o))
        return 1;
    if (!strcmp(o.cmd, "status"))
        return cmd_status(&o);
    if (!strcmp(o.cmd, "layers"))
        return cmd_layers(&o);
    if (!strcmp(o.cmd, "stats"))
        return cmd_stats(&o);
    if (!strcmp(o.cmd, "project"))
        return cmd_project(&o);
    if (!strcmp(o.cmd, "inspect"))
        return cmd_inspect(&o);
    if (!strcmp(o.cmd, "mkmodel"))
        return cmd_mkmodel(&o);
    return cmd_bench_ipc(&o);
}
