/* SPDX-License-Identifier: MIT */
/* The broker's event loop: fds, tick, signals, deletion while dispatching. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cmocka.h>

#include "pd_loop.h"
#include "pd_time.h"

struct fx {
	struct pd_loop *l;
	int efd[2];
	uint32_t fired[2], ticks, signals, turns;
	int last_signo;              /* the number on_signal was given last */
	int del_other;               /* the first handler to run deletes the other fd */
	uint32_t stop_turn;          /* before_sleep stops the loop at this turn (0: never) */
};

static void on_fd(struct fx *f, int i)
{
	uint64_t v;

	f->fired[i]++;
	assert_int_equal(read(f->efd[i], &v, sizeof(v)), (ssize_t)sizeof(v));
	if (f->del_other && f->fired[0] + f->fired[1] == 1)
		pd_loop_del(f->l, f->efd[!i]);
	if (f->fired[0] + f->fired[1] >= 2)
		pd_loop_stop(f->l);
}

static void on_fd0(void *ctx, uint32_t ev)
{
	(void)ev;
	on_fd(ctx, 0);
}

static void on_fd1(void *ctx, uint32_t ev)
{
	(void)ev;
	on_fd(ctx, 1);
}

static void on_tick(void *ctx)
{
	struct fx *f = ctx;

	if (++f->ticks == 3)
		pd_loop_stop(f->l);
}

static void on_sig(void *ctx, int signo)
{
	struct fx *f = ctx;

	f->signals++;
	f->last_signo = signo;
	if (signo != SIGHUP)
		pd_loop_stop(f->l);
}

static void before(void *ctx)
{
	struct fx *f = ctx;

	if (++f->turns == f->stop_turn)
		pd_loop_stop(f->l);
}

static struct fx *make(uint64_t tick_ns, int signals)
{
	static struct fx f;
	struct pd_loop_opts o = { .tick_ns = tick_ns, .on_tick = on_tick, .before_sleep = before,
				  .on_signal = signals ? on_sig : NULL, .ctx = &f };

	f = (struct fx){ 0 };
	assert_int_equal(pd_loop_create(&o, &f.l), 0);
	for (int i = 0; i < 2; i++) {
		f.efd[i] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		assert_true(f.efd[i] >= 0);
	}
	return &f;
}

static void done(struct fx *f)
{
	pd_loop_destroy(f->l);
	(void)close(f->efd[0]);
	(void)close(f->efd[1]);
}

static void kick(int fd)
{
	uint64_t one = 1;

	assert_int_equal(write(fd, &one, sizeof(one)), (ssize_t)sizeof(one));
}

static void test_bad_args(void **state)
{
	struct fx *f = make(0, 0);

	(void)state;
	assert_int_equal(pd_loop_create(NULL, &f->l), -EINVAL);
	assert_int_equal(pd_loop_add(f->l, -1, EPOLLIN, on_fd0, f), -EINVAL);
	assert_int_equal(pd_loop_add(f->l, f->efd[0], EPOLLIN, NULL, f), -EINVAL);
	assert_int_equal(pd_loop_add(f->l, f->efd[0], EPOLLIN, on_fd0, f), 0);
	assert_int_equal(pd_loop_add(f->l, f->efd[0], EPOLLIN, on_fd0, f), -EINVAL);
	assert_int_equal(pd_loop_mod(f->l, f->efd[1], EPOLLIN), -ENOENT);
	pd_loop_del(f->l, f->efd[1]); /* not watched: harmless */
	done(f);
}

static void test_ready_fds_run_their_handlers(void **state)
{
	struct fx *f = make(0, 0);

	(void)state;
	assert_int_equal(pd_loop_add(f->l, f->efd[0], EPOLLIN, on_fd0, f), 0);
	assert_int_equal(pd_loop_add(f->l, f->efd[1], EPOLLIN, on_fd1, f), 0);
	kick(f->efd[0]);
	kick(f->efd[1]);
	assert_int_equal(pd_loop_run(f->l), 0);
	assert_int_equal(f->fired[0], 1);
	assert_int_equal(f->fired[1], 1);
	assert_true(f->turns >= 1);
	done(f);
}

/*
 * Both fds are ready before the loop runs, so one epoll_wait returns both
 * events; whichever handler runs first deletes the other fd, whose event is
 * then still in that turn's array. The loop must not run the deleted fd's
 * handler (the watch is dead, freed only after the turn). Nothing stops the
 * loop during dispatch: before_sleep stops it at the second turn, so a
 * broken guard shows as the second handler firing.
 */
static void test_delete_during_dispatch_is_safe(void **state)
{
	struct fx *f = make(0, 0);
	uint64_t v = 0;

	(void)state;
	f->del_other = 1;
	f->stop_turn = 2;
	assert_int_equal(pd_loop_add(f->l, f->efd[1], EPOLLIN, on_fd1, f), 0);
	assert_int_equal(pd_loop_add(f->l, f->efd[0], EPOLLIN, on_fd0, f), 0);
	kick(f->efd[1]);
	kick(f->efd[0]);
	assert_int_equal(pd_loop_run(f->l), 0);
	assert_int_equal(f->fired[0] + f->fired[1], 1);
	assert_int_equal(f->turns, 2);
	/* The deleted fd's event was pending and never consumed by its handler. */
	assert_int_equal(read(f->efd[f->fired[0] ? 1 : 0], &v, sizeof(v)), (ssize_t)sizeof(v));
	assert_int_equal(v, 1);
	done(f);
}

static void test_tick_fires_periodically(void **state)
{
	uint64_t t0 = pd_now_ns(); /* before the timer starts: make() arms it */
	struct fx *f = make(10 * PD_NS_PER_MS, 0);

	(void)state;
	assert_int_equal(pd_loop_run(f->l), 0);
	assert_int_equal(f->ticks, 3);
	assert_true(pd_now_ns() - t0 >= 30 * PD_NS_PER_MS);
	done(f);
}

static void test_sigterm_reaches_the_handler(void **state)
{
	struct fx *f = make(0, 1);

	(void)state;
	assert_int_equal(kill(getpid(), SIGTERM), 0); /* blocked: queued for signalfd */
	assert_int_equal(pd_loop_run(f->l), 0);
	assert_int_equal(f->signals, 1);
	assert_int_equal(f->last_signo, SIGTERM);
	done(f);
}

/* SIGHUP reaches the handler too, with its number, and does not end the
 * loop by itself (the handler here goes on; SIGINT then stops it). */
static void test_sighup_reaches_the_handler(void **state)
{
	struct fx *f = make(0, 1);

	(void)state;
	assert_int_equal(kill(getpid(), SIGHUP), 0); /* blocked: queued for signalfd */
	assert_int_equal(kill(getpid(), SIGINT), 0);
	assert_int_equal(pd_loop_run(f->l), 0);
	assert_int_equal(f->signals, 2);
	assert_int_equal(f->last_signo, SIGINT);
	done(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bad_args),
		cmocka_unit_test(test_ready_fds_run_their_handlers),
		cmocka_unit_test(test_delete_during_dispatch_is_safe),
		cmocka_unit_test(test_tick_fires_periodically),
		cmocka_unit_test(test_sigterm_reaches_the_handler),
		cmocka_unit_test(test_sighup_reaches_the_handler),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
