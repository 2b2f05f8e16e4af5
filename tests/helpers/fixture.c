/* fixture.c — temp directory and generated-model fixtures for the suites. */
#include "tests/helpers/fixture.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char fx_dir[4096];
static pid_t fx_owner;

static int fx_rm(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path); /* best effort: keep going */
    return 0;
}

static void fx_cleanup(void)
{
    /* Forked test children inherit the handler; only the creator removes. */
    if (fx_dir[0] && getpid() == fx_owner)
        nftw(fx_dir, fx_rm, 16, FTW_DEPTH | FTW_PHYS);
}

const char *pj_fixture_tmpdir(void)
{
    if (fx_dir[0])
        return fx_dir;
    const char *base = getenv("TMPDIR");
    if (!base || !base[0])
        base = "/tmp";
    snprintf(fx_dir, sizeof fx_dir, "%s/projd-test-XXXXXX", base);
    if (!mkdtemp(fx_dir)) {
        fprintf(stderr, "fixture: mkdtemp %s: %s\n", fx_dir, strerror(errno));
        fx_dir[0] = '\0';
        return NULL;
    }
    fx_owner = getpid();
    atexit(fx_cleanup);
    return fx_dir;
}

char *pj_fixture_path(char *out, size_t cap, const char *name)
{
    const char *d = pj_fixture_tmpdir();
    snprintf(out, cap, "%s/%s", d ? d : "/tmp", name);
    return out;
}
