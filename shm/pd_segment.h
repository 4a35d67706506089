/* SPDX-License-Identifier: MIT */
#ifndef PD_SHM_PD_SEGMENT_H
#define PD_SHM_PD_SEGMENT_H

/*
 * The broker's POSIX shared-memory segment "/pdkv.<name>".
 *
 * Broker: pd_segment_create() (state INITIALIZING) -> initialise regions
 *         -> pd_segment_publish() (READY) ... pd_segment_destroy().
 * Agent:  pd_segment_attach_fd() on the fd the broker passed, read-write.
 * pdctl:  pd_segment_attach() with PD_SEG_RDONLY.
 * Every attach validates the header and region table before any pointer
 * into the segment is formed.
 */
#include <stddef.h>
#include <stdint.h>

#include "pd_shm_layout.h"

#define PD_SEG_RDONLY 0x1u /* attach: map read-only (pdctl) */
#define PD_SEG_FLAGS_ALL PD_SEG_RDONLY

struct pd_segment {
	struct pd_shm_hdr *hdr; /* == base */
	void    *base;
	size_t   len;
	int      fd;
	uint32_t flags;
	int      owner;         /* 1: created here, unlinked by destroy */
	int      lock_fd;       /* owner: its own open of the file, flock(LOCK_EX) held
				 * until destroy: what says the broker lives */
	uint32_t page_size;     /* owner: the arenas' pages (PD_HUGE_PAGE when every
				 * whole 2 MiB of them is a huge page), else 0 */
	uint64_t arena_size;    /* the arena file's size (validated copy); 0: the arenas
				 * are in this segment, there is no arena file */
	int32_t  arena_fd_num;  /* its fd number in the broker */
	int      arena_fd;      /* here: -1 until pd_segment_map_arenas() */
	void    *arena_base;    /* here: NULL until mapped (its regions are then NULL) */
	char     pages_why[128]; /* owner: why the arenas are not in hugetlb pages */
	char     name[PD_SHM_NAME_MAX + 1];
	struct pd_shm_region regions[PD_REGION_MAX]; /* validated private copy */
};

struct pd_segment_opts {
	const char *name;                     /* broker name: [A-Za-z0-9._-], 1..63 */
	uint64_t region_len[PD_REGION_MAX];   /* 0 = absent */
	uint64_t epoch;
	uint32_t mode;                        /* file mode; 0 = 0660 */
	uint32_t hugepages;                   /* PD_HUGE_* (pd_pages.h) for the arenas */
};

/* "/pdkv.<name>" into buf; -EINVAL for a bad name or small buffer. */
int pd_segment_path(const char *name, char *buf, size_t len);
/* The segment file of name opened read-only (a description of its own),
 * or -errno. */
int pd_segment_open_rdonly(const char *name);
/* 1 when fds a and b are one file. */
int pd_segment_same_file(int a, int b);
/* 1 when name still refers to the file behind fd (not a successor's). */
int pd_segment_is_named(const char *name, int fd);

/**
 * Create the segment, pre-faulted, header filled, state INITIALIZING, and
 * lock it (flock, held until pd_segment_destroy()) through an open file
 * description that never leaves this process.
 * A leftover segment of a dead broker (nobody holds its lock) is removed
 * first, under its lock; one of a live broker is refused.
 * The arenas are in huge pages as o->hugepages asks; out->page_size says
 * what they got.
 * @return 0; -EINVAL bad opts; -EEXIST a live broker (or an unrecognised
 *         file) holds the name (err says which); -ENOMEM: no memory, or
 *         PD_HUGE_ON and no huge pages (err says why); -errno from libc.
 */
int pd_segment_create(const struct pd_segment_opts *o, struct pd_segment *out,
		      char *err, size_t errlen);
/* Store READY with release order: everything written before is visible to
 * any attacher that sees READY. */
void pd_segment_publish(struct pd_segment *s);
void pd_segment_set_state(struct pd_segment *s, uint32_t state);
/* "initializing", "ready", "draining", "dead", else "unknown". */
const char *pd_segment_state_name(uint32_t state);

/**
 * Attach by name, or on an fd received from the broker (the fd is dup'ed;
 * the caller keeps its own). Waits up to timeout_ms while the segment is
 * INITIALIZING.
 * @return 0; -ENOENT no such segment; -EPROTO bad magic, ABI, size or
 *         region table (err says which); -ETIMEDOUT still initialising;
 *         -EINVAL bad arguments or flags; -errno from libc.
 */
int pd_segment_attach(const char *name, uint32_t flags, uint32_t timeout_ms,
		      struct pd_segment *out, char *err, size_t errlen);
int pd_segment_attach_fd(int fd, uint32_t flags, uint32_t timeout_ms,
			 struct pd_segment *out, char *err, size_t errlen);

/**
 * Validate a header and its region table against the mapped length:
 * magic, ABI major (and minor >= what this build needs), sizes, unknown
 * incompat features, regions aligned, in bounds, after the header and not
 * overlapping. Pure: usable on any buffer.
 * @return 0 or -EPROTO (err says why).
 */
int pd_segment_validate(const struct pd_shm_hdr *h, size_t maplen, char *err, size_t errlen);

/**
 * Map the arena file of an attached segment (s->arena_size) from fd (dup'ed;
 * the caller keeps its own), read-only with PD_SEG_RDONLY: after this,
 * pd_segment_region() finds the arenas.
 * @return 0; -EINVAL no arena file, or already mapped; -EPROTO fd is not a
 *         hugetlb file of the header's arena_size; -errno from mmap.
 */
int pd_segment_map_arenas(struct pd_segment *s, int fd, uint32_t flags);
/* Unmap and close the arena file here (pd_segment_destroy() does). */
void pd_segment_unmap_arenas(struct pd_segment *s);

/* Base of region id, or NULL when absent (or an arena of an arena file not
 * mapped here); *len gets its length. */
void *pd_segment_region(const struct pd_segment *s, uint32_t id, size_t *len);

/**
 * Make the header and every region not in rw (bit 1u << PD_REGION_*)
 * read-only in this mapping: a stray write there faults in this process
 * instead of corrupting what the broker and the other agents rely on.
 * @return 0; -ENOTSUP a region is not on pages of its own (an older
 *         layout: nothing changed); -errno of mprotect.
 */
int pd_segment_protect(struct pd_segment *s, uint32_t rw);

/* Unmap and close; the creator also unlinks the name, if the name still
 * refers to its own segment. NULL-safe. */
void pd_segment_destroy(struct pd_segment *s);
/* Remove "/pdkv.<name>" (e.g. a stale segment). */
int pd_segment_unlink(const char *name);

/**
 * Who holds name: 1 a live broker, 0 a dead one (stale segment),
 * -ENOENT none, -EPROTO not a recognisable pdkv segment. Judged by the
 * broker's lock on the file, from the kernel: nothing written into the
 * segment (its header's pid, state or epoch) changes the answer. pid gets
 * the lock holder's pid (from /proc/locks) for a live broker, else the pid
 * its header records.
 */
int pd_segment_probe(const char *name, int32_t *pid);

#endif
