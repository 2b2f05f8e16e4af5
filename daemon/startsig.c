/* startsig.c — see startsig.h. */
#include "daemon/startsig.h"

#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

/* Lock-free atomics: safe in a handler, and the handler may run on any of
 * the process's threads (the load's workers, CUDA's, nng's). */
static atomic_int g_stop, g_hup;

#define STR_(x) #x
#define STR(x)  STR_(x)

static void say(const char *text)
{
    ssize_t n = write(STDERR_FILENO, text, strlen(text));
    (void)n;
}

/* A step that never ends (a model file on a hung network mount, a CUDA
 * call waiting for a wedged MPS server) would keep the stop waiting until
 * systemd's SIGKILL: past the grace, or at a second stop signal, projd
 * exits at once. Only async-signal-safe calls here. Nothing is served yet,
 * so nothing is lost; the socket's lock file stays, as a killed holder
 * leaves it (the next start takes it over). */
static void exit_now(const char *why)
{
    say("projd: ");
    say(why);
    say(": exiting without waiting for the start's step under way (exit code 0)\n");
    _exit(0);
}

static void on_alarm(int signum)
{
    (void)signum;
    if (atomic_load(&g_stop))
        exit_now("the start reached no next step within " STR(
            PJ_STARTSIG_GRACE_S) " s of the stop signal");
}

static void on_signal(int signum)
{
    if (signum == SIGHUP) {
        atomic_store(&g_hup, 1);
        return;
    }
    int none = 0;
    if (!atomic_compare_exchange_strong(&g_stop, &none, signum))
        exit_now("a second stop signal during the start");
    alarm(PJ_STARTSIG_GRACE_S);
}

void pj_startsig_catch(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
}

int pj_startsig_stop(void)
{
    return atomic_load(&g_stop);
}

void pj_startsig_disarm(void)
{
    alarm(0);
}

int pj_startsig_take_hup(void)
{
    return atomic_exchange(&g_hup, 0);
}
