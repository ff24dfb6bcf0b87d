/* FUSE server: decodes one FUSE request, calls a filesystem backend
 * (struct fuse_fs_ops) and encodes the reply.  It knows nothing about its
 * transport: the virtio-fs device and the /dev/fuse harness both hand it a
 * request as a list of readable buffers and a reply area as a list of
 * writable buffers.  Every byte of the request is hostile: each length is
 * checked before it is used, and a bad request gets an errno reply.
 *
 * Thread-safe: several threads may call fuse_server_handle (and
 * fuse_server_reset) on one server at once; replies may then complete in
 * any order, as FUSE allows. */
#ifndef KBOX_FUSE_SERVER_H
#define KBOX_FUSE_SERVER_H

#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "devices/idmap.h"
#include "lib/statebuf.h"

/* No file handle: passed to getattr/setattr when the guest named none. */
#define FUSE_FS_NO_FH UINT64_MAX

/* What a backend returns for a new or found directory entry.  nodeid is the
 * handle the guest will use; each such return counts one lookup that the
 * guest later drops with forget. */
struct fuse_fs_entry {
	uint64_t nodeid;
	struct stat st; /* host ids; the server maps them for the guest */
	/* Set by create when it made the file, left false when it opened an
	 * existing one: the server then gives a new file the mode the guest
	 * asked for and the request's owner (mkdir, mknod and symlink always
	 * make one). */
	bool created;
};

/* Attribute changes requested by SETATTR; a field is used only when its
 * FUSE_FS_SET_* bit is present in valid.  uid and gid are host ids (the
 * server maps the guest's).  A backend changes the owner before anything
 * else, so that a chown the host refuses changes nothing. */
#define FUSE_FS_SET_MODE 0x01u
#define FUSE_FS_SET_UID 0x02u
#define FUSE_FS_SET_GID 0x04u
#define FUSE_FS_SET_SIZE 0x08u
#define FUSE_FS_SET_ATIME 0x10u
#define FUSE_FS_SET_MTIME 0x20u
#define FUSE_FS_SET_ATIME_NOW 0x40u
#define FUSE_FS_SET_MTIME_NOW 0x80u
struct fuse_fs_setattr {
	unsigned valid;
	mode_t mode;
	uid_t uid;
	gid_t gid;
	off_t size;
	struct timespec atime, mtime;
};

/* Callback given to readdir: adds one entry to the reply.  e is NULL for a
 * plain READDIR, and for "." and ".." in READDIRPLUS.  Returns 1 if the entry
 * was added, 0 if the reply is full (the backend must then stop, and undo any
 * lookup it counted for this entry). */
typedef int (*fuse_fs_fill_fn)(void *ctx, const char *name, uint64_t ino,
			       unsigned dtype, uint64_t next_off,
			       const struct fuse_fs_entry *e);

/* Predicate the backend calls before a READDIRPLUS lookup: 1 if an entry
 * with this name length would still fit in the reply. */
typedef int (*fuse_fs_fits_fn)(void *ctx, size_t namelen);

/* The filesystem backend.  Every function returns 0 (or a byte count where
 * stated) or a negative errno; names are single components that the server
 * has already checked to be NUL-terminated and at most NAME_MAX bytes, but
 * the backend still enforces its own confinement rules on them.  The server
 * calls the ops from several threads at once, except reset, which it calls
 * with no other op in flight. */
struct fuse_fs_ops {
	int (*lookup)(void *be, uint64_t parent, const char *name,
		      struct fuse_fs_entry *out);
	/* Drops nlookup lookups of nodeid; unknown nodeids are ignored. */
	void (*forget)(void *be, uint64_t nodeid, uint64_t nlookup);
	int (*getattr)(void *be, uint64_t nodeid, uint64_t fh, struct stat *st);
	int (*setattr)(void *be, uint64_t nodeid, uint64_t fh,
		       const struct fuse_fs_setattr *sa, struct stat *st);
	/* Returns the target length (not NUL-terminated) written to buf. */
	int (*readlink)(void *be, uint64_t nodeid, char *buf, size_t size);
	int (*symlink)(void *be, uint64_t parent, const char *name,
		       const char *target, struct fuse_fs_entry *out);
	int (*mknod)(void *be, uint64_t parent, const char *name, mode_t mode,
		     dev_t rdev, struct fuse_fs_entry *out);
	int (*mkdir)(void *be, uint64_t parent, const char *name, mode_t mode,
		     struct fuse_fs_entry *out);
	int (*unlink)(void *be, uint64_t parent, const char *name);
	int (*rmdir)(void *be, uint64_t parent, const char *name);
	int (*rename)(void *be, uint64_t parent, const char *name,
		      uint64_t newparent, const char *newname, unsigned flags);
	int (*link)(void *be, uint64_t nodeid, uint64_t newparent,
		    const char *newname, struct fuse_fs_entry *out);
	int (*open)(void *be, uint64_t nodeid, int flags, uint64_t *fh);
	int (*create)(void *be, uint64_t parent, const char *name, mode_t mode,
		      int flags, struct fuse_fs_entry *out, uint64_t *fh);
	/* read/write return the byte count moved. */
	ssize_t (*read)(void *be, uint64_t fh, const struct iovec *iov,
			int iovcnt, off_t off);
	ssize_t (*write)(void *be, uint64_t fh, const struct iovec *iov,
			 int iovcnt, off_t off);
	int (*flush)(void *be, uint64_t fh);
	int (*release)(void *be, uint64_t fh);
	int (*fsync)(void *be, uint64_t fh, bool datasync);
	int (*opendir)(void *be, uint64_t nodeid, uint64_t *fh);
	/* Emits entries of directory nodeid starting at the opaque offset off
	 * (0 = start) until fill reports the reply full or the directory ends.
	 * plus asks for a counted lookup of each entry (READDIRPLUS).  fh is
	 * the handle opendir gave, or FUSE_FS_NO_FH when the guest opens
	 * directories without a message (FUSE_NO_OPENDIR_SUPPORT): the backend
	 * then lists nodeid itself.  fsyncdir takes the same pair. */
	int (*readdir)(void *be, uint64_t nodeid, uint64_t fh, uint64_t off,
		       bool plus, fuse_fs_fill_fn fill, fuse_fs_fits_fn fits,
		       void *ctx);
	int (*releasedir)(void *be, uint64_t fh);
	int (*fsyncdir)(void *be, uint64_t nodeid, uint64_t fh, bool datasync);
	int (*statfs)(void *be, uint64_t nodeid, struct statvfs *out);
	int (*access)(void *be, uint64_t nodeid, int mask);
	/* getxattr/listxattr: with size 0 return the size needed, else copy
	 * and return the length (-ERANGE if it does not fit). */
	int (*getxattr)(void *be, uint64_t nodeid, const char *name, void *buf,
			size_t size);
	int (*setxattr)(void *be, uint64_t nodeid, const char *name,
			const void *value, size_t size, int flags);
	int (*listxattr)(void *be, uint64_t nodeid, char *buf, size_t size);
	int (*removexattr)(void *be, uint64_t nodeid, const char *name);
	int (*lseek)(void *be, uint64_t fh, off_t off, int whence, off_t *res);
	int (*fallocate)(void *be, uint64_t fh, int mode, off_t off, off_t len);
	/* POSIX byte-range locks on an open handle (struct flock semantics,
	 * l_whence always SEEK_SET).  setlk never waits. */
	int (*getlk)(void *be, uint64_t fh, struct flock *fl);
	int (*setlk)(void *be, uint64_t fh, const struct flock *fl);
	/* DESTROY or a new INIT: drop every lookup and handle but the root. */
	void (*reset)(void *be);
	/* Fork (fuse_server_fork_save/_load); either may be NULL, and a
	 * server whose backend has no fork_save cannot be forked during a
	 * session.  fork_save appends the backend's tables (what the guest
	 * holds: node ids, lookup counts, open handles) to w; the server
	 * calls it with no other op in flight.  fork_load gets exactly those
	 * bytes (hostile: len may be anything) in a backend that is new
	 * (nothing looked up or opened since it was made or reset) over the
	 * same host folder and configuration; it checks every byte and takes
	 * them whole, or returns a negative errno with a line in err and
	 * stays as new.  Both return 0 or a negative errno. */
	int (*fork_save)(void *be, struct statebuf_writer *w, char *err, size_t errlen);
	int (*fork_load)(void *be, const uint8_t *p, size_t len, char *err, size_t errlen);
};

struct fuse_server_config {
	uint32_t max_write;     /* bytes; 0 = FUSE_SERVER_DEFAULT_MAX_WRITE */
	uint32_t max_readahead; /* bytes; 0 = take the guest's proposal */
	double entry_timeout;   /* seconds the guest may cache a name */
	double attr_timeout;    /* seconds the guest may cache attributes */
	bool posix_locks;       /* offer GETLK/SETLK/SETLKW */
	/* true: OPENDIR always gets a handle.  false (the default): when the
	 * kernel offers FUSE_NO_OPENDIR_SUPPORT, OPENDIR gets ENOSYS, and the
	 * kernel then opens directories without a message and sends no
	 * RELEASEDIR: two round trips fewer per directory listed. */
	bool keep_opendir;
	/* Host <-> guest ids (idmap.h): attributes go out mapped, a SETATTR's
	 * uid/gid and a request's own uid/gid (the owner of what it makes)
	 * come back mapped.  Zero: the identity, for kbox run as root. */
	struct idmap ids;
};

#define FUSE_SERVER_DEFAULT_MAX_WRITE (1u << 20)
/* Largest non-WRITE request: headers, two names and an xattr value. */
#define FUSE_SERVER_MAX_ARGS (64u * 1024 + 8192)
/* Largest iovec list the server accepts for one request or reply. */
#define FUSE_SERVER_MAX_IOV 1024

struct fuse_server;

/* Creates a server over a backend.  ops and be must outlive the server.
 * Returns 0 and *out, or -ENOMEM / -EINVAL (bad config). */
int fuse_server_new(const struct fuse_fs_ops *ops, void *be,
		    const struct fuse_server_config *cfg,
		    struct fuse_server **out);

/* Frees the server (not the backend). NULL is a no-op. */
void fuse_server_free(struct fuse_server *s);

/* Size of the request buffer a transport must offer so that the largest
 * request the server negotiates (a max_write WRITE) fits. */
size_t fuse_server_max_request(const struct fuse_server *s);

/* Handles one request.  in/in_cnt: the request bytes, in order, exactly
 * fuse_in_header.len long.  out/out_cnt: where the reply goes.  Returns the
 * number of reply bytes written (a fuse_out_header and its body), 0 when the
 * request takes no reply (FORGET, BATCH_FORGET, INTERRUPT), or a negative
 * errno when not even an error reply can be produced: -EINVAL when the
 * request is too short to carry a header or its len does not match, or the
 * reply area cannot hold a fuse_out_header.  Never reads or writes outside
 * the given buffers. */
ssize_t fuse_server_handle(struct fuse_server *s, const struct iovec *in,
			   int in_cnt, const struct iovec *out, int out_cnt);

/* Convenience for flat buffers: same as fuse_server_handle with one iovec
 * each way. */
ssize_t fuse_server_handle_buf(struct fuse_server *s, const void *req,
			       size_t req_len, void *reply, size_t reply_size);

/* True once the guest has sent DESTROY (the /dev/fuse harness then exits). */
bool fuse_server_destroyed(const struct fuse_server *s);

/* Whether a session is open (INIT done, no DESTROY or reset since). */
bool fuse_server_in_session(struct fuse_server *s);

/* The transport was reset under the guest: drop every lookup and handle
 * (closing their host fds) but the root, and wait for a new INIT. */
void fuse_server_reset(struct fuse_server *s);

/* Fork (docs/snapshots.md, "Fork: the virtio-fs node table"): the
 * session's state, for a server in another process over the same backend
 * folder and configuration.  fork_save appends to w, with no request in
 * flight (the VM paused): whether a session is open and what its INIT
 * negotiated (protocol minor, flags, max_readahead, max_write, whether
 * OPENDIR is skipped), the id map the guest sees, and during a session
 * the backend's tables (fuse_fs_ops.fork_save).  0, -EOPNOTSUPP (a
 * session over a backend that cannot save its tables) or -ENOMEM, with a
 * line in err.
 *
 * fork_load takes those bytes (hostile) into a server with no session
 * and a new backend: every field is checked against this server's own
 * configuration (a session negotiated what this server would not offer,
 * another max_write or id map: refused) and the backend checks its part.
 * 0, or a negative errno with a line in err and the server and backend
 * left as they were (-EBUSY: a session is open here already; -EINVAL or
 * -EBADMSG: bytes that do not describe a session of this server). */
int fuse_server_fork_save(struct fuse_server *s, struct statebuf_writer *w, char *err,
			  size_t errlen);
int fuse_server_fork_load(struct fuse_server *s, const uint8_t *p, size_t len, char *err,
			  size_t errlen);

#endif
