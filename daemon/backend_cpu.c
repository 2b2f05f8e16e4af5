/* backend_cpu.c — see backend_cpu.h. */
#include "daemon/backend_cpu.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon/envknob.h"
#include "kernels/refgemm.h"

/* cpu.threads' largest value (config.c): every count the configuration
 * accepts is started as asked; only "0 = one per online core" is capped. */
#define CPU_MAX_THREADS 1024

typedef struct cpu_job cpu_job;

/* One chunk of rows [r0, r1) of the job's current op. */
typedef struct cpu_item {
    struct cpu_item *next;
    cpu_job *cj;
    uint32_t r0, r1;
} cpu_item;

struct cpu_job {
    pj_job *job;
    pj_backend_stream *st;  /* its stream: the next job there starts after it */
    cpu_job *snext;         /* that stream's waiting jobs */
    cpu_job *lprev, *lnext; /* cpu_state.live, in submission order */
    /* Submitted, or, for a job that waited behind its stream's earlier
     * ones, when the one before it finished (oldest_job_ns). */
    uint64_t t_submit;
    int behind;       /* waiting in its stream behind an earlier job */
    uint32_t op;      /* the op whose chunks are queued or running */
    uint64_t op_t0;   /* when that op was queued (for cpu.min_op_us) */
    atomic_uint left; /* chunks of that op not yet finished */
    atomic_int started;
    atomic_int failed; /* first failure's pj_status, 0 while none */
    uint32_t n_items;
    cpu_item items[]; /* one per worker at most */
};

typedef struct cpu_state {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    cpu_item *head, *tail;
    cpu_job *live, *live_tail; /* submitted, not finished (oldest first) */
    int stop;
    uint32_t n_threads;
    pthread_t threads[CPU_MAX_THREADS];
    float *scratch[CPU_MAX_THREADS];
    pj_backend *b;
    uint64_t min_op_ns;     /* cpu.min_op_us */
    uint32_t close_hold_ms; /* PROJD_CPU_CLOSE_HOLD_MS (tests only) */
    uint32_t defer_every;   /* PROJD_CPU_DEFER_EVERY (tests only) */
    uint64_t submits;       /* attempts, loop thread only (for defer_every) */
    atomic_ullong jobs, ops, chunks, busy_ns;
} cpu_state;

/* A stream runs its jobs one after another in submission order, as a CUDA
 * stream does: with stream_depth > 1 (PROJD_CPU_STREAM_DEPTH) the server
 * hands it several, and those behind the running one wait here. Under
 * cpu_state.mu. */
struct pj_backend_stream {
    cpu_job *wait_head, *wait_tail;
    int busy;      /* a job of the stream is queued or running */
    int destroyed; /* stream_destroy came while busy: its last job frees it */
};

typedef struct worker_arg {
    cpu_state *s;
    uint32_t index;
} worker_arg;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Sleep until CLOCK_MONOTONIC reaches t_ns (at once if it has). */
static void sleep_until(uint64_t t_ns)
{
    struct timespec ts = {(time_t)(t_ns / 1000000000ull), (long)(t_ns % 1000000000ull)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

/* Queue the chunks of cj's current op. Caller does not hold the lock. */
static void push_op(cpu_state *s, cpu_job *cj)
{
    const pj_exec_op *op = &cj->job->ops[cj->op];
    uint64_t macs = (uint64_t)op->m * op->n * op->k;
    uint64_t want = macs / PJ_CPU_MIN_CHUNK_MACS;
    uint32_t chunks = want < 1 ? 1 : want > s->n_threads ? s->n_threads : (uint32_t)want;
    /* Keep chunk edges on 16-row blocks (the z12 tile height). */
    uint32_t rows = (op->n + chunks - 1) / chunks;
    rows = (rows + 15) / 16 * 16;
    uint32_t n = 0;
    for (uint32_t r0 = 0; r0 < op->n; r0 += rows) {
        cpu_item *it = &cj->items[n++];
        it->cj = cj;
        it->r0 = r0;
        it->r1 = r0 + rows < op->n ? r0 + rows : op->n;
        it->next = NULL;
    }
    atomic_store(&cj->left, n);
    cj->op_t0 = now_ns();
    pthread_mutex_lock(&s->mu);
    for (uint32_t i = 0; i < n; i++) {
        if (s->tail)
            s->tail->next = &cj->items[i];
        else
            s->head = &cj->items[i];
        s->tail = &cj->items[i];
    }
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    atomic_fetch_add(&s->chunks, n);
}

static void finish_job(cpu_state *s, cpu_job *cj)
{
    pj_job *job = cj->job;
    int failed = atomic_load(&cj->failed);
    job->status = PJ_OK;
    for (uint32_t i = 0; i < job->n_ops; i++) {
        if (i < cj->op)
            job->ops[i].status = PJ_OK;
        else if (i == cj->op && failed)
            job->ops[i].status = failed;
        else if (i > cj->op)
            job->ops[i].status = PJ_E_BACKEND; /* not run: an earlier op failed */
        job->ops[i].engine = 0;
    }
    if (failed) {
        job->status = failed;
        snprintf(job->err, sizeof job->err, "op %u: cpu reference failed (out of memory)", cj->op);
    }
    job->end_ns = now_ns();
    atomic_fetch_add(&s->jobs, 1);
    pthread_mutex_lock(&s->mu);
    if (cj->lprev)
        cj->lprev->lnext = cj->lnext;
    else
        s->live = cj->lnext;
    if (cj->lnext)
        cj->lnext->lprev = cj->lprev;
    else
        s->live_tail = cj->lprev;
    /* The stream's next job is taken before done: once the server has the
     * stream's last job back it may destroy the stream. It starts after
     * done, so that its completion cannot overtake this one's. */
    pj_backend_stream *st = cj->st;
    cpu_job *next = st->wait_head;
    if (next) {
        /* Its time as the backend's starts now: the watchdog's age of a
         * job that waited behind its stream's earlier ones would add up
         * their run times, and a client keeping several requests in
         * flight would read as a stall. */
        next->t_submit = job->end_ns;
        next->behind = 0;
        st->wait_head = next->snext;
        if (!st->wait_head)
            st->wait_tail = NULL;
    } else {
        st->busy = 0;
    }
    const int free_st = !next && st->destroyed;
    pthread_mutex_unlock(&s->mu);
    if (free_st)
        free(st);
    free(cj);
    job->done(job);
    if (next)
        push_op(s, next);
}

static void run_item(cpu_state *s, cpu_item *it, float *scratch)
{
    cpu_job *cj = it->cj;
    pj_job *job = cj->job;
    int expect = 0;
    if (atomic_compare_exchange_strong(&cj->started, &expect, 1))
        job->start_ns = now_ns();
    const pj_exec_op *op = &job->ops[cj->op];
    uint64_t t0 = now_ns();
    if (!atomic_load(&cj->failed)) {
        int rc = pj_ref_project_rows(&op->L->w, op->m, it->r0, it->r1, op->x, (size_t)op->x_ld,
                                     op->y, (size_t)op->y_ld, scratch);
        if (rc != 0) {
            int zero = 0;
            atomic_compare_exchange_strong(&cj->failed, &zero, PJ_E_BACKEND);
        }
    }
    atomic_fetch_add(&s->busy_ns, now_ns() - t0);
    if (atomic_fetch_sub(&cj->left, 1) != 1)
        return;
    /* Last chunk of this op: hold it to cpu.min_op_us, then move to the
     * next op or finish the job. */
    if (s->min_op_ns)
        sleep_until(cj->op_t0 + s->min_op_ns);
    atomic_fetch_add(&s->ops, 1);
    if (!atomic_load(&cj->failed) && cj->op + 1 < job->n_ops) {
        cj->op++;
        push_op(s, cj);
        return;
    }
    if (!atomic_load(&cj->failed))
        cj->op = job->n_ops; /* every op ran */
    finish_job(s, cj);
}

static void *worker_main(void *arg)
{
    worker_arg *wa = arg;
    cpu_state *s = wa->s;
    float *scratch = s->scratch[wa->index];
    free(wa);
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->head && !s->stop)
            pthread_cond_wait(&s->cv, &s->mu);
        cpu_item *it = s->head;
        if (!it) { /* stop, and nothing left */
            pthread_mutex_unlock(&s->mu);
            return NULL;
        }
        s->head = it->next;
        if (!s->head)
            s->tail = NULL;
        pthread_mutex_unlock(&s->mu);
        run_item(s, it, scratch);
    }
}

static void cpu_close(pj_backend *b)
{
    cpu_state *s = b->priv;
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    for (uint32_t i = 0; i < s->n_threads; i++)
        pthread_join(s->threads[i], NULL);
    for (uint32_t i = 0; i < s->n_threads; i++)
        free(s->scratch[i]);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
    b->priv = NULL;
}

static int cpu_open(pj_backend *b, char *err, size_t errlen)
{
    const pj_config *cfg = b->cfg;
    cpu_state *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "backend cpu: out of memory");
        return -ENOMEM;
    }
    uint32_t n = cfg->cpu.threads;
    if (n == 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = c > 0 ? (uint32_t)c : 1;
    }
    if (n > CPU_MAX_THREADS)
        n = CPU_MAX_THREADS;
    uint32_t max_k = 1;
    for (uint32_t i = 0; i < b->model->n_layers; i++)
        if (b->model->layers[i].w.k > max_k)
            max_k = b->model->layers[i].w.k;
    size_t floats = pj_ref_scratch_floats(cfg->shapes.max_m ? cfg->shapes.max_m : 1, max_k);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->b = b;
    s->min_op_ns = (uint64_t)cfg->cpu.min_op_us * 1000u;
    /* Tests only: each buffer_close takes this long, as the cuda backend's
     * waits for the device, so that the CPU suite can show that no client
     * waits for a release (daemon/closer.h). */
    pj_envknob_u32("PROJD_CPU_CLOSE_HOLD_MS", 0, 600000, &s->close_hold_ms);
    /* Tests only: every Nth submit says "not now" (-EAGAIN), as the cuda
     * backend does while a release waits to start, so that the CPU suite
     * covers the server's retry (test_daemon_e2e deferred_submits). */
    pj_envknob_u32("PROJD_CPU_DEFER_EVERY", 0, UINT32_MAX, &s->defer_every);
    /* Tests only: a row pitch limit as the cuda backend's (the device's
     * memPitch, 2^31 - 1 bytes), small enough for the CPU suite's buffers,
     * so that it shows the server refusing such an op before its request
     * runs (test_daemon_ops pitch_limit). */
    pj_envknob_u64("PROJD_CPU_MAX_ROW_PITCH", 0, UINT64_MAX, &b->max_row_pitch);
    /* Tests only: several jobs of a connection with the backend at once,
     * as the cuda backend takes them (8), run in order, so that the CPU
     * suite covers the server's paths with more than one running
     * (tests/e2e_depth.sh). */
    pj_envknob_u32("PROJD_CPU_STREAM_DEPTH", 1, 64, &b->stream_depth);
    b->priv = s;
    if (s->min_op_ns)
        snprintf(b->device_name, sizeof b->device_name,
                 "cpu (%u worker threads, ops held to %u us)", n, cfg->cpu.min_op_us);
    else
        snprintf(b->device_name, sizeof b->device_name, "cpu (%u worker threads)", n);
    for (uint32_t i = 0; i < n; i++) {
        s->scratch[i] = malloc((floats ? floats : 1) * sizeof(float));
        worker_arg *wa = malloc(sizeof *wa);
        if (!s->scratch[i] || !wa) {
            free(wa);
            snprintf(err, errlen, "backend cpu: out of memory for worker %u", i);
            cpu_close(b);
            return -ENOMEM;
        }
        wa->s = s;
        wa->index = i;
        int rc = pthread_create(&s->threads[i], NULL, worker_main, wa);
        if (rc != 0) {
            free(wa);
            free(s->scratch[i]);
            s->scratch[i] = NULL;
            snprintf(err, errlen, "backend cpu: cannot start worker %u: %s", i, strerror(rc));
            cpu_close(b);
            return -rc;
        }
        s->n_threads = i + 1;
    }
    return 0;
}

static int cpu_buffer_open(pj_backend *b, const pj_buf_desc *d, void **addr, void **handle,
                           char *err, size_t errlen)
{
    (void)b;
    *handle = NULL;
    if (d->kind != PJ_BUF_SHM || !d->host) {
        snprintf(err, errlen, "REGISTER: CUDA IPC buffers need the cuda backend");
        return PJ_E_REGISTER;
    }
    *addr = d->host;
    *handle = d->host; /* so that buffer_close is called (PROJD_CPU_CLOSE_HOLD_MS) */
    return PJ_OK;
}

static void cpu_buffer_close(pj_backend *b, void *handle)
{
    (void)handle;
    const cpu_state *s = b->priv;
    if (s && s->close_hold_ms) {
        struct timespec ts = {.tv_sec = s->close_hold_ms / 1000,
                              .tv_nsec = (long)(s->close_hold_ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
    }
}

static int cpu_stream_create(pj_backend *b, pj_backend_stream **out, char *err, size_t errlen)
{
    (void)b;
    *out = calloc(1, sizeof **out);
    if (!*out) {
        snprintf(err, errlen, "backend cpu: out of memory");
        return -ENOMEM;
    }
    return 0;
}

/* The server destroys a stream once every job of it is done, but the
 * contract lets it go with jobs still running (backend.h): those finish,
 * and the last frees it. */
static void cpu_stream_destroy(pj_backend *b, pj_backend_stream *st)
{
    cpu_state *s = b->priv;
    pthread_mutex_lock(&s->mu);
    const int busy = st->busy;
    st->destroyed = 1;
    pthread_mutex_unlock(&s->mu);
    if (!busy)
        free(st);
}

static int cpu_submit(pj_backend *b, pj_backend_stream *st, pj_job *job)
{
    cpu_state *s = b->priv;
    if (job->n_ops == 0)
        return -EINVAL;
    if (s->defer_every && ++s->submits % s->defer_every == 0)
        return -EAGAIN;
    cpu_job *cj = calloc(1, sizeof *cj + s->n_threads * sizeof(cpu_item));
    if (!cj)
        return -ENOMEM;
    cj->job = job;
    cj->st = st;
    job->err[0] = 0;
    cj->t_submit = now_ns();
    pthread_mutex_lock(&s->mu);
    cj->lprev = s->live_tail;
    if (s->live_tail)
        s->live_tail->lnext = cj;
    else
        s->live = cj;
    s->live_tail = cj;
    const int wait = st->busy;
    cj->behind = wait;
    if (wait) {
        if (st->wait_tail)
            st->wait_tail->snext = cj;
        else
            st->wait_head = cj;
        st->wait_tail = cj;
    }
    st->busy = 1;
    pthread_mutex_unlock(&s->mu);
    if (!wait)
        push_op(s, cj);
    return 0;
}

/* No cpu job waits for a client (no WAIT_EVENT here): queued for the
 * workers or running, its time is the backend's, from its t_submit. A job
 * still behind its stream's earlier ones is not counted, and one that
 * waited so counts from the end of the one before it, so the live list
 * (submission order) is searched for the oldest; it holds at most
 * stream_depth jobs per connection. */
static uint64_t cpu_oldest_job_ns(pj_backend *b, uint64_t *client_wait)
{
    cpu_state *s = b->priv;
    if (client_wait)
        *client_wait = 0;
    pthread_mutex_lock(&s->mu);
    uint64_t t = 0;
    for (const cpu_job *cj = s->live; cj; cj = cj->lnext)
        if (!cj->behind && (!t || cj->t_submit < t))
            t = cj->t_submit;
    pthread_mutex_unlock(&s->mu);
    return t;
}

static void cpu_stats_json(pj_backend *b, cJSON *obj)
{
    cpu_state *s = b->priv;
    cJSON_AddNumberToObject(obj, "threads", s->n_threads);
    cJSON_AddNumberToObject(obj, "min_op_us", (double)(s->min_op_ns / 1000u));
    cJSON_AddNumberToObject(obj, "jobs", (double)atomic_load(&s->jobs));
    cJSON_AddNumberToObject(obj, "ops", (double)atomic_load(&s->ops));
    cJSON_AddNumberToObject(obj, "chunks", (double)atomic_load(&s->chunks));
    cJSON_AddNumberToObject(obj, "busy_ms", (double)atomic_load(&s->busy_ns) / 1e6);
    cJSON_AddStringToObject(obj, "engine", "ref");
}

static const pj_backend_ops cpu_ops = {
    .name = "cpu",
    .kind = PJ_BACKEND_CPU,
    .project_flags = 0,
    .stream_depth = 1,
    .open = cpu_open,
    .close = cpu_close,
    .buffer_open = cpu_buffer_open,
    .buffer_close = cpu_buffer_close,
    .stream_create = cpu_stream_create,
    .stream_destroy = cpu_stream_destroy,
    .submit = cpu_submit,
    .stats_json = cpu_stats_json,
    .oldest_job_ns = cpu_oldest_job_ns,
};

const pj_backend_ops *pj_backend_cpu_ops(void)
{
    return &cpu_ops;
}
