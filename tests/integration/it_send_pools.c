/* SPDX-License-Identifier: MIT */
/*
 * pdbroker --send-pools N: each sender loans from a send pool of its own
 * (send_slots / N slots, its own mutex, free stack, descriptors and arena
 * pages), the one with the fewest senders when it attaches; and maps only
 * that one writable. So one sender holding every slot of its pool stalls
 * nobody else, and its stray write into another sender's pool or staged
 * bytes faults in it (SIGSEGV), as every other write outside what it owns.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "pd_agent_int.h"
#include "pd_slots.h"

#include "it_fixture.h"

static const char *const POOLS2[] = { "--send-pools", "2", NULL };

static struct it *start_pools(void)
{
	return it_start_opts(&(struct it_opts){ .send_slots = 8, .recv_slots = 16,
						.p_extra = POOLS2 });
}

/* The number at path in the JSON of `pdctl --json cmd` on b (exit 0). */
static int pdctl_num(const struct pd_test_broker *b, const char *cmd, const char *path)
{
	const char *argv[] = { NULL, "--name", b->name, "--rundir", b->rundir, "--json", cmd,
			       NULL };
	struct pd_run_result r;
	char bin[128];
	double v = -1;

	assert_int_equal(pd_run_bin("pdctl", bin, sizeof(bin)), 0);
	argv[0] = bin;
	assert_int_equal(pd_run(argv, 10000, &r), 0);
	assert_int_equal(r.exit_code, 0);
	if (pd_json_get_num(r.out, path, &v) != 0)
		fail_msg("no number at %s in: %s", path, r.out);
	pd_run_free(&r);
	return (int)v;
}

/* pdctl status shows the pools as one, and how many; so do the counters. */
static void pools_shown(const struct pd_test_broker *b)
{
	assert_int_equal(pdctl_num(b, "status", "pools.send.pools"), 2);
	assert_int_equal(pdctl_num(b, "status", "pools.send.slots"), 8);
	assert_int_equal(pdctl_num(b, "status", "pools.send.free"), 8);
	assert_int_equal(it_stat(b, "pool.send.pools"), 2);
}

/* pdctl agents: the pool of each of the two senders attached. */
static void senders_shown(const struct pd_test_broker *b)
{
	assert_int_equal(pdctl_num(b, "agents", "rows[0].send_pool"), 0);
	assert_int_equal(pdctl_num(b, "agents", "rows[1].send_pool"), 1);
}

/* Two senders, two pools of 4: one holding all of its own pool does not
 * keep the other from moving a request of 4; a third sender shares the
 * pool of the lowest index among the least shared. */
static void test_each_sender_loans_from_its_own_pool(void **state)
{
	struct it *t = start_pools();
	struct pd_agent *b = it_attach(&t->p, PD_AGENT_SEND), *c;
	struct pd_pool_who who = { .owner = t->pa->id, .pid = getpid(), .tag = 1,
				   .state = PD_SLOT_LOANED };
	pd_slot_ref held[4];

	(void)state;
	assert_int_equal(t->pa->shm.send_parts, 2);
	assert_int_equal(t->pa->shm.send->base, 0);
	assert_int_equal(t->pa->shm.send->nslots, 4);
	assert_int_equal(b->shm.send->base, 4);
	/* the first sender's pool all taken, as by a worker that never puts */
	assert_int_equal(pd_pool_alloc(t->pa->shm.send, &who, 4, 0, held), 0);
	assert_int_equal(it_put_from(t, b, "other", 0, 4, 4), 0);
	(void)it_expect_event_from(b, "other", PD_EV_PUT_DONE);
	it_verify(t, "other", 4);
	assert_int_equal(pd_recv_release(t->da, "other"), 0);
	assert_int_equal(pd_pool_free(t->pa->shm.send, held, 4), 0);
	senders_shown(&t->p);
	c = it_attach(&t->p, PD_AGENT_SEND);
	assert_int_equal(c->shm.send->base, 0);
	pd_agent_detach(c);
	pd_agent_detach(b);
	assert_int_equal(it_wait_free(&t->p, 0, 8), 8);
	it_move(t, "first", 2, 4);
	pools_shown(&t->p);
	it_stop(t, 0);
}

enum target { OWN, OTHER_POOL, OTHER_ARENA };

struct writer {
	const struct pd_test_broker *b;
	enum target what;
};

/* The child: attach as a sender (the second: pool 1), then write into its
 * own pool and arena, or into pool 0's. It returns (exit 0) only if the
 * write did not fault. */
static int writer(void *arg)
{
	const struct writer *w = arg;
	struct pd_agent *a = NULL;
	const struct pd_pool *own, *other;
	volatile uint8_t *p;

	if (pd_test_agent_attach(w->b, PD_AGENT_SEND, &a) < 0)
		return 2;
	own = a->shm.send;
	other = &a->shm.send_part[0];
	if (own->base != 4 || other->base != 0)
		return 3;
	(void)signal(SIGSEGV, SIG_DFL); /* not cmocka's: the fault ends this process */
	if (w->what == OWN) {
		own->desc[0].len = 7; /* a free slot's descriptor */
		own->arena[0] = 0x5a;
		return 0;
	}
	p = w->what == OTHER_POOL ? (volatile uint8_t *)&other->desc[0].len : other->arena;
	p[0] = 0xff;
	return 0;
}

static int write_as_second_sender(struct it *t, enum target what)
{
	struct writer w = { .b = &t->p, .what = what };
	pid_t pid = pd_test_fork(writer, &w);

	assert_true(pid > 0);
	return pd_test_wait(pid, 10000);
}

/* A sender writes its own pool and arena, and faults on another's. */
static void test_a_sender_cannot_write_another_senders_pool(void **state)
{
	struct it *t = start_pools();

	(void)state;
	assert_int_equal(write_as_second_sender(t, OWN), 0);
	assert_int_equal(write_as_second_sender(t, OTHER_POOL), 128 + SIGSEGV);
	assert_int_equal(write_as_second_sender(t, OTHER_ARENA), 128 + SIGSEGV);
	assert_int_equal(it_wait_free(&t->p, 0, 8), 8);
	it_move(t, "after", 2, 4);
	it_stop(t, 0);
}

/* ---- what a sender writes in its own pool ------------------------------------------- */

/* The child: attach as a sender and stay until killed. */
static int idle_sender(void *arg)
{
	struct pd_agent *a = NULL;

	if (pd_test_agent_attach(arg, PD_AGENT_SEND, &a) < 0)
		return 2;
	(void)sleep(20);
	return 0;
}

struct forger {
	const struct pd_test_broker *b;
	pid_t victim;                /* a sender of another pool */
};

/* The child: attach as a sender and, in its own pool, write a loan in the
 * victim's name (its agent id, pid and pid namespace), then leave. */
static int forger(void *arg)
{
	const struct forger *f = arg;
	struct pd_agent *a = NULL;
	struct pd_slot_desc *d;
	uint32_t victim = 0;

	if (pd_test_agent_attach(f->b, PD_AGENT_SEND, &a) < 0)
		return 2;
	for (uint32_t i = 0; i < a->shm.max_agents; i++)
		if (a->shm.agents->slot[i].pid == f->victim)
			victim = i + 1;
	if (!victim || a->shm.agents->slot[victim - 1].send_part == a->shm.agents->slot[a->id - 1].send_part)
		return 3;
	d = &a->shm.send->desc[a->shm.send->nslots - 1]; /* a free slot of its own pool */
	d->gen = 777;
	d->owner = victim;
	d->pid = f->victim;
	d->pidns = pd_self_pidns();
	atomic_store(&d->state, PD_SLOT_LOANED);
	return 0;
}

/* A loan past its lease in pool 0 that names a sender of pool 1 does not
 * get that sender killed: it is nobody's of that pool, so it is freed. */
static void test_a_forged_loan_fences_no_sender_of_another_pool(void **state)
{
	static const char *const extra[] = { "--send-pools", "2", "--loan-timeout", "1s", NULL };
	struct it *t = it_start_opts(&(struct it_opts){ .send_slots = 8, .recv_slots = 16,
							.p_extra = extra });
	struct forger f = { .b = &t->p };
	pid_t v;

	(void)state;
	v = pd_test_fork(idle_sender, &t->p); /* pool 1: the fixture's agent has pool 0 */
	assert_true(v > 0);
	f.victim = v;
	assert_true(it_wait_stat(&t->p, "agents", 2) >= 2);
	assert_int_equal(pd_test_wait(pd_test_fork(forger, &f), 10000), 0);
	/* the lease (1 s) is looked at up to a slow tick (1 s) late */
	for (int i = 0; i < 3 && it_wait_stat(&t->p, "pool.send.loans_orphaned", 1) < 1; i++)
		;
	assert_int_equal(it_stat(&t->p, "pool.send.loans_orphaned"), 1);
	assert_int_equal(it_stat(&t->p, "agents.fenced"), 0);
	(void)kill(v, SIGTERM);
	assert_int_equal(pd_test_wait(v, 10000), 128 + SIGTERM); /* alive until now */
	assert_int_equal(it_wait_free(&t->p, 0, 8), 8);
	it_stop(t, 0);
}

/* The child: attach as a sender and write over its own pool's header. */
static int header_writer(void *arg)
{
	struct pd_agent *a = NULL;
	struct pd_pool_shm *h;

	if (pd_test_agent_attach(arg, PD_AGENT_SEND, &a) < 0)
		return 2;
	h = a->shm.send->shm;
	h->magic = 0;
	h->nslots = 1u << 30;
	h->slot_size = 3;
	h->desc_off = 12345;
	return 0;
}

/* A sender's own pool header written over blinds nobody: agents attach
 * and pdctl reads the segment with the geometry the broker wrote where no
 * agent writes, and the broker writes the header back (for older agents
 * that read it). */
static void test_a_pool_header_written_over_blinds_nobody(void **state)
{
	struct it *t = start_pools();
	struct pd_agent *b;

	(void)state;
	assert_int_equal(pd_test_wait(pd_test_fork(header_writer, &t->p), 10000), 0);
	b = it_attach(&t->p, PD_AGENT_SEND);
	assert_int_equal(b->shm.send_parts, 2);
	pd_agent_detach(b);
	pools_shown(&t->p);
	assert_true(it_wait_stat(&t->p, "pool.send.headers_restored", 1) >= 1);
	it_move(t, "after", 2, 4);
	it_stop(t, 0);
}

/* ---- a pool left while its lock is not to be had -------------------------------------- */

/* The child: attach as a sender (pool 1), leave a loan in its own pool
 * that names the broker (nothing but a resync frees it), and wait to be
 * killed. */
static int leaver(void *arg)
{
	struct pd_agent *a = NULL;
	struct pd_slot_desc *d;

	if (pd_test_agent_attach(arg, PD_AGENT_SEND, &a) < 0)
		return 2;
	d = &a->shm.send->desc[0];
	d->gen = 55;
	d->owner = 0;
	atomic_store(&d->state, PD_SLOT_LOANED);
	(void)sleep(20);
	return 0;
}

/* Its last sender gone while the pool's lock is held elsewhere, a pool is
 * resynced once the lock is free again (the lease look retries it), not
 * left with what the sender wrote there. */
static void test_a_pool_left_under_a_held_lock_is_resynced_later(void **state)
{
	struct it *t = start_pools();
	struct pd_segment seg;
	struct pd_shm shm;
	uint64_t deadline = pd_deadline_ms(5000);
	struct pd_slot_desc *d;
	pid_t pid;

	(void)state;
	assert_int_equal(pd_segment_attach(t->p.name, 0, 1000, &seg, NULL, 0), 0);
	assert_int_equal(pd_layout_open(&seg, &shm, NULL, 0), 0);
	d = &shm.send_part[1].desc[0];
	pid = pd_test_fork(leaver, &t->p);
	assert_true(pid > 0);
	while (d->gen != 55 && pd_now_ns() < deadline)
		(void)nanosleep(&(struct timespec){ 0, 10 * 1000 * 1000 }, NULL);
	assert_int_equal(d->gen, 55);
	assert_true(pd_pool_lock(&shm.send_part[1], PD_POOL_OWNER_NONE, pd_deadline_ms(1000)) >= 0);
	(void)kill(pid, SIGKILL);
	assert_int_equal(pd_test_wait(pid, 10000), 128 + SIGKILL);
	(void)nanosleep(&(struct timespec){ 0, 500 * 1000 * 1000 }, NULL); /* it tried */
	assert_int_equal(atomic_load(&d->state), PD_SLOT_LOANED);
	pd_pool_unlock(&shm.send_part[1]);
	deadline = pd_deadline_ms(3000);
	while (atomic_load(&d->state) != PD_SLOT_FREE && pd_now_ns() < deadline)
		(void)nanosleep(&(struct timespec){ 0, 10 * 1000 * 1000 }, NULL);
	assert_int_equal(atomic_load(&d->state), PD_SLOT_FREE);
	assert_int_equal(it_wait_free(&t->p, 0, 8), 8);
	pd_layout_close(&shm);
	it_move(t, "after", 1, 4);
	it_stop(t, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_each_sender_loans_from_its_own_pool),
		cmocka_unit_test(test_a_sender_cannot_write_another_senders_pool),
		cmocka_unit_test(test_a_forged_loan_fences_no_sender_of_another_pool),
		cmocka_unit_test(test_a_pool_header_written_over_blinds_nobody),
		cmocka_unit_test(test_a_pool_left_under_a_held_lock_is_resynced_later),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
