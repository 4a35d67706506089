/* SPDX-License-Identifier: MIT */
#ifndef PD_SHM_PD_ERR_H
#define PD_SHM_PD_ERR_H

/*
 * The one place where foreign error conventions become -errno.
 *   libc, rdma_cm: -1 and errno      -> pd_sys_rc()
 *   pthread, verbs: positive errno   -> pd_pthread_rc()
 */
#include <errno.h>
#include <stddef.h>

#include <pdkv/types.h>

static inline int pd_sys_rc(int rc)
{
	return rc < 0 ? -errno : rc;
}

static inline int pd_pthread_rc(int rc)
{
	return -rc;
}

/* Copy a formatted message into an optional caller buffer (may be NULL). */
void pd_err_set(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif
