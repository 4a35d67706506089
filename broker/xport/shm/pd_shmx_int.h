/* SPDX-License-Identifier: MIT */
#ifndef PD_BROKER_PD_SHMX_INT_H
#define PD_BROKER_PD_SHMX_INT_H

/*
 * Internals of the shm transport (pd_shmx.c: instance, copy pool,
 * completion queue, data threads; pd_shmx_peer.c: peers, post, check,
 * disconnect; pd_shmx_map.c: the segment checks and the arena mapping).
 *
 * One lock, s->lock, guards everything the data threads share with the
 * owner: the work FIFO, the completion queue and its free pool (s->cq,
 * pd_cplq.h), and each peer's err/failed/outstanding/running/halting. The
 * completion eventfd is written and read under it, so it is readable
 * exactly while completions are pending. A copy holds the lock only to be
 * taken and to be completed, never during its memcpy.
 *
 * A copy descriptor (struct pd_shmx_node) is always in exactly one place:
 * s->cq.free, s->work, a data thread (running), s->cq.done, or a peer's
 * reserved peer-completion pointer.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "pd_compiler.h"
#include "pd_cplq.h"
#include "pd_log.h"
#include "pd_shm_layout.h"
#include "pd_shmx.h"
#include "pd_sys.h"

struct pd_shmx_peer;

struct pd_shmx_node {
	struct pd_cplq_node c;         /* first: the completion (c.peer is p->id), list link */
	struct pd_shmx_peer *p;        /* while posted */
	uint8_t *dst;                  /* in p's mapped arena, bounds-checked at post */
	const void *src;
	uint32_t len;
};

/* Lists of copy descriptors are struct pd_cplq_fifo of their c. */
static inline struct pd_shmx_node *pd_shmx_node_of(struct pd_cplq_node *c)
{
	return c ? pd_container_of(c, struct pd_shmx_node, c) : NULL;
}

static inline void pd_shmx_fifo_append(struct pd_cplq_fifo *f, struct pd_shmx_node *n)
{
	pd_cplq_fifo_append(f, &n->c);
}

static inline struct pd_shmx_node *pd_shmx_fifo_pop(struct pd_cplq_fifo *f)
{
	return pd_shmx_node_of(pd_cplq_fifo_pop(f));
}

struct pd_shmx_peer {
	struct pd_shmx *s;
	uint32_t id;
	/* immutable once connected */
	uint32_t nslots;
	uint64_t slot_size;
	uint8_t *arena;                /* the peer's recv arena, mapped read-write */
	size_t map_len;                /* nslots * slot_size */
	dev_t dev;                     /* the segment file that is mapped */
	ino_t ino;
	int32_t pid;                   /* its broker, when visible from here at connect; else 0 */
	uint64_t start_ticks;          /* with pid: that very process */
	char name[PD_SHM_NAME_MAX + 1];
	/* s->lock */
	struct pd_shmx_node *peer_cpl; /* reserved for the PD_CPL_PEER completion */
	int err;                       /* 0 while usable; then the first error */
	int failed;                    /* err came from a check: peer completion due */
	int halting;                   /* disconnect waits for running == 0 */
	uint32_t outstanding;          /* copies posted, not yet completed */
	uint32_t running;              /* of those, in a data thread's memcpy now */
	int prefaulted;                /* the first copy filled the arena's page tables */
};

struct pd_shmx_counters {
#define PD_SHMX_STAT_ATOMIC(n) _Atomic uint64_t n;
	PD_SHMX_STAT_FIELDS(PD_SHMX_STAT_ATOMIC)
#undef PD_SHMX_STAT_ATOMIC
};

struct pd_shmx {
	struct pd_shmx_opts o;
	struct pd_shmx_counters st;
	/* owner thread */
	struct pd_shmx_peer **peers;   /* o.max_peers entries, NULL = free */
	int stopped;
	pthread_t *thr;
	uint32_t nthr;                 /* data threads started */
	/* s->lock */
	pthread_mutex_t lock;
	pthread_cond_t work_cv;        /* data threads: work or quit */
	pthread_cond_t idle_cv;        /* disconnect: a halting peer's running copies ended */
	struct pd_cplq_fifo work;      /* copies to do, oldest first */
	struct pd_cplq cq;             /* completions and the copy pool */
	uint32_t nidle;                /* data threads asleep on work_cv */
	int quit;
	struct pd_shmx_node *nodes;    /* the pool's storage */
	uint32_t nnodes;
};

#define PD_SHMX_STAT_INC(s, n, v) pd_stat_add(&(s)->st.n, (v))

static inline void pd_shmx_lock(struct pd_shmx *s)
{
	pd_lock(&s->lock);
}

static inline void pd_shmx_unlock(struct pd_shmx *s)
{
	pd_unlock(&s->lock);
}

/* pd_shmx.c (the lock held where it says "_locked") */
void pd_shmx_cq_push_locked(struct pd_shmx *s, struct pd_shmx_node *n);
/* A copy of p ended (its memcpy done, or never started): complete it with
 * p's err (0 while p is usable), then settle p. */
void pd_shmx_copy_done_locked(struct pd_shmx *s, struct pd_shmx_node *n);
/* Queue p's peer completion once p failed and nothing of it is outstanding;
 * wake a disconnect waiting for p's running copies. */
void pd_shmx_peer_settle_locked(struct pd_shmx *s, struct pd_shmx_peer *p);
/* Wake up to n sleeping data threads. */
void pd_shmx_wake_locked(struct pd_shmx *s, uint32_t n);

/* pd_shmx_peer.c */
void pd_shmx_peers_stop(struct pd_shmx *s);

/* pd_shmx_map.c: check the segment against t and map its recv arena into p
 * (arena, map_len, nslots, slot_size, dev, ino, name). 0 or -errno (err says why). */
int pd_shmx_map(struct pd_shmx_peer *p, const struct pd_shmx_target *t, char *err,
		size_t errlen);
void pd_shmx_unmap(struct pd_shmx_peer *p);
/* 1 when the peer's broker lives (when its pid was visible at connect)
 * and "/pdkv.<p->name>" still names the mapped file; 0 when the broker is
 * dead, or the name is gone or names another file; -errno when that
 * cannot be told now (fd limit, ...). */
int pd_shmx_alive(const struct pd_shmx_peer *p);

#endif
