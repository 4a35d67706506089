/* SPDX-License-Identifier: MIT */
#ifndef PD_TESTS_UNIT_TCP_FIXTURE_H
#define PD_TESTS_UNIT_TCP_FIXTURE_H

/*
 * Fixture of the TCP transport tests (test_tcp.c, test_tcp_data.c): two
 * pd_tcp instances in one process over real loopback sockets, a receiver
 * ("rx", listening on 127.0.0.1:ephemeral) and a sender ("tx").
 *
 * The receiver's callbacks model the control plane: accept_peer knows one
 * token; claim accepts a write only into a slot of a small grant table
 * (granted, same peer, gen and tag, not being written), and returns the
 * slot's memory in a malloc'd arena with cap = slot_size (it does NOT
 * check len: the transport must). A gate can hold claims after the first
 * gate_after ones, to freeze a transfer midway.
 *
 * The callbacks run on data threads and never call cmocka (it is not
 * thread-safe): they count under a mutex, and the test thread asserts.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "pd_compiler.h"
#include "pd_tcp.h"
#include "pd_time.h"

#define FX_HOST     "127.0.0.1"
#define FX_TOKEN    0x70d4c0ffee123456ull
#define FX_RX_PEER  7u   /* the sender as the receiver knows it */
#define FX_PEER     3u   /* the receiver as the sender knows it */
#define FX_WAIT_MS  10000u
#define FX_GATE_MS  10000u

struct fx_grant {
	uint32_t granted;
	uint32_t gen;
	uint64_t tag;
	uint32_t busy;
	uint32_t landed_ok;
	uint32_t landed_err;
};

struct fx_cfg {
	uint32_t nslots;
	uint32_t slot_size;
	uint32_t lanes;
	uint32_t window;
	uint32_t depth;
	uint32_t connect_ms;
	uint32_t io_ms;
	uint32_t max_frame;
};

struct fx {
	struct pd_tcp *rx, *tx;
	uint16_t port;
	struct fx_cfg cfg;
	uint8_t *arena;
	uint8_t *snap;                 /* arena copy for "untouched" checks */
	size_t arena_len;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	/* mu */
	struct fx_grant *g;
	uint32_t claims, refused, landed_ok, landed_err, accepts, double_claims;
	uint32_t gate_after;           /* claims beyond this wait for gate_open */
	int gate_open;
	int hold_hellos;               /* accept_peer waits while set */
};

static inline struct fx_cfg fx_cfg_default(void)
{
	return (struct fx_cfg){ .nslots = 16, .slot_size = 64 << 10, .lanes = 2, .window = 32,
				.depth = 1024, .connect_ms = 3000, .io_ms = 3000,
				.max_frame = 64u << 20 };
}

/* ---- receiver callbacks (data threads: no cmocka here) ------------------------ */

static inline int fx_accept_peer(void *ctx, uint64_t token, uint32_t *peer)
{
	struct fx *f = ctx;
	struct timespec ts;
	int ok = token == FX_TOKEN;

	(void)clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += FX_GATE_MS / 1000;
	pthread_mutex_lock(&f->mu);
	while (f->hold_hellos)
		if (pthread_cond_timedwait(&f->cv, &f->mu, &ts) == ETIMEDOUT)
			break;
	f->accepts += ok;
	pthread_mutex_unlock(&f->mu);
	if (!ok)
		return -EACCES;
	*peer = FX_RX_PEER;
	return 0;
}

static inline void fx_gate_wait(struct fx *f)
{
	struct timespec ts;

	(void)clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += FX_GATE_MS / 1000;
	while (f->claims > f->gate_after && !f->gate_open)
		if (pthread_cond_timedwait(&f->cv, &f->mu, &ts) == ETIMEDOUT)
			break;
}

static inline int fx_claim(void *ctx, uint32_t peer, const struct pd_tcp_wdesc *d,
			   struct pd_tcp_dst *dst)
{
	struct fx *f = ctx;
	struct fx_grant *g;
	int rc = -EPERM;

	pthread_mutex_lock(&f->mu);
	f->claims++;
	fx_gate_wait(f);
	g = d->slot < f->cfg.nslots ? &f->g[d->slot] : NULL;
	if (g && g->busy)
		f->double_claims++;
	if (g && g->granted && !g->busy && g->gen == d->gen && g->tag == d->tag &&
	    peer == FX_RX_PEER) {
		g->busy = 1;
		dst->ptr = f->arena + (size_t)d->slot * f->cfg.slot_size;
		dst->cap = f->cfg.slot_size;
		dst->priv = d->slot;
		rc = 0;
	} else {
		f->refused++;
	}
	pthread_mutex_unlock(&f->mu);
	return rc;
}

static inline void fx_landed(void *ctx, uint32_t peer, const struct pd_tcp_wdesc *d,
			     const struct pd_tcp_dst *dst, int status)
{
	struct fx *f = ctx;
	struct fx_grant *g = &f->g[dst->priv];

	(void)peer, (void)d;
	pthread_mutex_lock(&f->mu);
	g->busy = 0;
	if (status == 0) {
		g->landed_ok++;
		f->landed_ok++;
	} else {
		g->landed_err++;
		f->landed_err++;
	}
	pthread_mutex_unlock(&f->mu);
}

static const struct pd_tcp_ops fx_ops = {
	.accept_peer = fx_accept_peer,
	.claim = fx_claim,
	.landed = fx_landed,
};

/* ---- setup ---------------------------------------------------------------------- */

static inline struct pd_tcp_opts fx_opts(const struct fx_cfg *c)
{
	struct pd_tcp_opts o;

	pd_tcp_opts_init(&o);
	o.lanes = c->lanes;
	o.window = c->window;
	o.queue_depth = c->depth;
	o.connect_timeout_ms = c->connect_ms;
	o.io_timeout_ms = c->io_ms;
	o.max_frame = c->max_frame;
	return o;
}

static inline void fx_open(struct fx *f, const struct fx_cfg *c)
{
	struct pd_tcp_opts o = fx_opts(c);
	int port;

	f->cfg = *c;
	f->arena_len = (size_t)c->nslots * c->slot_size;
	f->arena = malloc(f->arena_len);
	f->snap = malloc(f->arena_len);
	f->g = calloc(c->nslots, sizeof(*f->g));
	assert_non_null(f->arena);
	assert_non_null(f->snap);
	assert_non_null(f->g);
	memset(f->arena, 0xa5, f->arena_len);
	f->gate_after = UINT32_MAX;
	o.ops = &fx_ops;
	o.ctx = f;
	assert_int_equal(pd_tcp_create(&o, &f->rx), 0);
	assert_int_equal(pd_tcp_listen(f->rx, FX_HOST, 0), 0);
	port = pd_tcp_port(f->rx);
	assert_true(port > 0 && port < 65536);
	f->port = (uint16_t)port;
	o.ops = NULL;
	o.ctx = NULL;
	assert_int_equal(pd_tcp_create(&o, &f->tx), 0);
}

static inline int fx_setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	pthread_condattr_t ca;

	if (!f)
		return -1;
	pthread_mutex_init(&f->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_cond_init(&f->cv, &ca);
	pthread_condattr_destroy(&ca);
	*state = f;
	return 0;
}

static inline void fx_gate_set(struct fx *f, uint32_t after, int open)
{
	pthread_mutex_lock(&f->mu);
	f->gate_after = after;
	f->gate_open = open;
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->mu);
}

static inline void fx_hold_hellos(struct fx *f, int hold)
{
	pthread_mutex_lock(&f->mu);
	f->hold_hellos = hold;
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->mu);
}

static inline int fx_teardown(void **state)
{
	struct fx *f = *state;

	fx_gate_set(f, UINT32_MAX, 1); /* never leave a data thread parked */
	fx_hold_hellos(f, 0);
	pd_tcp_destroy(f->tx);
	pd_tcp_destroy(f->rx);
	pthread_cond_destroy(&f->cv);
	pthread_mutex_destroy(&f->mu);
	free(f->g);
	free(f->snap);
	free(f->arena);
	free(f);
	return 0;
}

static inline void fx_grant(struct fx *f, uint32_t slot, uint32_t gen, uint64_t tag)
{
	pthread_mutex_lock(&f->mu);
	f->g[slot].granted = 1;
	f->g[slot].gen = gen;
	f->g[slot].tag = tag;
	pthread_mutex_unlock(&f->mu);
}

/* Read a counter of the claim model under its lock. */
static inline uint32_t fx_get(struct fx *f, const uint32_t *field)
{
	uint32_t v;

	pthread_mutex_lock(&f->mu);
	v = *field;
	pthread_mutex_unlock(&f->mu);
	return v;
}

static inline void fx_connect(struct fx *f, uint64_t token)
{
	assert_int_equal(pd_tcp_connect(f->tx, FX_PEER, FX_HOST, f->port, token), 0);
}

static inline void fx_snapshot(struct fx *f)
{
	memcpy(f->snap, f->arena, f->arena_len);
}

static inline void fx_assert_untouched(struct fx *f)
{
	assert_memory_equal(f->arena, f->snap, f->arena_len);
}

/* ---- waiting ------------------------------------------------------------------ */

static inline void fx_sleep_ms(uint32_t ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	(void)nanosleep(&ts, NULL);
}

/* Collect up to want completions, sleeping on the event fd; returns how many. */
static inline uint32_t fx_wait(struct pd_tcp *t, struct pd_cpl *c, uint32_t want,
			       uint32_t timeout_ms)
{
	uint64_t deadline = pd_deadline_ms(timeout_ms);
	struct pollfd pfd = { .fd = pd_tcp_event_fd(t), .events = POLLIN };
	uint32_t got = 0;

	while (got < want) {
		int n = pd_tcp_poll(t, c + got, want - got);

		assert_true(n >= 0);
		got += (uint32_t)n;
		if (got == want || pd_now_ns() >= deadline)
			break;
		if (n == 0)
			(void)poll(&pfd, 1, 50);
	}
	return got;
}

static inline struct pd_tcp_stats fx_stats(const struct pd_tcp *t)
{
	struct pd_tcp_stats s;

	pd_tcp_get_stats(t, &s);
	return s;
}

/* Wait until a counter (byte offset in struct pd_tcp_stats) reaches want. */
static inline int fx_wait_stat(const struct pd_tcp *t, size_t off, uint64_t want,
			       uint32_t timeout_ms)
{
	uint64_t deadline = pd_deadline_ms(timeout_ms);

	for (;;) {
		struct pd_tcp_stats s = fx_stats(t);
		uint64_t v;

		memcpy(&v, (const uint8_t *)&s + off, sizeof(v));
		if (v >= want)
			return 1;
		if (pd_now_ns() >= deadline)
			return 0;
		fx_sleep_ms(2);
	}
}

#define FX_WAIT_STAT(t, field, want)                                                   \
	assert_true(fx_wait_stat((t), offsetof(struct pd_tcp_stats, field), (want), FX_WAIT_MS))

static inline void fx_wait_model(struct fx *f, const uint32_t *field, uint32_t want)
{
	uint64_t deadline = pd_deadline_ms(FX_WAIT_MS);
	uint32_t v;

	for (;;) {
		v = fx_get(f, field);
		if (v >= want || pd_now_ns() >= deadline)
			break;
		fx_sleep_ms(2);
	}
	assert_true(v >= want);
}

/* ---- payloads ----------------------------------------------------------------- */

static inline uint64_t fx_mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static inline void fx_pattern(uint8_t *p, size_t len, uint64_t seed)
{
	size_t i = 0;

	for (; i + 8 <= len; i += 8) {
		uint64_t v = fx_mix(seed + i);

		memcpy(p + i, &v, 8);
	}
	for (; i < len; i++)
		p[i] = (uint8_t)fx_mix(seed + i);
}

/* A write of src[0..len) into a granted slot. */
static inline struct pd_xfer fx_xfer(uint64_t cookie, const void *src, uint32_t len,
					 uint32_t slot, uint32_t gen, uint64_t tag)
{
	return (struct pd_xfer){ .cookie = cookie, .src = src, .len = len, .slot = slot,
				     .gen = gen, .tag = tag };
}

/* ---- a raw TCP client (the hostile sender) --------------------------------------- */

static inline int fx_raw_connect(uint16_t port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	struct timeval tv = { 3, 0 };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_int_equal(inet_pton(AF_INET, FX_HOST, &a.sin_addr), 1);
	assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
	assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)), 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	return fd;
}

static inline void fx_raw_send(int fd, const void *buf, size_t len)
{
	assert_int_equal(send(fd, buf, len, MSG_NOSIGNAL), (ssize_t)len);
}

static inline void fx_raw_hdr(int fd, uint16_t type, uint32_t slot, uint32_t gen, uint32_t len,
			      uint64_t cookie, uint64_t tag)
{
	struct pd_tcp_hdr h = { .magic = PD_TCP_MAGIC, .version = PD_TCP_WIRE_VERSION,
				.type = type, .slot = slot, .gen = gen, .len = len,
				.cookie = cookie, .tag = tag };
	uint8_t b[PD_TCP_HDR_SIZE];

	pd_tcp_hdr_encode(&h, b);
	fx_raw_send(fd, b, sizeof(b));
}

/* Read exactly one frame header; -1 on EOF, timeout or garbage. */
static inline int fx_raw_recv_hdr(int fd, struct pd_tcp_hdr *h)
{
	uint8_t b[PD_TCP_HDR_SIZE];
	ssize_t r = recv(fd, b, sizeof(b), MSG_WAITALL);

	if (r != (ssize_t)sizeof(b))
		return -1;
	return pd_tcp_hdr_decode(b, UINT32_MAX, h);
}

/* HELLO with a token; the reply's status (or -1000 when none came). */
static inline int fx_raw_hello(int fd, uint64_t token)
{
	struct pd_tcp_hdr h;

	struct pd_tcp_hdr req = { .magic = PD_TCP_MAGIC, .version = PD_TCP_WIRE_VERSION,
				  .type = PD_TCP_T_HELLO, .gen = 1, .tag = token };
	uint8_t b[PD_TCP_HDR_SIZE];

	pd_tcp_hdr_encode(&req, b);
	/* No assert: a receiver that refuses the connection may have closed it. */
	if (send(fd, b, sizeof(b), MSG_NOSIGNAL) != (ssize_t)sizeof(b))
		return -1000;
	if (fx_raw_recv_hdr(fd, &h) < 0 || h.type != PD_TCP_T_HELLO)
		return -1000;
	return h.status;
}

/* 1 when the receiver closed the connection (EOF or reset) in time. */
static inline int fx_raw_closed(int fd)
{
	uint8_t b[256];

	for (;;) {
		ssize_t r = recv(fd, b, sizeof(b), 0);

		if (r == 0 || (r < 0 && errno == ECONNRESET))
			return 1;
		if (r < 0)
			return 0; /* timeout (SO_RCVTIMEO) or another error */
	}
}

/* Count completions per cookie (cookies 0..n-1): each must come once. */
static inline void fx_assert_once(const struct pd_cpl *c, uint32_t nc, uint32_t n)
{
	uint8_t *seen = calloc(n ? n : 1, 1);

	assert_non_null(seen);
	for (uint32_t i = 0; i < nc; i++) {
		assert_int_equal(c[i].kind, PD_CPL_WRITE);
		assert_true(c[i].cookie < n);
		assert_int_equal(seen[c[i].cookie], 0);
		seen[c[i].cookie] = 1;
	}
	free(seen);
}

#endif
