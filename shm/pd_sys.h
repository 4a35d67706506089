/* SPDX-License-Identifier: MIT */
#ifndef PD_SHM_PD_SYS_H
#define PD_SHM_PD_SYS_H

/*
 * The system pieces the broker's layers share: eventfds that wake a loop,
 * data threads started with every signal blocked, the process-private
 * mutexes that guard their queues, and TCP listeners (the data plane's,
 * --metrics-listen's). One home, so that no layer borrows another's
 * internals.
 */
#include <pthread.h>
#include <stdint.h>
#include <sys/socket.h>

#include "pd_log.h"

/* A non-blocking, close-on-exec eventfd, or -errno. */
int pd_efd_create(void);
/* Add one (a counter that cannot overflow at one per event: a failed write
 * is a bad fd, a bug of ours). */
void pd_efd_signal(int fd);
/* Back to zero (nothing to read: already zero). */
void pd_efd_drain(int fd);

/* Start a thread with every signal blocked (the broker's main thread
 * handles signals; data threads never run handlers). 0 or -errno. */
int pd_thread_start(pthread_t *thr, void *(*fn)(void *), void *arg);
void pd_thread_join(pthread_t thr);

/* A numeric IPv4 or IPv6 host (no brackets) and port as a socket address.
 * 0 or -EINVAL. */
int pd_sock_addr(const char *host, uint16_t port, struct sockaddr_storage *ss, socklen_t *len);
/* A non-blocking, close-on-exec TCP socket listening at ss (SO_REUSEADDR),
 * or -errno of socket, bind or listen. */
int pd_sock_listen(const struct sockaddr_storage *ss, socklen_t len, int backlog);

/* Default (non-robust, process-private) mutexes used by the book: a failure
 * is a bug. */
static inline void pd_lock(pthread_mutex_t *m)
{
	int rc = pthread_mutex_lock(m);

	PD_ASSERT(rc == 0);
}

static inline void pd_unlock(pthread_mutex_t *m)
{
	int rc = pthread_mutex_unlock(m);

	PD_ASSERT(rc == 0);
}

#endif
