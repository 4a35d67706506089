/* SPDX-License-Identifier: MIT */
#ifndef PD_BROKER_PD_WIRE_INT_H
#define PD_BROKER_PD_WIRE_INT_H

/*
 * Codec internals shared by pd_wire.c (message table), pd_wire_scan.c (raw
 * pre-scan), pd_wire_dec.c and pd_wire_enc.c. Every message is described
 * once, as a table of fields; the encoder, the decoder and the bound checks
 * all walk that table, so no message has code of its own.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "pd_wire.h"

/* Field kinds. Lists hold a uint32_t count at aux. */
#define PD_WF_U32   1u   /* uint32_t, range [min, max] */
#define PD_WF_U64   2u   /* uint64_t, >= min */
#define PD_WF_I32   3u   /* int32_t, range [min, max] */
#define PD_WF_BOOL  4u   /* uint32_t 0/1 from a msgpack bool */
#define PD_WF_BYTES 5u   /* struct pd_bytes, length [min, max] */
#define PD_WF_KEYS  6u   /* const struct pd_bytes *, each [min, max] bytes */
#define PD_WF_NAMES 7u   /* struct pd_bytes[PD_WIRE_MAX_XPORTS] inline */
#define PD_WF_U32S  8u   /* const uint32_t *, each in [min, max] */
#define PD_WF_I32S  9u   /* const int32_t *, each in [min, max] */
#define PD_WF_LMC   10u  /* LMCache field: ignored in, placeholder out (min = PD_LMC_*) */

/* LMCache placeholders pdkv sends for fields it does not model. */
#define PD_LMC_INT  1    /* 0 */
#define PD_LMC_LIST 2    /* [] */
#define PD_LMC_STR  3    /* "" */

/* Field flags. */
#define PD_WF_REQ    0x01u  /* required */
#define PD_WF_BIN    0x02u  /* sent as bin (str or bin accepted either way) */
#define PD_WF_SHARED 0x04u  /* list counted by another field's aux; lengths must agree */
#define PD_WF_PRES   0x08u  /* optional; present iff the uint32_t at aux is non-zero */

#define PD_WIRE_FIELDS_MAX 16u

struct pd_wire_field {
	const char *name;
	uint8_t kind;         /* PD_WF_* kind */
	uint8_t flags;        /* PD_WF_* flags */
	uint16_t off;         /* value, list pointer or inline array in struct pd_msg */
	uint16_t aux;         /* list: its uint32_t count; PD_WF_PRES: the presence flag */
	uint16_t nmin, nmax;  /* list length bounds */
	int64_t min, max;     /* integer range, byte-string length or list-entry bound */
	int64_t def;          /* value of an absent optional scalar; not sent when equal */
};

struct pd_wire_spec {
	const char *name;     /* the "type" string */
	uint32_t type;        /* PD_MSG_* */
	uint32_t nfields;
	const struct pd_wire_field *fields;
	/* Cross-field rule, or NULL: returns why m is invalid, or NULL. */
	const char *(*check)(const struct pd_msg *m);
};

const struct pd_wire_spec *pd_wire_spec_of(uint32_t type);
const struct pd_wire_spec *pd_wire_spec_named(const void *name, size_t len);


static inline void *pd_wire_at(struct pd_msg *m, uint16_t off)
{
	return (uint8_t *)m + off;
}

static inline const void *pd_wire_cat(const struct pd_msg *m, uint16_t off)
{
	return (const uint8_t *)m + off;
}

static inline uint32_t pd_wire_u32(const struct pd_msg *m, uint16_t off)
{
	uint32_t v;

	memcpy(&v, pd_wire_cat(m, off), sizeof(v));
	return v;
}

/* Element size of a list kind. */
static inline size_t pd_wire_esize(uint8_t kind)
{
	return kind == PD_WF_KEYS || kind == PD_WF_NAMES ? sizeof(struct pd_bytes) :
							   sizeof(uint32_t);
}

/* Element kind of a list kind. */
static inline uint8_t pd_wire_ekind(uint8_t kind)
{
	switch (kind) {
	case PD_WF_KEYS:
	case PD_WF_NAMES:
		return PD_WF_BYTES;
	case PD_WF_U32S:
		return PD_WF_U32;
	default:
		return PD_WF_I32;
	}
}

static inline int pd_wire_is_list(uint8_t kind)
{
	return kind >= PD_WF_KEYS && kind <= PD_WF_I32S;
}

#endif
