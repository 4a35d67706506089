/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "pd_err.h"
#include "pd_log.h"
#include "pd_loop.h"
#include "pd_tree.h"

#define MAX_EVENTS 64

struct watch {
	int fd;
	int dead;                    /* deleted during this turn's dispatch */
	pd_loop_fn *fn;
	void *ctx;
	LIST_ENTRY(watch) link;
};

struct pd_loop {
	struct pd_loop_opts o;
	int ep;
	int tfd;
	int sfd;
	int stop;
	LIST_HEAD(, watch) watches;
	LIST_HEAD(, watch) graveyard; /* freed after the turn: events may still name them */
};

static struct watch *find(struct pd_loop *l, int fd)
{
	struct watch *w;

	LIST_FOREACH(w, &l->watches, link)
		if (w->fd == fd && !w->dead)
			return w;
	return NULL;
}

int pd_loop_add(struct pd_loop *l, int fd, uint32_t events, pd_loop_fn *fn, void *ctx)
{
	struct epoll_event ev = { .events = events };
	struct watch *w;

	if (!l || fd < 0 || !fn || find(l, fd))
		return -EINVAL;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	*w = (struct watch){ .fd = fd, .fn = fn, .ctx = ctx };
	ev.data.ptr = w;
	if (epoll_ctl(l->ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
		int rc = -errno;

		free(w);
		return rc;
	}
	LIST_INSERT_HEAD(&l->watches, w, link);
	return 0;
}

int pd_loop_mod(struct pd_loop *l, int fd, uint32_t events)
{
	struct watch *w = l ? find(l, fd) : NULL;
	struct epoll_event ev = { .events = events };

	if (!w)
		return -ENOENT;
	ev.data.ptr = w;
	return pd_sys_rc(epoll_ctl(l->ep, EPOLL_CTL_MOD, fd, &ev));
}

void pd_loop_del(struct pd_loop *l, int fd)
{
	struct watch *w = l ? find(l, fd) : NULL;

	if (!w)
		return;
	(void)epoll_ctl(l->ep, EPOLL_CTL_DEL, fd, NULL);
	LIST_REMOVE(w, link);
	w->dead = 1;
	LIST_INSERT_HEAD(&l->graveyard, w, link);
}

static void bury(struct pd_loop *l)
{
	struct watch *w;

	while ((w = LIST_FIRST(&l->graveyard))) {
		LIST_REMOVE(w, link);
		free(w);
	}
}

static void on_timer(void *ctx, uint32_t events)
{
	struct pd_loop *l = ctx;
	uint64_t n;

	(void)events;
	if (read(l->tfd, &n, sizeof(n)) == (ssize_t)sizeof(n) && l->o.on_tick)
		l->o.on_tick(l->o.ctx);
}

static void on_signal(void *ctx, uint32_t events)
{
	struct pd_loop *l = ctx;
	struct signalfd_siginfo si;

	(void)events;
	while (read(l->sfd, &si, sizeof(si)) == (ssize_t)sizeof(si))
		if (l->o.on_signal)
			l->o.on_signal(l->o.ctx, (int)si.ssi_signo);
}

static int arm(struct pd_loop *l, uint64_t tick_ns)
{
	struct itimerspec its = { 0 };

	its.it_interval.tv_sec = (time_t)(tick_ns / 1000000000ull);
	its.it_interval.tv_nsec = (long)(tick_ns % 1000000000ull);
	its.it_value = its.it_interval;
	return timerfd_settime(l->tfd, 0, &its, NULL) < 0 ? -errno : 0;
}

static int setup_timer(struct pd_loop *l)
{
	int rc;

	if (!l->o.tick_ns)
		return 0;
	l->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (l->tfd < 0)
		return -errno;
	rc = arm(l, l->o.tick_ns);
	return rc < 0 ? rc : pd_loop_add(l, l->tfd, EPOLLIN, on_timer, l);
}

int pd_loop_set_tick(struct pd_loop *l, uint64_t tick_ns)
{
	if (!l || l->tfd < 0 || tick_ns == 0)
		return -EINVAL;
	return arm(l, tick_ns);
}

static int setup_signals(struct pd_loop *l)
{
	sigset_t set;

	if (!l->o.on_signal)
		return 0;
	(void)sigemptyset(&set);
	(void)sigaddset(&set, SIGTERM);
	(void)sigaddset(&set, SIGINT);
	(void)sigaddset(&set, SIGHUP);
	if (pthread_sigmask(SIG_BLOCK, &set, NULL))
		return -EINVAL;
	l->sfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
	if (l->sfd < 0)
		return -errno;
	return pd_loop_add(l, l->sfd, EPOLLIN, on_signal, l);
}

int pd_loop_create(const struct pd_loop_opts *o, struct pd_loop **out)
{
	struct pd_loop *l;
	int rc;

	if (!o || !out)
		return -EINVAL;
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->o = *o;
	l->tfd = l->sfd = -1;
	LIST_INIT(&l->watches);
	LIST_INIT(&l->graveyard);
	l->ep = epoll_create1(EPOLL_CLOEXEC);
	rc = l->ep < 0 ? -errno : setup_timer(l);
	if (rc == 0)
		rc = setup_signals(l);
	if (rc < 0) {
		pd_loop_destroy(l);
		return rc;
	}
	*out = l;
	return 0;
}

void pd_loop_destroy(struct pd_loop *l)
{
	struct watch *w;

	if (!l)
		return;
	while ((w = LIST_FIRST(&l->watches))) {
		LIST_REMOVE(w, link);
		free(w);
	}
	bury(l);
	if (l->tfd >= 0)
		(void)close(l->tfd);
	if (l->sfd >= 0)
		(void)close(l->sfd);
	if (l->ep >= 0)
		(void)close(l->ep);
	free(l);
}

void pd_loop_stop(struct pd_loop *l)
{
	l->stop = 1;
}

int pd_loop_run(struct pd_loop *l)
{
	struct epoll_event ev[MAX_EVENTS];

	l->stop = 0; /* a stopped loop may run again */
	while (!l->stop) {
		int n;

		if (l->o.before_sleep)
			l->o.before_sleep(l->o.ctx);
		if (l->stop)
			break;
		n = epoll_wait(l->ep, ev, MAX_EVENTS, -1);
		if (n < 0 && errno != EINTR)
			return -errno;
		for (int i = 0; i < n && !l->stop; i++) {
			struct watch *w = ev[i].data.ptr;

			if (!w->dead)
				w->fn(w->ctx, ev[i].events);
		}
		bury(l);
	}
	return 0;
}
