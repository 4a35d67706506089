/* SPDX-License-Identifier: MIT */
/*
 * bench_shm: shm micro-benchmarks, each beside a baseline measured in the
 * same run (the machines are shared and noisy: only ratios mean anything).
 *
 *   pool     pd_pool_alloc(8) + pd_pool_free(8), uncontended, ns per pair;
 *            baseline: lock + unlock of a bare robust process-shared mutex.
 *   ring     64-byte entries through a 1024-entry pd_ring from a forked
 *            producer (bursts of 32), ns per entry; baseline: memcpy of the
 *            same bytes in one process.
 *   condvar  one-way wake-up latency of a ping-pong between two processes
 *            through a pd_mutex and two pd_conds, us; baseline: the same
 *            ping-pong over a pair of pipes.
 *
 * Every figure is the median of REPS repetitions after one warm-up; the
 * measured case and its baseline alternate rep by rep so that noise hits
 * both alike. A missed target is reported, never an error.
 */
#include <errno.h>
#include <getopt.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pd_err.h"
#include "pd_ring.h"
#include "pd_slots.h"
#include "pd_sync.h"
#include "pd_test.h"
#include "pd_time.h"

#define REPS          5
#define POOL_SLOTS    64u
#define POOL_BATCH    8u
#define RING_COUNT    1024u
#define RING_ESIZE    64u
#define RING_BURST    32u
#define CHILD_WAIT_MS 10000u
#define SPIN_LIMIT_NS (10 * PD_NS_PER_S)

/* Iteration counts; --quick divides them. */
struct params {
	uint64_t pool_iters;   /* alloc+free pairs per rep */
	uint64_t ring_entries; /* entries per rep */
	uint64_t rounds;       /* ping-pong round trips per rep */
	int quick;
	const char *json;
};

/* One timed repetition: *out receives the figure. 0 or -errno. */
typedef int rep_fn(void *ctx, double *out);

struct bench_case {
	const char *key;       /* JSON key stem */
	const char *name;
	const char *unit;
	const char *base_name;
	rep_fn *run;
	rep_fn *base;
	double limit;          /* target: value <= limit ... */
	int limit_is_ratio;    /* ... or ratio <= limit; limit 0: no target */
};

struct bench_result {
	const struct bench_case *bc;
	double value;
	double base;
};

static struct params prm;

/* ---- helpers ------------------------------------------------------------- */

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ volatile("yield" ::: "memory");
#endif
}

/* Busy-wait step with a deadline; yields now and then (2 shared cores). */
struct spinner {
	uint64_t deadline;
	uint32_t polls;
};

static int spin_once(struct spinner *sp)
{
	cpu_relax();
	if ((++sp->polls & 1023u) == 0) {
		(void)sched_yield();
		if (pd_now_ns() > sp->deadline)
			return -ETIMEDOUT;
	}
	return 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The median-of-reps helper: one warm-up of each, then REPS alternating
 * repetitions of the case and its baseline. */
static int measure(const struct bench_case *bc, void *ctx, struct bench_result *res)
{
	double v[REPS], b[REPS], scratch;
	int rc = bc->run(ctx, &scratch);

	if (rc == 0)
		rc = bc->base(ctx, &scratch);
	for (int i = 0; rc == 0 && i < REPS; i++) {
		rc = bc->run(ctx, &v[i]);
		if (rc == 0)
			rc = bc->base(ctx, &b[i]);
	}
	if (rc < 0) {
		fprintf(stderr, "bench_shm: %s: %s\n", bc->name, pd_strerror(rc));
		return rc;
	}
	res->bc = bc;
	res->value = median(v, REPS);
	res->base = median(b, REPS);
	return 0;
}

/* Wait for a child; its exit code or a timeout becomes -errno. */
static int reap(pid_t pid, int rc)
{
	int st = pd_test_wait(pid, CHILD_WAIT_MS);

	if (st < 0) {
		fprintf(stderr, "bench_shm: child %d: %s\n", (int)pid, pd_strerror(st));
		return rc ? rc : st;
	}
	if (st != 0) {
		fprintf(stderr, "bench_shm: child %d exited with %d\n", (int)pid, st);
		return rc ? rc : -ECHILD;
	}
	return rc;
}

/* ---- 1. slot pool vs bare mutex ------------------------------------------- */

struct pool_ctx {
	struct pd_pool pool;
	struct pd_mutex *mx; /* baseline, in shared memory */
};

static int pool_rep(void *ctx, double *out)
{
	struct pool_ctx *c = ctx;
	struct pd_pool_who who = { .owner = 1, .pid = pd_self_pid(), .tag = 1,
				   .state = PD_SLOT_LOANED };
	pd_slot_ref refs[POOL_BATCH];
	uint64_t deadline = pd_now_ns() + PD_NS_PER_S;
	uint64_t t0 = pd_now_ns();

	for (uint64_t i = 0; i < prm.pool_iters; i++) {
		int rc = pd_pool_alloc(&c->pool, &who, POOL_BATCH, deadline, refs);

		if (rc == 0)
			rc = pd_pool_free(&c->pool, refs, POOL_BATCH);
		if (rc < 0)
			return rc;
	}
	*out = (double)(pd_now_ns() - t0) / (double)prm.pool_iters;
	return 0;
}

static int mutex_rep(void *ctx, double *out)
{
	struct pool_ctx *c = ctx;
	uint64_t t0 = pd_now_ns();

	for (uint64_t i = 0; i < prm.pool_iters; i++) {
		int rc = pthread_mutex_lock(&c->mx->m);

		if (rc)
			return pd_pthread_rc(rc);
		(void)pthread_mutex_unlock(&c->mx->m);
	}
	*out = (double)(pd_now_ns() - t0) / (double)prm.pool_iters;
	return 0;
}

static const struct bench_case pool_case = {
	.key = "pool_alloc_free", .name = "pool alloc+free, 8 slots", .unit = "ns/pair",
	.base_name = "robust mutex lock+unlock", .run = pool_rep, .base = mutex_rep,
	.limit = 4.0, .limit_is_ratio = 1,
};

static int bench_pool(struct bench_result *res)
{
	struct pool_ctx c;
	size_t len = (size_t)pd_pool_memsize(POOL_SLOTS) + sizeof(struct pd_mutex);
	uint8_t *mem = pd_test_shared_alloc(len);
	int rc;

	if (!mem)
		return -ENOMEM;
	c.mx = (struct pd_mutex *)(mem + pd_pool_memsize(POOL_SLOTS));
	rc = pd_pool_init(mem, len, POOL_SLOTS, 4096);
	if (rc == 0)
		rc = pd_pool_open(&c.pool, mem, len, NULL, 0);
	if (rc == 0)
		rc = pd_mutex_init(c.mx);
	if (rc == 0)
		rc = measure(&pool_case, &c, res);
	else
		fprintf(stderr, "bench_shm: pool setup: %s\n", pd_strerror(rc));
	pd_test_shared_free(mem, len);
	return rc;
}

/* ---- 2. cross-process ring vs memcpy -------------------------------------- */

struct ring_shm {
	alignas(PD_CACHE_LINE) _Atomic uint32_t ready; /* writer: producer */
	alignas(PD_CACHE_LINE) _Atomic uint32_t go;    /* writer: consumer */
	alignas(PD_CACHE_LINE) struct pd_ring ring;
};

struct ring_ctx {
	struct ring_shm *s;
	size_t ring_len;
	uint8_t *copy_dst; /* baseline: ring-sized private buffer */
};

/* Entry i carries its sequence number in its first 8 bytes. */
static void ring_stamp(uint8_t *buf, uint64_t seq, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++, seq++)
		memcpy(buf + (size_t)i * RING_ESIZE, &seq, sizeof(seq));
}

static int ring_wait_flag(_Atomic uint32_t *flag)
{
	struct spinner sp = { .deadline = pd_now_ns() + SPIN_LIMIT_NS };
	int rc = 0;

	while (rc == 0 && !atomic_load_explicit(flag, memory_order_acquire))
		rc = spin_once(&sp);
	return rc;
}

static int ring_producer(void *arg)
{
	struct ring_ctx *c = arg;
	struct pd_ring_view v;
	uint8_t buf[RING_BURST * RING_ESIZE];
	struct spinner sp = { .deadline = pd_now_ns() + SPIN_LIMIT_NS };
	uint64_t sent = 0;
	uint32_t have = 0, off = 0;

	if (pd_ring_view_init(&v, &c->s->ring, c->ring_len) < 0)
		return 2;
	atomic_store_explicit(&c->s->ready, 1, memory_order_release);
	if (ring_wait_flag(&c->s->go) < 0)
		return 3;
	while (sent < prm.ring_entries) {
		int n;

		if (off == have) {
			have = (uint32_t)(prm.ring_entries - sent < RING_BURST ?
					  prm.ring_entries - sent : RING_BURST);
			off = 0;
			ring_stamp(buf, sent, have);
		}
		n = pd_ring_enqueue_burst_sp(&v, buf + (size_t)off * RING_ESIZE, have - off);
		if (n < 0)
			return 4;
		if (n == 0 && spin_once(&sp) < 0)
			return 5;
		off += (uint32_t)n;
		sent += (uint32_t)n;
	}
	return 0;
}

/* Dequeue every entry, checking the sequence numbers. */
static int ring_consume(struct pd_ring_view *v)
{
	uint8_t buf[RING_BURST * RING_ESIZE];
	struct spinner sp = { .deadline = pd_now_ns() + SPIN_LIMIT_NS };
	uint64_t got = 0;

	while (got < prm.ring_entries) {
		int n = pd_ring_dequeue_burst_sc(v, buf, RING_BURST);

		if (n < 0)
			return n;
		if (n == 0 && spin_once(&sp) < 0)
			return -ETIMEDOUT;
		for (int i = 0; i < n; i++, got++) {
			uint64_t seq;

			memcpy(&seq, buf + (size_t)i * RING_ESIZE, sizeof(seq));
			if (seq != got)
				return -EPROTO;
		}
	}
	return 0;
}

static int ring_rep(void *ctx, double *out)
{
	struct ring_ctx *c = ctx;
	struct pd_ring_view v;
	uint64_t t0;
	pid_t pid;
	int rc;

	atomic_store(&c->s->ready, 0);
	atomic_store(&c->s->go, 0);
	rc = pd_ring_init(&c->s->ring, c->ring_len, RING_COUNT, RING_ESIZE);
	if (rc == 0)
		rc = pd_ring_view_init(&v, &c->s->ring, c->ring_len);
	if (rc < 0)
		return rc;
	pid = pd_test_fork(ring_producer, c);
	if (pid < 0)
		return pid;
	rc = ring_wait_flag(&c->s->ready);
	t0 = pd_now_ns();
	atomic_store_explicit(&c->s->go, 1, memory_order_release);
	if (rc == 0)
		rc = ring_consume(&v);
	*out = (double)(pd_now_ns() - t0) / (double)prm.ring_entries;
	return reap(pid, rc);
}

static int memcpy_rep(void *ctx, double *out)
{
	struct ring_ctx *c = ctx;
	uint8_t src[RING_BURST * RING_ESIZE];
	uint64_t t0, pos = 0;

	ring_stamp(src, 0, RING_BURST);
	t0 = pd_now_ns();
	for (uint64_t i = 0; i < prm.ring_entries; i += RING_BURST) {
		memcpy(c->copy_dst + (pos & (RING_COUNT - 1)) * RING_ESIZE, src, sizeof(src));
		pos += RING_BURST;
		/* The copy has an observer: keep the compiler from dropping it. */
		__asm__ volatile("" : : "r"(c->copy_dst) : "memory");
	}
	*out = (double)(pd_now_ns() - t0) / (double)prm.ring_entries;
	return 0;
}

static const struct bench_case ring_case = {
	.key = "ring_64b", .name = "ring 64 B, 2 procs, burst 32", .unit = "ns/entry",
	.base_name = "memcpy 64 B, 1 proc", .run = ring_rep, .base = memcpy_rep,
	.limit = 100.0, .limit_is_ratio = 0,
};

static int bench_ring(struct bench_result *res)
{
	struct ring_ctx c;
	size_t len = offsetof(struct ring_shm, ring) +
		     (size_t)pd_ring_memsize(RING_COUNT, RING_ESIZE);
	int rc;

	c.s = pd_test_shared_alloc(len);
	c.ring_len = len - offsetof(struct ring_shm, ring);
	c.copy_dst = aligned_alloc(PD_CACHE_LINE, (size_t)RING_COUNT * RING_ESIZE);
	if (!c.s || !c.copy_dst) {
		rc = -ENOMEM;
		goto out_free;
	}
	memset(c.copy_dst, 0, (size_t)RING_COUNT * RING_ESIZE);
	rc = measure(&ring_case, &c, res);
out_free:
	free(c.copy_dst);
	pd_test_shared_free(c.s, len);
	return rc;
}

/* ---- 3. condvar ping-pong vs pipe ping-pong -------------------------------- */

struct pp_shm {
	struct pd_mutex mx;
	struct pd_cond ping; /* the child waits here for turn == 1 */
	struct pd_cond pong; /* the parent waits here for turn == 0 */
	uint32_t turn;       /* under mx */
};

struct pp_ctx {
	struct pp_shm *s;
	int down[2]; /* pipe: parent -> child */
	int up[2];   /* pipe: child -> parent */
};

/* With mx held: wait until turn == want. A dead peer (1) is an error. */
static int cv_await(struct pp_shm *s, struct pd_cond *cv, uint32_t want, uint64_t deadline)
{
	while (s->turn != want) {
		int rc = pd_cond_wait_until(cv, &s->mx, deadline, NULL, NULL);

		if (rc != 0)
			return rc > 0 ? -EOWNERDEAD : rc;
	}
	return 0;
}

/* With mx held: hand the turn over, then wait for it back (or, in the
 * child, the other way round). n round trips. */
static int cv_pingpong(struct pp_shm *s, uint64_t n, int child)
{
	uint64_t deadline = pd_now_ns() + SPIN_LIMIT_NS;
	int rc = 0;

	for (uint64_t i = 0; rc == 0 && i < n; i++) {
		if (child) {
			rc = cv_await(s, &s->ping, 1, deadline);
			if (rc < 0)
				break;
		}
		s->turn = !child;
		pd_cond_signal(child ? &s->pong : &s->ping);
		if (!child)
			rc = cv_await(s, &s->pong, 0, deadline);
	}
	return rc;
}

static int cv_child(void *arg)
{
	struct pp_ctx *c = arg;
	int rc = pd_mutex_lock_until(&c->s->mx, pd_now_ns() + SPIN_LIMIT_NS, NULL, NULL);

	if (rc != 0)
		return 2;
	rc = cv_pingpong(c->s, prm.rounds + 1, 1);
	pd_mutex_unlock(&c->s->mx);
	return rc ? 3 : 0;
}

static int cv_rep(void *ctx, double *out)
{
	struct pp_ctx *c = ctx;
	uint64_t t0 = 0;
	pid_t pid;
	int rc;

	c->s->turn = 0;
	rc = pd_mutex_init(&c->s->mx);
	if (rc == 0)
		rc = pd_cond_init(&c->s->ping);
	if (rc == 0)
		rc = pd_cond_init(&c->s->pong);
	if (rc < 0)
		return rc;
	pid = pd_test_fork(cv_child, c);
	if (pid < 0)
		return pid;
	rc = pd_mutex_lock_until(&c->s->mx, pd_now_ns() + SPIN_LIMIT_NS, NULL, NULL);
	if (rc == 0) {
		rc = cv_pingpong(c->s, 1, 0); /* handshake: the child is up */
		t0 = pd_now_ns();
		if (rc == 0)
			rc = cv_pingpong(c->s, prm.rounds, 0);
		*out = (double)(pd_now_ns() - t0) / (double)prm.rounds / 2 / 1000;
		pd_mutex_unlock(&c->s->mx);
	}
	return reap(pid, rc > 0 ? -EOWNERDEAD : rc);
}

/* One byte from rfd echoed to wfd (child), or sent then awaited (parent). */
static int pipe_pingpong(int rfd, int wfd, uint64_t n, int child)
{
	char ch = 'x';

	for (uint64_t i = 0; i < n; i++) {
		if (!child && write(wfd, &ch, 1) != 1)
			return -EPIPE;
		if (read(rfd, &ch, 1) != 1)
			return -EPIPE;
		if (child && write(wfd, &ch, 1) != 1)
			return -EPIPE;
	}
	return 0;
}

static int pipe_child(void *arg)
{
	struct pp_ctx *c = arg;

	(void)close(c->down[1]);
	(void)close(c->up[0]);
	return pipe_pingpong(c->down[0], c->up[1], prm.rounds + 1, 1) ? 2 : 0;
}

static int pipe_rep(void *ctx, double *out)
{
	struct pp_ctx *c = ctx;
	uint64_t t0;
	pid_t pid;
	int rc;

	if (pipe(c->down) < 0)
		return -errno;
	if (pipe(c->up) < 0) {
		rc = -errno;
		goto out_close_down;
	}
	pid = pd_test_fork(pipe_child, c);
	(void)close(c->down[0]);
	(void)close(c->up[1]);
	if (pid < 0) {
		rc = pid;
		goto out_close_up;
	}
	rc = pipe_pingpong(c->up[0], c->down[1], 1, 0); /* handshake */
	t0 = pd_now_ns();
	if (rc == 0)
		rc = pipe_pingpong(c->up[0], c->down[1], prm.rounds, 0);
	*out = (double)(pd_now_ns() - t0) / (double)prm.rounds / 2 / 1000;
	rc = reap(pid, rc);
out_close_up:
	(void)close(c->up[0]);
	(void)close(c->down[1]);
	return rc;
out_close_down:
	(void)close(c->down[0]);
	(void)close(c->down[1]);
	return rc;
}

static const struct bench_case cv_case = {
	.key = "condvar_oneway", .name = "condvar wake-up, one-way", .unit = "us",
	.base_name = "pipe one-way", .run = cv_rep, .base = pipe_rep,
	.limit = 0, .limit_is_ratio = 0,
};

static int bench_condvar(struct bench_result *res)
{
	struct pp_ctx c;
	int rc;

	c.s = pd_test_shared_alloc(sizeof(*c.s));
	if (!c.s)
		return -ENOMEM;
	rc = measure(&cv_case, &c, res);
	pd_test_shared_free(c.s, sizeof(*c.s));
	return rc;
}

/* ---- report ------------------------------------------------------------------ */

static double ratio_of(const struct bench_result *r)
{
	return r->base > 0 ? r->value / r->base : 0;
}

/* -1: no target; 0 missed; 1 met. */
static int target_met(const struct bench_result *r)
{
	const struct bench_case *bc = r->bc;

	if (bc->limit <= 0)
		return -1;
	return (bc->limit_is_ratio ? ratio_of(r) : r->value) <= bc->limit;
}

static void target_text(const struct bench_result *r, char *buf, size_t len)
{
	const struct bench_case *bc = r->bc;
	int met = target_met(r);

	if (met < 0) {
		(void)snprintf(buf, len, "(report only)");
		return;
	}
	(void)snprintf(buf, len, "<= %g %s: target %s", bc->limit,
		       bc->limit_is_ratio ? "x baseline" : bc->unit, met ? "met" : "missed");
}

static void print_table(const struct bench_result *res, int n)
{
	char target[64];

	printf("bench_shm: median of %d reps after 1 warm-up (%s run)\n", REPS,
	       prm.quick ? "quick" : "full");
	printf("%-30s %9s  %-9s %9s  %-25s %7s  %s\n", "benchmark", "value", "unit",
	       "baseline", "(baseline is)", "ratio", "target");
	for (int i = 0; i < n; i++) {
		const struct bench_result *r = &res[i];

		target_text(r, target, sizeof(target));
		printf("%-30s %9.2f  %-9s %9.2f  %-25s %6.2fx  %s\n", r->bc->name, r->value,
		       r->bc->unit, r->base, r->bc->base_name, ratio_of(r), target);
	}
}

static int write_json(const char *path, const struct bench_result *res, int n)
{
	FILE *f = fopen(path, "w");

	if (!f)
		return -errno;
	fprintf(f, "{\n  \"quick\": %d,\n  \"reps\": %d", prm.quick, REPS);
	for (int i = 0; i < n; i++) {
		const struct bench_result *r = &res[i];
		const char *k = r->bc->key;

		fprintf(f, ",\n  \"%s\": %.3f,\n  \"%s_baseline\": %.3f,\n  \"%s_ratio\": %.3f",
			k, r->value, k, r->base, k, ratio_of(r));
		if (target_met(r) >= 0)
			fprintf(f, ",\n  \"%s_target_met\": %s", k, target_met(r) ? "true" : "false");
	}
	fprintf(f, "\n}\n");
	return fclose(f) ? -errno : 0;
}

/* ---- main -------------------------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f, "usage: bench_shm [--quick] [--json FILE] [--help]\n"
		   "  --quick      fewer iterations (< 5 s)\n"
		   "  --json FILE  also write the figures as a flat JSON object\n"
		   "Prints each shm figure beside a baseline measured in the same run.\n"
		   "Exits non-zero only on errors, never on a missed target.\n");
}

/* 0 run, 1 exit 0 (help), -1 usage error. */
static int parse_args(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "quick", no_argument, NULL, 'q' },
		{ "json", required_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int o;

	while ((o = getopt_long(argc, argv, "qj:h", opts, NULL)) != -1) {
		if (o == 'q')
			prm.quick = 1;
		else if (o == 'j')
			prm.json = optarg;
		else
			return o == 'h' ? 1 : -1;
	}
	return optind < argc ? -1 : 0;
}

static void set_counts(void)
{
	uint64_t div = prm.quick ? 10 : 1;

	prm.pool_iters = 1000000 / div;
	prm.ring_entries = 20000000 / div;
	prm.rounds = 20000 / div;
}

int main(int argc, char **argv)
{
	struct bench_result res[3];
	int rc = parse_args(argc, argv);

	if (rc != 0) {
		usage(rc > 0 ? stdout : stderr);
		return rc > 0 ? 0 : 2;
	}
	set_counts();
	(void)signal(SIGPIPE, SIG_IGN);    /* a dead pipe peer is an EPIPE */
	(void)alarm(prm.quick ? 60 : 180); /* last-resort deadline on the whole run */
	rc = bench_pool(&res[0]);
	if (rc == 0)
		rc = bench_ring(&res[1]);
	if (rc == 0)
		rc = bench_condvar(&res[2]);
	if (rc < 0)
		return 1;
	print_table(res, 3);
	if (prm.json && (rc = write_json(prm.json, res, 3)) < 0) {
		fprintf(stderr, "bench_shm: %s: %s\n", prm.json, pd_strerror(rc));
		return 1;
	}
	return 0;
}
