/* projd_main.c — the projd daemon: configuration, model, backend, serve.
 *
 * Exit codes (usage() lists them too): 0 after a clean drain (SIGTERM/
 * SIGINT), for --check-config without a problem, --print-config, --help and
 * --version; 1 when the daemon could not start (backend, socket, socket
 * group, model, listen) or had to stop on an error (a fatal backend error,
 * a drain or teardown that did not finish), and for --check-config that
 * found a problem; 2 for a bad command line or configuration (also a
 * default socket URL that does not fit).
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <nng/nng.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <uv.h>

#include "config/config.h"
#include "daemon/backend.h"
#include "daemon/checkcfg.h"
#include "daemon/envknob.h"
#include "daemon/loadturn.h"
#include "daemon/log.h"
#include "daemon/model.h"
#include "daemon/notify.h"
#include "daemon/server.h"
#include "daemon/shmguard.h"
#include "daemon/socklock.h"
#include "daemon/startsig.h"
#include "protocol/sockpath.h"
#include "protocol/version.h"

/* backend_select.c refers to the cuda backend weakly (tools that link the
 * core library alone must not need CUDA); this strong reference makes the
 * linker take it from libpjcuda.a in projd. */
#ifdef PJ_HAVE_CUDA
#include "daemon/backend_cuda.h"
const pj_backend_ops *(*volatile pj_projd_cuda_backend)(void) = pj_backend_cuda_ops;
#endif

typedef struct cli {
    const char *config;
    const char *model;
    const char *socket;
    const char *backend;
    const char *log_level;
    int check_config, print_config;
} cli;

typedef struct daemon_state {
    cli args;
    pj_config cfg;
    pj_server *server;
    uv_signal_t sig_term, sig_int, sig_hup;
    uv_idle_t reload_due; /* a SIGHUP's reload, at the loop's next turn (on_hup) */
    int exit_code;
    int stopping; /* SIGTERM/SIGINT seen: a SIGHUP then tells systemd nothing */
} daemon_state;

/* Where the documents --help names are, in dir: <prefix>/share/doc/projd
 * when this binary runs as <prefix>/bin/projd and make install put them
 * there; else the source tree it was built in (<src>/<build>/bin/projd);
 * else /usr/share/doc/projd. *deploy: the name of deploy/README.md there. */
static void doc_dir(char *dir, size_t len, const char **deploy)
{
    char exe[PATH_MAX], probe[PATH_MAX + 64];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    *deploy = "README.md";
    if (n > 0) {
        exe[n] = '\0';
        for (int up = 0; up < 2; up++) { /* <prefix>/bin/projd -> <prefix> */
            char *slash = strrchr(exe, '/');
            if (!slash)
                break;
            *slash = '\0';
        }
        snprintf(probe, sizeof probe, "%s/share/doc/projd/config/CONFIG.md", exe);
        if (access(probe, R_OK) == 0 && snprintf(dir, len, "%s/share/doc/projd", exe) < (int)len)
            return;
        char *slash = strrchr(exe, '/'); /* <src>/<build> -> <src> */
        if (slash) {
            *slash = '\0';
            snprintf(probe, sizeof probe, "%s/config/CONFIG.md", exe);
            if (exe[0] && access(probe, R_OK) == 0) {
                snprintf(dir, len, "%s", exe);
                *deploy = "deploy/README.md";
                return;
            }
        }
    }
    snprintf(dir, len, "/usr/share/doc/projd");
}

static void usage(FILE *f)
{
    char doc[PATH_MAX];
    const char *deploy;
    doc_dir(doc, sizeof doc, &deploy);
    fprintf(f,
            "usage: projd [options]\n"
            "  --config FILE     apply FILE (JSON) on top of the built-in defaults\n"
            "  --model PATH      safetensors file to serve (model.path)\n"
            "  --socket URL      ipc://PATH or PATH to listen on (socket.url). If neither\n"
            "                    names one: $" PJ_SOCKPATH_ENV ", else " PJ_SOCKPATH_SYSTEM " as\n"
            "                    root, else $XDG_RUNTIME_DIR/projd/projd.sock, else\n"
            "                    /tmp/projd-<uid>/projd.sock (--print-config shows which)\n"
            "  --backend B       auto | cpu | cuda (device.backend)\n"
            "  --log-level L     error | warn | info | debug (log.level)\n"
            "  --check-config    run every check a start makes before serving that changes\n"
            "                    nothing: the backend, the socket's directory and file, the\n"
            "                    socket group, the model file's tensors (not the weights);\n"
            "                    print each problem on its own line (or one OK line), exit\n"
            "  --print-config    print the resulting configuration as JSON, socket.url filled\n"
            "                    in with the URL a start would use; exit\n"
            "  -h, --help        this text\n"
            "  -V, --version     print the version\n"
            "Command-line values win over the file, also when SIGHUP re-reads it.\n"
            "Signals: SIGTERM/SIGINT drain and exit 0 (during the start: stop before\n"
            "  serving, exit 0); SIGHUP reloads log level, limits, auth (the outcome: the\n"
            "  log, STATS \"reload\", systemd's STATUS=; during the start: once ready).\n"
            "Environment: " PJ_SOCKPATH_ENV
            " (the socket, above); NOTIFY_SOCKET, WATCHDOG_USEC (systemd);\n"
            "  PROJD_RING_LOOP_SPIN=0 (the loop sleeps between ring requests);\n"
            "  PROJD_LOAD_TURN_S (600: the most seconds a start waits while another projd\n"
            "  whose socket shares its directory loads; 0: no turns); PROJD_HOST_MEM_CHECK=0\n"
            "  (no host memory check before the load); PROJD_CUDA_* (tuning and tests:\n"
            "  daemon/CUDA.md, deploy/README.md).\n"
            "Exit codes:\n"
            "  0  stopped cleanly (SIGTERM/SIGINT); --check-config found no problem;\n"
            "     --print-config, --help, --version\n"
            "  1  could not start (backend, socket, socket group, model, listen) or stopped\n"
            "     on an error (fatal backend error, drain past 60 s); --check-config found\n"
            "     a problem\n"
            "  2  bad command line or configuration\n"
            "Documentation, in %s/:\n"
            "  config/CONFIG.md (every key), daemon/DAEMON.md (reload, shutdown),\n"
            "  protocol/PROTOCOL.md, %s (systemd), bench/README.md (tuning)\n",
            doc, deploy);
}

/* Length of a URL scheme ("tcp" in "tcp://host"), 0 when s does not start
 * with one. */
static size_t url_scheme_len(const char *s)
{
    size_t i = 0;
    if (!((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z')))
        return 0;
    while ((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
           (s[i] >= '0' && s[i] <= '9') || s[i] == '+' || s[i] == '.' || s[i] == '-')
        i++;
    return strncmp(s + i, "://", 3) == 0 ? i : 0;
}

/* Apply the command-line overrides as a JSON document, so they get the
 * config parser's checks and messages. */
static int apply_cli(const cli *a, pj_config *cfg, char *err, size_t errlen)
{
    cJSON *o = cJSON_CreateObject();
    if (!o) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    char url[PJ_CFG_PATH + 16];
    /* An empty one would be taken for the "ipc://" of a missing path. */
    if (a->socket && !a->socket[0]) {
        snprintf(err, errlen,
                 "command line: --socket \"\": empty; give ipc://PATH or a PATH, or leave "
                 "--socket out for the default (--print-config shows it)");
        cJSON_Delete(o);
        return -EINVAL;
    }
    /* A PATH gets "ipc://" in front; a URL of another scheme would become a
     * relative path ("tcp://h:1" listened on ./tcp:/h:1), so it is refused. */
    if (a->socket && url_scheme_len(a->socket) && strncmp(a->socket, "ipc://", 6) != 0) {
        snprintf(err, errlen,
                 "command line: --socket \"%.*s...\": only ipc:// URLs are served (access "
                 "control relies on a Unix socket's peer credentials); give ipc://PATH or a PATH",
                 (int)url_scheme_len(a->socket) + 3, a->socket);
        cJSON_Delete(o);
        return -EINVAL;
    }
    const char *spath = a->socket && !strncmp(a->socket, "ipc://", 6) ? a->socket + 6 : a->socket;
    if (spath && !spath[0]) {
        snprintf(err, errlen, "command line: --socket \"%s\": no path after ipc://", a->socket);
        cJSON_Delete(o);
        return -EINVAL;
    }
    if (spath && spath[0] != '/') {
        snprintf(err, errlen,
                 "command line: --socket \"%.200s\": a relative path; give an absolute one (the "
                 "daemon checks its socket's directory for who may write to it, by path)",
                 a->socket);
        cJSON_Delete(o);
        return -EINVAL;
    }
    if (spath && strlen(spath) > PJ_SOCKPATH_MAX) {
        snprintf(err, errlen,
                 "command line: --socket \"%.40s...\": the path is %zu bytes, over the %d a Unix "
                 "socket's address holds; give a shorter one",
                 a->socket, strlen(spath), PJ_SOCKPATH_MAX);
        cJSON_Delete(o);
        return -EINVAL;
    }
    if (a->model)
        cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "model"), "path", a->model);
    if (a->socket) {
        snprintf(url, sizeof url, "%s%s", strncmp(a->socket, "ipc://", 6) ? "ipc://" : "",
                 a->socket);
        cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "socket"), "url", url);
    }
    if (a->backend)
        cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "device"), "backend", a->backend);
    if (a->log_level)
        cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "log"), "level", a->log_level);
    int rc = 0;
    if (cJSON_GetArraySize(o) > 0) {
        char *text = cJSON_PrintUnformatted(o);
        if (!text) {
            snprintf(err, errlen, "out of memory");
            rc = -ENOMEM;
        } else {
            char why[960];
            rc = pj_config_apply_json(cfg, text, strlen(text), why, sizeof why);
            if (rc != 0)
                snprintf(err, errlen, "command line: %s", why);
            free(text);
        }
    }
    cJSON_Delete(o);
    return rc;
}

/* Defaults, then the file, then the command line. */
static int build_config(const cli *a, pj_config *cfg, char *err, size_t errlen)
{
    /* On the heap: a config is ~730 KB (1024 layer slots), and SIGHUP's
     * caller holds another. */
    pj_config *c = malloc(sizeof *c);
    if (!c) {
        snprintf(err, errlen, "out of memory for a configuration");
        return -ENOMEM;
    }
    pj_config_defaults(c);
    int rc = a->config ? pj_config_apply_file(c, a->config, err, errlen) : 0;
    if (rc == 0)
        rc = apply_cli(a, c, err, errlen);
    if (rc == 0)
        *cfg = *c;
    free(c);
    return rc;
}

/* A signal whose last libuv handle stops goes back to its default action
 * (libuv restores SIG_DFL): the teardown after the loop (the closer's
 * wait, the backend's and nng's, several seconds at most) would die of a
 * SIGHUP, or of a second SIGTERM, instead of exiting with its code, and
 * systemd takes a death by SIGTERM or SIGHUP for a clean stop (no
 * Restart=on-failure after a fatal error). Ignored once the loop's handle
 * has closed: the stop is under way. */
static void on_signal_closed(uv_handle_t *h)
{
    daemon_state *d = h->data;
    int signum = h == (uv_handle_t *)&d->sig_term  ? SIGTERM
                 : h == (uv_handle_t *)&d->sig_int ? SIGINT
                                                   : SIGHUP;
    signal(signum, SIG_IGN);
}

/* Ignoring in the close callback comes too late by itself: between
 * uv_close and the callback (the next loop turn) a signal meets SIG_DFL,
 * and a shell loop of SIGTERMs killed 6 of 8 stops. libuv restores the
 * default only when no handle on any loop watches the signal, so handles
 * on a second loop, one never run, are started first: they keep libuv's
 * handler in place, and what they catch is dropped. The loop is never
 * closed (closing its handles would restore SIG_DFL); it is static, so a
 * leak checker finds what it holds. */
static uv_loop_t g_quiet_loop;
static uv_signal_t g_quiet_sig[3];

static void on_quiet_signal(uv_signal_t *h, int signum)
{
    (void)h;
    (void)signum;
}

static void keep_signals_caught(void)
{
    static int started;
    static const int sigs[3] = {SIGTERM, SIGINT, SIGHUP};
    if (started || uv_loop_init(&g_quiet_loop) != 0)
        return; /* then the close callbacks' SIG_IGN alone */
    started = 1;
    for (int i = 0; i < 3; i++) {
        uv_signal_init(&g_quiet_loop, &g_quiet_sig[i]);
        uv_signal_start(&g_quiet_sig[i], on_quiet_signal, sigs[i]);
    }
}

static void on_server_stopped(void *arg, int exit_code)
{
    daemon_state *d = arg;
    d->exit_code = exit_code;
    pj_server_set_exit_code(exit_code);
    keep_signals_caught();
    uv_close((uv_handle_t *)&d->reload_due, NULL); /* a reload not yet run: the stop is here */
    uv_close((uv_handle_t *)&d->sig_term, on_signal_closed);
    uv_close((uv_handle_t *)&d->sig_int, on_signal_closed);
    uv_close((uv_handle_t *)&d->sig_hup, on_signal_closed);
}

static void on_stop_signal(uv_signal_t *h, int signum)
{
    daemon_state *d = h->data;
    pj_log_info("%s received", signum == SIGTERM ? "SIGTERM" : "SIGINT");
    d->stopping = 1;
    pj_server_drain(d->server);
}

/* An open-files limit short of limits.max_connections, said at the start
 * and by a reload that raises max_connections: past it a client's connect
 * is dropped with nothing said to it. Each connection holds its IPC
 * socket; the rest is the daemon's own. */
static void say_fd_limit_short(const pj_config *cfg)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    const unsigned long long need = (unsigned long long)cfg->limits.max_connections * 2 + 64;
    if (rl.rlim_cur < need)
        pj_log_warn("open files: the limit is %llu (hard %llu), and limits.max_connections %u "
                    "takes about %llu: past it new clients' connects are dropped; raise the hard "
                    "limit (LimitNOFILE=, ulimit -Hn) or lower max_connections",
                    (unsigned long long)rl.rlim_cur,
                    rl.rlim_max == RLIM_INFINITY ? 0ull : (unsigned long long)rl.rlim_max,
                    cfg->limits.max_connections, need);
}

/* socket.url "" and the URL it resolves to name one socket. --print-config
 * writes the resolved URL, so a file saved from it (or the reverse) must
 * reload rather than be refused for a socket that did not change: next
 * takes the running spelling when both resolve alike. Returns next. */
static const pj_config *with_running_socket(const pj_config *cur, pj_config *next)
{
    char a[PJ_CFG_PATH + 16], b[PJ_CFG_PATH + 16], err[512];
    if (strcmp(cur->socket.url, next->socket.url) == 0)
        return next;
    if (pj_sockpath_resolve(cur->socket.url, PJ_SOCKPATH_SERVER, a, sizeof a, err, sizeof err) ||
        pj_sockpath_resolve(next->socket.url, PJ_SOCKPATH_SERVER, b, sizeof b, err, sizeof err) ||
        strcmp(a, b) != 0)
        return next;
    snprintf(next->socket.url, sizeof next->socket.url, "%s", cur->socket.url);
    return next;
}

/* A reload. systemd hears RELOADING=1 before and READY=1 after, whatever
 * the outcome (without the READY=1 it would keep the unit "reloading");
 * STATUS= and STATS "reload" say what became of it. */
static void reload_now(daemon_state *d)
{
    char err[1024], msg[1100], status[700];
    pj_config *next = malloc(sizeof *next); /* ~730 KB */
    pj_reload_result r;
    const char *file = d->args.config ? d->args.config : "(no --config file)";
    const int tell = !d->stopping; /* after STOPPING=1, READY=1 would mislead */
    pj_log_info("SIGHUP: reloading %s", file);
    if (tell) {
        snprintf(status, sizeof status, "reloading %s", file);
        pj_notify_reloading(status);
    }
    if (!next) {
        pj_log_err("reload failed, keeping the running configuration: out of memory");
        r = PJ_RELOAD_FAILED;
        snprintf(msg, sizeof msg, "out of memory");
    } else if (build_config(&d->args, next, err, sizeof err) != 0) {
        pj_log_err("reload failed, keeping the running configuration: %s", err);
        r = PJ_RELOAD_FAILED;
        snprintf(msg, sizeof msg, "%s", err);
    } else if (pj_config_check_reload(&d->cfg, with_running_socket(&d->cfg, next), err,
                                      sizeof err) != 0) {
        pj_log_err("reload refused, keeping the running configuration: %s", err);
        r = PJ_RELOAD_REFUSED;
        snprintf(msg, sizeof msg, "%s", err);
    } else {
        const uint32_t had_conns = d->cfg.limits.max_connections;
        d->cfg.limits = next->limits;
        d->cfg.auth = next->auth;
        d->cfg.log = next->log;
        pj_server_reload(d->server, next);
        r = PJ_RELOAD_APPLIED;
        if (d->cfg.limits.max_connections > had_conns)
            say_fd_limit_short(&d->cfg);
        if (d->args.config)
            snprintf(msg, sizeof msg, "log level, limits and auth from %s", file);
        else
            snprintf(msg, sizeof msg,
                     "log level, limits and auth: the built-in defaults and the "
                     "command line (no --config file)");
    }
    free(next);
    pj_server_note_reload(d->server, r, msg);
    if (tell) {
        /* A stall stays in STATUS= (the watchdog's own updates come only
         * when its cause changes), the reload's outcome after it. */
        char lead[256];
        if (!pj_server_stall_status(d->server, lead, sizeof lead))
            snprintf(lead, sizeof lead, "serving");
        snprintf(status, sizeof status, "%s; reload %s: %.300s", lead,
                 r == PJ_RELOAD_APPLIED   ? "applied"
                 : r == PJ_RELOAD_REFUSED ? "refused, the running configuration stays"
                                          : "failed, the running configuration stays",
                 msg);
        pj_notify_ready(status);
    }
}

/* SIGHUPs are taken together: each one sets a reload going at the loop's
 * next turn, and those caught before it ran share it (the file is read
 * after all of them). A burst of them (a script's loop, 5000 in a test) was
 * a reload each, ~1.6 ms apiece on the loop, which held a drain behind
 * them for tens of seconds on a busy machine. */
static void on_reload_due(uv_idle_t *h)
{
    daemon_state *d = h->data;
    uv_idle_stop(h);
    reload_now(d);
}

static void on_hup(uv_signal_t *h, int signum)
{
    (void)signum;
    daemon_state *d = h->data;
    if (!uv_is_active((uv_handle_t *)&d->reload_due))
        uv_idle_start(&d->reload_due, on_reload_due);
}

static void model_warn(void *ctx, const char *msg)
{
    (void)ctx;
    pj_log_warn("model: %s", msg);
}

/* PROJD_START_PAUSE_MS (tests only): a pause before each layer's load, so
 * that a test can signal projd while it loads. */
static unsigned start_pause_ms(void)
{
    uint32_t ms = 0;
    pj_envknob_u32("PROJD_START_PAUSE_MS", 0, 60000, &ms);
    return ms;
}

/* PROJD_START_HANG_MS (tests only): the first layer's load does not end
 * for this long, whatever signals come, as a read from a hung network
 * mount would not; the stop's grace (daemon/startsig.h) is what ends it. */
static void start_hang(void)
{
    uint32_t ms = 0;
    if (!pj_envknob_u32("PROJD_START_HANG_MS", 0, 600000, &ms))
        return;
    struct timespec left = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&left, &left) != 0 && errno == EINTR)
        ;
}

static int model_progress(void *ctx, uint32_t index, uint32_t count, const char *layer)
{
    const unsigned *pause_ms = ctx;
    if (index == 0)
        start_hang();
    if (*pause_ms)
        usleep(*pause_ms * 1000u);
    if (pj_startsig_stop())
        return 1;
    pj_notify_progress("loading model: layer %u of %u (%s)", index + 1, count, layer);
    return 0;
}

/* PROJD_LOAD_TURN_S: the most seconds a start waits for the model load of
 * another instance whose socket shares its directory (daemon/loadturn.h);
 * 0: no turns. */
#define LOAD_TURN_DEFAULT_S 600u

static unsigned load_turn_limit_s(void)
{
    uint32_t s = LOAD_TURN_DEFAULT_S;
    pj_envknob_u32("PROJD_LOAD_TURN_S", 0, 86400, &s);
    return s;
}

typedef struct turn_wait_state {
    const char *dir;
    unsigned said_at_ms; /* when the wait was last said (UINT_MAX: not yet) */
    unsigned waited_ms;  /* the wait so far */
} turn_wait_state;

/* While another instance loads: said at once and every 10 s (the log and
 * systemd's STATUS=, which extends the start's timeout); a stop signal
 * ends the wait. */
static int turn_wait(void *ctx, long holder, unsigned waited_ms)
{
    turn_wait_state *t = ctx;
    t->waited_ms = waited_ms;
    if (pj_startsig_stop())
        return 1;
    if (t->said_at_ms != UINT_MAX && waited_ms < t->said_at_ms + 10000u)
        return 0;
    char who[48] = "another projd";
    if (holder > 0)
        snprintf(who, sizeof who, "projd pid %ld", holder);
    if (t->said_at_ms == UINT_MAX)
        pj_log_info("waiting for the model load of %s to end: daemons whose sockets share %s "
                    "load one at a time, so that each one's memory check sees the others' "
                    "(PROJD_LOAD_TURN_S)",
                    who, t->dir);
    pj_notify_progress("waiting for the model load of %s (%u s)", who, waited_ms / 1000u);
    t->said_at_ms = waited_ms;
    return 0;
}

/* A stop signal that came during the start: said, and the start ends
 * (exit 0, nothing served). where: where the start stopped; tell: send
 * STOPPING=1 (not where the server's drain sends it). */
static int stopped_starting(const char *where, int tell)
{
    int sig = pj_startsig_stop();
    if (!sig)
        return 0;
    pj_startsig_disarm();
    pj_log_info("%s during the start: stopped %s (exit code 0)",
                sig == SIGTERM ? "SIGTERM" : "SIGINT", where);
    if (tell)
        pj_notify_stopping("stopped during the start");
    return 1;
}

/* The load's turn among the daemons whose sockets share url's directory
 * (daemon/loadturn.h), waited for as turn_wait says; released by the
 * caller (pj_loadturn_release) once the load is over. 1 when a stop
 * signal ended the wait (said; the start ends with exit 0), else 0: taken,
 * or the load goes on without it (said why). */
static int take_load_turn(const char *url)
{
    char err[512];
    pj_socket_look lk;
    unsigned turn_s = load_turn_limit_s();
    if (!turn_s || pj_server_look_socket(url, &lk, err, sizeof err) != 0 || !lk.dir[0])
        return 0;
    if (lk.dir_errno) {
        pj_log_info("the socket's directory %s is not there yet (listen makes it): this start "
                    "loads without waiting for a turn (daemon/DAEMON.md, \"Loads take turns\")",
                    lk.dir);
        return 0;
    }
    turn_wait_state tw = {.dir = lk.dir, .said_at_ms = UINT_MAX};
    int rc = pj_loadturn_take(lk.dir, turn_s * 1000u, turn_wait, &tw, err, sizeof err);
    if (rc == -ECANCELED && stopped_starting("waiting for its turn to load", 1))
        return 1;
    if (rc > 0)
        pj_log_warn("%s", err);
    else if (tw.said_at_ms != UINT_MAX)
        pj_log_info("the load's turn came after %.1f s", tw.waited_ms / 1e3);
    return 0;
}

/* Open files: the soft limit raised to the hard one, as a server that
 * holds a descriptor per client should (a shell's 1024 against the unit's
 * LimitNOFILE=65536); a limit still short of limits.max_connections is
 * said (say_fd_limit_short, above reload_now). */
static void raise_fd_limit(const pj_config *cfg)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    const rlim_t cap = 1u << 20; /* what the kernel's nr_open allows by default */
    const rlim_t want = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > cap ? cap : rl.rlim_max;
    if (rl.rlim_cur < want) {
        struct rlimit up = {.rlim_cur = want, .rlim_max = rl.rlim_max};
        (void)setrlimit(RLIMIT_NOFILE, &up);
    }
    say_fd_limit_short(cfg);
}

/* auto chose the cpu backend for a configuration written for a GPU: said,
 * since a GPU that has become unusable (a driver gone) would otherwise
 * pass for a host without one, serving many times slower. */
static void say_cpu_ignores(const pj_config *cfg, const pj_backend_ops *ops, const char *why)
{
    char said[1000];
    if (pj_backend_cpu_ignores(cfg, ops, why, said, sizeof said))
        pj_log_warn("%s: set device.backend to \"cuda\" to refuse a start without the GPU, or to "
                    "\"cpu\"",
                    said);
}

static int serve(daemon_state *d, const char *url)
{
    pj_config *cfg = &d->cfg;
    char err[1024], why[512];
    const pj_backend_ops *ops = NULL;
    pj_model *model = NULL;
    pj_backend *be = NULL;
    uv_loop_t loop;
    int rc;

    /* Fail fast, before the model load, on what would fail later anyway. */
    if (pj_backend_select(cfg->device.backend, &ops, why, sizeof why, err, sizeof err) != 0) {
        pj_log_err("%s", err);
        return 1;
    }
    say_cpu_ignores(cfg, ops, why);
    if (pj_server_check_socket(url, err, sizeof err) != 0) {
        pj_log_err("%s", err);
        return 1;
    }
    uint32_t gid;
    if (pj_server_socket_group(cfg->socket.group, &gid, err, sizeof err) != 0) {
        pj_log_err("%s", err);
        return 1;
    }
    if ((rc = pj_shmguard_install()) != 0)
        pj_log_warn("cannot install the SIGBUS guard (%s): a client that shrinks a registered "
                    "buffer can crash the daemon",
                    strerror(-rc));

    raise_fd_limit(cfg);
    pj_log_info("projd %s: backend %s", PJ_VERSION_STRING, why);
    pj_notify_progress("loading model %s", cfg->model.path);
    pj_log_info("loading model %s (%u layers)", cfg->model.path, cfg->model.n_layers);
    unsigned pause_ms = start_pause_ms();
    if (pause_ms)
        pj_log_warn("PROJD_START_PAUSE_MS=%u: pausing before each layer's load (tests only)",
                    pause_ms);
    if (take_load_turn(url))
        return 0;
    rc = pj_model_load_progress(cfg, &model, NULL, model_warn, model_progress, &pause_ms, err,
                                sizeof err);
    if (rc != 0)
        pj_loadturn_release();
    if (rc == -ECANCELED && stopped_starting("in the model's load", 1))
        return 0;
    if (rc != 0) {
        pj_log_err("model: %s", err);
        pj_notify_status("model load failed: %s", err);
        return 1;
    }
    for (uint32_t i = 0; i < model->n_layers; i++) {
        const pj_model_layer *L = &model->layers[i];
        pj_log_info("layer %u %s: %u x %u %s, max_n %u, %zu bytes stored (bf16 %zu)", i, L->name,
                    L->w.n, L->w.k, pj_format_name(L->w.fmt), L->max_n, L->stored_bytes,
                    L->bf16_bytes);
    }
    /* load_ms is the file's read and copy alone; the conversion (z12,
     * split, and its verification) comes on top. */
    pj_log_info("model loaded in %.1f ms (read %.1f ms, conversion %.1f ms on %u thread%s)",
                model->load_ms + model->convert_ms, model->load_ms, model->convert_ms,
                model->load_threads, model->load_threads == 1 ? "" : "s");
    /* The turn is held into the backend's start: the host memory it takes
     * (cuda: the device's context, the unpacked copies of the upload, the
     * lanes' cuBLAS handles) must be in place before the next instance's
     * checks read the host. The cuda backend passes it on itself once
     * that memory is taken (its graphs' capture and warm-up take little),
     * and this release covers every other backend and a failed start. */
    if (stopped_starting("before the backend's start", 1)) {
        pj_model_free(model);
        return 0;
    }
    pj_notify_progress("starting backend %s", ops->name);
    rc = pj_backend_create(ops, cfg, model, &be, err, sizeof err);
    pj_loadturn_release();
    if (rc == -ECANCELED && stopped_starting("in the backend's start", 1)) {
        pj_model_free(model);
        return 0;
    }
    if (rc != 0) {
        pj_log_err("backend %s: %s", ops->name, err);
        pj_notify_status("backend failed: %s", err);
        pj_model_free(model);
        return 1;
    }
    pj_log_info("backend %s ready: %s", ops->name, be->device_name);

    uv_loop_init(&loop);
    rc = pj_server_create(&loop, cfg, model, be, url, on_server_stopped, d, &d->server, err,
                          sizeof err);
    if (rc != 0) {
        pj_log_err("%s", err);
        d->exit_code = 1;
        goto out_loop;
    }
    uv_signal_init(&loop, &d->sig_term);
    uv_signal_init(&loop, &d->sig_int);
    uv_signal_init(&loop, &d->sig_hup);
    d->sig_term.data = d->sig_int.data = d->sig_hup.data = d;
    uv_signal_start(&d->sig_term, on_stop_signal, SIGTERM);
    uv_signal_start(&d->sig_int, on_stop_signal, SIGINT);
    uv_signal_start(&d->sig_hup, on_hup, SIGHUP);
    uv_idle_init(&loop, &d->reload_due);
    d->reload_due.data = d;

    /* From here the loop's handlers hear the signals; one that came
     * before is taken now. */
    if (stopped_starting("before listening", 0)) {
        d->stopping = 1;
        pj_server_drain(d->server);
        uv_run(&loop, UV_RUN_DEFAULT);
    } else if ((rc = pj_server_listen(d->server, err, sizeof err)) != 0) {
        pj_log_err("%s", err);
        char reason[1100];
        snprintf(reason, sizeof reason, "cannot listen: %s", err);
        pj_server_drain_failed(d->server, reason);
        uv_run(&loop, UV_RUN_DEFAULT);
        d->exit_code = 1;
    } else {
        pj_notify_ready("serving 0 connections");
        pj_log_info("ready");
        if (pj_startsig_take_hup()) {
            pj_log_info("SIGHUP came during the start: reloading now");
            reload_now(d);
        }
        uv_run(&loop, UV_RUN_DEFAULT);
    }
    if (pj_server_destroy(d->server)) {
        /* A release has not returned (it waits for a held device, before
         * or inside its CUDA call): closing the backend under it would
         * free what it uses, and the runtime's own teardown would wait
         * too. The kernel frees all. */
        pj_log_info("stopped without closing the device (exit code %d)", d->exit_code);
        fflush(NULL);
        _exit(d->exit_code);
    }
    d->server = NULL;
out_loop:
    if (uv_loop_close(&loop) != 0) {
        uv_run(&loop, UV_RUN_DEFAULT);
        if (uv_loop_close(&loop) != 0)
            pj_log_warn("event loop closed with handles still open");
    }
    pj_backend_destroy(be);
    pj_model_free(model);
    /* nng reaps closed sockets and listeners on its own threads; wait for
     * that so nothing is left for a leak checker. */
    nng_fini();
    return d->exit_code;
}

/* Where a start takes its socket URL from, for --check-config, --print-config
 * and the log. */
static void url_source(const daemon_state *d, char *out, size_t len)
{
    char url[PJ_CFG_PATH + 16], err[200];
    pj_sockpath_source src = PJ_SOCKPATH_FROM_CONFIGURED;
    if (d->cfg.socket.url[0])
        snprintf(out, len, "%s", d->args.socket ? "--socket" : "socket.url");
    else if (pj_sockpath_resolve_src("", PJ_SOCKPATH_SERVER, url, sizeof url, &src, err,
                                     sizeof err) == 0)
        snprintf(out, len, "socket.url \"\": %s", pj_sockpath_source_text(PJ_SOCKPATH_SERVER, src));
    else
        snprintf(out, len, "socket.url \"\": %s", err);
}

/* --print-config: the configuration as JSON on stdout, with socket.url
 * the URL a start would listen on (where it came from on stderr when the
 * configuration left it ""); a URL the configuration cannot hold stays "". */
static int print_config(const daemon_state *d)
{
    static pj_config shown;
    shown = d->cfg;
    char url[PJ_CFG_PATH + 16], err[1024];
    if (!shown.socket.url[0]) {
        if (pj_sockpath_resolve("", PJ_SOCKPATH_SERVER, url, sizeof url, err, sizeof err) != 0) {
            fprintf(stderr, "projd: socket.url \"\": %s\n", err);
        } else {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "socket"), "url", url);
            char *text = cJSON_PrintUnformatted(o);
            cJSON_Delete(o);
            char src[256];
            url_source(d, src, sizeof src);
            if (text && pj_config_apply_json(&shown, text, strlen(text), err, sizeof err) == 0)
                fprintf(stderr, "projd: %s resolves to %s\n", src, url);
            else
                fprintf(stderr, "projd: %s resolves to %s, which a start refuses: %s\n", src, url,
                        text ? err : "no memory");
            free(text);
        }
    }
    char *text = pj_config_to_json(&shown);
    if (!text) {
        fprintf(stderr, "projd: out of memory\n");
        return 1;
    }
    printf("%s\n", text);
    free(text);
    /* `projd --print-config > new.json && ...` must not take an empty or
     * cut file for success (a full disk, /dev/full). */
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "projd: --print-config: writing standard output: %s\n", strerror(errno));
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'},    {"model", required_argument, NULL, 'm'},
        {"socket", required_argument, NULL, 's'},    {"backend", required_argument, NULL, 'b'},
        {"log-level", required_argument, NULL, 'l'}, {"check-config", no_argument, NULL, 'C'},
        {"print-config", no_argument, NULL, 'P'},    {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},         {NULL, 0, NULL, 0},
    };
    static daemon_state d;
    int o;
    pj_log_init();
    /* ':' first: getopt stays quiet and a mistake gets one line here. */
    int li = -1;
    while ((o = getopt_long(argc, argv, ":hV", opts, &li)) != -1) {
        /* The option's own word: before its value when that came apart. */
        const int apart = optarg && optarg == argv[optind - 1] && optind >= 2;
        const char *word = argv[optind - (apart ? 2 : 1)];
        if (li >= 0 && word[0] == '-' && word[1] == '-') {
            /* Whole names only, as projctl takes them: "--back" read as
             * --backend today would read as another option once one more
             * begins the same way. */
            const size_t nl = strcspn(word + 2, "=");
            if (nl != strlen(opts[li].name)) {
                fprintf(stderr,
                        "projd: unknown option \"%.*s\" (did you mean --%s?)\n(see projd --help)\n",
                        (int)(nl + 2), word, opts[li].name);
                return 2;
            }
        }
        /* "--config --model X" took "--model" as the file: a value that
         * looks like an option is a forgotten one (--config=--x means it). */
        if (li >= 0 && apart && optarg[0] == '-' && optarg[1] == '-') {
            fprintf(stderr,
                    "projd: --%s needs a value, and got the option \"%s\"\n(see projd --help)\n",
                    opts[li].name, optarg);
            return 2;
        }
        li = -1;
        /* A value given twice, differently: the last would win without a
         * word (a second --config replaced the first, which was read no
         * more). One file, one model, one socket: say so. */
        static const char *given[128];
        if (optarg && o > 0 && o < 128) {
            if (given[o] && strcmp(given[o], optarg) != 0) {
                fprintf(stderr,
                        "projd: %.*s given twice (\"%s\", then \"%s\"): it takes one value%s\n(see "
                        "projd --help)\n",
                        (int)strcspn(word, "="), word, given[o], optarg,
                        o == 'c' ? " (one configuration file: put the keys of both in it)" : "");
                return 2;
            }
            given[o] = optarg;
        }
        switch (o) {
        case 'c':
            d.args.config = optarg;
            break;
        case 'm':
            d.args.model = optarg;
            break;
        case 's':
            d.args.socket = optarg;
            break;
        case 'b':
            d.args.backend = optarg;
            break;
        case 'l':
            d.args.log_level = optarg;
            break;
        case 'C':
            d.args.check_config = 1;
            break;
        case 'P':
            d.args.print_config = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case 'V':
            printf("projd %s\n", PJ_VERSION_STRING);
            return 0;
        case ':':
            fprintf(stderr, "projd: %s needs a value\n(see projd --help)\n", argv[optind - 1]);
            return 2;
        default:
            /* optopt: a short option's letter, or a long option's value
             * when it was given a value it does not take; 0 for a long
             * option that is unknown or ambiguous. */
            if (optopt && strncmp(argv[optind - 1], "--", 2) != 0)
                fprintf(stderr, "projd: unknown option \"-%c\"\n(see projd --help)\n", optopt);
            else if (optopt)
                fprintf(stderr, "projd: %s takes no value\n(see projd --help)\n", argv[optind - 1]);
            else
                fprintf(stderr, "projd: unknown or ambiguous option \"%s\"\n(see projd --help)\n",
                        argv[optind - 1]);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "projd: unexpected argument \"%s\"\n(see projd --help)\n", argv[optind]);
        return 2;
    }
    /* --print-config exits before any check: taking both would answer 0
     * for a configuration whose check fails. */
    if (d.args.check_config && d.args.print_config) {
        fprintf(stderr, "projd: --check-config and --print-config cannot be combined; give one "
                        "of them\n");
        return 2;
    }
    char err[1024];
    if (build_config(&d.args, &d.cfg, err, sizeof err) != 0) {
        fprintf(stderr, "projd: %s\n", err);
        return 2;
    }
    pj_log_set_level(d.cfg.log.level);
    if (d.args.print_config)
        return print_config(&d);
    char url[PJ_CFG_PATH + 16];
    if (pj_sockpath_resolve(d.cfg.socket.url, PJ_SOCKPATH_SERVER, url, sizeof url, err,
                            sizeof err) != 0) {
        fprintf(stderr, "projd: %s\n", err);
        return 2;
    }
    char url_src[256];
    url_source(&d, url_src, sizeof url_src);
    /* socket.url and --socket were checked with the configuration; this is
     * for $PROJD_SOCKET, which a mistake there makes a configuration error
     * too (exit 2: the unit does not restart it to fail again). */
    if (pj_sockpath_check_served(url, url_src, err, sizeof err) != 0) {
        fprintf(stderr, "projd: %s\n", err);
        return 2;
    }
    if (d.args.check_config)
        return pj_checkcfg_run(&d.cfg, d.args.config, url, url_src);
    if (!d.cfg.socket.url[0])
        pj_log_info("socket %s (%s)", url, url_src);
    /* A client that disappears mid-write must not kill the daemon. */
    signal(SIGPIPE, SIG_IGN);
    /* Until the loop's handlers are in place (after the model load and the
     * backend's start, which take seconds) the start's own handlers take
     * SIGTERM, SIGINT and SIGHUP (startsig.h). */
    pj_startsig_catch();
    int rc = serve(&d, url);
    /* A start that failed or was stopped took the socket's lock but never
     * served (a drained server has dropped it already). */
    pj_socklock_release();
    return rc;
}
