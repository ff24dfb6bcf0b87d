/* What the parts of the image code share, and nothing else includes:
 * image_json.c (the JSON reader), image_manifest.c (Docker and OCI
 * manifests, image names), image_tree.c (writing a tree beneath a root
 * fd, applying a layer) and image.c (the store: load, import, ls, rm).
 * The public interface is image.h. */
#ifndef KBOX_VMM_IMAGE_PRIV_H
#define KBOX_VMM_IMAGE_PRIV_H

#include <dirent.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>

#include "vmm/image/image.h"

#define JSON_MAX_DEPTH 32
#define JSON_FILE_MAX (8u << 20)
#define PATH_DEPTH_MAX 200
#define OUTER_MEMBERS_MAX 65536
#define LINK_HOPS_MAX 8
#define XATTR_MAX 32
#define XATTR_VALUE_MAX 65536
#define DEFAULT_MAX_BYTES (64ull << 30)
#define DEFAULT_MAX_ENTRIES (4ull << 20)
#if defined(__x86_64__)
#define HOST_ARCH "amd64"
#elif defined(__aarch64__)
#define HOST_ARCH "arm64"
#else
#define HOST_ARCH "unknown"
#endif

/* ---- JSON (image_json.c) ---- */

/* Parses BUF with a token array sized for it (every token but the first
 * takes at least two bytes of text). */
int image_json_load(struct image_json *j, const char *buf, size_t len);

/* String member KEY of object OBJ decoded into OUT, as image_json_get
 * then image_json_str (their errors). */
int image_json_str_at(const struct image_json *j, int obj, const char *key, char *out,
		      size_t len);

/* ---- Manifests and names (image_manifest.c) ---- */

/* 1 if H is exactly IMAGE_HEX_LEN lowercase hex digits, else 0. */
int image_hex64_ok(const char *h);

/* Adds the name:tag that REPO (a RepoTags entry or an OCI ref name)
 * stands for to M's tags, unless it is unusable, already there or M
 * has IMAGE_MAX_TAGS. */
void image_add_tag(struct image_manifest *m, const char *repo);

/* 1 if C may stand in an image name (first: at its start). */
int image_name_char(char c, int first);

/* ---- Writing a tree (image_tree.c) ---- */

/* Records the first message in CTX->err and returns ERR, or -EIO when
 * ERR is not negative. */
__attribute__((format(printf, 3, 4)))
int image_fail(struct image_ctx *ctx, int err, const char *fmt, ...);

/* Canonical relative form of an archive path: no "./", empty or "."
 * components.  ".." anywhere and absolute paths are refused (-EPERM); ""
 * is the root itself. */
int image_path_norm(const char *in, char *out, size_t len);

/* A directory stream on FD, which it takes over: closed when no stream
 * can be made (NULL, out of memory). */
DIR *image_dir_stream(int fd);

/* NAME in DFD as a directory stream, opened O_RDONLY | O_DIRECTORY |
 * O_CLOEXEC | oflags: NULL with errno set (openat's, or ENOMEM). */
DIR *image_dir_open(int dfd, const char *name, int oflags);

/* Removes NAME in DFD, a whole tree if it is a directory; never follows
 * a symlink. */
int image_remove_tree(int dfd, const char *name, unsigned depth);

/* A tree being written beneath rootfd, with the limits it is held to. */
struct writer {
	struct image_ctx *ctx;
	int rootfd, is_root;
	const char *what; /* "layer 2 (blobs/sha256/...)": names the culprit */
	uint64_t bytes, entries, max_bytes, max_entries;
	struct dirfix *fix;
	size_t nfix, capfix;
};

/* An entry's owner, mode and modification time. */
struct wmeta {
	mode_t mode;
	uid_t uid;
	gid_t gid;
	struct timespec mtime;
};

/* One extended attribute of an entry. */
struct xat {
	const char *name;
	const void *val;
	size_t len;
};

/* Reads up to len bytes of a file's contents into buf: the count, 0 at
 * the end, or a negative errno. */
typedef ssize_t (*reader_fn)(void *arg, void *buf, size_t len);

/* A writer of the tree beneath ROOTFD under CTX's limits (defaults
 * when 0); image_tree_free releases it. */
void image_tree_init(struct writer *w, struct image_ctx *ctx, int rootfd);

/* Frees what W holds (not the root fd). */
void image_tree_free(struct writer *w);

/* Counts one more entry: 0, or -EFBIG (CTX->err set) past the limit. */
int image_tree_count_entry(struct writer *w);

/* Owner, then mode (a chown clears set-id bits), then xattrs (a chown
 * clears security.capability), then times. */
void image_tree_set_meta_fd(struct writer *w, int fd, const struct wmeta *m, const struct xat *x,
			    unsigned nx, int times);

/* A regular file at PATH (whatever was there is removed; beneath the
 * root, never through a symlink) with M's metadata and NX xattrs, its
 * bytes read from RD(ARG) until it returns 0 (negative: failed) and
 * counted against the byte limit.  Returns 0 or a negative errno with
 * the message set. */
int image_tree_file(struct writer *w, const char *path, const struct wmeta *m,
		    const struct xat *x, unsigned nx, reader_fn rd, void *arg);

/* A directory at PATH (an existing directory is kept, anything else
 * replaced), mode 0700 until image_tree_fix_apply gives it M's mode and time.
 * Returns 0 or a negative errno with the message set. */
int image_tree_dir(struct writer *w, const char *path, const struct wmeta *m,
		   const struct xat *x, unsigned nx);

/* Gives directories their modes and times, deepest first (a parent that
 * is not writable for its owner comes last) and the last word for a path
 * that appeared more than once. */
void image_tree_fix_apply(struct writer *w);

/* A symlink to TARGET or, with TARGET NULL, a FIFO; either gets the
 * entry's owner and mtime, on itself, not on what a link names. */
int image_tree_special(struct writer *w, const char *path, const char *target,
		       const struct wmeta *m);

/* A hard link to TARGET, an earlier entry: both resolved beneath the root,
 * so a link can only ever join two files of the image. */
int image_tree_link(struct writer *w, const char *path, const char *target);

/* Splits P into its directory (into DIR) and last component. */
const char *image_split_dir(const char *p, char *dir);

/* Applies layer NAME (a tar, compressed or not, in AT): its whiteouts
 * first, then its entries.  Returns 0 or a negative errno with the
 * message set. */
int image_tree_apply_layer(struct writer *w, int at, const char *name);

#endif
