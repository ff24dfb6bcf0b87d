#!/usr/bin/env python3
"""Builds the test archives for `kbox image load`, without docker.

  tests/images/mk.py OUTDIR CANARY [--busybox PATH]

Writes into OUTDIR:
  docker-good.tar   a `docker save` archive (legacy <id>/layer.tar layout,
                    checked against the config's diff_ids), three layers
  oci-good.tar      the same image as an OCI image layout (one gzip'd layer)
  evil-dotdot.tar   a layer entry ../../x-dotdot
  evil-abs.tar      a layer entry CANARY/x-abs (absolute)
  evil-symlink.tar  layer 1: link -> CANARY; layer 2: link/x-symlink
  evil-samelayer.tar the same in one layer
  evil-hardlink.tar a hard link to ../../etc/passwd
  evil-digest.tar   an OCI layout whose layer does not match its digest
CANARY is an absolute folder outside the store that must stay untouched.

The good image holds (after all layers):
  etc/hello "hello v2", etc/passwd (xattr user.kbox=yes), abs -> /etc/passwd,
  data/keep + data/hard (hard links), data/added, data/fifo, no data/gone,
  opq/new only (opq/old* hidden by an opaque marker), ro/ (mode 0555) with
  ro/file, bin/suid (04755), home/user/owned (uid/gid 1000),
  dev/null skipped, bin/busybox + bin/sh + bin/cat (with --busybox).
"""
import gzip
import hashlib
import io
import json
import os
import sys
import tarfile

MTIME = 1700000000


def info(name, kind=tarfile.REGTYPE, mode=0o644, uid=0, gid=0, **kw):
    t = tarfile.TarInfo(name)
    t.type = kind
    t.mode = mode
    t.uid, t.gid = uid, gid
    t.mtime = MTIME
    for k, v in kw.items():
        setattr(t, k, v)
    return t


def layer(entries):
    """entries: (TarInfo, bytes or None).  Returns the uncompressed tar."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for ti, data in entries:
            if data is not None:
                ti.size = len(data)
                tf.addfile(ti, io.BytesIO(data))
            else:
                tf.addfile(ti)
    return buf.getvalue()


def d(name, mode=0o755):
    return (info(name, tarfile.DIRTYPE, mode), None)


def f(name, data, mode=0o644, **kw):
    return (info(name, mode=mode, **kw), data)


def sym(name, target):
    return (info(name, tarfile.SYMTYPE, 0o777, linkname=target), None)


def hard(name, target):
    return (info(name, tarfile.LNKTYPE, 0o644, linkname=target), None)


def good_layers(busybox):
    passwd = info("etc/passwd", pax_headers={"SCHILY.xattr.user.kbox": "yes"})
    l1 = [d("etc"), d("bin"), d("data"), d("opq"), d("opq/sub"), d("home"),
          d("home/user"), d("dev"),
          f("etc/hello", b"hello\n"),
          (passwd, b"root:x:0:0:root:/root:/bin/sh\n"),
          f("data/keep", b"keep\n"), f("data/gone", b"gone\n"),
          hard("data/hard", "data/keep"),
          f("opq/old1", b"old\n"), f("opq/sub/old2", b"old\n"),
          f("bin/suid", b"#!/bin/sh\n", mode=0o4755),
          f("home/user/owned", b"mine\n", uid=1000, gid=1000),
          sym("abs", "/etc/passwd"),
          (info("dev/null", tarfile.CHRTYPE, 0o666, devmajor=1, devminor=3), None),
          (info("data/fifo", tarfile.FIFOTYPE, 0o600), None)]
    if busybox:
        with open(busybox, "rb") as fh:
            l1.append(f("bin/busybox", fh.read(), mode=0o755))
        l1.append(sym("bin/sh", "busybox"))
        l1.append(sym("bin/cat", "busybox"))
    l2 = [f("data/.wh.gone", b""), f("opq/.wh..wh..opq", b""), f("opq/new", b"new\n"),
          f("etc/hello", b"hello v2\n"), d("ro", 0o555), f("ro/file", b"ro\n")]
    l3 = [f("data/added", b"added\n")]
    return [layer(l1), layer(l2), layer(l3)]


def sha(b):
    return hashlib.sha256(b).hexdigest()


def config_for(layers):
    return json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Cmd": ["/bin/sh"]},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + sha(l) for l in layers]},
    }, sort_keys=True).encode()


def write_tar(path, members):
    """members: (name, bytes) written as regular files, in order."""
    with tarfile.open(path, "w") as tf:
        for name, data in members:
            ti = info(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))


def docker_archive(path, layers, tags):
    cfg = config_for(layers)
    members = []
    names = []
    for i, l in enumerate(layers):
        lid = sha(l + bytes([i]))
        names.append(lid + "/layer.tar")
        members.append((lid + "/VERSION", b"1.0"))
        members.append((lid + "/layer.tar", l))
    members.append((sha(cfg) + ".json", cfg))
    manifest = [{"Config": sha(cfg) + ".json", "RepoTags": tags, "Layers": names}]
    members.append(("manifest.json", json.dumps(manifest).encode()))
    write_tar(path, members)


def oci_archive(path, layers, gzip_index=1, ref="v1", corrupt=False):
    blobs = {}
    descs = []
    for i, l in enumerate(layers):
        data = gzip.compress(l, mtime=0) if i == gzip_index else l
        mt = "application/vnd.oci.image.layer.v1.tar" + ("+gzip" if i == gzip_index else "")
        descs.append({"mediaType": mt, "digest": "sha256:" + sha(data), "size": len(data)})
        if corrupt and i == len(layers) - 1:
            data = data[:-1] + bytes([data[-1] ^ 1])
        blobs[sha(data) if not corrupt or i != len(layers) - 1 else descs[-1]["digest"][7:]] = data
    cfg = config_for(layers)
    blobs[sha(cfg)] = cfg
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": "sha256:" + sha(cfg), "size": len(cfg)},
        "layers": descs}).encode()
    blobs[sha(manifest)] = manifest
    index = json.dumps({"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": "sha256:" + sha(manifest), "size": len(manifest),
        "platform": {"os": "linux", "architecture": "amd64"},
        "annotations": {"org.opencontainers.image.ref.name": ref}}]}).encode()
    members = [("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'), ("index.json", index)]
    members += [("blobs/sha256/" + h, b) for h, b in blobs.items()]
    write_tar(path, members)


def main():
    args = sys.argv[1:]
    busybox = None
    if "--busybox" in args:
        i = args.index("--busybox")
        busybox = args[i + 1]
        del args[i:i + 2]
    if len(args) != 2 or not os.path.isabs(args[1]):
        sys.exit(__doc__)
    out, canary = args
    os.makedirs(out, exist_ok=True)
    good = good_layers(busybox)
    docker_archive(os.path.join(out, "docker-good.tar"), good,
                   ["docker.io/library/kboxtest:1", "kboxtest:latest"])
    oci_archive(os.path.join(out, "oci-good.tar"), good)
    base = [layer([d("etc"), f("etc/ok", b"ok\n")])]
    docker_archive(os.path.join(out, "evil-dotdot.tar"),
                   base + [layer([f("../../x-dotdot", b"pwned\n")])], ["evil:dotdot"])
    docker_archive(os.path.join(out, "evil-abs.tar"),
                   base + [layer([f(canary + "/x-abs", b"pwned\n")])], ["evil:abs"])
    docker_archive(os.path.join(out, "evil-symlink.tar"),
                   base + [layer([sym("link", canary)]),
                           layer([f("link/x-symlink", b"pwned\n")])], ["evil:symlink"])
    docker_archive(os.path.join(out, "evil-samelayer.tar"),
                   [layer([sym("link", canary), f("link/x-same", b"pwned\n")])],
                   ["evil:same"])
    docker_archive(os.path.join(out, "evil-hardlink.tar"),
                   [layer([hard("x-hard", "../../etc/passwd")])], ["evil:hard"])
    oci_archive(os.path.join(out, "evil-digest.tar"), base + good[2:], corrupt=True)


if __name__ == "__main__":
    main()
