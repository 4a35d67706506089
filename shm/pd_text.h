/* SPDX-License-Identifier: MIT */
#ifndef PD_SHM_PD_TEXT_H
#define PD_SHM_PD_TEXT_H

/* Small helpers for the line-oriented files pdkv reads (config, keys). */
#include <string.h>

/* s without leading blanks and trailing blanks and line ends (in place). */
static inline char *pd_text_trim(char *s)
{
	size_t n;

	while (*s == ' ' || *s == '\t')
		s++;
	n = strlen(s);
	while (n && strchr(" \t\r\n", s[n - 1]))
		s[--n] = '\0';
	return s;
}

#endif
