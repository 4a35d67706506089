/* SPDX-License-Identifier: MIT */
/*
 * RDMA transport (broker/pd_rdma*.c) with no device: the real module, its
 * real data thread, over the fake verbs of rdma_fake.h. What is checked:
 * argument and bounds checks, address translation, WR chains (one post per
 * QP per batch), selective signalling (the send queue never overflows, the
 * last WR of a chain is signalled, cookies come back right when only every
 * Nth WR is signalled), and every error path the real stack cannot produce
 * on demand: a WC error, a failed post, an async QP error, rejected /
 * unreachable / silent connects, a peer disconnecting, refused connect
 * requests, disconnect and destroy with work in flight, and that every
 * verbs object is freed. The same paths on real verbs: tests/rdma/.
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

#include "pd_time.h"
#include "rdma_fake.h"

/* The fake's fields are written by the data thread too: the test reads
 * and writes them under the fake's lock only (never asserting while it
 * holds it: a failed assert longjmps). */
static int64_t fk_val(const void *p, size_t n)
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

static void tally_add(struct tally *t, const struct pd_cpl *c)
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
static int collect(struct pd_rdma *r, uint32_t writes, uint32_t peers, uint32_t ms)
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
static void expect_quiet(struct pd_rdma *r, uint32_t ms)
{
	uint32_t before = T.writes + T.peers;

	assert_int_equal(collect(r, UINT32_MAX, UINT32_MAX, ms), -ETIMEDOUT);
	assert_int_equal(T.writes + T.peers, before);
}

static struct pd_rdma_stats stats(const struct pd_rdma *r)
{
	struct pd_rdma_stats s;

	pd_rdma_get_stats(r, &s);
	return s;
}

static void fx_opts(struct pd_rdma_opts *o)
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

static struct pd_rdma *fx_create(const struct pd_rdma_opts *o)
{
	struct pd_rdma *r = NULL;

	assert_int_equal(pd_rdma_create_verbs(o, &fk_verbs, &r), 0);
	return r;
}

static struct pd_rdma_remote fx_remote(const struct pd_rdma *r)
{
	struct pd_rdma_local l;

	assert_int_equal(pd_rdma_local_info(r, &l), 0);
	return (struct pd_rdma_remote){ .base = l.base, .slot_size = T_SLOT, .rkey = l.rkey,
					.nslots = T_SLOTS, .token = 0x1122334455667788ull };
}

/* Connect @peer and wait for every QP to be established. */
static void fx_connect(struct pd_rdma *r, uint32_t peer)
{
	struct pd_rdma_remote rem = fx_remote(r);
	uint64_t want = stats(r).connects + 1, end = pd_deadline_ms(T_WAIT);

	assert_int_equal(pd_rdma_connect(r, peer, "10.0.0.1", T_PORT, &rem), 0);
	while (stats(r).connects < want && pd_now_ns() < end)
		(void)poll(NULL, 0, 1);
	assert_int_equal(stats(r).connects, want);
}

static struct pd_rdma_xfer fx_xfer(uint64_t cookie, uint32_t slot, uint32_t len)
{
	return (struct pd_rdma_xfer){ .cookie = cookie, .src = send_buf + slot * T_SLOT,
				      .len = len, .slot = slot, .gen = 3 };
}

static void fill(uint32_t slot, uint8_t seed)
{
	for (uint32_t i = 0; i < T_SLOT; i++)
		send_buf[slot * T_SLOT + i] = (uint8_t)(seed + slot * 7u + i * 13u);
}

static int landed(uint32_t slot, uint8_t seed, uint32_t len)
{
	for (uint32_t i = 0; i < T_SLOT; i++) {
		uint8_t want = i < len ? (uint8_t)(seed + slot * 7u + i * 13u) : 0xEE;

		if (recv_buf[slot * T_SLOT + i] != want)
			return 0;
	}
	return 1;
}

static int setup(void **state)
{
	(void)state;
	memset(&T, 0, sizeof(T));
	memset(recv_buf, 0xEE, sizeof(recv_buf));
	return fk_reset();
}

static int teardown(void **state)
{
	struct pd_rdma *r = *state;

	pd_rdma_destroy(r);
	*state = NULL;
	return fk_all_freed() ? 0 : -1;
}

/* The instance the test leaves in *state is destroyed by teardown, which
 * also checks that every verbs object went with it. */
static struct pd_rdma *fx_up(void **state, const struct pd_rdma_opts *o)
{
	struct pd_rdma *r = fx_create(o);

	*state = r;
	fx_connect(r, T_PEER);
	return r;
}

/* ---- negative first --------------------------------------------------------------------- */

static void test_create_negative(void **state)
{
	struct pd_rdma_opts o, b;
	struct pd_rdma *r = NULL;

	(void)state;
	fx_opts(&o);
	assert_int_equal(pd_rdma_create_verbs(NULL, &fk_verbs, &r), -EINVAL);
	assert_int_equal(pd_rdma_create_verbs(&o, NULL, &r), -EINVAL);
	assert_int_equal(pd_rdma_create_verbs(&o, &fk_verbs, NULL), -EINVAL);
#define BAD(field, val)                                                                  \
	do {                                                                             \
		b = o;                                                                   \
		b.field = (val);                                                         \
		assert_int_equal(pd_rdma_create_verbs(&b, &fk_verbs, &r), -EINVAL);      \
	} while (0)
	BAD(flags, 1);
	BAD(qps, 0);
	BAD(qps, PD_RDMA_MAX_QPS + 1);
	BAD(max_peers, 0);
	BAD(queue_depth, 0);
	BAD(sq_depth, 1);
	BAD(sq_depth, PD_RDMA_MAX_SQ + 1);
	BAD(signal_interval, 0);
	BAD(signal_interval, o.sq_depth + 1);
	BAD(max_inline, PD_RDMA_MAX_INLINE + 1);
	BAD(max_conns, 0);
	BAD(connect_timeout_ms, 0);
	BAD(ack_timeout, 0);
	BAD(ack_timeout, 32);
	BAD(recv_len, 0);
	BAD(send_len, 0);
	BAD(addr, "not-an-address");
	BAD(dev, NULL);               /* neither dev nor addr */
	b = o;
	b.recv_base = NULL;
	b.send_base = NULL;
	assert_int_equal(pd_rdma_create_verbs(&b, &fk_verbs, &r), -EINVAL);
#undef BAD
	b = o;
	b.dev = "nope0";
	assert_int_equal(pd_rdma_create_verbs(&b, &fk_verbs, &r), -ENODEV);
	b.dev = NULL;
	b.addr = "192.0.2.1";         /* no RDMA device owns it */
	assert_int_equal(pd_rdma_create_verbs(&b, &fk_verbs, &r), -ENODEV);
	b.dev = "fake0";
	b.addr = "10.0.0.2";          /* fake1's address */
	assert_int_equal(pd_rdma_create_verbs(&b, &fk_verbs, &r), -EXDEV);
	FK_SET(fail_reg_mr, -EPERM);      /* ibv_reg_mr fails: everything is unwound */
	assert_int_equal(pd_rdma_create_verbs(&o, &fk_verbs, &r), -EPERM);
	assert_null(r);
	assert_true(fk_all_freed());
	pd_rdma_destroy(NULL);
	pd_rdma_stop(NULL);
}

static void test_device_choice(void **state)
{
	struct pd_rdma_opts o;
	struct pd_rdma_local l;
	struct pd_rdma *r;

	(void)state;
	fx_opts(&o);
	o.dev = NULL;
	o.addr = "10.0.0.2";
	r = fx_create(&o);
	assert_int_equal(pd_rdma_local_info(r, &l), 0);
	assert_string_equal(l.dev, "fake1");
	assert_int_equal(l.base, (uint64_t)(uintptr_t)recv_buf);
	assert_int_equal(l.len, sizeof(recv_buf));
	assert_int_equal(fk.mr[0].access, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	assert_int_equal(l.rkey, fk.mr[0].mr.rkey);
	assert_int_equal(fk.mr[1].access, 0); /* the send arena: local read only */
	pd_rdma_destroy(r);
	assert_true(fk_all_freed());
	o.addr = "10.0.0.7";
	r = fx_create(&o);
	assert_int_equal(pd_rdma_local_info(r, &l), 0);
	assert_string_equal(l.dev, "fake0");
	pd_rdma_destroy(r);
	assert_true(fk_all_freed());
}

static void test_api_negative(void **state)
{
	struct pd_rdma_opts o;
	struct pd_rdma_remote rem, b;
	struct pd_rdma_xfer x = fx_xfer(1, 0, 16);
	struct pd_cpl c;
	struct pd_rdma *r;

	fx_opts(&o);
	o.max_peers = 1;
	o.queue_depth = 4;
	r = fx_up(state, &o);
	rem = fx_remote(r);
	assert_int_equal(pd_rdma_connect(NULL, 2, "10.0.0.1", T_PORT, &rem), -EINVAL);
	assert_int_equal(pd_rdma_connect(r, 2, NULL, T_PORT, &rem), -EINVAL);
	assert_int_equal(pd_rdma_connect(r, 2, "host.example", T_PORT, &rem), -EINVAL);
	assert_int_equal(pd_rdma_connect(r, 2, "10.0.0.1", 0, &rem), -EINVAL);
	assert_int_equal(pd_rdma_connect(r, 2, "10.0.0.1", T_PORT, NULL), -EINVAL);
	b = rem;
	b.nslots = 0;
	assert_int_equal(pd_rdma_connect(r, 2, "10.0.0.1", T_PORT, &b), -EINVAL);
	b = rem;
	b.slot_size = 0;
	assert_int_equal(pd_rdma_connect(r, 2, "10.0.0.1", T_PORT, &b), -EINVAL);
	b = rem;
	b.base = UINT64_MAX - T_SLOT;  /* base + nslots * slot_size overflows */
	assert_int_equal(pd_rdma_connect(r, 2, "10.0.0.1", T_PORT, &b), -EINVAL);
	assert_int_equal(pd_rdma_connect(r, T_PEER, "10.0.0.1", T_PORT, &rem), -EEXIST);
	assert_int_equal(pd_rdma_connect(r, 2, "10.0.0.1", T_PORT, &rem), -ENOBUFS);
	assert_int_equal(pd_rdma_post(NULL, T_PEER, &x, 1), -EINVAL);
	assert_int_equal(pd_rdma_post(r, T_PEER, NULL, 1), -EINVAL);
	assert_int_equal(pd_rdma_post(r, 9, &x, 1), -ENOENT);
	assert_int_equal(pd_rdma_post(r, T_PEER, &x, 5), -EINVAL); /* > queue_depth */
	assert_int_equal(pd_rdma_post(r, T_PEER, &x, 0), 0);
	assert_int_equal(pd_rdma_disconnect(NULL, T_PEER), -EINVAL);
	assert_int_equal(pd_rdma_disconnect(r, 9), -ENOENT);
	assert_int_equal(pd_rdma_poll(NULL, &c, 1), -EINVAL);
	assert_int_equal(pd_rdma_poll(r, NULL, 1), -EINVAL);
	assert_int_equal(pd_rdma_poll(r, NULL, 0), 0);
	assert_int_equal(pd_rdma_event_fd(NULL), -EINVAL);
	assert_int_equal(pd_rdma_port(NULL), -EINVAL);
	assert_int_equal(pd_rdma_port(r), -ENOTCONN);
	assert_int_equal(pd_rdma_local_info(NULL, NULL), -EINVAL);
	assert_int_equal(pd_rdma_listen(r, "nohost", 1), -EINVAL);
	assert_int_equal(pd_rdma_listen(r, "10.0.0.1", 0), 0);
	assert_int_equal(pd_rdma_port(r), 18515);
	assert_int_equal(pd_rdma_listen(r, "10.0.0.1", 0), -EBUSY);
	pd_rdma_get_stats(r, NULL);
	pd_rdma_stop(r);
	pd_rdma_stop(r);
	assert_int_equal(pd_rdma_post(r, T_PEER, &x, 1), -ESHUTDOWN);
	assert_int_equal(pd_rdma_connect(r, 2, "10.0.0.1", T_PORT, &rem), -ESHUTDOWN);
	assert_int_equal(pd_rdma_listen(r, "10.0.0.1", 0), -ESHUTDOWN);
}

/* ---- address translation and bounds ---------------------------------------------------------- */

static void test_translation_bounds(void **state)
{
	struct pd_rdma_opts o;
	struct pd_rdma_remote rem = { .base = 0x10000, .slot_size = 0x3000, .nslots = 5 };
	struct pd_rdma_xfer x;
	struct pd_rdma *r;

	(void)state;
	assert_int_equal(pd_rdma_slot_addr(&rem, 0), 0x10000);
	assert_int_equal(pd_rdma_slot_addr(&rem, 4), 0x10000 + 4 * 0x3000);
	rem.slot_size = 3ull << 32; /* 64-bit products */
	assert_int_equal(pd_rdma_slot_addr(&rem, 3), 0x10000 + 9ull * (1ull << 32));
	rem.slot_size = T_SLOT;
	rem.nslots = T_SLOTS;
	fx_opts(&o);
	r = fx_create(&o);
	*state = r;
	x = fx_xfer(1, T_SLOTS - 1, T_SLOT);               /* last slot, full */
	assert_int_equal(pd_rdma_xfer_check(r, &rem, &x), 0);
	x.slot = T_SLOTS;                                   /* one past */
	assert_int_equal(pd_rdma_xfer_check(r, &rem, &x), -EINVAL);
	x = fx_xfer(1, 0, T_SLOT + 1);                      /* longer than a slot */
	assert_int_equal(pd_rdma_xfer_check(r, &rem, &x), -EINVAL);
	x = fx_xfer(1, 0, 0);                               /* empty: no src needed */
	x.src = NULL;
	assert_int_equal(pd_rdma_xfer_check(r, &rem, &x), 0);
	x = fx_xfer(1, 0, 1);
	x.src = NULL;
	assert_int_equal(pd_rdma_xfer_check(r, &rem, &x), -EINVAL);
	x.src = send_buf + T_ARENA - 1;                     /* last byte of the arena */
	assert_int_equal(pd_rdma_xfer_check(r, &rem, &x), 0);
	x.len = 2;                                          /* one past its end */
	assert_int_equal(pd_rdma_xfer_check(r, &rem, &x), -EINVAL);
	x.src = (const void *)((uintptr_t)send_buf - 1);    /* before it */
	x.len = 1;
	assert_int_equal(pd_rdma_xfer_check(r, &rem, &x), -EINVAL);
	x.src = recv_buf;                                   /* registered, not for sending */
	assert_int_equal(pd_rdma_xfer_check(r, &rem, &x), -EINVAL);
	x.src = (const void *)(uintptr_t)(UINTPTR_MAX - 3); /* src + len wraps */
	x.len = 8;
	assert_int_equal(pd_rdma_xfer_check(r, &rem, &x), -EINVAL);
}

/* A batch with one write out of bounds is refused whole: nothing posted. */
static void test_bulk_all_or_nothing(void **state)
{
	struct pd_rdma_opts o;
	struct pd_rdma_xfer x[3] = { fx_xfer(1, 0, 8), fx_xfer(2, 1, 8), fx_xfer(3, T_SLOTS, 8) };
	struct pd_rdma *r;

	fx_opts(&o);
	r = fx_up(state, &o);
	assert_int_equal(pd_rdma_post(r, T_PEER, x, 3), -EINVAL);
	expect_quiet(r, 50);
	assert_int_equal(FKV(wrs), 0);
	assert_int_equal(stats(r).wrs_posted, 0);
}

/* ---- chains and signalling ---------------------------------------------------------------------- */

/* 6 writes over 2 QPs: one ibv_post_send per QP, 3 linked WRs each, the
 * last signalled; bytes at base + slot * slot_size; cookies back once. */
static void test_chain_per_qp(void **state)
{
	struct fk_chain ch[2];
	struct pd_rdma_xfer x[6];
	struct pd_rdma_opts o;
	struct pd_rdma *r;

	fx_opts(&o);
	o.max_inline = 0;
	r = fx_up(state, &o);
	for (uint32_t i = 0; i < 6; i++) {
		fill(i * 2, 1);
		x[i] = fx_xfer(10 + i, i * 2, 100 + i * 500);
	}
	assert_int_equal(pd_rdma_post(r, T_PEER, x, 6), 6);
	assert_int_equal(collect(r, 6, 0, T_WAIT), 0);
	assert_int_equal(FKV(nchain), 2);
	assert_int_equal(FKV(post_calls), 2);
	fk_lock();
	memcpy(ch, fk.chain, sizeof(ch));
	fk_unlock();
	for (uint32_t i = 0; i < 2; i++) {
		assert_int_equal(ch[i].n, 3);
		assert_int_equal(ch[i].last_sig, 1);
	}
	assert_int_not_equal(ch[0].qpn, ch[1].qpn);
	for (uint32_t i = 0; i < 6; i++) {
		assert_int_equal(T.seen[10 + i], 1);
		assert_int_equal(T.status[10 + i], 0);
		assert_true(landed(i * 2, 1, 100 + i * 500));
		assert_true(landed(i * 2 + 1, 0, 0)); /* untouched neighbours */
	}
	assert_int_equal(stats(r).wrs_posted, 6);
	assert_int_equal(stats(r).post_calls, 2);
	assert_int_equal(stats(r).bytes_ok, 6 * 100 + 500 * 15);
	assert_int_equal(FKV(bad_chain) + FKV(sq_overflow) + FKV(cq_overflow), 0);
}

/* One QP, sq_depth 8, signal every 4th, WRs held by the device: the
 * send queue is filled but never overflowed, writes wait for room,
 * completions (one per 4 WRs) free it and map back to every cookie in
 * order. */
static void run_accounting(void **state, uint32_t interval, uint32_t nwrites)
{
	struct pd_rdma_xfer x[200];
	struct pd_rdma_opts o;
	struct pd_rdma *r;
	uint64_t end = pd_deadline_ms(T_WAIT);

	fx_opts(&o);
	o.qps = 1;
	o.signal_interval = interval;
	r = fx_up(state, &o);
	FK_SET(hold, 1);
	for (uint32_t i = 0; i < nwrites; i++) {
		fill(i % T_SLOTS, (uint8_t)interval);
		x[i] = fx_xfer(i, i % T_SLOTS, 64 + i);
	}
	for (uint32_t i = 0; i < nwrites; i += 10)
		assert_int_equal(pd_rdma_post(r, T_PEER, x + i, 10), 10);
	assert_int_equal(FKV(max_sq_used), o.sq_depth);
	assert_true(stats(r).sq_waits > 0);
	while (T.writes < nwrites && pd_now_ns() < end) {
		fk_release();
		(void)collect(r, T.writes + 1, 0, 20);
	}
	assert_int_equal(T.writes, nwrites);
	for (uint32_t i = 0; i < nwrites; i++) {
		assert_int_equal(T.seen[i], 1);
		assert_int_equal(T.status[i], 0);
		assert_int_equal(T.order[i], i); /* one QP: in order */
	}
	assert_int_equal(FKV(sq_overflow), 0);
	assert_int_equal(FKV(cq_overflow), 0);
	assert_int_equal(FKV(bad_chain), 0);       /* every chain ends signalled */
	assert_true(FKV(max_sq_used) <= o.sq_depth);
	assert_true(FKV(max_unsig_run) <= interval - 1);
	assert_int_equal(FKV(wrs), nwrites);
	assert_true(FKV(sig) >= nwrites / interval);
	assert_true(FKV(sig) <= nwrites / interval + FKV(nchain));
	assert_int_equal(stats(r).wrs_signalled, FKV(sig));
	assert_int_equal(stats(r).writes_ok, nwrites);
}

static void test_signal_every_4th(void **state)
{
	run_accounting(state, 4, 200);
}

static void test_signal_every_wr(void **state)
{
	run_accounting(state, 1, 50);
	assert_int_equal(FKV(sig), 50);
}

/* interval == sq_depth: only the last WR of each chain may be signalled
 * before the queue is full; still no overflow, no stall. */
static void test_signal_interval_sq_depth(void **state)
{
	run_accounting(state, 8, 100);
}

/* Many writes on two QPs without holding: all complete, each cookie once,
 * and the send queue never held more than sq_depth. */
static void test_many_two_qps(void **state)
{
	struct pd_rdma_xfer x[256];
	struct pd_rdma_opts o;
	struct pd_rdma *r;

	fx_opts(&o);
	r = fx_up(state, &o);
	for (uint32_t i = 0; i < T_SLOTS; i++)
		fill(i, 9);
	for (uint32_t i = 0; i < 256; i++)
		x[i] = fx_xfer(i, i % T_SLOTS, T_SLOT);
	assert_int_equal(pd_rdma_post(r, T_PEER, x, 256), 256);
	assert_int_equal(collect(r, 256, 0, T_WAIT), 0);
	assert_int_equal(T.ok, 256);
	assert_int_equal(T.dup, 0);
	for (uint32_t i = 0; i < T_SLOTS; i++)
		assert_true(landed(i, 9, T_SLOT));
	assert_true(FKV(max_sq_used) <= o.sq_depth);
	assert_int_equal(FKV(sq_overflow) + FKV(cq_overflow) + FKV(bad_chain), 0);
}

static void test_queue_depth(void **state)
{
	struct pd_rdma_xfer x[9];
	struct pd_rdma_opts o;
	struct pd_rdma *r;

	fx_opts(&o);
	o.queue_depth = 8;
	r = fx_up(state, &o);
	FK_SET(hold, 1);
	for (uint32_t i = 0; i < 9; i++)
		x[i] = fx_xfer(i, i, 8);
	assert_int_equal(pd_rdma_post(r, T_PEER, x, 6), 6);
	assert_int_equal(pd_rdma_post(r, T_PEER, x + 6, 3), -EAGAIN); /* 9 > 8 */
	assert_int_equal(pd_rdma_post(r, T_PEER, x + 6, 2), 2);
	fk_release();
	assert_int_equal(collect(r, 8, 0, T_WAIT), 0);
	assert_int_equal(pd_rdma_post(r, T_PEER, x, 8), 8);
	fk_release();
	assert_int_equal(collect(r, 16, 0, T_WAIT), 0);
}

static void test_inline(void **state)
{
	struct pd_rdma_xfer x[4] = { fx_xfer(1, 0, 16), fx_xfer(2, 1, 17), fx_xfer(3, 2, 4000),
				     fx_xfer(4, 3, 0) };
	struct pd_rdma_opts o;
	struct pd_rdma *r;

	FK_SET(max_inline, 16); /* the QP grants less than the 64 asked for */
	fx_opts(&o);
	o.qps = 1;
	r = fx_up(state, &o);
	for (uint32_t i = 0; i < 4; i++)
		fill(i, 5);
	assert_int_equal(pd_rdma_post(r, T_PEER, x, 4), 4);
	assert_int_equal(collect(r, 4, 0, T_WAIT), 0);
	assert_int_equal(T.ok, 4);
	assert_int_equal(FKV(inl), 1); /* 16 bytes only; 0 bytes need no data */
	assert_true(landed(0, 5, 16) && landed(1, 5, 17) && landed(2, 5, 4000) && landed(3, 0, 0));
}

static void test_inline_refused(void **state)
{
	struct pd_rdma_xfer x = fx_xfer(1, 0, 8);
	struct pd_rdma_opts o;
	struct pd_rdma *r;

	FK_SET(no_inline, 1); /* create_qp with inline data fails: retried without */
	fx_opts(&o);
	r = fx_up(state, &o);
	fill(0, 2);
	assert_int_equal(pd_rdma_post(r, T_PEER, &x, 1), 1);
	assert_int_equal(collect(r, 1, 0, T_WAIT), 0);
	assert_int_equal(T.ok, 1);
	assert_int_equal(FKV(inl), 0);
	assert_true(landed(0, 2, 8));
}

/* ---- errors ------------------------------------------------------------------------------------ */

/* After a peer failure: every write completed once, with an error
 * (status), the PEER completion last, the QPs gone, writes refused. */
static void expect_peer_failed(struct pd_rdma *r, uint32_t nwrites, int status)
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

static void test_wc_error(void **state)
{
	struct pd_rdma_xfer x[40], y = fx_xfer(99, 0, 8);
	struct pd_rdma_opts o;
	struct pd_rdma *r;

	fx_opts(&o);
	r = fx_up(state, &o);
	FK_SET(hold, 1);
	FK_SET(fail_nth, 7);
	FK_SET(fail_status, IBV_WC_REM_ACCESS_ERR);
	for (uint32_t i = 0; i < 40; i++)
		x[i] = fx_xfer(i, i % T_SLOTS, 128);
	assert_int_equal(pd_rdma_post(r, T_PEER, x, 40), 40);
	fk_release();
	expect_peer_failed(r, 40, -EACCES);
	/* the WRs before the failing one on its QP had no WC of their own:
	 * conservatively failed with it; those covered by earlier success
	 * WCs are fine */
	assert_true(T.ok <= 12);
	for (uint32_t i = 0; i < 40; i++)
		assert_true(T.status[i] == 0 || T.status[i] == -EACCES);
	for (uint32_t i = 0; i < 4; i++)
		assert_int_equal(T.status[i], 0);  /* covered by QP 0's first success WC */
	assert_int_equal(T.status[6], -EACCES); /* the 7th WR QP 0 ran */
	assert_int_equal(pd_rdma_post(r, T_PEER, &y, 1), -ENOTCONN);
	assert_true(stats(r).wc_errors >= 1);
	/* rebuilt on the next connect */
	assert_int_equal(pd_rdma_disconnect(r, T_PEER), 0);
	memset(&T, 0, sizeof(T));
	FK_SET(hold, 0);
	fx_connect(r, T_PEER);
	fill(3, 8);
	y = fx_xfer(5, 3, 300);
	assert_int_equal(pd_rdma_post(r, T_PEER, &y, 1), 1);
	assert_int_equal(collect(r, 1, 0, T_WAIT), 0);
	assert_int_equal(T.status[5], 0);
	assert_true(landed(3, 8, 300));
}

/* The WC error is the device's: a bad rkey. */
static void test_bad_rkey(void **state)
{
	struct pd_rdma_remote rem;
	struct pd_rdma_xfer x[4];
	struct pd_rdma_opts o;
	struct pd_rdma *r;
	uint64_t end = pd_deadline_ms(T_WAIT);

	fx_opts(&o);
	r = fx_create(&o);
	*state = r;
	rem = fx_remote(r);
	rem.rkey ^= 0xff;
	assert_int_equal(pd_rdma_connect(r, 4, "10.0.0.1", T_PORT, &rem), 0);
	while (stats(r).connects < 1 && pd_now_ns() < end)
		(void)poll(NULL, 0, 1);
	for (uint32_t i = 0; i < 4; i++)
		x[i] = fx_xfer(i, i, 64);
	assert_int_equal(pd_rdma_post(r, 4, x, 4), 4);
	expect_peer_failed(r, 4, -EACCES);
	assert_int_equal(T.failed, 4);
	assert_true(landed(0, 0, 0)); /* nothing written */
}

static void test_post_error(void **state)
{
	struct pd_rdma_xfer x[6];
	struct pd_rdma_opts o;
	struct pd_rdma *r;

	fx_opts(&o);
	o.qps = 1;
	r = fx_up(state, &o);
	FK_SET(hold, 1);
	FK_SET(fail_post_err, -ENOMEM);
	FK_SET(fail_post_at, 2); /* WRs 0 and 1 taken, the rest refused */
	for (uint32_t i = 0; i < 6; i++)
		x[i] = fx_xfer(i, i, 32);
	assert_int_equal(pd_rdma_post(r, T_PEER, x, 6), 6); /* accepted: they complete */
	expect_peer_failed(r, 6, -ENOMEM);
	assert_int_equal(T.failed, 6);
	assert_int_equal(stats(r).post_errors, 1);
}

static struct pd_rdma_peer *peer_of(struct pd_rdma *r, uint32_t id)
{
	return pd_rdma_peer_find(r, id, NULL);
}

/* A peer's QP / CQ / cm id, read under r->lock (the data thread sets them). */
static struct ibv_qp *qp_of(struct pd_rdma *r, uint32_t qp)
{
	struct ibv_qp *q;

	pd_rdma_lock(&r->lock);
	q = peer_of(r, T_PEER)->qp[qp].qp;
	pd_rdma_unlock(&r->lock);
	return q;
}

static struct ibv_cq *cq_of(struct pd_rdma *r)
{
	struct ibv_cq *c;

	pd_rdma_lock(&r->lock);
	c = peer_of(r, T_PEER)->cq;
	pd_rdma_unlock(&r->lock);
	return c;
}

static struct rdma_cm_id *id_of(struct pd_rdma *r, uint32_t qp)
{
	struct rdma_cm_id *id;

	pd_rdma_lock(&r->lock);
	id = peer_of(r, T_PEER)->qp[qp].id;
	pd_rdma_unlock(&r->lock);
	return id;
}

static void test_async_qp_error(void **state)
{
	struct pd_rdma_opts o;
	struct pd_rdma *r;

	fx_opts(&o);
	r = fx_up(state, &o);
	fk_inject_async(IBV_EVENT_QP_FATAL, qp_of(r, 1), NULL);
	expect_peer_failed(r, 0, -EIO);
	assert_int_equal(stats(r).async_events, 1);
}

static void test_async_cq_error(void **state)
{
	struct pd_rdma_opts o;
	struct pd_rdma *r;

	fx_opts(&o);
	r = fx_up(state, &o);
	fk_inject_async(IBV_EVENT_CQ_ERR, NULL, cq_of(r));
	expect_peer_failed(r, 0, -EIO);
}

/* A completion for a WR that is not in flight: never guessed at, the peer
 * fails with -EPROTO. */
static void test_unknown_wr_id(void **state)
{
	struct pd_rdma_opts o;
	struct pd_rdma *r;

	fx_opts(&o);
	r = fx_up(state, &o);
	fk_inject_wc(qp_of(r, 0), pd_rdma_wr_id(0, 12345));
	expect_peer_failed(r, 0, -EPROTO);
}

static void test_wc_errno(void **state)
{
	(void)state;
	assert_int_equal(pd_rdma_wc_errno(IBV_WC_SUCCESS), 0);
	assert_int_equal(pd_rdma_wc_errno(IBV_WC_REM_ACCESS_ERR), -EACCES);
	assert_int_equal(pd_rdma_wc_errno(IBV_WC_RETRY_EXC_ERR), -ETIMEDOUT);
	assert_int_equal(pd_rdma_wc_errno(IBV_WC_RNR_RETRY_EXC_ERR), -ETIMEDOUT);
	assert_int_equal(pd_rdma_wc_errno(IBV_WC_WR_FLUSH_ERR), -ECONNABORTED);
	assert_int_equal(pd_rdma_wc_errno(IBV_WC_LOC_LEN_ERR), -EMSGSIZE);
	assert_int_equal(pd_rdma_wc_errno(IBV_WC_LOC_PROT_ERR), -EFAULT);
	assert_int_equal(pd_rdma_wc_errno(IBV_WC_REM_INV_REQ_ERR), -EREMOTEIO);
	assert_int_equal(pd_rdma_wc_errno(IBV_WC_FATAL_ERR), -EIO);
	assert_int_equal(pd_rdma_wr_id(3, 77) >> PD_RDMA_WRID_SEQ_BITS, 3);
	assert_int_equal(pd_rdma_wr_id(3, 77) & PD_RDMA_WRID_SEQ_MASK, 77);
}

/* rdma_get_cm_event fails once with an event pending: the thread backs
 * off instead of spinning, and the event is still handled. */
static void test_cm_channel_error(void **state)
{
	struct pd_rdma_opts o;
	struct pd_rdma *r;

	FK_SET(cm_get_err, -EIO);
	fx_opts(&o);
	r = fx_up(state, &o); /* connects despite the failed read */
	assert_int_equal(FKV(cm_get_err), 0);
	assert_int_equal(stats(r).connects, 1);
}

/* The peer disconnects while writes wait for room: they all complete
 * with -ECONNRESET, then one PEER completion. */
static void test_peer_disconnects(void **state)
{
	struct pd_rdma_xfer x[30];
	struct pd_rdma_opts o;
	struct pd_rdma *r;

	fx_opts(&o);
	r = fx_up(state, &o);
	FK_SET(hold, 1);
	for (uint32_t i = 0; i < 30; i++)
		x[i] = fx_xfer(i, i % T_SLOTS, 64);
	assert_int_equal(pd_rdma_post(r, T_PEER, x, 30), 30);
	fk_inject_cm(id_of(r, 0), RDMA_CM_EVENT_DISCONNECTED);
	expect_peer_failed(r, 30, -ECONNRESET);
	assert_int_equal(T.failed, 30);
}

/* Connects that never come up; writes posted before are failed too. */
static void connect_fails(void **state, int *knob, int val, int want)
{
	struct pd_rdma_remote rem;
	struct pd_rdma_xfer x = fx_xfer(1, 0, 8);
	struct pd_rdma_opts o;
	struct pd_rdma *r;
	int rc;

	memset(&T, 0, sizeof(T));
	fx_opts(&o);
	o.connect_timeout_ms = 200;
	r = fx_create(&o);
	*state = r;
	rem = fx_remote(r);
	fk_lock();
	*knob = val;
	fk_unlock();
	assert_int_equal(pd_rdma_connect(r, T_PEER, "10.0.0.1", T_PORT, &rem), 0);
	/* waits for the QPs; unless the data thread failed the peer first */
	rc = pd_rdma_post(r, T_PEER, &x, 1);
	assert_true(rc == 1 || rc == -ENOTCONN);
	expect_peer_failed(r, rc == 1 ? 1 : 0, want);
	if (rc == 1)
		assert_int_equal(T.status[1], want);
	assert_int_equal(pd_rdma_disconnect(r, T_PEER), 0);
	assert_int_equal(stats(r).connects, 0);
	pd_rdma_destroy(r);
	*state = NULL;
	fk_lock();
	*knob = 0;
	fk_unlock();
	assert_true(fk_all_freed());
}

static void test_connect_failures(void **state)
{
	connect_fails(state, &fk.reject_status, -EACCES, -EACCES);    /* refused token */
	connect_fails(state, &fk.reject_status, 5, -ECONNREFUSED);    /* not an errno */
	connect_fails(state, &fk.reject_raw, 1, -ECONNREFUSED);       /* nobody listening */
	connect_fails(state, &fk.addr_error, 1, -ENETUNREACH);        /* the event's status */
	connect_fails(state, &fk.route_dev1, 1, -EXDEV);              /* another device */
	connect_fails(state, &fk.no_establish, 1, -ETIMEDOUT);        /* silence */
}

/* What the connect request carries (the receiver's accept_peer reads it). */
static void test_connect_private_data(void **state)
{
	static const uint8_t want[PD_RDMA_CM_REQ_LEN] = {
		0x50, 0x44, 0x4b, 0x52, 0x01, 0x00, 0x01, 0x00, /* "PDKR", v1, qp 1 */
		0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* 2 QPs, reserved */
		0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, /* token */
	};
	uint8_t got[PD_RDMA_CM_REQ_LEN];
	struct pd_rdma_opts o;

	fx_opts(&o);
	(void)fx_up(state, &o);
	assert_int_equal(FKV(connects), 2);
	assert_int_equal(FKV(last_req_len), PD_RDMA_CM_REQ_LEN);
	/* the QPs connect in either order: compare all but the QP index */
	fk_lock();
	memcpy(got, fk.last_req, sizeof(got));
	fk_unlock();
	assert_memory_equal(got, want, 6);
	assert_memory_equal(got + 8, want + 8, sizeof(want) - 8);
	assert_int_equal(FKV(ack_timeout), 14);
}

/* ---- receiving side --------------------------------------------------------------------------- */

static int accept_cb(void *ctx, uint64_t token, uint32_t *peer)
{
	(void)ctx;
	if (token == 666)
		return -EACCES;
	if (token == 777)
		return 12345; /* not an errno: refused as -EACCES */
	*peer = (uint32_t)token;
	return 0;
}

static void req(uint8_t b[PD_RDMA_CM_REQ_LEN], uint64_t token)
{
	memset(b, 0, PD_RDMA_CM_REQ_LEN);
	b[0] = 0x50, b[1] = 0x44, b[2] = 0x4b, b[3] = 0x52, b[4] = 1;
	for (int i = 0; i < 8; i++)
		b[16 + i] = (uint8_t)(token >> (8 * i));
}

static void wait_count(const uint64_t *v, uint64_t want)
{
	uint64_t end = pd_deadline_ms(T_WAIT), got = 0;

	while (pd_now_ns() < end) {
		fk_lock();
		got = *v;
		fk_unlock();
		if (got >= want)
			break;
		(void)poll(NULL, 0, 1);
	}
	assert_int_equal(got, want);
}

static void test_passive(void **state)
{
	static const struct pd_rdma_ops ops = { .accept_peer = accept_cb };
	uint8_t b[PD_RDMA_CM_REQ_LEN];
	struct pd_rdma_opts o;
	struct rdma_cm_id *id;
	struct pd_rdma *r;
	uint64_t end;

	fx_opts(&o);
	o.ops = &ops;
	o.max_conns = 2;
	r = fx_create(&o);
	*state = r;
	assert_int_equal(pd_rdma_listen(r, "10.0.0.1", T_PORT), 0);
	assert_int_equal(pd_rdma_port(r), T_PORT);
	req(b, 5);
	id = fk_inject_conn_request(r->listen_id, b, sizeof(b));
	wait_count(&fk.accepts, 1);
	end = pd_deadline_ms(T_WAIT);
	while (stats(r).accepts < 1 && pd_now_ns() < end)
		(void)poll(NULL, 0, 1);
	assert_int_equal(stats(r).accepts, 1);
	assert_int_equal(FKV(live_qp), 1);
	/* refused: bad private data, tokens, too many connections */
	(void)fk_inject_conn_request(r->listen_id, b, 8);
	wait_count(&fk.rejects, 1);
	assert_int_equal(FKV(last_reject), -EPROTO);
	req(b, 666);
	(void)fk_inject_conn_request(r->listen_id, b, sizeof(b));
	wait_count(&fk.rejects, 2);
	assert_int_equal(FKV(last_reject), -EACCES);
	req(b, 777);
	(void)fk_inject_conn_request(r->listen_id, b, sizeof(b));
	wait_count(&fk.rejects, 3);
	assert_int_equal(FKV(last_reject), -EACCES);
	req(b, 6);
	(void)fk_inject_conn_request(r->listen_id, b, sizeof(b));
	wait_count(&fk.accepts, 2);
	(void)fk_inject_conn_request(r->listen_id, b, sizeof(b));
	wait_count(&fk.rejects, 4);
	assert_int_equal(FKV(last_reject), -EBUSY);
	assert_int_equal(stats(r).rejects, 4);
	/* the peer leaves: its QP and id go */
	fk_inject_cm(id, RDMA_CM_EVENT_DISCONNECTED);
	end = pd_deadline_ms(T_WAIT);
	while (stats(r).conns_closed < 1 && pd_now_ns() < end)
		(void)poll(NULL, 0, 1);
	assert_int_equal(stats(r).conns_closed, 1);
	assert_int_equal(FKV(live_qp), 1);
	assert_int_equal(FKV(live_id), 2); /* the listener and the other connection */
	pd_rdma_debug_kill_conns(r);
	assert_int_equal(FKV(live_qp), 0);
}

/* ---- disconnect, destroy -------------------------------------------------------------------------- */

/* Posted writes that finish in time complete normally (drain). */
static void test_disconnect_drains(void **state)
{
	struct pd_rdma_xfer x[20];
	struct pd_rdma_opts o;
	struct pd_rdma *r;

	fx_opts(&o);
	r = fx_up(state, &o);
	for (uint32_t i = 0; i < 20; i++)
		x[i] = fx_xfer(i, i % T_SLOTS, 64);
	assert_int_equal(pd_rdma_post(r, T_PEER, x, 20), 20);
	assert_int_equal(pd_rdma_disconnect(r, T_PEER), 0);
	assert_int_equal(collect(r, 20, 0, 0), 0); /* all there when it returned */
	expect_quiet(r, 50);
	assert_int_equal(T.peers, 0);
	for (uint32_t i = 0; i < 20; i++)
		assert_true(T.status[i] == 0 || T.status[i] == -ECONNABORTED);
	assert_true(T.ok >= 16); /* the 16 posted at once had completed */
	assert_int_equal(FKV(live_qp), 0);
	assert_null(peer_of(r, T_PEER));
}

/* Writes the device never finishes: disconnect gives up after
 * connect_timeout_ms and aborts them; still no PEER completion. */
static void test_disconnect_stuck(void **state)
{
	struct pd_rdma_xfer x[5];
	struct pd_rdma_opts o;
	struct pd_rdma *r;
	uint64_t t0;

	fx_opts(&o);
	o.connect_timeout_ms = 100;
	r = fx_up(state, &o);
	FK_SET(hold, 1);
	for (uint32_t i = 0; i < 5; i++)
		x[i] = fx_xfer(i, i, 64);
	assert_int_equal(pd_rdma_post(r, T_PEER, x, 5), 5);
	t0 = pd_now_ns();
	assert_int_equal(pd_rdma_disconnect(r, T_PEER), 0);
	assert_true(pd_now_ns() - t0 >= 90 * PD_NS_PER_MS);
	assert_true(pd_now_ns() - t0 < 2 * PD_NS_PER_S);
	assert_int_equal(collect(r, 5, 0, 0), 0);
	assert_int_equal(T.failed, 5);
	assert_int_equal(T.status[0], -ECONNABORTED);
	assert_int_equal(T.peers, 0);
	expect_quiet(r, 50);
}

/* destroy with writes in flight, peers connecting and connections
 * accepted: no hang, every verbs object freed (teardown checks). */
static void test_destroy_busy(void **state)
{
	struct pd_rdma_remote rem;
	struct pd_rdma_xfer x[10];
	uint8_t b[PD_RDMA_CM_REQ_LEN];
	struct pd_rdma_opts o;
	struct pd_rdma *r;

	fx_opts(&o);
	o.connect_timeout_ms = 100; /* the drain of the held writes gives up */
	r = fx_up(state, &o);
	rem = fx_remote(r);
	FK_SET(hold, 1);
	FK_SET(no_establish, 1);
	assert_int_equal(pd_rdma_connect(r, 2, "10.0.0.1", T_PORT, &rem), 0);
	for (uint32_t i = 0; i < 10; i++)
		x[i] = fx_xfer(i, i, 64);
	assert_int_equal(pd_rdma_post(r, T_PEER, x, 10), 10);
	assert_int_equal(pd_rdma_post(r, 2, x, 3), 3);
	assert_int_equal(pd_rdma_listen(r, "10.0.0.1", T_PORT), 0);
	req(b, 1);
	(void)fk_inject_conn_request(r->listen_id, b, sizeof(b));
	wait_count(&fk.accepts, 1);
	pd_rdma_stop(r); /* completions stay pollable */
	assert_int_equal(collect(r, 13, 0, 0), 0);
	assert_true(T.peers <= 1); /* peer 2 may have timed out meanwhile */
	assert_int_equal(T.failed, 13);
	/* QPs, CQs and ids are gone; MRs, PD and channels stay until destroy */
	assert_int_equal(FKV(live_qp), 0);
	assert_int_equal(FKV(live_cq), 0);
	assert_int_equal(FKV(live_id), 0);
	assert_int_equal(FKV(live_mr), 2);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
	const struct CMUnitTest tests[] = {
		T(test_create_negative),
		T(test_device_choice),
		T(test_api_negative),
		T(test_translation_bounds),
		T(test_bulk_all_or_nothing),
		T(test_chain_per_qp),
		T(test_signal_every_4th),
		T(test_signal_every_wr),
		T(test_signal_interval_sq_depth),
		T(test_many_two_qps),
		T(test_queue_depth),
		T(test_inline),
		T(test_inline_refused),
		T(test_wc_error),
		T(test_bad_rkey),
		T(test_post_error),
		T(test_async_qp_error),
		T(test_async_cq_error),
		T(test_peer_disconnects),
		T(test_unknown_wr_id),
		T(test_wc_errno),
		T(test_cm_channel_error),
		T(test_connect_failures),
		T(test_connect_private_data),
		T(test_passive),
		T(test_disconnect_drains),
		T(test_disconnect_stuck),
		T(test_destroy_busy),
	};
#undef T

	return cmocka_run_group_tests(tests, NULL, NULL);
}
