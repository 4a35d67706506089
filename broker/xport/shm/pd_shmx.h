/* SPDX-License-Identifier: MIT */
#ifndef PD_BROKER_PD_SHMX_H
#define PD_BROKER_PD_SHMX_H

/*
 * Same-host shared-memory data transport:
 * the sender maps the receiving broker's recv payload arena and its data
 * threads copy staged chunks straight into the granted slots with memcpy.
 * Same shape as pd_tcp.h's sending side, so the broker can use either per
 * peer: connect, post, poll completions (eventfd), disconnect, stats.
 *
 * ---- Connecting: what is mapped and what is checked -------------------------
 * pd_shmx_connect() opens "/pdkv.<name>" read-write, attaches a read-only
 * view of it (pd_segment_attach_fd + pd_layout_open: magic, ABI, sizes,
 * region table, pool headers, all validated on private copies) and checks
 * the segment against what the peer's Hello said: the header's name is
 * <name>, its epoch is the Hello's (else -ESTALE: a segment left by an
 * older incarnation, or an impostor), its state is READY, it has a recv
 * pool whose nslots and slot_size are the Hello's recv_slots and slot_size
 * (else -EPROTO). Then only the recv payload arena (nslots * slot_size
 * bytes at its region offset) is mapped read-write, and the read-only view
 * is dropped: nothing but payload can ever be written through this
 * transport (slot headers, rings, the index and the header stay out of
 * reach, as they do for RDMA, which registers only the arenas).
 *
 * ---- Copies ----------------------------------------------------------------
 * pd_shmx_post() queues copies {cookie, src, len, slot}: bounds-checked
 * against the mapped geometry (slot < nslots, len <= slot_size), all or
 * nothing. A pool of data threads (opts.threads) takes them from one FIFO
 * and copies; each copy completes once, through a queue drained by
 * pd_shmx_poll(), whose eventfd is readable exactly while the queue is not
 * empty (level-triggered, as pd_tcp's). Idle threads sleep on a condvar:
 * no polling, no timer. Copies of one peer may complete out of order (two
 * threads); the caller tracks each by its cookie.
 *
 * status 0 means the bytes are in the peer's slot. There is no
 * acknowledgement from the receiver (it never sees the bytes arrive): the
 * control plane's PutDone, sent after the completions, is the signal.
 *
 * ---- Failure and disconnect ---------------------------------------------------
 * A memcpy cannot fail. What can go is the peer: pd_shmx_check() (the
 * owner calls it from its tick) finds a peer whose segment name no longer
 * names the mapped file (the broker exited and unlinked it, or restarted
 * and made a new one): that peer fails with -ECONNRESET: copies queued
 * complete with it at once, copies running finish their memcpy (into the
 * old mapping, which stays valid until disconnect: harmless) and complete
 * with it, and after the last of them one PD_CPL_PEER completion is
 * queued, as pd_tcp does for a failed peer. A failed peer accepts no more
 * copies (-ENOTCONN); the owner then disconnects it.
 *
 * pd_shmx_disconnect() is the requested end: copies queued complete with
 * -ECONNABORTED at once; it waits for copies running (they complete with
 * -ECONNABORTED too: "may or may not have landed"), then unmaps. No peer
 * completion is queued for it (unless the peer had failed before). Every
 * copy posted and accepted gets exactly one completion; every connect that
 * returned 0 gets at most one peer completion.
 *
 * ---- Trust ----------------------------------------------------------------------
 * The receiver cannot police these writes: the arena is plain memory. The
 * segment's file mode (0660, --group) is the boundary: whoever may open it
 * may write it anyway, with or without pdkv. The receiver's grant check
 * moves to the commit: a PutDone commits only slots granted to that peer
 * for that request. The sender trusts the receiver not to shrink its
 * segment under the mapping (a truncated file would fault the copying
 * thread with SIGBUS); pdkv brokers never do.
 *
 * ---- Threads and ownership -------------------------------------------------------
 * All pd_shmx_* functions are called from one thread, the owner (the
 * broker's control thread), except pd_shmx_event_fd() and
 * pd_shmx_get_stats(), which any thread may call. Data threads run with
 * every signal blocked, are stopped with a flag and a broadcast and
 * joined, never cancelled. Nothing allocates on the data path: copy
 * descriptors come from a pool sized at create (max_peers * (queue_depth +
 * 1)).
 */
#include <stddef.h>
#include <stdint.h>

#include "pd_cplq.h"

#define PD_SHMX_MAX_THREADS 64u
#define PD_SHMX_MAX_PEERS   1024u
#define PD_SHMX_MAX_DEPTH   65536u

struct pd_shmx_opts {
	uint32_t threads;              /* data threads, 1..PD_SHMX_MAX_THREADS (2) */
	uint32_t max_peers;            /* connected peers at once, 1..PD_SHMX_MAX_PEERS (16) */
	uint32_t queue_depth;          /* copies outstanding per peer, 1..PD_SHMX_MAX_DEPTH (1024) */
	uint32_t flags;                /* none defined: must be 0 */
};

/* The receiving broker, as its Hello describes it. */
struct pd_shmx_target {
	const char *name;              /* broker name: the segment is "/pdkv.<name>" */
	uint64_t slot_size;            /* its recv slot size */
	uint32_t recv_slots;           /* its recv pool's slots (>= 1) */
	uint64_t epoch;                /* its epoch: the segment's must be the same */
};

/* Completions are struct pd_cpl (pd_cplq.h): PD_CPL_WRITE, one posted copy
 * ended; PD_CPL_PEER, the peer failed (see above). */

/* Counters (monotonic, relaxed atomics; a snapshot is not one instant). */
#define PD_SHMX_STAT_FIELDS(X)                                                          \
	X(copies_ok)        /* copies completed with status 0 */                       \
	X(copies_failed)    /* copies completed with an error */                       \
	X(bytes)            /* payload bytes of the copies that completed with 0 */    \
	X(peer_failures)    /* PD_CPL_PEER completions queued */                       \
	X(connects)         /* segments mapped */                                      \
	X(connects_refused) /* connect refused (missing, stale, wrong geometry, ...) */ \
	X(wakeups)          /* data threads woken from their idle wait */

struct pd_shmx_stats {
#define PD_SHMX_STAT_U64(n) uint64_t n;
	PD_SHMX_STAT_FIELDS(PD_SHMX_STAT_U64)
#undef PD_SHMX_STAT_U64
};

struct pd_shmx;

/** Fill @o with the defaults given above. @o may not be NULL. */
void pd_shmx_opts_init(struct pd_shmx_opts *o);

/**
 * Create an instance: the completion eventfd, the copy pool and the data
 * threads (asleep until there is work).
 * @param o    borrowed (copied)
 * @param out  set only on success
 * @return 0; -EINVAL (NULL, a field out of range, unknown flags); -ENOMEM;
 *         -EMFILE (eventfd); -EAGAIN (threads).
 */
int pd_shmx_create(const struct pd_shmx_opts *o, struct pd_shmx **out);

/**
 * Disconnect every peer (their copies complete with -ECONNABORTED into the
 * queue, which pd_shmx_poll() still drains), then stop and join the data
 * threads. Idempotent. NULL-safe. Afterwards connect returns -ESHUTDOWN.
 */
void pd_shmx_stop(struct pd_shmx *s);

/** pd_shmx_stop(), then free everything; completions not polled are
 * dropped. NULL-safe. */
void pd_shmx_destroy(struct pd_shmx *s);

/**
 * Map a peer's recv payload arena after checking its segment (see above).
 * Blocks only for the open, the checks and the mmap (no page is touched).
 * @param peer   the caller's id for the peer (unique per instance)
 * @param t      borrowed
 * @param err    optional (may be NULL): why it was refused
 * @return 0; -EINVAL (NULL, bad name, zero geometry); -EEXIST (peer id in
 *         use); -ENOBUFS (max_peers connected); -EAGAIN (copy pool empty:
 *         poll completions first); -ESHUTDOWN; -ENOENT (no such segment:
 *         not this host, or not the same /dev/shm); -EACCES; -EPROTO (not a
 *         valid pdkv segment, not that broker's, no recv pool, or a
 *         geometry other than the Hello's); -ESTALE (another epoch);
 *         -ENOTCONN (the peer is not READY: starting or shutting down);
 *         -ENOMEM or another -errno from open/mmap.
 */
int pd_shmx_connect(struct pd_shmx *s, uint32_t peer, const struct pd_shmx_target *t,
		    char *err, size_t errlen);

/**
 * Fail the peer's queued copies with -ECONNABORTED, wait for its running
 * ones (they complete with -ECONNABORTED too), unmap. Every copy of the
 * peer has completed when this returns.
 * @return 0; -EINVAL (NULL); -ENOENT (no such peer).
 */
int pd_shmx_disconnect(struct pd_shmx *s, uint32_t peer);

/**
 * Queue @n copies to @peer, all or nothing. src stays loaned until each
 * copy's completion.
 * @return n (also 0 for n == 0); -EINVAL (NULL, n > queue_depth, a slot
 *         out of range, len > slot_size, NULL src with len > 0);
 *         -ENOENT (no such peer); -ENOTCONN (the peer failed: disconnect
 *         it); -EAGAIN (queue_depth or the copy pool full: poll, retry).
 */
int pd_shmx_post(struct pd_shmx *s, uint32_t peer, const struct pd_xfer *x, uint32_t n);

/**
 * Move up to @max completions into @c, oldest first.
 * @return the number moved (0..max); -EINVAL for NULL arguments.
 */
int pd_shmx_poll(struct pd_shmx *s, struct pd_cpl *c, uint32_t max);

/** The completion eventfd (readable while completions are pending; owned
 * by the instance), or -EINVAL for NULL. Any thread. */
int pd_shmx_event_fd(const struct pd_shmx *s);

/**
 * For every connected peer, check that its segment name still names the
 * file that is mapped; a peer whose name is gone or names another file
 * (exited, or restarted) fails with -ECONNRESET (see above). A handful of
 * system calls per peer: the owner calls it from its periodic tick.
 * @return peers newly failed (0..); -EINVAL for NULL.
 */
int pd_shmx_check(struct pd_shmx *s);

/** Snapshot of the counters; zeros for a NULL @s; @out may be NULL. Any thread. */
void pd_shmx_get_stats(const struct pd_shmx *s, struct pd_shmx_stats *out);

#endif
