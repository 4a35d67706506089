/* SPDX-License-Identifier: MIT */
/*
 * A worker's stray writes cost that worker, never the node: an attached
 * agent's process writing into what only the broker writes (the segment
 * header, the recv pool, arena and index, the statistics) faults at once
 * (SIGSEGV in that process); the broker stays up, its header unchanged,
 * and the other agents' requests complete, every byte verified.
 *
 * So does a write into what other agents hold in the agents region: their
 * rings and pin journals, and the agent table; and a receiving agent's
 * write into the send pool or arena.
 *
 * And what a worker may write (the send pool it allocates from, its own
 * rings, its own pin journal) is input: a scribbler writing garbage there while pdbench runs
 * on other agents costs pdbench nothing (every request completes and
 * verifies, no slot leaks) and the scribbler its life (fenced when its
 * ring holds garbage).
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pd_agent_int.h"
#include "pd_slots.h"

#include "it_fixture.h"
#include "it_shmmap.h"
#include "pd_shm_layout.h"

struct scribble {
	const struct pd_test_broker *b;
	int region;                  /* PD_REGION_*, or -1: the header */
	int own_pool;                /* scribble_beside: a send pool of its own (--send-pools) */
};

/* The child: attach as a decode agent, then write where it must not. It
 * returns (exit 0) only if the write did not fault. */
static int scribbler(void *arg)
{
	const struct scribble *s = arg;
	struct pd_agent *a = NULL;
	volatile uint8_t *p;
	uint8_t *base;
	struct pd_shm_hdr h;

	if (pd_test_agent_attach(s->b, PD_AGENT_RECV | PD_AGENT_SEND, &a) < 0)
		return 2;
	base = it_mapped_segment(s->b);
	if (!base)
		return 3;
	memcpy(&h, base, sizeof(h));
	if (s->region < 0)
		p = base + offsetof(struct pd_shm_hdr, state);
	else if (h.regions[s->region].len)
		p = base + h.regions[s->region].off;
	else
		return 4;
	(void)signal(SIGSEGV, SIG_DFL); /* not cmocka's: the fault ends this process */
	p[0] = 0xff; /* a bad state, a FREE descriptor, garbage: all one */
	return 0;
}

static void expect_faults(struct it *t, int region)
{
	struct scribble s = { .b = &t->d, .region = region };
	pid_t pid = pd_test_fork(scribbler, &s);

	assert_true(pid > 0);
	assert_int_equal(pd_test_wait(pid, 10000), 128 + SIGSEGV);
}

static void still_moves(struct it *t, const char *req)
{
	assert_int_equal(it_put(t, req, 0, 4, 4), 0);
	it_expect_event(t, req, PD_EV_PUT_DONE);
	it_verify(t, req, 4);
	assert_int_equal(pd_recv_release(t->da, req), 0);
}

static void test_stray_writes_fault_in_the_worker(void **state)
{
	static const int targets[] = { -1, PD_REGION_RECV_POOL, PD_REGION_RECV_ARENA,
				       PD_REGION_RECV_INDEX, PD_REGION_STATS };
	struct it *t = it_start(8, 16);
	uint64_t epoch = it_stat(&t->d, "info.epoch");
	char req[32];

	(void)state;
	for (size_t i = 0; i < PD_ARRAY_SIZE(targets); i++) {
		expect_faults(t, targets[i]);
		(void)snprintf(req, sizeof(req), "after%zu", i);
		still_moves(t, req);
	}
	assert_int_equal(it_stat(&t->d, "info.epoch"), epoch);
	assert_int_equal(it_wait_free(&t->d, 1, 16), 16);
	it_stop(t, 0);
}

/* ---- what other agents hold ------------------------------------------------------ */

enum stray { OTHER_RING, OTHER_JOURNAL, AGENT_TABLE };

struct stray_arg {
	const struct pd_test_broker *b;
	enum stray what;
	uint32_t other;              /* another attached agent's slot (0-based) */
};

/* The child: attach, then write into what another agent or the broker
 * holds. It returns (exit 0) only if the write did not fault. */
static int stray(void *arg)
{
	const struct stray_arg *s = arg;
	struct pd_agent *a = NULL;
	volatile uint8_t *p = NULL;
	struct pd_ring_view sq, cq;

	if (pd_test_agent_attach(s->b, PD_AGENT_RECV | PD_AGENT_SEND, &a) < 0)
		return 2;
	if (s->what == OTHER_RING && pd_layout_rings(&a->shm, s->other, &sq, &cq) == 0)
		p = sq.elems; /* garbage in its entries: that agent fenced */
	else if (s->what == OTHER_JOURNAL)
		p = (volatile uint8_t *)(uintptr_t)pd_layout_pins(&a->shm, s->other);
	else if (s->what == AGENT_TABLE)
		p = (volatile uint8_t *)(uintptr_t)&a->shm.agents->slot[s->other].state;
	if (!p)
		return 3;
	(void)signal(SIGSEGV, SIG_DFL);
	p[0] = 0xff;
	return 0;
}

static void expect_stray_faults(const struct pd_test_broker *b, enum stray what,
				const struct pd_agent *other)
{
	struct stray_arg s = { .b = b, .what = what, .other = other->id - 1 };
	pid_t pid = pd_test_fork(stray, &s);

	assert_true(pid > 0);
	assert_int_equal(pd_test_wait(pid, 10000), 128 + SIGSEGV);
}

/* A worker's stray write into another agent's rings or pin journal, or
 * into the agent table, faults in that worker: of the agents region, its
 * own ring pair and journal are all it may write. */
static void test_stray_writes_into_others_fault(void **state)
{
	struct it *t = it_start(8, 16);

	(void)state;
	expect_stray_faults(&t->p, OTHER_RING, t->pa);
	still_moves(t, "pring");
	expect_stray_faults(&t->p, AGENT_TABLE, t->pa);
	still_moves(t, "table");
	expect_stray_faults(&t->d, OTHER_JOURNAL, t->da);
	still_moves(t, "journal");
	expect_stray_faults(&t->d, OTHER_RING, t->da);
	still_moves(t, "dring");
	assert_int_equal(it_wait_free(&t->p, 0, 8), 8);
	assert_int_equal(it_wait_free(&t->d, 1, 16), 16);
	it_stop(t, 0);
}

/* ---- the send side, to a receiver ------------------------------------------------ */

struct side_arg {
	const struct pd_test_broker *b;
	uint32_t roles;
	int region;                  /* PD_REGION_SEND_POOL or PD_REGION_SEND_ARENA */
};

/* The child: attach with roles, write the region's first byte through the
 * agent's own mapping. It returns (exit 0) only if the write did not fault. */
static int side_writer(void *arg)
{
	const struct side_arg *s = arg;
	struct pd_agent *a = NULL;
	volatile uint8_t *p;
	size_t len = 0;

	if (pd_test_agent_attach(s->b, s->roles, &a) < 0)
		return 2;
	p = pd_segment_region(&a->shm.seg, (uint32_t)s->region, &len);
	if (!p || !len)
		return 3;
	(void)signal(SIGSEGV, SIG_DFL);
	p[0] = 0; /* a free slot's first payload byte, or the pool's mutex word */
	return 0;
}

static int side_write(const struct pd_test_broker *b, uint32_t roles, int region)
{
	struct side_arg s = { .b = b, .roles = roles, .region = region };
	pid_t pid = pd_test_fork(side_writer, &s);

	assert_true(pid > 0);
	return pd_test_wait(pid, 10000);
}

/* A receiving agent of a broker with both pools writes neither the send
 * pool nor the send arena: it allocates nothing, so its stray writes there
 * fault in it, and a sender's staged bytes are safe from it. A sender
 * still writes the arena. */
static void test_receiver_cannot_write_the_send_side(void **state)
{
	static const char *const args[] = { "--send-slots", "8", "--recv-slots", "8",
					    "--slot-size", "64K", NULL };
	struct pd_test_broker b;

	(void)state;
	assert_int_equal(pd_test_broker_start(&b, "itB", args), 0);
	assert_int_equal(side_write(&b, PD_AGENT_RECV, PD_REGION_SEND_POOL), 128 + SIGSEGV);
	assert_int_equal(side_write(&b, PD_AGENT_RECV, PD_REGION_SEND_ARENA), 128 + SIGSEGV);
	assert_int_equal(side_write(&b, PD_AGENT_SEND, PD_REGION_SEND_ARENA), 0);
	assert_int_equal(it_wait_free(&b, 0, 8), 8);
	assert_int_equal(pd_test_broker_stop(&b), 0);
}

/* ---- a scribbler beside pdbench ------------------------------------------------ */

#define SCRIBBLE_ROUNDS 100 /* of 20 ms: 2 s of garbage */

static uint32_t rnd(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return (uint32_t)*x;
}

/* One round of garbage over what an agent may write in the send pool:
 * counts, the free stack, waiter entries, the counters, and descriptors.
 * In a shared pool (all 0) only unused waiter entries and free slots'
 * descriptors: a live entry or an allocated slot's descriptor is another
 * agent's own state, and rewriting it can fail or spoil that agent's
 * request. In a pool of its own (all 1) everything is its own. */
static void scribble_pool(struct pd_pool_shm *s, uint32_t nslots, int all, uint64_t *x)
{
	uint32_t *stack = (uint32_t *)((uint8_t *)s + s->free_off);
	struct pd_slot_desc *d = (struct pd_slot_desc *)((uint8_t *)s + s->desc_off);
	struct pd_pool_waiter *w = &s->waiters[rnd(x) % PD_POOL_MAX_WAITERS];
	struct pd_pool_waiter garbage = { .ticket = 1 + rnd(x) % 4, .pid = 1, .n = rnd(x),
					  .seen_ns = (uint64_t)rnd(x) << 32 };

	s->nfree = rnd(x) % (2 * nslots);
	s->nwaiters = rnd(x) % 8;
	stack[rnd(x) % nslots] = rnd(x) % (nslots + 4);
	if (all || w->ticket == 0) /* a live one is its waiter's (see the top) */
		*w = garbage;
	memset(&s->stats, rnd(x) & 0xff, sizeof(s->stats));
	for (uint32_t i = 0; i < 4; i++) {
		struct pd_slot_desc *e = &d[rnd(x) % nslots];
		uint32_t free_state = PD_SLOT_FREE;

		if (all) { /* any state, any owner, any generation */
			e->owner = rnd(x) % 8;
			e->gen = rnd(x);
			atomic_store(&e->state, rnd(x) % 100);
		} else {
			(void)atomic_compare_exchange_strong(&e->state, &free_state,
							     6 + rnd(x) % 100); /* no state at all */
		}
	}
}

/* The child: attach to the prefill broker, scribble, end with garbage in
 * its own submission ring. It returns only if nobody stopped it. */
static int scribble_beside(void *arg)
{
	const struct scribble *sc = arg;
	struct pd_agent *a = NULL;
	struct pd_sqe bad = { .op = 250 };
	struct pd_pool_shm *pool;
	struct pd_shm_hdr h;
	uint64_t x = 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid();
	uint8_t *base;

	if (pd_test_agent_attach(sc->b, PD_AGENT_SEND, &a) < 0 || !(base = it_mapped_segment(sc->b)))
		return 2;
	memcpy(&h, base, sizeof(h));
	pool = (struct pd_pool_shm *)(base + h.regions[PD_REGION_SEND_POOL].off);
	if (sc->own_pool) { /* its own pool and its arena, all of them */
		if (a->shm.send_parts < 2)
			return 4;
		pool = a->shm.send->shm;
	}
	for (int i = 0; i < SCRIBBLE_ROUNDS; i++) {
		scribble_pool(pool, a->shm.send->nslots, sc->own_pool, &x);
		if (sc->own_pool)
			memset(a->shm.send->arena, (int)(rnd(&x) & 0xff),
			       a->shm.send->nslots * a->shm.send->slot_size);
		if (i == SCRIBBLE_ROUNDS / 2)
			memset(&pool->lock, 0xa5, sizeof(pool->lock));
		(void)usleep(20 * 1000);
	}
	if (pd_ag_submit(a, &bad, 1) < 0)
		return 3;
	(void)sleep(30);
	return 0;
}

/* The child: attach to the decode broker and fill its own pin journal
 * with garbage for 2 s: random words, and hazards of real buckets at low
 * sequence numbers (early incarnations of live entries, which the broker
 * must then keep until they go), then detach. */
static int scribble_journal(void *arg)
{
	const struct scribble *sc = arg;
	struct pd_agent *a = NULL;
	uint64_t x = 0x243f6a8885a308d3ull ^ (uint64_t)getpid();
	_Atomic uint64_t *j;
	uint32_t n, nb;

	if (pd_test_agent_attach(sc->b, PD_AGENT_RECV, &a) < 0 ||
	    !(j = pd_layout_pins(&a->shm, a->id - 1)))
		return 2;
	n = pd_layout_pins_count(&a->shm);
	nb = a->shm.index.mask + 1;
	for (int i = 0; i < SCRIBBLE_ROUNDS; i++) {
		for (int k = 0; k < 16; k++) {
			uint64_t v = rnd(&x) & 1 ? (uint64_t)rnd(&x) << 32 | rnd(&x) :
						   PD_INDEX_HAZARD(rnd(&x) % nb, rnd(&x) % 64);

			atomic_store(&j[rnd(&x) % n], v);
		}
		(void)usleep(20 * 1000);
	}
	pd_agent_detach(a); /* its journal is the broker's to empty */
	return 0;
}

/* pdbench on two agents beside a scribbler: it completes and verifies
 * everything, and the scribbler is fenced. With pools (4: the fixture's
 * agent, the scribbler and pdbench's two each have one of their own) the
 * scribbler writes garbage over every byte of its own pool and arena,
 * live entries and its loans included. */
static void beside_pdbench(const char *pools)
{
	const char *const extra[] = { "--send-pools", pools, NULL };
	struct it *t = it_start_opts(&(struct it_opts){ .send_slots = 64, .recv_slots = 64,
							.p_extra = pools ? extra : NULL });
	struct scribble sc = { .b = &t->p, .own_pool = pools != NULL }, sj = { .b = &t->d };
	struct pd_run_result r = { 0 };
	char bin[128];
	pid_t pid, jpid;

	assert_int_equal(pd_run_bin("pdbench", bin, sizeof(bin)), 0);
	pid = pd_test_fork(scribble_beside, &sc);
	assert_true(pid > 0);
	jpid = pd_test_fork(scribble_journal, &sj);
	assert_true(jpid > 0);
	{
		const char *argv[] = { bin, "--prefill-name", t->p.name, "--decode-name", t->d.name,
				       "--decode-ctrl", t->d.ctrl, "--rundir", t->p.rundir,
				       "--tp", "2", "--requests", "300", "--concurrency", "4",
				       "--chunks", "8", "--batch", "4", "--slot-size", "64K",
				       "--seed", "7", NULL };

		assert_int_equal(pd_run(argv, 120000, &r), 0);
	}
	if (r.exit_code != 0 || !strstr(r.out, "0 lost, 0 corrupted, 0 leaked")) {
		(void)fprintf(stderr, "pdbench stdout:\n%s\nstderr:\n%s\n", r.out, r.err);
		pd_test_broker_dump_log(&t->p);
		(void)fprintf(stderr, "lock_resets %llu, fenced %llu, free %u\n",
			      (unsigned long long)it_stat(&t->p, "pool.send.lock_resets"),
			      (unsigned long long)it_stat(&t->p, "agents.fenced"),
			      it_free_slots(&t->p, 0));
		fail_msg("pdbench exited %d", r.exit_code);
	}
	pd_run_free(&r);
	assert_int_equal(pd_test_wait(jpid, 30000), 0);
	assert_int_equal(pd_test_wait(pid, 30000), 128 + SIGKILL); /* fenced */
	assert_true(it_wait_stat(&t->p, "agents.fenced", 1) >= 1);
	assert_true(it_wait_stat(&t->p, "pool.send.lock_resets", 1) >= 1);
	assert_int_equal(it_wait_free(&t->p, 0, 64), 64);
	assert_int_equal(it_wait_free(&t->d, 1, 64), 64);
	still_moves(t, "after");
	it_stop(t, 0);
}

static void test_scribbler_beside_pdbench(void **state)
{
	(void)state;
	beside_pdbench(NULL);
}

static void test_scribbler_in_its_own_send_pool_beside_pdbench(void **state)
{
	(void)state;
	beside_pdbench("4");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_stray_writes_fault_in_the_worker),
		cmocka_unit_test(test_stray_writes_into_others_fault),
		cmocka_unit_test(test_receiver_cannot_write_the_send_side),
		cmocka_unit_test(test_scribbler_beside_pdbench),
		cmocka_unit_test(test_scribbler_in_its_own_send_pool_beside_pdbench),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
