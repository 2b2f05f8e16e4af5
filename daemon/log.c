/* log.c — see log.h. */
#include "daemon/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define LINE_MAX_BYTES 2048

static atomic_int g_level = PJ_LOG_INFO;
static int g_journal;

/* JOURNAL_STREAM is "device:inode" of the stream systemd connected; it is
 * inherited by children that may have redirected stderr, so compare it with
 * what stderr really is. */
static int stderr_is_journal(void)
{
    const char *js = getenv("JOURNAL_STREAM");
    if (!js || !*js)
        return 0;
    unsigned long long dev, ino;
    if (sscanf(js, "%llu:%llu", &dev, &ino) != 2)
        return 0;
    struct stat st;
    if (fstat(STDERR_FILENO, &st) != 0)
        return 0;
    return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void pj_log_init(void)
{
    g_journal = stderr_is_journal();
}

int pj_log_to_journal(void)
{
    return g_journal;
}

void pj_log_set_level(pj_log_level level)
{
    atomic_store(&g_level, (int)level);
}

pj_log_level pj_log_get_level(void)
{
    return (pj_log_level)atomic_load(&g_level);
}

int pj_log_enabled(pj_log_level level)
{
    return (int)level <= atomic_load(&g_level);
}

static const char *level_tag(pj_log_level level)
{
    switch (level) {
    case PJ_LOG_ERROR:
        return "error";
    case PJ_LOG_WARN:
        return "warn";
    case PJ_LOG_INFO:
        return "info";
    default:
        return "debug";
    }
}

/* syslog priorities: err 3, warning 4, info 6, debug 7. */
static int level_prio(pj_log_level level)
{
    switch (level) {
    case PJ_LOG_ERROR:
        return 3;
    case PJ_LOG_WARN:
        return 4;
    case PJ_LOG_INFO:
        return 6;
    default:
        return 7;
    }
}

/* Length of the well-formed UTF-8 character at s (n bytes left), or 0: a
 * stray or cut-off byte, an overlong form, a surrogate, past U+10FFFF, or
 * a C1 control (U+0080..U+009F, which a terminal may act on like ESC).
 * journalctl shows a line holding any of these as "[N blob data]" instead
 * of its text, so one odd byte in a client's HELLO name hid the line. */
size_t pj_utf8_char_len(const unsigned char *s, size_t n)
{
    size_t len;
    uint32_t min;
    if (s[0] < 0x80)
        return 1;
    if (s[0] >= 0xc2 && s[0] <= 0xdf) {
        len = 2;
        min = 0x80;
    } else if ((s[0] & 0xf0) == 0xe0) {
        len = 3;
        min = 0x800;
    } else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
        len = 4;
        min = 0x10000;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    uint32_t cp = s[0] & (0x7fu >> len); /* the lead byte's payload bits */
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3fu);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff) || cp <= 0x9f)
        return 0;
    return len;
}

void pj_log_msg(pj_log_level level, const char *fmt, ...)
{
    if (!pj_log_enabled(level))
        return;
    char line[LINE_MAX_BYTES];
    size_t at = 0;
    int n;
    if (g_journal) {
        n = snprintf(line, sizeof line, "<%d>", level_prio(level));
    } else {
        struct timespec ts;
        struct tm tm;
        clock_gettime(CLOCK_REALTIME, &ts);
        gmtime_r(&ts.tv_sec, &tm);
        n = snprintf(line, sizeof line,
                     "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ projd[%ld] %s: ", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     ts.tv_nsec / 1000000, (long)getpid(), level_tag(level));
    }
    if (n > 0)
        at = (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;
    size_t body = at;
    va_list ap;
    va_start(ap, fmt);
    n = vsnprintf(line + at, sizeof line - at, fmt, ap);
    va_end(ap);
    if (n > 0)
        at += (size_t)n < sizeof line - at ? (size_t)n : sizeof line - at - 1;
    /* Room for the newline, cut before the check below so that the cut
     * cannot split a character the check let through. */
    if (at >= sizeof line - 1)
        at = sizeof line - 2;
    /* One line, and no terminal control: a message can carry a client's
     * text (its HELLO name, a path), and an escape sequence in it would
     * rewrite what an operator's terminal shows. Well-formed UTF-8 stays;
     * every other byte >= 0x80 becomes '?' too (pj_utf8_char_len says why),
     * as does a character the 2 KiB cut split. */
    for (size_t i = body; i < at;) {
        unsigned char ch = (unsigned char)line[i];
        size_t len = 1;
        if (ch == '\n' || ch == '\r' || ch == '\t')
            line[i] = ' ';
        else if (ch < 0x20 || ch == 0x7f)
            line[i] = '?';
        else if (ch >= 0x80)
            len = pj_utf8_char_len((unsigned char *)line + i, at - i);
        if (len == 0) {
            line[i] = '?';
            len = 1;
        }
        i += len;
    }
    line[at++] = '\n';
    /* One write per line; a short write to a pipe of this size does not
     * happen in practice, and a lost log line is not worth a retry loop. */
    ssize_t w = write(STDERR_FILENO, line, at);
    (void)w;
}
