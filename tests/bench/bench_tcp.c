/* SPDX-License-Identifier: MIT */
/*
 * bench_tcp: throughput of the TCP transport (broker/pd_tcp*.c), 1P1D on
 * loopback, beside a baseline measured in the same run.
 *
 * pd_tcp: one sender instance and one receiver instance in this process;
 * 1 MiB writes from a 64 MiB pre-faulted source into a 64 MiB pre-faulted
 * receive arena (slot = write index mod 64), INFLIGHT writes outstanding at
 * all times, the control loop sleeping on the completion eventfd as the
 * broker's will. The claim callback is a bounds check and an address
 * computation (the real one adds a table lookup). lanes = 1, 2, 4.
 *
 * Baseline: one plain blocking TCP socket over loopback, send() of the
 * same 1 MiB buffers by this thread, recv(MSG_WAITALL) into the same arena
 * by another: the ceiling of one stream with no framing, no ACKs and no
 * completion path. A second line sends from and receives into one 1 MiB
 * buffer each, as iperf3 -l 1M does: buffers that stay in the cache, so
 * the kernel's copies cost less per byte than through arenas of 64 MiB
 * (the difference between the two lines is the memory, not the stream).
 *
 * Figure: GB/s (10^9 bytes per second) of payload, the median of REPS
 * runs; with --quick a single shorter run. Ratios within one run are what
 * mean something: the machines are shared and noisy.
 */
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "pd_tcp.h"
#include "pd_time.h"

#define CHUNK    (1u << 20)
#define NCHUNKS  64u
#define INFLIGHT 64u
#define REPS     3
#define MAX_REPS 5

struct bench {
	uint8_t *src;                  /* NCHUNKS x CHUNK, the sender's staging */
	uint8_t *arena;                /* NCHUNKS x CHUNK, the receiver's slots */
	uint64_t nwrites;              /* per run */
	uint32_t ring;                 /* baseline: buffers cycled through, NCHUNKS or 1 */
	int reps;
};

/* ---- receiver callbacks: data threads, no shared mutable state ---------------- */

static int b_accept(void *ctx, uint64_t token, uint32_t *peer)
{
	(void)ctx;
	if (token != 42)
		return -EACCES;
	*peer = 1;
	return 0;
}

static int b_claim(void *ctx, uint32_t peer, const struct pd_tcp_wdesc *d,
		   struct pd_tcp_dst *dst)
{
	struct bench *b = ctx;

	if (peer != 1 || d->slot >= NCHUNKS)
		return -EPERM;
	dst->ptr = b->arena + (size_t)d->slot * CHUNK;
	dst->cap = CHUNK;
	return 0;
}

static void b_landed(void *ctx, uint32_t peer, const struct pd_tcp_wdesc *d,
		     const struct pd_tcp_dst *dst, int status)
{
	(void)ctx, (void)peer, (void)d, (void)dst, (void)status;
}

static const struct pd_tcp_ops b_ops = {
	.accept_peer = b_accept, .claim = b_claim, .landed = b_landed,
};

static void die(const char *what, int err)
{
	fprintf(stderr, "bench_tcp: %s: %s\n", what, strerror(err < 0 ? -err : err));
	exit(1);
}

/* ---- pd_tcp ----------------------------------------------------------------------- */

struct pair {
	struct pd_tcp *rx, *tx;
};

static void pair_open(struct bench *b, uint32_t lanes, struct pair *p)
{
	struct pd_tcp_opts o;
	int rc;

	pd_tcp_opts_init(&o);
	o.lanes = lanes;
	o.window = 32;
	o.queue_depth = 256;
	o.ops = &b_ops;
	o.ctx = b;
	rc = pd_tcp_create(&o, &p->rx);
	if (rc == 0)
		rc = pd_tcp_listen(p->rx, "127.0.0.1", 0);
	if (rc < 0)
		die("receiver", rc);
	o.ops = NULL;
	rc = pd_tcp_create(&o, &p->tx);
	if (rc == 0)
		rc = pd_tcp_connect(p->tx, 1, "127.0.0.1", (uint16_t)pd_tcp_port(p->rx), 42);
	if (rc < 0)
		die("sender", rc);
}

static struct pd_xfer xfer_of(const struct bench *b, uint64_t i)
{
	uint32_t slot = (uint32_t)(i % NCHUNKS);

	return (struct pd_xfer){ .cookie = i, .src = b->src + (size_t)slot * CHUNK,
				     .len = CHUNK, .slot = slot, .gen = 1, .tag = 7 };
}

/* Keep INFLIGHT writes outstanding until n have completed; sleeps on the
 * event fd between batches of completions. */
static void pump(const struct bench *b, struct pd_tcp *tx, uint64_t n)
{
	struct pollfd pfd = { .fd = pd_tcp_event_fd(tx), .events = POLLIN };
	struct pd_cpl c[INFLIGHT];
	uint64_t posted = 0, done = 0;
	int got;

	while (done < n) {
		while (posted < n && posted - done < INFLIGHT) {
			struct pd_xfer x = xfer_of(b, posted);
			int rc = pd_tcp_post(tx, 1, &x, 1);

			if (rc < 0)
				die("post", rc);
			posted++;
		}
		got = pd_tcp_poll(tx, c, INFLIGHT);

		if (got < 0)
			die("poll", got);
		for (int i = 0; i < got; i++)
			if (c[i].status != 0)
				die("write", c[i].status);
		done += (uint64_t)got;
		if (got == 0 && poll(&pfd, 1, 10000) == 0)
			die("no completion in 10 s", ETIMEDOUT);
	}
}

static double run_tcp(const struct bench *b, struct pd_tcp *tx)
{
	uint64_t t0 = pd_now_ns();

	pump(b, tx, b->nwrites);
	return (double)(b->nwrites * CHUNK) / (double)(pd_now_ns() - t0);
}

/* ---- baseline: one blocking socket ----------------------------------------------- */

struct sink {
	const struct bench *b;
	int fd;
	int err;
};

static void *sink_main(void *arg)
{
	struct sink *s = arg;

	for (uint64_t i = 0; i < s->b->nwrites && !s->err; i++) {
		ssize_t r = recv(s->fd, s->b->arena + (i % s->b->ring) * CHUNK, CHUNK, MSG_WAITALL);

		if (r != (ssize_t)CHUNK)
			s->err = r < 0 ? errno : EPROTO;
	}
	return NULL;
}

static void sock_pair(int *cfd, int *sfd)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int lfd = socket(AF_INET, SOCK_STREAM, 0);

	if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(lfd, 1) < 0 ||
	    getsockname(lfd, (struct sockaddr *)&a, &len) < 0)
		die("baseline listen", errno);
	*cfd = socket(AF_INET, SOCK_STREAM, 0);
	if (*cfd < 0 || connect(*cfd, (struct sockaddr *)&a, sizeof(a)) < 0)
		die("baseline connect", errno);
	*sfd = accept(lfd, NULL, NULL);
	if (*sfd < 0)
		die("baseline accept", errno);
	close(lfd);
}

static double run_baseline(const struct bench *b)
{
	struct sink s = { .b = b };
	pthread_t thr;
	uint64_t t0;
	int cfd, rc;

	sock_pair(&cfd, &s.fd);
	rc = pthread_create(&thr, NULL, sink_main, &s);
	if (rc)
		die("pthread_create", rc);
	t0 = pd_now_ns();
	for (uint64_t i = 0; i < b->nwrites; i++) {
		const uint8_t *p = b->src + (i % b->ring) * CHUNK;

		for (size_t off = 0; off < CHUNK;) {
			ssize_t r = send(cfd, p + off, CHUNK - off, MSG_NOSIGNAL);

			if (r < 0)
				die("baseline send", errno);
			off += (size_t)r;
		}
	}
	pthread_join(thr, NULL);
	if (s.err)
		die("baseline recv", s.err);
	close(cfd);
	close(s.fd);
	return (double)(b->nwrites * CHUNK) / (double)(pd_now_ns() - t0);
}

/* ---- driver ------------------------------------------------------------------------ */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return v[n / 2];
}

static double bench_tcp_lanes(struct bench *b, uint32_t lanes)
{
	struct pair p;
	double v[MAX_REPS];

	pair_open(b, lanes, &p);
	pump(b, p.tx, NCHUNKS); /* warm-up: lanes up, buffers grown */
	for (int r = 0; r < b->reps; r++)
		v[r] = run_tcp(b, p.tx);
	pd_tcp_destroy(p.tx);
	pd_tcp_destroy(p.rx);
	return median(v, b->reps);
}

static double bench_baseline(const struct bench *b)
{
	double v[MAX_REPS];

	for (int r = 0; r < b->reps; r++)
		v[r] = run_baseline(b);
	return median(v, b->reps);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: bench_tcp [--quick] [--help]\n"
		   "  --quick  one short run per configuration (< 5 s)\n");
}

static int parse(int argc, char **argv, int *quick)
{
	static const struct option opts[] = {
		{ "quick", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	while ((c = getopt_long(argc, argv, "qh", opts, NULL)) != -1) {
		if (c == 'q') {
			*quick = 1;
		} else {
			usage(c == 'h' ? stdout : stderr);
			return c == 'h' ? 0 : 2;
		}
	}
	return -1;
}

int main(int argc, char **argv)
{
	static const uint32_t lanes[] = { 1, 2, 4 };
	struct bench b = { 0 };
	int quick = 0, rc = parse(argc, argv, &quick);
	double base;

	if (rc >= 0)
		return rc;
	b.reps = quick ? 1 : REPS;
	b.nwrites = quick ? 1024 : 3072;
	b.src = malloc((size_t)NCHUNKS * CHUNK);
	b.arena = malloc((size_t)NCHUNKS * CHUNK);
	if (!b.src || !b.arena)
		die("malloc", ENOMEM);
	for (size_t i = 0; i < (size_t)NCHUNKS * CHUNK; i++)
		b.src[i] = (uint8_t)(i * 131 + 7);
	memset(b.arena, 0, (size_t)NCHUNKS * CHUNK); /* pre-fault */
	printf("bench_tcp: 1P1D loopback, %u KiB writes, %u in flight, window 32/lane, "
	       "%llu MiB per run, median of %d (%s)\n", CHUNK >> 10, INFLIGHT,
	       (unsigned long long)(b.nwrites * CHUNK >> 20), b.reps, quick ? "quick" : "full");
	b.ring = 1;
	base = bench_baseline(&b);
	printf("  %-32s %6.2f GB/s  (one 1 MiB buffer each side, as iperf3)\n",
	       "baseline: 1 blocking socket", base);
	b.ring = NCHUNKS;
	base = bench_baseline(&b);
	printf("  %-32s %6.2f GB/s  1.00x (through the same 64 MiB arenas)\n",
	       "baseline: 1 blocking socket", base);
	for (size_t i = 0; i < sizeof(lanes) / sizeof(lanes[0]); i++) {
		double v = bench_tcp_lanes(&b, lanes[i]);
		char name[48];

		snprintf(name, sizeof(name), "pd_tcp: lanes=%u", lanes[i]);
		printf("  %-32s %6.2f GB/s  %.2fx\n", name, v, v / base);
	}
	free(b.arena);
	free(b.src);
	return 0;
}
