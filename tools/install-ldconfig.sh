#!/bin/sh
# After `make install`: let the dynamic loader find libpdagent.so.0.
# Usage: install-ldconfig.sh DESTDIR LIBDIR. A staged install (DESTDIR set)
# is left to its package's own scripts. As root, ldconfig refreshes the
# cache; when LIBDIR is not among the loader's directories even then (or we
# are not root), say what to do instead of leaving programs that cannot start.
destdir=$1 libdir=$2
[ -n "$destdir" ] && exit 0
if [ "$(id -u)" = 0 ] && command -v ldconfig >/dev/null 2>&1; then
	ldconfig
	if ldconfig -p | grep -q "libpdagent.so.0 .*=> $libdir/libpdagent.so.0\$"; then
		exit 0
	fi
fi
echo "make install: $libdir is not in the dynamic loader's path; add it to" \
	"/etc/ld.so.conf.d/pdkv.conf and run ldconfig (as root), or set LD_LIBRARY_PATH=$libdir"
