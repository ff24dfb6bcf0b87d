/* What the two files of the passthrough backend share: fs_passthrough.c
 * (the operations, the name rules, creation) and fs_passthrough_table.c
 * (the node and handle tables: which inodes the guest knows, their O_PATH
 * fds under the cap, the open handles).  Not for anyone else: the public
 * face is fs_passthrough.h.  "Lock held" means struct fs_passthrough's mu. */
#ifndef KBOX_DEVICES_FS_PASSTHROUGH_PRIV_H
#define KBOX_DEVICES_FS_PASSTHROUGH_PRIV_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "devices/fs_hidden.h"
#include "devices/fs_passthrough.h"
#include "lib/statebuf.h"

#define FS_PASSTHROUGH_NONE UINT32_MAX
#define FS_PASSTHROUGH_XATTR_LIST_MAX 65536
/* Longest chain of parents reopened for one node: deeper trees get ESTALE
 * rather than an unbounded walk. */
#define FS_PASSTHROUGH_MAX_DEPTH 4096

/* An inode the guest knows.  It is remembered by (dev, ino) and by the name
 * it was last seen under in its parent; the O_PATH fd is opened only when an
 * operation needs it and may be closed again (least recently used first)
 * when the fd cap is reached.  Reopening goes through the parent's fd with
 * the same openat2 rules as a lookup, and the result must be the same inode
 * of the same type, else the guest gets ESTALE: a reopen never reaches
 * anything a fresh lookup could not.  The LRU holds the nodes whose fd is
 * open and not pinned, the root excepted.  Every field is guarded by the
 * backend's lock. */
struct fs_passthrough_node {
	int fd; /* O_PATH|O_NOFOLLOW, -1 while closed */
	bool used; /* the slot holds an inode */
	bool hashed; /* findable by (dev, ino); false once superseded */
	mode_t type;
	dev_t dev;
	ino_t ino;
	uint64_t nlookup;
	uint64_t gen; /* the reopen walk that last used fd */
	/* Child nodes, handles and operations in flight naming it: a node
	 * with refs is never freed, whatever FORGET says meanwhile. */
	uint32_t refs;
	/* Open handles and operations in flight, plus one once it lost the
	 * name it is known by (unlink, rename over it): while pinned the fd
	 * stays open, outside the LRU (an operation uses it without the lock;
	 * a nameless node could not be reopened by name). */
	uint32_t pins;
	bool nameless;
	/* A directory whose host file system takes one name for another
	 * (case folding, dropped trailing dots): 1 yes, 0 no, -1 not known
	 * yet (fs_passthrough_probe_folds). */
	signed char folds;
	uint32_t parent; /* index, FS_PASSTHROUGH_NONE for the root */
	char *name; /* in parent; NULL for the root */
	uint32_t hnext; /* hash chain, or the free list when unused */
	uint32_t lru_prev, lru_next; /* nodes holding an fd, root excluded */
};

/* An open file or directory.  busy counts the operations using fd without
 * the lock; RELEASE marks the handle closing and the last of them closes
 * it, so a READ racing RELEASE never uses a closed (or reused) fd. */
struct fs_passthrough_handle {
	int fd; /* -1 when free or stale */
	bool dir;
	/* Carried over by a fork but not reopened there (the file deleted,
	 * replaced or out of reach): every operation on it gives ESTALE
	 * and RELEASE frees it.  It holds its node as any handle, no fd. */
	bool stale;
	bool closing; /* released; no new operation may start on it */
	uint32_t busy;
	uint32_t node; /* its node (one ref and one pin) */
	uint32_t next_free;
};

/* Several threads may call the ops at once.  mu guards the tables (nodes,
 * hash, LRU, handles) and the fd count.  It is held for table work, for
 * reopening a node's fd, for the hidden-name check, and across RENAME,
 * UNLINK and RMDIR whole, so that a node's recorded name always matches
 * the host when a reopen runs.  It is released around the syscalls the
 * other requests exist for (the fstatat of LOOKUP and READDIRPLUS, file
 * I/O, getdents, fsync, the opens of handles, xattrs, readlink); the fds
 * they use are pinned (node) or busy (handle) first.  Config fields
 * (proc_fd, ro, hidden, root_path) never change after fs_passthrough_new. */
struct fs_passthrough {
	pthread_mutex_t mu;
	int proc_fd;
	bool ro;
	struct fsh *hid;
	char *root_path;
	size_t root_len;
	struct fs_passthrough_node *nodes; /* nodeid = index + 1; index 0 is the root */
	uint32_t n_nodes, free_node;
	size_t cap_nodes;
	uint32_t *hash; /* bucket heads, FS_PASSTHROUGH_NONE terminated */
	uint32_t hash_size, n_live;
	uint32_t lru_head, lru_tail; /* most and least recently used */
	uint64_t gen; /* bumped by every reopen walk and fd reservation */
	struct fs_passthrough_handle *fhs; /* fh = index */
	uint32_t n_fhs, free_fh;
	size_t cap_fhs;
	unsigned fds, max_fds;
};

/* Take p->mu ("lock held" in the contracts below). */
static inline void fs_passthrough_lock(struct fs_passthrough *p)
{
	pthread_mutex_lock(&p->mu);
}

/* Let go of p->mu. */
static inline void fs_passthrough_unlock(struct fs_passthrough *p)
{
	pthread_mutex_unlock(&p->mu);
}

/* The node the guest names, or NULL if it is not one it holds. */
static inline struct fs_passthrough_node *fs_passthrough_node(struct fs_passthrough *p, uint64_t nodeid)
{
	if (nodeid == 0 || nodeid > p->n_nodes)
		return NULL;
	struct fs_passthrough_node *n = &p->nodes[nodeid - 1];
	return n->used && (n->nlookup > 0 || nodeid == 1) ? n : NULL;
}

/* Node n's index in the table (its nodeid less one). */
static inline uint32_t fs_passthrough_index(const struct fs_passthrough *p, const struct fs_passthrough_node *n)
{
	return (uint32_t)(n - p->nodes);
}

/* Rebuilds the (dev, ino) hash with size buckets (a power of two);
 * lock held.  0 or -ENOMEM (the old hash then stays). */
int fs_passthrough_rehash(struct fs_passthrough *p, uint32_t size);

/* Fills p->hash (hash_size buckets) with every hashed node; lock held. */
void fs_passthrough_hash_all(struct fs_passthrough *p);

/* The node remembered for (dev, ino), or NULL; lock held. */
struct fs_passthrough_node *fs_passthrough_find(struct fs_passthrough *p, dev_t dev, ino_t ino);

/* Takes node i out of the (dev, ino) hash: a newer inode has its number;
 * lock held. */
void fs_passthrough_unhash(struct fs_passthrough *p, uint32_t i);

/* Keeps node i's fd open and out of the LRU until fs_passthrough_unpin; lock held. */
void fs_passthrough_pin(struct fs_passthrough *p, uint32_t i);

/* A fresh node for st, named name in parent (FS_PASSTHROUGH_NONE for the root), with
 * no fd and no lookups yet.  Returns the index or a negative errno. */
int64_t fs_passthrough_insert(struct fs_passthrough *p, const struct stat *st, uint32_t parent,
		   const char *name);

/* Records that node i is now called name in parent.  A directory is never
 * made its own ancestor (stale names after host renames could otherwise
 * make a loop); it then keeps its old name. */
void fs_passthrough_rename_node(struct fs_passthrough *p, uint32_t i, uint32_t parent, const char *name);

/* openat2 of name beneath dirfd: no symlinks, no magic links, no "..";
 * flags gain O_NOFOLLOW|O_CLOEXEC.  The fd or a negative errno. */
int fs_passthrough_open_beneath(int dirfd, const char *name, uint64_t flags,
		     uint64_t mode);

/* Node n's O_PATH fd, reopened (parents first) if it was closed; lock
 * held.  The caller pins n (fs_passthrough_hold) before it unlocks and uses the fd. */
int fs_passthrough_node_fd(struct fs_passthrough *p, struct fs_passthrough_node *n);

/* Keeps node i (its slot, and its fd once open) for an operation that
 * unlocks; lock held.  fs_passthrough_drop undoes it. */
void fs_passthrough_hold(struct fs_passthrough *p, uint32_t i);
void fs_passthrough_drop(struct fs_passthrough *p, uint32_t i);

/* fs_passthrough_drop for a caller without the lock. */
void fs_passthrough_put(struct fs_passthrough *p, uint32_t i);

/* The guest's node nodeid, held, and its open fd; lock held. */
int fs_passthrough_get(struct fs_passthrough *p, uint64_t nodeid, uint32_t *idx);

/* fs_passthrough_get for a caller without the lock. */
int fs_passthrough_get_unlocked(struct fs_passthrough *p, uint64_t nodeid, uint32_t *idx);

/* Counts one more host fd under the cap before it is opened without the
 * lock, so that racing opens cannot overshoot; lock held.  fs_passthrough_unreserve
 * gives it back if the open fails. */
int fs_passthrough_reserve(struct fs_passthrough *p);
void fs_passthrough_unreserve(struct fs_passthrough *p);

/* FORGET: nlookup of node nodeid's lookups are over (the root's never
 * are); with none left the node goes once nothing holds it.  Lock held. */
void fs_passthrough_forget_locked(struct fs_passthrough *p, uint64_t nodeid, uint64_t nlookup);

/* The open handle fh of that kind, or NULL (a stale one too); lock held. */
struct fs_passthrough_handle *fs_passthrough_fh(struct fs_passthrough *p, uint64_t fh, bool dir);

/* Marks handle fh busy and returns its fd (and its node in *node if
 * asked), or -EBADF (-ESTALE for a stale handle, which is not marked);
 * called without the lock.  fs_passthrough_fh_put ends the use. */
int fs_passthrough_fh_get(struct fs_passthrough *p, uint64_t fh, bool dir, uint32_t *node);

/* Ends a use begun by fs_passthrough_fh_get; the last use of a released handle
 * closes it.  Called without the lock. */
void fs_passthrough_fh_put(struct fs_passthrough *p, uint64_t fh);

/* Takes ownership of fd, whose place under the cap fs_passthrough_reserve counted;
 * lock held.  The handle keeps its node and the node's fd (open, see
 * fs_passthrough_node_fd) until it is closed: a file unlinked while open still
 * answers GETATTR. */
int fs_passthrough_fh_new(struct fs_passthrough *p, int fd, bool dir, uint32_t node, uint64_t *fh);

/* RELEASE: no new operation starts on fh; the last one running closes it. */
int fs_passthrough_fh_close(struct fs_passthrough *p, uint64_t fh, bool dir);

/* The ops table's reset: every handle closed, every node but the root
 * forgotten.  The server calls it with no other call in flight
 * (fuse_server.h), so no handle is busy and no node held. */
void fs_passthrough_reset(void *be);

/* ---- fs_passthrough_fork.c: the tables carried by a fork ---- */

/* fuse_fs_ops.fork_save and fork_load for the passthrough backend
 * (fuse_server.h); the layout is in fs_passthrough_fork.c. */
int fs_passthrough_fork_save(void *be, struct statebuf_writer *w, char *err, size_t errlen);
int fs_passthrough_fork_load(void *be, const uint8_t *p, size_t len, char *err, size_t errlen);

/* ---- fs_passthrough_names.c: which names the guest may reach ---- */

/* One record of getdents64. */
struct fs_passthrough_dirent64 {
	uint64_t d_ino;
	int64_t d_off;
	unsigned short d_reclen;
	unsigned char d_type;
	char d_name[];
};

/* 0 if name is one entry name (not empty, no '/', not "." or ".."), else
 * -EINVAL, or -ENAMETOOLONG past NAME_MAX. */
int fs_passthrough_check_name(const char *name);

/* The path of directory fd relative to the root ("" for the root), from
 * the kernel's own record.  Fails closed when it cannot be established. */
int fs_passthrough_rel_path(struct fs_passthrough *p, int dirfd, char *buf, size_t size);

/* fs_passthrough_hidden_at for name in directory dirfd, its path read when needed. */
int fs_passthrough_hidden(struct fs_passthrough *p, int dirfd, const char *name);

/* On a host directory that takes one name for another (case-insensitive
 * vfat, exFAT, SMB, ext4 casefold, ...), the guest may reach an entry only
 * by the spelling the directory lists: else "ENV~1" (vfat's short name),
 * ".env." or a Unicode case variant would open a hidden .env that the
 * patterns, matched on the name given, never see.  name found st in
 * directory node di (fd dirfd); lock held.  0, or -ENOENT for another
 * spelling.  Whether the directory folds is learnt from the first name
 * that can tell (fs_passthrough_probe_folds) and kept: it does not change. */
int fs_passthrough_spelling(struct fs_passthrough *p, uint32_t di, int dirfd, const char *name,
		 const struct stat *st);

/* fs_passthrough_spelling for a name that may not exist: a missing name is no
 * other spelling.  Lock held. */
int fs_passthrough_spelling_at(struct fs_passthrough *p, uint32_t di, int dirfd, const char *name);

/* The host may rename a file the guest has looked up, to a hidden name or
 * out of the mount, while the node keeps its fd open (a reopen by the
 * old name would give ESTALE, but an open fd follows the inode).  So
 * OPEN, directory listings, LINK and xattrs check the name the kernel
 * now records for the inode of fd, every component from the root:
 * -ESTALE if one is hidden or the inode lies outside the root (the
 * guest's kernel then looks the path up again and finds what is there).
 * An inode with no name left (unlinked while the guest holds it) has
 * nothing to check.  Called without the lock, fd pinned. */
int fs_passthrough_check_current(struct fs_passthrough *p, int fd);

#endif
