#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Network faults between real brokers: a
# prefill and a decode pdbroker, each in a network namespace made here,
# joined by a veth pair; pdbench, attached to them, moves requests (every
# byte verified at the decode side) before, during and after a fault.
#
#   tests/netfault/run.sh [options]
#
# Topology (made here; removed on every exit path, Ctrl-C included):
#   netns pdnf<pid>p: lo, veth nf<pid>p 10.237.41.1/24   prefill broker nf<pid>p
#   netns pdnf<pid>d: lo, veth nf<pid>d 10.237.41.2/24   decode broker nf<pid>d
#   each broker: control tcp://<its address>:17500, data <its address>:17600
# `ip netns exec` changes the network namespace only: /tmp (the rundir with
# the attach and admin sockets) and /dev/shm (the segments) stay shared, so
# the agents (pdbench's processes, in the root namespace) attach as on one
# host, while every broker-to-broker byte crosses the veth. The root
# namespace's network is never touched.
#
# Scenarios (--only picks some; each one: fault on, traffic all along,
# fault lifted):
#   loss       nftables in the decode namespace drops LOSS % of the packets
#              on its veth, both ways (numgen random mod 100 < LOSS)
#   rate       tbf on both ends of the veth (RATE)
#   linkdown   the decode end of the veth down for DOWN_S s, then up
#   blackhole  nftables drops the decode broker's data port only, both
#              ways, for BH_S s (the control plane stays healthy); BH_RUNS
#              runs. Late DATA frames of the dead lanes are the danger: the
#              sender gives a stalled lane up after 10 s (io timeout) and
#              closes it, but the kernel keeps retransmitting what it had
#              queued, on its RTO schedule (0.2 s doubling: 12.6 s, 25.4 s
#              after the stall), and a receiving connection waiting between
#              frames has no deadline. So after a 15 s blackhole they arrive
#              ~12 s after the lift, when the same peer's new requests hold
#              the slots: traffic goes on BH_POST s after the lift to be
#              there when they do. Before e0d2667 (writes bound to the
#              session and the slot's generation) they landed: READY and
#              PUT_DONE with a chunk that differs, in 2 of 9 runs here; now
#              they never land: refused at the grant check (the line's
#              "data frames ... refused") or dropped with their connection,
#              which the session's end fenced.
#   restart    (run last: it starts both brokers again, --heartbeat RS_HB,
#              so a silent peer is declared dead only after 3 of them, 30 s)
#              a sender host that crashed and came back at once: under
#              traffic the decode link goes down, the prefill broker and its
#              load are killed, and the prefill namespace is deleted and made
#              again with a new veth pair (so the dead broker's FIN never
#              leaves, and the new "host" knows none of the old
#              connections); the decode broker still holds what it half
#              received. The prefill broker is started again under its name
#              and a run goes through it. Expected: every half-received
#              request is rolled back within RS_BACK s of that run's start,
#              far inside the silence deadline (the new epoch in the
#              restarted broker's Hello ends the old session; with the epoch
#              checks removed they stay, and the new requests fail), READY
#              ones (whole, committed data a decode worker may still read)
#              stay for their recv-ttl, and the run's requests all complete.
# Per scenario run, the expectations (each unmet one makes the run's line
# FAIL):
#   - the fault bit: packets dropped by the rule, the qdisc, or the link;
#   - requests offered while the fault is on (back-to-back pdbench runs
#     from before the fault until traffic has resumed, and for the
#     blackhole BH_POST s after the lift) end ok, or failed
#     with an error pdbench names ("first error ...": it explains the
#     first 20 failures of a run), within their deadline (--timeout
#     TIMEOUT s: no request lost);
#   - 0 corrupted requests, 0 chunks differ, in every run;
#   - nothing leaks: every run's leaked slots, reservations left and
#     requests left waiting are 0 (pdbench polls them 3 s after its agents
#     detach), and no agent process exits uncleanly;
#   - traffic resumes without restarting anything: a request is READY at
#     the decode broker within RESUME_MAX s of the lift (the time is
#     reported), a clean run of CLEAN requests then completes (all ok,
#     nothing left), and the brokers are the same processes (pid and epoch),
#     each sees the other up, their pools are empty, no request is live.
#
# Output: a "PASS name: ..." or "FAIL name: ..." line per scenario run (on a
# FAIL, the tails of the broker logs and pdbench's explanations follow),
# then "N passed, N failed, N skipped". Exit 0 when nothing failed.
# Skips (exit 0, "0 passed, 0 failed, 1 skipped"), never a pretend pass:
# not root; ip/tc/nft missing and not installable (apt-get, as root);
# network namespaces, veth, nf_tables (numgen) or tbf not available.
#
# Options:
#   --build DIR      pdbroker, pdbench and pdctl (default build/release)
#   --only LIST      scenarios, comma-separated (default loss,rate,linkdown,blackhole,restart)
#   --loss PCT       loss percentage (default 10); --loss-secs S (default 8)
#   --rate RATE      tbf rate (default 40mbit); --rate-secs S (default 8)
#   --down-secs S    link down (default 5)
#   --blackhole-runs N   (default 6); --blackhole-secs S (default 15)
#   --blackhole-post S   traffic after the lift (default 14)
#   --heartbeat SEC  the brokers' --heartbeat (default 1s, pdbroker's default)
#   --keep DIR       copy the logs and pdbench results to DIR
#   -v               say what is happening (stderr)
set -uo pipefail

T0=$SECONDS
BUILD=build/release ONLY=loss,rate,linkdown,blackhole,restart KEEP='' VERBOSE=0
LOSS=10 LOSS_S=8 RATE=40mbit RATE_S=8 DOWN_S=5 BH_RUNS=6 BH_S=15 BH_POST=14 HB=1s
RS_HB=10s     # restart: the brokers' --heartbeat then (silence deadline 3 of them)
# The load: 2 TP ranks per broker, 8 chunks of 256 KiB per rank, batches
# of 4, 16 requests in flight against 128 receive slots (admission queues).
# At the commit before the fix, a lighter load (8 in flight, 64 KiB slots)
# showed no corruption in 6 blackhole runs; this one did in 2 of 9.
TP=2 CHUNKS=8 BATCH=4 SLOT=256K RECV_SLOTS=128 SEND_SLOTS=128 CONC=16
REQS=100      # requests per pdbench run of the traffic loop
CLEAN=100     # requests of the clean run after the fault
TIMEOUT=30    # pdbench --timeout: a request's deadline
RESUME_MAX=30 # seconds after the lift for the first READY
RS_BACK=10    # restart: seconds after the link's return for every orphan to go
PRE_S=1       # traffic before the fault goes on

say() { [ "$VERBOSE" = 1 ] && echo "netfault [$((SECONDS - T0))s]: $*" >&2; return 0; }
skip() {
	echo "SKIP: network-fault tests not run: $*"
	echo "0 passed, 0 failed, 1 skipped"
	exit 0
}
infra_fail() {
	echo "FAIL netfault-runner: $*"
	echo "0 passed, 1 failed, 0 skipped"
	exit 1
}

while [ $# -gt 0 ]; do
	case "$1" in
	--build) BUILD=$2; shift 2 ;;
	--only) ONLY=$2; shift 2 ;;
	--loss) LOSS=$2; shift 2 ;;
	--loss-secs) LOSS_S=$2; shift 2 ;;
	--rate) RATE=$2; shift 2 ;;
	--rate-secs) RATE_S=$2; shift 2 ;;
	--down-secs) DOWN_S=$2; shift 2 ;;
	--blackhole-runs) BH_RUNS=$2; shift 2 ;;
	--blackhole-secs) BH_S=$2; shift 2 ;;
	--blackhole-post) BH_POST=$2; shift 2 ;;
	--heartbeat) HB=$2; shift 2 ;;
	--keep) KEEP=$2; shift 2 ;;
	-v) VERBOSE=1; shift ;;
	*) echo "usage: $0 [--build DIR] [--only LIST] [--keep DIR] [-v] [fault options]" >&2; exit 2 ;;
	esac
done
for s in ${ONLY//,/ }; do
	case "$s" in loss | rate | linkdown | blackhole | restart) ;; *) echo "$0: --only: unknown scenario '$s'" >&2; exit 2 ;; esac
done
PDBROKER=$BUILD/pdbroker PDBENCH=$BUILD/pdbench PDCTL=$BUILD/pdctl
for b in "$PDBROKER" "$PDBENCH" "$PDCTL"; do
	[ -x "$b" ] || infra_fail "$b: not an executable file (build it first: make B=$BUILD all)"
done

# ---- what this needs: root, ip, tc, nft ---------------------------------------------
[ "$(id -u)" = 0 ] || skip "needs root (network namespaces, nftables, tc)"
PATH=$PATH:/usr/sbin:/sbin
declare -A NEED=([ip]=iproute2 [tc]=iproute2 [nft]=nftables)
missing=()
for c in "${!NEED[@]}"; do command -v "$c" >/dev/null 2>&1 || missing+=("${NEED[$c]}"); done
if [ ${#missing[@]} -gt 0 ]; then
	mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
	command -v apt-get >/dev/null || skip "missing ${missing[*]} and no apt-get"
	say "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >/tmp/pdkv-netfault-apt.log 2>&1; then
		apt-get update -q >>/tmp/pdkv-netfault-apt.log 2>&1 || true
		apt-get install -y -q --no-install-recommends "${missing[@]}" >>/tmp/pdkv-netfault-apt.log 2>&1 ||
			skip "apt-get install ${missing[*]} failed (see /tmp/pdkv-netfault-apt.log)"
	fi
	rm -f /tmp/pdkv-netfault-apt.log # kept only when the install failed
fi

# ---- names, and the cleanup every exit path runs --------------------------------------
ID=$$
NSP=pdnf${ID}p NSD=pdnf${ID}d    # network namespaces
VP=nf${ID}p VD=nf${ID}d          # the veth ends (<= 15 characters)
PN=nf${ID}p DN=nf${ID}d          # broker names
IPP=10.237.41.1 IPD=10.237.41.2
CTRL_PORT=17500 DATA_PORT=17600
WORK='' RUN='' PID_P='' PID_D='' EPOCH_P='' EPOCH_D=''
BG_PIDS=()    # our background jobs (traffic loops)
NAP_PID=''    # and the sleep of nap()
passed=0 failed=0 interrupted=0

stop_pid() { # pid: TERM, up to 5 s, then KILL
	local p=$1 i
	[ -n "$p" ] && kill -0 "$p" 2>/dev/null || return 0
	kill -TERM "$p" 2>/dev/null
	for ((i = 0; i < 50; i++)); do kill -0 "$p" 2>/dev/null || return 0; sleep 0.1; done
	kill -KILL "$p" 2>/dev/null
}

cleanup() {
	local p f
	set +e
	trap - INT TERM
	for p in "${BG_PIDS[@]}" $NAP_PID; do kill -TERM "$p" 2>/dev/null; done
	if [ -n "$WORK" ]; then # the pdbench runs the traffic loops had going
		for f in "$WORK"/bench.pid "$WORK"/*/bench.pid; do [ -s "$f" ] && stop_pid "$(cat "$f")"; done
	fi
	for p in "${BG_PIDS[@]}"; do wait "$p" 2>/dev/null; done
	stop_pid "$PID_P"
	stop_pid "$PID_D"
	for p in $(ip netns pids "$NSP" 2>/dev/null) $(ip netns pids "$NSD" 2>/dev/null); do
		stop_pid "$p" # nothing else of ours should be in there
	done
	ip netns del "$NSP" 2>/dev/null # the veth, the nft tables and qdiscs go with them
	ip netns del "$NSD" 2>/dev/null
	rm -f "/dev/shm/pdkv.$PN" "/dev/shm/pdkv.$DN"
	if [ -n "$WORK" ]; then
		if [ -n "$KEEP" ]; then
			mkdir -p "$KEEP" && cp -r "$WORK"/. "$KEEP"/ && echo "netfault: logs kept in $KEEP" >&2
		fi
		rm -rf "$WORK"
	fi
	if [ "$interrupted" != 0 ]; then
		echo "FAIL netfault: interrupted (signal $((interrupted - 128)))"
		echo "$passed passed, $((failed + 1)) failed, 0 skipped"
	fi
}
trap cleanup EXIT
trap 'interrupted=130; exit 130' INT
trap 'interrupted=143; exit 143' TERM

# A runner killed with SIGKILL could not clean up: its namespaces (named
# after its pid) and the brokers in them go now.
for ns in $(ip netns list 2>/dev/null | awk '$1 ~ /^pdnf[0-9]+[pd]$/ { print $1 }'); do
	owner=${ns#pdnf} owner=${owner%[pd]}
	kill -0 "$owner" 2>/dev/null && continue
	say "removing $ns, left by an earlier run (pid $owner)"
	for p in $(ip netns pids "$ns" 2>/dev/null); do stop_pid "$p"; done
	ip netns del "$ns" 2>/dev/null
done

WORK=$(mktemp -d /tmp/pdkv-netfault.XXXXXX) || infra_fail "mktemp failed"
RUN=$WORK/run
mkdir -p "$RUN"

# ---- topology and kernel features ------------------------------------------------------
nft_on() { # the input and output rules of table inet pdnf in the decode namespace
	ip netns exec "$NSD" nft -f - <<-EOF
	table inet pdnf {
		chain in { type filter hook input priority 0; policy accept; $1 counter drop; }
		chain out { type filter hook output priority 0; policy accept; $2 counter drop; }
	}
	EOF
}
nft_dropped() { # packets the table dropped so far
	ip netns exec "$NSD" nft list table inet pdnf 2>/dev/null |
		awk '{ for (i = 1; i < NF; i++) if ($i == "packets") s += $(i + 1) } END { print s + 0 }'
}
nft_off() { ip netns exec "$NSD" nft delete table inet pdnf 2>/dev/null; }

topology() {
	local out
	out=$(ip netns add "$NSP" 2>&1 && ip netns add "$NSD" 2>&1) || skip "ip netns add: $out"
	out=$(ip link add "$VP" netns "$NSP" type veth peer name "$VD" netns "$NSD" 2>&1) ||
		skip "veth pair: $out"
	ip -n "$NSP" addr add "$IPP/24" dev "$VP" && ip -n "$NSD" addr add "$IPD/24" dev "$VD" &&
		ip -n "$NSP" link set lo up && ip -n "$NSD" link set lo up &&
		ip -n "$NSP" link set "$VP" up && ip -n "$NSD" link set "$VD" up ||
		infra_fail "cannot configure the veth pair"
	out=$(nft_on "numgen random mod 100 < 1" "numgen random mod 100 < 1" 2>&1) ||
		skip "nftables (nf_tables, numgen) in a namespace: $out"
	nft_off
	out=$(tc -n "$NSP" qdisc add dev "$VP" root tbf rate 1mbit burst 32kb latency 100ms 2>&1) ||
		skip "tc qdisc tbf: $out"
	tc -n "$NSP" qdisc del dev "$VP" root
}

# ---- brokers ---------------------------------------------------------------------------
pdctl_get() { # broker key [command]: the first "key": value of its JSON
	"$PDCTL" --name "$1" --rundir "$RUN" --timeout 1000 "${3:-status}" --json 2>/dev/null |
		awk -v k="\"$2\":" '$1 == k { v = $2; sub(/,$/, "", v); gsub(/"/, "", v); print v; exit }'
}

broker_start() { # ns name address send recv -> pid in BROKER_PID
	local ns=$1 name=$2 ip=$3 i
	ip netns exec "$ns" "$PDBROKER" --name "$name" --rundir "$RUN" \
		--ctrl "tcp://$ip:$CTRL_PORT" --data "$ip:$DATA_PORT" --heartbeat "$HB" \
		--slot-size "$SLOT" --send-slots "$4" --recv-slots "$5" \
		--log-file "$WORK/$name.log" </dev/null >"$WORK/$name.out" 2>&1 &
	BROKER_PID=$! # ip netns exec execs the program: this is the broker
	for ((i = 0; i < 100; i++)); do
		[ -S "$RUN/$name.sock" ] && return 0
		kill -0 "$BROKER_PID" 2>/dev/null || break
		sleep 0.1
	done
	tail -n 20 "$WORK/$name.log"
	infra_fail "broker $name did not come up"
}

brokers() {
	broker_start "$NSD" "$DN" "$IPD" 0 "$RECV_SLOTS"
	PID_D=$BROKER_PID
	broker_start "$NSP" "$PN" "$IPP" "$SEND_SLOTS" 0
	PID_P=$BROKER_PID
	EPOCH_P=$(pdctl_get "$PN" epoch) EPOCH_D=$(pdctl_get "$DN" epoch)
	[ "$(pdctl_get "$PN" pid)" = "$PID_P" ] && [ "$(pdctl_get "$DN" pid)" = "$PID_D" ] ||
		infra_fail "the brokers' segments do not name the processes started"
}

log_tails() {
	local n
	for n in "$PN" "$DN"; do
		echo "---- tail of the $([ "$n" = "$PN" ] && echo prefill || echo decode) broker's log ----"
		grep -v ' agent [0-9]* \(attached\|detached\)' "$WORK/$n.log" | tail -n 25
	done
	echo "---- end of logs ----"
}

# ---- pdbench ---------------------------------------------------------------------------
bench() { # prefix requests seed: prefix.{json,out,err,rc}
	"$PDBENCH" --prefill-name "$PN" --decode-name "$DN" --decode-ctrl "tcp://$IPD:$CTRL_PORT" \
		--rundir "$RUN" --tp "$TP" --requests "$2" --concurrency "$CONC" --chunks "$CHUNKS" \
		--batch "$BATCH" --timeout "$TIMEOUT" --seed "$3" --quiet --json "$1.json" \
		>"$1.out" 2>"$1.err" &
	echo $! >"$(dirname "$1")/bench.pid"
	wait $!
	echo $? >"$1.rc"
	: >"$(dirname "$1")/bench.pid"
}

# Back-to-back runs until DIR/stop exists; a run that moved nothing waits
# a little before the next one (a down peer fails requests at once).
traffic_loop() { # dir seed0
	local dir=$1 i=0
	trap - INT TERM EXIT
	while [ ! -e "$dir/stop" ]; do
		i=$((i + 1))
		bench "$dir/t$i" "$REQS" $(($2 + i))
		grep -q '"requests_ok": 0,' "$dir/t$i.json" 2>/dev/null && sleep 0.3
	done
}

# Sums over pdbench result files, as shell assignments S_<key>=N.
sum_json() {
	awk '/^  "[a-z_]+": / {
		k = $1; gsub(/[":]/, "", k); v = $2; sub(/,$/, "", v)
		if (v == "true") v = 1; else if (v == "false") v = 0
		s[k] += v
	}
	FNR == 1 { runs++ }
	END { for (k in s) printf "S_%s=%s\n", k, s[k]; printf "S_runs=%d\n", runs }' "$@"
}

# The errors pdbench named for the failed requests it explained (at most
# 20 a run), "N x error" joined by ", "; and how many it named none for.
named_errors() {
	sed -n 's/^pdbench: request [0-9]* failed: .*; first error \(.*\)$/\1/p' "$@" |
		sort | uniq -c | sort -rn | awk '{ n = $1; $1 = ""; printf "%s%dx%s", sep, n, $0; sep = ", " }'
}
unnamed_errors() { grep -h '^pdbench: request [0-9]* failed: ' "$@" | grep -vc 'first error'; }

# A sleep that a signal interrupts (bash runs traps only between commands,
# and a wait is one it ends at once).
nap() {
	sleep "$1" &
	NAP_PID=$!
	wait "$NAP_PID"
}

now_ms() { local t=${EPOCHREALTIME/./}; echo $((t / 1000)); }

# ---- one scenario run ------------------------------------------------------------------
# report LINE DIR: PASS LINE, or FAIL LINE with the caller's bad[] items,
# the requests pdbench found corrupted or lost in DIR, and the log tails.
report() {
	local f
	if [ ${#bad[@]} -eq 0 ]; then
		echo "PASS $1"
		passed=$((passed + 1))
		return
	fi
	echo "FAIL $1"
	for f in "${bad[@]}"; do echo "    - $f"; done
	cat "$2"/*.err 2>/dev/null | grep '^pdbench: request [0-9]* \(corrupted\|lost\)' | head -n 5 |
		sed 's/^/    | /'
	log_tails | sed 's/^/    | /'
	failed=$((failed + 1))
}

# scenario NAME HOLD_S POST_S ON OFF DESCRIPTION: ON applies the fault and
# OFF lifts it; OFF prints what the fault did ("N packets dropped"; "0 ..."
# is a FAIL). Traffic goes on until it has resumed and POST_S s have passed
# since the lift.
scenario() {
	local name=$1 hold=$2 post=$3 on=$4 off=$5 what=$6 dir=$WORK/$1
	local bad=() t_lift r0 r resume=- eff loop i rc errs unnamed f
	local rej0
	mkdir -p "$dir"
	rej0=$(pdctl_get "$DN" tcp.writes_rejected)
	say "$name: traffic, then $what"
	traffic_loop "$dir" $((RANDOM * 1000)) &
	loop=$!
	BG_PIDS+=("$loop")
	nap "$PRE_S"
	"$on" || bad+=("could not apply the fault")
	nap "$hold"
	r0=$(pdctl_get "$DN" rx.ready)
	t_lift=$(now_ms)
	eff=$("$off")
	say "$name: lifted ($eff)"
	case "$eff" in 0\ *) bad+=("the fault did nothing ($eff)") ;; esac
	while :; do # traffic resumes: a request READY at the decode broker
		r=$(pdctl_get "$DN" rx.ready)
		if [ -n "$r" ] && [ -n "$r0" ] && [ "$r" -gt "$r0" ]; then
			resume=$(awk -v ms=$(($(now_ms) - t_lift)) 'BEGIN { printf "%.1f", ms / 1000 }')
			break
		fi
		[ $(($(now_ms) - t_lift)) -gt $((RESUME_MAX * 1000)) ] && break
		sleep 0.1
	done
	[ "$resume" = - ] && bad+=("no request READY within ${RESUME_MAX}s of the lift")
	while [ $(($(now_ms) - t_lift)) -lt $((post * 1000)) ]; do sleep 0.2; done
	touch "$dir/stop"
	for ((i = 0; i < (TIMEOUT + 30) * 10; i++)); do kill -0 "$loop" 2>/dev/null || break; sleep 0.1; done
	if kill -0 "$loop" 2>/dev/null; then
		bad+=("the traffic run in progress did not end within $((TIMEOUT + 30))s")
		[ -s "$dir/bench.pid" ] && stop_pid "$(cat "$dir/bench.pid")"
	fi
	wait "$loop" 2>/dev/null

	# What the runs under the fault did.
	for f in "$dir"/t*.rc; do
		rc=$(cat "$f")
		if [ ! -s "${f%.rc}.json" ] || [ "$rc" -gt 1 ]; then
			bad+=("pdbench run $(basename "${f%.rc}") ended with status $rc and no result")
			sed 's/^/    | /' "${f%.rc}.err" | tail -n 10
		fi
	done
	unset "${!S_@}"
	eval "$(sum_json "$dir"/t*.json)"
	errs=$(named_errors "$dir"/t*.err)
	unnamed=$(unnamed_errors "$dir"/t*.err)
	[ "${S_requests:-0}" -gt 0 ] || bad+=("no request was offered")
	[ "${S_corrupted:-0}" = 0 ] && [ "${S_corrupted_chunks:-0}" = 0 ] ||
		bad+=("${S_corrupted:-?} requests corrupted, ${S_corrupted_chunks:-?} chunks differ")
	[ "${S_lost:-0}" = 0 ] || bad+=("${S_lost} requests lost (no outcome within ${TIMEOUT}s, or PUT_DONE without READY)")
	[ "$unnamed" = 0 ] || bad+=("$unnamed failed requests with no error named")
	[ "${S_leaked_slots:-0}" = 0 ] && [ "${S_reserved_left:-0}" = 0 ] && [ "${S_waiting_left:-0}" = 0 ] ||
		bad+=("left after runs: ${S_leaked_slots:-?} slots, ${S_reserved_left:-?} reserved, ${S_waiting_left:-?} waiting")
	[ "${S_bad_exits:-0}" = 0 ] || bad+=("${S_bad_exits} agent processes did not exit cleanly")
	local during="${S_requests:-0} requests in ${S_runs:-0} runs: ${S_requests_ok:-0} ok, ${S_requests_failed:-0} failed${errs:+ (errors named: $errs)}, ${S_lost:-0} lost, ${S_corrupted:-0} corrupted (${S_corrupted_chunks:-0} chunks differ), ${S_leaked_slots:-0} leaked, ${S_reserved_left:-0} reserved left"

	# After it: a clean run, and the brokers as they were.
	bench "$dir/clean" "$CLEAN" $((RANDOM + 7))
	rc=$(cat "$dir/clean.rc")
	unset "${!S_@}"
	[ -s "$dir/clean.json" ] && eval "$(sum_json "$dir/clean.json")"
	local after="${S_requests_ok:-0}/$CLEAN ok"
	if [ "$rc" != 0 ] || [ "${S_requests_ok:-0}" != "$CLEAN" ] || [ "${S_leaked_slots:-1}" != 0 ] ||
		[ "${S_reserved_left:-1}" != 0 ] || [ "${S_waiting_left:-1}" != 0 ]; then
		bad+=("clean run after the fault: status $rc, ${S_requests_ok:-0}/$CLEAN ok, ${S_requests_failed:-?} failed, ${S_lost:-?} lost, ${S_corrupted:-?} corrupted, ${S_leaked_slots:-?} leaked, ${S_reserved_left:-?} reserved left")
		grep -h '^pdbench: request' "$dir/clean.err" | head -n 3 | sed 's/^/    | /'
	fi
	local st
	st=$(brokers_as_before) || bad+=("$st")

	local rej
	rej=$(pdctl_get "$DN" tcp.writes_rejected)
	rej=$((${rej:-0} - ${rej0:-0}))
	report "$name: $what; traffic: $during; resumed ${resume}s after the lift; after: $after; data frames the decode broker refused: $rej" "$dir"
	[ -n "$KEEP" ] || rm -f "$dir"/t*.json "$dir"/t*.out # bounded temp space for many runs
}

# Same processes and epochs, each peer up on the other, nothing in use.
brokers_as_before() {
	local v k bad=()
	kill -0 "$PID_P" 2>/dev/null && [ "$(pdctl_get "$PN" epoch)" = "$EPOCH_P" ] ||
		bad+=("the prefill broker restarted or died")
	kill -0 "$PID_D" 2>/dev/null && [ "$(pdctl_get "$DN" epoch)" = "$EPOCH_D" ] ||
		bad+=("the decode broker restarted or died")
	[ "$(pdctl_get "$PN" state peers)" = up ] || bad+=("the prefill broker sees the decode broker $(pdctl_get "$PN" state peers)")
	[ "$(pdctl_get "$DN" state peers)" = up ] || bad+=("the decode broker sees the prefill broker $(pdctl_get "$DN" state peers)")
	for k in pool.send.in_use tx.live_requests; do
		v=$(pdctl_get "$PN" "$k")
		[ "$v" = 0 ] || bad+=("prefill $k $v")
	done
	for k in pool.recv.in_use rx.live_requests reserved waiting; do
		v=$(pdctl_get "$DN" "$k")
		[ "$v" = 0 ] || bad+=("decode $k $v")
	done
	[ ${#bad[@]} -eq 0 ] && return 0
	local IFS=';'
	echo "${bad[*]}"
	return 1
}

# ---- the faults ------------------------------------------------------------------------
loss_on() { nft_on "iifname \"$VD\" numgen random mod 100 < $LOSS" "oifname \"$VD\" numgen random mod 100 < $LOSS"; }
loss_off() { echo "$(nft_dropped) packets dropped"; nft_off; }
bh_on() { nft_on "tcp dport $DATA_PORT" "tcp sport $DATA_PORT"; }
bh_off() { echo "$(nft_dropped) data-port packets dropped"; nft_off; }
rate_on() {
	tc -n "$NSP" qdisc add dev "$VP" root tbf rate "$RATE" burst 32kb latency 100ms &&
		tc -n "$NSD" qdisc add dev "$VD" root tbf rate "$RATE" burst 32kb latency 100ms
}
rate_off() {
	local d
	d=$( (tc -n "$NSP" -s qdisc show dev "$VP"; tc -n "$NSD" -s qdisc show dev "$VD") |
		awk '/overlimits/ { gsub(/[(),]/, " "); for (i = 1; i < NF; i++) { if ($i == "dropped") d += $(i + 1); if ($i == "overlimits") o += $(i + 1) } }
		     END { printf "%d packets over the rate, %d dropped", o, d }')
	echo "$d"
	tc -n "$NSP" qdisc del dev "$VP" root 2>/dev/null
	tc -n "$NSD" qdisc del dev "$VD" root 2>/dev/null
}
down_on() { ip -n "$NSD" link set "$VD" down; }
down_off() {
	local c
	c=$(ip -n "$NSP" link show dev "$VP")
	ip -n "$NSD" link set "$VD" up
	case "$c" in
	*NO-CARRIER*) echo "link down ${DOWN_S}s (no carrier at the prefill end)" ;;
	*) echo "0 effect: the prefill end kept its carrier" ;;
	esac
}

# ---- a sender host that crashed and came back ------------------------------------------
# The decode broker's live requests, reservations and recv slots in use.
decode_held() {
	echo "$(pdctl_get "$DN" rx.live_requests) $(pdctl_get "$DN" reserved) $(pdctl_get "$DN" pool.recv.in_use)"
}
# Its requests not READY (half received); READY ones are whole, committed
# data a decode worker may still read, kept until their --recv-ttl.
decode_unready() {
	"$PDCTL" --name "$DN" --rundir "$RUN" --timeout 1000 requests 2>/dev/null |
		awk 'NR > 1 && $2 == "recv" && $3 != "ready" { n++ } END { print n + 0 }'
}

# The prefill namespace deleted (with the sockets its kernel kept for the
# dead broker: their FIN never goes out) and made again, with a new veth
# pair, as a host that rebooted: it answers the old connections with RST.
prefill_host_again() {
	local i
	ip -n "$NSD" link del "$VD" # the pair goes, so no FIN can leave
	ip netns del "$NSP"
	for ((i = 0; i < 50; i++)); do ip netns list | grep -qw "$NSP" || break; sleep 0.1; done
	ip netns add "$NSP" && ip link add "$VP" netns "$NSP" type veth peer name "$VD" netns "$NSD" &&
		ip -n "$NSP" addr add "$IPP/24" dev "$VP" && ip -n "$NSD" addr add "$IPD/24" dev "$VD" &&
		ip -n "$NSP" link set lo up && ip -n "$NSP" link set "$VP" up &&
		ip -n "$NSD" link set "$VD" up || infra_fail "cannot make the prefill namespace again"
}

restart_scenario() {
	local dir=$WORK/restart bad=() job held back=- t_up i hb=$HB
	mkdir -p "$dir"
	say "restart: both brokers again with --heartbeat $RS_HB"
	stop_pid "$PID_P"
	stop_pid "$PID_D"
	HB=$RS_HB
	brokers
	bench "$dir/warm" 10 3
	# The load of the crashed host, its decode workers too (in a session of
	# their own, killed with it): nobody releases what was half received.
	setsid "$PDBENCH" --prefill-name "$PN" --decode-name "$DN" --decode-ctrl "tcp://$IPD:$CTRL_PORT" \
		--rundir "$RUN" --tp "$TP" --requests "$REQS" --concurrency "$CONC" --chunks "$CHUNKS" \
		--batch "$BATCH" --timeout "$TIMEOUT" --quiet >"$dir/cut.out" 2>&1 &
	job=$!
	for ((i = 0; i < 200; i++)); do # its agents start, attach, then load (slow on a busy host)
		[ "$(pdctl_get "$DN" rx.live_requests)" -ge 4 ] 2>/dev/null && break
		sleep 0.1
	done
	say "restart: under load: held $(decode_held)"
	down_on
	nap 0.5
	kill -KILL -- "-$job" 2>/dev/null
	kill -KILL "$PID_P" 2>/dev/null
	wait "$job" 2>/dev/null
	wait "$PID_P" 2>/dev/null
	prefill_host_again # what its kernel knew of the connections is gone
	say "restart: prefill broker and its load killed behind the down link, its host made new"
	nap 1
	held="$(decode_held), $(decode_unready) half received"
	say "restart: held at the decode broker: $held"
	broker_start "$NSP" "$PN" "$IPP" "$SEND_SLOTS" 0
	PID_P=$BROKER_PID
	nap 1
	say "restart: prefill broker up again; held: $(decode_held)"
	case "$held" in *", 0 half received") bad+=("nothing half received at the decode broker after the crash ($held): no test") ;; esac
	t_up=$(now_ms)
	bench "$dir/after" 20 $((RANDOM + 12)) & # its first request says Hello
	job=$!
	for ((i = 0; i < RS_BACK * 10; i++)); do
		if [ "$(decode_unready)" = 0 ]; then
			back=$(awk -v ms=$(($(now_ms) - t_up)) 'BEGIN { printf "%.1f", ms / 1000 }')
			break
		fi
		sleep 0.1
	done
	wait "$job"
	say "restart: after the run through the new broker: held $(decode_held)"
	[ "$(pdctl_get "$DN" reserved)" = 0 ] || bad+=("$(pdctl_get "$DN" reserved) recv slots still reserved")
	HB=$hb
	[ "$back" != - ] || bad+=("still held ${RS_BACK}s after the restarted broker's first run began: $(decode_held) (live, reserved, slots), $(decode_unready) half received")
	unset "${!S_@}"
	[ -s "$dir/after.json" ] && eval "$(sum_json "$dir/after.json")"
	[ "$(cat "$dir/after.rc")" = 0 ] && [ "${S_requests_ok:-0}" = 20 ] && [ "${S_corrupted:-1}" = 0 ] ||
		bad+=("requests through the restarted broker: status $(cat "$dir/after.rc"), ${S_requests_ok:-0}/20 ok, ${S_corrupted:-?} corrupted")
	report "restart: prefill broker killed behind a down link, its host made new, started again; held at the decode broker after the crash (live, reserved, slots in use): $held; every half-received one rolled back ${back}s after the restarted broker's first run began (silence deadline $((${RS_HB%s} * 3))s; READY ones stay for their recv-ttl: $(decode_held) left); after: ${S_requests_ok:-0}/20 ok" "$dir"
}

# ---- run -------------------------------------------------------------------------------
topology
brokers
say "brokers up: $PN (pid $PID_P, $IPP) and $DN (pid $PID_D, $IPD); $BUILD"
bench "$WORK/warmup" 20 1
[ "$(cat "$WORK/warmup.rc")" = 0 ] || {
	sed 's/^/    | /' "$WORK/warmup.out" "$WORK/warmup.err" | tail -n 20
	log_tails
	infra_fail "a first run across the veth failed (status $(cat "$WORK/warmup.rc"))"
}
for s in ${ONLY//,/ }; do
	case "$s" in
	loss) scenario loss "$LOSS_S" 0 loss_on loss_off "${LOSS}% loss both ways for ${LOSS_S}s" ;;
	rate) scenario rate "$RATE_S" 0 rate_on rate_off "tbf $RATE both ways for ${RATE_S}s" ;;
	linkdown) scenario linkdown "$DOWN_S" 0 down_on down_off "decode link down for ${DOWN_S}s" ;;
	blackhole)
		for ((i = 1; i <= BH_RUNS; i++)); do
			scenario "blackhole-$i" "$BH_S" "$BH_POST" bh_on bh_off "data port $DATA_PORT blackholed for ${BH_S}s (control healthy), run $i/$BH_RUNS"
		done ;;
	esac
done
case ",$ONLY," in *,restart,*) restart_scenario ;; esac
echo "netfault: $((SECONDS - T0)) s (brokers in netns $NSP/$NSD, $BUILD)"
echo "$passed passed, $failed failed, 0 skipped"
[ "$failed" -eq 0 ]
