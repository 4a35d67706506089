/* SPDX-License-Identifier: MIT */
/*
 * RDMA transport over the fake verbs (see test_rdma.c): connections.
 * Rejected / unreachable / silent connects, what a connect request
 * carries, the receiving side (listen, accept, refused connect requests,
 * a peer leaving), disconnect and destroy with work in flight, and that
 * every verbs object is freed.
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
#include "rdma_fake_cm.h"
#include "rdma_fixture.h"

/* ---- connecting ------------------------------------------------------------------------------ */

/* Connects that never come up; writes posted before are failed too. */
static void connect_fails(void **state, int *knob, int val, int want)
{
	struct pd_rdma_remote rem;
	struct pd_xfer x = fx_xfer(1, 0, 8);
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

static int stale_5(void *arg, uint32_t peer)
{
	(void)arg;
	return peer == 5;
}

static int stale_6(void *arg, uint32_t peer)
{
	(void)arg;
	return peer == 6;
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
	/* its session ended: fenced, its QP goes at once, its id with its event */
	assert_int_equal(pd_rdma_fence(r, stale_5, NULL), 0);
	assert_int_equal(pd_rdma_fence(r, stale_6, NULL), 1);
	assert_int_equal(FKV(live_qp), 0);
	assert_int_equal(stats(r).conns_fenced, 1);
	assert_int_equal(pd_rdma_fence(r, stale_6, NULL), 0); /* once */
	assert_int_equal(pd_rdma_fence(NULL, stale_6, NULL), -EINVAL);
	pd_rdma_debug_kill_conns(r);
	assert_int_equal(FKV(live_qp), 0);
}

/* ---- disconnect, destroy -------------------------------------------------------------------------- */

/* Posted writes that finish in time complete normally (drain). */
static void test_disconnect_drains(void **state)
{
	struct pd_xfer x[20];
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
	struct pd_xfer x[5];
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
	struct pd_xfer x[10];
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
