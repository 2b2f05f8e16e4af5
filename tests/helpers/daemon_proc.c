/* daemon_proc.c — see daemon_proc.h. */
#include "tests/helpers/daemon_proc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "config/config.h"
#include "tests/helpers/fixture.h"

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

const char *pj_dproc_binary(void)
{
    static char path[512];
    const char *b = getenv("PJ_BUILD");
    snprintf(path, sizeof path, "%s/bin/projd", b && *b ? b : "build");
    return path;
}

int pj_dproc_prepare(pj_dproc *d, const char *model_path, const char *cfg_json, char *err,
                     size_t errlen)
{
    memset(d, 0, sizeof *d);
    d->pid = -1;
    d->notify_fd = -1;
    /* In the suite's fixture folder, which the suite's main process removes
     * when it exits: a case that fails an assertion ends its Check child
     * with _exit, so pj_dproc_cleanup never runs there, and every failed
     * case left a /tmp/pjd-* folder behind. /tmp when the fixture folder is
     * missing or too long a prefix for the socket's path. */
    const char *base = pj_fixture_tmpdir();
    struct sockaddr_un sun;
    if (!base || strlen(base) + sizeof "/pjd-XXXXXX/projd.sock" > sizeof sun.sun_path)
        base = "/tmp";
    snprintf(d->dir, sizeof d->dir, "%s/pjd-XXXXXX", base);
    if (!mkdtemp(d->dir)) {
        snprintf(err, errlen, "mkdtemp: %s", strerror(errno));
        return -errno;
    }
    chmod(d->dir, 0755);
    snprintf(d->sock, sizeof d->sock, "%s/projd.sock", d->dir);
    snprintf(d->url, sizeof d->url, "ipc://%s", d->sock);
    snprintf(d->config, sizeof d->config, "%s/projd.json", d->dir);
    snprintf(d->log, sizeof d->log, "%s/projd.log", d->dir);
    snprintf(d->notify_path, sizeof d->notify_path, "%s/notify", d->dir);

    pj_config cfg;
    pj_config_defaults(&cfg);
    snprintf(cfg.model.path, sizeof cfg.model.path, "%s", model_path);
    snprintf(cfg.socket.url, sizeof cfg.socket.url, "%s", d->url);
    cfg.cpu.threads = 2;
    cfg.device.backend = PJ_BACKEND_CPU;
    if (cfg_json && pj_config_apply_json(&cfg, cfg_json, strlen(cfg_json), err, errlen) != 0)
        return -EINVAL;
    char *text = pj_config_to_json(&cfg);
    if (!text) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    FILE *f = fopen(d->config, "w");
    if (!f) {
        free(text);
        snprintf(err, errlen, "%s: %s", d->config, strerror(errno));
        return -errno;
    }
    fputs(text, f);
    fclose(f);
    free(text);

    d->notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    memset(&sun, 0, sizeof sun);
    sun.sun_family = AF_UNIX;
    if (strlen(d->notify_path) >= sizeof sun.sun_path) {
        snprintf(err, errlen, "notify path %s is too long", d->notify_path);
        return -ENAMETOOLONG;
    }
    memcpy(sun.sun_path, d->notify_path, strlen(d->notify_path));
    if (d->notify_fd < 0 || bind(d->notify_fd, (struct sockaddr *)&sun, sizeof sun) != 0) {
        snprintf(err, errlen, "notify socket %s: %s", d->notify_path, strerror(errno));
        return -errno;
    }
    return 0;
}

int pj_dproc_spawn(pj_dproc *d, const char *const *extra_args, int wait_ready, int timeout_ms,
                   char *err, size_t errlen)
{
    const char *argv[32];
    int n = 0;
    argv[n++] = pj_dproc_binary();
    argv[n++] = "--config";
    argv[n++] = d->config;
    const char *lvl = getenv("PJ_DPROC_LOG_LEVEL");
    if (lvl && *lvl) {
        argv[n++] = "--log-level";
        argv[n++] = lvl;
    }
    for (int i = 0; extra_args && extra_args[i] && n < 30; i++)
        argv[n++] = extra_args[i];
    argv[n] = NULL;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        return -errno;
    }
    if (pid == 0) {
        int fd = open(d->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, STDERR_FILENO);
            dup2(fd, STDOUT_FILENO);
            close(fd);
        }
        /* A test killed by its timeout must not leave projd behind. */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        setenv("NOTIFY_SOCKET", d->notify_path, 1);
        unsetenv("JOURNAL_STREAM");
        execv(argv[0], (char *const *)argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    d->pid = pid;
    d->exited = 0;
    if (!wait_ready)
        return 0;
    if (pj_dproc_wait_notify(d, "READY=1", timeout_ms) != 0) {
        snprintf(err, errlen, "projd did not become ready within %d ms (%s)", timeout_ms,
                 d->exited ? "it exited" : "still running");
        pj_dproc_dump_log(d);
        return -ETIMEDOUT;
    }
    return 0;
}

int pj_dproc_start(pj_dproc *d, const char *model_path, const char *cfg_json,
                   const char *const *extra_args, int wait_ready, int timeout_ms, char *err,
                   size_t errlen)
{
    int rc = pj_dproc_prepare(d, model_path, cfg_json, err, errlen);
    if (rc != 0)
        return rc;
    return pj_dproc_spawn(d, extra_args, wait_ready, timeout_ms, err, errlen);
}

/* Takes every queued note into d->notes; 1 when one of them holds needle
 * (may be NULL), which the buffer may no longer show if many came after. */
static int read_notes(pj_dproc *d, const char *needle)
{
    char buf[1024];
    int found = 0;
    for (;;) {
        ssize_t n = recv(d->notify_fd, buf, sizeof buf - 1, MSG_DONTWAIT);
        if (n <= 0)
            return found;
        buf[n] = 0;
        found |= needle && strstr(buf, needle) != NULL;
        size_t used = strlen(d->notes);
        /* Full: the oldest notes go, not the newest. A slow start (a
         * sanitizer build loading 1024 layers) sends more progress notes
         * than fit, and READY=1 after them was cut off and never seen. */
        if (used + (size_t)n + 2 > sizeof d->notes) {
            size_t drop = used + (size_t)n + 2 - sizeof d->notes;
            if (drop < used / 2)
                drop = used / 2;
            if (drop > used)
                drop = used;
            memmove(d->notes, d->notes + drop, used - drop + 1);
            used -= drop;
        }
        snprintf(d->notes + used, sizeof d->notes - used, "%s|", buf);
    }
}

static void reap(pj_dproc *d)
{
    if (d->pid > 0 && !d->exited) {
        int st;
        if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
            d->exited = 1;
            d->status = st;
        }
    }
}

int pj_dproc_wait_notify(pj_dproc *d, const char *needle, int timeout_ms)
{
    long long end = now_ms() + timeout_ms;
    for (;;) {
        if (read_notes(d, needle) || strstr(d->notes, needle))
            return 0;
        reap(d);
        long long left = end - now_ms();
        if (left <= 0 || d->exited)
            return -ETIMEDOUT;
        struct pollfd p = {.fd = d->notify_fd, .events = POLLIN};
        poll(&p, 1, left < 50 ? (int)left : 50);
    }
}

int pj_dproc_wait_exit(pj_dproc *d, int timeout_ms)
{
    long long end = now_ms() + timeout_ms;
    for (;;) {
        reap(d);
        if (d->exited || d->pid <= 0)
            return 0;
        if (now_ms() >= end)
            return -ETIMEDOUT;
        sleep_ms(10);
    }
}

int pj_dproc_exit_code(const pj_dproc *d)
{
    if (!d->exited)
        return -1;
    if (WIFEXITED(d->status))
        return WEXITSTATUS(d->status);
    if (WIFSIGNALED(d->status))
        return 128 + WTERMSIG(d->status);
    return -1;
}

int pj_dproc_signal(pj_dproc *d, int sig)
{
    reap(d);
    if (d->pid <= 0 || d->exited)
        return -ESRCH;
    return kill(d->pid, sig) == 0 ? 0 : -errno;
}

int pj_dproc_log_has(pj_dproc *d, const char *needle, int timeout_ms)
{
    long long end = now_ms() + timeout_ms;
    for (;;) {
        FILE *f = fopen(d->log, "r");
        if (f) {
            char line[4096];
            int found = 0;
            while (!found && fgets(line, sizeof line, f))
                found = strstr(line, needle) != NULL;
            fclose(f);
            if (found)
                return 1;
        }
        if (now_ms() >= end)
            return 0;
        sleep_ms(20);
    }
}

void pj_dproc_dump_log(const pj_dproc *d)
{
    FILE *f = fopen(d->log, "r");
    if (!f)
        return;
    fprintf(stderr, "---- %s ----\n", d->log);
    char line[4096];
    while (fgets(line, sizeof line, f))
        fputs(line, stderr);
    fprintf(stderr, "---- end of log ----\n");
    fclose(f);
}

int pj_dproc_stop(pj_dproc *d, int timeout_ms)
{
    if (d->pid <= 0)
        return -1;
    reap(d);
    if (!d->exited) {
        kill(d->pid, SIGTERM);
        if (pj_dproc_wait_exit(d, timeout_ms) != 0) {
            fprintf(stderr, "daemon_proc: projd %d did not exit within %d ms; SIGKILL\n",
                    (int)d->pid, timeout_ms);
            pj_dproc_dump_log(d);
            kill(d->pid, SIGKILL);
            pj_dproc_wait_exit(d, 5000);
        }
    }
    return pj_dproc_exit_code(d);
}

void pj_dproc_cleanup(pj_dproc *d)
{
    if (d->pid > 0 && !d->exited)
        pj_dproc_stop(d, 10000);
    if (d->notify_fd >= 0)
        close(d->notify_fd);
    d->notify_fd = -1;
    if (!d->dir[0])
        return;
    char lock[sizeof d->sock + 8]; /* daemon/socklock.h: left by a killed daemon */
    snprintf(lock, sizeof lock, "%s.lock", d->sock);
    const char *files[] = {d->config, d->log, d->notify_path, d->sock, lock};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        unlink(files[i]);
    rmdir(d->dir);
}

int pj_dproc_replace_config(const pj_dproc *d, const char *text)
{
    char tmp[sizeof d->config + 8];
    snprintf(tmp, sizeof tmp, "%s.new", d->config);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -errno;
    int ok = fputs(text, f) >= 0;
    ok &= fclose(f) == 0;
    if (!ok || rename(tmp, d->config) != 0) {
        int e = ok ? errno : EIO;
        unlink(tmp);
        return -e;
    }
    return 0;
}
