#!/bin/sh
# End-to-end test of the image store: `kbox image load|import|ls|rm|path`
# on archives that tests/images/mk.py builds here (docker-archive and OCI
# layouts with whiteouts, an opaque folder, hard links, an absolute
# symlink; and hostile ones), the resulting trees checked on the host, a
# canary folder outside checked untouched, `kbox image rm` of an image a
# (recorded) sandbox uses, then two boots on the loaded image (skipped
# without /dev/kvm): `kbox run --image NAME`, and a detached sandbox whose
# image rm refuses until it stopped.
#   tests/e2e/image-store.sh BUILD_DIR
set -u
# shellcheck source=tests/e2e/lib.sh
. "$(dirname "$0")/lib.sh"
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'chmod -R u+rwX "$tmp" 2> /dev/null; rm -rf "$tmp"' EXIT
# check NAME 'SHELL EXPRESSION': ok if it is true.
check() { if eval "$2"; then ok "$1"; else not_ok "$1"; fi; }
busybox=${BUSYBOX:-/bin/busybox}
bbopt=
if [ -x "$busybox" ] && ! ldd "$busybox" > /dev/null 2>&1; then
	bbopt="--busybox $busybox"
fi

store="$tmp/store"
canary="$tmp/canary"
arch="$tmp/archives"
export KBOX_IMAGE_DIR="$store"
mkdir -p "$canary"
echo canary > "$canary/file"
# shellcheck disable=SC2086
python3 "$here/../images/mk.py" "$arch" "$canary" $bbopt || { echo "mk.py failed" >&2; exit 1; }
canary_state() { (cd "$canary" && find . -printf '%p %y %m %s\n' | LC_ALL=C sort && cat file); }
canary_state > "$tmp/canary-before"

nrootfs() { find "$store/rootfs" -mindepth 1 -maxdepth 1 | wc -l; }

# --- a docker-archive ---
"$kbox" image load "$arch/docker-good.tar" > "$tmp/out" 2> "$tmp/err"
rc=$?
host_check "docker-archive loads" [ "$rc" -eq 0 ]
grep -q '^Loaded kboxtest:1 (id [0-9a-f]\{12\})$' "$tmp/out" && ok "load names it from RepoTags" ||
	not_ok "load names it from RepoTags" "$(cat "$tmp/out" "$tmp/err")"
grep -q 'device node' "$tmp/err" && ok "skipped device nodes are counted" || not_ok "device note" "$(cat "$tmp/err")"
root=$("$kbox" image path kboxtest:1)
check "image path gives a folder in the store" '[ -d "$root" ] && [ "${root%/*}" = "$store/rootfs" ]'
host_check "files of the lowest layer" [ "$(cat "$root/data/keep")" = keep ]
host_check "a later layer replaces a file" [ "$(cat "$root/etc/hello")" = "hello v2" ]
check "a whiteout deletes" '[ ! -e "$root/data/gone" ] && [ ! -e "$root/data/.wh.gone" ]'
host_check "an opaque folder hides the lower layers" [ "$(ls -A "$root/opq")" = new ]
host_check "hard links stay one file" [ "$(stat -c %i "$root/data/hard")" = "$(stat -c %i "$root/data/keep")" ]
check "an absolute symlink stays a link" '[ -L "$root/abs" ] && [ "$(readlink "$root/abs")" = /etc/passwd ]'
check "a read-only folder keeps its mode and files" '[ "$(stat -c %a "$root/ro")" = 555 ] && [ -f "$root/ro/file" ]'
host_check "set-uid modes are kept" [ "$(stat -c %a "$root/bin/suid")" = 4755 ]
check "fifos are made, device nodes not" '[ -p "$root/data/fifo" ] && [ ! -e "$root/dev/null" ]'
host_check "later layers add files" [ "$(cat "$root/data/added")" = added ]
host_check "mtimes are kept" [ "$(stat -c %Y "$root/etc/passwd")" = 1700000000 ]
if [ "$(id -u)" -eq 0 ]; then
	host_check "owners are kept" [ "$(stat -c %u:%g "$root/home/user/owned")" = 1000:1000 ]
fi
host_check "user xattrs are kept" python3 -c "import os,sys; sys.exit(os.getxattr(sys.argv[1], 'user.kbox') != b'yes')" "$root/etc/passwd"
host_check "the store is private" [ "$(stat -c %a "$store")" = 700 ]

# --- the same image as an OCI layout, and the archive again: stored once ---
"$kbox" image load "$arch/oci-good.tar" > "$tmp/out" 2> "$tmp/err"
rc=$?
host_check "OCI layout loads" [ "$rc" -eq 0 ]
grep -q '^Loaded oci-good:v1 (id .*already stored' "$tmp/out" && ok "the OCI copy is the same image, stored once" ||
	not_ok "the OCI copy is the same image" "$(cat "$tmp/out" "$tmp/err")"
"$kbox" image load --name again:2 "$arch/docker-good.tar" > "$tmp/out" 2>&1
check "loading twice stores once" '[ "$(nrootfs)" -eq 1 ] && grep -q "already stored" "$tmp/out"'
"$kbox" image ls > "$tmp/ls"
host_check "ls lists every name" [ "$(grep -c ' load:' "$tmp/ls")" -eq 4 ]
host_check "ls shows NAME ID SIZE CREATED" grep -q '^NAME  *ID  *SIZE  *CREATED' "$tmp/ls"

# --- hostile archives: refused, nothing written outside, nothing kept ---
refuse() {
	name=$1 file=$2 pat=$3
	"$kbox" image load "$arch/$file" > /dev/null 2> "$tmp/err"
	rc=$?
	if [ "$rc" -eq 125 ] && [ "$(wc -l < "$tmp/err")" -eq 1 ] && grep -q -- "$pat" "$tmp/err"; then
		ok "refused: $name"
	else
		not_ok "refused: $name (exit $rc)" "$(head -3 "$tmp/err")"
	fi
}
refuse "a ../../ entry" evil-dotdot.tar "climbs out with '..'"
refuse "an absolute entry" evil-abs.tar "absolute path"
refuse "a write through a symlink of an earlier layer" evil-symlink.tar "goes through a symlink"
refuse "a write through a symlink of the same layer" evil-samelayer.tar "goes through a symlink"
refuse "a hard link out of the image" evil-hardlink.tar "outside the image"
refuse "a blob that does not match its digest" evil-digest.tar "tampered"
canary_state > "$tmp/canary-after"
host_check "the canary folder is untouched" cmp -s "$tmp/canary-before" "$tmp/canary-after"
check "no stray x-* file anywhere under the test dir" '[ -z "$(find "$tmp" -name "x-*")" ]'
host_check "refused archives leave no name" [ -z "$(ls "$store/refs" | grep '^evil')" ]
host_check "refused archives leave no rootfs" [ "$(nrootfs)" -eq 1 ]
host_check "refused archives leave no work dir" [ -z "$(ls -A "$store/tmp")" ]

# --- CLI errors: exit 125 and one line ---
cli_err() {
	name=$1
	shift
	"$kbox" image "$@" > /dev/null 2> "$tmp/err"
	rc=$?
	if [ "$rc" -eq 125 ] && [ "$(wc -l < "$tmp/err")" -eq 1 ]; then ok "error: $name"; else
		not_ok "error: $name (exit $rc)" "$(cat "$tmp/err")"; fi
}
cli_err "missing archive" load "$tmp/nope.tar"
cli_err "not a tar" load "$tmp/canary-before"
tar -C "$canary" -cf "$tmp/plain.tar" .
cli_err "a tar without a manifest" load "$tmp/plain.tar"
cli_err "a bad name" load "$arch/docker-good.tar" --name 'Bad/Name'
cli_err "two archives" load "$arch/docker-good.tar" "$arch/oci-good.tar"
cli_err "unknown image for rm" rm nope
cli_err "unknown image for path" path nope
cli_err "import without a name" import "$canary"
cli_err "unknown subcommand" frobnicate
for c in load import ls rm path; do
	"$kbox" image "$c" --help > "$tmp/help" 2>&1
	rc=$?
	check "image $c --help" '[ $rc -eq 0 ] && grep -q "Usage: kbox image $c" "$tmp/help"'
done
"$kbox" run --image nope -- true > /dev/null 2> "$tmp/err"
rc=$?
check "run --image with an unknown name is refused" '[ $rc -eq 125 ] && grep -q "kbox image ls" "$tmp/err"'

# --- a progress bar on a terminal (script(1) gives one) ---
if command -v script > /dev/null 2>&1; then
	script -qec "'$kbox' image load '$arch/oci-good.tar'" /dev/null > "$tmp/tty" 2>&1
	host_check "progress bar on a terminal" grep -q 'reading  \[' "$tmp/tty"
fi
"$kbox" image load "$arch/oci-good.tar" 2> "$tmp/err" > /dev/null
host_check "no progress bar off a terminal" [ ! -s "$tmp/err" ] || ! grep -q reading "$tmp/err"

# --- concurrent loads of one image into a fresh store ---
cstore="$tmp/cstore"
KBOX_IMAGE_DIR="$cstore" "$kbox" image load "$arch/docker-good.tar" > "$tmp/c1" 2>&1 &
p1=$!
KBOX_IMAGE_DIR="$cstore" "$kbox" image load "$arch/oci-good.tar" > "$tmp/c2" 2>&1 &
p2=$!
wait "$p1"
r1=$?
wait "$p2"
r2=$?
check "two concurrent loads both succeed" '[ "$r1" -eq 0 ] && [ "$r2" -eq 0 ]'
check "and store the image once" '[ "$(find "$cstore/rootfs" -mindepth 1 -maxdepth 1 | wc -l)" -eq 1 ] &&
	[ -z "$(ls -A "$cstore/tmp")" ]'

# --- an interrupted load leaves nothing visible ---
istore="$tmp/istore"
python3 -c "
import io, json, hashlib, sys, tarfile
blob = bytes(64 << 20)
lay = io.BytesIO()
with tarfile.open(fileobj=lay, mode='w') as t:
    ti = tarfile.TarInfo('big'); ti.size = len(blob); t.addfile(ti, io.BytesIO(blob))
lay = lay.getvalue()
cfg = json.dumps({'rootfs': {'diff_ids': ['sha256:' + hashlib.sha256(lay).hexdigest()]}}).encode()
man = json.dumps([{'Config': 'c.json', 'RepoTags': ['big:1'], 'Layers': ['l/layer.tar']}]).encode()
with tarfile.open(sys.argv[1], 'w') as t:
    for n, d in (('l/layer.tar', lay), ('c.json', cfg), ('manifest.json', man)):
        ti = tarfile.TarInfo(n); ti.size = len(d); t.addfile(ti, io.BytesIO(d))
" "$tmp/big.tar"
KBOX_IMAGE_DIR="$istore" "$kbox" image load "$tmp/big.tar" > /dev/null 2>&1 &
pb=$!
i=0
while [ -z "$(find "$istore/tmp" -name b0 -size +1k 2> /dev/null)" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
kill -9 "$pb" 2> /dev/null
wait "$pb" 2> /dev/null
# Killed while staging, nothing may show; had it finished, all of it must.
if [ -e "$istore/refs/big:1" ]; then
	echo "# the load finished before the kill"
	check "a load is all there or not at all" '[ "$(stat -c %s "$istore"/rootfs/*/big)" -eq $((64 << 20)) ]'
else
	check "a killed load leaves no name and no rootfs" '[ -z "$(ls -A "$istore/rootfs" 2> /dev/null)" ]'
fi
KBOX_IMAGE_DIR="$istore" "$kbox" image load "$tmp/big.tar" > /dev/null 2>&1
host_check "the next load works" [ "$(KBOX_IMAGE_DIR="$istore" "$kbox" image path big:1)" != "" ]

# --- import a folder: links kept, same tree stored once ---
src="$tmp/src"
mkdir -p "$src/etc" "$src/bin"
echo imported > "$src/etc/file"
ln "$src/etc/file" "$src/etc/hard"
ln -s /etc/shadow "$src/etc/abs"
"$kbox" image import "$src" --name tree:1 > "$tmp/out" 2>&1
host_check "import" [ $? -eq 0 ]
"$kbox" image import "$src" --name tree:2 > "$tmp/out" 2>&1
host_check "importing the same tree twice stores it once" grep -q 'already stored' "$tmp/out"
troot=$("$kbox" image path tree:1)
check "import keeps symlinks as links" '[ -L "$troot/etc/abs" ] && [ "$(readlink "$troot/etc/abs")" = /etc/shadow ]'
host_check "import keeps hard links" [ "$(stat -c %i "$troot/etc/file")" = "$(stat -c %i "$troot/etc/hard")" ]
"$kbox" image rm tree:1 tree:2 > /dev/null 2>&1
host_check "rm of every name removes the tree" [ ! -e "$troot" ]

# --- unprivileged: owners are not kept (with a note), the rest is ---
if [ "$(id -u)" -eq 0 ] && command -v setpriv > /dev/null 2>&1; then
	ustore="$tmp/ustore"
	mkdir -p "$ustore"
	chown 65534:65534 "$ustore"
	chmod 755 "$tmp" "$arch"
	chmod 644 "$arch/docker-good.tar"
	asnobody() { setpriv --reuid=65534 --regid=65534 --clear-groups env KBOX_IMAGE_DIR="$ustore/s" "$kbox" image "$@"; }
	asnobody load "$arch/docker-good.tar" > /dev/null 2> "$tmp/err"
	rc=$?
	check "a load without root works" '[ $rc -eq 0 ] && grep -q "not root" "$tmp/err"'
	uroot=$(asnobody path kboxtest:1)
	check "without root, modes are still kept" '[ "$(stat -c %a "$uroot/ro")" = 555 ] && [ "$(stat -c %U "$uroot/home/user/owned")" = nobody ]'
	asnobody rm kboxtest:1 kboxtest:latest > /dev/null 2>&1
	check "and rm removes read-only folders too" '[ ! -e "$uroot" ]'
fi

# --- rm of an image that a running sandbox uses: a recorded one (this
# shell's pid as its owner), no boot; the real one is below ---
rt="$tmp/rt"
mkdir -p "$rt/kbox/fake-sbx"
chmod 700 "$rt" "$rt/kbox" "$rt/kbox/fake-sbx"
mkdir -p "$tmp/busysrc" "$tmp/sweepsrc"
echo busy > "$tmp/busysrc/file"
echo sweep > "$tmp/sweepsrc/file"
"$kbox" image import "$tmp/busysrc" --name busy:1 > /dev/null 2>&1
"$kbox" image import "$tmp/busysrc" --name busy:2 > /dev/null 2>&1
broot=$("$kbox" image path busy:1)
printf 'pid=%s\nstarted=0\ncpus=1\nmemory=64\ncommand=sleep\n' $$ > "$rt/kbox/fake-sbx/info"
echo "$broot" > "$rt/kbox/fake-sbx/image"
XDG_RUNTIME_DIR="$rt" "$kbox" image rm busy:2 > /dev/null 2>&1
host_check "rm of one of several names of an image in use works" [ $? -eq 0 ]
XDG_RUNTIME_DIR="$rt" "$kbox" image rm busy:1 > "$tmp/out" 2> "$tmp/err"
rc=$?
check "rm of an image in use is refused, naming the sandbox" \
	'[ $rc -ne 0 ] && grep -q "in use by running sandbox(es): fake-sbx; stop them first" "$tmp/err" && [ -d "$broot" ] && "$kbox" image path busy:1 > /dev/null'
XDG_RUNTIME_DIR="$rt" "$kbox" image rm "$(basename "$broot")" > /dev/null 2> "$tmp/err"
check "by id too" '[ $? -ne 0 ] && grep -q fake-sbx "$tmp/err"'
XDG_RUNTIME_DIR="$rt" "$kbox" image rm --force busy:1 > "$tmp/out" 2>&1
rc=$?
check "rm --force removes the name, says the sandbox keeps the files, and keeps them" \
	'[ $rc -eq 0 ] && grep -q "Still in use by running sandbox(es) fake-sbx" "$tmp/out" && [ -f "$broot/file" ] && ! "$kbox" image path busy:1 > /dev/null 2>&1'
# The owner is gone (a stale record): the next load, import or rm frees it.
printf 'pid=999999999\n' > "$rt/kbox/fake-sbx/info"
XDG_RUNTIME_DIR="$rt" "$kbox" image import "$tmp/sweepsrc" --name sweep:1 > /dev/null 2>&1
host_check "its files go once no sandbox uses it" [ ! -e "$broot" ]
"$kbox" image rm sweep:1 > /dev/null 2>&1

# --- the image in a sandbox ---
if [ -n "$bbopt" ] && [ -c /dev/kvm ] && [ -r /dev/kvm ]; then
	start=$(date +%s)
	timeout "$boot_timeout" "$kbox" run --image kboxtest:1 -- /bin/sh -c \
		'cat /etc/hello; ls /opq; readlink /abs; cat /abs; [ -e /data/gone ] || echo gone-ok' \
		> "$tmp/vm" 2> "$tmp/vm-err"
	rc=$?
	echo "# boot on the loaded image: $(( $(date +%s) - start ))s"
	host_check "kbox run --image NAME runs the image's /bin/sh" [ "$rc" -eq 0 ]
	printf 'hello v2\nnew\n/etc/passwd\nroot:x:0:0:root:/root:/bin/sh\ngone-ok\n' > "$tmp/vm-want"
	if cmp -s "$tmp/vm" "$tmp/vm-want"; then ok "the guest sees the loaded tree"; else
		not_ok "the guest sees the loaded tree" "$(cat "$tmp/vm" "$tmp/vm-err" | tail -8)"; fi
	# A detached sandbox on the image: rm refused while it runs (by id:
	# its names are several, and removing one of them frees nothing).
	sbx="img-e2e-$$"
	trap '"$kbox" stop -t 2 "$sbx" > /dev/null 2>&1; chmod -R u+rwX "$tmp" 2> /dev/null; rm -rf "$tmp"' EXIT
	start=$(date +%s)
	out=$(timeout "$boot_timeout" "$kbox" run -d --name "$sbx" --network none --image kboxtest:1 -- /bin/busybox sleep 100000 2> "$tmp/vm-err")
	echo "# detached boot on the image: $(( $(date +%s) - start ))s"
	host_check "a detached sandbox runs on the image" [ "$out" = "$sbx" ]
	"$kbox" image rm "$(basename "$root")" > /dev/null 2> "$tmp/err"
	rc=$?
	check "rm of its image is refused while it runs, naming it" \
		'[ $rc -ne 0 ] && grep -q "in use by running sandbox(es): $sbx;" "$tmp/err" && [ -d "$root" ] && "$kbox" image path kboxtest:1 > /dev/null'
	"$kbox" stop -t 5 "$sbx" > /dev/null 2>&1
	host_check "the sandbox stops" [ $? -eq 0 ]
else
	echo "# skipped the boot: no static busybox or no usable /dev/kvm"
fi

# --- rm: a name, then the id (works once the sandbox above stopped) ---
id=$(basename "$root")
"$kbox" image rm kboxtest:1 > /dev/null
host_check "rm of one name keeps the shared rootfs" [ -d "$root" ]
"$kbox" image rm "$(echo "$id" | cut -c1-12)" > /dev/null
check "rm by id removes every name and the rootfs" '[ ! -e "$root" ] && [ -z "$(ls -A "$store/refs")" ]'
host_check "and leaves no metadata" [ -z "$(ls -A "$store/meta")" ]

e2e_finish
