/* SPDX-License-Identifier: MIT */
#ifndef PD_BROKER_XPORT_PD_XFER_H
#define PD_BROKER_XPORT_PD_XFER_H

/*
 * What every data transport takes and gives back: a transfer of one chunk
 * from a staging slot into a receive slot the peer granted, and the
 * completion that ends it.
 */
#include <stdint.h>

/* One transfer. */
struct pd_xfer {
	uint64_t cookie;               /* caller's (the batch's seq), returned in the completion */
	const void *src;               /* staging bytes, loaned until the completion; NULL only
					* when len == 0 */
	uint32_t len;                  /* <= the peer's slot size */
	uint32_t slot;                 /* receive slot index, < the peer's slot count */
	uint32_t gen;                  /* the caller's (not every transport sends it) */
	uint32_t _rsvd;
	uint64_t tag;                  /* the caller's request tag (likewise) */
};

#define PD_CPL_WRITE 1u                /* one posted transfer ended */
#define PD_CPL_PEER  2u                /* the peer failed (see the transport); cookie 0 */

/* A completion, as polled. */
struct pd_cpl {
	uint64_t cookie;               /* the transfer's, as posted; 0 for PD_CPL_PEER */
	uint32_t peer;
	int32_t status;                /* 0, or -errno */
	uint32_t kind;                 /* PD_CPL_* */
	uint32_t _rsvd;
};

#endif
