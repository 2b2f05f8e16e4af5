/* notify.c — see notify.h. */
#include "daemon/notify.h"

#include <errno.h>
#include <stddef.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "daemon/log.h"
#include "daemon/stats.h" /* pj_now_ns */

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_state; /* 0: not set up yet, 1: ready, -1: no notify socket */
static int g_fd = -1;
static struct sockaddr_un g_addr;
static socklen_t g_addrlen;

/* Said once: a NOTIFY_SOCKET we cannot use (or one that refuses our first
 * message). Under a Type=notify unit the READY=1 that never arrives makes
 * systemd kill the daemon at its start timeout with nothing in our log to
 * say why (a container that was given the variable but not the socket). */
static int g_warned;
static const char *g_env; /* NOTIFY_SOCKET as read at setup */

static void warn_once(const char *e, const char *why)
{
    if (g_warned)
        return;
    g_warned = 1;
    pj_log_warn("cannot notify systemd through NOTIFY_SOCKET=%s: %s (a Type=notify unit will "
                "not see the daemon ready)",
                e, why);
}

/* NOTIFY_SOCKET is a path, or "@name" for the abstract namespace. */
static void setup_locked(void)
{
    g_state = -1;
    const char *e = getenv("NOTIFY_SOCKET");
    if (!e || !*e)
        return;
    g_env = e;
    if (e[0] != '/' && e[0] != '@') {
        warn_once(e, "not an absolute path or an @abstract name");
        return;
    }
    size_t len = strlen(e);
    if (len >= sizeof g_addr.sun_path) {
        warn_once(e, "longer than a socket address holds");
        return;
    }
    memset(&g_addr, 0, sizeof g_addr);
    g_addr.sun_family = AF_UNIX;
    memcpy(g_addr.sun_path, e, len);
    if (e[0] == '@')
        g_addr.sun_path[0] = 0;
    g_addrlen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + (e[0] == '/'));
    g_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (g_fd < 0) {
        warn_once(e, strerror(errno));
        return;
    }
    struct timeval tv = {PJ_NOTIFY_WAIT_MS / 1000, (PJ_NOTIFY_WAIT_MS % 1000) * 1000};
    setsockopt(g_fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    g_state = 1;
}

static void send_text(const char *text, int may_wait)
{
    pthread_mutex_lock(&g_mu);
    if (g_state == 0)
        setup_locked();
    if (g_state == 1) {
        int flags = MSG_NOSIGNAL | (may_wait ? 0 : MSG_DONTWAIT);
        ssize_t n;
        /* A signal during a wait for room is no reason to drop the message
         * or to warn (a send with a timeout is not restarted after a
         * handler, SA_RESTART or not: signal(7)). */
        do
            n = sendto(g_fd, text, strlen(text), flags, (struct sockaddr *)&g_addr, g_addrlen);
        while (n < 0 && errno == EINTR);
        /* A lost notification is not worth failing over. A full queue
         * drops a STATUS= line by design; anything else is said once. */
        if (n < 0 && !(errno == EAGAIN && !may_wait))
            warn_once(g_env, strerror(errno));
    }
    pthread_mutex_unlock(&g_mu);
}

void pj_notify_ready(const char *status)
{
    char text[800];
    snprintf(text, sizeof text, "READY=1\nSTATUS=%s", status ? status : "ready");
    send_text(text, 1);
}

/* head, then STATUS= and the printf text. */
static void send_status(const char *head, int may_wait, const char *fmt, va_list ap)
{
    char text[600];
    int n = snprintf(text, sizeof text, "%sSTATUS=", head);
    vsnprintf(text + n, sizeof text - (size_t)n, fmt, ap);
    send_text(text, may_wait);
}

void pj_notify_status(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    send_status("", 0, fmt, ap);
    va_end(ap);
}

void pj_notify_progress(const char *fmt, ...)
{
    static char last_kind[128];
    static uint64_t last_ns;
    char body[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    const size_t kind = strcspn(body, "0123456789");
    const uint64_t now = pj_now_ns();
    pthread_mutex_lock(&g_mu);
    int same = kind < sizeof last_kind && strlen(last_kind) == kind &&
               memcmp(last_kind, body, kind) == 0 &&
               now - last_ns < (uint64_t)PJ_NOTIFY_COALESCE_MS * 1000000ull;
    if (!same) {
        snprintf(last_kind, sizeof last_kind, "%.*s", (int)(kind < 127 ? kind : 127), body);
        last_ns = now;
    }
    pthread_mutex_unlock(&g_mu);
    if (same)
        return;
    char text[600];
    snprintf(text, sizeof text, "EXTEND_TIMEOUT_USEC=%llu\nSTATUS=%s",
             (unsigned long long)PJ_NOTIFY_STEP_SEC * 1000000ull, body);
    send_text(text, 1);
}

void pj_notify_reloading(const char *status)
{
    unsigned long long usec = (unsigned long long)(pj_now_ns() / 1000u);
    char text[600];
    snprintf(text, sizeof text, "RELOADING=1\nMONOTONIC_USEC=%llu\nSTATUS=%s", usec,
             status ? status : "reloading");
    send_text(text, 1);
}

void pj_notify_stopping(const char *status)
{
    char text[600];
    snprintf(text, sizeof text, "STOPPING=1\nSTATUS=%s", status ? status : "stopping");
    send_text(text, 1);
}

unsigned long long pj_notify_watchdog_usec(void)
{
    const char *u = getenv("WATCHDOG_USEC");
    if (!u || !*u)
        return 0;
    char *end;
    errno = 0;
    unsigned long long usec = strtoull(u, &end, 10);
    if (errno || *end || usec == 0) {
        pj_log_warn("WATCHDOG_USEC=%s is not a positive number of microseconds: no watchdog", u);
        return 0;
    }
    /* Set by systemd for the main process; one inherited by another
     * process names the parent, and pings from here would be refused. */
    const char *p = getenv("WATCHDOG_PID");
    if (p && *p) {
        long pid = strtol(p, &end, 10);
        if (*end || pid != (long)getpid())
            return 0;
    }
    return usec;
}

void pj_notify_watchdog(void)
{
    send_text("WATCHDOG=1", 0);
}
