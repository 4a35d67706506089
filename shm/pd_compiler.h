/* SPDX-License-Identifier: MIT */
#ifndef PD_SHM_PD_COMPILER_H
#define PD_SHM_PD_COMPILER_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define PD_CACHE_LINE 64

#define PD_LIKELY(x)   __builtin_expect(!!(x), 1)
#define PD_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define PD_UNUSED      __attribute__((unused))
#define PD_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define PD_NORETURN    _Noreturn

#define PD_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define PD_ALIGN_UP(x, a) (((x) + ((a) - 1)) & ~((__typeof__(x))(a) - 1))
#define PD_IS_POW2(x)   ((x) != 0 && ((x) & ((x) - 1)) == 0)

#define pd_container_of(p, T, m) ((T *)((char *)(p) - offsetof(T, m)))
/* The same, for a pointer to const. */
#define pd_container_of_const(p, T, m) ((const T *)((const char *)(p) - offsetof(T, m)))

/* Atomics placed in shared memory must be address-free, i.e. lock-free. */
_Static_assert(ATOMIC_INT_LOCK_FREE == 2 && ATOMIC_LLONG_LOCK_FREE == 2,
	       "shm atomics must be lock-free");

/* Relaxed counter helpers for statistics that pdctl reads lock-free. */
static inline void pd_stat_add(_Atomic uint64_t *c, uint64_t v)
{
	atomic_fetch_add_explicit(c, v, memory_order_relaxed);
}

static inline uint64_t pd_stat_get(const _Atomic uint64_t *c)
{
	return atomic_load_explicit(c, memory_order_relaxed);
}

static inline void pd_stat_set(_Atomic uint64_t *c, uint64_t v)
{
	atomic_store_explicit(c, v, memory_order_relaxed);
}

/* Add for a counter with a single writer (e.g. under a mutex): a plain
 * load and store, no locked instruction. */
static inline void pd_stat_add1w(_Atomic uint64_t *c, uint64_t v)
{
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + v,
			      memory_order_relaxed);
}

/* Raise a high-water mark; only the writer role of the mark calls this. */
static inline void pd_stat_max(_Atomic uint64_t *c, uint64_t v)
{
	if (v > atomic_load_explicit(c, memory_order_relaxed))
		atomic_store_explicit(c, v, memory_order_relaxed);
}

#endif
