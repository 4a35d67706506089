/* SPDX-License-Identifier: MIT */
#ifndef PD_SHM_PD_LAYOUT_H
#define PD_SHM_PD_LAYOUT_H

/*
 * What lives in a broker's segment, built once by the broker and opened
 * (validated) by every attacher: the send and recv slot pools with their
 * payload arenas, the recv index, and the agent table with one ring pair
 * per agent slot, and the statistics region.
 */
#include <stddef.h>
#include <stdint.h>

#include "pd_index.h"
#include "pd_proto.h"
#include "pd_ring.h"
#include "pd_segment.h"
#include "pd_slots.h"
#include "pd_stats.h"

#define PD_AGENTS_MAGIC 0x544e4741u /* "AGNT" */
#define PD_MAX_AGENTS   256u
#define PD_PINS_MIN     1024u  /* default journal cells per agent, at least */
#define PD_PINS_MAX     65536u /* journal cells per agent, at most */
#define PD_PINS_ROUND   512u   /* journal cells come in pages (512 x 8 bytes) */
#define PD_SEND_PARTS_MAX 64u  /* send pools (partitions) of a segment, at most */

/* Agent slot states. */
#define PD_AGENT_FREE     0u
#define PD_AGENT_ATTACHED 1u
#define PD_AGENT_FENCED   2u /* a lease broke: the broker no longer serves it */

struct pd_agent_slot {
	_Atomic uint32_t state;     /* writer: broker */
	int32_t  pid;               /* writer: broker (from SO_PEERCRED) */
	uint32_t roles;             /* writer: broker */
	uint32_t tp_rank;
	uint64_t attached_ns;       /* writer: broker; CLOCK_REALTIME */
	_Atomic uint64_t submitted; /* writer: broker; entries taken from the sq */
	_Atomic uint64_t completed; /* writer: broker; entries put on the cq */
	_Atomic uint64_t bad;       /* writer: broker; entries refused */
	uint32_t send_part;         /* writer: broker, before the ack; the send pool a
				     * sender loans from (0 .. send_parts - 1) */
	uint8_t  _rsvd[12];
};
_Static_assert(sizeof(struct pd_agent_slot) == 64, "agent slot ABI");

/*
 * The agents region: this header, max_agents slots, the ring pairs, then
 * one pin journal per agent slot: pins_per_agent cells of _Atomic uint64_t,
 * 0 = empty, else PD_INDEX_HAZARD(bucket, seq) of one pin the agent holds:
 * a hazard naming one incarnation of one recv index entry (pd_index.h).
 *
 * Journal cells. Writer: the agent attached to that slot (pd_index_pin and
 * pd_index_unpin, no lock); the broker once that agent is gone
 * (pd_layout_pins_reclaim(), at detach and again before the slot's next
 * agent is admitted), which only empties them. The broker's removals read
 * them (journals of free agent slots skipped). A cell naming nothing, or an
 * entry the agent never pinned, can only keep that one incarnation from
 * being freed, never drop anyone's pin.
 */
struct pd_agent_table {
	uint32_t magic;             /* immutable after init; writer: broker */
	uint32_t max_agents;
	uint32_t sq_entries;
	uint32_t cq_entries;
	uint64_t sq_bytes;          /* one submission ring */
	uint64_t cq_bytes;          /* one completion ring */
	uint64_t rings_off;         /* from the table: ring pair i at rings_off + i * (sq + cq) */
	uint32_t pins_per_agent;    /* journal cells per slot; 0: no journal */
	uint32_t send_parts;        /* send pools in the send regions (0 as 1: older
				     * brokers laid out one) */
	uint64_t pins_off;          /* from the table: journal i: pins_off + i * pins_per_agent * 8 */
	uint32_t send_per;          /* slots of each send pool, 0 from an older broker: the
				     * geometry attachers open the send pools with, not the
				     * pool headers' (a sender writes its own) */
	uint32_t send_slot_pages;   /* their slot size in 4 KiB pages */
	struct pd_agent_slot slot[];
};
_Static_assert(sizeof(struct pd_agent_table) == 64, "agent table ABI");
_Static_assert(offsetof(struct pd_agent_table, rings_off) == 32, "agent table ABI");
_Static_assert(offsetof(struct pd_agent_table, pins_per_agent) == 40, "agent table ABI");
_Static_assert(offsetof(struct pd_agent_table, pins_off) == 48, "agent table ABI");

struct pd_layout_opts {
	const char *name;
	uint32_t send_slots;        /* 0: this broker does not send */
	uint32_t recv_slots;        /* 0: this broker does not receive */
	uint64_t slot_size;         /* multiple of 4 KiB */
	uint32_t index_buckets;     /* 0: the power of two >= 2 x recv_slots (min 64) */
	uint32_t max_agents;        /* 1..PD_MAX_AGENTS */
	uint32_t sq_entries;        /* power of two */
	uint32_t cq_entries;        /* power of two */
	uint64_t epoch;
	uint64_t index_seed;
	uint32_t mode;              /* 0: 0660 */
	uint32_t hugepages;         /* PD_HUGE_* (pd_pages.h): the arenas' pages */
	uint32_t pins_per_agent;    /* pin journal cells per agent, <= PD_PINS_MAX; 0: max(PD_PINS_MIN,
				     * 2 x recv_slots) capped at PD_PINS_MAX; rounded up to a multiple
				     * of PD_PINS_ROUND; none without recv slots */
	uint32_t send_parts;        /* send pools: 0 or 1, one every sender shares; N (up to
				     * PD_SEND_PARTS_MAX, dividing send_slots): N pools of
				     * send_slots / N, each with its arena on pages of its own,
				     * so a sender maps only its own writable */
};

/* Validated handles on everything in a segment. */
struct pd_shm {
	struct pd_segment seg;
	struct pd_pool *send;       /* has_send: one of send_part[], pool 0 (an agent's
				     * own, once pd_layout_send_own() chose it); NULL */
	struct pd_pool send_part[PD_SEND_PARTS_MAX]; /* the send pools: send_parts of them */
	uint32_t send_parts;        /* 1 when has_send and laid out as one; 0 without */
	uint64_t send_pool_stride;  /* send pool k at the send pool region + k x this */
	uint64_t send_arena_stride; /* its arena at the send arena + k x this */
	struct pd_pool recv;        /* valid when has_recv */
	struct pd_index index;      /* valid when has_recv */
	struct pd_agent_table *agents;
	struct pd_stats *stats;     /* the statistics region (read-only for pdctl) */
	uint32_t has_send;
	uint32_t has_recv;
	uint32_t max_agents;        /* validated copies of the table's geometry */
	uint32_t sq_entries, cq_entries;
	uint64_t sq_bytes, cq_bytes, rings_off;
	uint32_t pins_per_agent;    /* 0: no pin journal */
	uint64_t pins_off;
	size_t agents_len;
};

/**
 * Broker: create the segment and initialise every region (state stays
 * INITIALIZING: publish with pd_segment_publish(&s->seg) when ready).
 * @return 0; -EINVAL bad opts (err says which); errors of
 *         pd_segment_create().
 */
int pd_layout_create(const struct pd_layout_opts *o, struct pd_shm *out, char *err,
		     size_t errlen);

/**
 * Any attacher: build validated handles from an attached segment (which
 * out takes over: pd_layout_close() detaches it).
 * @return 0; -EPROTO a region is missing, corrupt or inconsistent.
 */
int pd_layout_open(struct pd_segment *seg, struct pd_shm *out, char *err, size_t errlen);

/* The ring pair of agent slot id (0-based), as validated views. 0, -EINVAL, -EPROTO. */
int pd_layout_rings(struct pd_shm *s, uint32_t id, struct pd_ring_view *sq,
		    struct pd_ring_view *cq);

/* Broker: reset slot id's rings for a new agent. */
int pd_layout_rings_reset(struct pd_shm *s, uint32_t id);

/*
 * The pin journal of agent slot id (0-based): pd_layout_pins_count(s)
 * cells. NULL when id is out of range or the segment has no journal.
 */
_Atomic uint64_t *pd_layout_pins(struct pd_shm *s, uint32_t id);
/* Journal cells per agent slot (0: none). */
uint32_t pd_layout_pins_count(const struct pd_shm *s);

/**
 * Broker: empty slot id's journal (the agent is gone, or a new agent is
 * about to take the slot): its hazards no longer hold anything, and the
 * entries they named are freed at their next removal.
 * @param dropped  cells that were not empty (may be NULL)
 * @return 0; -EINVAL bad id.
 */
int pd_layout_pins_reclaim(struct pd_shm *s, uint32_t id, uint32_t *dropped);

/**
 * Agent: map the agents region read-only but for agent slot id's own ring
 * pair and pin journal, so a stray write of this process into another
 * agent's rings or journal (or the agent table) faults here.
 * @return 0; -ENOTSUP the broker laid the region out without pages of
 *         their own for each agent (nothing changed); -EINVAL; -errno of
 *         mprotect.
 */
int pd_layout_protect_agents(struct pd_shm *s, uint32_t id);

/* The send pool whose slots include ref's: its index in send_part[], or
 * -EINVAL (no such slot); or the pool itself, or NULL. */
int pd_layout_send_part(const struct pd_shm *s, pd_slot_ref ref);
struct pd_pool *pd_layout_send_pool(struct pd_shm *s, pd_slot_ref ref);
/* How many agents (attached, or fenced and not yet gone) with the send
 * role loan from each send pool, agent slot skip (1-based; 0: none) not
 * counted: n[0 .. send_parts - 1]. */
void pd_layout_send_users(const struct pd_shm *s, uint32_t skip, uint32_t *n);
/* Send slots of every send pool together (0 without). */
uint32_t pd_layout_send_slots(const struct pd_shm *s);
/* Bytes of the send arena from its start to the last pool's last slot's end
 * (every pool's payload in between: what RDMA registers). */
uint64_t pd_layout_send_arena_len(const struct pd_shm *s);

/**
 * Agent: make send pool part this handle's own (s->send) and map every
 * other send pool read-only and its arena inaccessible, so a stray write
 * of this sender into another's loans or staged bytes faults here.
 * Nothing to do with one pool.
 * @return 0; -EINVAL no such pool; -ENOTSUP pools not on pages of their
 *         own; -errno of mprotect.
 */
int pd_layout_send_own(struct pd_shm *s, uint32_t part);

/* Detach (the creator also unlinks). NULL-safe. */
void pd_layout_close(struct pd_shm *s);

#endif
