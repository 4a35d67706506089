#!/bin/bash
# SPDX-License-Identifier: MIT
# In the guest (tests/rdma/run.sh): perftest's ib_write_lat and ib_write_bw
# between the two rxe devices, 64 KiB writes: the baselines printed beside
# pdkv's own RDMA figures of the same boot. A baseline that cannot run is
# a SKIP line (it is not pdkv under test), never a FAIL.
set -u
if ! command -v ib_write_lat >/dev/null || ! command -v ib_write_bw >/dev/null; then
	echo "SKIP perftest-baselines: ib_write_lat/ib_write_bw not on the host (apt-get install perftest)"
	exit 0
fi

# run TOOL ARGS...: server on rxe0, client on rxe1 over rdma_cm; output in /tmp/TOOL.c
run() {
	local t=$1 rc
	shift
	timeout 60 "$t" -d "$RXE_DEV0" -R "$@" >"/tmp/$t.s" 2>&1 &
	sleep 1
	timeout 60 "$t" -d "$RXE_DEV1" -R "$@" "$RXE_IP0" >"/tmp/$t.c" 2>&1
	rc=$?
	wait
	return $rc
}

# The first numeric line after the header line that names `col`.
result() {
	awk -v col="$2" 'index($0, col) { h = 1; next } h && $1 ~ /^[0-9]/ { print; exit }' "$1"
}

if run ib_write_lat -s 65536 -n 200 && [ -n "$(result /tmp/ib_write_lat.c t_min)" ]; then
	echo "     ib_write_lat 64 KiB (bytes iters t_min t_max t_typical t_avg t_stdev 99% 99.9%, us):"
	echo "     $(result /tmp/ib_write_lat.c t_min)"
	echo "PASS perftest-ib_write_lat-ran"
else
	echo "SKIP perftest-ib_write_lat: $(tail -n 2 /tmp/ib_write_lat.c | tr '\n' ' ')"
fi
if run ib_write_bw -s 65536 -n 1000 && [ -n "$(result /tmp/ib_write_bw.c 'BW average')" ]; then
	echo "     ib_write_bw 64 KiB (bytes iterations BW_peak BW_average[MB/s] MsgRate):"
	echo "     $(result /tmp/ib_write_bw.c 'BW average')"
	echo "PASS perftest-ib_write_bw-ran"
else
	echo "SKIP perftest-ib_write_bw: $(tail -n 2 /tmp/ib_write_bw.c | tr '\n' ' ')"
fi
