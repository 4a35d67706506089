/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pd_rundir.h"

int pd_default_rundir(char *buf, size_t len)
{
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	uid_t uid = geteuid();
	int n;

	if (!buf)
		return -EINVAL;
	if (uid == 0)
		n = snprintf(buf, len, "/run/pdkv");
	else if (xdg && xdg[0] == '/' && strlen(xdg) + sizeof("/pdkv") <= len)
		n = snprintf(buf, len, "%s/pdkv", xdg);
	else
		n = snprintf(buf, len, "/tmp/pdkv-%u", (unsigned int)uid);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int pd_rundir_path(const char *dir, const char *name, const char *suffix, char *buf,
		   size_t len)
{
	char def[256];
	int n, rc;

	if (!name || !suffix || !buf)
		return -EINVAL;
	if (!dir) {
		rc = pd_default_rundir(def, sizeof(def));
		if (rc < 0)
			return rc;
		dir = def;
	}
	n = snprintf(buf, len, "%s/%s%s", dir, name, suffix);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}
