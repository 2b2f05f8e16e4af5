/* replacefile.h — a file replaced whole: written beside its target under a
 * temporary name and renamed over it. A reader then sees the old file or the
 * new one, never part of either, and a write that fails part way (a full
 * disk, a quota, a file size limit) leaves the old one where it was. projd-
 * bench's tuning tables, projctl's model files and its metrics file are
 * written this way.
 */
#ifndef PJ_REPLACEFILE_H
#define PJ_REPLACEFILE_H

#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

/* How the new file's mode is taken: as open(2) takes it, less the umask's
 * bits (a tuning table, a model file: what the user's umask says), or
 * exactly (the metrics file, which another user must read whatever umask
 * the timer runs under). */
typedef enum pj_replace_mode { PJ_MODE_UMASKED, PJ_MODE_EXACT } pj_replace_mode;

typedef struct pj_replacing {
    FILE *f;    /* write the new content here */
    char *path; /* the target (a symbolic link's target, resolved) */
    char *tmp;  /* the temporary beside it: path.tmp.XXXXXX; NULL when in place */
} pj_replacing;

/* Creates the temporary beside path with mode (as how says) and opens it as
 * r->f. A symbolic link is followed: its target is replaced and the link
 * stays (a dangling one's target is created). A path that is there and is
 * not a regular file (a FIFO, a device, /dev/stdout, /proc/self/fd/N) is
 * written in place instead, since a rename would put a plain file where it
 * was; there the all-or-nothing promise does not hold (nor matter). A
 * directory is refused (-EISDIR). 0, or -errno with err saying what failed (path first); r is then
 * empty and pj_replacing_abort is harmless on it. A process killed between
 * open and commit leaves its temporary (path.tmp.XXXXXX: each write has its
 * own, so two writers of one target never share one) for the user to
 * remove; every failure this code sees removes it. */
int pj_replacing_open(pj_replacing *r, const char *path, mode_t mode, pj_replace_mode how,
                      char *err, size_t errlen);

/* Flushes r->f, with sync also to the disk (what a large file written once
 * wants before it replaces a good one), closes it and renames it over the
 * target (with sync, the directory's entry is synced too). 0, or -errno with err naming the step,
 * the file and the cause; on failure the temporary is removed and the target is as it was. r is
 * empty after either. */
int pj_replacing_commit(pj_replacing *r, int sync, char *err, size_t errlen);

/* Closes and removes the temporary; the target is not touched. For a write
 * given up. Harmless on an empty (zeroed, committed or aborted) r. */
void pj_replacing_abort(pj_replacing *r);

/* A program that writes a large file this way (projctl mkmodel) and may be
 * interrupted: SIGINT, SIGTERM and SIGHUP, where the program has not
 * handled them itself, remove the temporaries open at that moment and then
 * end the process as the signal would have (a Ctrl-C used to leave a 64 MB
 * path.tmp.XXXXXX behind). Up to PJ_REPLACING_LIVE temporaries at once are
 * tracked; one opened past that is only left on a signal. Call once, early. */
#define PJ_REPLACING_LIVE 4
void pj_replacing_clean_on_signals(void);

/* Another file such a signal removes, until pj_replacing_forget(path): one
 * a command made and would otherwise leave empty or half written (projctl
 * bench-ipc's --out, opened before its run). path must outlive the call
 * to forget. Ignored past PJ_REPLACING_LIVE files. */
void pj_replacing_remove_on_signal(const char *path);
void pj_replacing_forget(const char *path);

/* path's whole new content is len bytes of buf: open, write and commit (no
 * sync). 0 or -errno with err as above. */
int pj_replace_file(const char *path, const void *buf, size_t len, mode_t mode, pj_replace_mode how,
                    char *err, size_t errlen);

/* What kind of file mode names, for a message that refuses one: "a FIFO",
 * "a directory", "a character device", ... ("a regular file" for one). */
const char *pj_file_kind(mode_t mode);

/* Opens path for reading if it is a regular file (the configuration, a
 * model, a tuning table), without waiting on a FIFO or a device put in its
 * place: a FIFO with no writer would hold the open, on the daemon's event
 * loop at SIGHUP. The descriptor returned reads as usual (blocking: a
 * network file system may answer EAGAIN to a non-blocking read). Else
 * -errno, with *failed naming the step for a message, "cannot open" or
 * "fstat", or NULL when the path is no regular file: -EISDIR for a
 * directory, -EINVAL for another kind, whose mode *st holds. */
struct stat;
int pj_open_regular(const char *path, struct stat *st, const char **failed);

#endif
