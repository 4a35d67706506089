/* SPDX-License-Identifier: MIT */
#ifndef PD_SHM_PD_RUNDIR_H
#define PD_SHM_PD_RUNDIR_H

/*
 * Where a broker keeps its sockets (<rundir>/<name>.sock for agents,
 * <rundir>/<name>.admin for pdctl) unless told otherwise: /run/pdkv for
 * root, else $XDG_RUNTIME_DIR/pdkv, else /tmp/pdkv-<uid>. The one rule that
 * pdbroker, libpdagent and pdctl share. An XDG_RUNTIME_DIR that is not
 * absolute, or too long for the buffer, is ignored.
 */
#include <stddef.h>

/* 0, -EINVAL, -ENAMETOOLONG. */
int pd_default_rundir(char *buf, size_t len);

/* "<dir or the default>/<name><suffix>" into buf. 0, -EINVAL, -ENAMETOOLONG. */
int pd_rundir_path(const char *dir, const char *name, const char *suffix, char *buf,
		   size_t len);

#endif
