/* SPDX-License-Identifier: MIT */
/* Eventfds and data threads (pd_sys.h). */
#include <errno.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "pd_err.h"
#include "pd_sys.h"

int pd_efd_create(void)
{
	return pd_sys_rc(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
}

void pd_efd_signal(int fd)
{
	uint64_t one = 1;
	ssize_t r;

	do
		r = write(fd, &one, sizeof(one));
	while (r < 0 && errno == EINTR);
	PD_ASSERT(r == (ssize_t)sizeof(one) || errno == EAGAIN);
}

void pd_efd_drain(int fd)
{
	uint64_t v;
	ssize_t r;

	do
		r = read(fd, &v, sizeof(v));
	while (r < 0 && errno == EINTR);
	PD_ASSERT(r == (ssize_t)sizeof(v) || errno == EAGAIN);
}

int pd_thread_start(pthread_t *thr, void *(*fn)(void *), void *arg)
{
	sigset_t all, old;
	int rc, rc2;

	(void)sigfillset(&all);
	rc = pd_pthread_rc(pthread_sigmask(SIG_BLOCK, &all, &old));
	if (rc < 0)
		return rc;
	rc = pd_pthread_rc(pthread_create(thr, NULL, fn, arg));
	rc2 = pthread_sigmask(SIG_SETMASK, &old, NULL);
	PD_ASSERT(rc2 == 0);
	return rc;
}

void pd_thread_join(pthread_t thr)
{
	int rc = pthread_join(thr, NULL);

	PD_ASSERT(rc == 0);
}
