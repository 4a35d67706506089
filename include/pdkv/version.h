/* SPDX-License-Identifier: MIT */
#ifndef PD_INCLUDE_PDKV_VERSION_H
#define PD_INCLUDE_PDKV_VERSION_H

#ifdef __cplusplus
extern "C" {
#endif

#define PD_VERSION_MAJOR 0
#define PD_VERSION_MINOR 1
#define PD_VERSION_PATCH 0
#define PD_VERSION_STRING "0.1.0"

/* ABI of the shared-memory segment between broker and agents. An agent
 * refuses a segment whose major differs or whose minor is lower than it
 * needs. */
#define PD_SHM_ABI_MAJOR 1
#define PD_SHM_ABI_MINOR 2

/**
 * Version of the library as a string, e.g. "0.1.0".
 *
 * @return a static string; never NULL.
 * Thread-safety: safe from any thread.
 */
const char *pd_version(void);

#ifdef __cplusplus
}
#endif
#endif
