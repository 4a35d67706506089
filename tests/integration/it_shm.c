/* SPDX-License-Identifier: MIT */
/*
 * Real prefill -> decode transfers between pdbroker processes over the
 * shm transport (--transport shm,tcp on one host): every byte verified at
 * the decode agent, and the statistics prove the bytes went through shm
 * (shm copies, no TCP frame). Then the failures: cancel, a killed prefill
 * agent, the decode broker killed mid-transfer and restarted; and what
 * pdctl peers says: "shm", a "tcp" fallback, a --require shm refusal.
 */
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "it_scenarios.h"
#include "pd_fake_peer.h"
#include "pd_wire.h"

static const struct it_xport shm = IT_XPORT_SHM;

/* D (recv slots, --transport dx) and a P (--transport "shm,tcp", --require
 * preq), one agent each. */
static struct it *start(uint32_t send, uint32_t recv, const char *dx, const char *preq)
{
	return it_start_opts(&(struct it_opts){ .send_slots = send, .recv_slots = recv,
						.transport = shm.transport, .d_transport = dx,
						.require = preq });
}

/* ---- transfers ---------------------------------------------------------------------- */

/* 2P1D over shm: A=10 and B=10 from two prefill brokers, both admitted at
 * once, every byte checked at the decode agent; the decode broker counts
 * the bytes (received through no TCP frame); every slot free at the end. */
static void test_2p1d_over_shm_every_byte(void **state)
{
	(void)state;
	it_scn_2p1d(&shm);
}

/* The seed's scenario over shm: recv pool 10, A and B of 8 chunks in
 * batches of 4, interleaved: B is admitted only once A is released. The
 * bytes of B's batches, held for admission, are counted all the same. */
static void test_seed_scenario_over_shm(void **state)
{
	(void)state;
	it_scn_seed(&shm);
}

/* Cancel between batches: PUT_FAILED(-ECANCELED), both sides free all. */
static void test_cancel_between_batches_over_shm(void **state)
{
	(void)state;
	it_scn_cancel_between_batches(&shm);
}

/* A prefill agent SIGKILLed with loans and a batch in flight: everything
 * comes back on both sides, and the broker still serves over shm. */
static void test_killed_prefill_agent_over_shm(void **state)
{
	(void)state;
	it_scn_killed_prefill_agent(&shm);
}

/* ---- the decode broker dies --------------------------------------------------------- */

/* The decode broker SIGKILLed while a second batch goes out (3 chunks:
 * the request stays one short, whether or not they land before the kill):
 * the sender does not crash (copies in flight land in the dead broker's
 * orphaned segment), fails the request within the heartbeat timeout and
 * frees its staging; restarted, the decode broker is mapped anew and
 * takes requests over shm. */
static void test_decode_killed_mid_transfer_then_restarted(void **state)
{
	struct it *t = start(16, 64, NULL, NULL);
	uint64_t t0, connects;
	char req[32];

	(void)state;
	assert_int_equal(it_put(t, "A", 0, 4, 8), 0);
	assert_int_equal(it_wait_free(&t->p, 0, 16), 16); /* first batch copied */
	assert_int_equal(it_put_from(t, t->pa, "A", 4, 3, 8), 0);
	it_kill(&t->d); /* while that one goes */
	t0 = pd_now_ns();
	assert_true(it_expect_event_from(t->pa, "A", PD_EV_PUT_FAILED) < 0);
	assert_true(pd_now_ns() - t0 < 3 * PD_NS_PER_S);
	assert_int_equal(it_wait_free(&t->p, 0, 16), 16);
	assert_int_equal(kill(t->p.pid, 0), 0);          /* the sender lives */
	connects = it_stat(&t->p, "shm.connects");
	it_restart_decode(t);
	assert_true(it_put_until_done(t, "B", req, sizeof(req)) >= 0);
	it_verify(t, req, 2);
	assert_int_equal(pd_recv_release(t->da, req), 0);
	assert_true(it_wait_stat(&t->p, "shm.connects", connects + 1) > connects); /* the new one */
	assert_int_equal(it_stat(&t->p, "tcp.frames_tx"), 0);
	assert_int_equal(it_stat(&t->d, "tcp.frames_rx"), 0);
	it_stop(t, 0);
}

/* Restarted faster than the silence deadline (3 x 2 s): the sender sees
 * the broker gone from its segment, says Hello again at once, and the
 * first request after the restart succeeds, over shm. */
static void test_decode_restarted_quickly_over_shm(void **state)
{
	(void)state;
	it_scn_decode_restarted_quickly(&shm);
}

/* ---- what pdctl says ----------------------------------------------------------------- */

/* A P -> D transfer of request A (2 chunks), the decode broker's --transport dx. */
static struct it *start_with_transfer(const char *dx)
{
	struct it *t = start(16, 16, dx, NULL);

	assert_int_equal(it_put(t, "A", 0, 2, 2), 0);
	it_expect_event(t, "A", PD_EV_PUT_DONE);
	it_verify(t, "A", 2);
	return t;
}

static void test_pdctl_peers_shows_shm(void **state)
{
	struct it *t = start_with_transfer(NULL);
	char x[128], why[128];

	(void)state;
	it_peer_xport(&t->p, x, why, sizeof(x));
	assert_string_equal(x, "shm");
	assert_string_equal(why, "configured (--transport)");
	it_peer_xport(&t->d, x, why, sizeof(x)); /* the receiver: what the sender chose */
	assert_string_equal(x, "shm");
	it_stop(t, 0);
}

/* The decode broker offers no shm: tcp, and the fallback says why. */
static void test_pdctl_peers_shows_tcp_fallback(void **state)
{
	struct it *t = start_with_transfer("tcp");
	char x[128], why[128];

	(void)state;
	it_peer_xport(&t->p, x, why, sizeof(x));
	assert_string_equal(x, "tcp");
	if (!strstr(why, "fallback") || !strstr(why, "shm: not offered"))
		fail_msg("why: %s", why);
	assert_int_equal(it_stat(&t->p, "shm.copies_ok"), 0);
	assert_true(it_wait_stat(&t->p, "tcp.frames_tx", 2) >= 2);
	it_peer_xport(&t->d, x, why, sizeof(x));
	assert_string_equal(x, "tcp");
	it_stop(t, 0);
}

/* --require shm and a peer without it: the broker starts, the request
 * fails at once with -EPROTONOSUPPORT, nothing is left held anywhere. */
static void test_require_shm_refuses_a_peer_without_it(void **state)
{
	struct it *t = start(16, 16, "tcp", "shm");
	char x[128], why[128];
	uint64_t t0 = pd_now_ns();

	(void)state;
	/* A's Reserve was out before the peer's Hello settled it (A is
	 * admitted); its batch is refused before it leaves. */
	assert_int_equal(it_put(t, "A", 0, 4, 4), 0);
	assert_int_equal(it_expect_event_from(t->pa, "A", PD_EV_PUT_FAILED), -EPROTONOSUPPORT);
	/* The peer is known: B's Reserve is refused at once, B never admitted. */
	assert_int_equal(it_put(t, "B", 0, 4, 4), -ECANCELED);
	assert_int_equal(it_expect_event_from(t->pa, "B", PD_EV_PUT_FAILED), -EPROTONOSUPPORT);
	assert_true(pd_now_ns() - t0 < 3 * PD_NS_PER_S);
	assert_int_equal(it_wait_stat(&t->d, "rx.reserves", 1), 1);
	(void)nanosleep(&(struct timespec){ 0, 250 * 1000 * 1000 }, NULL);
	assert_int_equal(it_stat(&t->d, "rx.reserves"), 1);
	assert_int_equal(it_stat(&t->d, "rx.batches"), 0);
	assert_int_equal(it_wait_free(&t->p, 0, 16), 16);
	assert_int_equal(it_wait_free(&t->d, 1, 16), 16);
	it_peer_xport(&t->p, x, why, sizeof(x));
	assert_string_equal(x, "none");
	if (!strstr(why, "--require") || !strstr(why, "shm: not offered"))
		fail_msg("why: %s", why);
	assert_int_equal(it_stat(&t->p, "tcp.frames_tx"), 0);
	it_stop(t, 0);
}

/* ---- the receiver's side of trust ------------------------------------------------------ */

/* A hand-made sending broker on the control plane (a DEALER): it says
 * Hello with the host id it is given, asks for slots, may write them
 * itself through its own mapping of the decode broker's arena (what the
 * shm transport does), and says PutDone. */
/* Request req of 2 chunks: the slots granted go to remote[]. */
static void fake_alloc(struct pd_fake_peer *f, const char *req, int32_t remote[2])
{
	char k0[48], k1[48];
	struct pd_bytes keys[2];
	uint32_t lens[2] = { it_len(0), it_len(1) };
	struct pd_msg m = { .type = PD_MSG_ALLOC_REQ };

	it_key(k0, sizeof(k0), req, 0);
	it_key(k1, sizeof(k1), req, 1);
	keys[0] = pd_fake_str(k0);
	keys[1] = pd_fake_str(k1);
	m.u.alloc_req = (struct pd_msg_alloc_req){ .seq = 1, .has_seq = 1,
						   .req_id = pd_fake_str(req),
						   .nkeys = 2, .keys = keys, .lens = lens,
						   .total_chunks = 2, .world_size = 1,
						   .is_last_batch = 1 };
	pd_fake_send(f, &m);
	pd_fake_recv(f, PD_MSG_ALLOC_RESP, &m);
	assert_int_equal(m.u.alloc_resp.err, 0);
	assert_int_equal(m.u.alloc_resp.n, 2);
	memcpy(remote, m.u.alloc_resp.remote_indexes, 2 * sizeof(int32_t));
}

static void fake_put_done(struct pd_fake_peer *f, const char *req, const int32_t remote[2])
{
	struct pd_msg m = { .type = PD_MSG_PUT_DONE };

	m.u.put_done = (struct pd_msg_put_done){ .seq = 1, .req_id = pd_fake_str(req), .n = 2,
						 .indexes = remote };
	pd_fake_send(f, &m);
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
	struct it *t = start(8, 16, NULL, NULL);
	struct pd_fake_peer near = { 0 }, far = { 0 };
	struct pd_recv_info info;
	int32_t slot[2];
	char id[64];

	(void)state;
	boot_id(id, sizeof(id));
	pd_fake_open(&near, t->d.ctrl, NULL, id, IT_SLOT, NULL);
	fake_alloc(&near, "N", slot);
	shm_write(&t->d, "N", slot);
	fake_put_done(&near, "N", slot);
	it_verify(t, "N", 2);
	assert_int_equal(it_wait_stat(&t->d, "bytes_recv", it_len(0) + it_len(1)),
			 it_len(0) + it_len(1));
	assert_int_equal(pd_recv_release(t->da, "N"), 0);
	pd_fake_open(&far, t->d.ctrl, NULL, "another-host", IT_SLOT, NULL);
	fake_alloc(&far, "F", slot);
	fake_put_done(&far, "F", slot);
	assert_int_equal(pd_recv_wait(t->da, "F", IT_WAIT_MS, &info), 0);
	assert_int_equal(info.status, -EPROTO);
	assert_int_equal(it_wait_free(&t->d, 1, 16), 16);
	assert_int_equal(it_stat(&t->d, "bytes_recv"), it_len(0) + it_len(1));
	pd_fake_close(&near);
	pd_fake_close(&far);
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
