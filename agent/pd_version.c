/* SPDX-License-Identifier: MIT */
/* The library's version as a number (pd_version(), the string, is the core's). */
#include <pdkv/version.h>

uint32_t pd_version_number(void)
{
	return PD_VERSION_NUMBER;
}
