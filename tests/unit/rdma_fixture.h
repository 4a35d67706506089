/* SPDX-License-Identifier: MIT */
#ifndef PD_TESTS_UNIT_RDMA_FIXTURE_H
#define PD_TESTS_UNIT_RDMA_FIXTURE_H

/*
 * Fixture of the RDMA transport tests (test_rdma.c, test_rdma_fail.c,
 * test_rdma_conn.c): the real module and its real data thread over the
 * fake verbs of rdma_fake*.h. Two arenas (recv_buf, registered for remote
 * writes; send_buf, the source), a tally of the completions polled, and
 * helpers to create an instance, connect a peer and wait for completions.
 * setup() gives each test a fresh fake; teardown() destroys the instance
 * left in *state and checks that every verbs object went with it.
 */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "pd_rdma_int.h"
#include "pd_time.h"
#include "rdma_fake.h"
#include "rdma_fake_cm.h"

/* The fake's fields are written by the data thread too: the test reads
 * and writes them under the fake's lock only (never asserting while it
 * holds it: a failed assert longjmps). */
static inline int64_t fk_val(const void *p, size_t n)
{
	int64_t v;

	fk_lock();
	if (n == sizeof(int64_t)) {
		memcpy(&v, p, sizeof(v));
	} else {
		int32_t i;

		memcpy(&i, p, sizeof(i));
		v = i;
	}
	fk_unlock();
	return v;
}

#define FKV(f) fk_val(&fk.f, sizeof(fk.f))
#define FK_SET(f, v)                                                                     \
	do {                                                                             \
		fk_lock();                                                               \
		fk.f = (v);                                                              \
		fk_unlock();                                                             \
	} while (0)

#define T_SLOTS 16u
#define T_SLOT  4096u
#define T_ARENA (T_SLOTS * T_SLOT)
#define T_PEER  1u
#define T_PORT  7471u
#define T_WAIT  5000u
#define T_MAXCK 1024u

static _Alignas(4096) uint8_t recv_buf[T_ARENA];
static _Alignas(4096) uint8_t send_buf[T_ARENA];

/* ---- helpers ---------------------------------------------------------------------------- */

struct tally {
	int seen[T_MAXCK];
	int status[T_MAXCK];
	uint32_t order[T_MAXCK];       /* cookies in completion order */
	uint32_t writes, ok, failed, peers, dup, after_peer;
	int peer_status;
};

static struct tally T;

static inline void tally_add(struct tally *t, const struct pd_cpl *c)
{
	if (c->kind == PD_CPL_PEER) {
		t->peers++;
		t->peer_status = c->status;
		return;
	}
	if (t->peers)
		t->after_peer++;
	assert_true(c->cookie < T_MAXCK);
	if (t->seen[c->cookie]++)
		t->dup++;
	t->status[c->cookie] = c->status;
	t->order[t->writes++] = (uint32_t)c->cookie;
	if (c->status == 0)
		t->ok++;
	else
		t->failed++;
}

/* Collect completions until @writes and @peers arrived (0 on time), or
 * -ETIMEDOUT after @ms. */
static inline int collect(struct pd_rdma *r, uint32_t writes, uint32_t peers, uint32_t ms)
{
	uint64_t end = pd_deadline_ms(ms);
	struct pollfd pfd = { .fd = pd_rdma_event_fd(r), .events = POLLIN };
	struct pd_cpl c[32];

	for (;;) {
		uint64_t now;
		int n;

		while ((n = pd_rdma_poll(r, c, 32)) > 0) {
			for (int i = 0; i < n; i++)
				tally_add(&T, &c[i]);
		}
		if (T.writes >= writes && T.peers >= peers)
			return 0;
		now = pd_now_ns();
		if (now >= end)
			return -ETIMEDOUT;
		(void)poll(&pfd, 1, (int)((end - now) / PD_NS_PER_MS) + 1);
	}
}

/* Nothing more within @ms. */
static inline void expect_quiet(struct pd_rdma *r, uint32_t ms)
{
	uint32_t before = T.writes + T.peers;

	assert_int_equal(collect(r, UINT32_MAX, UINT32_MAX, ms), -ETIMEDOUT);
	assert_int_equal(T.writes + T.peers, before);
}

static inline struct pd_rdma_stats stats(const struct pd_rdma *r)
{
	struct pd_rdma_stats s;

	pd_rdma_get_stats(r, &s);
	return s;
}

static inline void fx_opts(struct pd_rdma_opts *o)
{
	pd_rdma_opts_init(o);
	o->dev = "fake0";
	o->recv_base = recv_buf;
	o->recv_len = sizeof(recv_buf);
	o->send_base = send_buf;
	o->send_len = sizeof(send_buf);
	o->qps = 2;
	o->max_peers = 4;
	o->queue_depth = 256;
	o->sq_depth = 8;
	o->signal_interval = 4;
	o->connect_timeout_ms = 2000;
}

static inline struct pd_rdma *fx_create(const struct pd_rdma_opts *o)
{
	struct pd_rdma *r = NULL;

	assert_int_equal(pd_rdma_create_verbs(o, &fk_verbs, &r), 0);
	return r;
}

static inline struct pd_rdma_remote fx_remote(const struct pd_rdma *r)
{
	struct pd_rdma_local l;

	assert_int_equal(pd_rdma_local_info(r, &l), 0);
	return (struct pd_rdma_remote){ .base = l.base, .slot_size = T_SLOT, .rkey = l.rkey,
					.nslots = T_SLOTS, .token = 0x1122334455667788ull };
}

/* Connect @peer and wait for every QP to be established. */
static inline void fx_connect(struct pd_rdma *r, uint32_t peer)
{
	struct pd_rdma_remote rem = fx_remote(r);
	uint64_t want = stats(r).connects + 1, end = pd_deadline_ms(T_WAIT);

	assert_int_equal(pd_rdma_connect(r, peer, "10.0.0.1", T_PORT, &rem), 0);
	while (stats(r).connects < want && pd_now_ns() < end)
		(void)poll(NULL, 0, 1);
	assert_int_equal(stats(r).connects, want);
}

static inline struct pd_xfer fx_xfer(uint64_t cookie, uint32_t slot, uint32_t len)
{
	return (struct pd_xfer){ .cookie = cookie, .src = send_buf + slot * T_SLOT,
				      .len = len, .slot = slot, .gen = 3 };
}

static inline void fill(uint32_t slot, uint8_t seed)
{
	for (uint32_t i = 0; i < T_SLOT; i++)
		send_buf[slot * T_SLOT + i] = (uint8_t)(seed + slot * 7u + i * 13u);
}

static inline int landed(uint32_t slot, uint8_t seed, uint32_t len)
{
	for (uint32_t i = 0; i < T_SLOT; i++) {
		uint8_t want = i < len ? (uint8_t)(seed + slot * 7u + i * 13u) : 0xEE;

		if (recv_buf[slot * T_SLOT + i] != want)
			return 0;
	}
	return 1;
}

static inline int setup(void **state)
{
	(void)state;
	memset(&T, 0, sizeof(T));
	memset(recv_buf, 0xEE, sizeof(recv_buf));
	return fk_reset();
}

static inline int teardown(void **state)
{
	struct pd_rdma *r = *state;

	pd_rdma_destroy(r);
	*state = NULL;
	return fk_all_freed() ? 0 : -1;
}

/* The instance the test leaves in *state is destroyed by teardown, which
 * also checks that every verbs object went with it. */
static inline struct pd_rdma *fx_up(void **state, const struct pd_rdma_opts *o)
{
	struct pd_rdma *r = fx_create(o);

	*state = r;
	fx_connect(r, T_PEER);
	return r;
}

/* After a peer failure: every write completed once, with an error
 * (status), the PEER completion last, the QPs gone, writes refused. */
static inline void expect_peer_failed(struct pd_rdma *r, uint32_t nwrites, int status)
{
	assert_int_equal(collect(r, nwrites, 1, T_WAIT), 0);
	expect_quiet(r, 50);
	assert_int_equal(T.peers, 1);
	assert_int_equal(T.peer_status, status);
	assert_int_equal(T.after_peer, 0);
	assert_int_equal(T.dup, 0);
	assert_int_equal(T.writes, nwrites);
	assert_int_equal(FKV(live_qp), 0);
	assert_int_equal(stats(r).peer_failures, 1);
}

static inline struct pd_rdma_peer *peer_of(struct pd_rdma *r, uint32_t id)
{
	return pd_rdma_peer_find(r, id, NULL);
}

#endif
