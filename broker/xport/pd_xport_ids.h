/* SPDX-License-Identifier: MIT */
#ifndef PD_BROKER_XPORT_PD_XPORT_IDS_H
#define PD_BROKER_XPORT_PD_XPORT_IDS_H

/* The data transports by id and name (--transport, --require, Hello). */

/* uint32_t ids: never an enum in a table shared across files. */
#define PD_XPORT_RDMA 0u
#define PD_XPORT_TCP  1u
#define PD_XPORT_SHM  2u
#define PD_XPORT_MAX  3u

/* An initialiser for const char *names[PD_XPORT_MAX]. */
#define PD_XPORT_NAMES { [PD_XPORT_RDMA] = "rdma", [PD_XPORT_TCP] = "tcp", [PD_XPORT_SHM] = "shm" }

#endif
