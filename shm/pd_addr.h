/* SPDX-License-Identifier: MIT */
#ifndef PD_SHM_PD_ADDR_H
#define PD_SHM_PD_ADDR_H

/*
 * "host:port" as every part of pdkv reads it: flags, Hello addresses,
 * endpoints. An IPv6 host goes in brackets ("[::1]:17600"); the brackets
 * are not part of the host. The host is 1..255 characters of
 * [A-Za-z0-9.-_:%*] ('*' alone: any address), and holds no ':' unless
 * bracketed.
 */
#include <stddef.h>
#include <stdint.h>

#define PD_ADDR_HOST_MAX 255u

/* Port "*" or 0 (bind to a free one) accepted, as 0. */
#define PD_ADDR_PORT_ANY  0x1u
/* Port "*" accepted, as 0 (0 itself is not: ZeroMQ's endpoints). */
#define PD_ADDR_PORT_STAR 0x2u

/**
 * Split s (len bytes; NUL not needed) into host and port.
 * @param host  hlen bytes (NUL-terminated on success; may be NULL to check only).
 * @return 0; -EINVAL not host:port (a bad host, port 0 or "*" not allowed
 *         by flags, > 65535, trailing bytes); -ENAMETOOLONG the host
 *         does not fit hlen.
 */
int pd_addr_split(const char *s, size_t len, uint32_t flags, char *host, size_t hlen,
		  uint16_t *port);

/* "host:port", bracketing an IPv6 host. @return snprintf's count. */
int pd_addr_join(char *out, size_t len, const char *host, uint16_t port);

#endif
