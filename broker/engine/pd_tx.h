/* SPDX-License-Identifier: MIT */
#ifndef PD_BROKER_PD_TX_H
#define PD_BROKER_PD_TX_H

/*
 * Sender request engine: pure logic, driven by events,
 * no sockets, no threads, no clock of its own (the caller passes "now").
 * The broker's control thread owns it.
 *
 * A tx request is (req_id, rank): the chunks one prefill rank sends for one
 * inference request to one peer. It starts with a declaration, before any
 * staging (pd_tx_declare): a Reserve goes to the peer at once, and the
 * request is ADMITTED when the peer answers it (the receiver reserved room
 * for every chunk of every rank). Only an admitted request takes batches:
 * a batch of a request never declared is refused (-ENOENT), one of a
 * request not admitted yet fails it (-EPROTO). So every batch the engine
 * holds belongs to an admitted request, whose grants never wait at the
 * receiver: staging always drains (see docs/design.md, "No deadlock").
 * Per request it tracks the declared total, the chunks completed, whether
 * the last batch was seen, and its batches:
 *
 *   submit -> SENDING (AllocRequest out, seq assigned) -> response:
 *     grants -> WRITING (writes posted) -> write done -> staging freed,
 *              PutDone out, chunks counted;
 *     error  -> the request fails.
 *
 * Grants with the admission (admit_grants > 0): the Reserve asks for up to
 * admit_grants slots, and the answer that admits the request may carry
 * them, drawn from the request's reservation, for the rank's first chunks.
 * A batch whose chunks they cover is written at once, without an
 * AllocRequest (a batch longer than what is left is split: the covered
 * chunks written now, an AllocRequest for the rest); its PutDone carries
 * each chunk's key and length, which the receiver binds to the slot as it
 * commits it. The grants belong to the request: its abort drops the ones
 * not used, and an answer that arrives after it is ignored.
 *
 * Many batches (of many requests) are in flight per peer at once,
 * correlated by seq; nothing waits on a round trip.
 *
 * Completion: when a rank's completed == total and its last batch is done
 * (a zero-chunk last batch included), exactly one ProxyNotif for that rank
 * and one PUT_DONE event for its agent.
 *
 * Abort (cancel, agent gone, peer failed, protocol error, timeout):
 *   1. wake_alloc(tag) (blocked allocations return -ECANCELED);
 *   2. staging of every batch that has no write posted is freed at once;
 *      a later AllocResponse for such a batch is ignored (counted);
 *   3. once no write of the request is in flight (they complete or fail),
 *      CancelNotif to the peer (unless the peer itself failed, or no
 *      AllocRequest of the request was ever sent to it), and one
 *      PUT_FAILED event for the agent (unless the agent is gone);
 *      ProxyNotif with a failure status only with notify_failures.
 *   The (req_id, rank) stays tombstoned for tombstone_ns: later batches of
 *   it are refused (-ECANCELED) and their staging freed.
 *
 * The engine reports what to do through ops callbacks, called synchronously
 * from within pd_tx_* calls; a callback must not call back into the engine.
 * Arrays passed to callbacks are valid only during the call.
 *
 * Who tells the agent: agent_event is emitted only for requests the engine
 * holds. When pd_tx_submit returns -EINVAL, -ENOMEM, -EBUSY or -ENOENT no
 * request was touched and the caller reports the failure; on -EPROTO the engine
 * failed the request (PUT_FAILED follows through agent_event); on
 * -ECANCELED the request had already ended and been reported.
 * A request ended (done or failed) stays tombstoned for tombstone_ns:
 * batches of a failed one get -ECANCELED, of a completed one -EPROTO.
 */
#include <stdint.h>

#include <pdkv/types.h>

#include "pd_stats.h"

struct pd_tx;

/* One chunk of a batch, as the agent described it. */
struct pd_tx_chunk {
	pd_slot_ref slot;              /* staging slot (send pool) */
	uint32_t len;                  /* payload bytes */
	uint8_t klen;                  /* 1..PD_KEY_MAX */
	uint8_t key[PD_KEY_MAX];
};

/* A batch submitted by an agent (pd_put). */
struct pd_tx_submit {
	uint32_t agent;                /* agent id (who gets events) */
	uint64_t tag;                  /* request tag for wake_alloc */
	uint32_t peer;                 /* receiver broker id (the broker maps endpoints to ids) */
	const uint8_t *req_id;
	uint32_t req_id_len;           /* 1..PD_REQ_ID_MAX */
	uint32_t rank;
	uint32_t world_size;           /* >= 1, rank < world_size */
	uint32_t total_chunks;         /* this rank's declared total for the request */
	uint32_t is_last;              /* 0/1; the last batch brings the sum of n to total_chunks */
	uint32_t n;                    /* chunks in this batch, 0..PD_TX_MAX_BATCH */
	const struct pd_tx_chunk *chunks;
};

/* A request declared before any of it is staged (pd_declare). */
struct pd_tx_declare {
	uint32_t agent;                /* agent id (who gets events) */
	uint64_t tag;                  /* request tag for wake_alloc */
	uint32_t peer;                 /* receiver broker id */
	const uint8_t *req_id;
	uint32_t req_id_len;           /* 1..PD_REQ_ID_MAX */
	uint32_t rank;
	uint32_t world_size;           /* >= 1, rank < world_size */
	uint32_t total_chunks;         /* this rank's total; 0: nothing to send (admitted at once) */
	uint64_t timeout_ns;           /* admission deadline from now; 0: alloc_timeout_ns */
};

/* What a callback sees of a batch (n = 0 for a Reserve). */
struct pd_tx_batch_view {
	uint64_t seq;
	uint32_t peer;
	const uint8_t *req_id;
	uint32_t req_id_len;
	uint32_t rank;
	uint32_t world_size;
	uint32_t total_chunks;
	uint32_t is_last;
	uint32_t n;
	const struct pd_tx_chunk *chunks;
	const int32_t *remote;         /* write: remote index per chunk, -1 = skip (already sent) */
	const uint32_t *gens;          /* write: the generation each remote slot was granted at
					* (0: not said, or before the response) */
	uint32_t grants;               /* Reserve: slots asked with the admission (0: none) */
	uint32_t bind;                 /* 1: written on grants of the admission; its PutDone
					* names each chunk's key and length */
};

/* Final status of a rank's request, for events and ProxyNotif. */
struct pd_tx_result {
	uint32_t agent;
	uint32_t peer;
	const uint8_t *req_id;
	uint32_t req_id_len;
	uint32_t rank;
	uint32_t world_size;
	int32_t status;                /* 0, or a negative errno */
	uint32_t chunks;               /* completed */
	uint64_t bytes;                /* completed */
};

struct pd_tx_ops {
	/* Send an AllocRequest for this batch (seq set). */
	void (*send_alloc)(void *ctx, const struct pd_tx_batch_view *b);
	/* Send a Reserve (seq, req_id, rank, world_size, total_chunks, grants
	 * set; n = 0): the peer answers it like an AllocRequest, with at most
	 * grants indexes. */
	void (*send_reserve)(void *ctx, const struct pd_tx_batch_view *b);
	/* The request is admitted (status 0, chunks = its total): the agent
	 * may stage it. At most once per request, before any other event. */
	void (*admitted)(void *ctx, const struct pd_tx_result *r);
	/* Post the writes of this batch (remote set): 0, and the outcome is reported
	 * later with pd_tx_write_done(); or a negative errno when nothing was
	 * posted: the request fails with it at once (no pd_tx_write_done then).
	 * Not called when every chunk is already sent: the batch completes. */
	int (*write)(void *ctx, const struct pd_tx_batch_view *b);
	/* Return staging slots to the send pool. */
	void (*free_slots)(void *ctx, const pd_slot_ref *refs, uint32_t n);
	/* PutDone to the peer: these remote indexes hold their data (n >= 1;
	 * not called for a batch that wrote nothing). */
	void (*put_done)(void *ctx, const struct pd_tx_batch_view *b, const int32_t *idx,
			 uint32_t n);
	/* CancelNotif to the peer (only when an AllocRequest of the request was sent). */
	void (*cancel_notif)(void *ctx, uint32_t peer, const uint8_t *req_id, uint32_t len,
			     uint32_t rank);
	/* ProxyNotif (status 0), or a failure one (only with notify_failures). */
	void (*proxy_notif)(void *ctx, const struct pd_tx_result *r);
	/* PUT_DONE (status 0) or PUT_FAILED event for the agent. */
	void (*agent_event)(void *ctx, const struct pd_tx_result *r);
	/* Wake allocations blocked on this request tag (-ECANCELED). */
	void (*wake_alloc)(void *ctx, uint64_t tag);
};

#define PD_TX_MAX_BATCH 4096u

struct pd_tx_opts {
	const struct pd_tx_ops *ops;
	void *ctx;
	uint32_t max_requests;         /* >= 1; live + tombstoned; beyond: -EBUSY */
	uint64_t alloc_timeout_ns;     /* no AllocResponse by then: the request fails
					* (-ETIMEDOUT); 0 = no deadline */
	uint64_t tombstone_ns;         /* how long an ended (req_id, rank) refuses batches */
	uint32_t notify_failures;      /* 0/1 */
	uint32_t admit_grants;         /* slots a Reserve asks with the admission (at most the
					* rank's total, PD_TX_MAX_BATCH); 0: none */
};

struct pd_tx_stats {
	uint64_t batches;              /* AllocRequests sent */
	uint64_t pregranted;           /* batches written on grants of the admission (no
					* AllocRequest) */
	uint64_t declared, admitted;   /* requests declared; of them, admitted */
	uint64_t chunks, bytes;        /* completed (written, or already at the receiver) */
	uint64_t requests_done, requests_failed;
	uint64_t requests_cancelled;   /* cancel and agent_gone */
	uint64_t stale_responses;      /* AllocResponses for unknown or dead batches */
	uint64_t refused;              /* submits refused after validation (staging freed) */
	uint64_t live_requests, live_batches, writes_in_flight; /* gauges */
	uint64_t admitting;            /* gauge: declared, waiting for admission */
	uint64_t tombstones;           /* gauge: ended requests still remembered */
};

/* @return 0; -EINVAL (NULL, an op missing, max_requests 0, notify_failures > 1); -ENOMEM.
 * The ops table is copied. */
int pd_tx_create(const struct pd_tx_opts *o, struct pd_tx **out);
/* Frees everything without callbacks (the broker is exiting). NULL-safe. */
void pd_tx_destroy(struct pd_tx *tx);

/**
 * A request declared by an agent, before any staging. Assigns a seq and
 * calls send_reserve (or, with total_chunks 0, admitted at once); the
 * answer is an AllocResponse of that seq (pd_tx_alloc_resp): admitted
 * (admitted op) or failed (PUT_FAILED). No answer within the deadline:
 * the request fails with -ETIMEDOUT (CancelNotif to the peer).
 * @return 0; -EINVAL bad fields; -EEXIST (req_id, rank) is known (live or
 *         ended recently); -EBUSY too many requests; -ENOMEM; -ECANCELED
 *         the request was cancelled before this rank was declared (the
 *         engine reported it: PUT_FAILED -ECANCELED). On the other errors
 *         the caller reports the failure.
 */
int pd_tx_declare(struct pd_tx *tx, const struct pd_tx_declare *d, uint64_t now_ns);

/**
 * A batch from an agent. Assigns a seq and calls send_alloc. A zero-chunk
 * batch must have is_last set; it sends nothing and only marks the last
 * batch as seen.
 * @return 0; -EINVAL bad fields (NULLs, lengths, rank >= world_size, a
 *         zero-chunk batch not last, n > PD_TX_MAX_BATCH, klen 0);
 *         -ENOENT (req_id, rank) was never declared (staging freed);
 *         -ECANCELED (req_id, rank) failed or cancelled (the batch's
 *         staging is freed); -EPROTO inconsistent with itself or earlier
 *         batches (other agent, peer, world_size or total, a batch after
 *         the last one, more chunks than declared, a last batch leaving
 *         fewer, a batch before the request is admitted): the request
 *         fails (or, completed, stays so); -ENOMEM.
 * On every error except -EINVAL/-ENOMEM the staging slots are freed
 * through free_slots; on -EINVAL/-ENOMEM the caller keeps them.
 */
int pd_tx_submit(struct pd_tx *tx, const struct pd_tx_submit *s, uint64_t now_ns);

/* An AllocResponse (a struct: more than six parameters otherwise). */
struct pd_tx_resp {
	uint32_t peer;                 /* who sent it */
	uint64_t seq;
	int32_t err;                   /* 0, or a negative errno from the receiver */
	uint32_t n;
	const int32_t *remote;         /* n remote indexes, one per chunk in order; < 0 = failed */
	const uint32_t *gens;          /* NULL, or n: the generation each was granted at */
	uint32_t nalready;
	const int32_t *already_sent;   /* positions (0..n-1) the receiver already holds */
};

/**
 * The AllocResponse for seq from peer. Positions in already_sent need no
 * write (their remote index is ignored) and count as completed. err != 0:
 * the request fails with err (err > 0: with -EPROTO); a failed remote
 * index (< 0) at a position to write: with -ENOBUFS. For the seq of a
 * Reserve: err 0 admits the request, with the grants its indexes (and
 * gens) carry; more indexes than the Reserve asked for, a failed one or
 * already_sent positions fail it (-EPROTO).
 * @return 0 (also when the response failed the request); -EINVAL NULLs;
 *         -ENOENT unknown/stale seq, another peer, or a second response
 *         (ignored, counted); -EPROTO the response does not match the
 *         batch (n differs, an already_sent position out of range or
 *         repeated): the request fails.
 */
int pd_tx_alloc_resp(struct pd_tx *tx, const struct pd_tx_resp *r, uint64_t now_ns);

/* All writes of batch seq completed (rc 0) or one failed (rc < 0; rc > 0 is
 * taken as -EIO). @return 0; -EINVAL NULL; -ENOENT unknown seq or no write
 * of it in flight. */
int pd_tx_write_done(struct pd_tx *tx, uint64_t seq, int rc, uint64_t now_ns);

/* Cancel (req_id, rank), or every rank of req_id when rank == PD_TX_ANY_RANK.
 * Idempotent. @return requests newly aborted (0 when none); -EINVAL. */
#define PD_TX_ANY_RANK UINT32_MAX
int pd_tx_cancel(struct pd_tx *tx, const uint8_t *req_id, uint32_t len, uint32_t rank,
		 uint64_t now_ns);

/* The agent is gone: abort its requests (status -ECANCELED), no events to
 * it (also for those already aborting). @return requests newly aborted;
 * -EINVAL. */
int pd_tx_agent_gone(struct pd_tx *tx, uint32_t agent, uint64_t now_ns);
/* The peer failed (dead, restarted, QP error): its requests fail with err
 * (< 0), no CancelNotif (also for those already aborting); staging of
 * posted writes is freed as they complete. @return requests newly failed;
 * -EINVAL. */
int pd_tx_peer_failed(struct pd_tx *tx, uint32_t peer, int err, uint64_t now_ns);
/* Deadlines: AllocResponses overdue, tombstones expired. @return requests
 * failed; -EINVAL. Costs O(expired): deadlines are kept in arrival order. */
int pd_tx_tick(struct pd_tx *tx, uint64_t now_ns);

/* NULL-safe (then *out is zeroed, when out is not NULL). */
void pd_tx_get_stats(const struct pd_tx *tx, struct pd_tx_stats *out);
/* Completed requests: first batch -> done. */
const struct pd_stat_hist *pd_tx_req_hist(const struct pd_tx *tx);

/* One (req_id, rank), for listings (pdctl requests). */
#define PD_TX_INFO_ALLOCATING 1u /* a batch waits for its AllocResponse */
#define PD_TX_INFO_WRITING    2u /* writes in flight */
#define PD_TX_INFO_IDLE       3u /* waiting for the agent's next batch */
#define PD_TX_INFO_DRAINING   4u /* failed; waits for its posted writes */
#define PD_TX_INFO_DECLARED   5u /* declared; its Reserve waits for admission */
struct pd_tx_info {
	const uint8_t *req_id;
	uint32_t req_id_len;
	uint32_t rank, peer, state;  /* PD_TX_INFO_* */
	uint32_t total, completed;
	uint64_t start_ns;
};

/* Full consistency check (tests): every batch belongs to an admitted live
 * request, the gauges agree with the lists. 0 or -EPROTO. */
int pd_tx_check(const struct pd_tx *tx);

/* Call fn for every live request (not tombstones), oldest first. */
void pd_tx_foreach(const struct pd_tx *tx, void (*fn)(void *ctx, const struct pd_tx_info *i),
		   void *ctx);

#endif
