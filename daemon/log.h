/* log.h — projd's log: levels, one line per event, to stderr.
 *
 * When stderr is the systemd journal (JOURNAL_STREAM names stderr's device
 * and inode) each line starts with a "<N>" syslog priority and carries no
 * timestamp (the journal adds its own); otherwise each line starts with a
 * UTC timestamp and the level name. Thread-safe: a line is built in a local
 * buffer and written with one write(2), so lines from different threads
 * never interleave. Newlines and tabs inside a message become spaces;
 * other control bytes, and bytes that are not well-formed UTF-8 (which
 * journalctl would show the whole line as "blob data" for), become '?'.
 */
#ifndef PJ_LOG_H
#define PJ_LOG_H

#include "config/config.h"

/* Decide the output format (journal or plain) from the environment. Call
 * once before the first pj_log_msg; without it the plain format is used. */
void pj_log_init(void);

/* Messages above this level are dropped. Safe to call from any thread. */
void pj_log_set_level(pj_log_level level);
pj_log_level pj_log_get_level(void);

/* 1 when a message at this level would be written. */
int pj_log_enabled(pj_log_level level);

/* Write one line (printf format). Lines longer than 2 KiB are cut. */
void pj_log_msg(pj_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* 1 when pj_log_init found the journal on stderr. */
int pj_log_to_journal(void);

/* The length of the well-formed UTF-8 character at s (n bytes there), or 0
 * when it is not one: a stray continuation byte, an overlong form, a
 * surrogate, past U+10FFFF, cut short, or a C1 control (U+0080..U+009F). */
size_t pj_utf8_char_len(const unsigned char *s, size_t n);

#define pj_log_err(...)  pj_log_msg(PJ_LOG_ERROR, __VA_ARGS__)
#define pj_log_warn(...) pj_log_msg(PJ_LOG_WARN, __VA_ARGS__)
#define pj_log_info(...) pj_log_msg(PJ_LOG_INFO, __VA_ARGS__)
#define pj_log_debug(...)                                                                          \
    do {                                                                                           \
        if (pj_log_enabled(PJ_LOG_DEBUG))                                                          \
            pj_log_msg(PJ_LOG_DEBUG, __VA_ARGS__);                                                 \
    } while (0)

#endif
