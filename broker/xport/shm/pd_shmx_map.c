/* SPDX-License-Identifier: MIT */
/*
 * shm transport: a peer's segment, checked against its Hello, and its recv
 * payload arena mapped read-write (nothing else is). See pd_shmx.h.
 *
 * The segment is validated through a read-only view (the same code an
 * agent or pdctl attaches with: private copies of the header and region
 * table, pool headers read once), then that view is dropped; the one fd
 * serves both the view and the arena mapping, so both are the same file.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pd_err.h"
#include "pd_hugetlb.h"
#include "pd_layout.h"
#include "pd_shmx_int.h"
#include "pd_sync.h"

/* Where the arena is in the file, and whose it is, as the checks found it. */
struct geo {
	uint64_t off;
	uint64_t slot_size;
	uint32_t nslots;
	int32_t pid;
	uint64_t start_ticks;
	uint64_t arena_size;  /* an arena file's (0: the arena is in the segment) */
	int32_t arena_fd;     /* ... and its fd in that broker */
};

/* That broker's, this incarnation's (the Hello's epoch), and ready. */
static int check_ident(const struct pd_shm *shm, const struct pd_shmx_target *t, char *err,
		       size_t errlen)
{
	uint64_t epoch = shm->seg.hdr->epoch; /* read once */
	uint32_t state = atomic_load_explicit(&shm->seg.hdr->state, memory_order_acquire);

	if (strcmp(shm->seg.name, t->name) != 0) {
		pd_err_set(err, errlen, "the segment is broker '%s''s, not '%s''s", shm->seg.name,
			   t->name);
		return -EPROTO;
	}
	if (epoch != t->epoch) {
		pd_err_set(err, errlen, "segment epoch %" PRIu64 ", its Hello says %" PRIu64
			   " (a stale segment, or an impostor)", epoch, t->epoch);
		return -ESTALE;
	}
	if (state != PD_SHM_READY) {
		pd_err_set(err, errlen, "segment not ready (state %u)", state);
		return -ENOTCONN;
	}
	return 0;
}

/* The recv pool the Hello announced, its arena page-aligned and in the file. */
static int check_geo(const struct pd_shm *shm, const struct pd_shmx_target *t, struct geo *g,
		     char *err, size_t errlen)
{
	const struct pd_shm_region *r = &shm->seg.regions[PD_REGION_RECV_ARENA];
	long page = sysconf(_SC_PAGESIZE);

	if (!shm->has_recv) {
		pd_err_set(err, errlen, "the segment has no recv pool");
		return -EPROTO;
	}
	if (shm->recv.nslots != t->recv_slots || shm->recv.slot_size != t->slot_size) {
		pd_err_set(err, errlen, "recv pool %u x %" PRIu64 " bytes, its Hello says %u x %"
			   PRIu64, shm->recv.nslots, shm->recv.slot_size, t->recv_slots,
			   t->slot_size);
		return -EPROTO;
	}
	if (page <= 0 || r->off % (uint64_t)page || r->len / t->slot_size < t->recv_slots) {
		pd_err_set(err, errlen, "recv arena misplaced (offset %" PRIu64 ", %" PRIu64
			   " bytes)", r->off, r->len);
		return -EPROTO;
	}
	*g = (struct geo){ .off = r->off, .slot_size = t->slot_size, .nslots = t->recv_slots };
	return 0;
}

static int read_geo(int fd, const struct pd_shmx_target *t, struct geo *g, char *err,
		    size_t errlen)
{
	struct pd_segment seg;
	struct pd_shm shm;
	int rc = pd_segment_attach_fd(fd, PD_SEG_RDONLY, 0, &seg, err, errlen);

	if (rc == -ETIMEDOUT)
		return -ENOTCONN; /* still initialising */
	if (rc < 0)
		return rc;
	rc = pd_layout_open(&seg, &shm, err, errlen);
	if (rc < 0) {
		pd_segment_destroy(&seg); /* not ours: detaches, never unlinks */
		return rc;
	}
	rc = check_ident(&shm, t, err, errlen);
	if (rc == 0)
		rc = check_geo(&shm, t, g, err, errlen);
	g->pid = shm.seg.hdr->broker_pid;
	g->start_ticks = shm.seg.hdr->broker_start_ticks;
	g->arena_size = shm.seg.arena_size;
	g->arena_fd = shm.seg.arena_fd_num;
	pd_layout_close(&shm);
	return rc;
}

/* The segment's broker is that process, seen from here: then its death can
 * be told from its pid (in another pid namespace the pid means nothing
 * here, and only the segment's name is watched). */
static int broker_visible(int32_t pid, uint64_t start_ticks)
{
	uint64_t now;

	return pid > 0 && pd_pid_start_time(pid, &now) == 0 && now == start_ticks;
}

/*
 * The peer's arena file (hugetlb pages, no name): its broker's own fd, as
 * /proc/<pid>/fd/<n>, which the kernel opens for a process allowed to
 * look into that broker (same user, or root) in the same pid namespace.
 */
static int open_arena_file(const struct geo *g, char *err, size_t errlen)
{
	char path[64];
	int fd, rc;

	if (!broker_visible(g->pid, g->start_ticks)) {
		/* At most PD_XPORT_WHY_MAX: pdctl peers shows it whole. */
		pd_err_set(err, errlen, "hugetlb arena of a broker (pid %d) not visible in this "
			   "pid namespace", g->pid);
		return -EPERM;
	}
	(void)snprintf(path, sizeof(path), "/proc/%d/fd/%d", g->pid, g->arena_fd);
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		pd_err_set(err, errlen, "cannot open the peer's hugetlb arena file %s: %s (a "
			   "broker of another user?)", path, pd_strerror(rc));
		return rc;
	}
	rc = pd_hugetlb_check(fd, g->arena_size);
	if (rc < 0) {
		pd_err_set(err, errlen, "%s is not the peer's arena file", path);
		(void)close(fd);
		return -EPROTO;
	}
	return fd;
}

static int map_arena(struct pd_shmx_peer *p, int fd, const struct geo *g, const char *path,
		     char *err, size_t errlen)
{
	size_t len = (size_t)(g->nslots * g->slot_size);
	struct stat st;
	int mfd = fd, rc = pd_sys_rc(fstat(fd, &st));
	void *m;

	if (rc < 0)
		return rc;
	if (g->arena_size) {
		mfd = open_arena_file(g, err, errlen);
		if (mfd < 0)
			return mfd;
		len = PD_ALIGN_UP(len, (size_t)PD_HUGETLB_PAGE); /* whole huge pages */
	}
	m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, (off_t)g->off);
	rc = m == MAP_FAILED ? -errno : 0;
	if (mfd != fd)
		(void)close(mfd); /* the mapping keeps the file */
	if (m == MAP_FAILED) {
		pd_err_set(err, errlen, "cannot map the recv arena of %s: %s", path,
			   pd_strerror(rc));
		return rc;
	}
	p->arena = m;
	p->map_len = len;
	p->nslots = g->nslots;
	p->slot_size = g->slot_size;
	p->dev = st.st_dev;
	p->ino = st.st_ino;
	p->pid = broker_visible(g->pid, g->start_ticks) ? g->pid : 0;
	p->start_ticks = g->start_ticks;
	return 0;
}

int pd_shmx_map(struct pd_shmx_peer *p, const struct pd_shmx_target *t, char *err,
		size_t errlen)
{
	char path[sizeof(PD_SHM_PREFIX) + PD_SHM_NAME_MAX];
	struct geo g = { 0 };
	int fd, rc;

	if (pd_segment_path(t->name, path, sizeof(path)) < 0) {
		pd_err_set(err, errlen, "bad broker name for a segment");
		return -EINVAL;
	}
	fd = shm_open(path, O_RDWR | O_CLOEXEC, 0);
	if (fd < 0) {
		rc = -errno;
		pd_err_set(err, errlen, "cannot open %s: %s", path, pd_strerror(rc));
		return rc;
	}
	rc = read_geo(fd, t, &g, err, errlen);
	if (rc == 0)
		rc = map_arena(p, fd, &g, path, err, errlen);
	(void)close(fd); /* the mapping keeps the file */
	if (rc == 0)
		(void)snprintf(p->name, sizeof(p->name), "%s", t->name);
	return rc;
}

void pd_shmx_unmap(struct pd_shmx_peer *p)
{
	if (p->arena)
		(void)munmap(p->arena, p->map_len);
	p->arena = NULL;
}

int pd_shmx_alive(const struct pd_shmx_peer *p)
{
	char path[sizeof(PD_SHM_PREFIX) + PD_SHM_NAME_MAX];
	struct stat st;
	uint64_t ticks;
	int fd, rc;

	if (p->pid && (!pd_pid_alive(p->pid) || pd_pid_start_time(p->pid, &ticks) < 0 ||
		       ticks != p->start_ticks))
		return 0; /* killed: its segment stays, nobody reads it any more */
	if (pd_segment_path(p->name, path, sizeof(path)) < 0)
		return -EINVAL;
	fd = shm_open(path, O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	rc = pd_sys_rc(fstat(fd, &st));
	(void)close(fd);
	if (rc < 0)
		return rc;
	return st.st_dev == p->dev && st.st_ino == p->ino;
}
