/* SPDX-License-Identifier: MIT */
#ifndef PD_AGENT_PD_AGENT_EXT_H
#define PD_AGENT_PD_AGENT_EXT_H

/*
 * What the project's own bindings (python/pdkv) use beyond <pdkv/agent.h>.
 * They link libpdagent.a, so these are not exported by libpdagent.so.
 */
#include <stdint.h>

#include <pdkv/agent.h>

/*
 * A request's tag is the receiving broker's name for it: the chunks a
 * lookup pins carry it, and pd_recv_release() of the request drops the
 * pins that carry it. A binding that hands out views of chunks learns
 * each chunk's tag, and each request's, to end the right views.
 */

/** pd_recv_wait(), and, when 0 is returned, the request's tag. req_tag may be NULL. */
int pd_ag_recv_wait_tag(struct pd_agent *a, const char *req_id, uint32_t timeout_ms,
			struct pd_recv_info *info, uint64_t *req_tag);

/**
 * pd_recv_release(), and the tag of the request whose pins it dropped
 * (set once the broker answered, also with its -ENOENT: 0 then).
 */
int pd_ag_recv_release_tag(struct pd_agent *a, const char *req_id, uint64_t *req_tag);

/**
 * pd_recv_lookup(), and the tag of the chunk's request. req_tag may be NULL.
 */
int pd_ag_recv_lookup_tag(struct pd_agent *a, const void *key, uint32_t klen,
			  const void **ptr, uint32_t *len, uint64_t *req_tag);

#endif
