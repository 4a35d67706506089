/* SPDX-License-Identifier: MIT */
#ifndef PD_BROKER_PD_TREE_H
#define PD_BROKER_PD_TREE_H

/*
 * Red-black trees from libbsd's <bsd/sys/tree.h>. Its RB_*_STATIC macros
 * use the BSD attribute __unused, which libbsd leaves undefined on Linux
 * (glibc headers use the name for struct members), so it is defined here,
 * after every system header this file pulls in.
 */
#include <sys/queue.h>
#include <bsd/sys/tree.h>

#ifndef __unused
#define __unused __attribute__((unused))
#endif

#endif
