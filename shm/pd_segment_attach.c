/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pd_err.h"
#include "pd_hugetlb.h"
#include "pd_segment.h"
#include "pd_time.h"

/* The lowest ABI minor this build can use: 4.3's send pools read as one
 * in a 4.2 segment (the agent table's send_parts and send_part are 0). */
static const uint16_t abi_minor_needed = 2;

static int check_region(const struct pd_shm_region *r, uint32_t i, size_t maplen,
			char *err, size_t errlen)
{
	if (r->len == 0)
		return 0;
	if (r->off % PD_REGION_ALIGN || r->off < PD_SHM_HDR_SIZE || r->len > maplen ||
	    r->off > maplen - r->len) {
		pd_err_set(err, errlen, "region %u [%" PRIu64 ", +%" PRIu64 ") out of bounds "
			   "or misaligned (segment %zu bytes)", i, r->off, r->len, maplen);
		return -EPROTO;
	}
	return 0;
}

static int in_arena_file(const struct pd_shm_hdr *h, uint32_t id)
{
	return (h->incompat_features & PD_SHM_INCOMPAT_ARENA_FILE) && pd_region_is_arena(id);
}

/* An arena in the arena file: on huge pages of its own, inside the file. */
static int check_arena(const struct pd_shm_region *r, uint32_t i, uint64_t size, char *err,
		       size_t errlen)
{
	if (r->len == 0)
		return 0;
	if (r->off % PD_HUGETLB_PAGE || r->len > size || r->off > size - r->len) {
		pd_err_set(err, errlen, "arena region %u [%" PRIu64 ", +%" PRIu64 ") out of "
			   "bounds or misaligned (arena file %" PRIu64 " bytes)", i, r->off,
			   r->len, size);
		return -EPROTO;
	}
	return 0;
}

static int check_arena_file(const struct pd_shm_hdr *h, char *err, size_t errlen)
{
	if (!(h->incompat_features & PD_SHM_INCOMPAT_ARENA_FILE))
		return 0;
	if (h->arena_size == 0 || h->arena_size % PD_HUGETLB_PAGE ||
	    h->arena_size > (1ull << 45) || h->arena_page != PD_HUGETLB_PAGE ||
	    h->arena_fd < 0) {
		pd_err_set(err, errlen, "corrupt arena file description (%" PRIu64 " bytes, "
			   "pages %u, fd %d)", h->arena_size, h->arena_page, h->arena_fd);
		return -EPROTO;
	}
	return 0;
}

static int check_overlap(const struct pd_shm_hdr *h, char *err, size_t errlen)
{
	const struct pd_shm_region *r = h->regions;

	for (uint32_t i = 0; i < PD_REGION_MAX; i++) {
		for (uint32_t j = i + 1; j < PD_REGION_MAX; j++) {
			if (!r[i].len || !r[j].len || in_arena_file(h, i) != in_arena_file(h, j))
				continue;
			if (r[i].off < r[j].off + r[j].len && r[j].off < r[i].off + r[i].len) {
				pd_err_set(err, errlen, "regions %u and %u overlap", i, j);
				return -EPROTO;
			}
		}
	}
	return 0;
}

static int check_ident(const struct pd_shm_hdr *h, size_t maplen, char *err, size_t errlen)
{
	if (maplen < PD_SHM_HDR_SIZE) {
		pd_err_set(err, errlen, "segment truncated: %zu bytes", maplen);
		return -EPROTO;
	}
	if (h->magic != PD_SHM_MAGIC) {
		pd_err_set(err, errlen, "bad magic %#" PRIx64 ": not a pdkv segment", h->magic);
		return -EPROTO;
	}
	if (h->abi_major != PD_SHM_ABI_MAJOR || h->abi_minor < abi_minor_needed) {
		pd_err_set(err, errlen, "segment ABI %u.%u, this build needs %u.%u or a later "
			   "minor", h->abi_major, h->abi_minor, PD_SHM_ABI_MAJOR,
			   abi_minor_needed);
		return -EPROTO;
	}
	return 0;
}

int pd_segment_validate(const struct pd_shm_hdr *h, size_t maplen, char *err, size_t errlen)
{
	uint32_t state;
	int rc;

	if (!h)
		return -EINVAL;
	rc = check_ident(h, maplen, err, errlen);
	if (rc < 0)
		return rc;
	if (h->hdr_size != PD_SHM_HDR_SIZE || h->total_size != maplen) {
		pd_err_set(err, errlen, "size mismatch: header %u, total %" PRIu64
			   ", mapped %zu (truncated?)", h->hdr_size, h->total_size, maplen);
		return -EPROTO;
	}
	if (h->incompat_features & ~PD_SHM_INCOMPAT_KNOWN) {
		pd_err_set(err, errlen, "unknown incompatible features %#" PRIx64,
			   h->incompat_features & ~PD_SHM_INCOMPAT_KNOWN);
		return -EPROTO;
	}
	state = atomic_load_explicit(&h->state, memory_order_acquire);
	if (h->nregions > PD_REGION_MAX || state < PD_SHM_INITIALIZING || state > PD_SHM_DEAD ||
	    memchr(h->name, '\0', sizeof(h->name)) == NULL) {
		pd_err_set(err, errlen, "corrupt header (regions %u, state %u)", h->nregions,
			   state);
		return -EPROTO;
	}
	rc = check_arena_file(h, err, errlen);
	for (uint32_t i = 0; rc == 0 && i < PD_REGION_MAX; i++)
		rc = in_arena_file(h, i) ? check_arena(&h->regions[i], i, h->arena_size, err, errlen)
					 : check_region(&h->regions[i], i, maplen, err, errlen);
	return rc < 0 ? rc : check_overlap(h, err, errlen);
}

/* Wait while the broker is still initialising; the acquire load pairs with
 * the release store in pd_segment_set_state(). */
static int wait_ready(const struct pd_shm_hdr *h, uint32_t timeout_ms)
{
	uint64_t deadline = pd_deadline_ms(timeout_ms);
	struct timespec nap = { 0, 1000000 };

	while (atomic_load_explicit(&h->state, memory_order_acquire) == PD_SHM_INITIALIZING) {
		if (pd_now_ns() >= deadline)
			return -ETIMEDOUT;
		(void)nanosleep(&nap, NULL);
	}
	return 0;
}

static int map_checked(int fd, uint32_t flags, uint32_t timeout_ms, struct pd_segment *out,
		       char *err, size_t errlen)
{
	int prot = flags & PD_SEG_RDONLY ? PROT_READ : PROT_READ | PROT_WRITE;
	struct pd_shm_hdr copy;
	struct stat st;
	void *base;
	int rc;

	if (fstat(fd, &st) < 0)
		return -errno;
	if ((uint64_t)st.st_size < PD_SHM_HDR_SIZE) {
		pd_err_set(err, errlen, "segment truncated: %lld bytes", (long long)st.st_size);
		return -EPROTO;
	}
	base = mmap(NULL, (size_t)st.st_size, prot, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED)
		return -errno;
	rc = check_ident(base, (size_t)st.st_size, err, errlen);
	if (rc == 0 && wait_ready(base, timeout_ms) < 0) {
		pd_err_set(err, errlen, "segment still initialising after %u ms", timeout_ms);
		rc = -ETIMEDOUT;
	}
	/* Validate a private copy: the other side cannot change what we checked. */
	memcpy(&copy, base, sizeof(copy));
	if (rc == 0)
		rc = pd_segment_validate(&copy, (size_t)st.st_size, err, errlen);
	if (rc < 0) {
		(void)munmap(base, (size_t)st.st_size);
		return rc;
	}
	*out = (struct pd_segment){ .hdr = base, .base = base, .len = (size_t)st.st_size,
				    .fd = fd, .flags = flags, .arena_fd = -1,
				    .arena_size = in_arena_file(&copy, PD_REGION_SEND_ARENA) ?
						  copy.arena_size : 0,
				    .arena_fd_num = copy.arena_fd };
	memcpy(out->name, copy.name, sizeof(out->name));
	memcpy(out->regions, copy.regions, sizeof(out->regions));
	return 0;
}

int pd_segment_attach_fd(int fd, uint32_t flags, uint32_t timeout_ms,
			 struct pd_segment *out, char *err, size_t errlen)
{
	int dfd, rc;

	if (fd < 0 || !out || (flags & ~PD_SEG_FLAGS_ALL))
		return -EINVAL;
	dfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (dfd < 0)
		return -errno;
	rc = map_checked(dfd, flags, timeout_ms, out, err, errlen);
	if (rc < 0)
		(void)close(dfd);
	return rc;
}

int pd_segment_attach(const char *name, uint32_t flags, uint32_t timeout_ms,
		      struct pd_segment *out, char *err, size_t errlen)
{
	char path[sizeof(PD_SHM_PREFIX) + PD_SHM_NAME_MAX];
	int fd, rc;

	if (!out || (flags & ~PD_SEG_FLAGS_ALL) || pd_segment_path(name, path, sizeof(path)))
		return -EINVAL;
	fd = shm_open(path, (flags & PD_SEG_RDONLY ? O_RDONLY : O_RDWR) | O_CLOEXEC, 0);
	if (fd < 0) {
		rc = -errno;
		pd_err_set(err, errlen, "no broker segment %s: %s", path, pd_strerror(rc));
		return rc;
	}
	rc = pd_segment_attach_fd(fd, flags, timeout_ms, out, err, errlen);
	(void)close(fd);
	return rc;
}

static int is_arena_here(const struct pd_segment *s, uint32_t id)
{
	return s->arena_size && pd_region_is_arena(id);
}

void *pd_segment_region(const struct pd_segment *s, uint32_t id, size_t *len)
{
	const struct pd_shm_region *r;

	if (!s || !s->hdr || id >= PD_REGION_MAX)
		return NULL;
	r = &s->regions[id];
	if (len)
		*len = r->len;
	if (!r->len)
		return NULL;
	if (is_arena_here(s, id))
		return s->arena_base ? (uint8_t *)s->arena_base + r->off : NULL;
	return (uint8_t *)s->base + r->off;
}

void pd_segment_unmap_arenas(struct pd_segment *s)
{
	if (s->arena_base) {
		(void)munmap(s->arena_base, s->arena_size);
		(void)close(s->arena_fd);
	}
	s->arena_base = NULL;
	s->arena_fd = -1;
}

int pd_segment_map_arenas(struct pd_segment *s, int fd, uint32_t flags)
{
	int prot = flags & PD_SEG_RDONLY ? PROT_READ : PROT_READ | PROT_WRITE;
	int dfd, rc;
	void *m;

	if (!s || !s->base || !s->arena_size || s->arena_base || fd < 0)
		return -EINVAL;
	rc = pd_hugetlb_check(fd, s->arena_size);
	if (rc < 0)
		return rc;
	dfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (dfd < 0)
		return -errno;
	m = mmap(NULL, s->arena_size, prot, MAP_SHARED, dfd, 0);
	if (m == MAP_FAILED) {
		rc = -errno;
		(void)close(dfd);
		return rc;
	}
	s->arena_base = m;
	s->arena_fd = dfd;
	return 0;
}

void pd_segment_destroy(struct pd_segment *s)
{
	if (!s || !s->base)
		return;
	if (s->owner) {
		pd_segment_set_state(s, PD_SHM_DEAD);
		if (pd_segment_is_named(s->name, s->fd))
			(void)pd_segment_unlink(s->name);
		if (s->lock_fd >= 0) /* after the unlink: never a dead-looking name */
			(void)close(s->lock_fd);
		s->lock_fd = -1;
	}
	pd_segment_unmap_arenas(s);
	(void)munmap(s->base, s->len);
	(void)close(s->fd);
	s->base = NULL;
	s->hdr = NULL;
	s->fd = -1;
}

/* The pages of [off, off + len), or -ENOTSUP when off is not page aligned. */
static int protect_range(struct pd_segment *s, uint64_t off, uint64_t len)
{
	uint64_t n = PD_ALIGN_UP(len, (uint64_t)PD_REGION_PAGE);

	if (off % PD_REGION_PAGE || off + n > s->len)
		return -ENOTSUP;
	return mprotect((uint8_t *)s->base + off, (size_t)n, PROT_READ) ? -errno : 0;
}

int pd_segment_protect(struct pd_segment *s, uint32_t rw)
{
	int rc;

	if (!s || !s->base)
		return -EINVAL;
	for (uint32_t i = 0; i < PD_REGION_MAX; i++) /* all page aligned, or none touched */
		if (s->regions[i].len && s->regions[i].off % PD_REGION_PAGE)
			return -ENOTSUP;
	rc = protect_range(s, 0, PD_SHM_HDR_SIZE);
	for (uint32_t i = 0; rc == 0 && i < PD_REGION_MAX; i++) {
		if (!s->regions[i].len || (rw & (1u << i)))
			continue;
		if (!is_arena_here(s, i))
			rc = protect_range(s, s->regions[i].off, s->regions[i].len);
		else if (s->arena_base) /* whole huge pages (layout_arenas()) */
			rc = mprotect((uint8_t *)s->arena_base + s->regions[i].off,
				      PD_ALIGN_UP(s->regions[i].len, (uint64_t)PD_HUGETLB_PAGE),
				      PROT_READ) ? -errno : 0;
	}
	return rc;
}
