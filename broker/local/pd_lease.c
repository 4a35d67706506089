/* SPDX-License-Identifier: MIT */
/* Lease clocks in broker-private memory (pd_lease.h). */
#include <stdlib.h>

#include "pd_lease.h"

struct cell {
	uint64_t held;
	uint64_t value;
	uint64_t since_ns;
};

struct pd_lease {
	uint32_t n;
	struct cell c[];
};

struct pd_lease *pd_lease_create(uint32_t n)
{
	struct pd_lease *l = calloc(1, sizeof(*l) + (size_t)n * sizeof(struct cell));

	if (l)
		l->n = n;
	return l;
}

void pd_lease_destroy(struct pd_lease *l)
{
	free(l);
}

uint64_t pd_lease_age(struct pd_lease *l, uint32_t i, int held, uint64_t value,
		      uint64_t now_ns)
{
	struct cell *c;

	if (!l || i >= l->n)
		return 0;
	c = &l->c[i];
	if (!held || !c->held || c->value != value) {
		c->held = held != 0;
		c->value = value;
		c->since_ns = now_ns;
		return 0;
	}
	return now_ns > c->since_ns ? now_ns - c->since_ns : 0;
}

void pd_lease_forget(struct pd_lease *l, uint32_t first, uint32_t n)
{
	for (uint32_t i = first; l && i < l->n && i - first < n; i++)
		l->c[i].held = 0;
}
