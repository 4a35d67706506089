/* SPDX-License-Identifier: MIT */
#ifndef PD_TESTS_FUZZ_FUZZ_INPUT_H
#define PD_TESTS_FUZZ_FUZZ_INPUT_H

/* Reading a fuzz input as a stream of fields; past its end every field is 0. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct fzi {
	const uint8_t *p;
	size_t n;
};

static inline int fzi_more(const struct fzi *in)
{
	return in->n > 0;
}

static inline uint8_t fzi_u8(struct fzi *in)
{
	if (!in->n)
		return 0;
	in->n--;
	return *in->p++;
}

static inline uint32_t fzi_u16(struct fzi *in)
{
	uint32_t lo = fzi_u8(in);

	return lo | (uint32_t)fzi_u8(in) << 8;
}

static inline uint32_t fzi_u32(struct fzi *in)
{
	uint32_t lo = fzi_u16(in);

	return lo | fzi_u16(in) << 16;
}

/* Up to max bytes into dst; how many there were. */
static inline size_t fzi_bytes(struct fzi *in, void *dst, size_t max)
{
	size_t n = in->n < max ? in->n : max;

	memcpy(dst, in->p, n);
	in->p += n;
	in->n -= n;
	return n;
}

#endif
