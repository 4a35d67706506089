/* SPDX-License-Identifier: MIT */
/* --metrics-listen: the text buffer answers are built in (pd_metrics_int.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pd_metrics_int.h"

static int grow(struct pd_mbuf *b, size_t need)
{
	size_t cap = b->cap ? b->cap : 16384;
	char *p;

	if (b->err)
		return b->err;
	if (need > PD_MBUF_MAX) {
		b->err = -ENOMEM;
		return b->err;
	}
	while (cap < need)
		cap *= 2;
	if (cap > PD_MBUF_MAX)
		cap = PD_MBUF_MAX;
	if (cap <= b->cap)
		return 0;
	p = realloc(b->p, cap);
	if (!p) {
		b->err = -ENOMEM;
		return b->err;
	}
	b->p = p;
	b->cap = cap;
	return 0;
}

void pd_mbuf_add(struct pd_mbuf *b, const char *s, size_t n)
{
	if (grow(b, b->len + n + 1) < 0)
		return;
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

void pd_mbuf_printf(struct pd_mbuf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	for (int pass = 0; pass < 2 && !b->err; pass++) {
		size_t room = b->cap - b->len;

		va_start(ap, fmt);
		n = vsnprintf(room ? b->p + b->len : NULL, room, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->err = -EINVAL;
			return;
		}
		if ((size_t)n < room) {
			b->len += (size_t)n;
			return;
		}
		if (grow(b, b->len + (size_t)n + 1) < 0)
			return;
	}
}

void pd_mbuf_free(struct pd_mbuf *b)
{
	free(b->p);
	*b = (struct pd_mbuf){ 0 };
}
