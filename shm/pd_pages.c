/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "pd_pages.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

int pd_pages_advise(void *p, size_t len, uint32_t mode)
{
	int advice = mode == PD_HUGE_OFF ? MADV_NOHUGEPAGE : MADV_HUGEPAGE;

	if (len == 0)
		return 0;
	/* EINVAL: a kernel built without transparent huge pages. */
	if (madvise(p, len, advice) < 0 && errno != EINVAL)
		return -errno;
	return 0;
}

int pd_pages_populate(void *p, size_t len, int write)
{
	int advice = write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ;

	if (len == 0)
		return 0;
	while (madvise(p, len, advice) < 0) {
		if (errno == EINTR)
			continue;
		return errno == EINVAL ? -ENOSYS : -errno;
	}
	return 0;
}

void pd_pages_touch(const void *p, size_t len)
{
	const volatile uint8_t *b = p;

	for (size_t off = 0; off < len; off += 4096)
		(void)b[off];
}

/* "7f0000000000-7f0000200000 rw-s ..." -> its range; 0 when not a VMA line. */
static int vma_line(const char *line, uint64_t *lo, uint64_t *hi)
{
	return sscanf(line, "%" SCNx64 "-%" SCNx64 " ", lo, hi) == 2 && strchr(line, ' ');
}

int64_t pd_pages_huge_bytes(const void *p, size_t len)
{
	uint64_t lo = 0, hi = 0, a = (uint64_t)(uintptr_t)p, b = a + len, kib;
	int64_t huge = 0;
	char line[512];
	int in = 0;
	FILE *f = fopen("/proc/self/smaps", "re");

	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		if (vma_line(line, &lo, &hi)) {
			in = lo < b && a < hi;
			continue;
		}
		if (in && (sscanf(line, "ShmemPmdMapped: %" SCNu64 " kB", &kib) == 1 ||
			   sscanf(line, "FilePmdMapped: %" SCNu64 " kB", &kib) == 1))
			huge += (int64_t)kib << 10;
	}
	(void)fclose(f);
	return huge;
}

/* The word after marker on the last line of path that contains filter
 * (NULL: any line), or def when that line has no marker or there is none. */
static void word_after(const char *path, const char *filter, const char *marker, char *buf,
		       size_t len, const char *def)
{
	char line[1024], *at;
	FILE *f = fopen(path, "re");

	(void)snprintf(buf, len, "%s", def);
	while (f && fgets(line, sizeof(line), f)) {
		if (filter && !strstr(line, filter))
			continue;
		at = strstr(line, marker);
		(void)snprintf(buf, len, "%s", def);
		if (at)
			(void)sscanf(at + strlen(marker), "%15[a-z_]", buf);
	}
	if (f)
		(void)fclose(f);
}

void pd_pages_why_not(char *buf, size_t len)
{
	char mount[16], shmem[16];

	/* tmpfs's huge= option (none: never), and the bracketed choice of
	 * "always within_size [never] ..." */
	word_after("/proc/self/mountinfo", " /dev/shm ", "huge=", mount, sizeof(mount), "never");
	word_after("/sys/kernel/mm/transparent_hugepage/shmem_enabled", NULL, "[", shmem,
		   sizeof(shmem), "unavailable");
	(void)snprintf(buf, len, "/dev/shm is mounted huge=%s and "
		       "transparent_hugepage/shmem_enabled is %s", mount, shmem);
}
