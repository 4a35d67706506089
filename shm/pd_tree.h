/* SPDX-License-Identifier: MIT */
#ifndef PD_BROKER_PD_TREE_H
#define PD_BROKER_PD_TREE_H

/*
 * Lists and red-black trees from libbsd. Its RB_GENERATE_STATIC uses the
 * BSD attribute __unused, which libbsd leaves undefined on Linux (Linux and
 * glibc headers use the name for struct members), so a file defines it only
 * around the expansion:
 *
 *   #define __unused __attribute__((unused))
 *   RB_GENERATE_STATIC(name, type, field, cmp)
 *   #undef __unused
 */
#include <bsd/sys/queue.h>
#include <bsd/sys/tree.h>

#endif
