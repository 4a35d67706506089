/* SPDX-License-Identifier: MIT */
#ifndef PD_SHM_PD_RUNDIR_H
#define PD_SHM_PD_RUNDIR_H

/*
 * Where a broker keeps its sockets (<rundir>/<name>.sock for agents,
 * <rundir>/<name>.admin for pdctl) unless told otherwise: /run/pdkv for
 * root, else $XDG_RUNTIME_DIR/pdkv, else /tmp/pdkv-<uid>. The one rule that
 * pdbroker, libpdagent and pdctl share. An XDG_RUNTIME_DIR that is not
 * absolute, or too long for the buffer, is ignored.
 *
 * A client told no directory (no --rundir, opts.rundir or $PDKV_RUNDIR)
 * looks in its own default first and, when the file is not there and it
 * is not root, in /run/pdkv: so a worker in a root broker's --group finds
 * that broker with default settings, while a broker of the worker's own
 * user of the same name still comes first.
 */
#include <stddef.h>
#include <sys/types.h>

/* The rundir of a broker run as root, where non-root clients look second. */
#define PD_RUNDIR_SYSTEM "/run/pdkv"

/* 0, -EINVAL, -ENAMETOOLONG. */
int pd_default_rundir(char *buf, size_t len);

/* "<dir>/<name><suffix>" into buf; dir NULL: the client's search above
 * (the default's path when the file is in neither place). 0, -EINVAL,
 * -ENAMETOOLONG. */
int pd_rundir_path(const char *dir, const char *name, const char *suffix, char *buf,
		   size_t len);

/*
 * The broker's side: make dir (mode 0770 less the umask) when missing.
 * With a group (gid not (gid_t)-1), the group's workers must be able to
 * reach the sockets in it: a dir made here, or one of ours its group cannot
 * search, is given to the group with mode 2750 (the group may enter and
 * list it, not create or remove files in it: no worker can replace a
 * socket; the setgid bit gives what is created in it the group from the
 * start). A dir of another owner is left as it is, with a warning when the
 * group cannot search it. 0 or -errno, err set.
 */
int pd_rundir_make(const char *dir, gid_t gid, char *err, size_t errlen);

#endif
