/* SPDX-License-Identifier: MIT */
#ifndef PD_INCLUDE_PDKV_TYPES_H
#define PD_INCLUDE_PDKV_TYPES_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Error convention: every int-returning pdkv function returns >= 0 on
 * success (0 or a count) and a negative errno on failure. The codes have
 * fixed meanings everywhere:
 *
 *   -EINVAL       bad argument or unknown flag bit
 *   -EPROTO       shm or wire version/magic mismatch, corrupt data from a peer
 *   -ENOBUFS      no free slot (non-blocking allocation)
 *   -EAGAIN       would block, or ring full (non-blocking calls)
 *   -EBUSY        admission denied, or an object still in use (pinned)
 *   -ETIMEDOUT    a deadline passed
 *   -ECANCELED    the request was cancelled while waiting
 *   -E2BIG        more slots asked for than the pool has
 *   -ESTALE       a slot reference whose generation is no longer current
 *   -ENOTCONN     the broker is gone
 *   -EUSERS       the broker's agent slots are all taken (--max-agents)
 *   -EOWNERDEAD   a peer died; its state was recovered
 *   -ENOMEM       allocation failed
 *
 * pd_strerror() turns any of them into a message.
 */

/**
 * Log levels, most severe first, with fixed values: the level a log
 * function (pd_agent_log_fn) is given, and what PD_LOG_LEVEL=err|warn|
 * info|debug names. A level shows its lines and those of the levels
 * above it.
 */
#define PD_LOG_ERR   1 /* something failed or was lost (an event dropped, a repair failed) */
#define PD_LOG_WARN  2 /* something was recovered or refused (a dead peer's state repaired) */
#define PD_LOG_INFO  3 /* a notable change of state */
#define PD_LOG_DEBUG 4 /* the steps of attach and detach, and more */

/** Longest chunk key, in bytes. */
#define PD_KEY_MAX 255
/** Longest request id, in bytes. */
#define PD_REQ_ID_MAX 127
/** Most sender ranks (tensor-parallel ranks) of one request. */
#define PD_WORLD_MAX 64

/**
 * Reference to one slot of a pool: the slot index in the low 32 bits and
 * the slot's generation in the high 32 bits. A reference whose generation
 * is no longer the slot's current one is stale and refused (-ESTALE).
 */
typedef uint64_t pd_slot_ref;

#define PD_SLOT_REF(idx, gen) (((uint64_t)(uint32_t)(gen) << 32) | (uint32_t)(idx))
#define PD_SLOT_REF_IDX(ref)  ((uint32_t)((ref) & 0xffffffffu))
#define PD_SLOT_REF_GEN(ref)  ((uint32_t)((ref) >> 32))

/**
 * Message for a pdkv error code (a negative or positive errno).
 *
 * @param err  error code, e.g. -ETIMEDOUT.
 * @return a static string; never NULL.
 * Thread-safety: safe from any thread.
 */
const char *pd_strerror(int err);

#ifdef __cplusplus
}
#endif
#endif
