#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Run host-built RDMA test programs against real verbs: SoftRoCE (rdma_rxe)
# devices in a qemu guest booted from Debian's own kernel package.
#
#   tests/rdma/run.sh [options] --bin PROG [--bin PROG ...] -- 'CMD' ['CMD' ...]
#
# One guest boot runs every CMD in turn (bash, cwd /root, PATH has the
# copied programs). Two rxe devices sit on the two ends of a veth pair:
#   RXE_DEV0=rxe0 RXE_IP0=10.77.0.1 (veth0)   RXE_DEV1=rxe1 RXE_IP1=10.77.0.2 (veth1)
# and policy routing makes traffic between the two addresses really cross
# the pair (otherwise the kernel short-cuts it through lo, where rxe drops it).
#
# Test programs print one line per check starting with "PASS " or "FAIL "
# (or "SKIP "); the runner counts them over all commands and ends with
#   N passed, N failed, N skipped
# A command that exits non-zero without printing a FAIL line counts as one
# failure (a crash); a guest that never reports counts as one failure too.
# Exit status: 0 when nothing failed (also when the whole run is skipped).
#
# Skips (exit 0, "0 passed, 0 failed, 1 skipped"), never a pretend pass:
# qemu or the kernel package cannot be had (no root to install, apt fails,
# no network), or the kernel has no rdma_rxe.
#
# Options:
#   --bin PATH      copy an ELF (and the libraries ldd lists) into the guest
#   --timeout S     whole guest run (default 600)
#   --smp N         guest CPUs (default 2); --mem MiB (default 1024)
#   --cache DIR     kernel cache (default $PD_RDMA_CACHE or /tmp/pdkv-rdma-cache)
#   --kvm           use KVM (-cpu host) instead of TCG. Off by default: on a
#                   nested-virtualisation host qemu aborted ("failed to set MSR
#                   0x10a") or hung silently with KVM, while TCG always boots.
#   --keep DIR      keep the initramfs tree and console log in DIR
#   -v              kernel messages on the console
#
# The facts this relies on (module list, crc32_generic, busybox applet
# shadowing, veth policy routing, idle=poll under TCG, PVH boot of the ELF
# vmlinux) are explained where they are used below.
set -euo pipefail

T0=$SECONDS
BINS=() CMDS=()
TIMEOUT=600 SMP=2 MEM=1024 VERBOSE=0 USE_KVM=0 KEEP=
CACHE=${PD_RDMA_CACHE:-/tmp/pdkv-rdma-cache}

say() { echo "rdma-run [$((SECONDS - T0))s]: $*" >&2; }
skip() {
	echo "SKIP: RDMA tests not run: $*"
	echo "0 passed, 0 failed, 1 skipped"
	exit 0
}
infra_fail() {
	echo "FAIL rdma-runner: $*"
	echo "0 passed, 1 failed, 0 skipped"
	exit 1
}

while [ $# -gt 0 ]; do
	case "$1" in
	--bin) BINS+=("$2"); shift 2 ;;
	--timeout) TIMEOUT=$2; shift 2 ;;
	--smp) SMP=$2; shift 2 ;;
	--mem) MEM=$2; shift 2 ;;
	--cache) CACHE=$2; shift 2 ;;
	--kvm) USE_KVM=1; shift ;;
	--keep) KEEP=$2; shift 2 ;;
	-v) VERBOSE=1; shift ;;
	--) shift; CMDS=("$@"); break ;;
	*) echo "usage: $0 [options] --bin PROG ... -- 'CMD' ..." >&2; exit 2 ;;
	esac
done
[ ${#CMDS[@]} -gt 0 ] || { echo "$0: no command given (after --)" >&2; exit 2; }
for b in "${BINS[@]}"; do
	[ -x "$b" ] || infra_fail "--bin $b: not an executable file (build it first)"
done

# ---- host packages -----------------------------------------------------------------
# command -> Debian package. kmod gives modinfo/depmod, iproute2 gives ip and
# rdma, ibverbs-providers the rxe userspace driver (librxe).
declare -A NEED=(
	[qemu-system-x86_64]=qemu-system-x86 [busybox]=busybox-static [cpio]=cpio
	[xz]=xz-utils [modinfo]=kmod [ip]=iproute2 [rdma]=iproute2 [dash]=dash
	[apt-get]=apt [dpkg]=dpkg
)
missing=()
for c in "${!NEED[@]}"; do
	command -v "$c" >/dev/null 2>&1 || command -v "/sbin/$c" >/dev/null 2>&1 || missing+=("${NEED[$c]}")
done
ls /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav*.so >/dev/null 2>&1 || missing+=(ibverbs-providers)
if [ ${#missing[@]} -gt 0 ]; then
	mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
	[ "$(id -u)" = 0 ] || skip "missing ${missing[*]} and not root (apt-get install -y ${missing[*]})"
	command -v apt-get >/dev/null || skip "missing ${missing[*]} and no apt-get"
	say "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >/tmp/pdkv-rdma-apt.log 2>&1; then
		apt-get update -q >>/tmp/pdkv-rdma-apt.log 2>&1 || true
		apt-get install -y -q --no-install-recommends "${missing[@]}" >>/tmp/pdkv-rdma-apt.log 2>&1 ||
			skip "apt-get install ${missing[*]} failed (see /tmp/pdkv-rdma-apt.log)"
	fi
	rm -f /tmp/pdkv-rdma-apt.log # kept only when the install failed
fi
PATH=$PATH:/usr/sbin:/sbin

# ---- kernel package (downloaded, unpacked into the cache, never installed) ---------
mkdir -p "$CACHE" || skip "cannot create cache $CACHE"
exec 8>"$CACHE/.lock"
flock 8
KPKG=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ { print $2; exit }' || true)
if [ -z "$KPKG" ]; then
	apt-get update -q >/dev/null 2>&1 || true
	KPKG=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ { print $2; exit }' || true)
fi
if [ -z "$KPKG" ]; then # offline: a kernel unpacked by an earlier run will do
	k=$(ls -d "$CACHE"/linux-image-*/.ok 2>/dev/null | sort -V | tail -n 1 || true)
	[ -n "$k" ] && KPKG=$(basename "$(dirname "$k")")
fi
[ -n "$KPKG" ] || skip "apt knows no linux-image-amd64 (no Debian archive configured?)"
KDIR=$CACHE/$KPKG
if [ ! -e "$KDIR/.ok" ]; then
	say "fetching $KPKG (apt-get download)"
	rm -rf "$KDIR" && mkdir -p "$KDIR/dl"
	(cd "$KDIR/dl" && apt-get download "$KPKG" >/dev/null 2>&1) || skip "apt-get download $KPKG failed"
	dpkg -x "$KDIR"/dl/*.deb "$KDIR/root" || skip "dpkg -x of $KPKG failed"
	rm -rf "$KDIR/dl"
	touch "$KDIR/.ok"
fi
KVER=$(ls "$KDIR/root/lib/modules" 2>/dev/null | head -n 1 || true)
[ -n "$KVER" ] || skip "$KPKG has no modules"
MODROOT=$KDIR/root/lib/modules/$KVER
VMLINUZ=$KDIR/root/boot/vmlinuz-$KVER
[ -f "$VMLINUZ" ] || skip "$KPKG has no /boot/vmlinuz-$KVER"
find "$MODROOT" -name 'rdma_rxe.ko*' | grep -q . || skip "kernel $KVER has no rdma_rxe module"

# Boot the uncompressed ELF through qemu's PVH entry when the kernel has
# CONFIG_PVH: TCG then skips the in-guest decompression (seconds).
KERNEL=$VMLINUZ
if grep -q '^CONFIG_PVH=y' "$KDIR/root/boot/config-$KVER" 2>/dev/null; then
	if [ ! -s "$KDIR/vmlinux" ]; then
		off=$(LC_ALL=C grep -abo "$(printf '\3757zXZ')" "$VMLINUZ" | head -n 1 | cut -d: -f1 || true)
		if [ -n "$off" ]; then
			tail -c +$((off + 1)) "$VMLINUZ" | xz -dc --single-stream >"$KDIR/vmlinux.tmp" 2>/dev/null || true
			[ "$(head -c 4 "$KDIR/vmlinux.tmp" | od -An -tx1 | tr -d ' ')" = 7f454c46 ] &&
				mv "$KDIR/vmlinux.tmp" "$KDIR/vmlinux"
			rm -f "$KDIR/vmlinux.tmp"
		fi
	fi
	[ -s "$KDIR/vmlinux" ] && KERNEL=$KDIR/vmlinux
fi
flock -u 8
say "kernel $KVER ($(basename "$KERNEL"))"

# ---- initramfs tree ------------------------------------------------------------------
WORK=$(mktemp -d /tmp/pdkv-rdma.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
R=$WORK/root
mkdir -p "$R"/{usr/bin,usr/sbin,usr/lib,usr/lib64,usr/local/bin,etc/pdkv,proc,sys,dev,tmp,root,bb}
ln -s usr/bin "$R/bin"; ln -s usr/sbin "$R/sbin"; ln -s usr/lib "$R/lib"; ln -s usr/lib64 "$R/lib64"

declare -A COPIED=()
copy_file() { # SRC [DST]: same absolute path in the guest unless DST
	local dst=${2:-$1}
	mkdir -p "$R${dst%/*}"
	cp -L "$1" "$R$dst"
}
copy_elf() { # an ELF plus every library ldd resolves for it
	local lib
	copy_file "$1" "${2:-$1}"
	while read -r lib; do
		[ -n "$lib" ] && [ -z "${COPIED[$lib]:-}" ] || continue
		COPIED[$lib]=1
		copy_file "$lib"
	done < <(ldd "$1" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }')
}

# busybox provides mount/insmod/poweroff...; its applets go LAST in PATH
# (/bb) so that they never shadow the real ip, rdma or a test program.
BB=$(command -v busybox)
copy_file "$BB" /bb/busybox
for t in dash bash ip rdma; do
	p=$(command -v "$t") || infra_fail "host tool $t not found"
	copy_elf "$p" "/usr/bin/$t"
done
ln -s dash "$R/usr/bin/sh"
for p in /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav*.so; do copy_elf "$p"; done
mkdir -p "$R/etc/libibverbs.d"
cp /etc/libibverbs.d/rxe.driver "$R/etc/libibverbs.d/"
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$R/etc/passwd"
for b in "${BINS[@]}"; do
	copy_elf "$(realpath "$b")" "/usr/local/bin/${b##*/}"
done

# ---- kernel modules, dependencies first ------------------------------------------------
declare -A MODFILE=() LOADED=()
while IFS= read -r f; do
	n=${f##*/}; n=${n%%.ko*}; MODFILE[${n//-/_}]=$f
done < <(find "$MODROOT/kernel" -name '*.ko*')
ORDER=()
add_mod() {
	local n=${1//-/_} d
	[ -z "${LOADED[$n]:-}" ] || return 0
	LOADED[$n]=1
	if [ -z "${MODFILE[$n]:-}" ]; then # built into the kernel?
		grep -q "/${n//_/[-_]}\.ko" "$MODROOT/modules.builtin" 2>/dev/null && return 0
		infra_fail "kernel module $n not found in $KVER"
	fi
	for d in $(modinfo -F depends "${MODFILE[$n]}" | tr ',' ' '); do add_mod "$d"; done
	ORDER+=("$n")
}
# crc32_generic: rxe's ICRC needs the crypto API's crc32, and nothing in the
# guest would load it on demand (rdma link add then fails with -ENOENT).
for m in crc32_generic rdma_rxe ib_uverbs rdma_ucm veth; do add_mod "$m"; done
mkdir -p "$R/mod"
for n in "${ORDER[@]}"; do
	f=${MODFILE[$n]}
	case "$f" in
	*.xz) xz -dc "$f" >"$R/mod/$n.ko" ;;
	*.zst) zstd -qdc "$f" >"$R/mod/$n.ko" ;;
	*.gz) gzip -dc "$f" >"$R/mod/$n.ko" ;;
	*) cp "$f" "$R/mod/$n.ko" ;;
	esac
	echo "/mod/$n.ko" >>"$R/etc/pdkv/modules"
done

# ---- guest scripts -----------------------------------------------------------------------
i=0
for c in "${CMDS[@]}"; do
	i=$((i + 1))
	printf '%s\n' "$c" >"$R/etc/pdkv/cmd.$i"
done

cat >"$R/etc/pdkv/net.sh" <<'EOF'
# Two rxe devices on the two ends of one veth pair, in one kernel. Both
# addresses are local, so by default 10.77.0.1 -> 10.77.0.2 would go through
# lo (and rxe ignores lo). Locally generated traffic to the other address is
# routed out of the other veth end instead; packets arriving on a veth are
# delivered locally. Static neighbours spare the first connect an ARP wait.
set -e
w() { echo "$2" > "/proc/sys/net/ipv4/conf/$1"; }
ip link set lo up
ip link add veth0 type veth peer name veth1
ip addr add 10.77.0.1/24 dev veth0
ip addr add 10.77.0.2/24 dev veth1
for i in all default veth0 veth1; do w $i/accept_local 1; w $i/rp_filter 0; done
w all/arp_ignore 1; w all/arp_announce 2
ip link set veth0 up
ip link set veth1 up
ip rule add pref 100 iif veth0 lookup local
ip rule add pref 101 iif veth1 lookup local
ip rule add pref 200 iif lo to 10.77.0.2 lookup 201
ip rule add pref 201 iif lo to 10.77.0.1 lookup 202
ip rule add pref 300 lookup local
ip rule del pref 0 lookup local
ip route add 10.77.0.2/32 dev veth0 src 10.77.0.1 table 201
ip route add 10.77.0.1/32 dev veth1 src 10.77.0.2 table 202
ip neigh replace 10.77.0.2 lladdr "$(cat /sys/class/net/veth1/address)" dev veth0 nud permanent
ip neigh replace 10.77.0.1 lladdr "$(cat /sys/class/net/veth0/address)" dev veth1 nud permanent
rdma link add rxe0 type rxe netdev veth0
rdma link add rxe1 type rxe netdev veth1
EOF

cat >"$R/init" <<'EOF'
#!/bin/sh
export PATH=/usr/local/bin:/usr/bin:/usr/sbin:/bb HOME=/root
/bb/busybox --install -s /bb
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
up() { read -r t _ < /proc/uptime; echo "$t"; }
done_rc() { echo "PDKV_GUEST_RC=$1"; sync; poweroff -f; sleep 30; }
for m in $(cat /etc/pdkv/modules); do
	insmod "$m" || { echo "PDKV_GUEST_SETUP insmod $m failed"; dmesg | tail -n 20; done_rc 125; }
done
mount -t configfs configfs /sys/kernel/config 2>/dev/null
if ! dash /etc/pdkv/net.sh; then
	echo "PDKV_GUEST_SETUP veth/rxe setup failed"; dmesg | tail -n 20; done_rc 125
fi
export RXE_DEV0=rxe0 RXE_IP0=10.77.0.1 RXE_DEV1=rxe1 RXE_IP1=10.77.0.2
echo "PDKV_GUEST_READY at $(up)s: $(ls /sys/class/infiniband | tr '\n' ' ')"
cd /root
rc=0 i=1
while [ -e /etc/pdkv/cmd.$i ]; do
	t=$(up)
	echo "PDKV_GUEST_CMD $i: $(cat /etc/pdkv/cmd.$i)"
	bash /etc/pdkv/cmd.$i
	r=$?
	echo "PDKV_GUEST_CMD_RC $i $r ($t..$(up)s)"
	[ $r -ne 0 ] && rc=$r
	i=$((i + 1))
done
for i in veth0 veth1; do
	echo "PDKV_GUEST_NET $i: $(cat /sys/class/net/$i/statistics/rx_packets) packets, $(cat /sys/class/net/$i/statistics/rx_bytes) bytes received"
done
[ $rc -ne 0 ] && { echo "kernel messages:"; dmesg | tail -n 20; }
done_rc $rc
EOF
chmod +x "$R/init"
(cd "$R" && find . | LC_ALL=C sort | cpio -o -H newc --quiet) >"$WORK/initrd.cpio"
say "initramfs $(du -h "$WORK/initrd.cpio" | cut -f1), ${#ORDER[@]} modules"

# ---- boot ------------------------------------------------------------------------------------
APPEND="console=ttyS0 panic=-1 mitigations=off nokaslr random.trust_cpu=on"
if [ "$USE_KVM" = 1 ] && [ -r /dev/kvm ] && [ -w /dev/kvm ]; then
	ACCEL=(-accel kvm -cpu host)
else
	# TCG wakes a halted vCPU only at the next tick (~4 ms per event-driven
	# round trip); idle=poll keeps the vCPUs spinning instead.
	ACCEL=(-accel tcg,thread=multi -cpu max)
	APPEND="$APPEND tsc=unstable idle=poll"
fi
[ "$VERBOSE" = 1 ] || APPEND="$APPEND quiet"
LOG=$WORK/console.log
say "booting ($(printf '%s ' "${ACCEL[@]}")-smp $SMP -m $MEM, timeout ${TIMEOUT}s)"
BOOT0=$SECONDS
set +e
timeout -k 5 "$TIMEOUT" qemu-system-x86_64 "${ACCEL[@]}" -m "$MEM" -smp "$SMP" \
	-kernel "$KERNEL" -initrd "$WORK/initrd.cpio" -append "$APPEND" \
	-display none -serial stdio -monitor none -nic none -no-reboot </dev/null 2>&1 |
	tr -d '\r' | tee "$LOG"
qrc=${PIPESTATUS[0]}
set -e
say "guest ran $((SECONDS - BOOT0))s (qemu status $qrc), total $((SECONDS - T0))s"
[ -n "$KEEP" ] && { mkdir -p "$KEEP"; cp -r "$WORK"/. "$KEEP"/; }

# ---- verdict ---------------------------------------------------------------------------------
passed=$(grep -c '^PASS ' "$LOG" || true)
failed=$(grep -c '^FAIL ' "$LOG" || true)
skipped=$(grep -c '^SKIP ' "$LOG" || true)
grc=$(sed -n 's/^PDKV_GUEST_RC=\([0-9]*\).*/\1/p' "$LOG" | tail -n 1)
if [ -z "$grc" ]; then
	[ "$qrc" = 124 ] && why="timed out after ${TIMEOUT}s" || why="qemu exited with $qrc"
	echo "FAIL rdma-runner: the guest never reported a status ($why)"
	failed=$((failed + 1))
elif grep -q '^PDKV_GUEST_SETUP' "$LOG"; then
	echo "FAIL rdma-runner: $(sed -n 's/^PDKV_GUEST_SETUP //p' "$LOG" | head -n 1)"
	failed=$((failed + 1))
else
	# a command that failed without a FAIL line of its own crashed
	while read -r _ n r _; do
		[ "$r" = 0 ] && continue
		if ! awk -v n="$n" '/^PDKV_GUEST_CMD /{c = ($2 == n ":")} c && /^FAIL /{f = 1} END {exit !f}' "$LOG"; then
			echo "FAIL rdma-runner: command $n exited with status $r without a FAIL line"
			failed=$((failed + 1))
		fi
	done < <(grep '^PDKV_GUEST_CMD_RC ' "$LOG")
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
