/* SPDX-License-Identifier: MIT */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "pd_proto.h"

uint64_t pd_req_tag(const void *req_id, uint32_t len)
{
	return XXH3_64bits(req_id, len);
}
