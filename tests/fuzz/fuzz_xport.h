/* SPDX-License-Identifier: MIT */
#ifndef PD_TESTS_FUZZ_FUZZ_XPORT_H
#define PD_TESTS_FUZZ_FUZZ_XPORT_H

/*
 * A data transport for the fuzz targets' broker (struct pd_xport_ops):
 * it takes the place of tcp, connects to every peer at once and moves no
 * byte. A transfer is checked (its source inside a staging slot of the
 * segment, its length within a slot: a broken one aborts) and completes at
 * the next fzx_drain(), with the status set by fzx_fail() (0 by default).
 */
#include <stdint.h>

#include "pd_xport.h"

/* A transport over shm's send arena; abort when out of memory. */
struct pd_xport *fzx_create(struct pd_shm *shm);
/* Completions of the transfers posted since the last call, to the broker. */
void fzx_drain(struct pd_xport *x, void (*handle)(void *ctx, const struct pd_cpl *c, int n),
	       void *ctx);
/* The status transfers posted from now on complete with (0 or -errno). */
void fzx_fail(struct pd_xport *x, int32_t status);

#endif
