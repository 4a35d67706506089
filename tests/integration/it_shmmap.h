/* SPDX-License-Identifier: MIT */
#ifndef PD_TESTS_INTEGRATION_IT_SHMMAP_H
#define PD_TESTS_INTEGRATION_IT_SHMMAP_H

/* Where an attached agent's process mapped a broker's segment: what a
 * buggy worker could write through. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pd_proc.h"

/* The start of this process's mapping of b's segment (from
 * /proc/self/maps), or NULL. */
static inline uint8_t *it_mapped_segment(const struct pd_test_broker *b)
{
	char line[512], want[128];
	FILE *f = fopen("/proc/self/maps", "r");
	unsigned long lo = 0;

	(void)snprintf(want, sizeof(want), "/dev/shm/pdkv.%s", b->name);
	while (f && fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		if (strstr(line, want) && strstr(line, " 00000000 ")) { /* offset 0 */
			lo = strtoul(line, NULL, 16);
			break;
		}
	}
	if (f)
		(void)fclose(f);
	return (uint8_t *)lo;
}

#endif
