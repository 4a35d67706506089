/* SPDX-License-Identifier: MIT */
/*
 * Control plane, over time: heartbeats keep a peer up; a stopped peer is
 * declared dead after ~3 heartbeats; a restarted one (new epoch) is down
 * (-ECONNRESET) then up again; an id dialled at an address the broker does
 * not advertise becomes an alias; ProxyNotif reaches a PULL socket in
 * LMCache's shape; an idle control plane sleeps.
 */
#include <sys/resource.h>
#include <time.h>

#include <msgpack.h>

#include "ctrl_fixture.h"

#define WAIT_MS 3000u

static const struct fx_match up_ev = { .kind = FX_EV_UP };
static const struct fx_match down_ev = { .kind = FX_EV_DOWN };

static struct fx_node *start(const char *name, const char *bind, uint64_t epoch, uint32_t hb_ms)
{
	struct fx_node_cfg cfg = { .name = name, .bind = bind, .epoch = epoch, .hb_ms = hb_ms };
	struct fx_node *n;
	int rc;

	n = fx_node_start(&cfg, &rc);
	assert_int_equal(rc, 0);
	return n;
}

/* a dials b; both up. a's id for b. */
static uint32_t connect_pair(struct fx_node *a, struct fx_node *b)
{
	uint32_t pa = fx_peer(a, b->endpoint);

	assert_int_equal(fx_wait(a, up_ev, 1, WAIT_MS), 1);
	assert_int_equal(fx_wait(b, up_ev, 1, WAIT_MS), 1);
	return pa;
}

static void test_heartbeats_keep_alive(void **state)
{
	struct fx_node *a = start("a", NULL, 1, 50), *b = start("b", NULL, 1, 50);
	struct pd_ctrl_stats sa, sb;

	(void)state;
	(void)connect_pair(a, b);
	/* 12 heartbeats: nobody is declared dead (this wait is meant to time out). */
	assert_int_equal(fx_wait(a, down_ev, 1, 600), 0);
	assert_int_equal(fx_count(b, down_ev), 0);
	sa = fx_stats(a);
	sb = fx_stats(b);
	assert_true(sa.heartbeats_rcvd >= 6);
	assert_true(sb.heartbeats_rcvd >= 6);
	assert_true(sa.heartbeats_sent >= 6);
	assert_int_equal(sa.peers_live, 1);
	assert_int_equal(sb.peers_live, 1);
	fx_node_stop(a);
	fx_node_stop(b);
}

static void test_peer_death(void **state)
{
	struct fx_node *a = start("a", NULL, 1, 50), *b = start("b", NULL, 1, 50);
	struct pd_msg m = fx_alloc_req(1, "late");
	uint64_t t0, dt;
	uint32_t pa;
	struct fx_ev e;

	(void)state;
	pa = connect_pair(a, b);
	t0 = pd_now_ns();
	fx_node_stop(b);
	assert_int_equal(fx_wait(a, down_ev, 1, WAIT_MS), 1);
	e = fx_nth(a, down_ev, 0);
	dt = e.t_ns - t0;
	assert_int_equal(e.peer, pa);
	assert_int_equal(e.err, -ETIMEDOUT);
	/* 3 heartbeats of silence after b's last one (<= 1 heartbeat before the stop). */
	assert_true(dt >= 90 * PD_NS_PER_MS);
	assert_true(dt < 1000 * PD_NS_PER_MS);
	assert_int_equal(fx_send(a, pa, &m), -ENOTCONN);
	assert_int_equal(fx_stats(a).peers_live, 0);
	/* Once: no second on_peer_down while it stays dead (a keeps saying Hello). */
	assert_int_equal(fx_wait(a, down_ev, 2, 400), 1);
	fx_node_stop(a);
}

static void test_restart_new_epoch(void **state)
{
	struct fx_node *a = start("a", NULL, 1, 100), *b = start("b", NULL, 7, 100);
	struct fx_match reset = { .kind = FX_EV_DOWN, .err = -ECONNRESET };
	char ep[PD_CTRL_ENDPOINT_MAX];
	struct pd_msg m = fx_alloc_req(5, "after");
	struct fx_ev up2;
	uint32_t pa;

	(void)state;
	pa = connect_pair(a, b);
	snprintf(ep, sizeof(ep), "%s", b->endpoint);
	fx_node_stop(b);
	b = start("b", ep, 8, 100);  /* same endpoint, new epoch */
	assert_int_equal(fx_wait(a, up_ev, 2, WAIT_MS), 2);
	assert_int_equal(fx_count(a, down_ev), 1);
	assert_int_equal(fx_count(a, reset), 1);
	assert_int_equal(fx_nth(a, reset, 0).peer, pa);
	up2 = fx_nth(a, up_ev, 1);
	assert_int_equal(up2.peer, pa);
	assert_int_equal(up2.epoch, 8);
	assert_true(up2.t_ns >= fx_nth(a, reset, 0).t_ns);
	/* The same id reaches the new b. */
	assert_int_equal(fx_send(a, pa, &m), 0);
	assert_int_equal(fx_wait(b, (struct fx_match){ .kind = FX_EV_MSG }, 1, WAIT_MS), 1);
	fx_node_stop(a);
	fx_node_stop(b);
}

/* b, bound to every address, advertises its host name and dials a first;
 * then a dials b at 127.0.0.1 (no name to resolve: no /etc/hosts needed):
 * the HelloAck names a broker a knows, so the new id is an alias. */
static void test_alias(void **state)
{
	struct fx_node *a = start("a", NULL, 1, 50), *b = start("b", "tcp://0.0.0.0:0", 1, 50);
	struct fx_match alias = { .kind = FX_EV_ALIAS };
	struct fx_match req = { .kind = FX_EV_MSG, .type = PD_MSG_ALLOC_REQ };
	char other[PD_CTRL_ENDPOINT_MAX];
	struct pd_msg m = fx_alloc_req(3, "via-alias");
	uint32_t pb, q, p;
	struct fx_ev e;

	(void)state;
	pb = connect_pair(b, a);
	q = fx_nth(a, up_ev, 0).peer;  /* a's id for b, from b's Hello */
	assert_int_equal(strncmp(b->endpoint, "tcp://0.0.0.0:", 14), 0);
	snprintf(other, sizeof(other), "tcp://127.0.0.1:%s", b->endpoint + 14);
	p = fx_peer(a, other);
	assert_int_not_equal(p, q);
	assert_int_equal(fx_wait(a, alias, 1, WAIT_MS), 1);
	e = fx_nth(a, alias, 0);
	assert_int_equal(e.peer, p);
	assert_int_equal(e.aux, q);
	assert_int_equal(fx_count(a, up_ev), 1);
	/* The alias works, and what comes back names the older id. */
	assert_int_equal(fx_send(a, p, &m), 0);
	assert_int_equal(fx_wait(b, req, 1, WAIT_MS), 1);
	assert_int_equal(fx_nth(b, req, 0).peer, pb);
	m = fx_alloc_resp(3);
	assert_int_equal(fx_send(b, pb, &m), 0);
	assert_int_equal(fx_wait(a, (struct fx_match){ .kind = FX_EV_MSG }, 1, WAIT_MS), 1);
	assert_int_equal(fx_nth(a, (struct fx_match){ .kind = FX_EV_MSG }, 0).peer, q);
	assert_int_equal(fx_peer(a, other), q);
	assert_int_equal(fx_stats(a).peers, 1);
	assert_int_equal(fx_stats(a).aliases, 1);
	fx_node_stop(a);
	fx_node_stop(b);
}

/* ---- ProxyNotif ------------------------------------------------------------- */

struct proxy_arg {
	struct pd_msg_proxy px;
};

static int cmd_proxy(struct fx_node *n, void *arg)
{
	return pd_ctrl_proxy_notif(n->ctrl, &((struct proxy_arg *)arg)->px);
}

static void expect_str(const msgpack_object *o, const char *s)
{
	assert_int_equal(o->type, MSGPACK_OBJECT_STR);
	assert_int_equal(o->via.str.size, strlen(s));
	assert_memory_equal(o->via.str.ptr, s, strlen(s));
}

/* One frame; LMCache's proxy reads "type" then "req_id" first. */
static void check_proxy_frame(const char *buf, size_t n, const char *req_id)
{
	msgpack_unpacked u;
	size_t off = 0;
	struct pd_wire_dec d;
	struct pd_msg m;

	msgpack_unpacked_init(&u);
	assert_int_equal(msgpack_unpack_next(&u, buf, n, &off), MSGPACK_UNPACK_SUCCESS);
	assert_int_equal(u.data.type, MSGPACK_OBJECT_MAP);
	assert_true(u.data.via.map.size >= 2);
	expect_str(&u.data.via.map.ptr[0].key, "type");
	expect_str(&u.data.via.map.ptr[0].val, "ProxyNotif");
	expect_str(&u.data.via.map.ptr[1].key, "req_id");
	expect_str(&u.data.via.map.ptr[1].val, req_id);
	msgpack_unpacked_destroy(&u);
	pd_wire_dec_init(&d);
	assert_int_equal(pd_wire_decode(&d, buf, n, &m, NULL, 0), 0);
	assert_int_equal(m.type, PD_MSG_PROXY);
	assert_int_equal(m.u.proxy.req_id.len, strlen(req_id));
	pd_wire_dec_fini(&d);
}

static void test_proxy_notif(void **state)
{
	struct fx_node_cfg cfg = { .name = "a" };
	struct proxy_arg pa = { 0 };
	char ep[256], buf[4096];
	size_t len = sizeof(ep);
	void *zctx = zmq_ctx_new(), *pull;
	zmq_pollitem_t it;
	struct fx_node *a;
	int rc, zero = 0;

	(void)state;
	pull = zmq_socket(zctx, ZMQ_PULL);
	assert_int_equal(zmq_setsockopt(pull, ZMQ_LINGER, &zero, sizeof(zero)), 0);
	assert_int_equal(zmq_bind(pull, "tcp://127.0.0.1:*"), 0);
	assert_int_equal(zmq_getsockopt(pull, ZMQ_LAST_ENDPOINT, ep, &len), 0);
	cfg.proxy = ep;
	a = fx_node_start(&cfg, &rc);
	assert_int_equal(rc, 0);
	pa.px.req_id = (struct pd_bytes){ (const uint8_t *)"req-42", 6 };
	assert_int_equal(fx_call(a, cmd_proxy, &pa), 0);
	pa.px = (struct pd_msg_proxy){ .req_id = { (const uint8_t *)"req-43", 6 }, .has_ext = 1,
				       .status = -ECANCELED, .rank = 1, .world_size = 2 };
	assert_int_equal(fx_call(a, cmd_proxy, &pa), 0);
	for (int i = 0; i < 2; i++) {
		it = (zmq_pollitem_t){ .socket = pull, .events = ZMQ_POLLIN };
		assert_int_equal(zmq_poll(&it, 1, WAIT_MS), 1);
		rc = zmq_recv(pull, buf, sizeof(buf), 0);
		assert_true(rc > 0 && rc < (int)sizeof(buf));
		check_proxy_frame(buf, (size_t)rc, i ? "req-43" : "req-42");
	}
	fx_node_stop(a);
	assert_int_equal(zmq_close(pull), 0);
	assert_int_equal(zmq_ctx_term(zctx), 0);
}

/* ZeroMQ would block (nobody listens; the PUSH pipe holds sndhwm messages):
 * -EAGAIN at once, counted, and the loop goes on. */
struct burst_arg {
	uint32_t ok, again, other;
};

static int cmd_burst(struct fx_node *n, void *arg)
{
	struct burst_arg *a = arg;
	struct pd_msg_proxy px = { .req_id = { (const uint8_t *)"r", 1 } };

	for (int i = 0; i < 64; i++) {
		int rc = pd_ctrl_proxy_notif(n->ctrl, &px);

		a->ok += rc == 0;
		a->again += rc == -EAGAIN;
		a->other += rc != 0 && rc != -EAGAIN;
	}
	return 0;
}

static void test_send_would_block(void **state)
{
	struct fx_node_cfg cfg = { .name = "a", .proxy = "tcp://127.0.0.1:1", .sndhwm = 4 };
	struct burst_arg b = { 0 };
	struct fx_node *a;
	uint64_t t0;
	int rc;

	(void)state;
	a = fx_node_start(&cfg, &rc);
	assert_int_equal(rc, 0);
	t0 = pd_now_ns();
	assert_int_equal(fx_call(a, cmd_burst, &b), 0);
	assert_true(pd_now_ns() - t0 < 1000 * PD_NS_PER_MS);  /* never blocked */
	assert_true(b.ok >= 1 && b.ok <= 16);
	assert_int_equal(b.again, 64 - b.ok);
	assert_int_equal(b.other, 0);
	assert_int_equal(fx_stats(a).tx_again, b.again);
	fx_node_stop(a);
}

/* ---- idle CPU --------------------------------------------------------------- */

static uint64_t cpu_ns(void)
{
	struct rusage ru;

	assert_int_equal(getrusage(RUSAGE_SELF, &ru), 0);
	return ((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) * PD_NS_PER_S +
	       ((uint64_t)ru.ru_utime.tv_usec + (uint64_t)ru.ru_stime.tv_usec) * 1000u;
}

/* Two connected nodes (ZeroMQ I/O threads included) idle for 1 s: the whole
 * process uses < 2 % of a core. Nothing polls; only ticks and heartbeats. */
static void test_idle_cpu(void **state)
{
	struct fx_node *a = start("a", NULL, 1, 100), *b = start("b", NULL, 1, 100);
	struct timespec one_s = { .tv_sec = 1 };
	uint64_t c0, w0, cpu, wall;

	(void)state;
	(void)connect_pair(a, b);
	(void)fx_peer(b, a->endpoint);
	c0 = cpu_ns();
	w0 = pd_now_ns();
	assert_int_equal(nanosleep(&one_s, NULL), 0);
	cpu = cpu_ns() - c0;
	wall = pd_now_ns() - w0;
	print_message("idle: %.2f%% of a core\n", 100.0 * (double)cpu / (double)wall);
	assert_true(cpu * 50 < wall);
	assert_int_equal(fx_count(a, down_ev), 0);
	fx_node_stop(a);
	fx_node_stop(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_heartbeats_keep_alive),
		cmocka_unit_test(test_peer_death),
		cmocka_unit_test(test_restart_new_epoch),
		cmocka_unit_test(test_alias),
		cmocka_unit_test(test_proxy_notif),
		cmocka_unit_test(test_send_would_block),
		cmocka_unit_test(test_idle_cpu),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
