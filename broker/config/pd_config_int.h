/* SPDX-License-Identifier: MIT */
#ifndef PD_BROKER_PD_CONFIG_INT_H
#define PD_BROKER_PD_CONFIG_INT_H

/*
 * Internal to pd_config*.c: one value of one table entry. pd_config.c
 * holds the table and the drivers (defaults, flags, files, help, dump);
 * pd_config_val.c turns text into a typed field, checks a typed field
 * against its entry, and formats it back.
 */
#include <stddef.h>

#include "pd_compiler.h"
#include "pd_config.h"

/* Format into err (may be NULL) and return -EINVAL. */
int pd_cfg_fail(char *err, size_t errlen, const char *fmt, ...) PD_PRINTF(3, 4);

/* Parse text into d's field of c and check it; c is unchanged on error.
 * @return 0; -EINVAL with "--name: reason" in err. */
int pd_cfg_set(const struct pd_cfg_def *d, struct pd_config *c, const char *text, char *err,
	       size_t errlen);

/* Check d's field of c against d (type, bounds). @return 0; -EINVAL. */
int pd_cfg_check(const struct pd_cfg_def *d, const struct pd_config *c, char *err,
		 size_t errlen);

/* d's field of c as text that pd_cfg_set() parses back to the same value. */
void pd_cfg_format(const struct pd_cfg_def *d, const struct pd_config *c, char *buf,
		   size_t len);

/* The allowed range for --help, e.g. "4K..1G"; "" when d has none. */
void pd_cfg_format_bounds(const struct pd_cfg_def *d, char *buf, size_t len);

#endif
