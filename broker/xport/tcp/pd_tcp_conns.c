/* SPDX-License-Identifier: MIT */
/*
 * TCP transport, receive side: the table of accepted connections, shared
 * by the listener thread (adds, evicts, reaps), the connection threads
 * (HELLO done, closing) and the owner (pd_tcp_fence()), under conns_lock.
 *
 * A connection is PENDING until its HELLO is accepted, then UP. At most
 * max_pending are PENDING: one more evicts the oldest (its socket is shut
 * down, its thread ends), so connections that never say HELLO cannot lock
 * real lanes out, however many a stranger opens; each has hello_timeout_ms
 * anyway. An UP connection whose lane the owner finds stale (its session
 * ended) is shut down by pd_tcp_fence(). A socket is closed only by its
 * thread, under the lock, so a shutdown never reaches a reused descriptor.
 */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "pd_err.h"
#include "pd_tcp_int.h"
#include "pd_time.h"

/* Under the lock: shut down c's socket, its thread ends. */
static void conn_kill(struct pd_tcp_conn *c)
{
	if (c->fd >= 0)
		(void)shutdown(c->fd, SHUT_RDWR);
}

/* Under the lock: evict the oldest PENDING connection. */
static void evict_oldest(struct pd_tcp *t)
{
	struct pd_tcp_conn *old = NULL;

	for (struct pd_tcp_conn *c = t->conns; c; c = c->next)
		if (c->state == PD_TCP_CONN_PENDING && (!old || c->since_ns < old->since_ns))
			old = c;
	if (!old)
		return;
	old->state = PD_TCP_CONN_CLOSING;
	t->npending--;
	conn_kill(old);
	PD_TCP_STAT_INC(t, conns_evicted, 1);
}

void pd_tcp_conns_reap(struct pd_tcp *t, int all)
{
	struct pd_tcp_conn *done = NULL, **pp = &t->conns;

	pd_lock(&t->conns_lock);
	while (*pp) {
		struct pd_tcp_conn *c = *pp;

		if (!all && !atomic_load_explicit(&c->done, memory_order_acquire)) {
			pp = &c->next;
			continue;
		}
		*pp = c->next;
		c->next = done;
		done = c;
		t->nconns--;
	}
	pd_unlock(&t->conns_lock);
	while (done) { /* joined outside the lock: a closing thread takes it */
		struct pd_tcp_conn *c = done;

		done = c->next;
		pd_thread_join(c->thr);
		free(c);
	}
}

/* Under the lock: room for one more, or NULL (max_conns running). */
static struct pd_tcp_conn *conn_new(struct pd_tcp *t, int fd)
{
	struct pd_tcp_conn *c;

	if (t->nconns >= t->o.max_conns)
		return NULL;
	if (t->npending >= t->o.max_pending)
		evict_oldest(t);
	c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	*c = (struct pd_tcp_conn){ .t = t, .fd = fd, .peer = UINT32_MAX,
				   .state = PD_TCP_CONN_PENDING, .since_ns = pd_now_ns() };
	return c;
}

int pd_tcp_conns_add(struct pd_tcp *t, int fd, void *(*main_fn)(void *))
{
	struct pd_tcp_conn *c;
	int rc = -EBUSY;

	if (t->nconns >= t->o.max_conns)
		pd_tcp_conns_reap(t, 0);
	pd_lock(&t->conns_lock);
	c = conn_new(t, fd);
	if (c) {
		rc = pd_thread_start(&c->thr, main_fn, c);
		if (rc == 0) {
			c->next = t->conns;
			t->conns = c;
			t->nconns++;
			t->npending++;
		} else {
			free(c);
		}
	}
	pd_unlock(&t->conns_lock);
	return rc;
}

int pd_tcp_conn_up(struct pd_tcp_conn *c, uint32_t lane)
{
	struct pd_tcp *t = c->t;
	int rc = -ECONNABORTED;

	pd_lock(&t->conns_lock);
	if (c->state == PD_TCP_CONN_PENDING) { /* not evicted meanwhile */
		c->state = PD_TCP_CONN_UP;
		c->peer = lane;
		t->npending--;
		rc = 0;
	}
	pd_unlock(&t->conns_lock);
	return rc;
}

void pd_tcp_conn_close(struct pd_tcp_conn *c)
{
	struct pd_tcp *t = c->t;

	pd_lock(&t->conns_lock);
	if (c->state == PD_TCP_CONN_PENDING)
		t->npending--;
	c->state = PD_TCP_CONN_CLOSING;
	(void)close(c->fd);
	c->fd = -1;
	pd_unlock(&t->conns_lock);
}

int pd_tcp_fence(struct pd_tcp *t, int (*stale)(void *arg, uint32_t lane), void *arg)
{
	int n = 0;

	if (!t || !stale)
		return -EINVAL;
	pd_lock(&t->conns_lock);
	for (struct pd_tcp_conn *c = t->conns; c; c = c->next) {
		if (c->state == PD_TCP_CONN_UP && stale(arg, c->peer)) {
			c->state = PD_TCP_CONN_CLOSING;
			conn_kill(c);
			n++;
		}
	}
	pd_unlock(&t->conns_lock);
	PD_TCP_STAT_INC(t, conns_fenced, (uint64_t)n);
	return n;
}
