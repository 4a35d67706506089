/* SPDX-License-Identifier: MIT */
#ifndef PD_SHM_PD_LAYOUT_INT_H
#define PD_SHM_PD_LAYOUT_INT_H

/* Between pd_layout.c and pd_layout_send.c: the send pools' geometry. */
#include "pd_layout.h"

struct pd_send_geo {
	uint32_t parts;             /* send pools */
	uint32_t per;               /* slots of each */
	uint64_t pool_stride;       /* bytes from one pool to the next */
	uint64_t arena_stride;      /* ... and from one pool's arena to the next */
};

/* Geometry of send_slots in parts pools (0 as 1); -EINVAL when parts is
 * above PD_SEND_PARTS_MAX or does not divide slots, or a pool is unusable. */
int pd_layout_send_geo(uint32_t slots, uint32_t parts, uint64_t slot_size,
		       struct pd_send_geo *g);
/* Broker: initialise every send pool of o. 0, -EINVAL, -ENOSPC. */
int pd_layout_send_init(struct pd_segment *seg, const struct pd_layout_opts *o);
/* Open the send pools of a segment into s (send_part[], send, has_send),
 * with the geometry the agent table t says (read-only to agents; from an
 * older broker, pool 0's header). 0, or -EPROTO. */
int pd_layout_send_open(struct pd_segment *seg, const struct pd_agent_table *t,
			struct pd_shm *s);

#endif
