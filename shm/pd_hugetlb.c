/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <linux/magic.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "pd_err.h"
#include "pd_hugetlb.h"

#ifndef MFD_HUGETLB
#define MFD_HUGETLB 0x0004u
#endif
#ifndef MFD_HUGE_2MB
#define MFD_HUGE_2MB (21u << 26)
#endif

#define POOL_FREE "/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages"

int64_t pd_hugetlb_free_pages(void)
{
	FILE *f = fopen(POOL_FREE, "re");
	int64_t n;

	if (!f)
		return -errno;
	if (fscanf(f, "%" SCNd64, &n) != 1)
		n = -EIO;
	(void)fclose(f);
	return n;
}

static void say_short(char *why, size_t whylen, uint64_t len)
{
	int64_t free_pages = pd_hugetlb_free_pages();

	if (free_pages < 0)
		free_pages = 0;
	pd_err_set(why, whylen, "%" PRId64 " free hugetlb pages of 2 MiB, %" PRIu64 " needed "
		   "(vm.nr_hugepages)", free_pages, len / PD_HUGETLB_PAGE);
}

int pd_hugetlb_create(const char *label, uint64_t len, int *fd, void **base, char *why,
		      size_t whylen)
{
	int f, rc;
	void *p;

	if (!label || !fd || !base || len == 0 || len % PD_HUGETLB_PAGE)
		return -EINVAL;
	f = memfd_create(label, MFD_CLOEXEC | MFD_HUGETLB | MFD_HUGE_2MB);
	if (f < 0) {
		rc = -errno;
		pd_err_set(why, whylen, "no 2 MiB hugetlb pages here (memfd_create: %s)",
			   pd_strerror(rc));
		return rc == -EINVAL || rc == -ENOENT ? -ENOSYS : rc;
	}
	/* The mapping reserves every page (ENOMEM when the pool is short) and
	 * MAP_POPULATE allocates them: no copy ever waits for one. */
	rc = ftruncate(f, (off_t)len) < 0 ? -errno : 0;
	p = rc ? MAP_FAILED : mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
				 f, 0);
	if (p == MAP_FAILED) {
		rc = rc ? rc : -errno;
		if (rc == -ENOMEM)
			say_short(why, whylen, len);
		else
			pd_err_set(why, whylen, "cannot map hugetlb pages: %s", pd_strerror(rc));
		(void)close(f);
		return rc;
	}
	*fd = f;
	*base = p;
	return 0;
}

int pd_hugetlb_check(int fd, uint64_t len)
{
	struct statfs sf;
	struct stat st;

	if (fstatfs(fd, &sf) < 0 || fstat(fd, &st) < 0)
		return -errno;
	if ((uint64_t)sf.f_type != HUGETLBFS_MAGIC || (uint64_t)st.st_size != len ||
	    st.st_blksize != PD_HUGETLB_PAGE)
		return -EPROTO;
	return 0;
}
