#!/bin/bash
# pdkv beside its peers on this machine, one after another, chunk size by
# chunk size (64 KiB..4 MiB by default):
#   across the network stack: pdbench 1P1D over pdkv's TCP transport (a
#   --sweep row: requests of one batch of 16 chunks, 4 in flight, a warm-up
#   first, every byte checked) beside iperf3 (one TCP stream, -l CHUNK) and
#   UCX ucx_perftest tcp tag_bw (-s CHUNK); at 1 MiB the transport alone too
#   (bench_e2e, no patterns);
#   on one host, at 1 and 4 MiB: a single-thread memcpy and UCX posix
#   ucp_put_bw, beside pdkv's shm transport (bench_shmx: two brokers).
# Prints a table with pdkv's throughput as a ratio to each peer, writes the
# figures (compare-peers.dat) and a throughput-vs-chunk-size chart
# (compare-peers.png, gnuplot) into --out, and says where. The machine is
# shared and noisy: only ratios from one run mean anything.
#
#   tools/compare-peers.sh [--chunks LIST] [--seconds N] [--quick] [--out DIR] [--no-chart]
#
#   --chunks LIST  chunk sizes, K/M suffixes (default 64K,256K,1M,4M; --chunk SIZE: one)
#   --seconds N    each iperf3 and UCX measurement (default 3)
#   --quick        1 s measurements, 256 MiB of pdbench data per size (default 1 GiB)
#   --out DIR      where the figures and the chart go (default $B/compare-peers,
#                  B the build, default build/release; never the source tree)
#   --no-chart     no chart
#
# Needs iperf3, ucx-utils and gnuplot-nox (installed with apt-get when run
# as root; a baseline whose tool is missing is reported as skipped, and the
# chart is skipped, saying so, without gnuplot).
set -u
HERE=$(cd "$(dirname "$0")/.." && pwd)
B=$(cd "$HERE" && realpath -m "${B:-build/release}")
CHUNKS=64K,256K,1M,4M
SECONDS_RUN=3
PD_BYTES=1G
OUT=
CHART=1

usage() {
	sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'
	exit "${1:-0}"
}

while [ $# -gt 0 ]; do
	case $1 in
	--chunks | --chunk) CHUNKS=${2:?$1 needs a list of sizes}; shift 2 ;;
	--seconds) SECONDS_RUN=${2:?--seconds needs a number}; shift 2 ;;
	--quick) SECONDS_RUN=1; PD_BYTES=256M; shift ;;
	--out) OUT=${2:?--out needs a folder}; shift 2 ;;
	--no-chart) CHART=0; shift ;;
	-h | --help) usage 0 ;;
	*) echo "compare-peers: unknown option $1" >&2; usage 2 >&2 ;;
	esac
done
case $SECONDS_RUN in '' | *[!0-9]* | 0) echo "compare-peers: --seconds $SECONDS_RUN is not a number of seconds" >&2; exit 2 ;; esac
OUT=$(realpath -m "${OUT:-$B/compare-peers}")
case "$OUT/" in "$HERE"/build/* | "$HERE"/build/) ;; "$HERE"/*)
	echo "compare-peers: --out $OUT is in the source tree (use build/ or a folder outside it)" >&2
	exit 2 ;;
esac

bytes_of() { # 1M -> 1048576; "" when not a size
	local n=${1%[KkMmGg]} u=${1##*[0-9]}
	case $n in '' | *[!0-9]*) return ;; esac
	case $u in
	K | k) echo $((n << 10)) ;; M | m) echo $((n << 20)) ;; G | g) echo $((n << 30)) ;;
	"$1") echo "$n" ;;
	esac
}
SIZES=()
for c in ${CHUNKS//,/ }; do
	b=$(bytes_of "$c")
	if [ -z "$b" ] || [ "$b" -lt 4096 ] || [ $((b % 4096)) -ne 0 ]; then
		echo "compare-peers: --chunks: $c is not a size, a multiple of 4K" >&2
		exit 2
	fi
	SIZES+=("$b")
done
[ ${#SIZES[@]} -gt 0 ] || { echo "compare-peers: --chunks: no size" >&2; exit 2; }

need_tools() {
	local missing=()
	command -v iperf3 >/dev/null || missing+=(iperf3)
	command -v ucx_perftest >/dev/null || missing+=(ucx-utils)
	[ "$CHART" = 1 ] && ! command -v gnuplot >/dev/null && missing+=(gnuplot-nox)
	[ ${#missing[@]} -eq 0 ] && return
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		echo "compare-peers: installing ${missing[*]}" >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null 2>&1 ||
			{ apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive \
				apt-get install -y -q "${missing[@]}" >/dev/null 2>&1; }
	else
		echo "compare-peers: missing ${missing[*]} (apt-get install ${missing[*]})" >&2
	fi
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo $((20000 + RANDOM % 20000)); }

# iperf3 BYTES: one stream, writes of BYTES, GB/s. The server serves one
# client and gives up after a while; the client tries again while the
# server is not listening yet (a loaded machine).
iperf3_gbs() {
	command -v iperf3 >/dev/null || return 1
	local port srv out="" i
	port=$(free_port)
	timeout $((SECONDS_RUN + 60)) iperf3 -s -1 -p "$port" >/dev/null 2>&1 &
	srv=$!
	for i in 1 2 3 4 5 6 7 8 9 10; do
		sleep 0.3
		out=$(iperf3 -c 127.0.0.1 -p "$port" -l "$1" -t "$SECONDS_RUN" -J 2>/dev/null) && break
		out=""
	done
	kill "$srv" 2>/dev/null
	wait "$srv" 2>/dev/null
	awk -F: '/"bits_per_second"/ { gsub(/[ ,]/, "", $2); v = $2 }
		 END { if (v) printf "%.2f\n", v / 8e9; else exit 1 }' <<<"$out"
}

# ucx_perftest TLS TEST BYTES: GB/s from its final line (column 6: MiB/s overall)
ucx_gbs() {
	command -v ucx_perftest >/dev/null || return 1
	local port n rc srv; port=$(free_port)
	n=$(( (SECONDS_RUN << 30) / $3 )); [ "$n" -lt 32 ] && n=32
	UCX_TLS=$1 UCX_NET_DEVICES=lo timeout 120 ucx_perftest -p "$port" >/dev/null 2>&1 &
	srv=$!
	sleep 0.5
	UCX_TLS=$1 UCX_NET_DEVICES=lo timeout 120 ucx_perftest 127.0.0.1 -p "$port" -t "$2" \
		-s "$3" -n "$n" -w $((n / 10 + 4)) -f 2>/dev/null |
		awk 'NF == 8 && $1 ~ /^[0-9]+$/ { v = $6 } END { if (v) printf "%.2f\n", v * 1048576 / 1e9; else exit 1 }'
	rc=$?
	kill "$srv" 2>/dev/null # a client that failed at once leaves it waiting
	wait "$srv" 2>/dev/null
	return $rc
}

# pdbench --sweep, one row at BYTES: "GB/s avg-us p99-us" (fails unless every
# byte verified). Its JSON and what it said stay in $OUT (pdbench-SIZE.*).
pdbench_row() {
	local json=$OUT/pdbench-$1.json log=$OUT/pdbench-$1.log rc
	"$B/pdbench" --local --prefill 1 --decode 1 --tp 1 --sweep-chunks "$1" --sweep-batch 16 \
		--sweep-conc 4 --sweep-bytes "$PD_BYTES" --json "$json" --quiet >"$log" 2>&1
	rc=$?
	[ $rc = 0 ] && python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))["rows"][0]
print("%.2f %.0f %.0f" % (r["gb_per_s"], r["lat_avg_us"], r["lat_p99_us"]))' "$json"
	rc=$((rc | $?))
	[ $rc = 0 ] || echo "compare-peers: pdbench at $1 failed: see $log" >&2
	return $rc
}

# The transport alone: bench_e2e moves 1 MiB chunks through two brokers
# without writing or checking patterns (its own chunk size: 1 MiB).
e2e_gbs() {
	"$B/tests/bench/bench_e2e" --quick 2>/dev/null |
		awk '/^throughput/ { printf "%.2f\n", $3; f = 1; exit } END { exit !f }'
}

# bench_shmx: "<MiB> MiB chunks ... pdkv memcpy ratio" rows: "pdkv memcpy"
# for MiB (1 or 4).
shmx_gbs() {
	"$B/tests/bench/bench_shmx" --quick 2>/dev/null |
		awk -v m="$1" '$1 == m && $2 == "MiB" { printf "%.2f %.2f\n", $6, $7; f = 1 }
				 END { exit !f }'
}

# The programs, built when missing: make's targets are paths relative to
# the tree (build/release/...), so ask for those.
build() {
	local rel t=()
	rel=$(realpath -m --relative-to="$HERE" "$B")
	case $rel in ../* | /*)
		echo "compare-peers: $B is outside the tree and lacks $1 (make B=... builds only build/<variant>)" >&2
		return 1 ;;
	esac
	for p in pdbench tests/bench/bench_e2e tests/bench/bench_shmx; do t+=("$rel/$p"); done
	make -C "$HERE" -s all "${t[@]}" >/dev/null || { echo "compare-peers: build failed" >&2; return 1; }
}
for p in pdbench tests/bench/bench_e2e tests/bench/bench_shmx; do
	[ -x "$B/$p" ] || { build "$p" || exit 1; break; }
done
need_tools
mkdir -p "$OUT" || exit 1
echo "compare-peers: chunks ${CHUNKS}, $(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ)" >&2

ratio() { # pdkv baseline
	if [ -z "$1" ] || [ -z "$2" ]; then echo "-"; else
		awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'; fi
}
human() { # bytes -> 64K, 1M
	if [ $(($1 % 1048576)) = 0 ]; then echo "$(($1 >> 20))M"; else echo "$(($1 >> 10))K"; fi
}

DAT=$OUT/compare-peers.dat
echo "# chunk_bytes pdbench_gbs iperf3_gbs ucx_tcp_tag_bw_gbs pdbench_lat_avg_us pdbench_lat_p99_us" >"$DAT"
FMT='%-7s %9s %9s %9s %11s %9s %9s %11s\n'
printf "$FMT" chunk "pdbench" "lat avg" "lat p99" "iperf3" "ratio" "UCX tcp" "ratio"
printf "$FMT" "" "GB/s" "us" "us" "GB/s" "" "tag_bw" ""
ok=1 capped=0
IPERF3_MAX=1048576 # iperf3 -l: at most 1 MiB
for b in "${SIZES[@]}"; do
	row=$(pdbench_row "$b") || { row=""; ok=0; }
	read -r pd lat p99 <<<"${row:-- - -}"
	[ "$pd" = - ] && pd=""
	ip=$(iperf3_gbs $((b < IPERF3_MAX ? b : IPERF3_MAX))) || ip=""
	[ -n "$ip" ] && [ "$b" -gt $IPERF3_MAX ] && ip="$ip*" && capped=1
	ut=$(ucx_gbs tcp tag_bw "$b") || ut=""
	printf "$FMT" "$(human "$b")" "${pd:-failed}" "$lat" "$p99" "${ip:-skipped}" \
		"$(ratio "$pd" "${ip%\*}")" "${ut:-skipped}" "$(ratio "$pd" "$ut")"
	ip=${ip%\*}
	echo "$b ${pd:-NaN} ${ip:-NaN} ${ut:-NaN} ${lat/-/NaN} ${p99/-/NaN}" >>"$DAT"
done
echo "pdbench: 1P1D over tcp, every byte written and checked; requests of one batch of 16"
echo "chunks, 4 in flight, after a warm-up; latency: a request's pd_put -> PUT_DONE."
[ "$capped" = 1 ] && echo "*: iperf3 writes at most 1 MiB at a time (-l 1M for larger chunks)."

E2E=$(e2e_gbs) || E2E=""
echo
printf '%-42s %9s %14s\n' "1 MiB, the transport alone" "GB/s" "iperf3 ratio"
IP1=$(iperf3_gbs 1048576) || IP1=""
printf '%-42s %9s\n' "pdkv: TCP transport only (bench_e2e)" "${E2E:-skipped}"
printf '%-42s %9s %14s\n' "iperf3, 1 stream, -l 1M (after it)" "${IP1:-skipped}" "$(ratio "$E2E" "$IP1")"

echo
printf '%-42s %9s %14s\n' "same host" "GB/s" "shm ratio"
for mib in 1 4; do
	SX=$(shmx_gbs $mib) || SX=""
	SHM=${SX%% *} MEMCPY=${SX##* }
	UP=$(ucx_gbs posix ucp_put_bw $((mib << 20))) || UP=""
	printf '%-42s %9s\n' "pdkv: shm transport (bench_shmx) ${mib} MiB" "${SHM:-skipped}"
	printf '%-42s %9s %14s\n' "memcpy, 1 thread (same run as bench_shmx)" "${MEMCPY:-skipped}" \
		"$(ratio "$SHM" "$MEMCPY")"
	printf '%-42s %9s %14s\n' "UCX ucx_perftest posix ucp_put_bw ${mib} MiB" "${UP:-skipped}" \
		"$(ratio "$SHM" "$UP")"
done

echo
echo "compare-peers: figures in $DAT"
if [ "$CHART" = 0 ]; then
	:
elif ! command -v gnuplot >/dev/null; then
	echo "compare-peers: no chart: gnuplot is missing (apt-get install gnuplot-nox)"
elif gnuplot -e "dat='$DAT'; out='$OUT/compare-peers.png'" "$HERE/tools/compare-peers.gp" 2>"$OUT/gnuplot.log"; then
	echo "compare-peers: chart in $OUT/compare-peers.png"
else
	echo "compare-peers: gnuplot failed (see $OUT/gnuplot.log)"
fi
[ "$ok" = 1 ]
