/* SPDX-License-Identifier: MIT */
#ifndef PD_INCLUDE_PDKV_AGENT_H
#define PD_INCLUDE_PDKV_AGENT_H

/*
 * libpdagent: what a worker process (one per tensor-parallel rank) uses to
 * hand KV chunks to its node's broker (prefill) or read them from it
 * (decode). The broker is pdbroker (one per node); see docs/design.md.
 *
 * Conventions: every int function returns >= 0 on success and a negative
 * errno on failure (see <pdkv/types.h>). The library is silent (it prints
 * nothing unless PD_LOG_LEVEL / pd_agent_set_log_fn() asks), never exits,
 * never installs signal handlers. When the broker goes away every blocked
 * call returns -ENOTCONN promptly (within about a second) and later calls
 * return -ENOTCONN at once. The same holds for an agent the broker fenced
 * (it held a loan or a pin past its lease, see --loan-timeout) without
 * killing it: detach it, which gives back what it still holds.
 *
 * Thread-safety: one struct pd_agent may be used from several threads,
 * except pd_put(), which one thread at a time calls (one submission ring
 * per agent: give each producer thread its own agent, or serialise).
 *
 * Slots move by loan -> submit, or loan -> release: pd_alloc() loans slots;
 * exactly one of pd_put() (the broker takes them) or pd_slot_release()
 * ends the loan. A pointer from pd_slot_data() is valid only while the
 * loan lasts.
 *
 * Timeouts: every timeout_ms counts from the call; 0 means "do not wait"
 * for the calls (each says what it does then) and "the default" in the
 * structs (pd_agent_opts.attach_timeout_ms, pd_decl.timeout_ms).
 *
 * ABI growth, one convention per kind of struct:
 *  - struct pd_agent_opts is versioned by opts_size: fill it with
 *    pd_agent_opts_init(&o, sizeof(o)). New fields go at its end only. A
 *    caller built against an older, smaller struct passes its smaller
 *    size: the library reads the fields that fit and takes the defaults
 *    for the rest; bytes past the fields this library knows must be zero.
 *  - The structs passed to a call or filled by it (pd_decl, pd_batch,
 *    pd_chunk, pd_event, pd_recv_info) have fixed sizes and end in
 *    reserved bytes; new fields are carved from them, and a zero field
 *    always means the behaviour of the versions before it. Callers zero
 *    them (a designated initialiser, = { 0 } or memset does): the library
 *    refuses (-EINVAL) a pd_decl, pd_batch or pd_chunk whose reserved
 *    bytes are not zero, and zeroes them in what it fills.
 *
 * Logging: silent by default. PD_LOG_LEVEL=err|warn|info|debug turns the
 * library's lines on, of that level and the levels above it, to stderr,
 * or to the file PD_LOG_FILE names (appended); both are read once per
 * process, at the first pd_agent_attach(), and PD_LOG_FILE alone turns
 * nothing on. pd_agent_set_log_fn() (or pd_agent_opts.log_fn) routes one
 * agent's lines to a function instead: its own, and those the core it
 * links logs while running a call on that agent (a slot pool repaired
 * after a process died holding it, ...).
 */
#include <stddef.h>
#include <stdint.h>

#include <pdkv/types.h>

#ifdef __cplusplus
extern "C" {
#endif

struct pd_agent;

/**
 * Receives the library's log lines, one call per line.
 * @param ctx    the ctx given with the function.
 * @param level  PD_LOG_ERR, PD_LOG_WARN, PD_LOG_INFO or PD_LOG_DEBUG
 *               (<pdkv/types.h>): every level comes; filter here.
 * @param msg    "component: message", no newline; borrowed for the call.
 * Thread-safety: called on the thread that logs, from several threads at
 * once, sometimes with the library's locks held: it must not call into
 * libpdagent.
 */
typedef void pd_agent_log_fn(void *ctx, int level, const char *msg);

#define PD_AGENT_SEND 0x1u /* this rank sends (prefill) */
#define PD_AGENT_RECV 0x2u /* this rank receives (decode) */

struct pd_agent_opts {
	size_t opts_size;           /* the caller's sizeof(struct pd_agent_opts) */
	const char *broker;         /* broker name; NULL: $PDKV_BROKER, else "default" */
	const char *rundir;         /* NULL: $PDKV_RUNDIR, else the user's default
				     * rundir, then /run/pdkv (a root broker's) */
	uint32_t roles;             /* PD_AGENT_SEND | PD_AGENT_RECV; without SEND the
				     * send calls return -EINVAL and the send side
				     * is mapped read-only */
	uint32_t tp_rank;
	uint32_t tp_size;
	uint32_t attach_timeout_ms; /* waiting for a starting broker; 0: 5000 */
	uint32_t flags;             /* none defined: unknown bits -> -EINVAL */
	/* The fields above are mandatory (opts_size covers them at least). */
	pd_agent_log_fn *log_fn;    /* as pd_agent_set_log_fn(), from the attach on; NULL: none */
	void *log_ctx;              /* log_fn's ctx */
	/* New fields go here, at the end only. */
};

/**
 * Fill o with this library's defaults: zero everything in opts_size
 * bytes, set o->opts_size = opts_size, and set the defaults of the fields
 * that fit in opts_size (roles both, tp_size 1, attach_timeout_ms 5000).
 * A caller built against an older, smaller struct passes its own smaller
 * sizeof; one smaller than opts_size itself leaves o untouched.
 * @param o          caller memory of opts_size bytes; NULL: nothing.
 * @param opts_size  sizeof(struct pd_agent_opts) as the caller knows it.
 * Thread-safety: any thread.
 */
void pd_agent_opts_init(struct pd_agent_opts *o, size_t opts_size);

/**
 * Attach to the node's broker.
 * @param o    borrowed for the call; NULL: the defaults. o->opts_size says
 *             how much of it the caller has: at least up to flags, at most
 *             4096 bytes; the fields that fit are read, the rest are
 *             defaults; bytes past the fields this library knows must be 0.
 * @param out  set only on success.
 * @return 0; -EINVAL bad opts (opts_size too small or too large, unknown
 *         bytes not zero, bad roles, unknown flags, tp_size 0 or
 *         tp_rank not below it); -ENOENT no broker of
 *         that name; -ETIMEDOUT it did not answer in time; -EACCES
 *         refused (not the broker's user or group); -EUSERS refused: the
 *         broker has as many agents attached as its --max-agents allows
 *         (returned at once, not retried: attach again once one detached);
 *         -EPROTO incompatible broker; -ENOMEM.
 * Thread-safety: any thread.
 */
int pd_agent_attach(const struct pd_agent_opts *o, struct pd_agent **out);

/** Detach: loaned slots go back, pins are dropped. NULL-safe. No other
 *  call on a may run or follow. */
void pd_agent_detach(struct pd_agent *a);

/* ---- send side (prefill) ------------------------------------------------- */

/*
 * A prefill rank's request goes: pd_declare() when the engine schedules it
 * (its prompt length, hence its chunk count, is known then) -> the receiver
 * admits it (PD_EV_ADMITTED) -> per step pd_alloc(), copy in, pd_put() ->
 * PD_EV_PUT_DONE or PD_EV_PUT_FAILED.
 *
 * No staging slot is ever loaned to a request the receiver has not
 * admitted, and no call blocks on such a request: pd_alloc() of a request
 * still waiting for admission takes nothing and returns -EAGAIN (keep the
 * KV where it is, go on with the engine's other requests, come back at the
 * next step). So every staged chunk belongs to an admitted request, whose
 * slots at the receiver are reserved: staging always drains, and chunked
 * prefill cannot deadlock however many requests are in flight.
 */

/** A request as the engine schedules it, before any of it is staged. */
struct pd_decl {
	const char *req_id;         /* 1..PD_REQ_ID_MAX bytes */
	const char *endpoint;       /* decode broker's control endpoint, e.g. "tcp://10.0.0.2:17500" */
	uint32_t total_chunks;      /* this rank's chunks; 0: it sends none (admitted at once) */
	uint32_t world_size;        /* sender ranks of the request, 1..PD_WORLD_MAX */
	uint32_t rank;
	uint32_t timeout_ms;        /* admission deadline; 0: the broker's default */
	uint32_t flags;             /* none defined: 0 */
	uint8_t reserved[28];       /* 0 (see "ABI growth" above) */
};

/**
 * Declare this rank's part of a request; returns at once. The broker asks
 * the receiver for admission immediately, so admission overlaps the
 * prefill's compute: the first rank's declaration admits the whole request
 * (every rank, every chunk), the other ranks' join it. The answer is one
 * PD_EV_ADMITTED event, or the request's PD_EV_PUT_FAILED (refused: -E2BIG
 * larger than the receive pool, -EBUSY the receiver's request table full;
 * -ETIMEDOUT not admitted within the deadline; -ECANCELED; -ENOTCONN the
 * receiver is down). The batches of the rank must then carry the same
 * endpoint, total_chunks and world_size.
 * @param d  borrowed for the call.
 * @return 0; -EINVAL bad fields (reserved bytes not zero too) or not a
 *         sending agent; -EEXIST this rank
 *         of req_id is declared already (on this agent); -EAGAIN the
 *         submission ring is full (retry); -EBUSY this agent holds 65536
 *         requests not ended; -ENOTCONN.
 */
int pd_declare(struct pd_agent *a, const struct pd_decl *d);

#define PD_REQ_DECLARED 1 /* waiting for the receiver's admission */
#define PD_REQ_ADMITTED 2 /* admitted: pd_alloc() may loan it staging */
#define PD_REQ_DONE     3 /* every declared rank of it completed (PUT_DONE) */
#define PD_REQ_FAILED   4 /* it failed: *status says why */

/**
 * Where a request this agent declared stands; never blocks (it reads what
 * the broker has sent so far).
 * @param status  may be NULL; the failure for PD_REQ_FAILED, else 0.
 * @return PD_REQ_*; -ENOENT not declared on this agent (or ended long
 *         ago); -EINVAL; -ENOTCONN.
 */
int pd_req_state(struct pd_agent *a, const char *req_id, int32_t *status);

/**
 * Loan n staging slots for an admitted request req_id, all or nothing.
 * A request not admitted yet takes nothing: with timeout_ms 0 (do not
 * wait) the call returns -EAGAIN at once, and an admitted one gets its
 * slots only if n are free now, else -ETIMEDOUT at once; with a timeout
 * it first waits (at most that long) for the admission, holding nothing,
 * and only then for slots, behind earlier callers (FIFO) within what is
 * left of the timeout. The slots come from the agent's send pool: the
 * broker's one, or, on a broker with several (pdbroker --send-pools), the
 * one it gave this agent at attach, which only this agent's callers (and
 * any sender sharing it) wait in.
 * @param slots  n entries, written on success.
 * @return 0; -EAGAIN not admitted yet (nothing loaned: come back later);
 *         -ENOENT req_id was never declared (pd_declare); -ETIMEDOUT no
 *         staging in time (admitted, the pool busy); -ECANCELED the
 *         request was cancelled or failed, before or during the wait (its
 *         PD_EV_PUT_FAILED and pd_req_state() say why); -EALREADY the
 *         request completed; -E2BIG n exceeds the (agent's) send pool; -ENOTCONN
 *         the broker is gone; -EINVAL (also: not attached with
 *         PD_AGENT_SEND, or the broker has no send pool).
 */
int pd_alloc(struct pd_agent *a, const char *req_id, uint32_t n, pd_slot_ref *slots,
	     uint32_t timeout_ms);

/** Payload of a loaned slot (pd_slot_size() bytes), or NULL for a bad or stale ref. */
void *pd_slot_data(struct pd_agent *a, pd_slot_ref slot);

/** Bytes per slot. */
uint64_t pd_slot_size(const struct pd_agent *a);

/** End the loan of unsent slots. @return 0; -ESTALE (nothing released); -EINVAL. */
int pd_slot_release(struct pd_agent *a, const pd_slot_ref *slots, uint32_t n);

/** One chunk of a batch: a loaned slot holding len bytes, under key. */
struct pd_chunk {
	pd_slot_ref slot;
	uint32_t len;               /* <= pd_slot_size() */
	uint32_t klen;              /* 1..PD_KEY_MAX */
	const void *key;            /* borrowed for the call */
	uint8_t reserved[8];        /* 0 (see "ABI growth" above) */
};

/** The chunks one rank hands over in one scheduler step. */
struct pd_batch {
	const char *req_id;         /* 1..PD_REQ_ID_MAX bytes */
	const char *endpoint;       /* decode broker's control endpoint, e.g. "tcp://10.0.0.2:17500" */
	const struct pd_chunk *chunks;
	uint32_t n;                 /* may be 0 on the last batch */
	uint32_t total_chunks;      /* this rank's total for the request, the same in every batch */
	uint32_t world_size;        /* sender ranks of the request */
	uint32_t rank;
	uint32_t last;              /* 1 on the request's last batch */
	uint8_t reserved[20];       /* 0 (see "ABI growth" above) */
};

/**
 * Hand a batch of a declared, admitted request to the broker; returns at
 * once. The slots' loans end here. The outcome arrives as one
 * PD_EV_PUT_DONE or PD_EV_PUT_FAILED event per request (after its last
 * batch): a batch of a request never declared fails with -ENOENT, one
 * that disagrees with the declaration with -EPROTO.
 * @return 0; -EAGAIN the submission ring is full (retry); -EINVAL bad
 *         batch, reserved bytes of it or of a chunk not zero included
 *         (nothing taken); -ESTALE a slot is not loaned to this agent
 *         (nothing taken); -ENOTCONN.
 */
int pd_put(struct pd_agent *a, const struct pd_batch *b);

/**
 * Abort a request from any thread, declared (admitted or not) or staging:
 * its blocked pd_alloc() calls return -ECANCELED, the broker drops its
 * queued batches, waits for writes in flight, then frees everything on
 * both sides (a reservation at the receiver is withdrawn). The whole request is
 * aborted, every rank of it on this broker: the other ranks' agents get
 * PUT_FAILED -ECANCELED (also for ranks whose first batch comes later).
 * Idempotent.
 * @return 0; -ENOTCONN; -EINVAL.
 */
int pd_cancel(struct pd_agent *a, const char *req_id);

#define PD_EV_PUT_DONE   1u /* every chunk of this rank is at the receiver */
#define PD_EV_PUT_FAILED 2u /* the request failed (status); it ends here */
#define PD_EV_ADMITTED   3u /* a declared request is admitted: stage it */

struct pd_event {
	uint32_t type;              /* PD_EV_* */
	int32_t status;             /* 0, or why it failed (-ECANCELED, -ETIMEDOUT, ...) */
	uint32_t chunks;            /* PUT_DONE: sent; ADMITTED: the rank's total */
	uint64_t bytes;
	char req_id[PD_REQ_ID_MAX + 1];
	uint8_t reserved[40];       /* written 0 (see "ABI growth" above) */
};

/**
 * Next event, waiting at most timeout_ms (0: do not wait: an event that
 * has arrived, else -ETIMEDOUT at once). Per declared rank: at most one
 * PD_EV_ADMITTED, then exactly one PD_EV_PUT_DONE or PD_EV_PUT_FAILED.
 * @param ev  written on success (all of it).
 * @return 0; -ETIMEDOUT; -ENOTCONN; -EINVAL.
 */
int pd_next_event(struct pd_agent *a, struct pd_event *ev, uint32_t timeout_ms);

/* ---- receive side (decode) ------------------------------------------------ */

struct pd_recv_info {
	uint32_t chunks;            /* chunks of the request (all sender ranks) */
	int32_t status;             /* 0 READY, or why it failed */
	uint8_t reserved[24];       /* written 0 (see "ABI growth" above) */
};

/**
 * Wait until every chunk of req_id (all sender ranks) is in place, or the
 * request failed, at most timeout_ms. 0: do not wait for the request:
 * ask the broker once whether it is complete or failed now (0) or not
 * (-ETIMEDOUT); its answer takes a round trip, or up to its tick (100
 * ms) when the request is not complete.
 * @param info  written when 0 is returned (all of it).
 * @return 0 (see info->status); -ETIMEDOUT; -EUSERS this agent has 1024
 *         waits at the broker at once (the broker's cap: wait again once
 *         some ended); -ENOTCONN; -EINVAL.
 */
int pd_recv_wait(struct pd_agent *a, const char *req_id, uint32_t timeout_ms,
		 struct pd_recv_info *info);

/**
 * Find a chunk that is in place and pin it (it stays valid until released).
 * Each pin is recorded in this agent's pin journal in the segment, so the
 * broker drops it if the process dies; the journal has a fixed number of
 * cells (pins held at once, all requests together).
 * @return 0 with *ptr / *len; -ENOENT not (yet) here; -EINVAL; -ENOSPC this
 *         agent holds as many pins as its journal records (release a
 *         request first): no pin taken; -ENOTCONN the broker is gone (as
 *         another call, or the segment's state, has seen).
 */
int pd_recv_lookup(struct pd_agent *a, const void *key, uint32_t klen, const void **ptr,
		   uint32_t *len);

/**
 * The request is consumed: drop this agent's pins and let the broker free
 * its slots (waiting admissions are re-evaluated). A decode group reads
 * one request from several ranks: agents attached with tp_size N > 1 (and
 * their tp_rank) are one group, and the request is consumed once each of
 * its N ranks has released it; until then a rank's release drops only its
 * own pins, so a rank that is done never takes away the chunks another
 * rank still reads. A rank that never releases leaves the request to the
 * broker's --recv-ttl.
 * @return 0; -ENOENT unknown request; -ENOTCONN.
 */
int pd_recv_release(struct pd_agent *a, const char *req_id);

/* ---- integration ---------------------------------------------------------- */

/**
 * A file descriptor (for poll, epoll, selectors) that is readable when an
 * event may be waiting: the broker has sent something since this agent
 * last read what it sent. Reading the events (pd_next_event() with timeout
 * 0 until -ETIMEDOUT, or any call that reads them) clears it; a wake-up
 * with nothing new is possible. Do not read or close it yourself.
 * @return the descriptor; -EINVAL.
 */
int pd_agent_fd(const struct pd_agent *a);

/**
 * Route a's log lines to fn: a's own and those the core logs on a thread
 * while it runs a call on a. Every level is passed (filter in fn); the
 * lines no longer go to PD_LOG_FILE or stderr. Lines logged outside any
 * agent's calls stay with PD_LOG_LEVEL / PD_LOG_FILE.
 * @param a    NULL: nothing.
 * @param fn   NULL: back to the default (PD_LOG_LEVEL / PD_LOG_FILE, else
 *             silent).
 * @param ctx  passed to fn; borrowed until fn is replaced or a detached.
 * Thread-safety: any thread, but not from within a log function. When it
 * returns, the function it replaces is not running and will not be
 * called again.
 */
void pd_agent_set_log_fn(struct pd_agent *a, pd_agent_log_fn *fn, void *ctx);

#ifdef __cplusplus
}
#endif
#endif
