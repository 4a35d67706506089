/* SPDX-License-Identifier: MIT */
/*
 * RDMA transport (broker/pd_rdma*.c) with no device: the real module, its
 * real data thread, over the fake verbs of rdma_fake*.h (the shared
 * fixture is rdma_fixture.h). What is checked here: argument and bounds
 * checks, address translation, WR chains (one post per QP per batch),
 * selective signalling (the send queue never overflows, the last WR of a
 * chain is signalled, cookies come back right when only every Nth WR is
 * signalled) and inline data. Error paths and peer failure:
 * test_rdma_fail.c; connect, listen, disconnect and destroy:
 * test_rdma_conn.c. The same paths on real verbs: tests/rdma/.
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
#include "rdma_fake_qp.h"
#include "rdma_fake_cm.h"
#include "rdma_fixture.h"

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
	struct pd_xfer x = fx_xfer(1, 0, 16);
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
	struct pd_xfer x;
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
	struct pd_xfer x[3] = { fx_xfer(1, 0, 8), fx_xfer(2, 1, 8), fx_xfer(3, T_SLOTS, 8) };
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
	struct pd_xfer x[6];
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
	struct pd_xfer x[200];
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
	struct pd_xfer x[256];
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
	struct pd_xfer x[9];
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
	struct pd_xfer x[4] = { fx_xfer(1, 0, 16), fx_xfer(2, 1, 17), fx_xfer(3, 2, 4000),
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
	struct pd_xfer x = fx_xfer(1, 0, 8);
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
	};
#undef T

	return cmocka_run_group_tests(tests, NULL, NULL);
}
