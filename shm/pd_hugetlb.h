/* SPDX-License-Identifier: MIT */
#ifndef PD_SHM_PD_HUGETLB_H
#define PD_SHM_PD_HUGETLB_H

/*
 * The payload arenas in a file of their own, in reserved 2 MiB pages of
 * the kernel's hugetlb pool (vm.nr_hugepages): a memfd the broker creates
 * and fills at start, hands to each agent at attach, and that a same-host
 * sender opens as /proc/<broker pid>/fd/<n>. It has no name and needs no
 * mount: its pages go back to the pool when the last process holding the
 * file or a mapping of it lets go, so nothing is ever left behind.
 *
 * Why a second file: pages of the pool are the only memory whose first
 * write costs nothing more than any other (tmpfs pages, huge or not, are
 * allocated and, in a virtual machine, often mapped by the host at first
 * touch), and a tmpfs segment cannot hold them.
 */
#include <stddef.h>
#include <stdint.h>

#define PD_HUGETLB_PAGE (2u << 20)

/**
 * A hugetlb file of len bytes (a multiple of PD_HUGETLB_PAGE), mapped
 * read-write and filled: every page reserved and zeroed now.
 * @param label  the memfd's name (shown in /proc/<pid>/fd)
 * @return 0 with *fd and *base set; -ENOMEM fewer free huge pages than
 *         needed; -ENOSYS no 2 MiB hugetlb pages in this kernel; -errno
 *         from libc. why (may be NULL) says which, as a phrase.
 */
int pd_hugetlb_create(const char *label, uint64_t len, int *fd, void **base, char *why,
		      size_t whylen);

/* 0 when fd is a hugetlb file of exactly len bytes; -EPROTO otherwise
 * (a file the broker did not make), -errno when it cannot be told. */
int pd_hugetlb_check(int fd, uint64_t len);

/* Free 2 MiB pages of the pool, or -errno. */
int64_t pd_hugetlb_free_pages(void);

#endif
