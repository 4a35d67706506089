/* SPDX-License-Identifier: MIT */
/* host:port (pd_addr.h): one parser for flags, Hello and endpoints. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "pd_addr.h"

static int host_char(char c, int bracketed)
{
	return isalnum((unsigned char)c) || strchr(".-_%*", c) || (bracketed && c == ':');
}

/* The port after the last ':'; -1 for a bad one. */
static long port_of(const char *p, size_t n, uint32_t flags)
{
	long v = 0;

	if (n == 1 && *p == '*')
		return flags & (PD_ADDR_PORT_ANY | PD_ADDR_PORT_STAR) ? 0 : -1;
	if (n == 0 || n > 5)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (!isdigit((unsigned char)p[i]))
			return -1;
		v = v * 10 + (p[i] - '0');
	}
	return v > 65535 || (v == 0 && !(flags & PD_ADDR_PORT_ANY)) ? -1 : v;
}

int pd_addr_split(const char *s, size_t len, uint32_t flags, char *host, size_t hlen,
		  uint16_t *port)
{
	const char *colon = s ? memrchr(s, ':', len) : NULL;
	size_t hn = colon ? (size_t)(colon - s) : 0;
	const char *h = s;
	int bracketed = hn >= 2 && s[0] == '[' && s[hn - 1] == ']';
	long p;

	if (!colon || hn == 0)
		return -EINVAL;
	if (bracketed) {
		h++;
		hn -= 2;
	}
	if (hn == 0 || hn > PD_ADDR_HOST_MAX)
		return -EINVAL;
	for (size_t i = 0; i < hn; i++)
		if (!host_char(h[i], bracketed))
			return -EINVAL;
	p = port_of(colon + 1, len - hn - (bracketed ? 2 : 0) - 1, flags);
	if (p < 0)
		return -EINVAL;
	if (host && hn >= hlen)
		return -ENAMETOOLONG;
	if (host) {
		memcpy(host, h, hn);
		host[hn] = '\0';
	}
	if (port)
		*port = (uint16_t)p;
	return 0;
}

int pd_addr_join(char *out, size_t len, const char *host, uint16_t port)
{
	return snprintf(out, len, strchr(host, ':') ? "[%s]:%u" : "%s:%u", host, port);
}
