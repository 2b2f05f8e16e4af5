/* projctl — talk to projd: status, layers, stats, one-off projections checked
 * against the CPU reference, model inspection and generation, and an IPC
 * latency table. Exit status: 0 ok, 1 failure (or a --check mismatch),
 * 2 usage error (also an invalid --config file, as projd and projload).
 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "client/projd.h"
#include "config/config.h"
#include "config/replacefile.h"
#include "daemon/inspect.h"
#include "client/metrics.h"
#include "client/servedmodel.h"
#include "client/statsview.h"
#include "daemon/model.h"
#include "daemon/modelgen.h"
#include "kernels/bf16.h"
#include "kernels/refgemm.h"
#include "protocol/sockpath.h"
#include "protocol/version.h"

#define EXIT_USAGE 2

/* ---- options ----------------------------------------------------------------- */

typedef struct opts {
    /* global */
    const char *socket;
    long instance; /* --instance N: ipc:///run/projd/projd-N.sock; -1 none */
    const char *config;
    int timeout_ms;
    int help;
    int version;
    const char *once_given[24]; /* the global options' values, by place in parse_args' list */
    /* commands */
    const char *cmd;
    const char *layer;
    long m, n;
    int check;
    uint64_t seed;
    long repeat;
    const char *model;
    int json;
    int all;   /* stats: every entry of the long lists */
    int force; /* mkmodel: replace a file that is there */
    const char *out;
    const char *preset;
    const char *transport; /* bench-ipc: nng, ring or both */
    long count;
    long gap_us; /* bench-ipc: host work before each timed request */
    const char *positional;
    pj_metrics_labels labels; /* metrics: --label K=V, each */
    /* The command options given (not the global ones), checked against the
     * command once it is known: options may come before it. */
    const char *given[32];
    int n_given;
    pj_config cfg;
} opts;

static const char *usage_main =
    "usage: projctl [--socket URL | --instance N] [--config FILE] [--timeout MS] COMMAND\n"
    "               [options]\n"
    "       projctl --version | --help\n"
    "\n"
    "commands:\n"
    "  status [--json]             is projd up: ping, version, backend, device, layers,\n"
    "                              uptime\n"
    "  layers [--json]             the model's layers as the daemon serves them\n"
    "  stats [--json] [--all]      the daemon's counters\n"
    "  metrics [--out FILE]        the counters as Prometheus text (node_exporter's\n"
    "          [--label K=V]       textfile collector)\n"
    "  project --layer L --m M     one projection on random input, optionally checked\n"
    "  inspect [MODEL] [--json]    what a model file becomes when projd loads it\n"
    "  mkmodel --out PATH          write a generated model (safetensors)\n"
    "  bench-ipc [--count N]       round-trip latency table (PING, tiny projection), nng\n"
    "            [--transport T]   and the shared-memory ring side by side; --gap-us G\n"
    "            [--gap-us G]      puts G us of host work before each request; --out\n"
    "            [--out FILE]      writes the table as JSON\n"
    "\n"
    "global options:\n"
    "  --socket URL   daemon socket (default: the config's socket.url, else $PROJD_SOCKET,\n"
    "                 else ipc:///run/projd/projd.sock if a daemon listens there, else your\n"
    "                 own ipc://$XDG_RUNTIME_DIR/projd/projd.sock (or\n"
    "                 ipc:///tmp/projd-<uid>/projd.sock) if a daemon listens there, else\n"
    "                 the one /run/projd/projd-<N>.sock listened on (several: an error\n"
    "                 that lists them), else /run/projd/projd.sock if the file is there)\n"
    "  -i, --instance N\n"
    "                 the instance of projd@N.service: ipc:///run/projd/projd-N.sock\n"
    "                 (not with --socket; wins over the config's socket.url)\n"
    "  --config FILE  config applied on top of the built-in defaults (as projd takes it)\n"
    "  --timeout MS   timeout of the connect (HELLO, WELCOME, retries) and of every\n"
    "                 request (default 30000): a hung daemon fails within MS, so\n"
    "                 `projctl --timeout 1000 status` serves as a health check; a\n"
    "                 stopped process (SIGSTOP) holds the dial for nng's 10 s\n"
    "  --version      projctl's version\n"
    "  --help         this text; `projctl COMMAND --help` for a command\n"
    "\n"
    "exit status:\n"
    "  0  success\n"
    "  1  failure: projd not reachable or not answering in time, a request it refused,\n"
    "     a --check mismatch, output that could not be written\n"
    "  2  usage error: an unknown command or option, a bad value, an invalid --config\n"
    "     file (as projd and projload)\n";

typedef struct cmd_help {
    const char *name;
    const char *options; /* the command options it takes, each followed by a space */
    const char *text;
} cmd_help;

static const cmd_help helps[] = {
    {"status", "--json ",
     "usage: projctl status [--json]\n"
     "  Pings projd and prints the round trip, the daemon's version, backend,\n"
     "  device (the GPU's uuid and name; on the cpu backend its description),\n"
     "  layer count, limits and uptime. --json: the daemon's STATS document with\n"
     "  an object \"projctl\" added (url, ping_us, protocol, device_uuid, layers,\n"
     "  limits: what WELCOME and the ping said).\n"
     "  Exit 0 when projd answers, a refusal at a connection limit included (the\n"
     "  daemon is up and busy: said on stdout, and as {\"projctl\": {\"up\": true,\n"
     "  \"refused\": \"E_LIMIT\"}} with --json); 1 when it is missing, draining,\n"
     "  stopped or hung (bound the wait with --timeout MS).\n"},
    {"layers", "--json ",
     "usage: projctl layers [--json]\n"
     "  The layers from WELCOME: index, name, n (rows a request may use), k, format,\n"
     "  and, on the cuda backend, the m values with captured CUDA graphs. --json: a\n"
     "  JSON array of {index, name, n, k, format}.\n"},
    {"stats", "--json --all ",
     "usage: projctl stats [--json] [--all]\n"
     "  The daemon's STATS document, flattened to one 'key value' line each, or\n"
     "  as the raw JSON with --json. A model of more than 32 layers makes three\n"
     "  lists long, and they are summarized unless --all is given: model.layers\n"
     "  by its count (projctl layers lists them), the per-layer counters (layers.*)\n"
     "  by the layers that served requests, and backend_stats.engines by the\n"
     "  number of (layer, m) rows each engine has; a last line says what was left\n"
     "  out.\n"},
    {"metrics", "--out --label ",
     "usage: projctl metrics [--out FILE] [--label KEY=VALUE]...\n"
     "  The daemon's STATS as Prometheus text (exposition format 0.0.4): counters\n"
     "  end in _total, times are seconds, sizes bytes; request and per-layer\n"
     "  latencies are summaries (quantiles 0.5 and 0.99 since the start, with\n"
     "  _sum and _count), backend_stats is flattened to projd_backend_* (times\n"
     "  in seconds; a field this build does not know is untyped).\n"
     "  projd_errors_total has every status code and projd_requests_total every\n"
     "  request type, at 0 until its first.\n"
     "  projd_up is 1, or 0 (and nothing else) when projd does not answer, so an\n"
     "  alert on it fires instead of the series going stale; the exit status is\n"
     "  then 1. A daemon that refuses the connection (at limits.max_connections\n"
     "  or max_connections_per_uid, or draining) did answer: projd_up 1 and\n"
     "  projd_scrape_refused{reason=\"E_LIMIT\"} 1 (or E_SHUTDOWN) instead of the\n"
     "  other series, exit 0. --label adds a constant label to every series (gpu=0 when one\n"
     "  node_exporter collects several daemons; repeatable). --out writes FILE\n"
     "  whole or not at all (a temporary file renamed over it, mode 0644), as\n"
     "  node_exporter's textfile collector needs: e.g. --out\n"
     "  /var/lib/prometheus/node-exporter/projd-0.prom (deploy/README.md, the\n"
     "  projd-metrics@.timer).\n"},
    {"project", "--layer --m --n --check --model --seed --repeat ",
     "usage: projctl project --layer L --m M [--n N] [--check] [--model PATH]\n"
     "                       [--seed S] [--repeat R]\n"
     "  Allocates shared-memory x (M x K) and y (M x N), fills x with random bf16\n"
     "  (seeded), poisons y with 0xFFFF (NaN) before every run, runs R times and\n"
     "  prints the latency (client round trip and daemon time, p50 and min).\n"
     "  L is a layer name or index; N defaults to the layer's full n.\n"
     "  --check  compares y with the CPU reference computed from the model file\n"
     "           (--model PATH, else $PROJD_MODEL, else --config's model.path, else\n"
     "           the file the daemon serves, from its STATS), read with --config's\n"
     "           model.layers, else the daemon's (STATS); a file whose layer is\n"
     "           not the daemon's (its digest) is said as such, exit 1:\n"
     "           max abs error, relative error ||y-ref||/||ref||, bit-exact count and\n"
     "           mismatches; exit 1 on a mismatch. The cpu backend must be bit-exact;\n"
     "           other backends may differ by accumulation order (tolerance 2^-7\n"
     "           relative plus 1e-3 of the reference's rms).\n"},
    {"inspect", "--json --model ",
     "usage: projctl inspect [MODEL] [--json]\n"
     "  Loads MODEL (else --model PATH, $PROJD_MODEL, the config's model.path) as projd\n"
     "  would, with the config's layer list, and reports each layer's stored format,\n"
     "  bytes and 12-bit exceptions; the host memory the layers hold, what a start\n"
     "  needs free, what this process may take (a memory cgroup's limit counted) and\n"
     "  how many instances that leaves room for; the device memory the weights take\n"
     "  on the cuda backend. Needs no daemon.\n"},
    {"mkmodel", "--out --preset --seed --force ",
     "usage: projctl mkmodel --out PATH [--preset reference|small] [--seed N] [--force]\n"
     "  Writes the generated model (default preset reference, seed 1). Same seed\n"
     "  and preset give the same bytes. Needs no daemon.\n"
     "  A file already at PATH is left alone (exit 1) unless --force: PATH may be\n"
     "  a real model.\n"},
    {"bench-ipc", "--count --transport --gap-us --out ",
     "usage: projctl bench-ipc [--count N] [--transport nng|ring|both] [--gap-us G]\n"
     "                        [--out FILE]\n"
     "  N round trips (default 2000) of PING and of a projection with m = 1 on\n"
     "  the smallest layer, over nng and over a shared-memory ring (default\n"
     "  both, on two connections, in alternating blocks); prints p50/p99/min in\n"
     "  microseconds and the nng/ring ratio; --out writes them as JSON. The\n"
     "  projection's time in the daemon is split off, and of that the time\n"
     "  before the backend starts (on a ring: the poller's hand-off to the loop).\n"
     "  --gap-us G: G microseconds of busy host work before each request (default\n"
     "  0, back to back), as a client that computes between projections: the\n"
     "  daemon's threads that stop spinning within G must be woken.\n"
     "  $PROJD_RING is ignored: this command picks each connection's transport.\n"
     "  A daemon that offers no ring (ring.enabled 0) is timed over nng alone,\n"
     "  with a note, unless --transport ring asked for the ring.\n"},
};

static const cmd_help *cmd_find(const char *cmd)
{
    for (size_t i = 0; i < sizeof helps / sizeof helps[0]; i++)
        if (strcmp(helps[i].name, cmd) == 0)
            return &helps[i];
    return NULL;
}

static const char *help_for(const char *cmd)
{
    const cmd_help *h = cmd_find(cmd);
    return h ? h->text : NULL;
}

/* 1 when the command takes option name (e.g. "--json"). */
static int cmd_takes(const cmd_help *h, const char *name)
{
    size_t len = strlen(name);
    for (const char *p = h->options; (p = strstr(p, name)) != NULL; p += len)
        if ((p == h->options || p[-1] == ' ') && p[len] == ' ')
            return 1;
    return 0;
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
    /* decimal, or hex after 0x; not octal: base 0 took "010" for 8 */
    const int hex = s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
    unsigned long long v = strtoull(s, &end, hex ? 16 : 10);
    /* strtoull skips blanks and wraps a sign: " -1" would be 2^64 - 1. */
    if (errno || end == s || *end || !isdigit((unsigned char)s[0])) {
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
    o->instance = -1;
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
        } else if (strcmp(a, "-i") == 0) {
            snprintf(name, sizeof name, "--instance");
        } else {
            if (!o->cmd)
                o->cmd = a;
            else if (!o->positional)
                o->positional = a;
            else
                return usage_error("unexpected argument %s", a);
            continue;
        }
        /* Every option but the global ones belongs to a command; main
         * checks that the command takes it. Each name is kept once: there
         * are fewer command options than slots. */
        if (strcmp(name, "--help") && strcmp(name, "--socket") && strcmp(name, "--config") &&
            strcmp(name, "--timeout") && strcmp(name, "--instance") && strcmp(name, "--version")) {
            size_t nl = strlen(name);
            int seen = 0;
            for (int g = 0; g < o->n_given; g++) {
                char after = o->given[g][strnlen(o->given[g], nl)];
                seen |= !strncmp(o->given[g], name, nl) && (after == '\0' || after == '=');
            }
            if (!seen && o->n_given < (int)(sizeof o->given / sizeof o->given[0]))
                o->given[o->n_given++] = a;
        }
        /* flags without a value */
        if (!strcmp(name, "--help") || !strcmp(name, "--check") || !strcmp(name, "--json") ||
            !strcmp(name, "--version") || !strcmp(name, "--all") || !strcmp(name, "--force")) {
            if (val)
                return usage_error("%s takes no value", name);
            if (!strcmp(name, "--help"))
                o->help = 1;
            else if (!strcmp(name, "--version"))
                o->version = 1;
            else if (!strcmp(name, "--check"))
                o->check = 1;
            else if (!strcmp(name, "--all"))
                o->all = 1;
            else if (!strcmp(name, "--force"))
                o->force = 1;
            else
                o->json = 1;
            continue;
        }
        /* The first four are the global options that take one value. */
        static const char *const with_value[] = {
            "--socket", "--instance",  "--config", "--timeout", "--layer", "--m",
            "--n",      "--seed",      "--repeat", "--model",   "--out",   "--preset",
            "--count",  "--transport", "--gap-us", "--label",   NULL};
        _Static_assert(sizeof with_value / sizeof with_value[0] <=
                           sizeof o->once_given / sizeof o->once_given[0],
                       "opts.once_given has a place for every option with a value");
        int known = -1;
        for (int k = 0; with_value[k]; k++)
            if (!strcmp(name, with_value[k]))
                known = k;
        if (known < 0)
            return usage_error("unknown option %s", name);
        if (!val) {
            if (i + 1 >= argc)
                return usage_error("%s needs a value", name);
            val = argv[++i];
        }
        /* Where to find the daemon and how to read it take one value: given
         * twice differently, the last would win without a word (a second
         * --config replaced the first). A command's options keep the last
         * value given (--m 1 --m=3 is m 3), and --label adds. */
        if (known < 4) {
            const char *before = o->once_given[known];
            if (before && strcmp(before, val)) {
                char twice[700];
                snprintf(twice, sizeof twice,
                         "%s given twice (\"%s\", then \"%s\"): it takes one %s", name, before, val,
                         strcmp(name, "--config") ? "value" : "file");
                return usage_error("%s", twice);
            }
            o->once_given[known] = val;
        }
        long v;
        if (!strcmp(name, "--socket")) {
            if (!*val)
                return usage_error("%s \"\": empty; give ipc://PATH or a PATH, or leave it out "
                                   "for the default",
                                   name);
            o->socket = val;
        } else if (!strcmp(name, "--instance")) {
            if (parse_long(name, val, 0, 999999999, &o->instance))
                return EXIT_USAGE;
        } else if (!strcmp(name, "--config"))
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
        } else if (!strcmp(name, "--gap-us")) {
            if (parse_long(name, val, 0, 1000000, &o->gap_us))
                return EXIT_USAGE;
        } else if (!strcmp(name, "--transport"))
            o->transport = val;
        else if (!strcmp(name, "--label")) {
            char err[256];
            if (pj_metrics_label_add(&o->labels, val, err, sizeof err))
                return usage_error("--label: %s", err);
        }
    }
    if (o->socket && o->instance >= 0)
        return usage_error("%s", "--socket and --instance both name the socket: give one");
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

/* --socket, else --instance, else the config's socket.url when --config
 * gave one, else NULL: the library's default resolution (whose messages
 * say which step chose the URL). *how says where the URL came from, for
 * messages ("" for the default). */
static const char *socket_url(const opts *o, char *buf, size_t len, char *how, size_t howlen)
{
    how[0] = '\0';
    if (o->socket) {
        snprintf(how, howlen, "--socket");
        return o->socket;
    }
    if (o->instance >= 0) {
        char err[256];
        snprintf(how, howlen, "--instance %ld", o->instance);
        if (pj_sockpath_instance((unsigned)o->instance, buf, len, err, sizeof err) == 0)
            return buf;
    }
    if (o->config && o->cfg.socket.url[0]) {
        snprintf(how, howlen, "socket.url of --config %s", o->config);
        return o->cfg.socket.url;
    }
    return NULL;
}

/* The connect (dial, HELLO, WELCOME) and every request after it are bounded
 * by --timeout. */
static int connect_daemon(const opts *o, projd_conn **c)
{
    projd_error e;
    char buf[256], how[PJ_CFG_PATH + 64];
    const char *url = socket_url(o, buf, sizeof buf, how, sizeof how);
    int rc = projd_connect_timeout(url, "projctl", o->timeout_ms, c, &e);
    if (rc != 0)
        fprintf(stderr, "projctl: %s%s%s\n", e.msg, how[0] ? "; the URL is from " : "", how);
    return rc;
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
    if (*arg && !*end && v >= 0 && (uint32_t)v < pj_welcome_n_layers(inf))
        return (int)v;
    /* A whole model's projections are hundreds of names: the first few
     * show how they are spelled, `projctl layers` lists them all. */
    const uint32_t nl = pj_welcome_n_layers(inf), shown = nl > 16 ? 12 : nl;
    fprintf(stderr, "projctl: no layer \"%s\"; the daemon serves:", arg);
    for (uint32_t k = 0; k < shown; k++)
        fprintf(stderr, " %s", pj_welcome_layers(inf)[k].name);
    if (shown < nl)
        fprintf(stderr, " ... (%u in all: projctl layers)", nl);
    fprintf(stderr, "\n");
    return -1;
}

/* ---- status, layers, stats --------------------------------------------------------- */

/* status --json: the STATS document with what WELCOME and the ping said
 * under "projctl". 0 or 1 (message printed). */
static int status_json(projd_conn *c, const char *json, double rtt_us)
{
    const projd_info *inf = projd_info_get(c);
    cJSON *doc = cJSON_Parse(json);
    if (!cJSON_IsObject(doc)) {
        fprintf(stderr, "projctl: STATS reply is not a JSON object; raw text follows\n%s\n", json);
        cJSON_Delete(doc);
        return 1;
    }
    char uuid[64];
    format_uuid(inf->device_uuid, uuid, sizeof uuid);
    cJSON *pc = cJSON_AddObjectToObject(doc, "projctl");
    cJSON *l = pc ? cJSON_AddObjectToObject(pc, "limits") : NULL;
    int ok = l && cJSON_AddStringToObject(pc, "url", projd_url(c)) &&
             cJSON_AddNumberToObject(pc, "ping_us", rtt_us) &&
             cJSON_AddNumberToObject(pc, "protocol", inf->version) &&
             (strcmp(uuid, "none") ? cJSON_AddStringToObject(pc, "device_uuid", uuid)
                                   : cJSON_AddNullToObject(pc, "device_uuid")) &&
             cJSON_AddNumberToObject(pc, "layers", pj_welcome_n_layers(inf)) &&
             cJSON_AddNumberToObject(l, "max_m", inf->max_m) &&
             cJSON_AddNumberToObject(l, "max_ops_per_request", inf->max_ops_per_request) &&
             cJSON_AddNumberToObject(l, "max_buffers", inf->max_buffers) &&
             cJSON_AddNumberToObject(l, "max_message_bytes", inf->max_message_bytes);
    char *text = ok ? cJSON_PrintUnformatted(doc) : NULL;
    cJSON_Delete(doc);
    if (!text) {
        fprintf(stderr, "projctl: out of memory for the status document\n");
        return 1;
    }
    printf("%s\n", text);
    free(text);
    return 0;
}

/* status's connections line: open (closing) of the limit, and refusals
 * since the start, which the daemon's log explains one by one. Nothing
 * from a daemon whose STATS has no limit (before it said one). */
static void print_connections(const cJSON *cn)
{
    const cJSON *cur = cJSON_GetObjectItemCaseSensitive(cn, "current");
    const cJSON *lim = cJSON_GetObjectItemCaseSensitive(cn, "limit");
    if (!cJSON_IsNumber(cur) || !cJSON_IsNumber(lim))
        return;
    const cJSON *cl = cJSON_GetObjectItemCaseSensitive(cn, "closing");
    const cJSON *per = cJSON_GetObjectItemCaseSensitive(cn, "limit_per_uid");
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(cn, "refused");
    const double n_cl = cJSON_IsNumber(cl) ? cl->valuedouble : 0;
    const double n_per = cJSON_IsNumber(per) ? per->valuedouble : 0;
    const double n_ref = cJSON_IsNumber(ref) ? ref->valuedouble : 0;
    char closing[48] = "", per_uid[48] = "", refused[96] = "";
    if (n_cl > 0)
        snprintf(closing, sizeof closing, " (+%.0f closing, still running)", n_cl);
    if (n_per > 0)
        snprintf(per_uid, sizeof per_uid, ", %.0f per uid", n_per);
    if (n_ref > 0)
        snprintf(refused, sizeof refused, "; %.0f refused since the start (its log says why)",
                 n_ref);
    printf("  clients    %.0f connected%s of %.0f allowed%s%s\n", cur->valuedouble, closing,
           lim->valuedouble, per_uid, refused);
}

static int cmd_status(opts *o)
{
    projd_conn *c;
    const int crc = connect_daemon(o, &c);
    /* A refusal at the connection limit is an answer: the daemon is up
     * and serving others, and a health check built on status must not
     * restart it for being busy (projctl metrics says projd_up 1 too). A
     * drain's refusal is a daemon on its way out: down. */
    if (crc == PJ_E_LIMIT) {
        if (o->json)
            printf("{\"projctl\": {\"up\": true, \"refused\": \"E_LIMIT\"}}\n");
        else
            printf("projd is up, at a connection limit: this connection was refused, so no "
                   "more is known\n");
        return 0;
    }
    if (crc)
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
    char *json = NULL;
    projd_error se;
    int stats_rc = projd_stats_json(c, &json, &se);
    if (o->json) {
        if (stats_rc)
            fprintf(stderr, "projctl: %s\n", se.msg);
        rc = stats_rc ? 1 : status_json(c, json, rtt_us);
        free(json);
        projd_close(c);
        return rc;
    }
    cJSON *doc = stats_rc == 0 ? cJSON_Parse(json) : NULL;
    const projd_info *inf = projd_info_get(c);
    char uuid[64];
    format_uuid(inf->device_uuid, uuid, sizeof uuid);
    cJSON *ver = doc ? cJSON_GetObjectItemCaseSensitive(doc, "version") : NULL;
    cJSON *dev = doc ? cJSON_GetObjectItemCaseSensitive(doc, "device") : NULL;
    const char *dev_text = cJSON_IsString(dev) ? dev->valuestring : NULL;
    printf("projd at %s: up (ping %.1f us)\n", projd_url(c), rtt_us);
    if (cJSON_IsString(ver))
        printf("  version    projd %s\n", ver->valuestring);
    printf("  protocol   v%u\n", inf->version);
    printf("  backend    %s\n", projd_backend_name(inf->backend));
    /* The GPU's uuid and STATS' name of it; a cpu backend has no uuid, so
     * its description alone (or that there is no device). */
    if (strcmp(uuid, "none") != 0)
        printf("  device     %s%s%s%s\n", uuid, dev_text ? " (" : "", dev_text ? dev_text : "",
               dev_text ? ")" : "");
    else if (dev_text)
        printf("  device     %s\n", dev_text);
    else
        printf("  device     none (%s backend)\n", projd_backend_name(inf->backend));
    printf("  layers     %u\n", pj_welcome_n_layers(inf));
    printf("  limits     max_m %u, ops/request %u, buffers %u, message %u bytes\n", inf->max_m,
           inf->max_ops_per_request, inf->max_buffers, inf->max_message_bytes);
    if (stats_rc == 0) {
        cJSON *up = doc ? cJSON_GetObjectItemCaseSensitive(doc, "uptime_s") : NULL;
        if (cJSON_IsNumber(up)) {
            long s = (long)up->valuedouble;
            printf("  uptime     %ld s (%ldd %02ldh %02ldm %02lds)\n", s, s / 86400, s / 3600 % 24,
                   s / 60 % 60, s % 60);
        } else {
            printf("  uptime     unknown (no uptime_s in STATS)\n");
        }
        cJSON *wd = doc ? cJSON_GetObjectItemCaseSensitive(doc, "watchdog") : NULL;
        cJSON *usec = wd ? cJSON_GetObjectItemCaseSensitive(wd, "usec") : NULL;
        cJSON *stalls = wd ? cJSON_GetObjectItemCaseSensitive(wd, "stalls") : NULL;
        if (cJSON_IsNumber(usec) && usec->valuedouble > 0)
            printf("  watchdog   WatchdogSec=%g s, %.0f stall(s)%s\n", usec->valuedouble / 1e6,
                   cJSON_IsNumber(stalls) ? stalls->valuedouble : 0,
                   cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(wd, "withheld"))
                       ? ", pings withheld now: a job is stalled"
                       : "");
        else if (cJSON_IsNumber(usec))
            printf("  watchdog   off (no WatchdogSec=)\n");
        cJSON *cn = doc ? cJSON_GetObjectItemCaseSensitive(doc, "connections") : NULL;
        print_connections(cn);
        /* Said only when there is something: a closed connection's jobs
         * held for a client that has not recorded its events. */
        cJSON *cw = cn ? cJSON_GetObjectItemCaseSensitive(cn, "closed_waiting") : NULL;
        cJSON *ln = cn ? cJSON_GetObjectItemCaseSensitive(cn, "lost_now") : NULL;
        cJSON *lc = cn ? cJSON_GetObjectItemCaseSensitive(cn, "lost_clients") : NULL;
        double n_cw = cJSON_IsNumber(cw) ? cw->valuedouble : 0;
        double n_ln = cJSON_IsNumber(ln) ? ln->valuedouble : 0;
        double n_lc = cJSON_IsNumber(lc) ? lc->valuedouble : 0;
        if (n_cw > 0 || n_lc > 0)
            printf("  closed     %.0f connection(s) with jobs waiting for their client's events, "
                   "%.0f of them lost (the client exited: its lane is held, restart projd); "
                   "%.0f lost since start\n",
                   n_cw, n_ln, n_lc);
        /* Also only when there is something: buffers whose release (the
         * daemon's closer thread) has not returned still hold memory. */
        cJSON *bf = doc ? cJSON_GetObjectItemCaseSensitive(doc, "buffers") : NULL;
        cJSON *rl = bf ? cJSON_GetObjectItemCaseSensitive(bf, "releasing") : NULL;
        cJSON *rw = bf ? cJSON_GetObjectItemCaseSensitive(bf, "release_wait_ms") : NULL;
        if (cJSON_IsNumber(rl) && rl->valuedouble > 0)
            printf("  releasing  %.0f buffer release(s), the running one waiting %.1f s for the "
                   "device (their memory stays held until they return)\n",
                   rl->valuedouble, cJSON_IsNumber(rw) ? rw->valuedouble / 1e3 : 0.0);
    } else {
        printf("  uptime     unknown (STATS: %s)\n", se.msg);
    }
    cJSON_Delete(doc);
    free(json);
    projd_close(c);
    return 0;
}

static int cmd_layers(opts *o)
{
    projd_conn *c;
    if (connect_daemon(o, &c))
        return 1;
    const projd_info *inf = projd_info_get(c);
    if (o->json) {
        printf("[");
        for (uint32_t i = 0; i < pj_welcome_n_layers(inf); i++) {
            const pj_wire_layer *l = &pj_welcome_layers(inf)[i];
            cJSON *name = cJSON_CreateString(l->name); /* quoted and escaped */
            char *qname = name ? cJSON_PrintUnformatted(name) : NULL;
            cJSON_Delete(name);
            if (!qname) {
                printf("\n");
                fprintf(stderr, "projctl: out of memory\n");
                projd_close(c);
                return 1;
            }
            printf("%s\n  {\"index\": %u, \"name\": %s, \"n\": %u, \"k\": %u, \"format\": \"%s\"}",
                   i ? "," : "", i, qname, l->n, l->k, projd_format_name(l->format));
            free(qname);
        }
        printf("\n]\n");
        projd_close(c);
        return 0;
    }
    /* Names are up to 63 bytes (SGLang prefixes run to 30-40): the column
     * is as wide as the longest, 24 at least. */
    const pj_wire_layer *ls = pj_welcome_layers(inf);
    const uint32_t nl = pj_welcome_n_layers(inf);
    int w = 24;
    for (uint32_t i = 0; i < nl; i++) {
        size_t len = strnlen(ls[i].name, sizeof ls[i].name);
        if ((int)len > w)
            w = (int)len;
    }
    printf("%-5s %-*s %8s %8s  %s\n", "index", w, "name", "n", "k", "format");
    for (uint32_t i = 0; i < nl; i++) {
        const pj_wire_layer *l = &ls[i];
        printf("%-5u %-*s %8u %8u  %s\n", i, w, l->name, l->n, l->k, projd_format_name(l->format));
    }
    /* Only the cuda backend captures graphs; the cpu backend's WELCOME
     * lists the configured shapes all the same. */
    if (!strcmp(projd_backend_name(inf->backend), "cuda")) {
        printf("m: 1..%u; graphs captured for m in {", inf->max_m);
        for (uint32_t i = 0; i < inf->n_shapes; i++)
            printf("%s%u", i ? ", " : "", inf->shapes[i]);
        printf("}\n");
    } else {
        printf("m: 1..%u (%s backend: no CUDA graphs)\n", inf->max_m,
               projd_backend_name(inf->backend));
    }
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
    char left[512] = "";
    if (!o->all)
        pj_statsview_summarize(doc, left, sizeof left);
    char key[512] = "";
    flatten(doc, key, sizeof key, 0);
    if (left[0])
        printf("(left out: %s; projctl stats --all prints them)\n", left);
    cJSON_Delete(doc);
    free(json);
    return 0;
}

/* ---- metrics ------------------------------------------------------------------------ */

/* STATS as Prometheus text, to stdout or, with --out, to a file replaced
 * whole (a collector reading the folder never sees half of it). 0 when
 * projd answered (STATS, or a refusal of the connection at a limit or in a
 * drain: projd_up 1 and projd_scrape_refused), 1 when it did not (the text
 * then says projd_up 0) or the text could not be written. */
static int cmd_metrics(opts *o)
{
    projd_conn *c;
    char *json = NULL, *text = NULL;
    int up = 0, refused = 0;
    const int crc = connect_daemon(o, &c);
    if (crc == 0) {
        projd_error e;
        up = projd_stats_json(c, &json, &e) == 0;
        projd_close(c);
        if (!up)
            fprintf(stderr, "projctl: %s\n", e.msg);
        /* A drain (or a limit) that began after the connect is the same
         * answer as one that refused it: projd is up. */
        if (!up && (e.code == PJ_E_SHUTDOWN || e.code == PJ_E_LIMIT))
            refused = e.code;
    } else if (crc == PJ_E_LIMIT || crc == PJ_E_SHUTDOWN) {
        refused = crc;
    }
    if (up) {
        char err[256];
        text = pj_metrics_render(json, strlen(json), &o->labels, err, sizeof err);
        if (!text) {
            fprintf(stderr, "projctl: %s\n", err);
            up = 0;
        }
    }
    free(json);
    if (!text && refused)
        text = pj_metrics_render_refused(&o->labels, projd_strerror(refused));
    else if (!text)
        text = pj_metrics_render_down(&o->labels);
    if (!text) {
        fprintf(stderr, "projctl: out of memory\n");
        return 1;
    }
    int rc = up || refused ? 0 : 1;
    if (!o->out) {
        /* The text is larger than stdout's buffer: a full disk shows in
         * the writes here, and errno says why only now. */
        errno = 0;
        if (fputs(text, stdout) == EOF || fflush(stdout) != 0) {
            fprintf(stderr, "projctl: writing standard output: %s\n",
                    strerror(errno ? errno : EIO));
            clearerr(stdout); /* said once, here */
            rc = 1;
        }
    } else {
        /* 0644 whatever the umask: the collector (node_exporter) runs as
         * another user. */
        char err[4096 + 256];
        if (pj_replace_file(o->out, text, strlen(text), 0644, PJ_MODE_EXACT, err, sizeof err)) {
            fprintf(stderr, "projctl: --out %s\n", err);
            rc = 1;
        }
    }
    free(text);
    return rc;
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

/* --model, else $PROJD_MODEL, else --config's model.path, else the file
 * the daemon serves (served: its STATS model.path, may be NULL or ""),
 * else the built-in model.path. *from says which, for messages. */
static const char *model_path(const opts *o, const char *served, const char **from)
{
    const char *env = getenv("PROJD_MODEL");
    *from = "--model";
    if (o->model)
        return o->model;
    *from = "$PROJD_MODEL";
    if (env && env[0])
        return env;
    pj_config defaults;
    pj_config_defaults(&defaults);
    const int from_config = o->config && strcmp(o->cfg.model.path, defaults.model.path) != 0;
    *from = "model.path of --config";
    if (from_config)
        return o->cfg.model.path;
    *from = "the built-in model.path";
    if (!served || !served[0])
        return o->cfg.model.path;
    *from = "the daemon's model.path, from STATS";
    return served;
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
        fprintf(stderr, "projctl: project needs %s\n",
                !o->layer && o->m < 0 ? "--layer L and --m M"
                : !o->layer           ? "--layer L"
                                      : "--m M");
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
    const pj_wire_layer *L = &pj_welcome_layers(inf)[li];
    uint32_t m = (uint32_t)o->m, k = L->k;
    uint32_t n = o->n > 0 ? (uint32_t)o->n : L->n;
    /* Before x and y are made: an m the daemon refuses anyway would first
     * take m x k and m x n of shared memory (a container's 64 MiB /dev/shm
     * then said "No space left on device" instead of the reason). */
    if (o->m == 0 || (uint64_t)o->m > inf->max_m) {
        fprintf(stderr, "projctl: --m %lld: the daemon takes 1 to %u rows per op (shapes.max_m)\n",
                (long long)o->m, inf->max_m);
        goto out;
    }
    if (o->n > 0 && (uint64_t)o->n > L->n) { /* the same for n: y would be m x n first */
        fprintf(stderr, "projctl: --n %lld: layer %s has %u rows (--n 1 to %u; without it, all)\n",
                (long long)o->n, L->name, L->n, L->n);
        goto out;
    }

    /* The reference first: a wrong model path should fail before any work. */
    if (o->check) {
        pj_config cfg = o->cfg;
        char err[1024];
        static pj_served_model served; /* large; projctl runs one command */
        int have_served = pj_served_model_get(c, &served, err, sizeof err) == 0;
        const char *from;
        snprintf(cfg.model.path, sizeof cfg.model.path, "%s",
                 model_path(o, have_served ? served.path : NULL, &from));
        /* Without --config, the file is read with the daemon's layer list
         * (names and tensors from STATS), not the built-in five: a daemon
         * serving layers of its own naming is checked as it serves them. */
        const int layers_served =
            have_served && !o->config && pj_served_model_config(&served, &cfg);
        int rc = pj_model_load(&cfg, &model, model_warn, NULL, err, sizeof err);
        if (rc) {
            fprintf(stderr, "projctl: --check needs the model (%s, read with %s): %s\n", from,
                    pj_served_model_layers_said(layers_served, o->config != NULL), err);
            fprintf(stderr, "projctl: give --model PATH for the file%s\n",
                    layers_served ? "" : ", and --config FILE with the daemon's model.layers");
            goto out;
        }
        if (have_served &&
            pj_served_model_same(&served, model, L->name, cfg.model.path, err, sizeof err) != 0) {
            fprintf(stderr, "projctl: --check: %s\n", err);
            goto out;
        }
        int mi = pj_model_find(model, L->name);
        if (mi < 0) {
            fprintf(stderr, "projctl: --check: layer %s is not in %s with this config\n", L->name,
                    cfg.model.path);
            goto out;
        }
        const pj_weights *w = &model->layers[mi].w;
        /* Against the rows the daemon serves, not --n (an --n past them
         * was refused above, before x and y). */
        if (w->k != k || w->n < L->n) {
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
    /* The engine id is the backend's own (PROTOCOL.md: "backend-defined"),
     * with no names in the protocol: labeled as such, and left out on the
     * cpu backend, which has the one reference engine. */
    printf("layer %s (%u): m %u, n %u, k %u, %s backend", L->name, li, m, n, k,
           projd_backend_name(inf->backend));
    if (strcmp(projd_backend_name(inf->backend), "cpu") != 0)
        printf(", engine id %u (backend-defined)", res.ops[0].engine);
    printf("\n");
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
    const char *from;
    const char *path = o->positional ? o->positional : model_path(o, NULL, &from);
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
    struct stat sb;
    /* A link: what it reaches; a pipe or a device is written into, not replaced. */
    if (!o->force && stat(o->out, &sb) == 0 && S_ISREG(sb.st_mode)) {
        fprintf(stderr,
                "projctl: mkmodel: %s is there already (a file, %lld bytes); not replaced: give "
                "--force to write over it, or another --out\n",
                o->out, (long long)sb.st_size);
        return 1;
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

/* The requests bench-ipc times, each over both transports. */
/* B_QUEUED is the part of B_DAEMON from the request's arrival (nng's
 * receive, the ring poller's take) to the backend's start: on a ring, the
 * poller's hand-off to the loop. */
enum { B_PING, B_PROJECT, B_DAEMON, B_QUEUED, B_ROWS };
static const char *const bench_row_names[B_ROWS] = {
    "PING", "PROJECT m=1", "  of which in the daemon", "    of which before the backend"};
static const char *const bench_row_keys[B_ROWS] = {
    "PING", "PROJECT m=1", "PROJECT m=1 in the daemon", "PROJECT m=1 before the backend"};

typedef struct bench_side {
    const char *name; /* "nng" or "ring" */
    projd_conn *c;
    projd_buffer *xb, *yb;
    double *v[B_ROWS];
    size_t n[B_ROWS];
} bench_side;

typedef struct bench_stat {
    double p50, p99, min;
} bench_stat;

static bench_stat bench_summary(double *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_double);
    bench_stat st = {pct(v, n, 0.5), pct(v, n, 0.99), v[0]};
    return st;
}

/* The smallest layer by weight bytes: its projection is as cheap as the
 * daemon gets, so the row is mostly transport. -1 when there is none. */
static int smallest_layer(const projd_info *inf)
{
    const pj_wire_layer *ls = pj_welcome_layers(inf);
    int best = -1;
    for (uint32_t i = 0; i < pj_welcome_n_layers(inf); i++)
        if (best < 0 || (uint64_t)ls[i].n * ls[i].k < (uint64_t)ls[best].n * ls[best].k)
            best = (int)i;
    return best;
}

/* Host work between requests: a busy wait, since a client computing
 * between projections keeps its own core awake while the daemon's threads
 * may fall asleep. */
static void bench_gap(uint64_t gap_ns)
{
    if (!gap_ns)
        return;
    uint64_t until = now_ns() + gap_ns;
    while (now_ns() < until)
        ;
}

/* One block of `count` requests of each kind on one side, each after
 * gap_ns of host work; warm-up blocks are not recorded. 0 or -1 (message
 * printed). */
static int bench_block(bench_side *sd, int layer, size_t count, int record, uint64_t gap_ns)
{
    projd_error e;
    const projd_info *inf = projd_info_get(sd->c);
    for (size_t i = 0; i < count; i++) {
        bench_gap(gap_ns);
        uint64_t t0 = now_ns();
        if (projd_ping(sd->c, &e)) {
            fprintf(stderr, "projctl: %s: %s\n", sd->name, e.msg);
            return -1;
        }
        if (record)
            sd->v[B_PING][sd->n[B_PING]++] = (double)(now_ns() - t0) / 1e3;
    }
    if (layer < 0)
        return 0;
    const pj_wire_layer *L = &pj_welcome_layers(inf)[layer];
    projd_op op = {.layer = (uint32_t)layer,
                   .m = 1,
                   .n = L->n,
                   .x_buf = projd_buffer_id(sd->xb),
                   .x_ld = L->k,
                   .y_buf = projd_buffer_id(sd->yb),
                   .y_ld = L->n};
    projd_result res;
    for (size_t i = 0; i < count; i++) {
        bench_gap(gap_ns);
        if (projd_project(sd->c, &op, 1, 0, &res, &e)) {
            fprintf(stderr, "projctl: %s: %s\n", sd->name, e.msg);
            return -1;
        }
        if (record) {
            sd->v[B_PROJECT][sd->n[B_PROJECT]++] = (double)res.total_ns / 1e3;
            sd->v[B_DAEMON][sd->n[B_DAEMON]++] = (double)(res.queue_ns + res.exec_ns) / 1e3;
            sd->v[B_QUEUED][sd->n[B_QUEUED]++] = (double)res.queue_ns / 1e3;
        }
    }
    return 0;
}

/* -1 on a failure, said; -2 when a ring was refused and optional (the
 * default "both": the nng side is timed alone, with a note). */
static int bench_side_open(const opts *o, bench_side *sd, const char *name, int layer, size_t count,
                           int ring_optional)
{
    memset(sd, 0, sizeof *sd);
    sd->name = name;
    if (connect_daemon(o, &sd->c))
        return -1;
    projd_error e;
    if (!strcmp(name, "ring") && projd_ring_attach(sd->c, 0, &e) != 0) {
        fprintf(stderr, "projctl: the daemon refused a ring: %s%s\n", e.msg,
                ring_optional ? "; timing nng alone" : "");
        return ring_optional ? -2 : -1;
    }
    const projd_info *inf = projd_info_get(sd->c);
    if (layer >= 0) {
        const pj_wire_layer *L = &pj_welcome_layers(inf)[layer];
        if (projd_shm_create(sd->c, (size_t)L->k * 2, &sd->xb, &e) ||
            projd_shm_create(sd->c, (size_t)L->n * 2, &sd->yb, &e)) {
            fprintf(stderr, "projctl: %s\n", e.msg);
            return -1;
        }
        fill_random(projd_buffer_ptr(sd->xb), L->k, 1);
    }
    for (int r = 0; r < B_ROWS; r++)
        if (!(sd->v[r] = calloc(count, sizeof(double)))) {
            fprintf(stderr,
                    "projctl: no memory for %zu samples of %d kinds (%s); use a smaller --count\n",
                    count, B_ROWS, name);
            return -1;
        }
    return 0;
}

static void bench_side_close(bench_side *sd)
{
    for (int r = 0; r < B_ROWS; r++)
        free(sd->v[r]);
    projd_buffer_release(sd->xb, NULL);
    projd_buffer_release(sd->yb, NULL);
    projd_close(sd->c);
}

/* Blocks of this many requests alternate between the transports, so both
 * see the same machine; each side's spinning threads go to sleep while the
 * other side runs. */
#define BENCH_BLOCK 100

static int cmd_bench_ipc(opts *o)
{
    const char *which = o->transport ? o->transport : "both";
    int want_nng = strcmp(which, "ring") != 0, want_ring = strcmp(which, "nng") != 0;
    if (strcmp(which, "both") && strcmp(which, "nng") && strcmp(which, "ring"))
        return usage_error("--transport must be nng, ring or both, not %s", which);
    /* Each connection's transport is this command's choice: $PROJD_RING
     * would put the nng side on a ring too (and refuse the ring side's own
     * attach as a second ring). */
    unsetenv("PROJD_RING");
    size_t count = (size_t)o->count, warm = count / 10 + 10;
    uint64_t gap_ns = (uint64_t)o->gap_us * 1000u;
    bench_side side[2];
    int n_sides = 0, status = 1, layer = -1;
    FILE *out_file = NULL;
    int out_existed = 0;
    {
        projd_conn *probe;
        if (connect_daemon(o, &probe))
            return 1;
        layer = smallest_layer(projd_info_get(probe));
        printf("projd at %s, %s backend; %zu round trips of each request per transport "
               "(after %zu warm-up), in alternating blocks of %d, each after %ld us of host "
               "work\n",
               projd_url(probe), projd_backend_name(projd_info_get(probe)->backend), count, warm,
               BENCH_BLOCK, o->gap_us);
        projd_close(probe);
    }
    /* --out is opened before the run, not after it: a path that cannot be
     * written fails now instead of at the end of a run that may take
     * minutes. Only once the daemon answered, so that a missing daemon
     * leaves an existing file alone; and for appending, so that a run that
     * fails later leaves it alone too (it is emptied once there are
     * results to write). */
    if (o->out) {
        out_existed = access(o->out, F_OK) == 0;
        /* Not through a symbolic link: in a shared folder one could name
         * a file of the caller's that the results would replace. */
        int ofd = open(o->out, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (ofd < 0 || !(out_file = fdopen(ofd, "a"))) {
            int e = errno;
            if (ofd >= 0)
                close(ofd);
            fprintf(stderr, "projctl: --out %s: %s%s\n", o->out, strerror(e),
                    e == ELOOP ? " (a symbolic link is not followed)" : "");
            return 1;
        }
        /* made here: an interrupt of the run takes it away again */
        if (!out_existed)
            pj_replacing_remove_on_signal(o->out);
    }
    if (want_nng && bench_side_open(o, &side[n_sides++], "nng", layer, count, 0))
        goto out;
    if (want_ring) {
        /* Asked for by --transport, a refused ring is the run's failure;
         * by default it leaves the nng side to time (ring.enabled 0). */
        int rc = bench_side_open(o, &side[n_sides], "ring", layer, count, want_nng);
        if (rc == -2) {
            bench_side_close(&side[n_sides]);
        } else {
            n_sides++;
            if (rc)
                goto out;
        }
    }
    for (size_t done = 0; done < warm + count; done += BENCH_BLOCK) {
        size_t block = warm + count - done < BENCH_BLOCK ? warm + count - done : BENCH_BLOCK;
        for (int sd = 0; sd < n_sides; sd++) {
            /* Requests before `warm` are warm-up; a block that straddles it
             * records its tail only when it fits the count. */
            size_t warm_part = done < warm ? (warm - done < block ? warm - done : block) : 0;
            if (warm_part && bench_block(&side[sd], layer, warm_part, 0, gap_ns))
                goto out;
            if (block > warm_part && bench_block(&side[sd], layer, block - warm_part, 1, gap_ns))
                goto out;
        }
    }
    bench_stat st[2][B_ROWS];
    printf("%-32s %-5s %8s %9s %9s %9s\n", "request", "via", "count", "p50 us", "p99 us", "min us");
    for (int r = 0; r < B_ROWS; r++) {
        for (int sd = 0; sd < n_sides; sd++) {
            if (!side[sd].n[r])
                continue;
            st[sd][r] = bench_summary(side[sd].v[r], side[sd].n[r]);
            printf("%-32s %-5s %8zu %9.1f %9.1f %9.1f\n", bench_row_names[r], side[sd].name,
                   side[sd].n[r], st[sd][r].p50, st[sd][r].p99, st[sd][r].min);
        }
    }
    if (n_sides == 2) {
        printf("p50 nng / ring: PING %.2fx", st[0][B_PING].p50 / st[1][B_PING].p50);
        if (side[0].n[B_PROJECT])
            printf(", PROJECT m=1 %.2fx", st[0][B_PROJECT].p50 / st[1][B_PROJECT].p50);
        printf("\n");
    }
    if (out_file) {
        /* Appends land at the new end. A FIFO or a device has nothing to
         * empty. */
        struct stat sb;
        if (fstat(fileno(out_file), &sb) == 0 && S_ISREG(sb.st_mode) &&
            ftruncate(fileno(out_file), 0) != 0) {
            fprintf(stderr, "projctl: --out %s: %s\n", o->out, strerror(errno));
            goto out;
        }
        FILE *f = out_file;
        out_file = NULL;
        fprintf(f, "{\"count\": %zu, \"gap_us\": %ld, \"rows\": [", count, o->gap_us);
        const char *sep = "";
        for (int r = 0; r < B_ROWS; r++)
            for (int sd = 0; sd < n_sides; sd++)
                if (side[sd].n[r]) {
                    fprintf(f,
                            "%s\n  {\"request\": \"%s\", \"transport\": \"%s\", \"p50_us\": %.2f, "
                            "\"p99_us\": %.2f, \"min_us\": %.2f}",
                            sep, bench_row_keys[r], side[sd].name, st[sd][r].p50, st[sd][r].p99,
                            st[sd][r].min);
                    sep = ",";
                }
        fprintf(f, "\n]}\n");
        /* A full disk shows only at the flush: the table is not written
         * until fclose says so. */
        int failed = ferror(f), werr = errno;
        if (fclose(f) != 0 && !failed) {
            failed = 1;
            werr = errno;
        }
        if (failed) {
            fprintf(stderr, "projctl: %s: writing the results failed: %s\n", o->out,
                    strerror(werr ? werr : EIO));
            goto out;
        }
        pj_replacing_forget(o->out); /* the results: kept from here on */
        printf("wrote %s\n", o->out);
    }
    status = 0;
out:
    if (out_file) { /* the run failed: no results, and no empty file it made */
        fclose(out_file);
        if (!out_existed)
            unlink(o->out);
    }
    if (o->out)
        pj_replacing_forget(o->out);
    for (int sd = 0; sd < n_sides; sd++)
        bench_side_close(&side[sd]);
    return status;
}

/* ---- main ------------------------------------------------------------------------------- */

/* rc, or 1 when what the command printed did not all reach stdout: a
 * redirect to a full disk shows only at the flush, and `projctl stats --json
 * > f` must not exit 0 with f cut short. */
static int stdout_checked(int rc)
{
    int failed = ferror(stdout);
    errno = 0;
    if (fflush(stdout) != 0)
        failed = 1;
    if (!failed)
        return rc;
    fprintf(stderr, "projctl: writing standard output: %s\n", strerror(errno ? errno : EIO));
    return rc ? rc : 1;
}

int main(int argc, char **argv)
{
    /* mkmodel's model file and metrics --out are written beside and
     * renamed: an interrupt must not leave the temporary behind. */
    pj_replacing_clean_on_signals();
    opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc;
    if (o.version) {
        printf("projctl %s (protocol v%d)\n", PJ_VERSION_STRING, PJ_WIRE_VERSION);
        return stdout_checked(0);
    }
    if (!o.cmd) {
        fputs(usage_main, o.help ? stdout : stderr);
        return o.help ? 0 : EXIT_USAGE;
    }
    const cmd_help *h = cmd_find(o.cmd);
    if (!h)
        return usage_error("unknown command %s", o.cmd);
    if (o.help) {
        fputs(h->text, stdout);
        return 0;
    }
    if (o.positional && strcmp(o.cmd, "inspect") != 0)
        return usage_error("unexpected argument %s", o.positional);
    /* An option the command does not take would otherwise be ignored
     * without a word (`status --json` printing text to a script that
     * parses JSON). */
    for (int i = 0; i < o.n_given; i++) {
        char name[64];
        size_t nl = strcspn(o.given[i], "=");
        snprintf(name, sizeof name, "%.*s", (int)nl, o.given[i]);
        if (!cmd_takes(h, name)) {
            fprintf(stderr, "projctl: %s does not take %s\n", o.cmd, name);
            fputs(h->text, stderr);
            return EXIT_USAGE;
        }
    }
    /* An invalid --config is the command line's mistake: exit 2, as projd
     * and projload do for the same file. */
    if (load_config(&o))
        return EXIT_USAGE;
    if (!strcmp(o.cmd, "status"))
        rc = cmd_status(&o);
    else if (!strcmp(o.cmd, "layers"))
        rc = cmd_layers(&o);
    else if (!strcmp(o.cmd, "stats"))
        rc = cmd_stats(&o);
    else if (!strcmp(o.cmd, "metrics"))
        rc = cmd_metrics(&o);
    else if (!strcmp(o.cmd, "project"))
        rc = cmd_project(&o);
    else if (!strcmp(o.cmd, "inspect"))
        rc = cmd_inspect(&o);
    else if (!strcmp(o.cmd, "mkmodel"))
        rc = cmd_mkmodel(&o);
    else
        rc = cmd_bench_ipc(&o);
    return stdout_checked(rc);
}
