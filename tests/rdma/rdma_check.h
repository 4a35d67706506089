/* SPDX-License-Identifier: MIT */
#ifndef PD_TESTS_RDMA_RDMA_CHECK_H
#define PD_TESTS_RDMA_RDMA_CHECK_H

/* The programs tests/rdma/run.sh runs in the guest report one line per
 * check, "PASS name" or "FAIL name: why", which the runner counts. */
#include <stdarg.h>
#include <stdio.h>

#include "pd_compiler.h"

static int npass, nfail;

static int check(int ok, const char *name, const char *fmt, ...) PD_PRINTF(3, 4);

/* @return ok, so a failed precondition can stop a scenario. */
static int check(int ok, const char *name, const char *fmt, ...)
{
	va_list ap;

	if (ok) {
		printf("PASS %s\n", name);
		npass++;
	} else {
		printf("FAIL %s: ", name);
		va_start(ap, fmt);
		vprintf(fmt, ap);
		va_end(ap);
		printf("\n");
		nfail++;
	}
	fflush(stdout);
	return ok;
}

#endif
