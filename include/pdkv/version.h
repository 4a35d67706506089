/* SPDX-License-Identifier: MIT */
#ifndef PD_INCLUDE_PDKV_VERSION_H
#define PD_INCLUDE_PDKV_VERSION_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PD_VERSION_MAJOR 0
#define PD_VERSION_MINOR 1
#define PD_VERSION_PATCH 0
#define PD_VERSION_STRING "0.1.0"

/* A version as one number, (major << 16) | (minor << 8) | patch, that
 * compares in order and works in #if:
 *   #if PD_VERSION_NUMBER >= PD_VERSION_NUM(0, 2, 0) */
#define PD_VERSION_NUM(major, minor, patch) (((major) << 16) | ((minor) << 8) | (patch))
#define PD_VERSION_NUMBER PD_VERSION_NUM(PD_VERSION_MAJOR, PD_VERSION_MINOR, PD_VERSION_PATCH)

/* ABI of the shared-memory segment between broker and agents. An agent
 * refuses a segment whose major differs or whose minor is lower than it
 * needs. */
#define PD_SHM_ABI_MAJOR 4
#define PD_SHM_ABI_MINOR 3

/**
 * Version of the library as a string, e.g. "0.1.0".
 *
 * @return a static string; never NULL.
 * Thread-safety: safe from any thread.
 */
const char *pd_version(void);

/**
 * Version of the library as a number, PD_VERSION_NUM(major, minor, patch):
 * compare it with the PD_VERSION_NUMBER a program was built with.
 *
 * @return (major << 16) | (minor << 8) | patch of the library linked.
 * Thread-safety: safe from any thread.
 */
uint32_t pd_version_number(void);

#ifdef __cplusplus
}
#endif
#endif
