/* SPDX-License-Identifier: MIT */
#ifndef PD_SHM_PD_SYNC_H
#define PD_SHM_PD_SYNC_H

/*
 * Robust process-shared mutex and CLOCK_MONOTONIC condvar, for objects in
 * shared memory. Every wait takes an absolute deadline (pd_now_ns() clock).
 *
 * Owner death: when the previous holder died with the mutex held, the next
 * locker gets the lock together with the duty to repair. The repair callback
 * runs with the mutex held, before pthread_mutex_consistent(); the call then
 * returns 1 ("recovered") instead of 0. Without a callback the state is
 * declared consistent unrepaired, which is only right for mutexes whose
 * protected state is always consistent.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

/* Repair the state a mutex protects after its holder died; may fail. */
typedef int pd_repair_fn(void *ctx);

struct pd_mutex {
	pthread_mutex_t m;
	/* Set when a repair failed: the mutex is dead for everyone. Checked
	 * before touching m (glibc's trylock mishandles an unrecoverable
	 * robust mutex: it leaves the lock word owned by the caller). */
	_Atomic uint32_t unrecoverable;
	uint32_t _rsvd;
};

/*
 * A futex-based condition variable. A glibc process-shared pthread_cond_t
 * keeps per-waiter state: a waiter killed while blocked can make the next
 * broadcast block forever (with the caller's mutex held). This one keeps
 * nothing per waiter: a sequence word (the futex) and a waiter hint. A dead
 * waiter leaves at most a stale hint, which costs one wake syscall.
 */
struct pd_cond {
	_Atomic uint32_t seq;     /* futex word; bumped by every signal/broadcast */
	_Atomic uint32_t waiters; /* hint: blocked waiters (may overcount, never under) */
};

/* How long a woken waiter tries to take its mutex back. */
#define PD_COND_RELOCK_MS 10000u

/* Initialise in caller (shared) memory: process-shared, robust, errorcheck. */
int pd_mutex_init(struct pd_mutex *mx);
/* Zero the condvar (process-shared, CLOCK_MONOTONIC by construction). */
int pd_cond_init(struct pd_cond *cv);

/**
 * Lock, waiting at most until deadline_ns (CLOCK_MONOTONIC).
 * @return 0 locked; 1 locked after repairing a dead holder's state;
 *         -ETIMEDOUT (also when the caller holds it already);
 *         -ENOTRECOVERABLE (an earlier repair failed, or this one did: the
 *         mutex is then unusable); -EINVAL.
 */
int pd_mutex_lock_until(struct pd_mutex *mx, uint64_t deadline_ns,
			pd_repair_fn *repair, void *ctx);
/* As pd_mutex_lock_until(), but tries without reading the clock first and
 * waits at most timeout_ms when the mutex is busy. */
int pd_mutex_lock_timeout(struct pd_mutex *mx, uint32_t timeout_ms,
			  pd_repair_fn *repair, void *ctx);
void pd_mutex_unlock(struct pd_mutex *mx);
/* Does the thread the mutex word names as its holder exist (and, with
 * pid > 0, belong to process pid)? 1 yes, 0 no (no holder, or a thread
 * that is gone or never was: the word was written over). From the kernel's
 * /proc, not from the mutex's memory alone. */
int pd_mutex_owner_alive(const struct pd_mutex *mx, int32_t pid);
/* The same for a holder in another pid namespace (a container): is the lock
 * word's thread id that of a thread of process pid (as seen here) in its
 * own namespace (the last "NSpid:" of /proc/<pid>/task/<t>/status)? */
int pd_mutex_owner_in(const struct pd_mutex *mx, int32_t pid);
/* Wake every thread asleep on mx's lock word: after mx was made new in
 * place (pd_mutex_init() over a word that named a holder), the sleepers'
 * waiters bit is gone with the old word, so no unlock would wake them. */
void pd_mutex_wake_all(struct pd_mutex *mx);

/**
 * Wait on cv with mx held until signalled or deadline_ns. The mutex is held
 * again on every return except -ENOTRECOVERABLE and -ENOLCK (see
 * pd_sync_lost()).
 * @return 0 woken (possibly spuriously); 1 woken and a dead holder's state
 *         was repaired; -ETIMEDOUT; -ENOTRECOVERABLE; -ENOLCK the mutex was
 *         not had back within PD_COND_RELOCK_MS (a live holder is stuck);
 *         -EINVAL.
 */
int pd_cond_wait_until(struct pd_cond *cv, struct pd_mutex *mx, uint64_t deadline_ns,
		       pd_repair_fn *repair, void *ctx);
/* 1 when a pd_cond_wait_until() result means the mutex is not held. */
static inline int pd_sync_lost(int rc)
{
	return rc == -ENOTRECOVERABLE || rc == -ENOLCK;
}
void pd_cond_signal(struct pd_cond *cv);
void pd_cond_broadcast(struct pd_cond *cv);

/* getpid(), cached (and refreshed in a forked child): no system call. */
int32_t pd_self_pid(void);
/* 1 when pid is a live process, 0 when it is gone (or a zombie). */
int pd_pid_alive(int32_t pid);

/* The pid namespace of this process (the inode of /proc/self/ns/pid),
 * cached like pd_self_pid(); PD_PIDNS_UNKNOWN without /proc. A pid written
 * to shared memory goes with it: processes of one broker may run in other
 * pid namespaces (containers), where the same number is another process. */
#define PD_PIDNS_UNKNOWN 0u
uint32_t pd_self_pidns(void);
/* pd_pid_alive() for a pid of namespace pidns: 1 (cannot tell, so taken as
 * live) when that is not this process's namespace; a record of namespace
 * PD_PIDNS_UNKNOWN counts as of another unless this process's is unknown
 * too (then its socket's close, not /proc, says it is gone). */
int pd_proc_alive(int32_t pid, uint32_t pidns);
/* Does a record of rpid in namespace rns name process pid of namespace ns?
 * ns PD_PIDNS_UNKNOWN (a process that could not say, or an agent of shm
 * ABI 4.1): any namespace, by pid alone. */
static inline int pd_proc_is(int32_t rpid, uint32_t rns, int32_t pid, uint32_t ns)
{
	return rpid == pid && (ns == PD_PIDNS_UNKNOWN || rns == ns);
}
/* Start time of pid in clock ticks since boot (/proc/<pid>/stat field 22);
 * with the pid it identifies a process across pid reuse. */
int pd_pid_start_time(int32_t pid, uint64_t *out);
/* This process's: read from /proc/self, which is this process also when
 * /proc is the mount of another pid namespace (where /proc/<getpid()> is
 * someone else). */
int pd_self_start_time(uint64_t *out);

#endif
