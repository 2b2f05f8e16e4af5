/* fixture.c — temp directory and generated-model fixtures for the suites. */
#include "tests/helpers/fixture.h"

#include "daemon/modelgen.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
    /* Others may pass through, not list: the daemons' folders lie in here
     * (daemon_proc), and a test child that drops to another uid must reach
     * a daemon's socket. */
    chmod(fx_dir, 0711);
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

int pj_fixture_small_model(char *path_out, size_t cap)
{
    static char model[4200];
    if (!model[0]) {
        if (!pj_fixture_tmpdir())
            return -EIO;
        char path[sizeof model], err[512];
        pj_fixture_path(path, sizeof path, "small.safetensors");
        pj_modelgen_opts o = {.seed = 1, .preset = PJ_MODELGEN_SMALL};
        int rc = pj_modelgen_write(path, &o, err, sizeof err);
        if (rc != 0) {
            fprintf(stderr, "fixture: %s\n", err);
            return rc;
        }
        snprintf(model, sizeof model, "%s", path);
    }
    if (strlen(model) >= cap)
        return -ENAMETOOLONG;
    snprintf(path_out, cap, "%s", model);
    return 0;
}

void pj_fixture_small_config(pj_config *cfg, const char *model_path)
{
    pj_config_defaults(cfg);
    snprintf(cfg->model.path, sizeof cfg->model.path, "%s", model_path);
}

int pj_fixture_count_maps(int pid)
{
    char path[64];
    if (pid)
        snprintf(path, sizeof path, "/proc/%d/maps", pid);
    else
        snprintf(path, sizeof path, "/proc/self/maps");
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int n = 0, c;
    while ((c = fgetc(f)) != EOF)
        n += c == '\n';
    fclose(f);
    return n;
}

int pj_fixture_temporaries(const char *path)
{
    char dir[4096], prefix[4096];
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
    snprintf(prefix, sizeof prefix, "%s.tmp", base);
    DIR *d = opendir(dir[0] ? dir : "/");
    if (!d)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}

int pj_fixture_write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    int bad = fputs(text, f) < 0;
    return fclose(f) != 0 || bad ? -1 : 0;
}

int pj_fixture_write_under(const char *dir, const char *rel, const char *text)
{
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, rel) >= sizeof path)
        return -1;
    /* the folders on the way, each made if it is not there */
    for (char *p = path + strlen(dir) + 1; (p = strchr(p, '/')) != NULL; p++) {
        *p = '\0';
        int bad = mkdir(path, 0755) != 0 && errno != EEXIST;
        *p = '/';
        if (bad)
            return -1;
    }
    return pj_fixture_write_text(path, text);
}

long pj_fixture_read_text(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = cap ? fread(buf, 1, cap - 1, f) : 0;
    fclose(f);
    if (cap)
        buf[n] = '\0';
    return (long)n;
}
