/* SPDX-License-Identifier: MIT */
#ifndef PD_BROKER_PD_LEASE_H
#define PD_BROKER_PD_LEASE_H

/*
 * Lease clocks: how long each of n cells of shared state (a send slot's
 * loan, a pin journal cell) has held one value, kept in broker-private
 * memory. The broker looks at the cells now and then; a cell that is
 * held with the same value as last time keeps its start, any other value
 * (or a cell not held) starts it again. What a worker writes into the cells can restart a
 * clock but never makes the broker's record of an old one younger than
 * the value it saw.
 */
#include <stdint.h>

struct pd_lease;

/* @return NULL on -ENOMEM. n may be 0. */
struct pd_lease *pd_lease_create(uint32_t n);
void pd_lease_destroy(struct pd_lease *l); /* NULL-safe */

/* Cell i is held (with value) or not, now. @return how long (ns) it has
 * been held with that value: 0 when not held, for a new value, and for i
 * out of range. */
uint64_t pd_lease_age(struct pd_lease *l, uint32_t i, int held, uint64_t value,
		      uint64_t now_ns);

/* Cells first..first+n-1 are not held any more (out of range: ignored). */
void pd_lease_forget(struct pd_lease *l, uint32_t first, uint32_t n);

#endif
