#!/bin/busybox sh
# Stage 1 of the hardware-KVM lane's L1 (tests/hwkvm/run.sh builds it into
# L1's initramfs as /init): load the modules this initramfs carries, mount
# the host's / (9p, read-only) under an overlay whose writes land on the
# scratch disk, and hand over to stage 2, tests/hwkvm/inside.sh of the
# checkout, in that overlay.  The job (kbox_* variables: the checkout, the
# build folder, the suites) is in job.env at the top of the scratch disk.
/bin/busybox mkdir -p /sbin /usr/bin /usr/sbin
/bin/busybox --install -s
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev

die() {
	echo "hwkvm-stage1: $*"
	dmesg | tail -8; cut -d" " -f1 /proc/modules | tr "\n" " "; echo; for d in /sys/bus/pci/devices/*; do echo "$d $(cat $d/vendor) $(cat $d/device)"; done; ls /sys/bus/virtio/devices
	echo "hwkvm-result: 0 1"
	echo b > /proc/sysrq-trigger
	sleep 10
}

while read -r m; do
	args=
	# TCG's EPYC lacks nrip-save and vGIF; kvm_amd must not count on them.
	[ "$m" = kvm-amd ] || [ "$m" = kvm_amd ] && args="nrips=0 vgif=0"
	# shellcheck disable=SC2086
	insmod "/lib/modules/$m.ko" $args || die "insmod $m failed"
done < /lib/modules/order

i=0
while [ ! -b /dev/vda ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
[ -b /dev/vda ] || die "no scratch disk (/dev/vda)"
mkdir -p /mnt/lower /mnt/scratch
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=262144 hostroot /mnt/lower ||
	die "cannot mount the host's tree (9p)"
mount -t ext4 /dev/vda /mnt/scratch || die "cannot mount the scratch disk"
[ -f /mnt/scratch/job.env ] || die "no job.env on the scratch disk"
set -a
. /mnt/scratch/job.env
set +a
mkdir -p /mnt/scratch/upper /mnt/scratch/work
mount -t overlay -o lowerdir=/mnt/lower,upperdir=/mnt/scratch/upper,workdir=/mnt/scratch/work overlay /new ||
	die "cannot mount the overlay"
stage2="$kbox_top/tests/hwkvm/inside.sh"
[ -f "/new$stage2" ] || die "$stage2 is not in the shared tree"
umount /proc /sys 2>/dev/null
mount --move /dev /new/dev
exec switch_root /new /bin/sh "$stage2"
