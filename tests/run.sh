#!/usr/bin/env bash
# Run test binaries; sum their cmocka results; close with "N passed, N failed".
#   tests/run.sh BIN...
# Env: PD_TEST_WRAPPER (e.g. "valgrind --error-exitcode=2"), PD_TEST_TIMEOUT
# (seconds per binary, default 600), PD_TEST_LOOPS (repeat the run, hunting flakes).
# A binary exiting 77 is skipped; one that crashes or times out counts as a
# failure even when cmocka printed nothing.
set -u

timeout_s=${PD_TEST_TIMEOUT:-600}
loops=${PD_TEST_LOOPS:-1}
passed=0 failed=0 skipped=0
failed_bins=()
log_dir=$(mktemp -d /tmp/pdkv-tests.XXXXXX)
trap 'rm -rf "$log_dir"' EXIT

count() { # pattern file -> sum of N in "[  PATTERN ] N test(s)"
	awk -v pat="$1" 'index($0, pat) { for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+$/) { s += $i; break } } END { print s + 0 }' "$2"
}

run_one() {
	local bin=$1 log name rc p f s
	name=$(basename "$bin")
	log="$log_dir/$name.log"
	local start=$SECONDS
	# shellcheck disable=SC2086
	timeout --kill-after=10 "$timeout_s" ${PD_TEST_WRAPPER:-} "$bin" >"$log" 2>&1
	rc=$?
	p=$(count "[  PASSED  ]" "$log")
	f=$(count "[  FAILED  ]" "$log")
	s=$(count "[  SKIPPED ]" "$log")
	if [ $rc -eq 77 ]; then
		printf '%-28s SKIP (%s)\n' "$name" "$(tail -n 1 "$log")"
		skipped=$((skipped + (s > 0 ? s : 1)))
		return
	fi
	if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then
		f=1 # crashed, timed out or failed outside a test case
	fi
	passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
	if [ $rc -ne 0 ] || [ "$f" -ne 0 ]; then
		failed_bins+=("$name")
		printf '%-28s FAIL (exit %d, %d passed, %d failed, %ds)\n' "$name" $rc "$p" "$f" $((SECONDS - start))
		sed 's/^/    | /' "$log" | tail -n 60
	else
		printf '%-28s ok   (%d passed, %ds)\n' "$name" "$p" $((SECONDS - start))
	fi
}

for ((loop = 1; loop <= loops; loop++)); do
	[ "$loops" -gt 1 ] && echo "== loop $loop/$loops"
	for bin in "$@"; do
		run_one "$bin"
	done
done

[ ${#failed_bins[@]} -gt 0 ] && echo "failed: ${failed_bins[*]}"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] && [ ${#failed_bins[@]} -eq 0 ]
