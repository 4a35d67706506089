/* SPDX-License-Identifier: MIT */
#ifndef PD_SHM_PD_TIME_H
#define PD_SHM_PD_TIME_H

#include <stdint.h>
#include <time.h>

#define PD_NS_PER_MS 1000000ull
#define PD_NS_PER_S  1000000000ull

/* CLOCK_MONOTONIC in nanoseconds; every deadline in pdkv is on this clock. */
static inline uint64_t pd_now_ns(void)
{
	struct timespec ts;

	(void)clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * PD_NS_PER_S + (uint64_t)ts.tv_nsec;
}

/* CLOCK_REALTIME in nanoseconds: only for timestamps shown to people. */
static inline uint64_t pd_realtime_ns(void)
{
	struct timespec ts;

	(void)clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * PD_NS_PER_S + (uint64_t)ts.tv_nsec;
}

static inline uint64_t pd_deadline_ms(uint64_t timeout_ms)
{
	return pd_now_ns() + timeout_ms * PD_NS_PER_MS;
}

static inline struct timespec pd_ns_to_ts(uint64_t ns)
{
	struct timespec ts = {
		.tv_sec = (time_t)(ns / PD_NS_PER_S),
		.tv_nsec = (long)(ns % PD_NS_PER_S),
	};
	return ts;
}

#endif
