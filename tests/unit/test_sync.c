/* SPDX-License-Identifier: MIT */
/*
 * pd_sync.c: robust process-shared mutex and condvar, across fork().
 *
 * The mutex, condvar and flags live in pd_test_shared_alloc() memory.
 * Children never assert: they _exit() with one of the CHILD_* codes and the
 * parent checks pd_test_wait(). The teardown kills a child left running.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "pd_test.h"
#include "pd_sync.h"
#include "pd_time.h"

#define WAIT_MS 5000u /* bound on every child and every wait for one */

/* Child exit codes. */
#define CHILD_OK         0
#define CHILD_NO_LOCK    10
#define CHILD_NO_RELEASE 11
#define CHILD_SURVIVED   12

#define REPAIR_MAGIC 0x7e9a1u

struct fx { /* shared with the children */
	struct pd_mutex mx;
	struct pd_cond cv;
	_Atomic int ready;   /* child: I hold the mutex */
	_Atomic int release; /* parent: let it go */
	int pred;            /* under mx */
	pid_t child;         /* parent only */
};

struct repair {
	unsigned magic;
	int calls;
	int rc;        /* what the callback returns */
	int relock_rc; /* locking again from inside the callback */
	struct pd_mutex *mx;
};

/* ---- fixtures and helpers -------------------------------------------------- */

static int setup(void **state)
{
	struct fx *f = pd_test_shared_alloc(sizeof(*f));

	if (!f)
		return -1;
	if (pd_mutex_init(&f->mx) != 0 || pd_cond_init(&f->cv) != 0) {
		pd_test_shared_free(f, sizeof(*f));
		return -1;
	}
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	if (f->child > 0) {
		(void)kill(f->child, SIGKILL);
		(void)pd_test_wait(f->child, WAIT_MS);
	}
	pd_test_shared_free(f, sizeof(*f));
	return 0;
}

static void nap_ms(long ms)
{
	struct timespec ts = { 0, ms * 1000000L };

	(void)nanosleep(&ts, NULL);
}

/* Poll flag for at most WAIT_MS; 1 when it was set. */
static int wait_flag(_Atomic int *flag)
{
	uint64_t deadline = pd_deadline_ms(WAIT_MS);

	while (!atomic_load(flag)) {
		if (pd_now_ns() >= deadline)
			return 0;
		nap_ms(1);
	}
	return 1;
}

static void start(struct fx *f, int (*fn)(void *arg))
{
	f->child = pd_test_fork(fn, f);
	assert_true(f->child > 0);
}

static int reap(struct fx *f)
{
	int rc = pd_test_wait(f->child, WAIT_MS);

	f->child = 0;
	return rc;
}

/* Counts only calls with the right ctx, and records whether the mutex is
 * held (by us) while it runs. */
static int repair_cb(void *ctx)
{
	struct repair *r = ctx;

	if (r->magic != REPAIR_MAGIC)
		return -EFAULT;
	r->calls++;
	r->relock_rc = pd_mutex_lock_until(r->mx, 0, NULL, NULL);
	return r->rc;
}

static struct repair repair_of(struct fx *f, int rc)
{
	return (struct repair){ .magic = REPAIR_MAGIC, .rc = rc, .mx = &f->mx };
}

static int lock(struct fx *f, uint64_t deadline_ns, struct repair *r)
{
	return pd_mutex_lock_until(&f->mx, deadline_ns, r ? repair_cb : NULL, r);
}

static int lock_ms(struct fx *f, uint32_t timeout_ms, struct repair *r)
{
	return lock(f, pd_deadline_ms(timeout_ms), r);
}

static int wait_cv(struct fx *f, uint64_t deadline_ns, struct repair *r)
{
	return pd_cond_wait_until(&f->cv, &f->mx, deadline_ns, r ? repair_cb : NULL, r);
}

/* The mutex is held by the caller: a plain unlock succeeds exactly once. */
static void assert_held_then_unlock(struct fx *f)
{
	assert_int_equal(pthread_mutex_unlock(&f->mx.m), 0);
	assert_int_equal(pthread_mutex_unlock(&f->mx.m), EPERM);
}

/* The mutex works normally: lock without repair, unlock. */
static void assert_usable(struct fx *f)
{
	struct repair r = repair_of(f, 0);

	assert_int_equal(lock_ms(f, WAIT_MS, &r), 0);
	assert_int_equal(r.calls, 0);
	assert_held_then_unlock(f);
}

/* ---- children -------------------------------------------------------------- */

static int hold(struct fx *f)
{
	if (pd_mutex_lock_until(&f->mx, pd_deadline_ms(WAIT_MS), NULL, NULL) != 0)
		return 0;
	atomic_store(&f->ready, 1);
	return 1;
}

static int child_hold_until_release(void *arg)
{
	struct fx *f = arg;

	if (!hold(f))
		return CHILD_NO_LOCK;
	if (!wait_flag(&f->release))
		return CHILD_NO_RELEASE;
	pd_mutex_unlock(&f->mx);
	return CHILD_OK;
}

/* _exit() with the mutex held. */
static int child_exit_holding(void *arg)
{
	return hold(arg) ? CHILD_OK : CHILD_NO_LOCK;
}

static int child_kill_holding(void *arg)
{
	if (!hold(arg))
		return CHILD_NO_LOCK;
	(void)raise(SIGKILL);
	return CHILD_SURVIVED;
}

/* Gets the mutex only once the parent waits on cv; sets pred, signals. */
static int signal_pred(struct fx *f)
{
	if (pd_mutex_lock_until(&f->mx, pd_deadline_ms(WAIT_MS), NULL, NULL) != 0)
		return 0;
	f->pred = 1;
	pd_cond_signal(&f->cv);
	return 1;
}

static int child_signal(void *arg)
{
	struct fx *f = arg;

	if (!signal_pred(f))
		return CHILD_NO_LOCK;
	pd_mutex_unlock(&f->mx);
	return CHILD_OK;
}

/* Signals, then _exit()s before unlocking. */
static int child_signal_and_exit(void *arg)
{
	return signal_pred(arg) ? CHILD_OK : CHILD_NO_LOCK;
}

/* The holder died: the next lock repairs once, with the right ctx, and the
 * mutex is usable afterwards. */
static void expect_recovered_by_lock(struct fx *f)
{
	struct repair r = repair_of(f, 0);

	assert_int_equal(lock_ms(f, WAIT_MS, &r), 1);
	assert_int_equal(r.calls, 1);
	assert_int_equal(r.relock_rc, -ETIMEDOUT); /* ran with the mutex held */
	assert_held_then_unlock(f);
	assert_usable(f);
}

/* ---- negative tests -------------------------------------------------------- */

static void test_null_args(void **state)
{
	struct fx *f = *state;
	uint64_t ticks;

	assert_int_equal(pd_mutex_init(NULL), -EINVAL);
	assert_int_equal(pd_cond_init(NULL), -EINVAL);
	assert_int_equal(pd_mutex_lock_until(NULL, pd_deadline_ms(10), NULL, NULL), -EINVAL);
	assert_int_equal(pd_cond_wait_until(NULL, &f->mx, pd_deadline_ms(10), NULL, NULL),
			 -EINVAL);
	assert_int_equal(pd_cond_wait_until(&f->cv, NULL, pd_deadline_ms(10), NULL, NULL),
			 -EINVAL);
	assert_int_equal(pd_pid_start_time(0, &ticks), -EINVAL);
	assert_int_equal(pd_pid_start_time(-1, &ticks), -EINVAL);
	assert_int_equal(pd_pid_start_time(getpid(), NULL), -EINVAL);
	assert_int_equal(pd_pid_alive(0), 0);
	assert_int_equal(pd_pid_alive(-1), 0);
	assert_int_equal(pd_pid_alive(INT32_MIN), 0);
	assert_usable(f);
}

/* Robust: unlocking an unlocked mutex fails; a relock by the holder waits
 * out its deadline (not EDEADLK, which glibc would say for any holder of
 * the same thread id, one of another pid namespace too). */
static void test_relock_and_bad_unlock(void **state)
{
	struct fx *f = *state;

	assert_int_equal(pthread_mutex_unlock(&f->mx.m), EPERM);
	assert_int_equal(lock_ms(f, WAIT_MS, NULL), 0);
	assert_int_equal(lock_ms(f, 10, NULL), -ETIMEDOUT);
	assert_held_then_unlock(f);
}

static void test_lock_times_out_while_held(void **state)
{
	struct fx *f = *state;
	struct repair r = repair_of(f, 0);
	uint64_t deadline;

	start(f, child_hold_until_release);
	assert_true(wait_flag(&f->ready));
	assert_int_equal(lock(f, 0, &r), -ETIMEDOUT);
	assert_int_equal(lock(f, pd_now_ns() - 1, &r), -ETIMEDOUT);
	deadline = pd_deadline_ms(50);
	assert_int_equal(lock(f, deadline, &r), -ETIMEDOUT);
	assert_true(pd_now_ns() >= deadline);
	assert_int_equal(r.calls, 0);
	atomic_store(&f->release, 1);
	assert_int_equal(reap(f), CHILD_OK);
	assert_usable(f);
}

static void test_repair_failure_is_permanent(void **state)
{
	struct fx *f = *state;
	struct repair bad = repair_of(f, -EIO);
	struct repair good = repair_of(f, 0);

	start(f, child_exit_holding);
	assert_int_equal(reap(f), CHILD_OK);
	assert_int_equal(lock_ms(f, WAIT_MS, &bad), -ENOTRECOVERABLE);
	assert_int_equal(bad.calls, 1);
	assert_int_equal(lock_ms(f, WAIT_MS, &good), -ENOTRECOVERABLE);
	assert_int_equal(lock_ms(f, WAIT_MS, NULL), -ENOTRECOVERABLE);
	assert_int_equal(good.calls, 0);
	assert_int_equal(bad.calls, 1);
}

/* ---- positive tests -------------------------------------------------------- */

static void test_lock_unlock(void **state)
{
	struct fx *f = *state;

	for (int i = 0; i < 3; i++) {
		assert_int_equal(lock_ms(f, WAIT_MS, NULL), 0);
		pd_mutex_unlock(&f->mx);
	}
	assert_usable(f);
}

/* The holder _exit()s; it is reaped before the parent locks. */
static void test_owner_exit_recovered(void **state)
{
	struct fx *f = *state;

	start(f, child_exit_holding);
	assert_int_equal(reap(f), CHILD_OK);
	expect_recovered_by_lock(f);
}

/* The parent is already blocked (or about to block) when the holder is killed. */
static void test_owner_killed_recovered(void **state)
{
	struct fx *f = *state;

	start(f, child_kill_holding);
	assert_true(wait_flag(&f->ready));
	expect_recovered_by_lock(f);
	assert_int_equal(reap(f), 128 + SIGKILL);
}

/* Without a callback the state is declared consistent as it is. */
static void test_owner_death_no_repair_fn(void **state)
{
	struct fx *f = *state;

	start(f, child_exit_holding);
	assert_int_equal(reap(f), CHILD_OK);
	assert_int_equal(lock_ms(f, WAIT_MS, NULL), 1);
	assert_held_then_unlock(f);
	assert_usable(f);
}

static void test_cond_times_out(void **state)
{
	struct fx *f = *state;
	uint64_t deadline;

	assert_int_equal(lock_ms(f, WAIT_MS, NULL), 0);
	deadline = pd_deadline_ms(50);
	assert_int_equal(wait_cv(f, deadline, NULL), -ETIMEDOUT);
	assert_true(pd_now_ns() >= deadline);
	assert_held_then_unlock(f);
}

/* The parent holds the mutex across fork(), so the child can only signal
 * once the parent waits. */
static void test_cond_signalled_by_child(void **state)
{
	struct fx *f = *state;
	uint64_t t0 = pd_now_ns();
	int rc = 0;

	assert_int_equal(lock_ms(f, WAIT_MS, NULL), 0);
	start(f, child_signal);
	while (rc == 0 && !f->pred)
		rc = wait_cv(f, t0 + 10 * PD_NS_PER_S, NULL);
	assert_int_equal(rc, 0);
	assert_int_equal(f->pred, 1);
	assert_true(pd_now_ns() - t0 < 5 * PD_NS_PER_S);
	assert_held_then_unlock(f);
	assert_int_equal(reap(f), CHILD_OK);
}

/* The child takes the mutex while the parent waits, signals and dies. */
static void test_cond_owner_death(void **state)
{
	struct fx *f = *state;
	struct repair r = repair_of(f, 0);
	uint64_t t0 = pd_now_ns();
	int rc = 0;

	assert_int_equal(lock_ms(f, WAIT_MS, NULL), 0);
	start(f, child_signal_and_exit);
	while (rc == 0 && !f->pred)
		rc = wait_cv(f, t0 + 10 * PD_NS_PER_S, &r);
	assert_int_equal(rc, 1);
	assert_int_equal(r.calls, 1);
	assert_int_equal(r.relock_rc, -ETIMEDOUT);
	assert_int_equal(f->pred, 1);
	assert_true(pd_now_ns() - t0 < 5 * PD_NS_PER_S);
	assert_held_then_unlock(f);
	assert_int_equal(reap(f), CHILD_OK);
	assert_usable(f);
}

static void test_pid_alive(void **state)
{
	struct fx *f = *state;
	pid_t pid;

	assert_int_equal(pd_pid_alive(getpid()), 1);
	start(f, child_hold_until_release);
	pid = f->child;
	assert_true(wait_flag(&f->ready));
	assert_int_equal(pd_pid_alive(pid), 1);
	atomic_store(&f->release, 1);
	assert_int_equal(reap(f), CHILD_OK);
	assert_int_equal(pd_pid_alive(pid), 0);
}

/* ---- main ------------------------------------------------------------------ */

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		/* negative */
		T(test_null_args),
		T(test_relock_and_bad_unlock),
		T(test_lock_times_out_while_held),
		T(test_repair_failure_is_permanent),
		/* positive */
		T(test_lock_unlock),
		T(test_owner_exit_recovered),
		T(test_owner_killed_recovered),
		T(test_owner_death_no_repair_fn),
		T(test_cond_times_out),
		T(test_cond_signalled_by_child),
		T(test_cond_owner_death),
		T(test_pid_alive),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
