/* SPDX-License-Identifier: MIT */
#ifndef PD_SHM_PD_PROTO_H
#define PD_SHM_PD_PROTO_H

/*
 * Agent <-> broker messages through each agent's ring pair in the segment:
 * a submission ring (agent -> broker) and a completion ring (broker ->
 * agent). Fixed-size entries, fixed-width fields, never an enum or a
 * pointer. The broker validates every entry it dequeues (op known, lengths
 * in range, slots loaned to that agent) and drops a bad one with a counter;
 * a corrupt ring gets the agent detached.
 *
 * A PUT is one header entry followed by put.n chunk entries, enqueued all
 * at once (bulk), so the broker never sees half a batch.
 */
#include <stdint.h>

#include <pdkv/types.h>

#define PD_ENDPOINT_MAX   127u  /* "tcp://[v6 address]:port" */
#define PD_PUT_MAX_CHUNKS 4096u /* chunks in one PUT (one AllocRequest) */

/* Submission ops. */
#define PD_SQ_PUT          1u /* header; put.n PD_SQ_CHUNK entries follow */
#define PD_SQ_CHUNK        2u
#define PD_SQ_CANCEL       3u /* req */
#define PD_SQ_RECV_WAIT    4u /* req: answer PD_CQ_RECV when READY or failed */
#define PD_SQ_RECV_RELEASE 5u /* req */
#define PD_SQ_PINS_DROPPED 6u /* no answer: this agent dropped pins; zombie slots may go */
#define PD_SQ_DECLARE      7u /* put (n 0, last 0): a request before any staging; arg: its
			       * admission timeout in ms (0: the broker's). Answered by
			       * PD_CQ_ADMITTED, or PD_CQ_PUT_FAILED */
#define PD_SQ_OP_MAX       7u

struct pd_sqe_put {
	uint32_t n;                 /* chunk entries that follow */
	uint32_t total_chunks;
	uint32_t world_size;
	uint32_t rank;
	uint32_t last;
	uint8_t  req_id_len;
	uint8_t  endpoint_len;
	uint8_t  req_id[PD_REQ_ID_MAX];
	uint8_t  endpoint[PD_ENDPOINT_MAX];
};

struct pd_sqe_chunk {
	pd_slot_ref slot;
	uint32_t len;
	uint32_t klen;
	uint8_t  key[PD_KEY_MAX];
};

struct pd_sqe_req {
	uint8_t req_id_len;
	uint8_t req_id[PD_REQ_ID_MAX];
};

struct pd_sqe {
	uint32_t op;                /* PD_SQ_* */
	uint32_t arg;               /* PD_SQ_RECV_WAIT: the caller's timeout in ms (the
				     * broker answers status -ETIME then); PD_SQ_DECLARE:
				     * the admission timeout in ms; else 0 */
	uint64_t user;              /* echoed in the completion */
	union {
		struct pd_sqe_put put;
		struct pd_sqe_chunk chunk;
		struct pd_sqe_req req;
		uint8_t raw[304];
	} u;
};
_Static_assert(sizeof(struct pd_sqe) == 320, "submission entry ABI");

/* Completion types. */
#define PD_CQ_PUT_DONE     1u
#define PD_CQ_PUT_FAILED   2u
#define PD_CQ_RECV         3u /* answer to PD_SQ_RECV_WAIT */
#define PD_CQ_RELEASED     4u /* answer to PD_SQ_RECV_RELEASE */
#define PD_CQ_ADMITTED     5u /* a declared request (rank) is admitted: chunks = its total */
#define PD_CQ_TYPE_MAX     5u

struct pd_cqe {
	uint32_t type;              /* PD_CQ_* */
	int32_t  status;            /* 0 or a negative errno */
	uint64_t user;
	uint64_t bytes;
	uint32_t chunks;
	uint8_t  req_id_len;
	uint8_t  req_id[PD_REQ_ID_MAX];
	uint64_t req_tag;           /* PD_CQ_RECV: the tag the recv index carries for it */
	uint32_t rank;              /* PD_CQ_ADMITTED, _PUT_DONE, _PUT_FAILED: the sender rank */
	uint8_t  _rsvd[84];
};
_Static_assert(sizeof(struct pd_cqe) == 256, "completion entry ABI");

/* The tag of a request id: what allocations wait under (pd_pool_who.tag),
 * so that a cancel finds them. The same function on both sides. */
uint64_t pd_req_tag(const void *req_id, uint32_t len);

#endif
