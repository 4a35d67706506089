/* SPDX-License-Identifier: MIT */
/*
 * Real prefill -> decode transfers between pdbroker processes over the
 * shm transport (--transport shm,tcp on one host): every byte verified at
 * the decode agent, and the statistics prove the bytes went through shm
 * (shm copies, no TCP frame). Then the failures: cancel, a killed prefill
 * agent, the decode broker killed mid-transfer and restarted; and what
 * pdctl peers says: "shm", a "tcp" fallback, a --require shm refusal.
 */
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "it_fixture.h"
#include "pd_json.h"
#include "pd_run.h"
#include "pd_test.h"
#include "pd_wire.h"

#define SHM_TCP "shm,tcp"

/* Broker arguments that outlive the call (a restart reuses them). */
struct bargs {
	char send[16], recv[16];
	const char *v[16];
};

static const char *const *bargs(struct bargs *a, uint32_t send, uint32_t recv,
				const char *transport, const char *require, const char *hb)
{
	const char *v[] = { "--send-slots", a->send, "--recv-slots", a->recv, "--slot-size",
			    "64K", "--heartbeat", hb, "--log-level", "info", "--transport",
			    transport, require ? "--require" : NULL, require, NULL };

	(void)snprintf(a->send, sizeof(a->send), "%u", send);
	(void)snprintf(a->recv, sizeof(a->recv), "%u", recv);
	memcpy(a->v, v, sizeof(v));
	return a->v;
}

static struct bargs dargs_keep; /* the decode broker's, for restarts */

/* D (recv slots, --transport dx) and nprefill P brokers (--transport
 * "shm,tcp", --require preq), one agent each. */
static struct it *start(uint32_t send, uint32_t recv, uint32_t nprefill, const char *dx,
			const char *preq, const char *hb)
{
	struct it *t = calloc(1, sizeof(*t));
	struct bargs pa;

	assert_non_null(t);
	assert_int_equal(pd_test_broker_start(&t->d, "shmD", bargs(&dargs_keep, 0, recv, dx, NULL,
								     hb)),
			 0);
	assert_int_equal(pd_test_broker_start(&t->p, "shmP", bargs(&pa, send, 0, SHM_TCP, preq,
								     hb)),
			 0);
	t->pa = it_attach(&t->p, PD_AGENT_SEND);
	t->da = it_attach(&t->d, PD_AGENT_RECV);
	if (nprefill > 1) {
		assert_int_equal(pd_test_broker_start(&t->p2, "shmP2",
						      bargs(&pa, send, 0, SHM_TCP, preq, hb)),
				 0);
		t->pa2 = it_attach(&t->p2, PD_AGENT_SEND);
	}
	return t;
}

static struct it *start_shm(uint32_t send, uint32_t recv)
{
	return start(send, recv, 1, SHM_TCP, NULL, "200ms");
}

/* A counter from a broker's statistics region (published every tick). */
static uint64_t stat_of(const struct pd_test_broker *b, const char *name)
{
	struct pd_stats *copy = malloc(sizeof(*copy));
	struct pd_segment seg;
	struct pd_shm s;
	uint64_t v = UINT64_MAX;

	assert_non_null(copy);
	assert_int_equal(pd_segment_attach(b->name, PD_SEG_RDONLY, 1000, &seg, NULL, 0), 0);
	assert_int_equal(pd_layout_open(&seg, &s, NULL, 0), 0);
	if (pd_stats_snapshot(s.stats, copy) < 0 || pd_stats_find(copy, name, &v) < 0)
		v = UINT64_MAX;
	pd_layout_close(&s);
	free(copy);
	return v;
}

/* Wait (bounded) until the counter is at least min; its value. */
static uint64_t wait_stat(const struct pd_test_broker *b, const char *name, uint64_t min)
{
	uint64_t deadline = pd_deadline_ms(3000), v;

	while (((v = stat_of(b, name)) < min || v == UINT64_MAX) && pd_now_ns() < deadline)
		(void)nanosleep(&(struct timespec){ 0, 10 * 1000 * 1000 }, NULL);
	return v;
}

/* The bytes went through shm: chunks copied by b, no TCP frame sent. */
static void expect_shm_used(const struct pd_test_broker *b, uint64_t chunks)
{
	assert_true(wait_stat(b, "shm.copies_ok", chunks) >= chunks);
	assert_int_equal(stat_of(b, "tcp.frames_tx"), 0);
}

/* ---- transfers ---------------------------------------------------------------------- */

/* 2P1D over shm: A=10 and B=10 from two prefill brokers, both admitted at
 * once, every byte checked at the decode agent; the decode broker counts
 * the bytes (received through no TCP frame); every slot free at the end. */
static void test_2p1d_over_shm_every_byte(void **state)
{
	struct it *t = start(16, 20, 2, SHM_TCP, NULL, "200ms");
	uint64_t bytes = 0;

	(void)state;
	for (uint32_t i = 0; i < 10; i++)
		bytes += 2 * it_len(i);
	assert_int_equal(it_put_from(t, t->pa, "A", 0, 10, 10), 0);
	assert_int_equal(it_put_from(t, t->pa2, "B", 0, 10, 10), 0);
	(void)it_expect_event_from(t->pa, "A", PD_EV_PUT_DONE);
	(void)it_expect_event_from(t->pa2, "B", PD_EV_PUT_DONE);
	it_verify(t, "A", 10);
	it_verify(t, "B", 10);
	expect_shm_used(&t->p, 10);
	expect_shm_used(&t->p2, 10);
	assert_int_equal(wait_stat(&t->d, "bytes_recv", bytes), bytes);
	assert_int_equal(stat_of(&t->d, "tcp.frames_rx"), 0);
	assert_int_equal(pd_recv_release(t->da, "A"), 0);
	assert_int_equal(pd_recv_release(t->da, "B"), 0);
	assert_int_equal(it_wait_free(&t->d, 1, 20), 20);
	assert_int_equal(it_wait_free(&t->p, 0, 16), 16);
	it_stop(t, 0);
}

/* The seed's scenario over shm: recv pool 10, A and B of 8 chunks in
 * batches of 4, interleaved: B is admitted only once A is released. The
 * bytes of B's batches, held for admission, are counted all the same. */
static void test_seed_scenario_over_shm(void **state)
{
	struct it *t = start_shm(16, 10);
	struct pd_recv_info info;
	uint64_t bytes = 0;

	(void)state;
	for (uint32_t i = 0; i < 8; i++)
		bytes += 2 * it_len(i);
	assert_int_equal(it_put(t, "A", 0, 4, 8), 0);
	assert_int_equal(it_put(t, "B", 0, 4, 8), 0);
	assert_int_equal(it_put(t, "A", 4, 4, 8), 0);
	assert_int_equal(it_put(t, "B", 4, 4, 8), 0);
	it_expect_event(t, "A", PD_EV_PUT_DONE);
	it_verify(t, "A", 8);
	assert_int_equal(pd_recv_wait(t->da, "B", 300, &info), -ETIMEDOUT); /* not admitted */
	assert_int_equal(pd_recv_release(t->da, "A"), 0);
	it_expect_event(t, "B", PD_EV_PUT_DONE);
	it_verify(t, "B", 8);
	assert_int_equal(pd_recv_release(t->da, "B"), 0);
	assert_int_equal(it_wait_free(&t->d, 1, 10), 10);
	expect_shm_used(&t->p, 16);
	assert_int_equal(wait_stat(&t->d, "bytes_recv", bytes), bytes);
	it_stop(t, 0);
}

/* Cancel between batches: PUT_FAILED(-ECANCELED), both sides free all. */
static void test_cancel_between_batches_over_shm(void **state)
{
	struct it *t = start_shm(16, 16);
	struct pd_recv_info info;
	pd_slot_ref r[1];

	(void)state;
	assert_int_equal(it_put(t, "C", 0, 4, 8), 0);
	assert_int_equal(it_wait_free(&t->p, 0, 16), 16); /* first batch copied */
	assert_int_equal(pd_cancel(t->pa, "C"), 0);
	assert_int_equal(it_expect_event_from(t->pa, "C", PD_EV_PUT_FAILED), -ECANCELED);
	assert_int_equal(pd_alloc(t->pa, "C", 1, r, 100), -ECANCELED);
	assert_int_equal(it_wait_free(&t->d, 1, 16), 16);
	assert_int_equal(it_wait_free(&t->p, 0, 16), 16);
	assert_int_equal(pd_recv_wait(t->da, "C", 2000, &info), 0);
	assert_int_equal(info.status, -ECANCELED);
	expect_shm_used(&t->p, 4);
	it_stop(t, 0);
}

static int agent_dies_mid_request(void *arg)
{
	struct it *t = arg;
	struct pd_agent_opts o;
	struct pd_agent *a;
	pd_slot_ref r[3];

	pd_agent_opts_init(&o, sizeof(o));
	o.broker = t->p.name;
	o.rundir = t->p.rundir;
	if (pd_agent_attach(&o, &a) < 0)
		return 1;
	t->pa = a; /* in this process only */
	if (it_put(t, "K", 0, 4, 8) < 0 || pd_alloc(a, "K", 3, r, 1000) < 0)
		return 2;
	(void)raise(SIGKILL); /* holding 3 loans, with a batch queued */
	return 3;
}

/* A prefill agent SIGKILLed with loans and a batch in flight: everything
 * comes back on both sides, and the broker still serves over shm. */
static void test_killed_prefill_agent_over_shm(void **state)
{
	struct it *t = start_shm(16, 16);

	(void)state;
	assert_int_equal(pd_test_wait(pd_test_fork(agent_dies_mid_request, t), 10000),
			 128 + SIGKILL);
	assert_int_equal(it_wait_free(&t->p, 0, 16), 16);
	assert_int_equal(it_wait_free(&t->d, 1, 16), 16);
	assert_int_equal(it_put(t, "L", 0, 2, 2), 0);
	it_expect_event(t, "L", PD_EV_PUT_DONE);
	it_verify(t, "L", 2);
	assert_int_equal(pd_recv_release(t->da, "L"), 0);
	expect_shm_used(&t->p, 2);
	it_stop(t, 0);
}

/* ---- the decode broker dies --------------------------------------------------------- */

/* Puts "<base>.N" (2 chunks) until one is done; its name goes to req. A
 * request made in the instant the sender has not yet noticed a restart
 * may fail (documented); once noticed, requests succeed. */
static int put_until_done(struct it *t, const char *base, char *req, size_t len)
{
	struct timespec nap = { 0, 300 * 1000 * 1000 };
	struct pd_event ev;

	for (int i = 0; i < 10; i++) {
		(void)snprintf(req, len, "%s.%d", base, i);
		if (it_put(t, req, 0, 2, 2) == 0 && pd_next_event(t->pa, &ev, IT_WAIT_MS) == 0 &&
		    ev.type == PD_EV_PUT_DONE)
			return i;
		(void)nanosleep(&nap, NULL);
	}
	return -1;
}

/* The decode broker SIGKILLed while a second batch goes out (3 chunks:
 * the request stays one short, whether or not they land before the kill):
 * the sender does not crash (copies in flight land in the dead broker's
 * orphaned segment), fails the request within the heartbeat timeout and
 * frees its staging; restarted, the decode broker is mapped anew and
 * takes requests over shm. */
static void test_decode_killed_mid_transfer_then_restarted(void **state)
{
	struct it *t = start_shm(16, 64);
	uint64_t t0, connects;
	char req[32];

	(void)state;
	assert_int_equal(it_put(t, "A", 0, 4, 8), 0);
	assert_int_equal(it_wait_free(&t->p, 0, 16), 16); /* first batch copied */
	assert_int_equal(it_put_from(t, t->pa, "A", 4, 3, 8), 0);
	assert_int_equal(kill(t->d.pid, SIGKILL), 0);   /* while that one goes */
	assert_int_equal(pd_test_wait(t->d.pid, 5000), 128 + SIGKILL);
	t0 = pd_now_ns();
	assert_true(it_expect_event_from(t->pa, "A", PD_EV_PUT_FAILED) < 0);
	assert_true(pd_now_ns() - t0 < 3 * PD_NS_PER_S);
	assert_int_equal(it_wait_free(&t->p, 0, 16), 16);
	assert_int_equal(kill(t->p.pid, 0), 0);          /* the sender lives */
	connects = stat_of(&t->p, "shm.connects");
	pd_agent_detach(t->da);
	assert_int_equal(pd_test_broker_restart(&t->d, dargs_keep.v), 0);
	t->da = it_attach(&t->d, PD_AGENT_RECV);
	assert_true(put_until_done(t, "B", req, sizeof(req)) >= 0);
	it_verify(t, req, 2);
	assert_int_equal(pd_recv_release(t->da, req), 0);
	assert_true(wait_stat(&t->p, "shm.connects", connects + 1) > connects); /* the new one */
	assert_int_equal(stat_of(&t->p, "tcp.frames_tx"), 0);
	assert_int_equal(stat_of(&t->d, "tcp.frames_rx"), 0);
	it_stop(t, 0);
}

/* Restarted faster than the silence deadline (3 x 2 s): the sender sees
 * the broker gone from its segment, says Hello again at once, and the
 * first request after the restart succeeds, over shm. */
static void test_decode_restarted_quickly_over_shm(void **state)
{
	struct it *t = start(16, 64, 1, SHM_TCP, NULL, "2s");

	(void)state;
	assert_int_equal(it_put(t, "A", 0, 2, 2), 0);
	assert_int_equal(it_expect_event_from(t->pa, "A", PD_EV_PUT_DONE), 0);
	pd_agent_detach(t->da);
	assert_int_equal(kill(t->d.pid, SIGKILL), 0);
	assert_int_equal(pd_test_wait(t->d.pid, 5000), 128 + SIGKILL);
	(void)nanosleep(&(struct timespec){ 0, 300 * 1000 * 1000 }, NULL); /* a few ticks */
	assert_int_equal(pd_test_broker_restart(&t->d, dargs_keep.v), 0);
	t->da = it_attach(&t->d, PD_AGENT_RECV);
	assert_int_equal(it_put(t, "B", 0, 2, 2), 0);
	assert_int_equal(it_expect_event_from(t->pa, "B", PD_EV_PUT_DONE), 0);
	it_verify(t, "B", 2);
	assert_int_equal(pd_recv_release(t->da, "B"), 0);
	assert_int_equal(wait_stat(&t->p, "shm.connects", 2), 2);
	it_stop(t, 0);
}

/* ---- what pdctl says ----------------------------------------------------------------- */

static void wait_admin(const struct pd_test_broker *b)
{
	uint64_t deadline = pd_deadline_ms(5000);
	char path[200];
	struct stat st;

	(void)snprintf(path, sizeof(path), "%s/%s.admin", b->rundir, b->name);
	while (stat(path, &st) < 0) {
		if (pd_now_ns() >= deadline)
			fail_msg("no admin socket %s", path);
		(void)nanosleep(&(struct timespec){ 0, 2 * 1000 * 1000 }, NULL);
	}
}

/* pdctl --json peers of b: rows[0]'s transport and why. */
static void peer_xport(const struct pd_test_broker *b, char *xport, char *why, size_t len)
{
	char bin[256];
	struct pd_run_result r = { 0 };

	wait_admin(b);
	assert_int_equal(pd_run_bin("pdctl", bin, sizeof(bin)), 0);
	const char *argv[] = { bin, "--name", b->name, "--rundir", b->rundir, "--json", "peers",
			       NULL };
	assert_int_equal(pd_run(argv, 15000, &r), 0);
	if (r.exit_code != 0 || pd_json_count(r.out, "rows") != 1)
		fail_msg("pdctl peers: exit %d\n%s\n%s", r.exit_code, r.out, r.err);
	assert_int_equal(pd_json_get_str(r.out, "rows[0].transport", xport, len), 0);
	assert_int_equal(pd_json_get_str(r.out, "rows[0].why", why, len), 0);
	pd_run_free(&r);
}

static void test_pdctl_peers_shows_shm(void **state)
{
	struct it *t = start_shm(16, 16);
	char x[128], why[128];

	(void)state;
	assert_int_equal(it_put(t, "A", 0, 2, 2), 0);
	it_expect_event(t, "A", PD_EV_PUT_DONE);
	it_verify(t, "A", 2);
	peer_xport(&t->p, x, why, sizeof(x));
	assert_string_equal(x, "shm");
	assert_string_equal(why, "configured (--transport)");
	peer_xport(&t->d, x, why, sizeof(x)); /* the receiver: what the sender chose */
	assert_string_equal(x, "shm");
	it_stop(t, 0);
}

/* The decode broker offers no shm: tcp, and the fallback says why. */
static void test_pdctl_peers_shows_tcp_fallback(void **state)
{
	struct it *t = start(16, 16, 1, "tcp", NULL, "200ms");
	char x[128], why[128];

	(void)state;
	assert_int_equal(it_put(t, "A", 0, 2, 2), 0);
	it_expect_event(t, "A", PD_EV_PUT_DONE);
	it_verify(t, "A", 2);
	peer_xport(&t->p, x, why, sizeof(x));
	assert_string_equal(x, "tcp");
	if (!strstr(why, "fallback") || !strstr(why, "shm: not offered"))
		fail_msg("why: %s", why);
	assert_int_equal(stat_of(&t->p, "shm.copies_ok"), 0);
	assert_true(wait_stat(&t->p, "tcp.frames_tx", 2) >= 2);
	peer_xport(&t->d, x, why, sizeof(x));
	assert_string_equal(x, "tcp");
	it_stop(t, 0);
}

/* --require shm and a peer without it: the broker starts, the request
 * fails at once with -EPROTONOSUPPORT, nothing is left held anywhere. */
static void test_require_shm_refuses_a_peer_without_it(void **state)
{
	struct it *t = start(16, 16, 1, "tcp", "shm", "200ms");
	char x[128], why[128];
	uint64_t t0 = pd_now_ns();

	(void)state;
	assert_int_equal(it_put(t, "A", 0, 4, 4), 0);
	assert_int_equal(it_expect_event_from(t->pa, "A", PD_EV_PUT_FAILED), -EPROTONOSUPPORT);
	assert_int_equal(it_put(t, "B", 0, 4, 4), 0); /* the peer is known: refused at once */
	assert_int_equal(it_expect_event_from(t->pa, "B", PD_EV_PUT_FAILED), -EPROTONOSUPPORT);
	assert_true(pd_now_ns() - t0 < 3 * PD_NS_PER_S);
	/* A's AllocRequest was out before the peer's Hello settled it; B's never left. */
	assert_int_equal(wait_stat(&t->d, "rx.batches", 1), 1);
	(void)nanosleep(&(struct timespec){ 0, 250 * 1000 * 1000 }, NULL);
	assert_int_equal(stat_of(&t->d, "rx.batches"), 1);
	assert_int_equal(it_wait_free(&t->p, 0, 16), 16);
	assert_int_equal(it_wait_free(&t->d, 1, 16), 16);
	peer_xport(&t->p, x, why, sizeof(x));
	assert_string_equal(x, "none");
	if (!strstr(why, "--require") || !strstr(why, "shm: not offered"))
		fail_msg("why: %s", why);
	assert_int_equal(stat_of(&t->p, "tcp.frames_tx"), 0);
	it_stop(t, 0);
}

/* ---- the receiver's side of trust ------------------------------------------------------ */

/* A hand-made sending broker on the control plane (a DEALER): it says
 * Hello with the host id it is given, asks for slots, may write them
 * itself through its own mapping of the decode broker's arena (what the
 * shm transport does), and says PutDone. */
struct fake {
	void *ctx, *s;
	char name[64];
	struct pd_wire_buf wb;
	struct pd_wire_dec dec;
	char buf[1 << 16];
};

static void fake_send(struct fake *f, const struct pd_msg *m)
{
	assert_int_equal(pd_wire_encode(m, &f->wb), 0);
	assert_int_equal(zmq_send(f->s, "", 0, ZMQ_SNDMORE), 0);
	assert_int_equal(zmq_send(f->s, f->wb.data, f->wb.len, 0), (int)f->wb.len);
}

/* The next message of type want (heartbeats skipped). */
static void fake_recv(struct fake *f, uint32_t want, struct pd_msg *m)
{
	for (int i = 0; i < 100; i++) {
		int n;

		if (zmq_recv(f->s, f->buf, sizeof(f->buf), 0) < 0) /* the empty delimiter */
			fail_msg("%s: no answer", pd_wire_type_name(want));
		n = zmq_recv(f->s, f->buf, sizeof(f->buf), 0);
		assert_true(n > 0);
		assert_int_equal(pd_wire_decode(&f->dec, f->buf, (size_t)n, m, NULL, 0), 0);
		if (m->type == want)
			return;
	}
	fail_msg("no %s", pd_wire_type_name(want));
}

static struct pd_bytes cstr(const char *s)
{
	return (struct pd_bytes){ (const uint8_t *)s, (uint32_t)strlen(s) };
}

static void fake_open(struct fake *f, const struct pd_test_broker *d, const char *host_id)
{
	struct pd_msg m = { .type = PD_MSG_HELLO };
	int tmo = 5000, linger = 0;

	(void)snprintf(f->name, sizeof(f->name), "fake-%d-%s", (int)getpid(), host_id);
	f->name[20] = '\0';
	f->ctx = zmq_ctx_new();
	f->s = zmq_socket(f->ctx, ZMQ_DEALER);
	assert_int_equal(zmq_setsockopt(f->s, ZMQ_RCVTIMEO, &tmo, sizeof(tmo)), 0);
	assert_int_equal(zmq_setsockopt(f->s, ZMQ_LINGER, &linger, sizeof(linger)), 0);
	assert_int_equal(zmq_connect(f->s, d->ctrl), 0);
	pd_wire_buf_init(&f->wb);
	pd_wire_dec_init(&f->dec);
	m.u.hello = (struct pd_msg_hello){ .proto = PD_WIRE_PROTO, .name = cstr(f->name),
					   .epoch = 12345, .host_id = cstr(host_id),
					   .slot_size = IT_SLOT, .nxports = 1 };
	m.u.hello.xport[0] = cstr("tcp");
	m.u.hello.addr[0] = cstr("");
	fake_send(f, &m);
	fake_recv(f, PD_MSG_HELLO_ACK, &m);
}

static void fake_close(struct fake *f)
{
	pd_wire_dec_fini(&f->dec);
	pd_wire_buf_fini(&f->wb);
	(void)zmq_close(f->s);
	(void)zmq_ctx_term(f->ctx);
}

/* Request req of 2 chunks: the slots granted go to remote[]. */
static void fake_alloc(struct fake *f, const char *req, int32_t remote[2])
{
	char k0[48], k1[48];
	struct pd_bytes keys[2];
	uint32_t lens[2] = { it_len(0), it_len(1) };
	struct pd_msg m = { .type = PD_MSG_ALLOC_REQ };

	it_key(k0, sizeof(k0), req, 0);
	it_key(k1, sizeof(k1), req, 1);
	keys[0] = cstr(k0);
	keys[1] = cstr(k1);
	m.u.alloc_req = (struct pd_msg_alloc_req){ .seq = 1, .has_seq = 1, .req_id = cstr(req),
						   .nkeys = 2, .keys = keys, .lens = lens,
						   .total_chunks = 2, .world_size = 1,
						   .is_last_batch = 1 };
	fake_send(f, &m);
	fake_recv(f, PD_MSG_ALLOC_RESP, &m);
	assert_int_equal(m.u.alloc_resp.err, 0);
	assert_int_equal(m.u.alloc_resp.n, 2);
	memcpy(remote, m.u.alloc_resp.remote_indexes, 2 * sizeof(int32_t));
}

static void fake_put_done(struct fake *f, const char *req, const int32_t remote[2])
{
	struct pd_msg m = { .type = PD_MSG_PUT_DONE };

	m.u.put_done = (struct pd_msg_put_done){ .seq = 1, .req_id = cstr(req), .n = 2,
						 .indexes = remote };
	fake_send(f, &m);
}

/* Write chunk i of req into slot[i] of d's arena, as the shm transport does. */
static void shm_write(const struct pd_test_broker *d, const char *req, const int32_t slot[2])
{
	struct pd_segment seg;
	uint8_t *arena;
	size_t len;

	assert_int_equal(pd_segment_attach(d->name, 0, 1000, &seg, NULL, 0), 0);
	arena = pd_segment_region(&seg, PD_REGION_RECV_ARENA, &len);
	assert_non_null(arena);
	for (uint32_t i = 0; i < 2; i++)
		for (uint32_t k = 0; k < it_len(i); k++)
			arena[(size_t)slot[i] * IT_SLOT + k] = it_byte(req, i, k);
	pd_segment_destroy(&seg);
}

static void boot_id(char *out, size_t len)
{
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");

	assert_non_null(f);
	assert_non_null(fgets(out, (int)len, f));
	(void)fclose(f);
	out[strcspn(out, "\n")] = '\0';
}

/* A same-host peer's PutDone commits bytes written straight into the
 * arena (counted as received); from a peer on another host, where no byte
 * can have arrived without a TCP write, the same PutDone is refused and
 * the request rolled back. */
static void test_putdone_trusted_only_from_same_host(void **state)
{
	struct it *t = start_shm(8, 16);
	struct fake near = { 0 }, far = { 0 };
	struct pd_recv_info info;
	int32_t slot[2];
	char id[64];

	(void)state;
	boot_id(id, sizeof(id));
	fake_open(&near, &t->d, id);
	fake_alloc(&near, "N", slot);
	shm_write(&t->d, "N", slot);
	fake_put_done(&near, "N", slot);
	it_verify(t, "N", 2);
	assert_int_equal(wait_stat(&t->d, "bytes_recv", it_len(0) + it_len(1)),
			 it_len(0) + it_len(1));
	assert_int_equal(pd_recv_release(t->da, "N"), 0);
	fake_open(&far, &t->d, "another-host");
	fake_alloc(&far, "F", slot);
	fake_put_done(&far, "F", slot);
	assert_int_equal(pd_recv_wait(t->da, "F", IT_WAIT_MS, &info), 0);
	assert_int_equal(info.status, -EPROTO);
	assert_int_equal(it_wait_free(&t->d, 1, 16), 16);
	assert_int_equal(stat_of(&t->d, "bytes_recv"), it_len(0) + it_len(1));
	fake_close(&near);
	fake_close(&far);
	it_stop(t, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_2p1d_over_shm_every_byte),
		cmocka_unit_test(test_seed_scenario_over_shm),
		cmocka_unit_test(test_cancel_between_batches_over_shm),
		cmocka_unit_test(test_killed_prefill_agent_over_shm),
		cmocka_unit_test(test_decode_killed_mid_transfer_then_restarted),
		cmocka_unit_test(test_decode_restarted_quickly_over_shm),
		cmocka_unit_test(test_pdctl_peers_shows_shm),
		cmocka_unit_test(test_pdctl_peers_shows_tcp_fallback),
		cmocka_unit_test(test_require_shm_refuses_a_peer_without_it),
		cmocka_unit_test(test_putdone_trusted_only_from_same_host),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
