/* libarchive, loaded when an image is first read rather than at every
 * start of kbox.  Linked normally, its dependencies (libxml2, ICU,
 * libstdc++ among them) cost each kbox process several milliseconds of
 * relocations and page faults before main, on every run, exec and stop,
 * where only image import and unpacking use it (docs/benchmarks.md).
 *
 * Include this instead of <archive.h>: the functions kbox uses keep their
 * names and become calls through pointers that archive_lib_load fills;
 * call it before the first one. */
#ifndef KBOX_ARCHIVE_LIB_H
#define KBOX_ARCHIVE_LIB_H

#include <archive.h>
#include <archive_entry.h>
#include <stddef.h>

/* The library's file name (its soname): Debian's libarchive13. */
#define ARCHIVE_LIB_SONAME "libarchive.so.13"

#define ARCHIVE_LIB_FUNCS(X)                                                                       \
	X(archive_entry_filetype)                                                                  \
	X(archive_entry_gid)                                                                       \
	X(archive_entry_hardlink)                                                                  \
	X(archive_entry_mtime)                                                                     \
	X(archive_entry_mtime_nsec)                                                                \
	X(archive_entry_pathname)                                                                  \
	X(archive_entry_perm)                                                                      \
	X(archive_entry_symlink)                                                                   \
	X(archive_entry_uid)                                                                       \
	X(archive_entry_xattr_next)                                                                \
	X(archive_entry_xattr_reset)                                                               \
	X(archive_error_string)                                                                    \
	X(archive_filter_bytes)                                                                    \
	X(archive_read_data)                                                                       \
	X(archive_read_free)                                                                       \
	X(archive_read_new)                                                                        \
	X(archive_read_next_header)                                                                \
	X(archive_read_open_fd)                                                                    \
	X(archive_read_support_filter_all)                                                         \
	X(archive_read_support_format_empty)                                                       \
	X(archive_read_support_format_tar)

struct archive_lib {
#define ARCHIVE_LIB_PTR(f) __typeof__(f) *f;
	ARCHIVE_LIB_FUNCS(ARCHIVE_LIB_PTR)
#undef ARCHIVE_LIB_PTR
};
extern struct archive_lib archive_lib;

/* Loads the library and every function above, once per process (later
 * calls return the first call's result).  0, or -ENOENT with a line for
 * the user in err. */
int archive_lib_load(char *err, size_t errlen);

/* archive_lib_load, then a new reader of tar archives in any compression
 * libarchive knows; NULL with *rc (-ENOENT: no library, -ENOMEM) and a
 * line in err. */
struct archive *archive_lib_tar_reader(int *rc, char *err, size_t errlen);

#ifndef ARCHIVE_LIB_SELF
#define archive_entry_filetype            archive_lib.archive_entry_filetype
#define archive_entry_gid                 archive_lib.archive_entry_gid
#define archive_entry_hardlink            archive_lib.archive_entry_hardlink
#define archive_entry_mtime               archive_lib.archive_entry_mtime
#define archive_entry_mtime_nsec          archive_lib.archive_entry_mtime_nsec
#define archive_entry_pathname            archive_lib.archive_entry_pathname
#define archive_entry_perm                archive_lib.archive_entry_perm
#define archive_entry_symlink             archive_lib.archive_entry_symlink
#define archive_entry_uid                 archive_lib.archive_entry_uid
#define archive_entry_xattr_next          archive_lib.archive_entry_xattr_next
#define archive_entry_xattr_reset         archive_lib.archive_entry_xattr_reset
#define archive_error_string              archive_lib.archive_error_string
#define archive_filter_bytes              archive_lib.archive_filter_bytes
#define archive_read_data                 archive_lib.archive_read_data
#define archive_read_free                 archive_lib.archive_read_free
#define archive_read_new                  archive_lib.archive_read_new
#define archive_read_next_header          archive_lib.archive_read_next_header
#define archive_read_open_fd              archive_lib.archive_read_open_fd
#define archive_read_support_filter_all   archive_lib.archive_read_support_filter_all
#define archive_read_support_format_empty archive_lib.archive_read_support_format_empty
#define archive_read_support_format_tar   archive_lib.archive_read_support_format_tar
#endif

#endif
