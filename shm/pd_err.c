/* SPDX-License-Identifier: MIT */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <pdkv/types.h>
#include <pdkv/version.h>

#include "pd_err.h"

const char *pd_strerror(int err)
{
	if (err < 0)
		err = -err;
	switch (err) {
	case 0:
		return "success";
	case EPROTO:
		return "protocol or layout mismatch, or corrupt data from a peer";
	case ENOBUFS:
		return "no free slot";
	case EBUSY:
		return "admission denied or object in use";
	case ECANCELED:
		return "request cancelled";
	case E2BIG:
		return "more slots requested than the pool holds";
	case ESTALE:
		return "stale slot reference";
	case ENOTCONN:
		return "broker gone";
	case EUSERS:
		return "broker full: every agent slot taken (--max-agents)";
	case EOWNERDEAD:
		return "peer died; its state was recovered";
	default:
		return strerror(err);
	}
}

const char *pd_version(void)
{
	return PD_VERSION_STRING;
}

void pd_err_set(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || errlen == 0)
		return;
	va_start(ap, fmt);
	(void)vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}
