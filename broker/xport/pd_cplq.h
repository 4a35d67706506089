/* SPDX-License-Identifier: MIT */
#ifndef PD_BROKER_PD_CPLQ_H
#define PD_BROKER_PD_CPLQ_H

/*
 * A data transport's completion queue (pd_tcp, pd_shmx). Each posted
 * transfer takes a descriptor from the queue's free pool, travels through
 * the transport, and ends on the queue as a completion {cookie, peer,
 * status, kind}; pd_cplq_poll() hands completions to the owner, oldest
 * first, and puts their descriptors back in the pool. The eventfd is
 * readable exactly while completions are pending (level-triggered, for
 * the owner's epoll): it is signalled on the empty -> not empty edge and
 * reset when the last one is polled, both under the lock.
 *
 * A descriptor is the transport's own struct, with a struct pd_cplq_node
 * as its first member (pd_container_of() gets back to it).
 *
 * Locking: the queue borrows a mutex of its transport, which guards both
 * lists and the eventfd's state. Functions named _locked are called with
 * it held; pd_cplq_poll() takes it. The transport may guard more with the
 * same mutex (pd_shmx guards everything with it). The FIFO functions touch
 * only the lists they are given.
 */
#include <pthread.h>
#include <stdint.h>

#include "pd_xfer.h"

struct pd_cplq_node {
	struct pd_cplq_node *next;
	uint64_t cookie;
	uint32_t peer;
	uint32_t kind;                 /* PD_CPL_* */
	int32_t status;
};

/* Nodes, oldest first; all zeros is empty. */
struct pd_cplq_fifo {
	struct pd_cplq_node *head, *tail;
	uint32_t n;
};

struct pd_cplq {
	pthread_mutex_t *lock;         /* borrowed from the transport; guards all below */
	struct pd_cplq_fifo done;      /* completions not yet polled */
	struct pd_cplq_fifo free;      /* the descriptor pool */
	int fd;                        /* eventfd: readable while done is not empty */
};

void pd_cplq_fifo_append(struct pd_cplq_fifo *f, struct pd_cplq_node *n);
/* The oldest node (unlinked), or NULL when f is empty. */
struct pd_cplq_node *pd_cplq_fifo_pop(struct pd_cplq_fifo *f);
/* Move all of src to the end of dst; src ends empty. */
void pd_cplq_fifo_splice(struct pd_cplq_fifo *dst, struct pd_cplq_fifo *src);

/**
 * Empty lists and a non-blocking, close-on-exec eventfd.
 * @param lock  borrowed for the queue's life
 * @return 0; -errno of eventfd (-EMFILE, ...).
 */
int pd_cplq_init(struct pd_cplq *q, pthread_mutex_t *lock);

/** Close the eventfd. The descriptors are the transport's storage. */
void pd_cplq_fini(struct pd_cplq *q);

/** Queue all of @f (status and kind set) as completions; @f ends empty. */
void pd_cplq_push_locked(struct pd_cplq *q, struct pd_cplq_fifo *f);

/** Queue one completion (status and kind set). */
void pd_cplq_add_locked(struct pd_cplq *q, struct pd_cplq_node *n);

/**
 * Move up to @max completions into @c, oldest first; their descriptors go
 * back to the pool. Takes the lock.
 * @return the number moved (0..max, at most INT_MAX); -EINVAL for a NULL
 *         @c with @max > 0.
 */
int pd_cplq_poll(struct pd_cplq *q, struct pd_cpl *c, uint32_t max);

#endif
