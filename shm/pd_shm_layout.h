/* SPDX-License-Identifier: MIT */
#ifndef PD_SHM_PD_SHM_LAYOUT_H
#define PD_SHM_PD_SHM_LAYOUT_H

/*
 * ABI of the broker's shared-memory segment. Internal: never installed.
 * Fixed-width fields only; new fields go into reserved space, at the end,
 * with a PD_SHM_ABI_MINOR bump. Every offset the other side reads is pinned.
 */
#include <stddef.h>
#include <stdint.h>

#include <pdkv/version.h>

#include "pd_compiler.h"

#define PD_SHM_MAGIC    UINT64_C(0x31564b4450445050) /* "PPDPDKV1" little-endian */
#define PD_SHM_HDR_SIZE 512u
#define PD_SHM_NAME_MAX 63u   /* broker name, without the "/pdkv." prefix */
#define PD_SHM_PREFIX   "/pdkv."

/* Segment states; the broker stores READY last, with release order. */
#define PD_SHM_INITIALIZING 1u
#define PD_SHM_READY        2u
#define PD_SHM_DRAINING     3u
#define PD_SHM_DEAD         4u

/* Feature bits: an attacher refuses unknown incompat bits, ignores compat. */
/* The arenas (PD_REGION_SEND_ARENA, PD_REGION_RECV_ARENA) are not in this
 * file but in the arena file: arena_size bytes of 2 MiB hugetlb pages
 * (pd_hugetlb.h); their offsets are in that file. */
#define PD_SHM_INCOMPAT_ARENA_FILE UINT64_C(0x1)
#define PD_SHM_INCOMPAT_KNOWN PD_SHM_INCOMPAT_ARENA_FILE
#define PD_SHM_COMPAT_KNOWN   UINT64_C(0)

/* Region table indices. */
#define PD_REGION_CONTROL    0u /* broker-wide mutexes, condvars, doorbell flags */
#define PD_REGION_SEND_POOL  1u /* send slot pool: header, free stack, slot table */
#define PD_REGION_RECV_POOL  2u /* recv slot pool */
#define PD_REGION_AGENTS     3u /* agent table and one ring pair per agent */
#define PD_REGION_RECV_INDEX 4u /* recv index hash table */
#define PD_REGION_SEND_ARENA 5u /* send payload arena (2 MiB aligned) */
#define PD_REGION_RECV_ARENA 6u /* recv payload arena (2 MiB aligned) */
#define PD_REGION_STATS      7u /* struct pd_stats: what pdctl reads (pd_stats.h) */
#define PD_REGION_MAX        8u

/* The payload arenas: 2 MiB aligned, and in the arena file when the
 * header has PD_SHM_INCOMPAT_ARENA_FILE. */
static inline int pd_region_is_arena(uint32_t id)
{
	return id == PD_REGION_SEND_ARENA || id == PD_REGION_RECV_ARENA;
}

#define PD_REGION_ALIGN 64u        /* what an attacher accepts */
#define PD_REGION_PAGE  4096u      /* what the broker lays out: each region on its
				    * own pages, so an agent can map some read-only */
#define PD_ARENA_ALIGN  (2u << 20)

/* Indices of the live statistics in the header (atomic, relaxed). */
#define PD_STAT_AGENTS          0u  /* gauge: agents attached */
#define PD_STAT_REQ_ACTIVE      1u  /* gauge */
#define PD_STAT_REQ_DONE        2u
#define PD_STAT_REQ_FAILED      3u
#define PD_STAT_REQ_CANCELLED   4u
#define PD_STAT_CHUNKS_SENT     5u
#define PD_STAT_CHUNKS_RECV     6u
#define PD_STAT_BYTES_SENT      7u
#define PD_STAT_BYTES_RECV      8u
#define PD_STAT_ERR_PROTO       9u  /* corrupt input from agents or peers */
#define PD_STAT_ERR_XPORT       10u
#define PD_STAT_ERR_TIMEOUT     11u
#define PD_STAT_AGENTS_RECLAIMED 12u
#define PD_STAT_MAX             24u

struct pd_shm_region {
	uint64_t off; /* from the segment base; PD_REGION_ALIGN aligned */
	uint64_t len; /* 0 = region absent */
};

struct pd_shm_hdr {
	uint64_t magic;              /* writer: broker, at create */
	uint16_t abi_major;
	uint16_t abi_minor;
	uint32_t hdr_size;
	uint64_t total_size;
	uint64_t compat_features;
	uint64_t incompat_features;
	int32_t  broker_pid;
	uint32_t nregions;
	uint64_t broker_start_ticks; /* /proc start time: pid + this = identity */
	uint64_t broker_start_ns;    /* CLOCK_REALTIME at start, for uptime */
	uint64_t epoch;              /* bumped on each broker start */
	_Atomic uint32_t state;      /* writer: broker; READY stored last (release) */
	uint32_t flags;
	char     name[PD_SHM_NAME_MAX + 1];
	struct pd_shm_region regions[PD_REGION_MAX];
	_Atomic uint64_t stats[PD_STAT_MAX]; /* writer: broker; readers: anyone */
	uint64_t arena_size;         /* PD_SHM_INCOMPAT_ARENA_FILE: the arena file's size */
	int32_t  arena_fd;           /* ... and its fd in the broker (/proc/<pid>/fd/<n>) */
	uint32_t arena_page;         /* ... and its page size */
	uint8_t  reserved[32];
};

_Static_assert(sizeof(struct pd_shm_hdr) == PD_SHM_HDR_SIZE, "header size is ABI");
_Static_assert(offsetof(struct pd_shm_hdr, magic) == 0, "ABI");
_Static_assert(offsetof(struct pd_shm_hdr, abi_major) == 8, "ABI");
_Static_assert(offsetof(struct pd_shm_hdr, hdr_size) == 12, "ABI");
_Static_assert(offsetof(struct pd_shm_hdr, total_size) == 16, "ABI");
_Static_assert(offsetof(struct pd_shm_hdr, incompat_features) == 32, "ABI");
_Static_assert(offsetof(struct pd_shm_hdr, broker_pid) == 40, "ABI");
_Static_assert(offsetof(struct pd_shm_hdr, broker_start_ticks) == 48, "ABI");
_Static_assert(offsetof(struct pd_shm_hdr, epoch) == 64, "ABI");
_Static_assert(offsetof(struct pd_shm_hdr, state) == 72, "ABI");
_Static_assert(offsetof(struct pd_shm_hdr, name) == 80, "ABI");
_Static_assert(offsetof(struct pd_shm_hdr, regions) == 144, "ABI");
_Static_assert(offsetof(struct pd_shm_hdr, stats) == 272, "ABI");
_Static_assert(offsetof(struct pd_shm_hdr, arena_size) == 464, "ABI");

#endif
