/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pd_err.h"
#include "pd_log.h"
#include "pd_rundir.h"

int pd_default_rundir(char *buf, size_t len)
{
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	uid_t uid = geteuid();
	int n;

	if (!buf)
		return -EINVAL;
	if (uid == 0)
		n = snprintf(buf, len, "%s", PD_RUNDIR_SYSTEM);
	else if (xdg && xdg[0] == '/' && strlen(xdg) + sizeof("/pdkv") <= len)
		n = snprintf(buf, len, "%s/pdkv", xdg);
	else
		n = snprintf(buf, len, "/tmp/pdkv-%u", (unsigned int)uid);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

static int join(const char *dir, const char *name, const char *suffix, char *buf, size_t len)
{
	int n = snprintf(buf, len, "%s/%s%s", dir, name, suffix);

	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* Is <PD_RUNDIR_SYSTEM>/<name><suffix> there, in a directory of root's, or
 * may it be (a directory we cannot search: connecting says -EACCES)? */
static int in_system_rundir(const char *name, const char *suffix, char *buf, size_t len)
{
	struct stat st;

	if (stat(PD_RUNDIR_SYSTEM, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != 0 ||
	    join(PD_RUNDIR_SYSTEM, name, suffix, buf, len) < 0)
		return 0;
	return lstat(buf, &st) == 0 || errno == EACCES;
}

int pd_rundir_path(const char *dir, const char *name, const char *suffix, char *buf,
		   size_t len)
{
	char def[256], sys[256];
	struct stat st;
	int rc;

	if (!name || !suffix || !buf)
		return -EINVAL;
	if (dir)
		return join(dir, name, suffix, buf, len);
	rc = pd_default_rundir(def, sizeof(def));
	if (rc == 0)
		rc = join(def, name, suffix, buf, len);
	if (rc < 0 || geteuid() == 0 || lstat(buf, &st) == 0)
		return rc;
	if (in_system_rundir(name, suffix, sys, sizeof(sys)))
		return join(PD_RUNDIR_SYSTEM, name, suffix, buf, len);
	return 0;
}

/* May members of gid search a directory of this status? */
static int group_can_search(const struct stat *st, gid_t gid)
{
	return (st->st_mode & S_IXOTH) || (st->st_gid == gid && (st->st_mode & S_IXGRP));
}

int pd_rundir_make(const char *dir, gid_t gid, char *err, size_t errlen)
{
	struct stat st;
	int made, rc;

	if (!dir)
		return -EINVAL;
	made = mkdir(dir, 0770) == 0;
	if (!made && errno != EEXIST) {
		rc = -errno;
		pd_err_set(err, errlen, "--rundir %s: %s", dir, pd_strerror(rc));
		return rc;
	}
	rc = stat(dir, &st) < 0 ? -errno : S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
	if (rc < 0) {
		pd_err_set(err, errlen, "--rundir %s: %s", dir, pd_strerror(rc));
		return rc;
	}
	if (gid == (gid_t)-1 || (!made && group_can_search(&st, gid)))
		return 0;
	if (st.st_uid != geteuid()) {
		PD_LOG(WARN, rundir, "--rundir %s (uid %u, gid %u, mode %04o) is not ours and "
		       "group %u cannot enter it: its workers cannot attach", dir,
		       (unsigned int)st.st_uid, (unsigned int)st.st_gid,
		       (unsigned int)(st.st_mode & 07777), (unsigned int)gid);
		return 0;
	}
	if (chown(dir, (uid_t)-1, gid) < 0 || chmod(dir, 02750) < 0) {
		rc = -errno;
		pd_err_set(err, errlen, "--group: cannot give the rundir %s to it: %s", dir,
			   pd_strerror(rc));
		return rc;
	}
	if (!made)
		PD_LOG(INFO, rundir, "--rundir %s given to group %u (mode 2750): its workers "
		       "could not enter it", dir, (unsigned int)gid);
	return 0;
}
