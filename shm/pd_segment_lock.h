/* SPDX-License-Identifier: MIT */
#ifndef PD_SHM_PD_SEGMENT_LOCK_H
#define PD_SHM_PD_SEGMENT_LOCK_H

/*
 * The lock that says a broker lives (pd_segment_lock.c): flock(LOCK_EX) on
 * the segment file, held by the broker through an open file description no
 * other process has. Used by pd_segment.c (create, probe, reclaim); the
 * header's broker_pid is never what decides.
 */
#include <stdint.h>

/* Open name again (it must still be the file behind seg_fd) and lock it
 * exclusively, retrying briefly while a prober holds it. The lock fd, or
 * -ESTALE (the name is another file now), -EWOULDBLOCK, -errno. */
int pd_seglock_take(const char *name, int seg_fd);

/* Does anyone hold the lock of the file behind fd? 1 yes (its broker
 * lives), 0 no, -errno. Takes and drops a shared lock to find out. */
int pd_seglock_held(int fd);

/* Take the exclusive lock on fd (a stale segment about to be removed),
 * retrying briefly while a prober holds it. 0, -EWOULDBLOCK (held: a live
 * broker), -errno. */
int pd_seglock_claim(int fd);

/* The pid holding the exclusive flock on the file behind fd, from
 * /proc/locks; 0 when none or not visible from our pid namespace. */
int32_t pd_seglock_holder(int fd);

#endif
