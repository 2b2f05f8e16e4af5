/* projd_main.c — the projd daemon: configuration, model, backend, serve.
 *
 * Exit codes: 0 after a clean drain (SIGTERM/SIGINT) or --check-config /
 * --print-config / --help / --version; 1 when the daemon could not start or
 * had to stop on an error (also --check-config when the backend, the socket
 * group or the model file would stop a start); 2 for a bad command line or
 * configuration.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <nng/nng.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "config/config.h"
#include "daemon/backend.h"
#include "daemon/log.h"
#include "daemon/model.h"
#include "daemon/notify.h"
#include "daemon/server.h"
#include "daemon/shmguard.h"
#include "protocol/sockpath.h"

#ifndef PJ_VERSION_STRING
#define PJ_VERSION_STRING "0.1.0"
#endif

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
    int exit_code;
} daemon_state;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: projd [options]\n"
            "  --config FILE     apply FILE (JSON, see config/CONFIG.md) on top of the defaults\n"
            "  --model PATH      safetensors file to serve (model.path)\n"
            "  --socket URL      ipc://PATH or PATH to listen on (socket.url)\n"
            "  --backend B       auto | cpu | cuda (device.backend)\n"
            "  --log-level L     error | warn | info | debug (log.level)\n"
            "  --check-config    check the configuration, the backend, the socket group and\n"
            "                    the model file's tensors (not the weights), print one line, exit\n"
            "  --print-config    print the resulting configuration as JSON, exit\n"
            "  --help            this text\n"
            "  --version         print the version\n"
            "Command-line values win over the file, also when SIGHUP re-reads it.\n"
            "Signals: SIGTERM/SIGINT drain and exit 0; SIGHUP reloads log level, limits, auth.\n");
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
    pj_config c;
    pj_config_defaults(&c);
    if (a->config) {
        int rc = pj_config_apply_file(&c, a->config, err, errlen);
        if (rc != 0)
            return rc;
    }
    int rc = apply_cli(a, &c, err, errlen);
    if (rc != 0)
        return rc;
    *cfg = c;
    return 0;
}

static void on_server_stopped(void *arg, int exit_code)
{
    daemon_state *d = arg;
    d->exit_code = exit_code;
    pj_server_set_exit_code(exit_code);
    uv_close((uv_handle_t *)&d->sig_term, NULL);
    uv_close((uv_handle_t *)&d->sig_int, NULL);
    uv_close((uv_handle_t *)&d->sig_hup, NULL);
}

static void on_stop_signal(uv_signal_t *h, int signum)
{
    daemon_state *d = h->data;
    pj_log_info("%s received", signum == SIGTERM ? "SIGTERM" : "SIGINT");
    pj_server_drain(d->server);
}

static void on_hup(uv_signal_t *h, int signum)
{
    (void)signum;
    daemon_state *d = h->data;
    char err[1024];
    pj_config next;
    pj_log_info("SIGHUP: reloading %s", d->args.config ? d->args.config : "(no --config file)");
    if (build_config(&d->args, &next, err, sizeof err) != 0) {
        pj_log_err("reload failed, keeping the running configuration: %s", err);
        return;
    }
    if (pj_config_check_reload(&d->cfg, &next, err, sizeof err) != 0) {
        pj_log_err("reload refused, keeping the running configuration: %s", err);
        return;
    }
    d->cfg.limits = next.limits;
    d->cfg.auth = next.auth;
    d->cfg.log = next.log;
    pj_server_reload(d->server, &next);
}

static void model_warn(void *ctx, const char *msg)
{
    (void)ctx;
    pj_log_warn("model: %s", msg);
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

    pj_log_info("projd %s: backend %s", PJ_VERSION_STRING, why);
    pj_notify_status("loading model %s", cfg->model.path);
    pj_log_info("loading model %s (%u layers)", cfg->model.path, cfg->model.n_layers);
    if (pj_model_load(cfg, &model, model_warn, NULL, err, sizeof err) != 0) {
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
    pj_log_info("model loaded in %.1f ms (conversion %.1f ms)", model->load_ms, model->convert_ms);

    pj_notify_status("starting backend %s", ops->name);
    if (pj_backend_create(ops, cfg, model, &be, err, sizeof err) != 0) {
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

    rc = pj_server_listen(d->server, err, sizeof err);
    if (rc != 0) {
        pj_log_err("%s", err);
        pj_notify_status("cannot listen: %s", err);
        pj_server_drain(d->server);
        uv_run(&loop, UV_RUN_DEFAULT);
        d->exit_code = 1;
    } else {
        pj_notify_ready("serving 0 connections");
        pj_log_info("ready");
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
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
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
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "projd: unexpected argument \"%s\"\n", argv[optind]);
        usage(stderr);
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
    if (d.args.print_config) {
        char *text = pj_config_to_json(&d.cfg);
        if (!text) {
            fprintf(stderr, "projd: out of memory\n");
            return 1;
        }
        printf("%s\n", text);
        free(text);
        return 0;
    }
    char url[PJ_CFG_PATH + 16];
    if (pj_sockpath_resolve(d.cfg.socket.url, PJ_SOCKPATH_SERVER, url, sizeof url, err,
                            sizeof err) != 0) {
        fprintf(stderr, "projd: %s\n", err);
        return 2;
    }
    if (d.args.check_config) {
        /* What a start would refuse before serving, short of loading the
         * weights: the backend, the socket's group, the model file's header
         * against the layers (a missing tensor, a shape or dtype that does
         * not fit, max_n > N, an impossible format). */
        uint32_t gid;
        const pj_backend_ops *ops;
        char why[512];
        if (pj_backend_select(d.cfg.device.backend, &ops, why, sizeof why, err, sizeof err) != 0 ||
            pj_server_socket_group(d.cfg.socket.group, &gid, err, sizeof err) != 0) {
            fprintf(stderr, "projd: %s\n", err);
            return 1;
        }
        if (pj_model_check(&d.cfg, err, sizeof err) != 0) {
            fprintf(stderr, "projd: model: %s\n", err);
            return 1;
        }
        printf("projd: configuration OK (%s; model %s, %u layers; socket %s; backend %s)\n",
               d.args.config ? d.args.config : "defaults", d.cfg.model.path, d.cfg.model.n_layers,
               url, why);
        return 0;
    }
    /* A client that disappears mid-write must not kill the daemon. */
    signal(SIGPIPE, SIG_IGN);
    /* SIGHUP's default action kills; until the loop's handler is in place
     * (after the model load and the backend's start, which take seconds) a
     * reload (systemctl reload, a logrotate hook) must not. It is ignored
     * until then: the configuration being loaded is read after it anyway. */
    signal(SIGHUP, SIG_IGN);
    return serve(&d, url);
}
