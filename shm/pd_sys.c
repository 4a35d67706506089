/* SPDX-License-Identifier: MIT */
/* Eventfds, data threads and TCP listeners (pd_sys.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <string.h>
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

int pd_sock_addr(const char *host, uint16_t port, struct sockaddr_storage *ss, socklen_t *len)
{
	struct sockaddr_in *in4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;

	memset(ss, 0, sizeof(*ss));
	if (host && inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
		in4->sin_family = AF_INET;
		in4->sin_port = htons(port);
		*len = sizeof(*in4);
		return 0;
	}
	if (host && inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons(port);
		*len = sizeof(*in6);
		return 0;
	}
	return -EINVAL;
}

int pd_sock_listen(const struct sockaddr_storage *ss, socklen_t len, int backlog)
{
	int one = 1, fd, rc;

	fd = pd_sys_rc(socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
	if (fd < 0)
		return fd;
	rc = pd_sys_rc(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)));
	if (rc == 0)
		rc = pd_sys_rc(bind(fd, (const struct sockaddr *)ss, len));
	if (rc == 0)
		rc = pd_sys_rc(listen(fd, backlog));
	if (rc == 0)
		return fd;
	(void)close(fd);
	return rc;
}
