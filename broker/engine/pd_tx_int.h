/* SPDX-License-Identifier: MIT */
#ifndef PD_BROKER_PD_TX_INT_H
#define PD_BROKER_PD_TX_INT_H

/*
 * Sender request engine internals, shared by pd_tx.c (object, lookups,
 * batches, submit, responses) and pd_tx_end.c (how requests end: done,
 * abort, cancel, agent/peer loss, deadlines).
 *
 * Ownership: the engine owns a batch's staging slots from an accepted
 * submit until batch_drop()/pd_tx_batch_drop() returns them through
 * free_slots; a batch with writes in flight (PD_TXB_WRITING) is never
 * dropped. Every request is in tx->reqs and in exactly one of tx->live
 * (LIVE, ABORTING) or tx->tombs (TOMB). A LIVE request not admitted yet
 * holds exactly one batch: its Reserve (no chunks, no staging).
 */
#include <stdint.h>

#include "pd_tree.h"

#include "pd_tx.h"

/* Request states. */
#define PD_TXR_LIVE     1u  /* accepting batches */
#define PD_TXR_ABORTING 2u  /* failed; waits for its posted writes */
#define PD_TXR_TOMB     3u  /* ended (done or failed); refuses batches until expiry */

/* Admission of a request. */
#define PD_TXA_WAIT     1u  /* declared: its Reserve waits for an answer */
#define PD_TXA_OK       2u  /* admitted: it may take batches */

/* Batch states. */
#define PD_TXB_WAIT     1u  /* AllocRequest (or Reserve) sent; on tx->waiting (or
			     * tx->admitting) until its response */
#define PD_TXB_WRITING  2u  /* writes posted, pd_tx_write_done() pending */
#define PD_TXB_IDLE     3u  /* neither: about to complete or be dropped */

/* Why a request is aborted. */
#define PD_TX_WHY_FAIL   1u  /* protocol error, receiver error, write error, timeout */
#define PD_TX_WHY_CANCEL 2u
#define PD_TX_WHY_AGENT  3u  /* the agent is gone: no events to it */
#define PD_TX_WHY_PEER   4u  /* the peer failed: no CancelNotif */

struct pd_tx_batch {
	RB_ENTRY(pd_tx_batch) node;            /* tx->batches, by seq */
	TAILQ_ENTRY(pd_tx_batch) req_link;     /* req->batches */
	TAILQ_ENTRY(pd_tx_batch) wait_link;    /* tx->waiting while PD_TXB_WAIT */
	struct pd_tx_req *req;
	uint64_t seq;
	uint64_t deadline;                     /* for its AllocResponse */
	uint64_t bytes;                        /* sum of the chunk lengths */
	uint32_t state;                        /* PD_TXB_* */
	uint32_t reserve;                      /* 1: the request's Reserve (n = 0) */
	uint32_t asked;                        /* Reserve: grants asked with the admission */
	uint32_t bind;                         /* 1: written on grants of the admission */
	uint32_t is_last;
	uint32_t n;
	uint32_t nwrite;                       /* chunks to write (not already sent) */
	int32_t *remote;                       /* n entries, after chunks[] */
	uint32_t *gens;                        /* n entries, after remote[] */
	struct pd_tx_chunk chunks[];           /* n, copied from the submit */
};

TAILQ_HEAD(pd_tx_batch_list, pd_tx_batch);

struct pd_tx_req {
	RB_ENTRY(pd_tx_req) node;              /* tx->reqs, by (req_id, rank) */
	TAILQ_ENTRY(pd_tx_req) link;           /* tx->live or tx->tombs */
	struct pd_tx_batch_list batches;       /* not yet completed */
	uint64_t tag;                          /* of the latest batch, for wake_alloc */
	uint64_t bytes;                        /* completed */
	uint64_t tomb_deadline;
	uint64_t start_ns;                     /* declared */
	uint64_t first_ns;                     /* its first batch, 0: none yet */
	uint32_t state;                        /* PD_TXR_* */
	uint32_t admit;                        /* PD_TXA_* (0: a tombstone never declared) */
	uint32_t agent, peer, rank, world_size, total;
	uint32_t submitted;                    /* chunks accepted */
	uint32_t completed;                    /* chunks completed */
	uint32_t inflight;                     /* batches in PD_TXB_WRITING */
	int32_t status;                        /* 0, or why it failed */
	int32_t *pg_remote;                    /* grants of the admission: npg slots, */
	uint32_t *pg_gens;                     /* ... their generations (after pg_remote) */
	uint32_t npg, pg_used;                 /* ... for the rank's first npg chunks */
	uint8_t last_seen, alloc_sent, agent_gone, peer_failed, cancelled;
	uint8_t cancel_late;                   /* completed, then cancelled: 1 CancelNotif
						* owed (sent once no rank writes), 2 sent */
	uint8_t req_id_len;
	uint8_t req_id[PD_REQ_ID_MAX];
};

TAILQ_HEAD(pd_tx_req_list, pd_tx_req);
RB_HEAD(pd_tx_req_tree, pd_tx_req);
RB_HEAD(pd_tx_batch_tree, pd_tx_batch);

struct pd_tx {
	struct pd_tx_ops ops;
	void *ctx;
	uint32_t max_requests;
	uint32_t notify_failures;
	uint32_t admit_grants;
	uint64_t alloc_timeout_ns;
	uint64_t tombstone_ns;
	uint64_t next_seq;
	uint32_t nreqs;                        /* live + tombstoned */
	struct pd_tx_req_tree reqs;
	struct pd_tx_batch_tree batches;
	struct pd_tx_req_list live;            /* LIVE and ABORTING */
	struct pd_tx_req_list tombs;           /* by tomb_deadline (insertion order) */
	struct pd_tx_batch_list waiting;       /* PD_TXB_WAIT, by deadline (insertion order) */
	struct pd_tx_batch_list admitting;     /* Reserves waiting, by deadline (sorted) */
	struct pd_tx_stats st;
	struct pd_stat_hist req_hist;          /* first batch -> done */
	pd_slot_ref refs[PD_TX_MAX_BATCH];     /* scratch for free_slots */
	int32_t idx[PD_TX_MAX_BATCH];          /* scratch for put_done */
};

/* pd_tx.c */
struct pd_tx_req *pd_tx_req_find(struct pd_tx *tx, const uint8_t *id, uint32_t len,
				 uint32_t rank);
/* The first request of req_id (lowest rank), then the next one of it; NULL at the end. */
struct pd_tx_req *pd_tx_req_first(struct pd_tx *tx, const uint8_t *id, uint32_t len);
struct pd_tx_req *pd_tx_req_next(struct pd_tx *tx, struct pd_tx_req *r);
/* A tombstone of (req_id, rank) that refuses batches (-ECANCELED): with
 * PD_TX_ANY_RANK, every rank not seen yet of a cancelled request. NULL when
 * max_requests is reached or no memory. */
struct pd_tx_req *pd_tx_req_tomb_new(struct pd_tx *tx, const uint8_t *id, uint32_t len,
				     uint32_t rank, uint64_t tomb_deadline);
/* A new LIVE request (not admitted) from its declaration; NULL: no memory. */
struct pd_tx_req *pd_tx_req_new(struct pd_tx *tx, const struct pd_tx_declare *d,
				uint64_t now_ns);
/* Forget r's grants of the admission not used yet (the request ended). */
void pd_tx_req_grants_drop(struct pd_tx_req *r);
/* Undo pd_tx_req_new() (nothing of it was sent). */
void pd_tx_req_unnew(struct pd_tx *tx, struct pd_tx_req *r);
/* Remove from the lookup tree and free (batches must be gone). */
void pd_tx_req_free(struct pd_tx *tx, struct pd_tx_req *r);
/* A batch of n chunks copied from c (or a Reserve: n = 0), seq assigned,
 * linked to r; the caller puts it on its deadline list and counts it. */
struct pd_tx_batch *pd_tx_batch_new(struct pd_tx *tx, struct pd_tx_req *r,
				    const struct pd_tx_chunk *c, uint32_t n, uint64_t deadline);
/* Unlink and free b, its staging already returned (b not PD_TXB_WRITING). */
void pd_tx_batch_del(struct pd_tx *tx, struct pd_tx_batch *b);
/* Free the staging of b, unlink and free it (b not PD_TXB_WRITING). */
void pd_tx_batch_drop(struct pd_tx *tx, struct pd_tx_batch *b);
void pd_tx_batch_view(const struct pd_tx_batch *b, struct pd_tx_batch_view *v);
void pd_tx_result(const struct pd_tx_req *r, struct pd_tx_result *out);
uint64_t pd_tx_deadline(uint64_t now_ns, uint64_t after_ns);

/* pd_tx_admit.c */
/* The answer to Reserve b (err 0): admitted, or -EPROTO (indexes given). */
int pd_tx_reserve_done(struct pd_tx *tx, struct pd_tx_batch *b, const struct pd_tx_resp *m,
		       uint64_t now_ns);
/* b (chunks set, off every wait list) has its remote indexes: post its
 * writes, or complete it when none. */
void pd_tx_batch_post(struct pd_tx *tx, struct pd_tx_batch *b, uint64_t now_ns);
/* A batch of the first n chunks of c on r's grants of the admission
 * (n <= what is left of them), counted, not posted yet; NULL: no memory. */
struct pd_tx_batch *pd_tx_grant_batch(struct pd_tx *tx, struct pd_tx_req *r,
				      const struct pd_tx_chunk *c, uint32_t n);
/* Requests whose admission is overdue fail (-ETIMEDOUT). @return how many. */
int pd_tx_admit_expire(struct pd_tx *tx, uint64_t now_ns);

/* pd_tx_end.c */
/* Abort r (see pd_tx.h) for why; @return 1 when r was LIVE, else 0. */
int pd_tx_req_abort(struct pd_tx *tx, struct pd_tx_req *r, int err, uint32_t why,
		    uint64_t now_ns);
/* After progress: a LIVE request complete -> done; an ABORTING one drained -> failed. */
void pd_tx_req_settle(struct pd_tx *tx, struct pd_tx_req *r, uint64_t now_ns);
/* The first half of that: a LIVE request complete -> done. */
void pd_tx_req_end_done(struct pd_tx *tx, struct pd_tx_req *r, uint64_t now_ns);

#endif
