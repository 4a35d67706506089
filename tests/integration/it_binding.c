/* SPDX-License-Identifier: MIT */
/*
 * Writes are bound to (peer, session, slot, generation), on real brokers:
 * a peer that holds a real data lane (its HelloAck's secret) writes what it
 * likes, raw, beside a legitimate prefill broker. A frame for another
 * peer's slot, for its own slot at another generation, for a slot it was
 * granted but that was released since, and frames of a session that ended
 * are refused and counted, and land nothing: the arena outside the
 * stranger's own slots is unchanged and the legitimate request is verified
 * byte for byte. A session that ends closes its lanes, and its secret
 * opens none any more.
 */
#include "it_stranger.h"

/* p's request req of one 4 KiB chunk: its slot and generation. */
static void grant(struct it_stranger *p, const char *req, int32_t *slot, uint32_t *gen)
{
	char key[48];
	struct pd_bytes k;
	uint32_t len = 4096;
	struct pd_msg m = { .type = PD_MSG_ALLOC_REQ };

	it_key(key, sizeof(key), req, 0);
	k = pd_fake_str(key);
	m.u.alloc_req = (struct pd_msg_alloc_req){ .seq = 1, .has_seq = 1,
						   .req_id = pd_fake_str(req), .nkeys = 1,
						   .keys = &k, .lens = &len, .total_chunks = 1,
						   .world_size = 1, .is_last_batch = 1 };
	pd_fake_send(&p->f, &m);
	pd_fake_recv(&p->f, PD_MSG_ALLOC_RESP, &m);
	assert_int_equal(m.u.alloc_resp.err, 0);
	assert_int_equal(m.u.alloc_resp.n, 1);
	assert_non_null(m.u.alloc_resp.remote_gens);
	*slot = m.u.alloc_resp.remote_indexes[0];
	*gen = m.u.alloc_resp.remote_gens[0];
}

/* Every slot but the stranger's own is the same in both copies. */
static void arena_same_but(const void *a, const void *b, size_t n, int32_t own)
{
	for (size_t off = 0; off < n; off += IT_SLOT)
		if (off / IT_SLOT != (size_t)own)
			assert_memory_equal((const uint8_t *)a + off, (const uint8_t *)b + off,
					    IT_SLOT);
}

/* Frames for every slot not its own (the legitimate request's among them)
 * and for its own at the wrong generation: refused, counted, nothing
 * lands; its own at the right one lands. */
static void test_other_slots_and_generations_refused(void **state)
{
	struct it *t = it_start(8, 16);
	struct it_stranger p;
	int32_t slot;
	uint32_t gen, refused = 0;
	size_t n1, n2;
	void *before, *after;

	(void)state;
	it_stranger_open(&p, t);
	it_half_put(t, "legit");
	grant(&p, "mine", &slot, &gen);
	before = it_arena_copy(&t->d, &n1);
	for (int32_t s = 0; s < 16; s++) {
		if (s == slot)
			continue;
		assert_int_equal(it_stranger_write(&p, s, gen), -1);
		refused++;
	}
	assert_int_equal(it_stranger_write(&p, slot, gen + 1), -1);   /* a later generation */
	assert_int_equal(it_stranger_write(&p, slot, gen - 1), -1);   /* an earlier one */
	refused += 2;
	assert_int_equal(it_wait_stat(&t->d, "data.refused_writes", refused), refused);
	after = it_arena_copy(&t->d, &n2);
	assert_int_equal(n1, n2);
	assert_memory_equal(before, after, n1);
	assert_int_equal(it_stranger_write(&p, slot, gen), 0);        /* its own: lands */
	free(after);
	after = it_arena_copy(&t->d, &n2);
	arena_same_but(before, after, n1, slot);
	it_half_finish(t, "legit");
	free(before);
	free(after);
	pd_fake_close(&p.f);
	it_stop(t, 0);
}

/* A slot written, committed and released: a late frame for it (same slot,
 * same generation) is refused and lands nothing. */
static void test_late_frame_after_release_refused(void **state)
{
	struct it *t = it_start(8, 16);
	struct it_stranger p;
	struct pd_msg m = { .type = PD_MSG_PUT_DONE };
	struct pd_recv_info info;
	int32_t slot;
	uint32_t gen;
	size_t n1, n2;
	void *before, *after;

	(void)state;
	it_stranger_open(&p, t);
	grant(&p, "once", &slot, &gen);
	assert_int_equal(it_stranger_write(&p, slot, gen), 0);
	m.u.put_done = (struct pd_msg_put_done){ .seq = 1, .req_id = pd_fake_str("once"), .n = 1,
						 .indexes = &slot, .gens = &gen };
	pd_fake_send(&p.f, &m);
	assert_int_equal(pd_recv_wait(t->da, "once", IT_WAIT_MS, &info), 0);
	assert_int_equal(info.status, 0);
	assert_int_equal(pd_recv_release(t->da, "once"), 0);
	assert_int_equal(it_wait_free(&t->d, 1, 16), 16);
	before = it_arena_copy(&t->d, &n1);
	assert_int_equal(it_stranger_write(&p, slot, gen), -1);
	assert_true(it_wait_stat(&t->d, "data.refused_writes", 1) >= 1);
	after = it_arena_copy(&t->d, &n2);
	assert_memory_equal(before, after, n1);
	free(before);
	free(after);
	pd_fake_close(&p.f);
	it_stop(t, 0);
}

/* A peer's session ends (it says goodbye): its open lane is closed at once,
 * and its secret opens no lane any more; legitimate traffic goes on. */
static void test_ended_session_fenced(void **state)
{
	struct it *t = it_start(8, 16);
	struct it_stranger p;
	struct pd_msg bye = { .type = PD_MSG_HEARTBEAT };
	int fd, again;

	(void)state;
	it_stranger_open(&p, t);
	fd = it_stranger_lane(&p);
	bye.u.heartbeat = (struct pd_msg_heartbeat){ .epoch = 12345, .bye = 1, .has_bye = 1 };
	pd_fake_send(&p.f, &bye);
	it_expect_closed(fd);
	assert_true(it_wait_stat(&t->d, "tcp.conns_fenced", 1) >= 1);
	again = it_raw_connect(p.port);
	assert_true(it_raw_hello(again, p.secret) < 0);       /* refused (or closed) */
	(void)close(again);
	it_half_put(t, "legit");
	it_half_finish(t, "legit");
	pd_fake_close(&p.f);
	it_stop(t, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_other_slots_and_generations_refused),
		cmocka_unit_test(test_late_frame_after_release_refused),
		cmocka_unit_test(test_ended_session_fenced),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
