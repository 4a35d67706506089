/* SPDX-License-Identifier: MIT */
/*
 * Bounded structural pre-scan of raw msgpack, run before msgpack-c sees a
 * byte. msgpack-c allocates count * sizeof(msgpack_object) for a container
 * as soon as it reads the header, so a 5-byte "array of 2^32-1" would cost
 * gigabytes; here every header is checked against what is left of the
 * buffer and the PD_WIRE_MAX_* bounds first. No allocation, no recursion.
 */
#include <errno.h>

#include "pd_err.h"
#include "pd_wire_int.h"

/* Shapes of the 0xc0..0xdf formats. */
#define SC  1  /* scalar: body is `fixed` bytes */
#define RAW 2  /* str/bin/ext: body is the header's length + `fixed` (ext type) */
#define ARR 3
#define MAP 4
#define BAD 5

struct fmt {
	uint8_t shape;
	uint8_t hlen;   /* bytes of big-endian length/count after the tag */
	uint8_t fixed;
};

static const struct fmt fmts[32] = {
	[0x00] = { SC, 0, 0 },  /* nil */
	[0x01] = { BAD, 0, 0 }, /* never used */
	[0x02] = { SC, 0, 0 },  /* false */
	[0x03] = { SC, 0, 0 },  /* true */
	[0x04] = { RAW, 1, 0 }, [0x05] = { RAW, 2, 0 }, [0x06] = { RAW, 4, 0 }, /* bin */
	[0x07] = { RAW, 1, 1 }, [0x08] = { RAW, 2, 1 }, [0x09] = { RAW, 4, 1 }, /* ext */
	[0x0a] = { SC, 0, 4 },  [0x0b] = { SC, 0, 8 },                          /* float */
	[0x0c] = { SC, 0, 1 },  [0x0d] = { SC, 0, 2 },                          /* uint */
	[0x0e] = { SC, 0, 4 },  [0x0f] = { SC, 0, 8 },
	[0x10] = { SC, 0, 1 },  [0x11] = { SC, 0, 2 },                          /* int */
	[0x12] = { SC, 0, 4 },  [0x13] = { SC, 0, 8 },
	[0x14] = { SC, 0, 2 },  [0x15] = { SC, 0, 3 }, [0x16] = { SC, 0, 5 },   /* fixext */
	[0x17] = { SC, 0, 9 },  [0x18] = { SC, 0, 17 },
	[0x19] = { RAW, 1, 0 }, [0x1a] = { RAW, 2, 0 }, [0x1b] = { RAW, 4, 0 }, /* str */
	[0x1c] = { ARR, 2, 0 }, [0x1d] = { ARR, 4, 0 },                         /* array */
	[0x1e] = { MAP, 2, 0 }, [0x1f] = { MAP, 4, 0 },                         /* map */
};

/* One object's header, decoded. */
struct item {
	size_t size;     /* tag + header + body bytes (containers: tag + header) */
	uint32_t n;      /* entries of a container (map: pairs) */
	uint8_t shape;
};

struct scan {
	const uint8_t *p;
	size_t len;
	size_t pos;
	char *err;
	size_t errlen;
};

static int bad(struct scan *s, const char *why)
{
	pd_err_set(s->err, s->errlen, "malformed msgpack at byte %zu: %s", s->pos, why);
	return -EPROTO;
}

static uint32_t be(const uint8_t *p, uint8_t n)
{
	uint32_t v = 0;

	for (uint8_t i = 0; i < n; i++)
		v = v << 8 | p[i];
	return v;
}

/* Formats whose size the tag alone gives. */
static void head_fix(uint8_t tag, struct item *it)
{
	it->size = 1;
	it->n = 0;
	it->shape = SC;
	if (tag >= 0x80 && tag <= 0x8f) {
		it->shape = MAP;
		it->n = tag & 0x0f;
	} else if (tag >= 0x90 && tag <= 0x9f) {
		it->shape = ARR;
		it->n = tag & 0x0f;
	} else if (tag >= 0xa0 && tag <= 0xbf) {
		it->size = 1u + (tag & 0x1f);
	}
}

static int head(struct scan *s, struct item *it)
{
	const uint8_t *p = s->p + s->pos;
	size_t left = s->len - s->pos;
	const struct fmt *f;
	uint32_t v;

	if (p[0] < 0xc0 || p[0] >= 0xe0) {
		head_fix(p[0], it);
		return 0;
	}
	f = &fmts[p[0] - 0xc0];
	if (f->shape == BAD)
		return bad(s, "reserved format 0xc1");
	if (left < 1u + f->hlen)
		return bad(s, "truncated header");
	v = be(p + 1, f->hlen);
	it->shape = f->shape;
	it->n = f->shape == ARR || f->shape == MAP ? v : 0;
	it->size = 1u + f->hlen + f->fixed;
	if (f->shape == RAW)
		it->size += v;
	return 0;
}

/* Check one container against the bounds; its entries follow it. */
static int open_container(struct scan *s, const struct item *it, uint32_t depth)
{
	uint64_t objs = it->shape == MAP ? 2ull * it->n : it->n;

	if (depth >= PD_WIRE_MAX_DEPTH)
		return bad(s, "nested too deep");
	if (it->n > PD_WIRE_MAX_KEYS)
		return bad(s, "container of more than PD_WIRE_MAX_KEYS entries");
	if (objs > s->len - s->pos - it->size)
		return bad(s, "truncated (more entries than bytes left)");
	return 0;
}

/*
 * left[d] counts the objects still due at nesting level d; level 0 holds
 * the single top-level object.
 */
static int walk(struct scan *s)
{
	uint32_t left[PD_WIRE_MAX_DEPTH + 1];
	uint32_t depth = 0, nobj = 0;
	struct item it = { 0 };
	int rc;

	left[0] = 1;
	while (depth > 0 || left[0] > 0) {
		if (s->pos >= s->len)
			return bad(s, "truncated");
		if (++nobj > PD_WIRE_MAX_OBJS)
			return bad(s, "more than PD_WIRE_MAX_OBJS objects");
		rc = head(s, &it);
		if (rc < 0)
			return rc;
		if (it.size > s->len - s->pos)
			return bad(s, "truncated (object runs past the end)");
		left[depth]--;
		if (it.shape == ARR || it.shape == MAP) {
			rc = open_container(s, &it, depth);
			if (rc < 0)
				return rc;
			if (it.n > 0)
				left[++depth] = it.shape == MAP ? 2 * it.n : it.n;
		}
		s->pos += it.size;
		while (depth > 0 && left[depth] == 0)
			depth--;
	}
	return 0;
}

int pd_wire_scan(const uint8_t *p, size_t len, char *err, size_t errlen)
{
	struct scan s = { .p = p, .len = len, .err = err, .errlen = errlen };
	int rc;

	if (len > PD_WIRE_MAX_MSG) {
		pd_err_set(err, errlen, "message of %zu bytes exceeds %u", len, PD_WIRE_MAX_MSG);
		return -EMSGSIZE;
	}
	if (len == 0) {
		pd_err_set(err, errlen, "empty message");
		return -EPROTO;
	}
	rc = walk(&s);
	if (rc < 0)
		return rc;
	if (s.pos != len)
		return bad(&s, "trailing bytes after the message");
	return 0;
}
