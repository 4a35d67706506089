/* SPDX-License-Identifier: MIT */
/*
 * libpdagent's ABI: the public structs pinned, options read as far as the
 * caller's opts_size goes, reserved bytes checked.
 */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "pd_agent_int.h"

#define OPTS_MAX_SIZE     4096u /* larger: not an opts_size (an uninitialised struct) */

#define OFFSET_END(T, f) (offsetof(T, f) + sizeof(((T *)0)->f))
/* The first version's fields, which every caller has. */
#define OPTS_MIN_SIZE OFFSET_END(struct pd_agent_opts, flags)

/* The layout callers were built against (LP64). A field carved from
 * reserved bytes keeps every size and every other offset. */
_Static_assert(sizeof(void *) == 8, "the pinned sizes below are LP64's");
_Static_assert(OPTS_MIN_SIZE == 44 && offsetof(struct pd_agent_opts, log_fn) == 48 &&
	       sizeof(struct pd_agent_opts) == 64, "pd_agent_opts: new fields at the end only");
_Static_assert(offsetof(struct pd_decl, reserved) == 36 && sizeof(struct pd_decl) == 64,
	       "pd_decl layout");
_Static_assert(offsetof(struct pd_chunk, reserved) == 24 && sizeof(struct pd_chunk) == 32,
	       "pd_chunk layout");
_Static_assert(offsetof(struct pd_batch, reserved) == 44 && sizeof(struct pd_batch) == 64,
	       "pd_batch layout");
_Static_assert(offsetof(struct pd_event, reserved) == 152 && sizeof(struct pd_event) == 192,
	       "pd_event layout");
_Static_assert(offsetof(struct pd_recv_info, reserved) == 8 && sizeof(struct pd_recv_info) == 32,
	       "pd_recv_info layout");

/* Field f of the caller's options is within its opts_size. */
#define OPTS_HAS(size, f) (OFFSET_END(struct pd_agent_opts, f) <= (size))

void pd_agent_opts_init(struct pd_agent_opts *o, size_t opts_size)
{
	if (!o || !OPTS_HAS(opts_size, opts_size))
		return;
	memset(o, 0, opts_size);
	o->opts_size = opts_size;
	if (OPTS_HAS(opts_size, roles))
		o->roles = PD_AGENT_SEND | PD_AGENT_RECV;
	if (OPTS_HAS(opts_size, tp_size))
		o->tp_size = 1;
	if (OPTS_HAS(opts_size, attach_timeout_ms))
		o->attach_timeout_ms = AG_ATTACH_MS;
}

int pd_ag_zeroed(const void *p, size_t n)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++)
		if (b[i])
			return 0;
	return 1;
}

/* Copy field f when the caller's struct has it. */
#define OPTS_GET(out, in, f)                       \
	do {                                       \
		if (OPTS_HAS((in)->opts_size, f))  \
			(out)->f = (in)->f;        \
	} while (0)

int pd_ag_opts_read(const struct pd_agent_opts *in, struct pd_agent_opts *out)
{
	size_t n;

	pd_agent_opts_init(out, sizeof(*out));
	if (!in)
		return 0;
	n = in->opts_size;
	if (n < OPTS_MIN_SIZE || n > OPTS_MAX_SIZE)
		return -EINVAL;
	/* Fields of a newer library than this one: unset only. */
	if (n > sizeof(*out) && !pd_ag_zeroed((const uint8_t *)in + sizeof(*out), n - sizeof(*out)))
		return -EINVAL;
	OPTS_GET(out, in, broker);
	OPTS_GET(out, in, rundir);
	OPTS_GET(out, in, roles);
	OPTS_GET(out, in, tp_rank);
	OPTS_GET(out, in, tp_size);
	OPTS_GET(out, in, attach_timeout_ms);
	OPTS_GET(out, in, flags);
	OPTS_GET(out, in, log_fn);
	OPTS_GET(out, in, log_ctx);
	return 0;
}
