#!/usr/bin/env bash
# Run test binaries; sum their cmocka results; close with "N passed, N failed".
#   tests/run.sh BIN...
# Env: PD_TEST_WRAPPER (e.g. "valgrind --error-exitcode=2"), PD_TEST_TIMEOUT
# (seconds per binary, default 600), PD_TEST_LOOPS (repeat the run, hunting flakes).
# A binary exiting 77 is skipped; one that crashes or times out counts as a
# failure even when cmocka printed nothing.
#
# Leftovers: what a binary leaves in /tmp or /dev/shm (a segment, a
# directory, a socket) is a failure of that binary, named on a line of its
# own. As root the run gets a /tmp and a /dev/shm of its own (a private
# mount namespace, tmpfs, gone with the run), so whatever appears there is
# this run's; otherwise (not root, a tree under /tmp, no mount namespace,
# or PD_TEST_PRIVATE_TMP=0) the runner compares the machine's /tmp and
# /dev/shm (this user's entries) before and after each binary.
# PD_TEST_LEFTOVERS=warn reports them without failing (for a shared
# machine where other runs write /tmp meanwhile).
set -u

# Is the tree, or a program to run, under /tmp or /dev/shm (hidden by a private one)?
under_tmp() {
	local p
	for p in "$PWD" "${PD_TEST_BIN_DIR:-.}" "$@"; do
		case "$(realpath -m "$p")/" in /tmp/* | /dev/shm/*) return 0 ;; esac
	done
	return 1
}

if [ -z "${PD_TEST_IN_NS:-}" ] && [ "$(id -u)" = 0 ] && [ "${PD_TEST_PRIVATE_TMP:-1}" != 0 ] &&
	! under_tmp "$@" && unshare --mount --propagation private true 2>/dev/null; then
	exec unshare --mount --propagation private -- env PD_TEST_IN_NS=1 bash "$0" "$@"
fi
private=0
if [ -n "${PD_TEST_IN_NS:-}" ]; then
	if mount -t tmpfs -o mode=1777 pdkv-test-tmp /tmp &&
		mount -t tmpfs -o mode=1777 pdkv-test-shm /dev/shm; then
		private=1
	else
		echo "tests/run.sh: no private /tmp and /dev/shm; comparing the machine's"
	fi
fi

timeout_s=${PD_TEST_TIMEOUT:-600}
loops=${PD_TEST_LOOPS:-1}
passed=0 failed=0 skipped=0
failed_bins=()
log_dir=$(mktemp -d /tmp/pdkv-tests.XXXXXX)
trap 'rm -rf "$log_dir"' EXIT

count() { # pattern file -> sum of N in "[  PATTERN ] N test(s)"
	awk -v pat="$1" 'index($0, pat) { for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+$/) { s += $i; break } } END { print s + 0 }' "$2"
}

# The entries of /tmp and /dev/shm, sorted, one a line (the runner's own
# log directory aside); this user's only when /tmp is the machine's.
snapshot() {
	local own=()
	[ "$private" = 1 ] || own=(-uid "$(id -u)")
	find /tmp /dev/shm -mindepth 1 -maxdepth 1 "${own[@]}" 2>/dev/null | grep -vxF "$log_dir" | sort
}

# What is in the snapshot now that was not in $1. A broker stopping as
# its test exits removes its files within its drain time: what goes away
# within 5 s is not left behind.
leftovers() {
	local before=$1 left tries=0
	while left=$(comm -13 <(printf '%s\n' "$before") <(snapshot)) && [ -n "$left" ] &&
		[ $tries -lt 50 ]; do
		sleep 0.1
		tries=$((tries + 1))
	done
	printf '%s' "$left"
}

# "PATH (SIZE)", comma-separated.
describe() {
	local p out=()
	while IFS= read -r p; do
		[ -n "$p" ] && out+=("$p ($(du -sh --apparent-size "$p" 2>/dev/null | cut -f1 |
			sed 's/[0-9]$/& B/'))")
	done <<<"$1"
	local IFS=,
	echo "${out[*]}" | sed 's/,/, /g'
}

# "    skipped NAME: WHY" for each cmocka test skipped in log (WHY: the line it printed).
skip_reasons() {
	awk '/^\[  SKIPPED \] / && !/test\(s\)/ && !seen[$4]++ {
		print "    skipped " $4 (prev ~ /^\[/ ? "" : ": " prev) }
	     { prev = $0 }' "$1"
}

run_one() {
	local bin=$1 log name rc p f s before left
	name=$(basename "$bin")
	log="$log_dir/$name.log"
	local start=$SECONDS
	before=$(snapshot)
	# shellcheck disable=SC2086
	timeout --kill-after=10 "$timeout_s" ${PD_TEST_WRAPPER:-} "$bin" >"$log" 2>&1
	rc=$?
	local took=$((SECONDS - start))
	left=$(leftovers "$before")
	p=$(count "[  PASSED  ]" "$log")
	f=$(count "[  FAILED  ]" "$log")
	s=$(count "[  SKIPPED ]" "$log")
	if [ $rc -eq 77 ]; then
		printf '%-28s SKIP (%s)\n' "$name" "$(tail -n 1 "$log")"
		skipped=$((skipped + (s > 0 ? s : 1)))
	else
		if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then
			f=1 # crashed, timed out or failed outside a test case
		fi
		passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
		if [ $rc -ne 0 ] || [ "$f" -ne 0 ]; then
			failed_bins+=("$name")
			printf '%-28s FAIL (exit %d, %d passed, %d failed, %ds)\n' "$name" $rc "$p" "$f" "$took"
			sed 's/^/    | /' "$log" | tail -n 60
		else
			printf '%-28s ok   (%d passed%s, %ds)\n' "$name" "$p" \
				"$([ "$s" -gt 0 ] && echo ", $s skipped")" "$took"
			skip_reasons "$log"
		fi
	fi
	if [ -n "$left" ]; then
		printf '%-28s LEFT BEHIND: %s\n' "$name" "$(describe "$left")"
		if [ "${PD_TEST_LEFTOVERS:-fail}" != warn ]; then
			failed=$((failed + 1))
			failed_bins+=("$name (left files behind)")
		fi
	fi
}

if [ "$private" = 1 ]; then
	echo "leftover check: this run's own /tmp and /dev/shm (private mount namespace)"
else
	echo "leftover check: new entries of uid $(id -u) in /tmp and /dev/shm"
fi
for ((loop = 1; loop <= loops; loop++)); do
	[ "$loops" -gt 1 ] && echo "== loop $loop/$loops"
	for bin in "$@"; do
		run_one "$bin"
	done
done

[ ${#failed_bins[@]} -gt 0 ] && echo "failed: ${failed_bins[*]}"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] && [ ${#failed_bins[@]} -eq 0 ]
