/* SPDX-License-Identifier: MIT */
#ifndef PD_BROKER_PD_LOOP_H
#define PD_BROKER_PD_LOOP_H

/*
 * The broker's event loop: one epoll set, fd handlers, one periodic tick
 * (timerfd) and the signals an operator sends (signalfd). Everything runs on the
 * control thread; nothing spins: the loop sleeps in epoll_wait until an fd
 * is ready, and a before-sleep hook does the batched work of a turn.
 */
#include <stdint.h>

struct pd_loop;

typedef void pd_loop_fn(void *ctx, uint32_t events);
typedef void pd_loop_hook(void *ctx);
typedef void pd_loop_sig_fn(void *ctx, int signo);

struct pd_loop_opts {
	uint64_t tick_ns;           /* period of on_tick; 0: no tick */
	pd_loop_hook *on_tick;
	pd_loop_hook *before_sleep; /* once per turn, before waiting */
	pd_loop_sig_fn *on_signal;  /* SIGTERM, SIGINT, SIGHUP, with its number (blocked in
				     * the calling thread: threads it starts inherit that) */
	void *ctx;
};

int pd_loop_create(const struct pd_loop_opts *o, struct pd_loop **out);
void pd_loop_destroy(struct pd_loop *l);

/* Watch fd for events (EPOLLIN, EPOLLOUT, ...); fn runs when ready. */
int pd_loop_add(struct pd_loop *l, int fd, uint32_t events, pd_loop_fn *fn, void *ctx);
int pd_loop_mod(struct pd_loop *l, int fd, uint32_t events);
void pd_loop_del(struct pd_loop *l, int fd);

/* Run until pd_loop_stop(). @return 0 or -errno (epoll failed). */
int pd_loop_run(struct pd_loop *l);
void pd_loop_stop(struct pd_loop *l);
/* Tick every tick_ns from now on (a loop created with a tick). 0; -EINVAL. */
int pd_loop_set_tick(struct pd_loop *l, uint64_t tick_ns);

#endif
