#!/usr/bin/python3
"""A case-insensitive host folder for tests/fuse/run.sh, where the kernel
has neither vfat, exFAT nor ext4 casefold: serves BACKING at MNT through
FUSE (python3-fusepy), taking one name for another the way such file
systems do:

  - names compare after Unicode NFD and case folding (ext4 casefold,
    SMB, APFS), and without trailing dots and spaces (vfat, exFAT,
    Windows servers);
  - every name with something beyond a short name's letters also answers
    to a vfat-like short alias: its first six letters or digits in
    capitals, then "~1" (".env" is also "ENV~1");
  - listings give the names as stored (case-preserving), and a name made
    here is stored without its trailing dots and spaces.

Inode numbers are the backing files' (use_ino), so two spellings of one
file are one inode, as on a real case-insensitive file system.

  foldfs.py BACKING MNT       (foreground; umount MNT to stop)
"""
import errno
import os
import re
import sys
import unicodedata

try:
    from fusepy import FUSE, FuseOSError, Operations  # Debian's python3-fusepy
except ImportError:
    from fuse import FUSE, FuseOSError, Operations


def fold(name):
    return unicodedata.normalize("NFD", name.rstrip(". ")).casefold()


def short(name):
    s = re.sub(r"[^A-Z0-9]", "", name.upper())[:6]
    return s + "~1" if s else None


class FoldFS(Operations):
    def __init__(self, root):
        self.root = os.path.realpath(root)

    def _find(self, d, name):
        """The stored name in host directory d that name stands for."""
        if os.path.lexists(os.path.join(d, name)):
            return name
        want = fold(name)
        try:
            entries = os.listdir(d)
        except OSError as e:
            raise FuseOSError(e.errno)
        for e in entries:
            if fold(e) == want or short(e) == name.upper():
                return e
        return None

    def _real(self, path, create=False):
        d = self.root
        parts = [p for p in path.split("/") if p]
        for i, p in enumerate(parts):
            e = self._find(d, p)
            if e is None:
                if create and i == len(parts) - 1:
                    stored = p.rstrip(". ") or p
                    return os.path.join(d, stored)
                raise FuseOSError(errno.ENOENT)
            d = os.path.join(d, e)
        return d

    def getattr(self, path, fh=None):
        st = os.lstat(self._real(path))
        return {k: getattr(st, k) for k in ("st_mode", "st_ino", "st_nlink", "st_uid",
                                             "st_gid", "st_size", "st_atime",
                                             "st_mtime", "st_ctime")}

    def readdir(self, path, fh):
        return [".", ".."] + os.listdir(self._real(path))

    def readlink(self, path):
        return os.readlink(self._real(path))

    def open(self, path, flags):
        return os.open(self._real(path), flags)

    def create(self, path, mode, fi=None):
        return os.open(self._real(path, create=True), os.O_WRONLY | os.O_CREAT, mode)

    def read(self, path, size, offset, fh):
        return os.pread(fh, size, offset)

    def write(self, path, data, offset, fh):
        return os.pwrite(fh, data, offset)

    def truncate(self, path, length, fh=None):
        os.truncate(self._real(path), length)

    def release(self, path, fh):
        os.close(fh)

    def flush(self, path, fh):
        return 0

    def unlink(self, path):
        os.unlink(self._real(path))

    def rmdir(self, path):
        os.rmdir(self._real(path))

    def mkdir(self, path, mode):
        os.mkdir(self._real(path, create=True), mode)

    def rename(self, old, new):
        os.rename(self._real(old), self._real(new, create=True))

    def chmod(self, path, mode):
        os.chmod(self._real(path), mode)

    def chown(self, path, uid, gid):
        os.lchown(self._real(path), uid, gid)

    def utimens(self, path, times=None):
        os.utime(self._real(path), times, follow_symlinks=False)

    def statfs(self, path):
        st = os.statvfs(self.root)
        return {k: getattr(st, k) for k in ("f_bavail", "f_bfree", "f_blocks", "f_bsize",
                                             "f_favail", "f_ffree", "f_files", "f_flag",
                                             "f_frsize", "f_namemax")}


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: foldfs.py BACKING MNT")
    FUSE(FoldFS(sys.argv[1]), sys.argv[2], foreground=True, nothreads=True, use_ino=True)
