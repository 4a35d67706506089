/* SPDX-License-Identifier: MIT */
#ifndef PD_TESTS_SUPPORT_PD_TEST_AGENT_H
#define PD_TESTS_SUPPORT_PD_TEST_AGENT_H

/*
 * An agent of this process attached to a test broker (pd_proc.h). Header
 * only: the support objects also link into programs without the agent
 * library (the TSan tests).
 */
#include <stdint.h>

#include <pdkv/agent.h>

#include "pd_proc.h"

/* Attach to b with roles (0: the default, both). 0 and *out set, or -errno. */
static inline int pd_test_agent_attach(const struct pd_test_broker *b, uint32_t roles,
				       struct pd_agent **out)
{
	struct pd_agent_opts o;

	pd_agent_opts_init(&o, sizeof(o));
	o.broker = b->name;
	o.rundir = b->rundir;
	if (roles)
		o.roles = roles;
	return pd_agent_attach(&o, out);
}

#endif
