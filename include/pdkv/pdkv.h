/* SPDX-License-Identifier: MIT */
#ifndef PD_INCLUDE_PDKV_PDKV_H
#define PD_INCLUDE_PDKV_PDKV_H

/* Umbrella header: what a worker process includes. */
#include <pdkv/agent.h>
#include <pdkv/types.h>
#include <pdkv/version.h>

#endif
