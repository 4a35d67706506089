/* SPDX-License-Identifier: MIT */
#ifndef PD_SHM_PD_PAGES_H
#define PD_SHM_PD_PAGES_H

/*
 * The pages under the payload arenas: huge pages where the host gives
 * them to shared memory, and page tables filled at map time, so that no
 * copy of a chunk ever takes a page fault (a first touch of a 4 KiB page
 * of shared memory costs more than copying it).
 *
 * Huge pages here are transparent huge pages of tmpfs: /dev/shm mounted
 * with huge=within_size, always or advise (pdkv asks with MADV_HUGEPAGE),
 * or /sys/kernel/mm/transparent_hugepage/shmem_enabled set to force.
 */
#include <stddef.h>
#include <stdint.h>

#define PD_HUGE_PAGE (2u << 20)

/* --hugepages */
#define PD_HUGE_AUTO 0u /* huge pages where the host has them, else 4 KiB */
#define PD_HUGE_ON   1u /* refuse to start without them */
#define PD_HUGE_OFF  2u /* 4 KiB pages, even where the mount would give huge */

/* Ask for (PD_HUGE_AUTO/ON) or against (PD_HUGE_OFF) huge pages for
 * [p, p + len) before its pages are allocated. 0 or -errno. */
int pd_pages_advise(void *p, size_t len, uint32_t mode);

/* Fill the page tables of [p, p + len) now, allocating what is missing
 * (write: the mapping is writable, and the pages are made writable in
 * it). 0; -ENOMEM or -EFAULT when the memory is not there (/dev/shm full);
 * -ENOSYS when the kernel cannot (before 5.14): the caller touches the
 * pages another way or lets them fault. */
int pd_pages_populate(void *p, size_t len, int write);

/* Read a byte of every page of [p, p + len): what pd_pages_populate() does
 * on a kernel without it. */
void pd_pages_touch(const void *p, size_t len);

/* Bytes of the mappings overlapping [p, p + len) that are mapped by huge
 * pages (/proc/self/smaps); -errno when smaps cannot be read. */
int64_t pd_pages_huge_bytes(const void *p, size_t len);

/* Why the host gives no huge pages to /dev/shm, as a phrase for a
 * message ("/dev/shm is mounted huge=never and shmem_enabled is never"). */
void pd_pages_why_not(char *buf, size_t len);

#endif
