#!/bin/sh
# /dev/fuse harness tests: kbox's FUSE server mounted on a temporary
# mountpoint, with the host kernel as the guest.  Real programs (git, tar,
# make, python3, sqlite3) work on the mount, then escape attempts must fail
# and leave the host untouched.
#
#   tests/fuse/run.sh [BUILD_DIR]      (needs root and /dev/fuse)
#
# KBOX_FUSE_BIG_MB sets the size of the sequential file (default 1024 MiB
# when the disk has 4 GiB free, else 64).  The whole run takes about 30 s
# with 1 GiB on a 2-core host.  It ends with at least 40 escape cases and a
# snapshot comparison of everything outside the served directories.
#
# Prints one "ok N - ..." / "not ok N - ..." line per check, then a
# summary; exits non-zero if any check failed.  Every command is bounded by
# timeout(1), the whole run by the harness's own timeout.
set -u
BUILD=${1:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
TOP=$(cd "$HERE/../.." && pwd)
BIN=$BUILD/fuse/kbox-fuse-mount
case $BIN in /*) ;; *) BIN=$TOP/$BIN ;; esac

if [ "$(id -u)" != 0 ]; then echo "skip: tests/fuse/run.sh needs root (mount)"; exit 0; fi
if [ ! -c /dev/fuse ]; then echo "skip: no /dev/fuse"; exit 0; fi
if [ ! -x "$BIN" ]; then
	echo "# $BIN missing; building it with cc"
	mkdir -p "$(dirname "$BIN")"
	(cd "$TOP" && cc -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Wshadow \
		-Wno-unused-parameter -Wvla -I. -O2 -g -pthread -o "$BIN" \
		tests/fuse/kbox-fuse-mount.c devices/fuse_server.c \
		devices/fs_passthrough*.c devices/fs_hidden.c devices/idmap.c lib/grow.c) || exit 1
fi

T=$(mktemp -d /tmp/kbox-fuse.XXXXXX)
# The source sits two levels deeper than the mountpoint's parent, so that a
# relative symlink that a host-side follower would resolve from the source
# (../secret) names a different place when the "guest" resolves it.
SRC=$T/host/src
MNT=$T/guest/mnt
RO_SRC=$T/host/rosrc
RO=$T/guest/ro
mkdir -p "$SRC" "$MNT" "$RO_SRC" "$RO"
PIDS=""

cleanup() {
	for m in $(awk -v t="$T/" 'index($2, t) == 1 { print $2 }' /proc/self/mounts); do
		umount -l "$m" 2>/dev/null
	done
	for p in $PIDS; do kill "$p" 2>/dev/null; done
	rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mount_kbox() { # mount_kbox SRC MNT [options]
	s=$1; m=$2; shift 2
	timeout 900 "$BIN" "$@" "$s" "$m" 2>>"$T/harness.log" &
	LAST_PID=$!
	PIDS="$PIDS $!"
	i=0
	while ! mountpoint -q "$m"; do
		i=$((i + 1))
		if [ $i -gt 50 ]; then echo "Bail out! mount of $m failed"; cat "$T/harness.log"; exit 1; fi
		sleep 0.1
	done
}

# ESCAPES counts the checks of the escape part (from the first escape check
# on, the read-only mount included): the issue asks for at least 40.
N=0; PASS=0; FAIL=0; ESCAPES=0; IN_ESCAPES=0
ok() { N=$((N + 1)); PASS=$((PASS + 1)); ESCAPES=$((ESCAPES + IN_ESCAPES)); echo "ok $N - $1"; }
notok() { N=$((N + 1)); FAIL=$((FAIL + 1)); ESCAPES=$((ESCAPES + IN_ESCAPES)); echo "not ok $N - $1"; }
# check DESC CMD...: CMD must succeed.
check() {
	d=$1; shift
	if timeout "${CHECK_TIMEOUT:-120}" "$@" >"$T/out" 2>&1; then ok "$d"; else notok "$d"; sed 's/^/#   /' "$T/out" | head -20; fi
}
# refuse DESC ERRTEXT CMD...: CMD must fail and say ERRTEXT.
refuse() {
	d=$1; e=$2; shift 2
	if timeout 60 "$@" >"$T/out" 2>&1; then
		notok "$d (succeeded)"
	elif grep -qi "$e" "$T/out"; then
		ok "$d"
	else
		notok "$d (wrong error)"; sed 's/^/#   /' "$T/out" | head -5
	fi
}

# --- host fixtures ---------------------------------------------------------
echo "outside secret" >"$T/host/secret"
# The canary: escapes below aim at it by several routes; its bytes, mode,
# owner, times and link count must not change (snapshot compared at the end).
echo "canary" >"$T/host/canary"
echo "API_KEY=do-not-leak" >"$SRC/.env"
echo "x" >"$SRC/.env.local"
echo "x" >"$SRC/secrets.env"
echo "x" >"$SRC/kbox.yaml"
mkdir -p "$SRC/sub"
echo "x" >"$SRC/sub/.env"
echo "visible" >"$SRC/readme.txt"
# Case variants and editor/backup copies of the protected names, a path
# pattern's target (-A config/secret.json below), and a file the host
# renames to a hidden name while the guest holds it.
for f in .ENV .Env.Local SECRETS.env .env~ '#secrets.env#' .secrets.env.swp \
	secrets.env.bak .env.save .#kbox.yaml kbox.yaml.orig 'secrets.env.' 'key.pem '; do
	echo "API_KEY=do-not-leak" >"$SRC/$f"
done
mkdir -p "$SRC/config"
echo "path-secret" >"$SRC/config/secret.json"
echo "visible" >"$SRC/config/other.json"
echo "later hidden" >"$SRC/later"
ln -s ../secret "$SRC/escape-link"
ln -s "$T/host" "$SRC/escape-dir"
echo "ro data" >"$RO_SRC/data.txt"
mkdir "$RO_SRC/dir"

mount_kbox "$SRC" "$MNT" -A config/secret.json -A '*.pem'
SRV_PID=$LAST_PID
mount_kbox "$RO_SRC" "$RO" -r
echo "# mounted $SRC at $MNT and $RO_SRC read-only at $RO"

# --- real programs ---------------------------------------------------------
check "git init/add/commit/status/log" sh -c "
	cd '$MNT' && mkdir repo && cd repo && git init -q &&
	git config user.email t@example.invalid && git config user.name t &&
	for i in 1 2 3 4 5; do echo line \$i >f\$i.txt; done &&
	git add . && git commit -qm one && echo more >>f1.txt &&
	git commit -qam two && test -z \"\$(git status --porcelain)\" &&
	test \$(git log --oneline | wc -l) = 2 && git fsck --no-progress >/dev/null"

mkdir -p "$T/tree"
cp -a /usr/include/linux "$T/tree/" 2>/dev/null
dd if=/dev/urandom of="$T/tree/big.bin" bs=1M count=8 status=none
check "tar create outside, extract on the mount, identical" sh -c "
	tar -C '$T/tree' -cf '$T/in.tar' . && mkdir '$MNT/x' &&
	tar -C '$MNT/x' -xf '$T/in.tar' && diff -r '$T/tree' '$MNT/x'"
check "tar create on the mount, extract outside, identical" sh -c "
	tar -C '$MNT/x' -cf '$MNT/out.tar' . && mkdir '$T/back' &&
	tar -C '$T/back' -xf '$MNT/out.tar' && diff -r '$T/tree' '$T/back'"
check "cp -a and rm -rf of a tree" sh -c "
	cp -a '$MNT/x' '$MNT/y' && diff -r '$MNT/x' '$MNT/y' &&
	rm -rf '$MNT/y' && test ! -e '$SRC/y'"

mkdir "$MNT/proj"
cat >"$MNT/proj/hello.c" <<'EOF'
#include <stdio.h>
int main(void) { puts("hello from fuse"); return 0; }
EOF
printf 'hello: hello.c\n\tcc -o hello hello.c\n' >"$MNT/proj/Makefile"
check "make builds and runs a C program" sh -c "
	cd '$MNT/proj' && make -s && ./hello | grep -q 'hello from fuse' &&
	make | grep -q 'up to date'"

cat >"$T/ops.py" <<'EOF'
import fcntl, mmap, os, sys
d = sys.argv[1]
os.chdir(d)
with open("a", "w") as f:
    f.write("abc" * 1000)
assert open("a").read() == "abc" * 1000
os.rename("a", "b")
with open("c", "w") as f:
    f.write("c")
os.replace("c", "b")                   # rename over an existing file
assert open("b").read() == "c"
os.link("b", "hard")
assert os.stat("b").st_nlink == 2 and os.stat("hard").st_ino == os.stat("b").st_ino
os.symlink("b", "sym")
assert os.readlink("sym") == "b" and open("sym").read() == "c"
with open("sparse", "wb") as f:
    f.truncate(1 << 30)
    f.seek(512 << 20); f.write(b"x")
st = os.stat("sparse")
assert st.st_size == 1 << 30 and st.st_blocks * 512 < (1 << 20)
fd = os.open("sparse", os.O_RDONLY)
assert os.lseek(fd, 0, os.SEEK_DATA) >= (511 << 20)
os.close(fd)
with open("m", "wb") as f:
    f.write(b"\0" * 8192)
with open("m", "r+b") as f:
    mm = mmap.mmap(f.fileno(), 8192)
    mm[100:105] = b"mmap!"; mm.flush(); mm.close()
assert open("m", "rb").read()[100:105] == b"mmap!"
with open("lk", "w") as f:
    fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    fcntl.lockf(f, fcntl.LOCK_UN)
os.setxattr("b", "user.kbox", b"v")
assert os.getxattr("b", "user.kbox") == b"v" and "user.kbox" in os.listxattr("b")
os.truncate("b", 0)
assert os.path.getsize("b") == 0
os.utime("b", (1000000000, 1000000000))
assert os.stat("b").st_mtime == 1000000000
os.makedirs("p/q/r"); os.removedirs("p/q/r")
assert sorted(os.listdir(".")) == ["b", "hard", "lk", "m", "sparse", "sym"]
EOF
mkdir "$MNT/py"
check "python3 file ops (rename-over, links, sparse, mmap, locks, xattrs)" python3 "$T/ops.py" "$MNT/py"
check "python3 -m compileall" sh -c "
	mkdir '$MNT/pkg' && echo 'X = 1' >'$MNT/pkg/m.py' &&
	python3 -m compileall -q '$MNT/pkg' && ls '$MNT/pkg/__pycache__' | grep -q '^m\\.'"
if command -v sqlite3 >/dev/null; then
	check "sqlite3 with locking" sh -c "
		cd '$MNT' && sqlite3 t.db 'create table t(x); insert into t values(1),(2);' &&
		sqlite3 t.db 'begin exclusive; insert into t values(3); commit;' &&
		test \$(sqlite3 t.db 'select count(*) from t') = 3"
else
	echo "# skip sqlite3: not installed"
fi
# The "guest" applies its umask; the server's own (022, from this shell)
# must not mask the mode a second time.
check "umask 0: mkdir 0777 is 0777 on the host" sh -c "
	umask 0 && mkdir '$MNT/um777' && test \"\$(stat -c %a '$SRC/um777')\" = 777"
check "umask 0: open(O_CREAT, 0620) is 0620, 04777 is 0777 (setuid stripped)" python3 -c "
import os; os.umask(0)
os.close(os.open('$MNT/um620', os.O_CREAT | os.O_WRONLY, 0o620))
os.close(os.open('$MNT/um4777', os.O_CREAT | os.O_WRONLY, 0o4777))
os.mkfifo('$MNT/umfifo', 0o666)
for n, m in (('um620', 0o620), ('um4777', 0o777), ('umfifo', 0o666)):
    got = os.stat('$SRC/' + n).st_mode & 0o7777
    assert got == m, (n, oct(got))"
check "umask 027 is applied once: touch gives 0640, mkdir 0750" sh -c "
	umask 027 && touch '$MNT/um027' && mkdir '$MNT/um027d' &&
	test \"\$(stat -c %a '$SRC/um027') \$(stat -c %a '$SRC/um027d')\" = '640 750'"
# FIFOs and Unix sockets work in a read-write mount: the kernel serves them
# itself, the host gets a plain FIFO or socket name.
check "mkfifo in the mount: a writer and a reader meet through it" sh -c "
	mkfifo '$MNT/fifo' && test -p '$SRC/fifo' &&
	{ echo through >'$MNT/fifo' & } && test \"\$(timeout 10 cat '$MNT/fifo')\" = through"
check "a Unix socket bound in the mount serves a client through it" python3 -c "
import os, socket, stat
s = socket.socket(socket.AF_UNIX); s.bind('$MNT/sock'); s.listen(1)
c = socket.socket(socket.AF_UNIX); c.settimeout(10); c.connect('$MNT/sock')
a, _ = s.accept(); a.sendall(b'hello'); assert c.recv(5) == b'hello'
assert stat.S_ISSOCK(os.lstat('$SRC/sock').st_mode)
os.unlink('$MNT/sock'); assert not os.path.exists('$SRC/sock')"
rm -f "$SRC/fifo"

# --- parallel programs ------------------------------------------------------
# The server answers with several threads (kbox-fuse-mount -t, default 4,
# at most one per CPU):
# programs running at once on one mount, in one directory, must each see a
# consistent filesystem.  Each background job's status is checked.
cat >"$T/par.sh" <<'SHEOF'
# par.sh MODE MNT T
set -u
mode=$1; m=$2; t=$3
waitall() { rc=0; for p in $PIDS; do wait "$p" || rc=1; done; return $rc; }
PIDS=""
case $mode in
tar)
	for i in 1 2 3 4; do
		(mkdir "$m/par$i" && tar -C "$m/par$i" -xf "$t/in.tar") & PIDS="$PIDS $!"
	done
	waitall || exit 1
	for i in 1 2 3 4; do diff -r "$t/tree" "$m/par$i" || exit 1; done ;;
mixed)
	(cd "$t/tree" && find . -type f -exec sha256sum {} + | sort) >"$t/sums.host"
	(cd "$m/repo" && for i in 1 2 3; do git status --porcelain; done >"$t/par.git") & PIDS="$PIDS $!"
	(cd "$m/par1" && find . -type f -exec sha256sum {} + | sort >"$t/sums.a") & PIDS="$PIDS $!"
	(cd "$m/par2" && find . -type f -exec sha256sum {} + | sort >"$t/sums.b") & PIDS="$PIDS $!"
	ls -lR "$m/par3" >/dev/null & PIDS="$PIDS $!"
	waitall || exit 1
	cmp "$t/sums.host" "$t/sums.a" && cmp "$t/sums.host" "$t/sums.b" && test ! -s "$t/par.git" ;;
churn)
	mkdir "$m/churn" || exit 1
	for w in a b c d; do python3 "$t/churn.py" "$m/churn" "$w" & PIDS="$PIDS $!"; done
	waitall || exit 1
	test "$(ls "$m/churn" | wc -l)" = 300 || exit 1
	! ls "$m/churn" | grep -q tmp || exit 1
	test "$(cat "$m/churn/c-149")" = "$(printf 'c%.0s' $(seq 150))" ;;
esac
SHEOF
cat >"$T/churn.py" <<'PYEOF'
import os, sys
d, me = sys.argv[1], sys.argv[2]
for i in range(150):
    a = os.path.join(d, "%s-%d.tmp" % (me, i))
    with open(a, "w") as f:
        f.write(me * (i + 1))
    b = os.path.join(d, "%s-%d" % (me, i))
    os.rename(a, b)
    assert open(b).read() == me * (i + 1)
    if i % 2 == 0:
        os.unlink(b)
PYEOF
check "parallel: 4 tar extracts at once, each identical" sh "$T/par.sh" tar "$MNT" "$T"
check "parallel: git status, find + sha256sum and ls -lR at once agree with the host" \
	sh "$T/par.sh" mixed "$MNT" "$T"
check "parallel: 4 writers create, rename and unlink in one directory" \
	sh "$T/par.sh" churn "$MNT" "$T"
rm -rf "$MNT/par1" "$MNT/par2" "$MNT/par3" "$MNT/par4" "$MNT/churn"

# The big file: 1 GiB unless KBOX_FUSE_BIG_MB says otherwise or the disk
# lacks room for the blob, its copy and a margin.  It is read back through a
# second, fresh mount of the same source, so that the bytes come through the
# server and not from the first mount's page cache.
AVAIL_MB=$(df -Pm "$T" | awk 'NR == 2 { print $4 }')
if [ -n "${KBOX_FUSE_BIG_MB:-}" ]; then
	BIG_MB=$KBOX_FUSE_BIG_MB
elif [ "${AVAIL_MB:-0}" -gt 4096 ]; then
	BIG_MB=1024
else
	BIG_MB=64
	echo "# only ${AVAIL_MB:-?} MiB free under $T: the big file is 64 MiB"
fi
dd if=/dev/urandom of="$T/blob" bs=1M count="$BIG_MB" status=none
SUM=$(sha256sum <"$T/blob")
t0=$(date +%s%N)
CHECK_TIMEOUT=300 check "sequential write of $BIG_MB MiB onto the mount" \
	dd if="$T/blob" of="$MNT/blob" bs=1M conv=fsync status=none
t1=$(date +%s%N)
FRESH=$T/guest/fresh
mkdir -p "$FRESH"
mount_kbox "$SRC" "$FRESH"
CHECK_TIMEOUT=300 check "sequential read back of $BIG_MB MiB through a fresh mount, same sha256" \
	sh -c "test \"\$(dd if='$FRESH/blob' bs=1M status=none | sha256sum)\" = '$SUM'"
t2=$(date +%s%N)
umount "$FRESH"
check "the $BIG_MB MiB landed on the host intact" sh -c "test \"\$(sha256sum <'$SRC/blob')\" = '$SUM'"
echo "# $BIG_MB MiB: write $(( (t1 - t0) / 1000000 )) ms, read+sha256 $(( (t2 - t1) / 1000000 )) ms"
rm -f "$T/blob" "$MNT/blob"
check "a file written on the mount appears on the host" sh -c "
	echo from-guest >'$MNT/note' && grep -q from-guest '$SRC/note'"
# Directories are listed without OPENDIR, so the kernel may cache a
# listing (docs/virtio-fs.md): what the host adds or removes must still
# show once the attribute timeout (1 s here) has passed.
check "files the host adds and removes show in the mount's listing" sh -c "
	mkdir '$SRC/hostside' && touch '$SRC/hostside/one' &&
	ls '$MNT/hostside' | grep -qx one &&
	touch '$SRC/hostside/two' && rm '$SRC/hostside/one' && sleep 1.2 &&
	test \"\$(ls '$MNT/hostside' | tr '\\n' ' ')\" = 'two '"

# --- a tight fd cap --------------------------------------------------------
# With room for 32 fds the server keeps closing inode fds and reopening them
# by name: real programs must not notice, and the fds must stay under the
# cap (plus the server's own: stdio, /dev/fuse and up to three clones, one
# per extra thread, /proc/self/fd, the root).
CAP_SRC=$T/capsrc
CAP=$T/guest/cap
mkdir -p "$CAP_SRC" "$CAP"
mount_kbox "$CAP_SRC" "$CAP" -m 32
CAP_PID=$LAST_PID
check "fd cap 32: tar extract of /usr/include/linux, identical" sh -c "
	tar -C /usr/include -cf - linux | tar -C '$CAP' -xf - && diff -r /usr/include/linux '$CAP/linux'"
check "fd cap 32: git init/add/commit/status/fsck" sh -c "
	cd '$CAP/linux' && git init -q && git add -A &&
	git -c user.name=t -c user.email=t@example.invalid commit -qm t &&
	test -z \"\$(git status --porcelain)\" && git fsck 2>/dev/null"
check "fd cap 32: cp -a, rename, hard link, rm -rf" sh -c "
	cd '$CAP' && cp -a linux copy && diff -r linux copy && mv copy moved &&
	ln moved/fs.h hard && rm moved/fs.h && cmp hard /usr/include/linux/fs.h &&
	rm -rf moved hard && test ! -e moved"
check "fd cap 32: a file unlinked while open still answers fstat" python3 -c "
import os
f = open('$CAP/gone', 'w'); f.write('x' * 10); f.flush(); os.unlink('$CAP/gone')
st = os.fstat(f.fileno()); assert st.st_nlink == 0 and st.st_size == 10, st"
check "fd cap 32: the server held at most 32 fds for the guest" sh -c "
	test \$(ls /proc/$CAP_PID/fd | wc -l) -le \$((32 + 9))"
umount "$CAP"
rm -rf "$CAP_SRC"

# --- the server as an ordinary user ------------------------------------------
# kbox run by a user serves that user's folder as that user, with the user
# as guest root (docs/virtio-fs.md, "Ownership").  An unprivileged FUSE
# mount needs fusermount, which this host lacks: the harness mounts as root
# and its server then drops to uid/gid 1002 with no other group (-U), the
# ids of the test user kuser.  This shell stays root: it is guest root.
OWN_SRC=$T/own/src
OWN=$T/guest/own
OWN_ID=1002
mkdir -p "$OWN_SRC" "$OWN"
chmod 711 "$T" "$T/own"
echo mine >"$OWN_SRC/mine"; echo root >"$OWN_SRC/roots"; echo other >"$OWN_SRC/others"
chown -R $OWN_ID:$OWN_ID "$OWN_SRC"; chown 0:0 "$OWN_SRC/roots"; chown 4242:4242 "$OWN_SRC/others"
mount_kbox "$OWN_SRC" "$OWN" -U $OWN_ID:$OWN_ID
OWN_PID=$LAST_PID
# (LAST_PID is timeout(1)'s; the server is its child.)
check "as a user: the server runs as uid $OWN_ID" sh -c "
	test \"\$(awk '/^Uid:/ { print \$3 }' /proc/\$(pgrep -P $OWN_PID)/status)\" = $OWN_ID"
check "as a user: ls -ln shows the user's files as root's, host root's as 65534" sh -c "
	test \"\$(ls -ln '$OWN' | awk 'NR > 1 { print \$9 \"=\" \$3 \":\" \$4 }' | tr '\n' ' ')\" = \
		'mine=0:0 others=4242:4242 roots=65534:65534 ' &&
	test \"\$(stat -c %u:%g '$OWN')\" = 0:0"
check "as a user: what guest root makes is the user's on the host, root's in the mount" sh -c "
	echo x >'$OWN/new' && mkdir '$OWN/newd' &&
	test \"\$(stat -c %u:%g '$OWN_SRC/new' '$OWN_SRC/newd' | tr '\n' ' ')\" = '$OWN_ID:$OWN_ID $OWN_ID:$OWN_ID ' &&
	test \"\$(stat -c %u:%g '$OWN/new')\" = 0:0"
refuse "as a user: chown to another user is refused" "not permitted" chown 4242 "$OWN/new"
refuse "as a user: chown to the user's own host number is refused" "not permitted" chown $OWN_ID "$OWN/new"
refuse "as a user: chown of another user's file is refused" "not permitted" chown 0 "$OWN/others"
check "as a user: a refused chown changed nothing" sh -c "
	test \"\$(stat -c %u:%g:%a '$OWN_SRC/new' '$OWN_SRC/others' | tr '\n' ' ')\" = '$OWN_ID:$OWN_ID:644 4242:4242:644 '"
check "as a user: chown root:root and chmod work" sh -c "
	chown 0:0 '$OWN/new' && chmod 600 '$OWN/new' && test \"\$(stat -c %a '$OWN_SRC/new')\" = 600"
refuse "as a user: host root's file stays host root's" "Permission denied" sh -c "echo x >>'$OWN/roots'"
# git >= 2.35 refuses a repository its user does not own: the user's folder
# must be guest root's for an agent to use git in it.
check "as a user: git init, add, commit, branch, status in the mount" sh -c "
	cd '$OWN' && env -u SUDO_UID git init -q && git add mine new &&
	git -c user.name=t -c user.email=t@example.invalid commit -qm one &&
	git branch side && test -z \"\$(git status --porcelain --untracked-files=no)\""
check "as a user: the host sees the repository as the user's, and its commit" sh -c "
	test -z \"\$(find '$OWN_SRC/.git' ! -uid $OWN_ID)\" &&
	test \"\$(HOME='$T/own' setpriv --reuid=$OWN_ID --regid=$OWN_ID --clear-groups \
		git -C '$OWN_SRC' log --format=%s)\" = one"
umount "$OWN"
chmod 700 "$T"
rm -rf "$T/own"

# --- escapes ---------------------------------------------------------------
# Everything outside the two sources, and the host's "/", as they are before
# the escapes.
snapshot() {
	(cd "$T/host" && find . -path ./src -prune -o -path ./rosrc -prune -o \
		-printf '%p %y %m %n %s %U:%G %T@ %C@\n' | sort &&
		sha256sum secret canary && stat -c '%n %U:%G %a %Y %Z' /)
}
snapshot >"$T/before"
IN_ESCAPES=1
refuse "relative symlink is resolved by the guest, not the host" "No such file" cat "$MNT/escape-link"
check "readlink returns the target verbatim" sh -c "test \"\$(readlink '$MNT/escape-link')\" = ../secret"
refuse "hidden .env: cat gives ENOENT" "No such file" cat "$MNT/.env"
refuse "hidden .env.local: stat gives ENOENT" "No such file" stat "$MNT/.env.local"
refuse "hidden secrets.env: ENOENT" "No such file" cat "$MNT/secrets.env"
refuse "hidden kbox.yaml: ENOENT" "No such file" cat "$MNT/kbox.yaml"
refuse "hidden sub/.env: ENOENT" "No such file" cat "$MNT/sub/.env"
check "hidden names absent from readdir" sh -c "
	! ls -a '$MNT' '$MNT/sub' | grep -E '^(\\.env.*|secrets\\.env|kbox\\.yaml)\$'"
refuse "hidden .env cannot be created" "Permission denied" sh -c "echo pwned >'$MNT/.env'"
refuse "hidden .env.prod cannot be created" "Permission denied" touch "$MNT/.env.prod"
refuse "rename onto hidden .env refused" "Permission denied" mv "$MNT/readme.txt" "$MNT/.env"
refuse "hard link onto hidden name refused" "Permission denied" ln "$MNT/readme.txt" "$MNT/kbox.yaml"
refuse "symlink named .env refused" "Permission denied" ln -s readme.txt "$MNT/.env"
refuse "mkdir of a hidden name refused" "Permission denied" mkdir "$MNT/sub/.env.d"
refuse "rename from a hidden name: ENOENT" "No such file" mv "$MNT/.env" "$MNT/leak"
refuse "unlink of a hidden name: ENOENT" "No such file" rm "$MNT/.env"
check "host .env untouched" sh -c "grep -qx API_KEY=do-not-leak '$SRC/.env' && test ! -e '$SRC/.env.prod' && test ! -e '$SRC/leak'"
refuse "character device cannot be made" "not permitted" mknod "$MNT/null" c 1 3
refuse "block device cannot be made" "not permitted" mknod "$MNT/sda" b 8 0
# A FIFO with no writer blocks its reader in the kernel, never a server
# thread: the server never opens one (one thread here, so a blocked one
# would stop the mount).
ONE=$T/guest/one
mkdir -p "$ONE"
mount_kbox "$SRC" "$ONE" -t 1
mkfifo "$MNT/stuck"
timeout 30 cat "$ONE/stuck" >/dev/null 2>&1 &
READER=$!
sleep 0.5
check "a FIFO with no writer blocks only its reader, not the server" sh -c "
	kill -0 $READER && timeout 5 cat '$ONE/readme.txt' >/dev/null && timeout 5 ls '$ONE' >/dev/null"
kill $READER 2>/dev/null; wait $READER 2>/dev/null
umount "$ONE"
rm -f "$SRC/stuck"
check "setuid/setgid stripped on chmod" sh -c "
	echo x >'$MNT/suid' && chmod 6755 '$MNT/suid' &&
	test \"\$(stat -c %a '$SRC/suid')\" = 755"
check "setuid/setgid stripped on create" python3 -c "
import os; os.umask(0); os.close(os.open('$MNT/suid2', os.O_CREAT | os.O_WRONLY, 0o6755))
assert os.stat('$SRC/suid2').st_mode & 0o7777 == 0o755"
check "absolute symlink to a host dir is not followed by the server" sh -c "
	test \"\$(readlink '$MNT/escape-dir')\" = '$T/host' && test -L '$MNT/escape-dir'"
# ".." at the root of the mount is the guest's parent, never the source's.
check "ls .. at the root shows the guest's side, not the host's" sh -c "
	ls -a '$MNT/..' | grep -qx mnt && ! ls -a '$MNT/..' | grep -qx secret"
refuse ".. at the root: ../secret does not exist" "No such file" stat "$MNT/../secret"
refuse "sub/../../secret does not exist" "No such file" cat "$MNT/sub/../../secret"
refuse "openat(root fd, \"../secret\")" "No such file" python3 -c "
import os; d = os.open('$MNT', os.O_PATH | os.O_DIRECTORY); os.open('../secret', os.O_RDONLY, dir_fd=d)"

# /proc/self/fd and /proc/self/cwd name the guest's own open files; walking
# ".." from them stays in the guest's tree.
refuse "/proc/self/fd/N of a dir fd on the mount, then ../../secret" "No such file" \
	sh -c "exec 3<'$MNT/sub' && cat /proc/self/fd/3/../../secret"
refuse "/proc/self/fd/N of a dir fd, then ../.env (hidden)" "No such file" \
	sh -c "exec 3<'$MNT/sub' && cat /proc/self/fd/3/../.env"
refuse "/proc/self/fd/N of an O_PATH fd, then ../../secret" "No such file" python3 -c "
import os; d = os.open('$MNT/sub', os.O_PATH | os.O_DIRECTORY); open('/proc/self/fd/%d/../../secret' % d)"
refuse "/proc/self/cwd inside the mount, then ../../secret" "No such file" \
	sh -c "cd '$MNT/sub' && cat /proc/self/cwd/../../secret"
check "/proc/self/fd/N/.. lists the mount root without hidden names" sh -c "
	exec 3<'$MNT/sub' && ls -a /proc/self/fd/3/.. | grep -qx readme.txt &&
	! ls -a /proc/self/fd/3/.. | grep -qx .env"
# A host-made link through the server's own fd of the source: were the server
# to follow it, it would reach the outside secret; the guest resolves it in
# its own process, where that fd is not the source.
SRV_FD=3
for f in /proc/"$SRV_PID"/fd/*; do
	[ "$(readlink "$f" 2>/dev/null)" = "$SRC" ] && SRV_FD=${f##*/}
done
ln -s "/proc/self/fd/$SRV_FD/../secret" "$SRC/fdlink"
refuse "host link to the server's /proc/self/fd/$SRV_FD/../secret" "No such file\\|Not a directory" \
	cat "$MNT/fdlink"

# Symlinks pointing at /proc/self/root: kept verbatim, never followed by the
# server (metadata ops on the link touch the link, not "/").
check "symlink to /proc/self/root is stored verbatim" sh -c "
	ln -s /proc/self/root '$MNT/pr' && test \"\$(readlink '$MNT/pr')\" = /proc/self/root &&
	test -L '$SRC/pr' && test \"\$(readlink '$SRC/pr')\" = /proc/self/root"
check "touch -h on a /proc/self/root link changes the link, not /" sh -c "
	touch -h -d 2001-02-03 '$MNT/pr' && test \"\$(stat -c %y '$SRC/pr' | cut -c1-10)\" = 2001-02-03"
check "chown -h on a /proc/self/root link changes the link, not /" sh -c "
	chown -h 4242:4242 '$MNT/pr' && test \"\$(stat -c %u:%g '$SRC/pr')\" = 4242:4242 &&
	test \"\$(stat -c %u:%g /)\" = 0:0"
# In a jail (private mount namespace, chroot with a static busybox), the link
# leads to the jail's root: the guest's world, where the host is absent.
if command -v busybox >/dev/null && file -L "$(command -v busybox)" | grep -q static; then
	J=$T/guest/jail
	mkdir -p "$J/bin" "$J/proc" "$J/mnt"
	cp "$(command -v busybox)" "$J/bin/busybox"
	check "in a jail, /proc/self/root in the mount is the jail's root" unshare -m --propagation private sh -c "
		mount -t proc proc '$J/proc' && mount --bind '$MNT' '$J/mnt' &&
		chroot '$J' /bin/busybox sh -c 'cat /mnt/pr/mnt/readme.txt && ! cat /mnt/pr$T/host/secret'"
else
	echo "# skip the jail case: no static busybox"
fi
# A host-made absolute link to the canary: only no-follow operations, which
# must act on the link.
ln -s "$T/host/canary" "$SRC/canary-link"
check "touch -h on a link to the canary" touch -h -d 2001-02-03 "$MNT/canary-link"
check "chown -h on a link to the canary" chown -h 4242:4242 "$MNT/canary-link"
check "hard link of a link to the canary links the link" sh -c "
	ln -P '$MNT/canary-link' '$MNT/canary-hard' && test -L '$SRC/canary-hard' &&
	test \$(stat -c %h '$T/host/canary') = 1"
check "rm of a link to the canary removes the link" sh -c "
	rm '$MNT/canary-link' '$MNT/canary-hard' && test -f '$T/host/canary'"
refuse "user xattr on a link to the canary" "not permitted" python3 -c "
import os; os.symlink('$T/host/canary', '$MNT/cl2')
os.setxattr('$MNT/cl2', 'user.x', b'1', follow_symlinks=False)"

# Renames and links out of the mount (or into it) cross filesystems.
refuse "rename out of the mount" "cross-device" python3 -c "
import os; os.rename('$MNT/readme.txt', '$T/host/moved')"
refuse "rename into the mount from outside" "cross-device" python3 -c "
import os; os.rename('$T/host/canary', '$MNT/canary')"
refuse "hard link out of the mount" "cross-device" python3 -c "
import os; os.link('$MNT/readme.txt', '$T/host/linked')"
refuse "hard link of an outside file into the mount" "cross-device" python3 -c "
import os; os.link('$T/host/canary', '$MNT/canary')"
refuse "rename from the rw mount into the ro mount" "cross-device" python3 -c "
import os; os.rename('$MNT/readme.txt', '$RO/moved')"
refuse "RENAME_EXCHANGE of a mount file with the canary" "cross-device" python3 -c "
import ctypes, os; libc = ctypes.CDLL(None, use_errno=True)
if libc.renameat2(-100, b'$MNT/readme.txt', -100, b'$T/host/canary', 2):
    e = ctypes.get_errno(); raise OSError(e, os.strerror(e))"

# Hidden files by other routes.
refuse "hard link to a hidden file" "No such file" ln "$MNT/.env" "$MNT/env-copy"
check "symlink to a hidden name may exist (a name, not the file)" ln -s .env "$MNT/envlink"
refuse "reading a hidden file through a symlink" "No such file" cat "$MNT/envlink"
refuse "hard link through a symlink to a hidden file (linkat FOLLOW)" "No such file" \
	ln -L "$MNT/envlink" "$MNT/env-copy"
refuse "cp onto a hidden name in a subdirectory" "Permission denied" cp "$MNT/readme.txt" "$MNT/sub/.env"
refuse "RENAME_EXCHANGE with a hidden file" "No such file" python3 -c "
import ctypes, os; libc = ctypes.CDLL(None, use_errno=True)
if libc.renameat2(-100, b'$MNT/readme.txt', -100, b'$MNT/.env', 2):
    e = ctypes.get_errno(); raise OSError(e, os.strerror(e))"
refuse "getxattr of a hidden file" "No such file" python3 -c "
import os; os.getxattr('$MNT/.env', 'user.x')"
refuse "a glob finds no hidden file" "No such file" sh -c "ls -d '$MNT'/.env* '$MNT'/secrets.*"

# Hidden patterns ignore case, trailing dots and spaces, and cover the
# copies editors and tools leave (issue 17).
for f in .ENV .Env.Local SECRETS.env .env~ '#secrets.env#' .secrets.env.swp \
	secrets.env.bak .env.save .#kbox.yaml kbox.yaml.orig 'secrets.env.' 'key.pem '; do
	refuse "hidden '$f'" "No such file" cat "$MNT/$f"
done
check "no case variant or copy in readdir" sh -c "
	! ls -a '$MNT' | grep -iE '^([.#]|\\.#)?(\\.env|secrets\\.env|kbox\\.yaml)|pem'"
refuse "hidden .ENV cannot be created" "Permission denied" sh -c "echo x >'$MNT/.ENV.prod'"
# A path pattern (-A config/secret.json) cannot be dodged by renaming an
# ancestor, nor by exchanging it.
refuse "path pattern: config/secret.json hidden" "No such file" cat "$MNT/config/secret.json"
check "path pattern: its siblings are not" grep -qx visible "$MNT/config/other.json"
refuse "path pattern: mv config cfg refused" "Permission denied" mv "$MNT/config" "$MNT/cfg"
refuse "path pattern: mv config sub/config refused" "Permission denied" mv "$MNT/config" "$MNT/sub/config"
refuse "path pattern: RENAME_EXCHANGE of config and sub refused" "Permission denied" python3 -c "
import ctypes, os; libc = ctypes.CDLL(None, use_errno=True)
if libc.renameat2(-100, b'$MNT/config', -100, b'$MNT/sub', 2):
    e = ctypes.get_errno(); raise OSError(e, os.strerror(e))"
check "path pattern: the host tree is unchanged" sh -c "
	test -f '$SRC/config/secret.json' && test ! -e '$SRC/cfg' && test ! -e '$SRC/sub/config'"
check "path pattern: a plain file still moves" sh -c "
	mv '$MNT/config/other.json' '$MNT/other.json' && mv '$MNT/other.json' '$MNT/config/other.json'"
# The host renames a file the guest has open to a hidden name: the next
# open, within the kernel's 1 s entry cache, checks the name it has now.
refuse "a file the host renamed to a hidden name is not opened again" "No such file" sh -c "
	cat '$MNT/later' >/dev/null && mv '$SRC/later' '$SRC/.env.later' && cat '$MNT/later'"

# Setuid/setgid bits brought in by ordinary tools are dropped on the host.
cp /bin/true "$T/suid-true" && chmod 6755 "$T/suid-true"
check "a setuid binary copied in with cp -p loses its bits" sh -c "
	cp -p '$T/suid-true' '$MNT/suid-true' && test \"\$(stat -c %a '$SRC/suid-true')\" = 755"
check "install -m 4755 loses the bit" sh -c "
	install -m 4755 /bin/true '$MNT/suid-inst' && test \"\$(stat -c %a '$SRC/suid-inst')\" = 755"
check "tar -xp of a setuid member loses the bits" sh -c "
	mkdir '$T/suidtar' && cp -p '$T/suid-true' '$T/suidtar/t' && tar -C '$T/suidtar' -cf '$T/suid.tar' t &&
	mkdir '$MNT/untar' && tar -C '$MNT/untar' -xpf '$T/suid.tar' &&
	test \"\$(stat -c %a '$SRC/untar/t')\" = 755"
check "chmod g+s on a directory is dropped" sh -c "
	mkdir '$MNT/sgid' && chmod 2775 '$MNT/sgid' && test \"\$(stat -c %a '$SRC/sgid')\" = 775"

# Special files that the host made in the source are never opened by the
# server: the guest kernel treats them as its own.
mkfifo "$SRC/hostfifo"
refuse "a host FIFO is not the guest's FIFO (no reader on the guest side)" "No such device" python3 -c "
import os; os.open('$MNT/hostfifo', os.O_WRONLY | os.O_NONBLOCK)"
check "chmod of a host-made FIFO works as on a file" sh -c "
	chmod 640 '$MNT/hostfifo' && test \"\$(stat -c %a '$SRC/hostfifo')\" = 640"
mknod "$SRC/hostnull" c 1 3
refuse "a host device node cannot be opened (nodev)" "Permission denied" sh -c "echo x >'$MNT/hostnull'"

# A host process swaps "race" between a directory holding secret=inside and
# a symlink to ".." (where, seen from the source, secret=outside lives) while
# the guest keeps looking it up with caching off: the guest may see "inside"
# or nothing, never the host's outside secret.
RACE=$T/guest/race
mkdir -p "$RACE"
mount_kbox "$SRC" "$RACE" -c 0
mkdir "$SRC/race"; echo inside >"$SRC/race/secret"; ln -s .. "$SRC/race.l"
cat >"$T/swap.py" <<'PYEOF'
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
os.chdir(sys.argv[1])
end = time.time() + 3
while time.time() < end:
    libc.renameat2(-100, b"race", -100, b"race.l", 2)  # RENAME_EXCHANGE
PYEOF
timeout 10 python3 "$T/swap.py" "$SRC" &
SWAPPER=$!
check "directory/symlink swap race never leaks the outside file" sh -c "
	end=\$((\$(date +%s) + 3)); n=0
	while [ \$(date +%s) -lt \$end ]; do
		v=\$(cat '$RACE/race/secret' 2>/dev/null); n=\$((n + 1))
		[ \"\$v\" = 'outside secret' ] && { echo leaked after \$n reads; exit 1; }
	done; echo \$n reads"
wait $SWAPPER
umount "$RACE"
rm -rf "$SRC/race" "$SRC/race.l"

check "nothing appeared outside the source" sh -c "
	test \"\$(ls -A '$T/host' | sort | tr '\n' ' ')\" = 'canary rosrc secret src ' &&
	grep -qx 'outside secret' '$T/host/secret' && grep -qx canary '$T/host/canary'"

# --- read-only mount ---------------------------------------------------------
refuse "ro: create refused" "Read-only" touch "$RO/new"
refuse "ro: write refused" "Read-only" sh -c "echo x >>'$RO/data.txt'"
refuse "ro: truncate refused" "Read-only" truncate -s 0 "$RO/data.txt"
refuse "ro: mkdir refused" "Read-only" mkdir "$RO/d2"
refuse "ro: rmdir refused" "Read-only" rmdir "$RO/dir"
refuse "ro: unlink refused" "Read-only" rm -f "$RO/data.txt"
refuse "ro: rename refused" "Read-only" mv "$RO/data.txt" "$RO/moved"
refuse "ro: link refused" "Read-only" ln "$RO/data.txt" "$RO/l"
refuse "ro: symlink refused" "Read-only" ln -s data.txt "$RO/s"
refuse "ro: chmod refused" "Read-only" chmod 777 "$RO/data.txt"
refuse "ro: chown refused" "Read-only" chown 1:1 "$RO/data.txt"
refuse "ro: utime refused" "Read-only" touch -d 2001-01-01 "$RO/data.txt"
refuse "ro: setxattr refused" "Read-only" python3 -c "import os; os.setxattr('$RO/data.txt', 'user.a', b'1')"
refuse "ro: open for write refused" "Read-only" python3 -c "open('$RO/data.txt', 'r+')"
refuse "ro: fallocate refused" "Read-only" fallocate -l 1M "$RO/data.txt"
check "ro: reads work" grep -qx "ro data" "$RO/data.txt"
check "ro: host unchanged" sh -c "
	test \"\$(cat '$RO_SRC/data.txt')\" = 'ro data' && test \"\$(ls '$RO_SRC' | tr '\n' ' ')\" = 'data.txt dir ' &&
	test \"\$(stat -c %a '$RO_SRC/data.txt')\" = 644"

# --- a case-insensitive host folder -------------------------------------------
# The served folder lies on a file system that takes one name for another:
# vfat on a loop device where the kernel has vfat, else ext4 with casefold,
# else tests/fuse/foldfs.py (FUSE: Unicode case folding, trailing dots and
# spaces dropped, vfat-like short aliases such as ENV~1).  Made and removed
# here, outside $T/host.  Each spelling the host folder itself resolves to
# a protected file must not reach it through kbox.
CI=$T/ci
CIM=$T/guest/ci
mkdir -p "$CI" "$CIM"
CI_KIND=""
if command -v mkfs.vfat >/dev/null && truncate -s 32M "$CI/vfat.img" &&
	mkfs.vfat -n KBOXCI "$CI/vfat.img" >/dev/null 2>&1 && mkdir -p "$CI/vfat" &&
	mount -o loop "$CI/vfat.img" "$CI/vfat" 2>/dev/null; then
	CI_KIND=vfat CI_HOST=$CI/vfat
elif [ -e /sys/fs/ext4/features/casefold ] && truncate -s 32M "$CI/ext4.img" &&
	mkfs.ext4 -q -F -O casefold "$CI/ext4.img" && mkdir -p "$CI/ext4" &&
	mount -o loop "$CI/ext4.img" "$CI/ext4" 2>/dev/null && mkdir "$CI/ext4/d" &&
	chattr +F "$CI/ext4/d"; then
	CI_KIND=ext4-casefold CI_HOST=$CI/ext4/d
elif /usr/bin/python3 -c 'import fusepy' 2>/dev/null || python3 -c 'import fuse' 2>/dev/null; then
	PY=/usr/bin/python3; $PY -c 'import fusepy' 2>/dev/null || PY=python3
	mkdir -p "$CI/back" "$CI/fold"
	timeout 900 $PY "$HERE/foldfs.py" "$CI/back" "$CI/fold" 2>>"$T/harness.log" &
	PIDS="$PIDS $!"
	i=0; while ! mountpoint -q "$CI/fold" && [ $i -lt 50 ]; do i=$((i + 1)); sleep 0.1; done
	mountpoint -q "$CI/fold" && CI_KIND=foldfs CI_HOST=$CI/fold
fi
if [ -n "$CI_KIND" ]; then
	echo "# case-insensitive folder: $CI_KIND"
	echo "API_KEY=ci-secret" >"$CI_HOST/.env"
	echo "x" >"$CI_HOST/secrets.env"
	echo "notes" >"$CI_HOST/notes.txt"
	mkdir "$CI_HOST/config" && echo "path-secret" >"$CI_HOST/config/secret.json"
	mount_kbox "$CI_HOST" "$CIM" -A config/secret.json
	for a in .ENV .Env '.env.' '.env ' ENV~1 SECRETS.ENV 'secrets.env.' \
		"$(printf '\305\277ecrets.env')" SECRET~1 CONFIG/secret.json config/SECRET.JSON; do
		if cat "$CI_HOST/$a" >/dev/null 2>&1; then
			refuse "$CI_KIND: '$a' does not reach the protected file" "No such file" cat "$CIM/$a"
		else
			echo "# $CI_KIND does not take '$a' for a protected name"
		fi
	done
	if [ -e "$CI_HOST/ENV~1" ]; then
		refuse "$CI_KIND: no write through a short alias" "No such file\|nonexistent\|Permission denied" \
			sh -c "echo pwned >'$CIM/ENV~1'"
		refuse "$CI_KIND: no rename onto a short alias" "No such file\|Permission denied" \
			mv "$CIM/notes.txt" "$CIM/ENV~1"
		refuse "$CI_KIND: no unlink through a short alias" "No such file" rm "$CIM/ENV~1"
	fi
	refuse "$CI_KIND: no write through a case variant" "Permission denied" \
		sh -c "echo pwned >'$CIM/.ENV'"
	refuse "$CI_KIND: mv config cfg refused (path pattern)" "Permission denied" \
		mv "$CIM/config" "$CIM/cfg"
	check "$CI_KIND: the protected files are unchanged" sh -c "
		grep -qx API_KEY=ci-secret '$CI_HOST/.env' && grep -qx path-secret '$CI_HOST/config/secret.json'"
	check "$CI_KIND: a name by its own spelling works" grep -qx notes "$CIM/notes.txt"
	if [ -e "$CI_HOST/NOTES.TXT" ]; then
		refuse "$CI_KIND: another spelling of a visible name does not exist" "No such file" \
			cat "$CIM/NOTES.TXT"
	fi
	check "$CI_KIND: the listing shows the stored names, nothing hidden" sh -c "
		test \"\$(ls -A '$CIM' | sort | tr '\n' ' ')\" = 'config notes.txt '"
	check "$CI_KIND: a new file lands as spelt" sh -c "
		echo hi >'$CIM/NewFile' && ls '$CI_HOST' | grep -qx NewFile && grep -qx hi '$CIM/NewFile'"
	umount "$CIM"
else
	echo "# skip the case-insensitive folder: no vfat, ext4 casefold or python3-fusepy"
fi

snapshot >"$T/after"
if diff "$T/before" "$T/after" >"$T/out"; then
	ok "nothing outside the sources changed (canary, secret, their dir, /)"
else
	notok "nothing outside the sources changed"; sed 's/^/#   /' "$T/out" | head -20
fi
IN_ESCAPES=0

echo "1..$N"
echo "# $PASS passed, $FAIL failed; $ESCAPES escape cases"
if [ "$ESCAPES" -lt 40 ]; then echo "# fewer than 40 escape cases"; FAIL=$((FAIL + 1)); fi
[ "$FAIL" = 0 ]
