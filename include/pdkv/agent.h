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
 * return -ENOTCONN at once.
 *
 * Thread-safety: one struct pd_agent may be used from several threads,
 * except pd_put(), which one thread at a time calls (one submission ring
 * per agent: give each producer thread its own agent, or serialise).
 *
 * Slots move by loan -> submit, or loan -> release: pd_alloc() loans slots;
 * exactly one of pd_put() (the broker takes them) or pd_slot_release()
 * ends the loan. A pointer from pd_slot_data() is valid only while the
 * loan lasts.
 */
#include <stddef.h>
#include <stdint.h>

#include <pdkv/types.h>

#ifdef __cplusplus
extern "C" {
#endif

struct pd_agent;

#define PD_AGENT_SEND 0x1u /* this rank sends (prefill) */
#define PD_AGENT_RECV 0x2u /* this rank receives (decode) */

struct pd_agent_opts {
	size_t opts_size;           /* set by pd_agent_opts_init() */
	const char *broker;         /* broker name; NULL: $PDKV_BROKER, else "default" */
	const char *rundir;         /* NULL: $PDKV_RUNDIR, else the broker's default */
	uint32_t roles;             /* PD_AGENT_SEND | PD_AGENT_RECV */
	uint32_t tp_rank;
	uint32_t tp_size;
	uint32_t attach_timeout_ms; /* waiting for a starting broker; 0: 5000 */
	uint32_t flags;             /* none defined: unknown bits -> -EINVAL */
	uint8_t reserved[32];       /* new fields go at the end only */
};

/** Fill o with defaults for this library version. NULL-safe. */
void pd_agent_opts_init(struct pd_agent_opts *o, size_t opts_size);

/**
 * Attach to the node's broker.
 * @param o    borrowed; NULL: defaults.
 * @param out  set only on success.
 * @return 0; -EINVAL bad opts; -ENOENT no broker of that name;
 *         -ETIMEDOUT it did not answer in time; -EACCES refused (not the
 *         broker's user or group); -EPROTO incompatible broker; -ENOMEM.
 */
int pd_agent_attach(const struct pd_agent_opts *o, struct pd_agent **out);

/** Detach: loaned slots go back, pins are dropped. NULL-safe. */
void pd_agent_detach(struct pd_agent *a);

/* ---- send side (prefill) ------------------------------------------------- */

/**
 * Loan n staging slots for request req_id, all or nothing, waiting behind
 * earlier callers (FIFO) at most timeout_ms.
 * @param slots  n entries, written on success.
 * @return 0; -E2BIG n exceeds the send pool; -ETIMEDOUT; -ECANCELED
 *         pd_cancel(req_id) meanwhile; -ENOTCONN; -EINVAL.
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
};

/**
 * Hand a batch to the broker; returns at once. The slots' loans end here.
 * The outcome arrives as one PD_EV_PUT_DONE or PD_EV_PUT_FAILED event per
 * request (after its last batch).
 * @return 0; -EAGAIN the submission ring is full (retry); -EINVAL bad
 *         batch (nothing taken); -ESTALE a slot is not loaned to this
 *         agent (nothing taken); -ENOTCONN.
 */
int pd_put(struct pd_agent *a, const struct pd_batch *b);

/**
 * Abort a request from any thread: its blocked pd_alloc() calls return
 * -ECANCELED, the broker drops its queued batches, waits for writes in
 * flight, then frees everything on both sides. The whole request is
 * aborted, every rank of it on this broker: the other ranks' agents get
 * PUT_FAILED -ECANCELED (also for ranks whose first batch comes later).
 * Idempotent.
 * @return 0; -ENOTCONN; -EINVAL.
 */
int pd_cancel(struct pd_agent *a, const char *req_id);

#define PD_EV_PUT_DONE   1u
#define PD_EV_PUT_FAILED 2u

struct pd_event {
	uint32_t type;              /* PD_EV_* */
	int32_t status;             /* 0, or why it failed (-ECANCELED, -ETIMEDOUT, ...) */
	uint32_t chunks;
	uint64_t bytes;
	char req_id[PD_REQ_ID_MAX + 1];
};

/** Next event, waiting at most timeout_ms. @return 0; -ETIMEDOUT; -ENOTCONN. */
int pd_next_event(struct pd_agent *a, struct pd_event *ev, uint32_t timeout_ms);

/* ---- receive side (decode) ------------------------------------------------ */

struct pd_recv_info {
	uint32_t chunks;            /* chunks of the request (all sender ranks) */
	int32_t status;             /* 0 READY, or why it failed */
};

/**
 * Wait until every chunk of req_id (all sender ranks) is in place, or the
 * request failed. @return 0 (see info->status); -ETIMEDOUT; -ENOTCONN.
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
 *         request first): no pin taken.
 */
int pd_recv_lookup(struct pd_agent *a, const void *key, uint32_t klen, const void **ptr,
		   uint32_t *len);

/**
 * The request is consumed: drop this agent's pins and let the broker free
 * its slots (waiting admissions are re-evaluated).
 * @return 0; -ENOENT unknown request; -ENOTCONN.
 */
int pd_recv_release(struct pd_agent *a, const char *req_id);

/* ---- integration ---------------------------------------------------------- */

/** A file descriptor that polls readable when an event may be waiting. */
int pd_agent_fd(const struct pd_agent *a);

typedef void pd_agent_log_fn(void *ctx, int level, const char *msg);

/** Route the library's log lines (off by default) to fn; NULL turns them off. */
void pd_agent_set_log_fn(struct pd_agent *a, pd_agent_log_fn *fn, void *ctx);

#ifdef __cplusplus
}
#endif
#endif
