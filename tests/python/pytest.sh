#!/usr/bin/env bash
# The Python tests (tests/python/test_*.py) as one entry of tests/run.sh:
# pytest on the build's package, its counts in cmocka's form.
#   PD_BUILD_DIR  the build to test (default build/release)
#   PD_PYTHON     the interpreter (default Debian's /usr/bin/python3)
set -u
here=$(cd "$(dirname "$0")" && pwd)
py=${PD_PYTHON:-$(command -v /usr/bin/python3 || command -v python3)}
if ! "$py" -c 'import pytest, numpy' 2>/dev/null; then
	echo "skipped: $py has no pytest or numpy (apt-get install python3-pytest python3-numpy)"
	exit 77
fi
export PD_BUILD_DIR=${PD_BUILD_DIR:-$here/../../build/release}
if ! compgen -G "$PD_BUILD_DIR/python/pdkv/_pdkv*.so" >/dev/null; then
	echo "skipped: no Python binding in $PD_BUILD_DIR/python (make python; needs python3-dev)"
	exit 77
fi
export PYTHONDONTWRITEBYTECODE=1
cd "$here" && exec "$py" -m pytest -q -p no:cacheprovider "$here" "$@"
