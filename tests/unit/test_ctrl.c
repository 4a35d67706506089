/* SPDX-License-Identifier: MIT */
/*
 * Control plane: bad arguments, malformed input from a raw ZeroMQ DEALER
 * (counted by cause, answered with an Error, the next valid message still
 * delivered), then the handshake both ways (one id per remote broker),
 * request/response routing (AllocRequest and Reserve), and messages held
 * until the HelloAck.
 * Liveness, restarts, aliases, ProxyNotif and idle CPU: test_ctrl_live.c.
 */
#include <msgpack.h>

#include "ctrl_fixture.h"

#define WAIT_MS 3000u

/* ---- bad arguments ---------------------------------------------------------- */

static struct pd_ctrl_opts good_opts(struct pd_loop *l)
{
	struct pd_ctrl_opts o = {
		.loop = l, .ops = &fx_ops, .bind = "tcp://127.0.0.1:0", .name = "neg",
		.epoch = 1, .slot_size = 4096, .heartbeat_ns = 50 * PD_NS_PER_MS,
	};
	return o;
}

static void test_create_bad_args(void **state)
{
	static const char long_name[] =
		"0123456789012345678901234567890123456789012345678901234567890123";
	static const struct pd_ctrl_ops no_down = { .on_msg = fx_on_msg, .on_peer_up = fx_on_up };
	struct pd_loop_opts lo = { 0 };
	struct pd_ctrl *c = NULL, *c2 = NULL;
	struct pd_loop *l;
	struct pd_ctrl_opts o;

	(void)state;
	assert_int_equal(pd_loop_create(&lo, &l), 0);
	o = good_opts(l);
	assert_int_equal(pd_ctrl_create(NULL, &c), -EINVAL);
	assert_int_equal(pd_ctrl_create(&o, NULL), -EINVAL);
	o.loop = NULL;
	assert_int_equal(pd_ctrl_create(&o, &c), -EINVAL);
	o = good_opts(l);
	o.ops = &no_down;
	assert_int_equal(pd_ctrl_create(&o, &c), -EINVAL);
	o = good_opts(l);
	o.name = "";
	assert_int_equal(pd_ctrl_create(&o, &c), -EINVAL);
	o.name = long_name;
	assert_int_equal(pd_ctrl_create(&o, &c), -EINVAL);
	o = good_opts(l);
	o.bind = NULL;
	assert_int_equal(pd_ctrl_create(&o, &c), -EINVAL);
	o = good_opts(l);
	o.heartbeat_ns = 0;
	assert_int_equal(pd_ctrl_create(&o, &c), -EINVAL);
	o = good_opts(l);
	o.slot_size = 0;
	assert_int_equal(pd_ctrl_create(&o, &c), -EINVAL);
	o = good_opts(l);
	o.nxports = PD_CTRL_MAX_XPORTS + 1;
	assert_int_equal(pd_ctrl_create(&o, &c), -EINVAL);
	o.nxports = 1;
	o.xport[0] = PD_CTRL_XPORT_CTRL;  /* reserved for the control endpoint */
	assert_int_equal(pd_ctrl_create(&o, &c), -EINVAL);
	o = good_opts(l);
	o.bind = "nonsense://x";
	assert_true(pd_ctrl_create(&o, &c) < 0);
	assert_null(c);
	/* A port in use: the first binds, the second cannot. */
	o = good_opts(l);
	assert_int_equal(pd_ctrl_create(&o, &c), 0);
	o.bind = pd_ctrl_endpoint(c);
	assert_int_equal(pd_ctrl_create(&o, &c2), -EADDRINUSE);
	assert_null(c2);
	pd_ctrl_destroy(c);
	pd_ctrl_destroy(NULL);
	assert_null(pd_ctrl_endpoint(NULL));
	pd_ctrl_tick(NULL, 0);
	pd_loop_destroy(l);
}

struct neg_arg {
	const char *own;
	int rc[16];
};

static int cmd_neg(struct fx_node *n, void *arg)
{
	struct neg_arg *a = arg;
	struct pd_msg m = fx_alloc_req(1, "r");
	struct pd_msg hello = { .type = PD_MSG_HELLO };
	struct pd_msg err = { .type = PD_MSG_ERROR };
	struct pd_msg_proxy px = { .req_id = { (const uint8_t *)"r", 1 } };
	struct pd_ctrl_peer_info info;
	uint32_t id = 0;

	err.u.error.code = -ENOTCONN;
	a->rc[0] = pd_ctrl_peer(n->ctrl, NULL, &id);
	a->rc[1] = pd_ctrl_peer(n->ctrl, "", &id);
	a->rc[2] = pd_ctrl_peer(n->ctrl, a->own, &id);
	a->rc[3] = pd_ctrl_peer(n->ctrl, "nonsense://x", &id);
	a->rc[4] = pd_ctrl_peer(n->ctrl, "tcp://127.0.0.1:1", NULL);
	a->rc[5] = pd_ctrl_send(n->ctrl, 9999, &m);
	a->rc[6] = pd_ctrl_send(n->ctrl, 0, &m);
	a->rc[7] = pd_ctrl_send(NULL, 1, &m);
	a->rc[8] = pd_ctrl_send(n->ctrl, 1, NULL);
	a->rc[9] = pd_ctrl_send(n->ctrl, 1, &hello);
	a->rc[10] = pd_ctrl_send(n->ctrl, 1, &err);
	a->rc[11] = pd_ctrl_proxy_notif(n->ctrl, &px);
	a->rc[12] = pd_ctrl_proxy_notif(n->ctrl, NULL);
	a->rc[13] = pd_ctrl_peer_info(n->ctrl, 9999, &info);
	a->rc[14] = pd_ctrl_peer_info(n->ctrl, 1, NULL);
	pd_ctrl_stats(n->ctrl, NULL);
	return 0;
}

static void test_api_bad_args(void **state)
{
	struct fx_node_cfg cfg = { .name = "a" };
	struct neg_arg a = { 0 };
	struct fx_node *n;
	int rc;

	(void)state;
	n = fx_node_start(&cfg, &rc);
	assert_int_equal(rc, 0);
	a.own = n->endpoint;
	assert_int_equal(fx_call(n, cmd_neg, &a), 0);
	assert_int_equal(a.rc[0], -EINVAL);
	assert_int_equal(a.rc[1], -EINVAL);
	assert_int_equal(a.rc[2], -EINVAL);     /* ourselves */
	assert_true(a.rc[3] < 0);               /* zmq_connect refuses it */
	assert_int_equal(a.rc[4], -EINVAL);
	assert_int_equal(a.rc[5], -ENOENT);     /* unknown peer id */
	assert_int_equal(a.rc[6], -ENOENT);
	assert_int_equal(a.rc[7], -EINVAL);
	assert_int_equal(a.rc[8], -EINVAL);
	assert_int_equal(a.rc[9], -EINVAL);     /* Hello is the ctrl's own */
	assert_int_equal(a.rc[10], -EINVAL);    /* -ENOTCONN Errors too */
	assert_int_equal(a.rc[11], -ENOTCONN);  /* no proxy configured */
	assert_int_equal(a.rc[12], -EINVAL);
	assert_int_equal(a.rc[13], -ENOENT);
	assert_int_equal(a.rc[14], -EINVAL);
	assert_int_equal(fx_stats(n).peers, 0); /* the refused dial left no entry */
	fx_node_stop(n);
}

/* ---- malformed input -------------------------------------------------------- */

static void pack_str(msgpack_packer *pk, const char *s)
{
	size_t n = strlen(s);

	assert_int_equal(msgpack_pack_str(pk, n), 0);
	assert_int_equal(msgpack_pack_str_body(pk, s, n), 0);
}

/* An AllocRequest of nkeys keys; total_chunks a string when bad_type. */
static void pack_alloc(msgpack_sbuffer *sb, uint32_t nkeys, int bad_type)
{
	msgpack_packer pk;

	msgpack_sbuffer_init(sb);
	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	assert_int_equal(msgpack_pack_map(&pk, 5), 0);
	pack_str(&pk, "type");
	pack_str(&pk, "AllocRequest");
	pack_str(&pk, "keys");
	assert_int_equal(msgpack_pack_array(&pk, nkeys), 0);
	for (uint32_t i = 0; i < nkeys; i++)
		pack_str(&pk, "k");
	pack_str(&pk, "req_id");
	pack_str(&pk, "r");
	pack_str(&pk, "is_last_batch");
	assert_int_equal(msgpack_pack_true(&pk), 0);
	pack_str(&pk, "total_chunks");
	if (bad_type)
		pack_str(&pk, "x");
	else
		assert_int_equal(msgpack_pack_uint32(&pk, nkeys), 0);
}

struct mal {
	struct fx_node *b;
	struct fx_raw raw;
	struct pd_wire_dec dec;
	uint32_t peer;      /* the raw DEALER's id at b */
	uint64_t seq;
};

static void raw_hello(struct mal *t)
{
	struct pd_msg m = { .type = PD_MSG_HELLO };
	struct pd_msg_hello *h = &m.u.hello;
	struct pd_msg ack;

	h->proto = PD_WIRE_PROTO;
	h->name = (struct pd_bytes){ (const uint8_t *)"raw", 3 };
	h->host_id = h->name;
	h->epoch = 5;
	h->slot_size = 4096;
	h->nxports = 1;
	h->xport[0] = (struct pd_bytes){ (const uint8_t *)"tcp", 3 };
	fx_raw_send_msg(&t->raw, &m);
	fx_raw_recv(&t->raw, &t->dec, &ack, WAIT_MS);
	assert_int_equal(ack.type, PD_MSG_HELLO_ACK);
	assert_int_equal(ack.u.hello.name.len, 1);
	assert_memory_equal(ack.u.hello.name.p, "b", 1);
	assert_int_equal(fx_wait(t->b, (struct fx_match){ .kind = FX_EV_UP }, 1, WAIT_MS), 1);
	t->peer = fx_nth(t->b, (struct fx_match){ .kind = FX_EV_UP }, 0).peer;
}

/* The Error that answers a bad message, then a valid AllocRequest delivered. */
static void expect_error_then_valid(struct mal *t, int code)
{
	struct fx_match msg = { .kind = FX_EV_MSG, .type = PD_MSG_ALLOC_REQ };
	struct pd_msg reply, req;
	uint32_t before = fx_count(t->b, msg);
	struct fx_ev e;

	fx_raw_recv(&t->raw, &t->dec, &reply, WAIT_MS);
	assert_int_equal(reply.type, PD_MSG_ERROR);
	assert_int_equal(reply.u.error.code, code);
	req = fx_alloc_req(++t->seq, "ok");
	fx_raw_send_msg(&t->raw, &req);
	assert_int_equal(fx_wait(t->b, msg, before + 1, WAIT_MS), before + 1);
	e = fx_nth(t->b, msg, before);
	assert_int_equal(e.peer, t->peer);
	assert_int_equal(e.seq, t->seq);
}

static void bad_frames(struct mal *t)
{
	const void *p[3] = { "junk", "", "x" };
	size_t l[3] = { 4, 0, 1 };
	const void *p3[3] = { "", "a", "b" };
	size_t l3[3] = { 0, 1, 1 };

	fx_raw_frames(&t->raw, 1, p, l);        /* no delimiter */
	expect_error_then_valid(t, -EPROTO);
	fx_raw_frames(&t->raw, 3, p3, l3);      /* one frame too many */
	expect_error_then_valid(t, -EPROTO);
}

static void bad_msgpack(struct mal *t)
{
	static const char garbage[] = "\xc1\xc1 this is not msgpack";
	struct pd_msg m = fx_alloc_req(99, "trunc");
	struct pd_wire_buf b;
	msgpack_sbuffer sb;

	fx_raw_send(&t->raw, garbage, sizeof(garbage) - 1);
	expect_error_then_valid(t, -EPROTO);
	pd_wire_buf_init(&b);
	assert_int_equal(pd_wire_encode(&m, &b), 0);
	fx_raw_send(&t->raw, b.data, b.len - 3);  /* truncated */
	pd_wire_buf_fini(&b);
	expect_error_then_valid(t, -EPROTO);
	pack_alloc(&sb, PD_WIRE_MAX_KEYS + 1, 0);  /* a count beyond the bound */
	fx_raw_send(&t->raw, sb.data, sb.size);
	msgpack_sbuffer_destroy(&sb);
	expect_error_then_valid(t, -EPROTO);
}

static void bad_schema(struct mal *t)
{
	static const char unknown[] = "\x81\xa4type\xa5" "Bogus";
	msgpack_sbuffer sb;

	pack_alloc(&sb, 1, 1);  /* total_chunks is a string */
	fx_raw_send(&t->raw, sb.data, sb.size);
	msgpack_sbuffer_destroy(&sb);
	expect_error_then_valid(t, -EPROTO);
	fx_raw_send(&t->raw, unknown, sizeof(unknown) - 1);
	expect_error_then_valid(t, -EPROTO);
}

static void bad_size(struct mal *t)
{
	size_t len = 5u << 20;
	char *big = calloc(1, len);

	assert_non_null(big);
	fx_raw_send(&t->raw, big, len);
	free(big);
	expect_error_then_valid(t, -EMSGSIZE);
}

/* Valid messages in the wrong place: from a DEALER without a session, and
 * a HelloAck sent to the ROUTER. */
static void bad_place(struct mal *t)
{
	struct pd_msg req = fx_alloc_req(7, "nosession"), reply;
	struct pd_msg ack = { .type = PD_MSG_HELLO_ACK };
	struct fx_raw other;

	fx_raw_open(&other, t->b->endpoint);
	fx_raw_send_msg(&other, &req);
	fx_raw_recv(&other, &t->dec, &reply, WAIT_MS);
	assert_int_equal(reply.type, PD_MSG_ERROR);
	assert_int_equal(reply.u.error.code, -ENOTCONN);
	assert_int_equal(reply.u.error.seq, 7);
	fx_raw_close(&other);
	ack.u.hello = (struct pd_msg_hello){ .proto = 1, .epoch = 5, .slot_size = 1, .nxports = 1 };
	ack.u.hello.name = (struct pd_bytes){ (const uint8_t *)"raw", 3 };
	ack.u.hello.host_id = ack.u.hello.name;
	ack.u.hello.xport[0] = (struct pd_bytes){ (const uint8_t *)"tcp", 3 };
	fx_raw_send_msg(&t->raw, &ack);
	expect_error_then_valid(t, -EPROTO);
}

static void test_malformed(void **state)
{
	struct fx_node_cfg cfg = { .name = "b", .hb_ms = 5000 };  /* the raw peer never beats */
	struct pd_ctrl_stats st;
	struct mal t = { 0 };
	int rc;

	(void)state;
	t.b = fx_node_start(&cfg, &rc);
	assert_int_equal(rc, 0);
	pd_wire_dec_init(&t.dec);
	fx_raw_open(&t.raw, t.b->endpoint);
	raw_hello(&t);
	bad_frames(&t);
	bad_msgpack(&t);
	bad_schema(&t);
	bad_size(&t);
	bad_place(&t);
	st = fx_stats(t.b);
	assert_int_equal(st.bad_frames, 2);
	assert_int_equal(st.bad_msgpack, 3);
	assert_int_equal(st.bad_schema, 2);
	assert_int_equal(st.bad_size, 1);
	assert_int_equal(st.bad_peer, 1);
	assert_int_equal(st.bad_state, 1);
	assert_int_equal(st.errors_sent, 10);
	assert_int_equal(st.rx_msgs, t.seq);
	assert_int_equal(st.peers_live, 1);
	assert_int_equal(fx_count(t.b, (struct fx_match){ .kind = FX_EV_DOWN }), 0);
	fx_raw_close(&t.raw);
	pd_wire_dec_fini(&t.dec);
	fx_node_stop(t.b);
}

/* ---- handshake and routing ---------------------------------------------------- */

static void start_pair(struct fx_node **a, struct fx_node **b, uint32_t hb_ms)
{
	struct fx_node_cfg ca = { .name = "a", .hb_ms = hb_ms };
	struct fx_node_cfg cb = { .name = "b", .hb_ms = hb_ms };
	int rc;

	*a = fx_node_start(&ca, &rc);
	assert_int_equal(rc, 0);
	*b = fx_node_start(&cb, &rc);
	assert_int_equal(rc, 0);
}

static void expect_msg(struct fx_node *n, uint32_t peer, uint32_t type, uint64_t seq)
{
	struct fx_match m = { .kind = FX_EV_MSG, .type = type };
	struct fx_ev e;

	assert_true(fx_wait(n, m, 1, WAIT_MS) >= 1);
	e = fx_nth(n, m, fx_count(n, m) - 1);
	assert_int_equal(e.peer, peer);
	assert_int_equal(e.seq, seq);
}

static void test_handshake_both_ways(void **state)
{
	struct fx_match up = { .kind = FX_EV_UP };
	struct fx_node *a, *b;
	struct pd_msg m;
	uint32_t pa, pb;
	struct fx_info_arg ia = { 0 };

	(void)state;
	start_pair(&a, &b, 50);
	pa = fx_peer(a, b->endpoint);   /* a dials b */
	pb = fx_peer(b, a->endpoint);   /* b dials a, perhaps while a's Hello is on its way */
	assert_int_equal(fx_wait(a, up, 1, WAIT_MS), 1);
	assert_int_equal(fx_wait(b, up, 1, WAIT_MS), 1);
	assert_int_equal(fx_nth(a, up, 0).peer, pa);
	assert_string_equal(fx_nth(a, up, 0).name, "b");
	assert_int_equal(fx_nth(b, up, 0).peer, pb);
	/* Requests each way; each answer goes back the way its request came. */
	m = fx_alloc_req(7, "r-ab");
	assert_int_equal(fx_send(a, pa, &m), 0);
	expect_msg(b, pb, PD_MSG_ALLOC_REQ, 7);
	m = fx_alloc_resp(7);
	assert_int_equal(fx_send(b, pb, &m), 0);
	expect_msg(a, pa, PD_MSG_ALLOC_RESP, 7);
	m = fx_alloc_req(8, "r-ba");
	assert_int_equal(fx_send(b, pb, &m), 0);
	expect_msg(a, pa, PD_MSG_ALLOC_REQ, 8);
	m = fx_alloc_resp(8);
	assert_int_equal(fx_send(a, pa, &m), 0);
	expect_msg(b, pb, PD_MSG_ALLOC_RESP, 8);
	/* Both routes, one id: a broker is one peer. */
	assert_int_equal(fx_peer(a, b->endpoint), pa);
	assert_int_equal(fx_stats(a).peers, 1);
	assert_int_equal(fx_stats(b).peers, 1);
	assert_int_equal(fx_count(a, up), 1);
	assert_int_equal(fx_count(a, (struct fx_match){ .kind = FX_EV_ALIAS }), 0);
	ia.peer = pa;
	assert_int_equal(fx_call(a, fx_cmd_info, &ia), 0);
	assert_int_equal(ia.info.id, pa);
	assert_int_equal(ia.info.state, PD_CTRL_PEER_UP);
	assert_string_equal(ia.name, "b");
	fx_node_stop(a);
	fx_node_stop(b);
}

/* Sent right after the dial, in the same turn: held, then delivered in order. */
struct dial_send_arg {
	const char *ep;
	uint32_t peer;
	int rc[3];
};

static int cmd_dial_send(struct fx_node *n, void *arg)
{
	struct dial_send_arg *a = arg;
	struct pd_msg m;
	int rc = pd_ctrl_peer(n->ctrl, a->ep, &a->peer);

	for (uint32_t i = 0; rc == 0 && i < 3; i++) {
		m = fx_alloc_req(i + 1, "held");
		a->rc[i] = pd_ctrl_send(n->ctrl, a->peer, &m);
	}
	return rc;
}

static void test_held_until_ack(void **state)
{
	struct fx_match req = { .kind = FX_EV_MSG, .type = PD_MSG_ALLOC_REQ };
	struct dial_send_arg d = { 0 };
	struct fx_node *a, *b;
	struct pd_ctrl_stats st;

	(void)state;
	start_pair(&a, &b, 50);
	d.ep = b->endpoint;
	assert_int_equal(fx_call(a, cmd_dial_send, &d), 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(d.rc[i], 0);
	st = fx_stats(a);
	assert_int_equal(st.queued, 3);
	assert_int_equal(fx_wait(b, req, 3, WAIT_MS), 3);
	for (uint32_t i = 0; i < 3; i++) {
		struct fx_ev e = fx_nth(b, req, i);

		assert_int_equal(e.seq, i + 1);
		assert_string_equal(e.name, "held");
	}
	st = fx_stats(a);
	assert_int_equal(st.dropped, 0);
	fx_node_stop(a);
	fx_node_stop(b);
}

/* Nobody answers: the hold queue is bounded (-EAGAIN), and the handshake
 * times out after 3 heartbeats (on_peer_down -ETIMEDOUT, held dropped). */
static void test_held_bounded_and_dropped(void **state)
{
	struct fx_node_cfg cfg = { .name = "a", .hb_ms = 50, .queue_max = 2 };
	struct fx_match down = { .kind = FX_EV_DOWN, .err = -ETIMEDOUT };
	struct dial_send_arg d = { .ep = "tcp://127.0.0.1:1" };  /* no listener */
	struct pd_ctrl_stats st;
	struct fx_node *a;
	struct pd_msg m = fx_alloc_req(9, "x");
	uint64_t t0;
	int rc;

	(void)state;
	a = fx_node_start(&cfg, &rc);
	assert_int_equal(rc, 0);
	t0 = pd_now_ns();
	assert_int_equal(fx_call(a, cmd_dial_send, &d), 0);
	assert_int_equal(d.rc[0], 0);
	assert_int_equal(d.rc[1], 0);
	assert_int_equal(d.rc[2], -EAGAIN);
	assert_int_equal(fx_wait(a, down, 1, WAIT_MS), 1);
	assert_true(fx_nth(a, down, 0).t_ns - t0 >= 140 * PD_NS_PER_MS);
	assert_int_equal(fx_nth(a, down, 0).peer, d.peer);
	st = fx_stats(a);
	assert_int_equal(st.queued, 2);
	assert_int_equal(st.dropped, 2);
	assert_int_equal(st.tx_again, 1);
	assert_int_equal(fx_send(a, d.peer, &m), -ENOTCONN);
	assert_int_equal(fx_count(a, (struct fx_match){ .kind = FX_EV_UP }), 0);
	fx_node_stop(a);
}

/* ---- Reserve ------------------------------------------------------------------- */

static struct pd_msg reserve_msg(uint64_t seq, const char *req_id)
{
	struct pd_msg m = { .type = PD_MSG_RESERVE };

	m.u.reserve = (struct pd_msg_reserve){
		.seq = seq, .req_id = { (const uint8_t *)req_id, (uint32_t)strlen(req_id) },
		.total_chunks = 4, .world_size = 2, .rank = 1,
	};
	return m;
}

/* The answer to a Reserve: an AllocResponse of its seq with no indexes. */
static struct pd_msg reserve_answer(uint64_t seq)
{
	struct pd_msg m = { .type = PD_MSG_ALLOC_RESP };

	m.u.alloc_resp = (struct pd_msg_alloc_resp){ .seq = seq, .has_seq = 1 };
	return m;
}

static int cmd_dial_reserve(struct fx_node *n, void *arg)
{
	struct dial_send_arg *a = arg;
	struct pd_msg m = reserve_msg(31, "held-r");
	int rc = pd_ctrl_peer(n->ctrl, a->ep, &a->peer);

	if (rc == 0)
		a->rc[0] = pd_ctrl_send(n->ctrl, a->peer, &m);
	return rc;
}

/* A Reserve is sent like an AllocRequest (held until the HelloAck, then
 * delivered to on_msg) and its answer goes back to the sender; Reserves
 * each way. */
static void test_reserve_routed_and_answered(void **state)
{
	struct fx_match rsv = { .kind = FX_EV_MSG, .type = PD_MSG_RESERVE };
	struct fx_match up = { .kind = FX_EV_UP };
	struct dial_send_arg d = { 0 };
	struct fx_node *a, *b;
	struct pd_msg m;
	uint32_t pb;

	(void)state;
	start_pair(&a, &b, 50);
	d.ep = b->endpoint;
	assert_int_equal(fx_call(a, cmd_dial_reserve, &d), 0);
	assert_int_equal(d.rc[0], 0);
	assert_int_equal(fx_stats(a).queued, 1);               /* held for the HelloAck */
	assert_int_equal(fx_wait(b, rsv, 1, WAIT_MS), 1);
	assert_int_equal(fx_wait(b, up, 1, WAIT_MS), 1);
	pb = fx_nth(b, up, 0).peer;
	assert_int_equal(fx_nth(b, rsv, 0).peer, pb);
	m = reserve_answer(31);
	assert_int_equal(fx_send(b, pb, &m), 0);
	expect_msg(a, d.peer, PD_MSG_ALLOC_RESP, 31);
	/* b asks a now (b answers through its ROUTER, asks through a DEALER). */
	assert_int_equal(fx_peer(b, a->endpoint), pb);
	m = reserve_msg(32, "r-ba");
	assert_int_equal(fx_send(b, pb, &m), 0);
	assert_int_equal(fx_wait(a, rsv, 1, WAIT_MS), 1);
	assert_int_equal(fx_nth(a, rsv, 0).peer, d.peer);
	m = reserve_answer(32);
	assert_int_equal(fx_send(a, d.peer, &m), 0);
	expect_msg(b, pb, PD_MSG_ALLOC_RESP, 32);
	assert_int_equal(fx_stats(a).dropped, 0);
	assert_int_equal(fx_stats(b).bad_schema, 0);
	fx_node_stop(a);
	fx_node_stop(b);
}

/* From a raw DEALER: a Reserve is delivered and its answer comes back on
 * that DEALER; one breaking rank < world_size is refused (-EPROTO); one
 * without a session gets an Error -ENOTCONN carrying its seq. */
static void test_reserve_from_raw_dealer(void **state)
{
	static const char bad_rank[] =
		"\x86\xa4" "type" "\xa7" "Reserve" "\xa3" "seq" "\x05" "\xa6" "req_id" "\xa2" "r1"
		"\xac" "total_chunks" "\x02" "\xaa" "world_size" "\x01" "\xa4" "rank" "\x01";
	struct fx_node_cfg cfg = { .name = "b", .hb_ms = 5000 };
	struct fx_match rsv = { .kind = FX_EV_MSG, .type = PD_MSG_RESERVE };
	struct pd_msg m, reply;
	struct fx_raw other;
	struct mal t = { 0 };
	int rc;

	(void)state;
	t.b = fx_node_start(&cfg, &rc);
	assert_int_equal(rc, 0);
	pd_wire_dec_init(&t.dec);
	fx_raw_open(&t.raw, t.b->endpoint);
	raw_hello(&t);
	m = reserve_msg(41, "raw-r");
	fx_raw_send_msg(&t.raw, &m);
	assert_int_equal(fx_wait(t.b, rsv, 1, WAIT_MS), 1);
	assert_int_equal(fx_nth(t.b, rsv, 0).peer, t.peer);
	m = reserve_answer(41);
	assert_int_equal(fx_send(t.b, t.peer, &m), 0);
	fx_raw_recv(&t.raw, &t.dec, &reply, WAIT_MS);
	assert_int_equal(reply.type, PD_MSG_ALLOC_RESP);
	assert_int_equal(reply.u.alloc_resp.seq, 41);
	assert_int_equal(reply.u.alloc_resp.n, 0);
	fx_raw_send(&t.raw, bad_rank, sizeof(bad_rank) - 1);
	expect_error_then_valid(&t, -EPROTO);
	assert_int_equal(fx_count(t.b, rsv), 1);
	assert_int_equal(fx_stats(t.b).bad_schema, 1);
	fx_raw_open(&other, t.b->endpoint);
	m = reserve_msg(77, "nosession");
	fx_raw_send_msg(&other, &m);
	fx_raw_recv(&other, &t.dec, &reply, WAIT_MS);
	assert_int_equal(reply.type, PD_MSG_ERROR);
	assert_int_equal(reply.u.error.code, -ENOTCONN);
	assert_int_equal(reply.u.error.seq, 77);
	fx_raw_close(&other);
	assert_int_equal(fx_count(t.b, rsv), 1);
	assert_int_equal(fx_stats(t.b).bad_peer, 1);
	fx_raw_close(&t.raw);
	pd_wire_dec_fini(&t.dec);
	fx_node_stop(t.b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_create_bad_args),
		cmocka_unit_test(test_api_bad_args),
		cmocka_unit_test(test_malformed),
		cmocka_unit_test(test_handshake_both_ways),
		cmocka_unit_test(test_held_until_ack),
		cmocka_unit_test(test_held_bounded_and_dropped),
		cmocka_unit_test(test_reserve_routed_and_answered),
		cmocka_unit_test(test_reserve_from_raw_dealer),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
