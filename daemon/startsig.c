/* startsig.c — see startsig.h. */
#include "daemon/startsig.h"

#include <signal.h>
#include <string.h>

static volatile sig_atomic_t g_stop, g_hup;

static void on_signal(int signum)
{
    if (signum == SIGHUP)
        g_hup = 1;
    else if (!g_stop)
        g_stop = signum;
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
}

int pj_startsig_stop(void)
{
    return (int)g_stop;
}

int pj_startsig_take_hup(void)
{
    if (!g_hup)
        return 0;
    g_hup = 0;
    return 1;
}
