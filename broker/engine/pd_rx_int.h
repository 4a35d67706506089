/* SPDX-License-Identifier: MIT */
#ifndef PD_BROKER_PD_RX_INT_H
#define PD_BROKER_PD_RX_INT_H

/* Receiver engine internals, shared by broker/pd_rx*.c only. */
#include "pd_tree.h"

#include "pd_rx.h"

#define RX_WAITING 1u /* asked for admission */
#define RX_ACTIVE  2u /* admitted, receiving */
#define RX_READY   3u /* every chunk in place */
#define RX_TOMB    4u /* ended; refuses late batches until it expires */

#define WORK_NONE     0u
#define WORK_ADMITTED 1u
#define WORK_DOOMED   2u

#define CHUNK_FREE      0u
#define CHUNK_GRANTED   1u /* slot granted, bytes not yet written */
#define CHUNK_COMMITTED 2u /* bytes in place */
#define CHUNK_ZOMBIE    3u /* unreferenced, but decode agents still pin its index entry */

struct rx_req;

/* A request waiting for another request's chunk to be written. */
struct rx_pin {
	struct rx_req *req;
	LIST_ENTRY(rx_pin) link;
};

/* One per recv slot, indexed by slot index. */
struct rx_chunk {
	struct rx_req *writer;       /* request that granted it, while that one lives */
	pd_slot_ref ref;
	uint32_t refs;               /* requests holding it: the writer and pinners */
	uint32_t state;              /* CHUNK_* */
	uint32_t peer;               /* granted to */
	uint32_t len;
	LIST_HEAD(, rx_pin) pinners; /* requests waiting for the commit */
	uint8_t klen;
	uint8_t key[PD_KEY_MAX];
};

/* A batch held while its request waits for admission (keys copied). */
struct rx_held {
	STAILQ_ENTRY(rx_held) link;
	size_t bytes;
	struct pd_rx_alloc a;
	struct pd_rx_key keys[];     /* then lens, then key bytes */
};

struct rx_req {
	RB_ENTRY(rx_req) by_id;
	TAILQ_ENTRY(rx_req) order;   /* live list (activity order) or tombstone list */
	TAILQ_ENTRY(rx_req) work;    /* admitted or doomed work lists */
	TAILQ_ENTRY(rx_req) all;     /* every request the engine has */
	STAILQ_HEAD(, rx_held) held;
	struct pd_adm_entry adm;
	uint64_t tag;
	uint64_t last_ns;            /* last progress, or when it became a tombstone */
	uint32_t state;              /* RX_* */
	uint32_t anon;               /* empty req_id: never in the tree */
	uint32_t in_tree;
	uint32_t on_live;            /* in the live list */
	uint32_t in_work;            /* WORK_* : which work list holds it */
	int32_t  doom_err;
	int32_t  end_err;            /* how it ended: 0 released, else the failure */
	uint32_t world_size;
	uint32_t total;              /* per rank */
	uint32_t need;               /* total x world_size */
	uint32_t nchunks;            /* entries in chunks[] */
	uint32_t committed;          /* of them, committed */
	uint32_t *chunks;            /* slot index of every chunk held (own or pinned) */
	uint32_t *rank_seen;         /* chunks per rank */
	uint32_t *rank_peer;         /* peer + 1 per rank, 0 = none yet */
	uint64_t rank_last;          /* bit per rank: last batch seen */
	uint64_t rank_resv;          /* bit per rank: its Reserve was run */
	uint64_t released_ranks;     /* bit per decode rank: released it (pd_rx_release) */
	uint32_t owner;              /* peer of its first message (shares) */
	uint32_t has_demand;         /* its need counts in its owner's demand */
	uint32_t has_admitted;       /* ... and in its owner's admitted slots */
	uint32_t id_len;
	uint8_t id[PD_REQ_ID_MAX];
};

/* What one peer holds (pd_rx_share.c). */
struct rx_peer {
	uint32_t nreq;               /* live, waiting and tombstoned requests */
	uint32_t demand;             /* need of its live and waiting requests */
	uint64_t finish;             /* its fair-queueing finish tag (pd_admit.h) */
	uint32_t admitted;           /* need of its admitted, unfinished requests */
};

RB_HEAD(rx_tree, rx_req);
TAILQ_HEAD(rx_list, rx_req);

struct pd_rx {
	struct pd_rx_opts o;
	struct pd_admit adm;
	struct rx_tree by_id;
	struct rx_list live;         /* ACTIVE and READY, least recently active first */
	struct rx_list tombs;        /* oldest first */
	struct rx_list admitted;     /* work: just admitted, held batches to run */
	struct rx_list doomed;       /* work: to roll back */
	struct rx_list all;          /* every request, any state */
	struct rx_chunk *chunks;     /* nslots */
	uint32_t nslots;
	uint32_t nreq;               /* live + waiting + tombstones */
	uint32_t nzombies;
	uint64_t next_tag;
	uint64_t held_bytes;
	struct pd_rx_stats st;
	struct rx_peer *peers;       /* max_peers + 1: the last for ids beyond */
	uint32_t npeers_req;         /* peers holding a request */
	uint32_t npeers_dem;         /* peers with demand */
	uint32_t ntombs;
	uint32_t scrub_ticks;
	struct pd_stat_hist xfer_hist; /* admitted -> READY */
	/* Scratch for one batch. */
	int32_t *remote;
	int32_t *already;
	uint32_t *fresh;             /* positions of keys needing a new slot */
	pd_slot_ref *refs;
};

/* pd_rx.c */
struct rx_req *pd_rx_find(struct pd_rx *rx, const uint8_t *id, uint32_t len);
/* slot is granted, unwritten, to peer for request id: keyed (an
 * AllocRequest's) or not (granted with the admission). */
int pd_rx_slot_granted(const struct pd_rx *rx, uint32_t peer, const uint8_t *id, uint32_t len,
		       int32_t slot, int keyed);
/* A PutDone that names what its request does not hold: late (-ENOENT,
 * counted) or a protocol error (-EPROTO, the request rolled back). */
int pd_rx_put_done_refused(struct pd_rx *rx, const uint8_t *id, uint32_t len, uint64_t now_ns);
void pd_rx_tree_add(struct pd_rx *rx, struct rx_req *r);
void pd_rx_touch(struct pd_rx *rx, struct rx_req *r, uint64_t now_ns);
void pd_rx_view(const struct rx_req *r, struct pd_rx_req_view *v);
void pd_rx_req_free(struct pd_rx *rx, struct rx_req *r);
/* peer sent (or reserved) a rank of r, or has a batch of it held. */
int pd_rx_req_from(const struct rx_req *r, uint32_t peer);

/* pd_rx_share.c */
int pd_rx_share_init(struct pd_rx *rx);
/* 0, or -EBUSY (counted): a new request of need slots is past peer's share. */
int pd_rx_share_check(struct pd_rx *rx, uint32_t peer, uint32_t need);
void pd_rx_share_add(struct pd_rx *rx, struct rx_req *r, uint32_t peer);
/* r holds no slots any more (idempotent); _free: r is gone. */
void pd_rx_share_end(struct pd_rx *rx, struct rx_req *r);
void pd_rx_share_free(struct pd_rx *rx, struct rx_req *r);
/* The peer's flow in admission (pd_admit_request_flow()). */
uint64_t *pd_rx_share_finish(struct pd_rx *rx, uint32_t peer);
/* r was admitted: its need counts in its owner's admitted slots. */
void pd_rx_share_admitted(struct pd_rx *rx, struct rx_req *r);
/* A peer waits past its due while others sit on more than their share:
 * fail (-EBUSY) their longest idle admitted requests. @return how many. */
uint32_t pd_rx_share_preempt(struct pd_rx *rx, uint64_t now_ns);

/* pd_rx_scrub.c */
/* Repair the recv pool's shared copy from the chunk records (why: for the
 * log). @return entries that disagreed, or a lock error. */
int pd_rx_scrub(struct pd_rx *rx, const char *why);
/* Every tick: compare, now and then, and repair what disagrees. */
void pd_rx_scrub_tick(struct pd_rx *rx);

/* pd_rx_batch.c */
int pd_rx_run_batch(struct pd_rx *rx, struct rx_req *r, const struct pd_rx_alloc *a,
		 uint64_t now_ns);
int pd_rx_hold(struct pd_rx *rx, struct rx_req *r, const struct pd_rx_alloc *a);
/* r holds the chunk of slot now too: pinned (draw: from its reservation). */
int pd_rx_pin_chunk(struct pd_rx *rx, struct rx_req *r, uint32_t slot, int draw);
void pd_rx_run_held(struct pd_rx *rx, struct rx_req *r, uint64_t now_ns);

/* pd_rx_end.c */
void pd_rx_doom(struct pd_rx *rx, struct rx_req *r, int32_t err);
void pd_rx_settle(struct pd_rx *rx, uint64_t now_ns);
void pd_rx_commit(struct pd_rx *rx, struct rx_chunk *c, uint64_t now_ns);
void pd_rx_check_ready(struct pd_rx *rx, struct rx_req *r, uint64_t now_ns);
void pd_rx_end(struct pd_rx *rx, struct rx_req *r, uint64_t now_ns);
void pd_rx_reap_zombies(struct pd_rx *rx);
/* The slot of chunk c goes back to the pool (nothing references it). */
void pd_rx_free_slot(struct pd_rx *rx, struct rx_chunk *c);

#endif
