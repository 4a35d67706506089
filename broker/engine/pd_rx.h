/* SPDX-License-Identifier: MIT */
#ifndef PD_BROKER_PD_RX_H
#define PD_BROKER_PD_RX_H

/*
 * Receiver request engine: pure logic driven
 * by events; no sockets, no threads, no clock of its own. It grants slots of
 * the recv pool (shm) and publishes chunks in the recv index (shm), so
 * decode agents find them. The broker's control thread owns it.
 *
 * Request (keyed by req_id; an empty req_id makes a one-batch request of
 * its own, keyed by nothing):
 *   first AllocRequest of any rank -> admission of total_chunks x world_size
 *   (gang) -> WAITING or ACTIVE; batches that arrive while WAITING are held
 *   and answered on admission, in order -> per batch: a slot per new key, a
 *   pin per key already present (dedup: reported in already_sent) -> PutDone
 *   commits chunks -> READY when every chunk it needs (pinned ones
 *   included) is committed -> released by the decode side -> slots freed.
 *
 * Failure rolls the whole request back (every slot it holds freed, every
 * pin dropped, its reservation given back): protocol violation (more
 * chunks than declared, a rank's last batch short, totals that disagree, a
 * PutDone for a slot it does not hold), grant failure, the peer failing,
 * admission timeout, recv-ttl without progress or release. A request whose
 * pinned key's writer fails before writing it fails too. CancelNotif frees
 * exactly what the request holds, is idempotent, and leaves a tombstone
 * that refuses late batches for tombstone_ns.
 */
#include <stdint.h>

#include <pdkv/types.h>

#include "pd_admit.h"
#include "pd_index.h"
#include "pd_slots.h"

struct pd_rx;

/* A byte string borrowed from the caller. */
struct pd_rx_key {
	const uint8_t *p;
	uint32_t len;
};

/* One AllocRequest. */
struct pd_rx_alloc {
	uint32_t peer;
	uint64_t seq;
	const uint8_t *req_id;
	uint32_t req_id_len;
	uint32_t nkeys;              /* 0..PD_RX_MAX_BATCH */
	const struct pd_rx_key *keys;
	const uint32_t *lens;        /* may be NULL */
	uint32_t total_chunks;       /* this rank's declared total */
	uint32_t world_size;         /* 1..PD_RX_MAX_RANKS */
	uint32_t rank;
	uint32_t is_last;
	uint32_t reserve;            /* 1: a Reserve (pd_rx_reserve()), no keys */
	uint32_t grants;             /* Reserve: slots to grant with the admission answer */
};

/* A Reserve: one sender rank declares its total before any batch. */
struct pd_rx_reserve {
	uint32_t peer;
	uint64_t seq;
	const uint8_t *req_id;
	uint32_t req_id_len;         /* 1..PD_REQ_ID_MAX */
	uint32_t total_chunks;       /* this rank's total, >= 1 */
	uint32_t world_size;         /* 1..PD_RX_MAX_RANKS */
	uint32_t rank;
	uint32_t grants;             /* 0..total_chunks: slots granted with the admission
				      * answer, for the rank's first chunks (keyless until a
				      * PutDone binds them: pd_rx_bind()) */
};

/* What callbacks see of a request. */
struct pd_rx_req_view {
	const uint8_t *req_id;
	uint32_t req_id_len;
	uint64_t tag;                /* unique per request (index entries carry it) */
	uint32_t need;               /* total_chunks x world_size */
	uint32_t committed;
	uint32_t admitted;           /* 1: it was admitted (0: failed while waiting) */
};

struct pd_rx_ops {
	/* AllocResponse for (peer, seq): err 0 with remote[n] (slot index per
	 * key) and already[nalready] (positions deduplicated), or err < 0. */
	void (*reply)(void *ctx, uint32_t peer, uint64_t seq, int32_t err, const int32_t *remote,
		      uint32_t n, const int32_t *already, uint32_t nalready);
	/* Every chunk of the request is in place. */
	void (*ready)(void *ctx, const struct pd_rx_req_view *r);
	/* The request failed or was cancelled (err); wake its decode waiters. */
	void (*failed)(void *ctx, const struct pd_rx_req_view *r, int32_t err);
};

#define PD_RX_MAX_BATCH 4096u
#define PD_RX_MAX_RANKS 64u

struct pd_rx_opts {
	struct pd_pool *pool;        /* recv pool (borrowed; the engine is its only allocator) */
	struct pd_index *index;      /* recv index (borrowed) */
	const struct pd_rx_ops *ops;
	void *ctx;
	uint32_t owner;              /* owner id the engine's slots carry */
	uint32_t max_requests;       /* live + tombstoned */
	uint64_t admission_timeout_ns;
	uint64_t ttl_ns;             /* no progress and no release for this long: reclaimed */
	uint64_t tombstone_ns;
	uint64_t max_held_bytes;     /* keys of batches held while waiting, in total */
	/* Per peer (the peer of a request's first message), 0 no cap: requests
	 * it holds, live, waiting or tombstoned (a number or PD_RX_FAIR_SHARE);
	 * slots its live and waiting requests need (a number). Admission is
	 * fair between peers whatever the caps (pd_admit.h). */
	uint32_t peer_max_requests;
	uint32_t peer_max_slots;
	uint32_t max_peers;          /* ids below are accounted apart, above share one (0: 1024) */
	/* Preemption (0: off): a request waiting first for PD_RX_PREEMPT_WAIT_NS,
	 * of a peer below its share of the pool (recv slots / peers with
	 * demand), fails with -EBUSY the admitted requests of peers above
	 * theirs that moved nothing for preempt_idle_ns, least recently active
	 * first, at most PD_RX_PREEMPT_MAX a tick: what a peer holds and never
	 * writes cannot starve the others until the TTL. */
	uint64_t preempt_idle_ns;
};

#define PD_RX_PREEMPT_WAIT_NS (1000ull * 1000 * 1000)
#define PD_RX_PREEMPT_MAX     64u

/* A fair share of requests: max_requests / (peers holding requests + 1),
 * the asking one included, so a share is always left for a peer not seen
 * yet. A peer's first request is never refused for a cap. */
#define PD_RX_FAIR_SHARE UINT32_MAX

/* Most expiries (admission, TTL, tombstones, each) one pd_rx_tick() does;
 * the rest wait for the next tick, so a flood never stalls the loop. */
#define PD_RX_TICK_BUDGET 4096u

struct pd_rx_stats {
	uint64_t batches, reserves, granted, deduped, committed;
	uint64_t pregranted;         /* of granted: with the admission answer (keyless) */
	uint64_t bound;              /* of those: bound to their key by a PutDone */
	uint64_t ready, released, failed, cancelled, ttl_reclaimed;
	uint64_t rejected_tomb, rejected_zero, rejected_big, rejected_busy;
	uint64_t rejected_foreign;   /* a peer not part of a request tried to change it */
	uint64_t rejected_peer_requests, rejected_peer_slots; /* over the peer's share */
	uint64_t preempted;          /* failed -EBUSY for another peer's share */
	uint64_t pool_repairs;       /* the recv pool's shared copy repaired from the records */
	uint64_t release_waits;      /* a decode rank's release kept for its group's others */
	uint64_t proto_errors, grant_errors, late_putdone;
	uint64_t live_requests, waiting_requests; /* gauges */
};

int pd_rx_create(const struct pd_rx_opts *o, struct pd_rx **out);
/* Frees the engine's memory; slots and index entries are left to the
 * caller (the segment goes with the broker). NULL-safe. */
void pd_rx_destroy(struct pd_rx *rx);

/**
 * An AllocRequest. The answer comes through ops->reply, now or (while the
 * request waits for admission) later.
 * @return 0 answered (possibly with an error reply); 1 held until
 *         admission; -EINVAL malformed (answered with an error reply).
 */
int pd_rx_alloc(struct pd_rx *rx, const struct pd_rx_alloc *a, uint64_t now_ns);

/**
 * A Reserve (the sender declares a request before staging it). The first
 * rank's Reserve asks admission for the whole request, as a first
 * AllocRequest does (gang: total_chunks x world_size); a later rank's
 * joins it. It is answered through ops->reply with no indexes once the
 * request is admitted (at once when it already is), or with an error:
 * -E2BIG larger than the pool, -EBUSY too many requests, -ECANCELED
 * tombstoned, -ETIMEDOUT not admitted in time, -EPROTO a rank reserved
 * twice, after its batches, or totals that disagree (the request is rolled
 * back). Batches of the rank must then agree with it. With grants, the
 * admitting answer carries that many slots, drawn from the reservation
 * and counted as the rank's first chunks: its AllocRequests then declare
 * only the chunks after them.
 * @return 0 answered; 1 held until admission; -EINVAL malformed (answered).
 */
int pd_rx_reserve(struct pd_rx *rx, const struct pd_rx_reserve *q, uint64_t now_ns);

/**
 * PutDone from peer: the data of these slots is in place.
 * @return 0; -ENOENT no live request holds them (late, counted);
 *         -EPROTO a slot not granted to that peer and request (the
 *         request is rolled back).
 */
int pd_rx_put_done(struct pd_rx *rx, uint32_t peer, const uint8_t *req_id, uint32_t len,
		   const int32_t *slots, uint32_t n, uint64_t now_ns);

/**
 * PutDone for slots granted with the admission (pd_rx_reserve() grants):
 * the data is in place, and slot i now holds key i (lens[i] bytes). Each
 * key is published and committed; a key the index already holds (of
 * another request) is pinned instead and the slot freed, as an
 * AllocRequest would have deduplicated it.
 * @return 0; -ENOENT no live request holds them (late, counted); -EPROTO
 *         a slot not granted to that peer and request with the admission,
 *         or already bound, a key twice in the request; -EBUSY, -ENOSPC
 *         the index cannot take a key (each rolls the request back).
 */
int pd_rx_bind(struct pd_rx *rx, uint32_t peer, const uint8_t *req_id, uint32_t len,
	       const int32_t *slots, const struct pd_rx_key *keys, const uint32_t *lens,
	       uint32_t n, uint64_t now_ns);

/* pdctl cancel: roll back, tombstone. Idempotent.
 * @return 1 a request was cancelled, 0 none was live. */
int pd_rx_cancel(struct pd_rx *rx, const uint8_t *req_id, uint32_t len, uint64_t now_ns);

/* A CancelNotif from peer: as pd_rx_cancel(), only by a peer that is part
 * of the request (it sent or reserved a rank of it); anyone else's is
 * refused and counted (rejected_foreign), the request untouched.
 * @return 1; 0 none live; -EPERM not that peer's request. */
#define PD_RX_ANY_PEER UINT32_MAX
int pd_rx_cancel_from(struct pd_rx *rx, uint32_t peer, const uint8_t *req_id, uint32_t len,
		      uint64_t now_ns);

/* The decode side consumed the request: free its slots. A decode group of
 * nranks tensor-parallel ranks (2..PD_RX_RELEASE_RANKS) consumes it when
 * each of its ranks has released it: rank's release is kept until then
 * (0 returned, nothing freed); nranks 1 (or a rank out of range) frees at
 * once, as before groups.
 * @return 0; -ENOENT unknown; -EBUSY not READY yet. */
#define PD_RX_RELEASE_RANKS 64u
int pd_rx_release(struct pd_rx *rx, const uint8_t *req_id, uint32_t len, uint32_t rank,
		  uint32_t nranks, uint64_t now_ns);

/* A peer failed: roll back every request it sent to. @return count. */
int pd_rx_peer_failed(struct pd_rx *rx, uint32_t peer, uint64_t now_ns);

/* Decode agents dropped pins: free the chunks nobody pins any more (and
 * admit what then fits) now rather than at the next tick. NULL-safe. */
void pd_rx_reap(struct pd_rx *rx, uint64_t now_ns);

/* Admission timeouts, recv-ttl, tombstone expiry. @return requests failed. */
int pd_rx_tick(struct pd_rx *rx, uint64_t now_ns);

/* The generation slot was last granted at (what its writes and PutDone
 * must carry); 0 for a slot out of range or never granted. */
uint32_t pd_rx_slot_gen(const struct pd_rx *rx, uint32_t slot);

/* What peer holds: requests (live, waiting, tombstoned) and slots of demand. */
void pd_rx_share_get(const struct pd_rx *rx, uint32_t peer, uint32_t *nreq, uint32_t *demand);

/* Where a request stands (for decode agents asking). */
#define PD_RX_UNKNOWN 0u
#define PD_RX_WAITING 1u
#define PD_RX_ACTIVE  2u
#define PD_RX_READY   3u
#define PD_RX_ENDED   4u /* released (status 0), failed or cancelled (status < 0) */

/* @return PD_RX_*; v (may be NULL) filled unless UNKNOWN; *status set for ENDED. */
uint32_t pd_rx_state(struct pd_rx *rx, const uint8_t *req_id, uint32_t len,
		     struct pd_rx_req_view *v, int32_t *status);

void pd_rx_get_stats(const struct pd_rx *rx, struct pd_rx_stats *out);
/* Histograms: admission wait, and admitted -> READY. */
const struct pd_stat_hist *pd_rx_wait_hist(const struct pd_rx *rx);
const struct pd_stat_hist *pd_rx_xfer_hist(const struct pd_rx *rx);

/* One request, for listings (pdctl requests). */
struct pd_rx_info {
	const uint8_t *req_id;
	uint32_t req_id_len;
	uint32_t state;              /* PD_RX_WAITING, _ACTIVE, _READY */
	uint32_t peer;               /* the first sender rank's peer, UINT32_MAX: none yet */
	uint32_t need, committed;
	uint64_t since_ns;           /* its first AllocRequest */
};

/* Call fn for every live request (not tombstones), in no set order. */
void pd_rx_foreach(const struct pd_rx *rx, void (*fn)(void *ctx, const struct pd_rx_info *i),
		   void *ctx);
const struct pd_admit *pd_rx_admit(const struct pd_rx *rx);
/* Full consistency check (tests): admission invariant, every live slot
 * held by exactly the chunks that say so, counts agree. 0 or -EPROTO. */
int pd_rx_check(const struct pd_rx *rx);

#endif
