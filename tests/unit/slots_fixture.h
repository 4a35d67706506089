/* SPDX-License-Identifier: MIT */
#ifndef PD_TESTS_UNIT_SLOTS_FIXTURE_H
#define PD_TESTS_UNIT_SLOTS_FIXTURE_H

/*
 * Fixture shared by test_slots.c and test_slots_mp.c: a fresh, opened slot
 * pool in memory that forked children inherit, the children it tracks (a
 * failed assert skips a test's own waits, so teardown kills them), and
 * small helpers. Static inline only: each test binary takes what it uses.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>

#include <cmocka.h>

#include "pd_test.h"
#include "pd_slots.h"
#include "pd_time.h"

#define SLOT_SZ 4096u

/* Shared between the parent and its children. */
struct xshm {
	_Atomic uint32_t ready;
	_Atomic uint32_t seq;      /* completion order source */
	_Atomic uint32_t order[4]; /* completion rank per child (1-based) */
	_Atomic uint64_t wait_ns;
};

struct fx {
	void *mem;
	size_t len;
	void *arena;
	size_t arena_len;
	struct xshm *x;
	uint32_t nslots;
	struct pd_pool p;
	pid_t kids[8]; /* children not yet reaped: killed in teardown */
};

#define STAT(f, name) pd_stat_get(&(f)->p.shm->stats.name)

/* A test on a fresh pool of n slots (n: the prestate of fx_setup). */
#define POOL_TEST(fn, n) \
	cmocka_unit_test_prestate_setup_teardown(fn, fx_setup, fx_teardown, &(uint32_t){ n })

static inline struct pd_pool_who who_of(uint32_t owner, uint64_t tag)
{
	return (struct pd_pool_who){ .owner = owner, .pid = (int32_t)getpid(), .tag = tag,
				     .state = PD_SLOT_LOANED };
}

static inline void fx_destroy(struct fx *f)
{
	if (!f)
		return;
	pd_test_shared_free(f->mem, f->len);
	pd_test_shared_free(f->arena, f->arena_len);
	pd_test_shared_free(f->x, sizeof(*f->x));
	free(f);
}

/* A fresh, opened pool of nslots in memory children inherit. */
static inline struct fx *fx_create(uint32_t nslots)
{
	struct fx *f = calloc(1, sizeof(*f));

	if (!f)
		return NULL;
	f->nslots = nslots;
	f->len = (size_t)pd_pool_memsize(nslots);
	f->arena_len = (size_t)pd_pool_arena_size(nslots, SLOT_SZ);
	f->mem = pd_test_shared_alloc(f->len);
	f->arena = pd_test_shared_alloc(f->arena_len);
	f->x = pd_test_shared_alloc(sizeof(*f->x));
	if (!f->mem || !f->arena || !f->x ||
	    pd_pool_init(f->mem, f->len, nslots, SLOT_SZ) != 0 ||
	    pd_pool_open(&f->p, f->mem, f->len, f->arena, f->arena_len) != 0) {
		fx_destroy(f);
		return NULL;
	}
	return f;
}

/* prestate: a uint32_t slot count. */
static inline int fx_setup(void **state)
{
	struct fx *f = fx_create(*(uint32_t *)*state);

	*state = f;
	return f ? 0 : -1;
}

/* A failed assert skips the test's own waits: no child may outlive it. */
static inline int fx_teardown(void **state)
{
	struct fx *f = *state;

	for (uint32_t i = 0; i < PD_ARRAY_SIZE(f->kids); i++)
		if (f->kids[i] > 0)
			(void)pd_test_wait(f->kids[i], 0);
	fx_destroy(f);
	return 0;
}

/* Record a forked child, so that teardown kills it if the test fails. */
static inline void fx_track(struct fx *f, pid_t pid)
{
	uint32_t i = 0;

	while (i < PD_ARRAY_SIZE(f->kids) && f->kids[i] > 0)
		i++;
	if (i < PD_ARRAY_SIZE(f->kids))
		f->kids[i] = pid;
}

/* pd_test_wait() for a tracked child. */
static inline int reap(struct fx *f, pid_t pid, uint32_t timeout_ms)
{
	for (uint32_t i = 0; i < PD_ARRAY_SIZE(f->kids); i++)
		if (f->kids[i] == pid)
			f->kids[i] = 0;
	return pd_test_wait(pid, timeout_ms);
}

/* The pool's waiter count, read under its lock. */
static inline uint32_t nwaiters(struct pd_pool *p)
{
	uint32_t n;

	if (pd_pool_lock(p, PD_POOL_OWNER_NONE, pd_deadline_ms(1000)) < 0)
		return UINT32_MAX;
	n = p->shm->nwaiters;
	pd_pool_unlock(p);
	return n;
}

static inline void alloc_ok(struct fx *f, uint32_t owner, uint32_t n, pd_slot_ref *out)
{
	struct pd_pool_who who = who_of(owner, owner);

	assert_int_equal(pd_pool_alloc(&f->p, &who, n, 0, out), 0);
}

#endif
