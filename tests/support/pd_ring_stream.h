/* SPDX-License-Identifier: MIT */
#ifndef PD_TESTS_SUPPORT_PD_RING_STREAM_H
#define PD_TESTS_SUPPORT_PD_RING_STREAM_H

/*
 * An ordered stream of u64 entries through a pd_ring, shared by the
 * cross-process tests (tests/unit/test_ring.c) and the threaded TSan test
 * (tests/tsan/tsan_ring.c). The producer sends stream_entry(0..n-1) in
 * bursts; the consumer checks that each entry is the next one, so a lost,
 * duplicated, reordered or torn entry fails. Neither side calls cmocka:
 * each returns 0 or -errno and the caller asserts, in the parent process
 * or the main thread.
 *
 * Each side may have a hook: the producer's runs after each enqueue, the
 * consumer's when the ring is empty (default: sched_yield). The NEED_WAKEUP
 * doorbell lives in hooks, in test_ring.c, because its fences are not
 * supported by TSan (gcc -Wtsan) and this header is also built for TSan.
 *
 * Header-only (static inline) so it is not linked into every test binary.
 */
#include <errno.h>
#include <sched.h>
#include <stdint.h>

#include "pd_ring.h"
#include "pd_time.h"

#define STREAM_BATCH_MAX 64u

/* Set up before either side starts; then only stop changes. For fork tests
 * it lives in shared memory. */
struct stream {
	uint64_t n;            /* entries to send */
	uint64_t deadline_ns;  /* CLOCK_MONOTONIC; both sides give up after it */
	uint32_t batch;        /* max entries per burst, 1..STREAM_BATCH_MAX */
	uint32_t pace;         /* producer waits for the ring to drain after every
				* pace entries (0: never), so the consumer sleeps */
	int32_t efd;           /* doorbell eventfd for the hooks, or -1 */
	_Atomic uint32_t stop; /* writer: either side, on failure */
};

/* Private to one side. */
struct stream_stats {
	uint64_t done;     /* entries sent, or received in order */
	uint64_t bad;      /* consumer: the first entry out of order */
	uint64_t sleeps;   /* consumer hook: sleeps on the doorbell */
	uint64_t timeouts; /* consumer hook: sleeps ended by timeout (lost wake-ups) */
};

struct stream_side;
typedef int stream_fn(struct stream_side *d, struct pd_ring_view *v);

/* One side: builds its own view of the ring, then runs. */
struct stream_side {
	stream_fn *run;  /* stream_produce or stream_consume */
	stream_fn *hook; /* producer: after each enqueue; consumer: ring empty
			  * (NULL: sched_yield). 0 or -errno. */
	struct stream *s;
	struct pd_ring *r;
	size_t len;
	struct stream_stats st;
	int rc;
};

/* seq in the high half, its complement in the low half: a torn, zeroed or
 * misplaced entry never passes. seq < 2^32. */
static inline uint64_t stream_entry(uint64_t seq)
{
	return seq << 32 | (uint32_t)~seq;
}

static inline void stream_init(struct stream *s, uint64_t n, uint32_t batch, uint32_t pace,
			       int efd, uint64_t timeout_ms)
{
	s->n = n;
	s->deadline_ns = pd_deadline_ms(timeout_ms);
	s->batch = batch;
	s->pace = pace;
	s->efd = efd;
	atomic_store_explicit(&s->stop, 0, memory_order_relaxed);
}

static inline int stream_fail(struct stream *s, int rc)
{
	atomic_store_explicit(&s->stop, 1, memory_order_relaxed);
	return rc;
}

/* 1 when the other side failed or the deadline passed. */
static inline int stream_give_up(struct stream *s)
{
	return atomic_load_explicit(&s->stop, memory_order_relaxed) ||
	       pd_now_ns() > s->deadline_ns;
}

/* Fill buf with the next burst, whose length cycles through 1..batch (7 is
 * odd, batch a power of two) so that bursts meet a partly full ring. */
static inline uint32_t stream_fill(const struct stream *s, uint64_t *buf, uint64_t next,
				   uint64_t burst)
{
	uint32_t want = 1 + (uint32_t)(burst * 7 % s->batch);

	if (s->n - next < want)
		want = (uint32_t)(s->n - next);

	for (uint32_t i = 0; i < want; i++)
		buf[i] = stream_entry(next + i);
	return want;
}

/* Producer: wait until the consumer took everything. */
static inline int stream_drain(struct stream *s, struct pd_ring_view *v)
{
	while (pd_ring_count(v) != 0) {
		if (stream_give_up(s))
			return -ETIMEDOUT;
		(void)sched_yield();
	}
	return 0;
}

/* Producer, after n entries went in: the hook, then a drain every pace entries. */
static inline int stream_after_enqueue(struct stream_side *d, struct pd_ring_view *v,
				       uint32_t n)
{
	struct stream *s = d->s;
	int rc = d->hook ? d->hook(d, v) : 0;

	if (rc == 0 && s->pace && d->st.done / s->pace != (d->st.done - n) / s->pace)
		rc = stream_drain(s, v);
	return rc;
}

static inline int stream_produce(struct stream_side *d, struct pd_ring_view *v)
{
	struct stream *s = d->s;
	uint64_t buf[STREAM_BATCH_MAX];

	for (uint64_t burst = 0; d->st.done < s->n; burst++) {
		uint32_t want = stream_fill(s, buf, d->st.done, burst);
		int rc = pd_ring_enqueue_burst_sp(v, buf, want);

		if (rc < 0)
			return stream_fail(s, rc);
		if (rc == 0) {
			if (stream_give_up(s))
				return stream_fail(s, -ETIMEDOUT);
			(void)sched_yield();
			continue;
		}
		d->st.done += (uint32_t)rc;
		rc = stream_after_enqueue(d, v, (uint32_t)rc);
		if (rc < 0)
			return stream_fail(s, rc);
	}
	return 0;
}

/* 0, or -EILSEQ at the first entry out of order (left in st->bad). */
static inline int stream_check(const uint64_t *buf, int n, struct stream_stats *st)
{
	for (int i = 0; i < n; i++, st->done++) {
		if (buf[i] != stream_entry(st->done)) {
			st->bad = buf[i];
			return -EILSEQ;
		}
	}
	return 0;
}

/* The consumer's default when the ring is empty. */
static inline int stream_yield(struct stream_side *d, struct pd_ring_view *v)
{
	(void)d;
	(void)v;
	(void)sched_yield();
	return 0;
}

static inline int stream_consume(struct stream_side *d, struct pd_ring_view *v)
{
	struct stream *s = d->s;
	stream_fn *idle = d->hook ? d->hook : stream_yield;
	uint64_t buf[STREAM_BATCH_MAX];

	while (d->st.done < s->n) {
		int rc = pd_ring_dequeue_burst_sc(v, buf, s->batch);

		if (rc < 0)
			return stream_fail(s, rc);
		if (rc > 0) {
			if (stream_check(buf, rc, &d->st) < 0)
				return stream_fail(s, -EILSEQ);
			continue;
		}
		if (stream_give_up(s))
			return stream_fail(s, -ETIMEDOUT);
		rc = idle(d, v);
		if (rc < 0)
			return stream_fail(s, rc);
	}
	return 0;
}

/* Run one side with its own view; the result is also left in d->rc. */
static inline int stream_side_run(struct stream_side *d)
{
	struct pd_ring_view v;

	d->rc = pd_ring_view_init(&v, d->r, d->len);
	if (d->rc < 0)
		return stream_fail(d->s, d->rc);
	d->rc = d->run(d, &v);
	return d->rc;
}

#endif
