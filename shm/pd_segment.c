/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "pd_err.h"
#include "pd_hugetlb.h"
#include "pd_log.h"
#include "pd_pages.h"
#include "pd_segment.h"
#include "pd_segment_lock.h"
#include "pd_sync.h"
#include "pd_time.h"

#define PATH_MAX_LEN (sizeof(PD_SHM_PREFIX) + PD_SHM_NAME_MAX)

static int name_ok(const char *name)
{
	size_t n = name ? strlen(name) : 0;

	if (n == 0 || n > PD_SHM_NAME_MAX)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
			return 0;
	}
	return 1;
}

int pd_segment_path(const char *name, char *buf, size_t len)
{
	if (!name_ok(name) || !buf || len < sizeof(PD_SHM_PREFIX) + strlen(name))
		return -EINVAL;
	memcpy(buf, PD_SHM_PREFIX, sizeof(PD_SHM_PREFIX) - 1);
	memcpy(buf + sizeof(PD_SHM_PREFIX) - 1, name, strlen(name) + 1);
	return 0;
}

static uint64_t region_align(uint32_t id)
{
	return pd_region_is_arena(id) ? PD_ARENA_ALIGN : PD_REGION_PAGE;
}

/* Lay out the regions after the header (but the arenas when they go into
 * the arena file); returns the total size or 0. */
static uint64_t layout(const struct pd_segment_opts *o, struct pd_shm_region *r, int split)
{
	uint64_t off = PD_SHM_HDR_SIZE;

	for (uint32_t i = 0; i < PD_REGION_MAX; i++) {
		uint64_t len = o->region_len[i];

		if (split && pd_region_is_arena(i))
			continue;
		r[i].off = r[i].len = 0;
		if (len == 0)
			continue;
		if (len > (1ull << 44))
			return 0;
		off = PD_ALIGN_UP(off, region_align(i));
		r[i].off = off;
		r[i].len = len;
		off += PD_ALIGN_UP(len, (uint64_t)PD_REGION_PAGE);
	}
	return PD_ALIGN_UP(off, (uint64_t)PD_REGION_PAGE);
}

/* The arenas in a file of their own, each on whole huge pages (so that a
 * mapping can protect one); returns that file's size, 0 when it would be
 * empty. Their sizes are layout()'s, checked before. */
static uint64_t layout_arenas(const struct pd_segment_opts *o, struct pd_shm_region *r)
{
	uint64_t off = 0;

	for (uint32_t i = PD_REGION_SEND_ARENA; i <= PD_REGION_RECV_ARENA; i++) {
		uint64_t len = o->region_len[i];

		r[i].off = r[i].len = 0;
		if (len == 0)
			continue;
		r[i].off = off;
		r[i].len = len;
		off += PD_ALIGN_UP(len, (uint64_t)PD_HUGETLB_PAGE);
	}
	return off;
}

static int read_hdr(int fd, struct pd_shm_hdr *h)
{
	struct stat st;
	ssize_t n;

	if (fstat(fd, &st) < 0)
		return -errno;
	if ((uint64_t)st.st_size < sizeof(*h))
		return -EPROTO;
	n = pread(fd, h, sizeof(*h), 0);
	if (n < 0)
		return -errno;
	if ((size_t)n != sizeof(*h) || h->magic != PD_SHM_MAGIC)
		return -EPROTO;
	return 0;
}

/* The lock's holder as the kernel sees it; the header's pid when the holder
 * is not visible from here (another pid namespace). */
static int32_t holder_pid(int fd, const struct pd_shm_hdr *h)
{
	int32_t pid = pd_seglock_holder(fd);

	return pid > 0 ? pid : h->broker_pid;
}

int pd_segment_open_rdonly(const char *name)
{
	char path[PATH_MAX_LEN];
	int fd, rc = pd_segment_path(name, path, sizeof(path));

	if (rc < 0)
		return rc;
	fd = shm_open(path, O_RDONLY | O_CLOEXEC, 0);
	return fd < 0 ? -errno : fd;
}

int pd_segment_same_file(int a, int b)
{
	struct stat sa, sb;

	return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
	       sa.st_ino == sb.st_ino;
}

int pd_segment_is_named(const char *name, int fd)
{
	int nfd = pd_segment_open_rdonly(name), same;

	if (nfd < 0)
		return 0;
	same = pd_segment_same_file(nfd, fd);
	(void)close(nfd);
	return same;
}

/* Liveness is the broker's lock on the file (pd_segment_lock.c), never the
 * header's broker_pid: any process that maps the segment can write that. */
int pd_segment_probe(const char *name, int32_t *pid)
{
	struct pd_shm_hdr h;
	int fd = pd_segment_open_rdonly(name), rc;

	if (fd < 0)
		return fd;
	/* The header first: a broker locks its file before it writes the magic,
	 * so a magic seen here means the lock was taken. */
	rc = read_hdr(fd, &h);
	if (rc == 0) {
		rc = pd_seglock_held(fd);
		if (rc < 0)
			rc = 1; /* cannot tell: never call it dead */
		if (pid)
			*pid = rc == 1 ? holder_pid(fd, &h) : h.broker_pid;
	}
	(void)close(fd);
	return rc;
}

int pd_segment_unlink(const char *name)
{
	char path[PATH_MAX_LEN];
	int rc = pd_segment_path(name, path, sizeof(path));

	if (rc < 0)
		return rc;
	return pd_sys_rc(shm_unlink(path));
}

/*
 * The name is taken: remove it if its broker is dead, else refuse. Dead
 * means nobody holds the file's lock; the file is removed while we hold
 * that lock ourselves, and only if the name still refers to it, so two
 * brokers starting at once cannot remove each other's new segment.
 */
static int reclaim_stale(const char *name, char *err, size_t errlen)
{
	struct pd_shm_hdr h;
	int fd = pd_segment_open_rdonly(name), rc;

	if (fd < 0)
		return fd == -ENOENT ? 0 : fd; /* vanished meanwhile: retry */
	rc = read_hdr(fd, &h);
	if (rc < 0) {
		(void)close(fd);
		pd_err_set(err, errlen,
			   "/dev/shm%s%s exists but is not a pdkv segment (or is being "
			   "created); remove it if no broker runs", PD_SHM_PREFIX, name);
		return -EEXIST;
	}
	rc = pd_seglock_claim(fd);
	if (rc == -EWOULDBLOCK) {
		pd_err_set(err, errlen, "broker '%s' is already running (pid %d)", name,
			   holder_pid(fd, &h));
		(void)close(fd);
		return -EEXIST;
	}
	if (rc == 0 && pd_segment_is_named(name, fd)) {
		PD_LOG(WARN, shm, "removing stale segment of dead broker '%s' (pid %d)", name,
		       h.broker_pid);
		rc = pd_segment_unlink(name);
		rc = rc == -ENOENT ? 0 : rc;
	}
	(void)close(fd); /* the lock goes with it */
	if (rc < 0)
		pd_err_set(err, errlen, "cannot remove the stale segment of '%s': %s", name,
			   pd_strerror(rc));
	return rc;
}

static int open_excl(const char *name, uint32_t mode, char *err, size_t errlen)
{
	char path[PATH_MAX_LEN];
	int fd, rc;

	rc = pd_segment_path(name, path, sizeof(path));
	if (rc < 0)
		return rc;
	for (int attempt = 0; attempt < 2; attempt++) {
		fd = shm_open(path, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, mode);
		if (fd >= 0)
			return fchmod(fd, mode) < 0 ? (close(fd), -errno) : fd;
		if (errno != EEXIST)
			return -errno;
		rc = reclaim_stale(name, err, errlen);
		if (rc < 0)
			return rc;
	}
	pd_err_set(err, errlen, "segment '%s' keeps reappearing", name);
	return -EEXIST;
}

static uint64_t arena_bytes(const struct pd_shm_region *r, uint64_t align)
{
	return (r[PD_REGION_SEND_ARENA].len / align + r[PD_REGION_RECV_ARENA].len / align) *
	       align;
}

/* Allocate and map every page now (a first touch of shared memory during a
 * copy costs more than the copy): the arenas, when they are in this file,
 * in huge pages as o->hugepages says, asked for before their pages exist. */
static int fill_pages(uint8_t *p, int fd, const struct pd_segment_opts *o,
		      const struct pd_shm_region *r, uint64_t total, int split)
{
	int rc = 0;

	for (uint32_t id = PD_REGION_SEND_ARENA; !split && rc == 0 && id <= PD_REGION_RECV_ARENA;
	     id++) /* split: the arenas are elsewhere */
		rc = pd_pages_advise(p + r[id].off, r[id].len, o->hugepages);
	if (rc == 0)
		rc = pd_pages_populate(p, total, 1);
	if (rc == -ENOSYS) { /* an old kernel: allocate, then touch */
		rc = -posix_fallocate(fd, 0, (off_t)total);
		if (rc == 0)
			pd_pages_touch(p, total);
	}
	return rc;
}

/* The arenas' page size as mapped here (their own mappings: madvise gave
 * them VMAs of their own); with --hugepages on, -ENOMEM and why when they
 * are not all in huge pages. */
static int check_pages(struct pd_segment *s, const struct pd_segment_opts *o, char *err,
		       size_t errlen)
{
	const struct pd_shm_region *a = &s->regions[PD_REGION_SEND_ARENA];
	const struct pd_shm_region *z = &s->regions[PD_REGION_RECV_ARENA];
	uint64_t need = arena_bytes(s->regions, PD_HUGE_PAGE);
	uint64_t lo = a->len ? a->off : z->off, hi = z->len ? z->off + z->len : a->off + a->len;
	int64_t huge = need ? pd_pages_huge_bytes((uint8_t *)s->base + lo, hi - lo) : 0;
	char why[160];

	s->page_size = need && huge >= (int64_t)need ? PD_HUGE_PAGE : PD_REGION_PAGE;
	if (o->hugepages != PD_HUGE_ON || s->page_size == PD_HUGE_PAGE)
		return 0;
	pd_pages_why_not(why, sizeof(why));
	pd_err_set(err, errlen, "--hugepages on: the staging arenas need %" PRIu64 " huge "
		   "pages of 2 MiB and got %" PRId64 " (%s; %s); reserve them with "
		   "sysctl vm.nr_hugepages, remount /dev/shm with huge=within_size, or start "
		   "with --hugepages auto", need / PD_HUGE_PAGE,
		   huge > 0 ? huge / PD_HUGE_PAGE : 0, s->pages_why, why);
	return -ENOMEM;
}

/* Size and map; NULL with *rc set. */
static void *size_and_map(int fd, const struct pd_segment_opts *o,
			  const struct pd_shm_region *r, uint64_t total, int split, int *rc)
{
	void *p;

	if (ftruncate(fd, (off_t)total) < 0) {
		*rc = -errno;
		return NULL;
	}
	p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		*rc = -errno;
		return NULL;
	}
	*rc = fill_pages(p, fd, o, r, total, split);
	if (*rc < 0) {
		(void)munmap(p, total);
		return NULL;
	}
	return p;
}

static void fill_hdr(struct pd_shm_hdr *h, const struct pd_segment_opts *o,
		     const struct pd_segment *s)
{
	struct timespec now;

	h->magic = PD_SHM_MAGIC;
	h->abi_major = PD_SHM_ABI_MAJOR;
	h->abi_minor = PD_SHM_ABI_MINOR;
	h->hdr_size = PD_SHM_HDR_SIZE;
	h->total_size = s->len;
	h->compat_features = PD_SHM_COMPAT_KNOWN;
	h->incompat_features = s->arena_size ? PD_SHM_INCOMPAT_ARENA_FILE : 0;
	h->arena_size = s->arena_size;
	h->arena_fd = s->arena_fd;
	h->arena_page = s->arena_size ? PD_HUGETLB_PAGE : 0;
	h->broker_pid = (int32_t)getpid();
	h->nregions = PD_REGION_MAX;
	if (pd_self_start_time(&h->broker_start_ticks) < 0)
		h->broker_start_ticks = 0;
	(void)clock_gettime(CLOCK_REALTIME, &now);
	h->broker_start_ns = (uint64_t)now.tv_sec * PD_NS_PER_S + (uint64_t)now.tv_nsec;
	h->epoch = o->epoch;
	atomic_store_explicit(&h->state, PD_SHM_INITIALIZING, memory_order_relaxed);
	memcpy(h->name, o->name, strlen(o->name) + 1);
	memcpy(h->regions, s->regions, sizeof(h->regions));
}

/* With --hugepages auto or on, the arenas in hugetlb pages when the pool
 * has enough free (out->arena_*); else why not, in out->pages_why. */
static void try_arena_file(const struct pd_segment_opts *o, struct pd_segment *out)
{
	char label[PD_SHM_NAME_MAX + 16];
	uint64_t len;

	if (o->hugepages == PD_HUGE_OFF)
		return;
	len = layout_arenas(o, out->regions);
	if (len == 0)
		return;
	(void)snprintf(label, sizeof(label), "pdkv.%s.arenas", o->name);
	if (pd_hugetlb_create(label, len, &out->arena_fd, &out->arena_base, out->pages_why,
			      sizeof(out->pages_why)) < 0)
		return;
	out->arena_size = len;
}

/* Everything but the file, its lock and the name: the arena file, the
 * layout, the mapping and the header. */
static int build(const struct pd_segment_opts *o, int fd, struct pd_segment *out, char *err,
		 size_t errlen)
{
	int rc = 0;

	try_arena_file(o, out);
	out->len = layout(o, out->regions, out->arena_size != 0); /* sizes checked before */
	out->base = size_and_map(fd, o, out->regions, out->len, out->arena_size != 0, &rc);
	if (!out->base) {
		pd_err_set(err, errlen, "cannot size or map %zu bytes: %s", out->len,
			   pd_strerror(rc));
		pd_segment_unmap_arenas(out);
		return rc;
	}
	out->hdr = out->base;
	fill_hdr(out->hdr, o, out);
	if (out->arena_size)
		out->page_size = PD_HUGETLB_PAGE;
	else
		rc = check_pages(out, o, err, errlen);
	if (rc < 0) {
		(void)munmap(out->base, out->len);
		pd_segment_unmap_arenas(out);
	}
	return rc;
}

int pd_segment_create(const struct pd_segment_opts *o, struct pd_segment *out,
		      char *err, size_t errlen)
{
	struct pd_shm_region r[PD_REGION_MAX];
	int fd, rc, lock_fd;

	if (!o || !out || !name_ok(o->name)) {
		pd_err_set(err, errlen, "bad segment name (1..%u of [A-Za-z0-9._-])",
			   PD_SHM_NAME_MAX);
		return -EINVAL;
	}
	if (layout(o, r, 0) == 0) {
		pd_err_set(err, errlen, "region too large");
		return -EINVAL;
	}
	fd = open_excl(o->name, o->mode ? o->mode : 0660, err, errlen);
	if (fd < 0)
		return fd;
	/* Locked before the magic is written, held until destroy: the lock is
	 * what tells a live broker from a dead one (pd_segment_probe()). */
	lock_fd = pd_seglock_take(o->name, fd);
	if (lock_fd < 0) {
		rc = lock_fd;
		pd_err_set(err, errlen, "cannot lock the segment: %s", pd_strerror(rc));
		goto out_unlink;
	}
	*out = (struct pd_segment){ .fd = fd, .owner = 1, .lock_fd = lock_fd, .arena_fd = -1 };
	memcpy(out->name, o->name, strlen(o->name) + 1);
	rc = build(o, fd, out, err, errlen);
	if (rc == 0)
		return 0;
	*out = (struct pd_segment){ .fd = -1, .lock_fd = -1, .arena_fd = -1 };

out_unlink:
	(void)pd_segment_unlink(o->name);
	if (lock_fd >= 0)
		(void)close(lock_fd);
	(void)close(fd);
	return rc;
}

void pd_segment_set_state(struct pd_segment *s, uint32_t state)
{
	/* Release: pairs with the acquire load in wait_ready(). */
	atomic_store_explicit(&s->hdr->state, state, memory_order_release);
}

const char *pd_segment_state_name(uint32_t state)
{
	switch (state) {
	case PD_SHM_INITIALIZING: return "initializing";
	case PD_SHM_READY: return "ready";
	case PD_SHM_DRAINING: return "draining";
	case PD_SHM_DEAD: return "dead";
	default: return "unknown";
	}
}

void pd_segment_publish(struct pd_segment *s)
{
	pd_segment_set_state(s, PD_SHM_READY);
}
