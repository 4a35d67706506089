#!/usr/bin/env bash
# make lint: cppcheck and clang-tidy over the C sources, with the build's
# include paths; the Makefile's lint target says which checks and why.
#   tools/lint.sh --out DIR --suppress FILE --jobs N --cppcheck "ARGS" \
#                 --tidy "ARGS" --cflags "FLAGS" SRC...
# Every finding fails, except one the suppression file lists (see its
# header for the format); an entry that matches no finding fails too, so
# the list only shrinks. Exit 0 clean, 1 findings, 2 a tool failed.
# Env: CPPCHECK, CLANG_TIDY (the programs; default cppcheck, clang-tidy).
set -euo pipefail

out='' supp='' jobs=2 cpp_args='' tidy_args='' cflags=''
while [ $# -gt 0 ]; do
	case "$1" in
	--out) out=$2; shift 2 ;;
	--suppress) supp=$2; shift 2 ;;
	--jobs) jobs=$2; shift 2 ;;
	--cppcheck) cpp_args=$2; shift 2 ;;
	--tidy) tidy_args=$2; shift 2 ;;
	--cflags) cflags=$2; shift 2 ;;
	--) shift; break ;;
	-*) echo "lint: unknown option $1" >&2; exit 2 ;;
	*) break ;;
	esac
done
if [ -z "$out" ] || [ $# -eq 0 ]; then
	echo "usage: see $0" >&2
	exit 2
fi
[ -z "$supp" ] || [ -r "$supp" ] || { echo "lint: cannot read $supp" >&2; exit 2; }
cppcheck=${CPPCHECK:-cppcheck}
tidy=${CLANG_TIDY:-clang-tidy}
for t in "$cppcheck" "$tidy"; do
	command -v "$t" >/dev/null || { echo "lint: $t not found (tools/deps.sh install)" >&2; exit 2; }
done

rm -rf "$out" && mkdir -p "$out/tidy" "$out/sys"
start=$SECONDS

# cppcheck reads no system headers, but the code declares its lists and
# trees with the macros of <sys/queue.h> and libbsd's <bsd/sys/queue.h>
# and <bsd/sys/tree.h>; without them it sees syntax errors. Only those
# headers are shown to it (links in $out/sys), found where the compiler
# finds them.
# shellcheck disable=SC2086
for h in $(printf '#include <sys/queue.h>\n#include <bsd/sys/queue.h>\n#include <bsd/sys/tree.h>\n' |
	   ${CC:-cc} $cflags -M -x c - | tr -cs 'A-Za-z0-9_./+-' '\n' | grep -E '/(bsd/)?sys/(queue|tree)\.h$'); do
	rel=${h##*/include/}
	rel=${rel#*-linux-gnu/}
	mkdir -p "$out/sys/$(dirname "$rel")"
	ln -sf "$h" "$out/sys/$rel"
done
cpp_inc=()
for f in $cflags; do
	case "$f" in
	-I/*) ;;                  # a system library's headers: not analysed
	-I*|-D*|-U*) cpp_inc+=("$f") ;;
	esac
done

# Findings, one a line: FILE:LINE: TOOL/CHECK: MESSAGE.
# shellcheck disable=SC2086
"$cppcheck" -q -j "$jobs" $cpp_args "${cpp_inc[@]}" -I"$out/sys" \
	--template='{file}:{line}: cppcheck/{id}: {message}' "$@" >"$out/cppcheck.log" 2>&1 &&
	cpp_rc=0 || cpp_rc=$?
grep -E '^[^ :]+:[0-9]+: cppcheck/' "$out/cppcheck.log" >"$out/findings" || true
if [ "$cpp_rc" -ne 0 ] && ! [ -s "$out/findings" ]; then
	echo "lint: cppcheck failed (exit $cpp_rc):" >&2
	cat "$out/cppcheck.log" >&2
	exit 2
fi

# clang-tidy, one process per file, $jobs at a time; a file it cannot
# parse (exit non-zero) is a tool failure, never a suppressible finding.
export tidy tidy_args cflags out
# shellcheck disable=SC2016
printf '%s\0' "$@" | xargs -0 -n 1 -P "$jobs" sh -c '
	set -f
	log="$out/tidy/$(printf %s "$1" | tr / _).log"
	# shellcheck disable=SC2086
	"$tidy" -quiet $tidy_args "$1" -- $cflags >"$log" 2>&1 || echo "$1" >>"$out/tidy-failed"' sh
if [ -s "$out/tidy-failed" ]; then
	while read -r f; do
		echo "lint: clang-tidy failed on $f:" >&2
		grep -E 'error' "$out/tidy/$(printf %s "$f" | tr / _).log" | head -n 20 >&2
	done <"$out/tidy-failed"
	exit 2
fi
cat "$out"/tidy/*.log | awk -v pwd="$PWD/" '
match($0, /^[^ ]+:[0-9]+:[0-9]+: (warning|error): .* \[[^]]+\]$/) {
	split($0, a, ":")
	file = index(a[1], pwd) == 1 ? substr(a[1], length(pwd) + 1) : a[1]
	sub(/^\.\//, "", file)
	msg = $0
	sub(/^[^ ]+:[0-9]+:[0-9]+: (warning|error): /, "", msg)
	chk = msg
	sub(/.* \[/, "", chk)
	sub(/\]$/, "", chk)
	sub(/ \[[^]]+\]$/, "", msg)
	print file ":" a[2] ": clang-tidy/" chk ": " msg
}' >>"$out/findings"

# One finding per file, line and check (a header's finding is reported by
# every file that includes it), then matched against the suppressions by
# file, check and the flagged line's text.
sort -u -t: -k1,1 -k2,2n -k3,3 "$out/findings" | awk -F': ' '!seen[$1 FS $2]++' >"$out/unique"
awk -v supp="${supp:-/dev/null}" '
function trim(s) { sub(/^[ \t]+/, "", s); sub(/[ \t]+$/, "", s); return s }
function text(file, line,   s, i) {
	s = ""
	for (i = 0; i < line && (getline s < file) > 0; i++)
		;
	close(file)
	return i == line ? trim(s) : ""
}
BEGIN {
	while ((getline l < supp) > 0) {
		ln++
		if (l ~ /^[ \t]*(#|$)/)
			continue
		if (!match(l, /^[^ :]+:[0-9]+: [a-z-]+\/[^ :]+: /)) {
			printf "%s:%d: not FILE:LINE: TOOL/CHECK: STATEMENT\n", supp, ln
			bad++
			continue
		}
		split(substr(l, 1, RLENGTH - 2), h, ": ")
		sub(/:[0-9]+$/, "", h[1])
		k = h[1] SUBSEP h[2] SUBSEP trim(substr(l, RLENGTH + 1))
		want[k]++
		where[k] = where[k] " " supp ":" ln
		nsupp++
	}
}
{
	split($0, p, ": ")
	split(p[1], fl, ":")
	t = text(fl[1], fl[2] + 0)
	k = fl[1] SUBSEP p[2] SUBSEP t
	if (want[k] > 0) {
		want[k]--
		suppressed++
	} else {
		print $0 "\n    | " t
		found++
	}
}
END {
	for (k in want)
		if (want[k] > 0) {
			split(k, s, SUBSEP)
			printf "stale suppression (%s):%s matches no finding: fixed or changed? drop or update it\n",
			       s[2], where[k]
			bad++
		}
	printf "lint: %d findings, %d suppressed by %d entries in %s, %d bad entries\n",
	       found + suppressed, suppressed + 0, nsupp + 0, supp, bad + 0
	exit found + bad > 0
}' "$out/unique" && rc=0 || rc=$?
[ "$rc" -eq 0 ] && verdict=clean || verdict=FAILED
echo "lint: $# files, cppcheck and clang-tidy, $((SECONDS - start)) s: $verdict"
exit "$rc"
