/* SPDX-License-Identifier: MIT */
#ifndef PD_SHM_PD_ATTACH_PROTO_H
#define PD_SHM_PD_ATTACH_PROTO_H

/*
 * Agent <-> broker attach protocol over the broker's Unix stream socket
 * "<rundir>/<name>.sock". Fixed little-endian structs with a version (no
 * text formats). The socket stays open for the agent's whole life: its
 * closing is the agent's death notice to the broker, and the broker's
 * death notice to the agent.
 *
 *   agent  -> broker  struct pd_attach_hello
 *   broker -> agent   struct pd_attach_ack, with SCM_RIGHTS fds when
 *                     status == 0: [0] the segment (read-write),
 *                     [1] the agent's doorbell eventfd (broker -> agent:
 *                     completions), [2] the broker's doorbell eventfd
 *                     (agent -> broker: submissions), and when
 *                     arena_size != 0 [3] the arena file (read-write:
 *                     the segment's arenas are in it, pd_hugetlb.h)
 *
 * The broker checks the peer's credentials (SO_PEERCRED: same uid, or
 * member of the broker's --group) and refuses with status -EACCES; a hello
 * that finds every agent slot taken is refused with status -EUSERS.
 */
#include <stdint.h>

#define PD_ATTACH_MAGIC   0x48434154u /* "TACH" */
#define PD_ATTACH_VERSION 1u
#define PD_ATTACH_NFDS_MIN 3u /* an acceptance without an arena file */
#define PD_ATTACH_NFDS    4u  /* at most */

/* Agent roles (bit flags: a node may send and receive). */
#define PD_ROLE_SEND 0x1u
#define PD_ROLE_RECV 0x2u
#define PD_ROLE_ALL  (PD_ROLE_SEND | PD_ROLE_RECV)

struct pd_attach_hello {
	uint32_t magic;
	uint16_t version;
	uint16_t abi_major;     /* PD_SHM_ABI_MAJOR of the agent's build */
	uint16_t abi_minor;
	uint16_t _rsvd0;
	int32_t  pid;           /* informational; the broker trusts SO_PEERCRED */
	uint32_t roles;         /* PD_ROLE_* */
	uint32_t tp_rank;
	uint32_t tp_size;
	uint32_t pidns;         /* pid's namespace (pd_self_pidns()): with pid, what
				 * the agent's records in the send pool say */
	uint8_t  _rsvd[32];
};
_Static_assert(sizeof(struct pd_attach_hello) == 64, "attach ABI");

struct pd_attach_ack {
	uint32_t magic;
	uint16_t version;
	uint16_t _rsvd0;
	int32_t  status;        /* 0, or a negative errno (-EPROTO, -EACCES, -EUSERS) */
	uint32_t agent_id;      /* 1..PD_MAX_AGENTS; index into the agent table */
	uint64_t epoch;         /* the broker's epoch (as in the segment header) */
	uint64_t segment_size;  /* must equal the segment fd's size */
	uint64_t arena_size;    /* 0, or the arena file's size (fd [3]) */
	uint8_t  _rsvd[24];
};
_Static_assert(sizeof(struct pd_attach_ack) == 64, "attach ABI");

/* The fds an acceptance carries. */
static inline uint32_t pd_attach_ack_nfds(const struct pd_attach_ack *a)
{
	return a->status < 0 ? 0 : a->arena_size ? PD_ATTACH_NFDS : PD_ATTACH_NFDS_MIN;
}

#endif
