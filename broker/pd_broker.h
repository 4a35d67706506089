/* SPDX-License-Identifier: MIT */
#ifndef PD_BROKER_PD_BROKER_H
#define PD_BROKER_PD_BROKER_H

/*
 * pdbroker: wires the segment, the agents, the request engines, the
 * control plane and the TCP data plane to one event loop.
 */
#include <stddef.h>

#include "pd_config.h"

struct pd_broker;

/* Build everything and publish the segment. @return 0 or -errno (err says why). */
int pd_broker_create(const struct pd_config *cfg, struct pd_broker **out, char *err,
		     size_t errlen);
/* Run until SIGTERM/SIGINT. @return 0 or -errno. */
int pd_broker_run(struct pd_broker *b);
/* Stop serving, fail what is in flight, unlink segment and socket. NULL-safe. */
void pd_broker_destroy(struct pd_broker *b);

#endif
