#!/usr/bin/env bash
# Install the Debian packages pdkv needs.
#   tools/deps.sh install   install what is missing (as root), else print the command
#   tools/deps.sh check     exit 0 when everything is installed, 1 otherwise
set -euo pipefail

# curl: the HTTP client of the --metrics-listen tests (it_metrics).
# python3-*: the Python binding (python/pdkv), its tests and make demo-llm.
PKGS=(build-essential pkg-config clang libclang-rt-14-dev clang-tidy cppcheck libcmocka-dev libxxhash-dev libzmq3-dev libbsd-dev
      libmsgpack-dev libjansson-dev libibverbs-dev librdmacm-dev curl
      python3 python3-dev python3-numpy python3-pytest)

missing=()
for p in "${PKGS[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing+=("$p")
	fi
done

case "${1:-install}" in
check)
	[ ${#missing[@]} -eq 0 ] && exit 0
	echo "missing packages: ${missing[*]}"
	exit 1 ;;
install) ;;
*)
	echo "usage: $0 [install|check]" >&2
	exit 2 ;;
esac

[ ${#missing[@]} -eq 0 ] && { echo "deps: all packages present"; exit 0; }
cmd="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
	echo "deps: missing ${missing[*]}; as root run: apt-get update && $cmd" >&2
	exit 1
fi
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
$cmd
