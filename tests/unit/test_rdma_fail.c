/* SPDX-License-Identifier: MIT */
/*
 * RDMA transport over the fake verbs (see test_rdma.c): the error paths
 * the real stack cannot produce on demand, and peer failure. A WC error
 * (injected, or the device's own: a bad rkey), a failed post, async QP
 * and CQ errors, a completion for no WR in flight, a failing
 * rdma_get_cm_event, and a peer disconnecting while writes wait for room:
 * every write completes once, then one PEER completion, and every verbs
 * object is freed.
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

/* ---- errors ------------------------------------------------------------------------------------ */

static void test_wc_error(void **state)
{
	struct pd_xfer x[40], y = fx_xfer(99, 0, 8);
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
	struct pd_xfer x[4];
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
	struct pd_xfer x[6];
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

/* A peer's QP / CQ / cm id, read under r->lock (the data thread sets them). */
static struct ibv_qp *qp_of(struct pd_rdma *r, uint32_t qp)
{
	struct ibv_qp *q;

	pd_lock(&r->lock);
	q = peer_of(r, T_PEER)->qp[qp].qp;
	pd_unlock(&r->lock);
	return q;
}

static struct ibv_cq *cq_of(struct pd_rdma *r)
{
	struct ibv_cq *c;

	pd_lock(&r->lock);
	c = peer_of(r, T_PEER)->cq;
	pd_unlock(&r->lock);
	return c;
}

static struct rdma_cm_id *id_of(struct pd_rdma *r, uint32_t qp)
{
	struct rdma_cm_id *id;

	pd_lock(&r->lock);
	id = peer_of(r, T_PEER)->qp[qp].id;
	pd_unlock(&r->lock);
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
	struct pd_xfer x[30];
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

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
	const struct CMUnitTest tests[] = {
		T(test_wc_error),
		T(test_bad_rkey),
		T(test_post_error),
		T(test_async_qp_error),
		T(test_async_cq_error),
		T(test_peer_disconnects),
		T(test_unknown_wr_id),
		T(test_wc_errno),
		T(test_cm_channel_error),
	};
#undef T

	return cmocka_run_group_tests(tests, NULL, NULL);
}
