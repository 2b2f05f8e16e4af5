/* fuzz_metrics.c — arbitrary bytes as a STATS reply, rendered as
 * Prometheus text (client/metrics.h).
 *
 * A reply is the daemon's, but the text must be valid whatever it holds:
 * node_exporter drops a whole file for one bad line, projd_up with it.
 * The harness checks what that needs: the text is UTF-8; every line is a
 * HELP (escapes \\ and \n only), a TYPE of the family its HELP named, or a
 * sample of the family typed last (a summary's _sum and _count are its);
 * no family is typed twice; names and label names are legal, label values
 * closed and escaped, no label twice in a sample; every sample carries the
 * constant label; values are numbers. */
#include <locale.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

#include "client/metrics.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok)
{
    if (!ok)
        __builtin_trap();
}

static int name_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}

static const char *name_end(const char *p)
{
    check(name_start(*p));
    while (name_start(*p) || (*p >= '0' && *p <= '9'))
        p++;
    return p;
}

/* A label name: no ':' (metric names only). */
static const char *label_end(const char *p)
{
    const char *e = name_end(p);
    check(memchr(p, ':', (size_t)(e - p)) == NULL);
    return e;
}

/* A value as Go's strconv reads it: [-+]digits[.digits][e[-+]digits], or
 * NaN, +Inf, -Inf (strtod alone would take nan, inf, hex and blanks). */
static void check_value(const char *v, const char *nl)
{
    if (!strncmp(v, "NaN\n", 4) || !strncmp(v, "+Inf\n", 5) || !strncmp(v, "-Inf\n", 5))
        return;
    const char *p = v;
    if (*p == '-' || *p == '+')
        p++;
    check(*p >= '0' && *p <= '9');
    while (*p >= '0' && *p <= '9')
        p++;
    if (*p == '.')
        for (p++; *p >= '0' && *p <= '9'; p++)
            ;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '-' || *p == '+')
            p++;
        check(*p >= '0' && *p <= '9');
        while (*p >= '0' && *p <= '9')
            p++;
    }
    check(p == nl);
}

#define MAX_FAM 8192
static char *fams[MAX_FAM];
static size_t n_fams;

static void validate(const char *text)
{
    mbstate_t mb;
    memset(&mb, 0, sizeof mb);
    for (const char *p = text; *p;) {
        size_t r = mbrtowc(NULL, p, MB_CUR_MAX, &mb);
        check(r != (size_t)-1 && r != (size_t)-2);
        p += r;
    }
    char help[256] = "", cur[256] = "", type[16] = "";
    n_fams = 0;
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        check(nl != NULL);
        if (!strncmp(p, "# HELP ", 7)) {
            const char *e = name_end(p + 7);
            check(*e == ' ' && (size_t)(e - p - 7) < sizeof help);
            memcpy(help, p + 7, (size_t)(e - p - 7));
            help[e - p - 7] = '\0';
            for (const char *q = e; q < nl; q++)
                if (*q == '\\') {
                    q++;
                    check(*q == '\\' || *q == 'n');
                }
        } else if (!strncmp(p, "# TYPE ", 7)) {
            const char *e = name_end(p + 7);
            check(*e == ' ' && (size_t)(e - p - 7) < sizeof cur);
            memcpy(cur, p + 7, (size_t)(e - p - 7));
            cur[e - p - 7] = '\0';
            check(!strcmp(cur, help));
            size_t tl = (size_t)(nl - e - 1);
            check(tl < sizeof type);
            memcpy(type, e + 1, tl);
            type[tl] = '\0';
            check(!strcmp(type, "gauge") || !strcmp(type, "counter") || !strcmp(type, "summary") ||
                  !strcmp(type, "untyped"));
            for (size_t i = 0; i < n_fams; i++)
                check(strcmp(fams[i], cur) != 0);
            check(n_fams < MAX_FAM);
            fams[n_fams++] = strdup(cur);
        } else {
            check(*p != '#' && cur[0]);
            const char *e = name_end(p);
            size_t nl_ = (size_t)(e - p), cl = strlen(cur);
            int ours = nl_ == cl && !strncmp(p, cur, cl);
            if (!ours && !strcmp(type, "summary") && nl_ > cl && !strncmp(p, cur, cl))
                ours = (nl_ - cl == 4 && !strncmp(p + cl, "_sum", 4)) ||
                       (nl_ - cl == 6 && !strncmp(p + cl, "_count", 6));
            check(ours);
            int has_const = 0;
            char keys[32][128];
            size_t nk = 0;
            if (*e == '{') {
                e++;
                while (*e != '}') {
                    const char *k = e;
                    e = label_end(e);
                    check(e - k < 128 && strncmp(k, "__", 2) != 0 && *e == '=' && e[1] == '"');
                    for (size_t i = 0; i < nk; i++)
                        check(strlen(keys[i]) != (size_t)(e - k) ||
                              strncmp(keys[i], k, (size_t)(e - k)));
                    check(nk < 32);
                    memcpy(keys[nk], k, (size_t)(e - k));
                    keys[nk++][e - k] = '\0';
                    has_const |= e - k == 4 && !strncmp(k, "fuzz", 4);
                    for (e += 2; *e != '"'; e++) {
                        check(*e != '\n' && *e != '\0');
                        if (*e == '\\') {
                            e++;
                            check(*e == '\\' || *e == '"' || *e == 'n');
                        }
                    }
                    e++;
                    if (*e == ',')
                        e++;
                    else
                        check(*e == '}');
                }
                e++;
            }
            check(has_const);
            check(*e == ' ');
            check_value(e + 1, nl);
        }
        p = nl + 1;
    }
    for (size_t i = 0; i < n_fams; i++)
        free(fams[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static pj_metrics_labels l;
    if (!l.n) {
        char err[128];
        check(setlocale(LC_CTYPE, "C.UTF-8") != NULL);
        check(pj_metrics_label_add(&l, "fuzz=\"a\\b\nc\"", err, sizeof err) == 0);
    }
    char err[256];
    char *text = pj_metrics_render((const char *)data, size, &l, err, sizeof err);
    if (!text) {
        check(err[0] != '\0');
        return 0;
    }
    validate(text);
    free(text);
    return 0;
}
