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

/* pdctl status shows the pools as one, and how many; so do the counters. */
static void pools_shown(const struct pd_test_broker *b)
{
	const char *argv[] = { NULL, "--name", b->name, "--rundir", b->rundir, "--json", "status",
			       NULL };
	struct pd_run_result r;
	char bin[128];
	double v = 0;

	assert_int_equal(pd_run_bin("pdctl", bin, sizeof(bin)), 0);
	argv[0] = bin;
	assert_int_equal(pd_run(argv, 10000, &r), 0);
	assert_int_equal(r.exit_code, 0);
	assert_int_equal(pd_json_get_num(r.out, "pools.send.pools", &v), 0);
	assert_int_equal((int)v, 2);
	assert_int_equal(pd_json_get_num(r.out, "pools.send.slots", &v), 0);
	assert_int_equal((int)v, 8);
	assert_int_equal(pd_json_get_num(r.out, "pools.send.free", &v), 0);
	assert_int_equal((int)v, 8);
	pd_run_free(&r);
	assert_int_equal(it_stat(b, "pool.send.pools"), 2);
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
	assert_int_equal(t->pa->shm.send.base, 0);
	assert_int_equal(t->pa->shm.send.nslots, 4);
	assert_int_equal(b->shm.send.base, 4);
	/* the first sender's pool all taken, as by a worker that never puts */
	assert_int_equal(pd_pool_alloc(&t->pa->shm.send, &who, 4, 0, held), 0);
	assert_int_equal(it_put_from(t, b, "other", 0, 4, 4), 0);
	(void)it_expect_event_from(b, "other", PD_EV_PUT_DONE);
	it_verify(t, "other", 4);
	assert_int_equal(pd_recv_release(t->da, "other"), 0);
	assert_int_equal(pd_pool_free(&t->pa->shm.send, held, 4), 0);
	c = it_attach(&t->p, PD_AGENT_SEND);
	assert_int_equal(c->shm.send.base, 0);
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
	own = &a->shm.send;
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_each_sender_loans_from_its_own_pool),
		cmocka_unit_test(test_a_sender_cannot_write_another_senders_pool),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
