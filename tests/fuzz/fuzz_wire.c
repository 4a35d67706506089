/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the wire codec: any input must decode or be refused
 * with -EPROTO/-EMSGSIZE (never crash, leak or hang). What decodes must
 * encode, decode again, and encode to the very same bytes: the decoder and
 * the encoder agree on every bound.
 *
 *   make fuzz FUZZ_SECONDS=60
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pd_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Encode m into b, decode that into out; both must succeed. */
static void reencode(const struct pd_msg *m, struct pd_wire_buf *b, struct pd_wire_dec *d,
		     struct pd_msg *out)
{
	char err[160];

	if (pd_wire_encode(m, b) != 0)
		abort();
	if (pd_wire_decode(d, b->data, b->len, out, err, sizeof(err)) != 0)
		abort();
	if (out->type != m->type)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct pd_wire_dec d1, d2;
	struct pd_wire_buf b1, b2;
	struct pd_msg m1, m2;
	char err[160];
	int rc;

	pd_wire_dec_init(&d1);
	pd_wire_dec_init(&d2);
	pd_wire_buf_init(&b1);
	pd_wire_buf_init(&b2);
	/* A non-NULL pointer even for an empty input. */
	rc = pd_wire_decode(&d1, size ? (const void *)data : "", size, &m1, err, sizeof(err));
	if (rc == 0) {
		reencode(&m1, &b1, &d2, &m2);
		if (pd_wire_encode(&m2, &b2) != 0)
			abort();
		if (b1.len != b2.len || memcmp(b1.data, b2.data, b1.len) != 0)
			abort();
	} else if (rc != -EPROTO && rc != -EMSGSIZE) {
		abort();
	}
	pd_wire_buf_fini(&b2);
	pd_wire_buf_fini(&b1);
	pd_wire_dec_fini(&d2);
	pd_wire_dec_fini(&d1);
	return 0;
}
