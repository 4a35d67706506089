/* SPDX-License-Identifier: MIT */
/*
 * A broker's liveness, from the kernel: the broker holds flock(LOCK_EX) on
 * its segment for its whole life, through an open file description of its
 * own (never passed to anyone: agents get another one, so no agent can
 * unlock it). The kernel drops the lock when the broker dies, however it
 * dies. Nothing a process writes into the segment changes what the lock
 * says, so a live broker is never taken for a dead one. See pd_segment.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "pd_err.h"
#include "pd_segment.h"
#include "pd_segment_lock.h"

#define LOCK_TRIES   50   /* ... of LOCK_NAP_NS each: a prober's lock lasts microseconds */
#define LOCK_NAP_NS  (2 * 1000 * 1000)

static void nap(void)
{
	(void)nanosleep(&(struct timespec){ 0, LOCK_NAP_NS }, NULL);
}

int pd_seglock_take(const char *name, int seg_fd)
{
	/* A description of our own: flock belongs to it, not to the fd passed on. */
	int fd = pd_segment_open_rdonly(name), rc = 0;

	if (fd < 0)
		return fd;
	if (!pd_segment_same_file(fd, seg_fd)) {
		(void)close(fd);
		return -ESTALE; /* the name moved between the create and this open */
	}
	for (int i = 0; i < LOCK_TRIES; i++) {
		if (flock(fd, LOCK_EX | LOCK_NB) == 0)
			return fd;
		rc = -errno;
		if (rc != -EWOULDBLOCK && rc != -EINTR)
			break;
		nap();
	}
	(void)close(fd);
	return rc;
}

int pd_seglock_held(int fd)
{
	if (flock(fd, LOCK_SH | LOCK_NB) == 0) {
		(void)flock(fd, LOCK_UN);
		return 0;
	}
	return errno == EWOULDBLOCK ? 1 : -errno;
}

int pd_seglock_claim(int fd)
{
	int rc = 0;

	for (int i = 0; i < LOCK_TRIES; i++) {
		if (flock(fd, LOCK_EX | LOCK_NB) == 0)
			return 0;
		rc = -errno;
		if (rc != -EWOULDBLOCK && rc != -EINTR)
			return rc;
		nap();
	}
	return -EWOULDBLOCK;
}

/*
 * /proc/locks lines: "ID: FLOCK  ADVISORY  WRITE PID MAJ:MIN:INODE START END",
 * MAJ and MIN in hex; a waiter's line has "->" after the id. The pid is in
 * our pid namespace (0 when the holder is not visible from it).
 */
int32_t pd_seglock_holder(int fd)
{
	char line[256], type[16], adv[16], rw[16];
	unsigned int maj, min;
	unsigned long ino;
	struct stat st;
	int32_t found = 0;
	FILE *f;
	int pid;

	if (fstat(fd, &st) < 0)
		return 0;
	f = fopen("/proc/locks", "re");
	if (!f)
		return 0;
	while (!found && fgets(line, sizeof(line), f)) {
		if (strstr(line, "->"))
			continue;
		if (sscanf(line, "%*d: %15s %15s %15s %d %x:%x:%lu", type, adv, rw, &pid, &maj,
			   &min, &ino) != 7)
			continue;
		if (strcmp(type, "FLOCK") == 0 && strcmp(rw, "WRITE") == 0 && pid > 0 &&
		    maj == major(st.st_dev) && min == minor(st.st_dev) && ino == st.st_ino)
			found = pid;
	}
	(void)fclose(f);
	return found;
}
