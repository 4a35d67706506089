#!/bin/bash
# pdkv beside its peers on this machine, one after another, same chunk size:
#   across the network stack: iperf3 (one TCP stream, -l CHUNK) and UCX
#   ucx_perftest tcp tag_bw, beside pdbench 1P1D over pdkv's TCP transport
#   and the transport alone (bench_e2e);
#   on one host: a single-thread memcpy and UCX posix ucp_put_bw, beside
#   pdkv's shm transport (bench_shmx: two brokers, 1 MiB and 4 MiB chunks).
# Prints each figure and pdkv's throughput as a ratio to it. The machine is
# shared and noisy: only ratios from one run mean anything.
#
#   tools/compare-peers.sh [--chunk SIZE] [--seconds N] [--quick]
#
# Needs iperf3 and ucx-utils (installed with apt-get when run as root; a
# baseline whose tool is missing is reported as skipped).
set -u
HERE=$(cd "$(dirname "$0")/.." && pwd)
B=${B:-$HERE/build/release}
CHUNK=1M
SECONDS_RUN=3
REQUESTS=256

usage() {
	sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
	exit "${1:-0}"
}

while [ $# -gt 0 ]; do
	case $1 in
	--chunk) CHUNK=${2:?--chunk needs a size}; shift 2 ;;
	--seconds) SECONDS_RUN=${2:?--seconds needs a number}; shift 2 ;;
	--quick) SECONDS_RUN=1; REQUESTS=96; shift ;;
	-h|--help) usage 0 ;;
	*) echo "compare-peers: unknown option $1" >&2; usage 2 >&2 ;;
	esac
done

bytes_of() { # 1M -> 1048576
	local n=${1%[KkMmGg]} u=${1##*[0-9]}
	case $u in
	K|k) echo $((n << 10)) ;; M|m) echo $((n << 20)) ;; G|g) echo $((n << 30)) ;;
	*) echo "$n" ;;
	esac
}
CHUNK_B=$(bytes_of "$CHUNK")
case $CHUNK_B in ''|*[!0-9]*) echo "compare-peers: --chunk $CHUNK is not a size" >&2; exit 2 ;; esac

need_tools() {
	local missing=()
	command -v iperf3 >/dev/null || missing+=(iperf3)
	command -v ucx_perftest >/dev/null || missing+=(ucx-utils)
	[ ${#missing[@]} -eq 0 ] && return
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		echo "compare-peers: installing ${missing[*]}" >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null ||
			{ apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive \
				apt-get install -y -q "${missing[@]}" >/dev/null; }
	else
		echo "compare-peers: missing ${missing[*]} (apt-get install ${missing[*]})" >&2
	fi
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo $((20000 + RANDOM % 20000)); }

iperf3_gbs() {
	command -v iperf3 >/dev/null || return 1
	local port; port=$(free_port)
	iperf3 -s -1 -p "$port" >/dev/null 2>&1 &
	sleep 0.5
	iperf3 -c 127.0.0.1 -p "$port" -l "$CHUNK_B" -t "$SECONDS_RUN" -J 2>/dev/null |
		awk -F: '/"bits_per_second"/ { gsub(/[ ,]/, "", $2); v = $2 } END { if (v) printf "%.2f\n", v / 8e9 }'
	wait
}

# ucx_perftest TLS TEST: GB/s from its final line (column 6: MiB/s overall)
ucx_gbs() {
	command -v ucx_perftest >/dev/null || return 1
	local port n; port=$(free_port)
	n=$(( (SECONDS_RUN << 30) / CHUNK_B )); [ "$n" -lt 32 ] && n=32
	UCX_TLS=$1 UCX_NET_DEVICES=lo timeout 120 ucx_perftest -p "$port" >/dev/null 2>&1 &
	sleep 0.5
	UCX_TLS=$1 UCX_NET_DEVICES=lo timeout 120 ucx_perftest 127.0.0.1 -p "$port" -t "$2" \
		-s "$CHUNK_B" -n "$n" -w $((n / 10 + 4)) -f 2>/dev/null |
		awk 'NF == 8 && $1 ~ /^[0-9]+$/ { v = $6 } END { if (v) printf "%.2f\n", v * 1048576 / 1e9 }'
	wait
}

pdbench_gbs() {
	local json; json=$(mktemp /tmp/pdkv-compare.XXXXXX.json)
	"$B/pdbench" --local --prefill 1 --decode 1 --tp 1 --slot-size "$CHUNK" --chunks 8 \
		--batch 8 --requests "$REQUESTS" --concurrency 16 --send-slots 128 \
		--recv-slots 128 --json "$json" --quiet >/dev/null 2>&1 || { rm -f "$json"; return 1; }
	sed -n 's/.*"gb_per_s": *\([0-9.]*\).*/\1/p' "$json" | head -1 |
		awk '{ printf "%.2f\n", $1 }'
	rm -f "$json"
}

# The transport alone: bench_e2e moves 1 MiB chunks through two brokers
# without writing or checking patterns (its own chunk size: 1 MiB).
e2e_gbs() {
	[ "$CHUNK_B" = 1048576 ] || return 1
	"$B/tests/bench/bench_e2e" --quick 2>/dev/null |
		awk '/^throughput/ { printf "%.2f\n", $3; exit }'
}

# bench_shmx: "<MiB> MiB chunks ... pdkv memcpy ratio" rows; prints
# "pdkv memcpy" for the chunk size asked (1 or 4 MiB), else fails.
shmx_gbs() {
	local mib=$((CHUNK_B >> 20))
	[ "$CHUNK_B" = $((mib << 20)) ] && { [ $mib = 1 ] || [ $mib = 4 ]; } || return 1
	"$B/tests/bench/bench_shmx" --quick 2>/dev/null |
		awk -v m="$mib" '$1 == m && $2 == "MiB" { printf "%.2f %.2f\n", $6, $7; f = 1 }
				 END { exit !f }'
}

[ -x "$B/pdbench" ] && [ -x "$B/tests/bench/bench_e2e" ] && [ -x "$B/tests/bench/bench_shmx" ] ||
	make -C "$HERE" -s all "$B/tests/bench/bench_e2e" "$B/tests/bench/bench_shmx" >/dev/null ||
	{ echo "compare-peers: build failed" >&2; exit 1; }
need_tools
echo "compare-peers: chunk $CHUNK, $(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ)" >&2

PD=$(pdbench_gbs) || PD=""
E2E=$(e2e_gbs) || E2E=""
IP=$(iperf3_gbs) || IP=""
UT=$(ucx_gbs tcp tag_bw) || UT=""
UP=$(ucx_gbs posix ucp_put_bw) || UP=""
SX=$(shmx_gbs) || SX=""
SHM=${SX%% *} MEMCPY=${SX##* }

ratio() { # pdkv baseline
	if [ -z "$1" ] || [ -z "$2" ]; then echo "-"; else
		awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'; fi
}

row() { # name value
	printf '%-42s %9s %14s %14s\n' "$1" "${2:-skipped}" "$(ratio "$PD" "$2")" "$(ratio "$E2E" "$2")"
}

printf '%-42s %9s %14s %14s\n' "measure" "GB/s" "pdbench ratio" "transport ratio"
printf '%-42s %9s\n' "pdkv: pdbench 1P1D tcp, every byte checked" "${PD:-failed}"
printf '%-42s %9s\n' "pdkv: transport only (bench_e2e)" "${E2E:-skipped}"
row "iperf3, 1 stream, -l $CHUNK" "$IP"
row "UCX ucx_perftest tcp tag_bw $CHUNK" "$UT"
echo
printf '%-42s %9s %14s\n' "same host" "GB/s" "shm ratio"
printf '%-42s %9s\n' "pdkv: shm transport (bench_shmx)" "${SHM:-skipped}"
printf '%-42s %9s %14s\n' "memcpy, 1 thread (same run as bench_shmx)" "${MEMCPY:-skipped}" \
	"$(ratio "$SHM" "$MEMCPY")"
printf '%-42s %9s %14s\n' "UCX ucx_perftest posix ucp_put_bw $CHUNK" "${UP:-skipped}" \
	"$(ratio "$SHM" "$UP")"
[ -n "$PD" ]
