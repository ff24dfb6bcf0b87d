/* Whole small files: the ones kbox keeps for a user (its CA, the trust
 * store) and the ones it is handed (kbox.yaml, secrets files), read with a
 * size cap and written without a short write going unnoticed. */
#ifndef KBOX_LIB_FILEIO_H
#define KBOX_LIB_FILEIO_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>

/* Read the regular file at path, at most max bytes, into a malloc'd
 * NUL-terminated *buf of *len bytes (the block is sized from the file, at
 * most max + 2 bytes; wipe *len + 1 of them if they matter).  The file is opened O_RDONLY |
 * O_CLOEXEC | oflags: O_NONBLOCK refuses a FIFO in the file's place
 * instead of waiting on it, O_NOFOLLOW a symlink.  st, when not NULL, gets
 * the file's attributes; *stage, when stage is not NULL, the step reached:
 * "open", "stat" (also for -ENOMEM) or "read".  0 or a negative errno:
 * open's, fstat's or read's, -EISDIR for a folder, -EINVAL for another
 * kind of file, -EFBIG for more than max bytes (also when the file grew
 * past max while read), -ENOMEM.  On failure nothing stays allocated and
 * what was read is wiped. */
int fileio_slurp(const char *path, int oflags, size_t max, char **buf, size_t *len, struct stat *st,
	      const char **stage);

/* Write the n bytes at buf to fd whole, again after EINTR and short
 * writes.  0, write's negative errno, or -EIO when it wrote nothing. */
int fileio_write_all(int fd, const void *buf, size_t n);

/* As fileio_write_all, at offset off with pwrite: the file offset stays. */
int fileio_pwrite_all(int fd, const void *buf, size_t n, off_t off);

/* Read n bytes from offset off into buf whole, again after EINTR and short
 * reads.  0, pread's negative errno, or -ENODATA when the file ends
 * first (buf then holds what was there). */
int fileio_pread_all(int fd, void *buf, size_t n, off_t off);

/* Whether name can name a file in a folder as it is, no quoting: 1 to max
 * bytes of ASCII letters, digits, '.', '_' and '-', the first none of the
 * characters in bad_first (".": never hidden, never "." or ".."; "-" too:
 * never read as an option). */
bool fileio_name_ok(const char *name, size_t max, const char *bad_first);

/* Replace the file at path (relative to the folder dirfd, or AT_FDCWD)
 * with the n bytes at buf so that a crash leaves the old content or the
 * new one, never a part: they go to the temporary file tmp (relative to
 * dirfd too, in the same file system; NULL: path with ".tmp" appended),
 * created afresh (a file left there is removed first; a symlink there is
 * -ELOOP, never followed) with exactly mode whatever the umask, fsync'd
 * and renamed
 * over path; then path's folder is fsync'd, at best effort (the new
 * content is in place either way).  0 or a negative errno (-ENAMETOOLONG
 * when path with ".tmp" does not fit PATH_MAX); on failure tmp is gone
 * and path untouched. */
int fileio_write_atomic(int dirfd, const char *path, const char *tmp, const void *buf, size_t n,
		     mode_t mode);

#endif
