/* The passthrough backend's tables carried by a fork (fs_passthrough_priv.h;
 * docs/snapshots.md, "Fork: the virtio-fs node table").
 *
 * What goes: every node the guest may name (its nodeid, lookup count,
 * (dev, ino), type, parent and name, whether it is still findable by
 * (dev, ino) and whether it lost its name) and every open handle (its fh,
 * node, kind and open flags).  What does not: fds (a node's O_PATH fd is
 * opened on demand by name from its parent, as always, and must find the
 * same inode, else ESTALE), whether a directory folds names (learnt again
 * here, never believed from the bytes: it decides which spellings reach a
 * file), counts the tables derive (refs, pins) and the LRU.
 *
 * Layout, little-endian:
 *   header   magic "FSPT", version, root dev (u64), root ino (u64),
 *            node count (u32), handle count (u32)
 *   node     nodeid (u64), parent nodeid (u64), nlookup (u64), dev (u64),
 *            ino (u64), type (u32, S_IFMT bits), bits (u16: hashed,
 *            nameless), name length (u16), the name (no NUL)
 *   handle   fh (u64), nodeid (u64), open flags (u32), bits (u32: dir,
 *            stale)
 * Nodes come in increasing nodeid order, the root (nodeid 1) left out;
 * handles in increasing fh order.
 *
 * A load checks everything before it takes anything: the counts against
 * the bytes there are and a bound, nodeids and fhs strictly increasing
 * (so unique) and bounded, types known, bits known, names single
 * components that no hidden pattern matches at their path, parents that
 * are known directories with the root above them all (no cycle, at most
 * FS_PASSTHROUGH_MAX_DEPTH deep), one findable node per (dev, ino), no node
 * that nothing holds, handles on a known node of their kind.  Then the
 * tables replace the new backend's and each handle is opened again from
 * its node as OPEN and OPENDIR do (the O_PATH fd by name, the name the
 * host now has checked, the I/O fd through /proc/self/fd or ".") under
 * the fd cap; one that cannot be is kept stale. */
#include "devices/fs_passthrough_priv.h"

#include "lib/errbuf.h"
#include "lib/grow.h"
#include "lib/statebuf.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FS_PASSTHROUGH_FORK_MAGIC 0x54505346u /* "FSPT" */
#define FS_PASSTHROUGH_FORK_VERSION 1u
/* The highest nodeid and fh a fork carries: the tables are as large as
 * the highest one, so the bound is what the copy may be made to allocate. */
#define FS_PASSTHROUGH_FORK_MAX_NODES (1u << 21)
#define FS_PASSTHROUGH_FORK_MAX_HANDLES (1u << 20)
/* The smallest records: a node with a one-byte name, a handle. */
#define FS_PASSTHROUGH_FORK_NODE_LEN 49u
#define FS_PASSTHROUGH_FORK_HANDLE_LEN 24u
#define FS_PASSTHROUGH_FORK_HASHED 0x1u
#define FS_PASSTHROUGH_FORK_NAMELESS 0x2u
#define FS_PASSTHROUGH_FORK_NODE_BITS 0x3u
#define FS_PASSTHROUGH_FORK_DIR 0x1u
#define FS_PASSTHROUGH_FORK_STALE 0x2u
#define FS_PASSTHROUGH_FORK_HANDLE_BITS 0x3u
/* The open flags a handle is opened again with: those OPEN keeps
 * (fs_passthrough_open_flags) but O_TRUNC, which must not cut the file a
 * second time. */
#define FS_PASSTHROUGH_FORK_OPEN_FLAGS (O_ACCMODE | O_APPEND | O_SYNC | O_DSYNC)

/* A handle the guest still holds (RELEASE not sent). */
static bool fs_passthrough_fork_live(const struct fs_passthrough_handle *h)
{
	return (h->fd >= 0 || h->stale) && !h->closing;
}

int fs_passthrough_fork_save(void *be, struct statebuf_writer *w, char *err, size_t errlen)
{
	struct fs_passthrough *p = be;
	uint32_t nn = 0, nh = 0;

	fs_passthrough_lock(p);
	for (uint32_t i = 1; i < p->n_nodes; i++)
		nn += p->nodes[i].used;
	for (uint32_t i = 0; i < p->n_fhs; i++)
		nh += fs_passthrough_fork_live(&p->fhs[i]);
	if (p->n_nodes > FS_PASSTHROUGH_FORK_MAX_NODES || p->n_fhs > FS_PASSTHROUGH_FORK_MAX_HANDLES) {
		fs_passthrough_unlock(p);
		return errbuf_fail(err, errlen, -EFBIG,
				   "node ids up to %u and handles up to %u: more than a fork carries",
				   p->n_nodes, p->n_fhs);
	}
	statebuf_u32(w, FS_PASSTHROUGH_FORK_MAGIC);
	statebuf_u32(w, FS_PASSTHROUGH_FORK_VERSION);
	statebuf_u64(w, (uint64_t)p->nodes[0].dev);
	statebuf_u64(w, (uint64_t)p->nodes[0].ino);
	statebuf_u32(w, nn);
	statebuf_u32(w, nh);
	for (uint32_t i = 1; i < p->n_nodes; i++) {
		const struct fs_passthrough_node *n = &p->nodes[i];
		if (!n->used)
			continue;
		size_t nl = strlen(n->name);
		statebuf_u64(w, (uint64_t)i + 1);
		statebuf_u64(w, (uint64_t)n->parent + 1);
		statebuf_u64(w, n->nlookup);
		statebuf_u64(w, (uint64_t)n->dev);
		statebuf_u64(w, (uint64_t)n->ino);
		statebuf_u32(w, (uint32_t)n->type);
		statebuf_u16(w, (uint16_t)((n->hashed ? FS_PASSTHROUGH_FORK_HASHED : 0) |
					   (n->nameless ? FS_PASSTHROUGH_FORK_NAMELESS : 0)));
		statebuf_u16(w, (uint16_t)nl);
		statebuf_put(w, n->name, nl);
	}
	for (uint32_t i = 0; i < p->n_fhs; i++) {
		const struct fs_passthrough_handle *h = &p->fhs[i];
		if (!fs_passthrough_fork_live(h))
			continue;
		/* The flags the host file was opened with, as the kernel keeps
		 * them; one it cannot tell goes as stale. */
		int fl = h->stale || h->dir ? 0 : fcntl(h->fd, F_GETFL);
		bool stale = h->stale || fl < 0;
		statebuf_u64(w, i);
		statebuf_u64(w, (uint64_t)h->node + 1);
		statebuf_u32(w, stale ? 0 : (uint32_t)fl & FS_PASSTHROUGH_FORK_OPEN_FLAGS);
		statebuf_u32(w, (h->dir ? FS_PASSTHROUGH_FORK_DIR : 0) |
					(stale ? FS_PASSTHROUGH_FORK_STALE : 0));
	}
	fs_passthrough_unlock(p);
	return w->err ? errbuf_fail(err, errlen, w->err, "cannot save its node table: %s",
				    strerror(-w->err)) :
			0;
}

/* What a load builds before it takes it: the tables, each handle's open
 * flags, and scratch for the checks. */
struct fs_passthrough_fork_tables {
	struct fs_passthrough_node *nodes;
	size_t cap_nodes;
	uint32_t n_nodes, n_live;
	struct fs_passthrough_handle *fhs;
	uint32_t *flags; /* per fh */
	size_t cap_fhs, cap_flags;
	uint32_t n_fhs;
	uint32_t *hash;
	uint32_t hash_size;
};

static void fs_passthrough_fork_tables_free(struct fs_passthrough_fork_tables *t)
{
	for (uint32_t i = 1; i < t->n_nodes; i++)
		if (t->nodes[i].used)
			free(t->nodes[i].name);
	free(t->nodes);
	free(t->fhs);
	free(t->flags);
	free(t->hash);
}

/* Whether type is one a lookup can have found. */
static bool fs_passthrough_fork_type_ok(uint32_t type)
{
	return type == S_IFREG || type == S_IFDIR || type == S_IFLNK || type == S_IFIFO ||
	       type == S_IFSOCK || type == S_IFCHR || type == S_IFBLK;
}

/* Reads the node records into t (nodes[0] stands for the root). */
static int fs_passthrough_fork_read_nodes(struct fs_passthrough_fork_tables *t,
					  struct statebuf_reader *r, uint32_t count, char *err,
					  size_t errlen)
{
	char name[NAME_MAX + 1];
	uint64_t prev = 1;

	if (grow_array(&t->nodes, &t->cap_nodes, 1, sizeof *t->nodes, 64, 0) < 0)
		return errbuf_fail(err, errlen, -ENOMEM, "no memory for the node table");
	t->nodes[0] = (struct fs_passthrough_node){ .fd = -1, .used = true, .hashed = true,
						    .type = S_IFDIR,
						    .parent = FS_PASSTHROUGH_NONE };
	t->n_nodes = 1;
	t->n_live = 1;
	for (uint32_t k = 0; k < count; k++) {
		uint64_t id = statebuf_get_u64(r), parent = statebuf_get_u64(r);
		uint64_t nlookup = statebuf_get_u64(r), dev = statebuf_get_u64(r);
		uint64_t ino = statebuf_get_u64(r);
		uint32_t type = statebuf_get_u32(r);
		uint16_t bits = statebuf_get_u16(r), nl = statebuf_get_u16(r);
		if (r->err)
			return errbuf_fail(err, errlen, -EBADMSG, "node %u of %u cut short", k, count);
		if (id <= prev || id > FS_PASSTHROUGH_FORK_MAX_NODES)
			return errbuf_fail(err, errlen, -EINVAL,
					   "node id %llu after %llu (increasing, at most %u)",
					   (unsigned long long)id, (unsigned long long)prev,
					   FS_PASSTHROUGH_FORK_MAX_NODES);
		prev = id;
		if (parent == 0 || parent > FS_PASSTHROUGH_FORK_MAX_NODES)
			return errbuf_fail(err, errlen, -EINVAL, "node %llu: parent %llu",
					   (unsigned long long)id, (unsigned long long)parent);
		if (!fs_passthrough_fork_type_ok(type) || (bits & ~FS_PASSTHROUGH_FORK_NODE_BITS) ||
		    nlookup > INT64_MAX)
			return errbuf_fail(err, errlen, -EINVAL,
					   "node %llu: type %#o, bits %#x, %llu lookups",
					   (unsigned long long)id, type, bits,
					   (unsigned long long)nlookup);
		if (nl == 0 || nl > NAME_MAX)
			return errbuf_fail(err, errlen, -EINVAL, "node %llu: a name of %u bytes",
					   (unsigned long long)id, nl);
		statebuf_get(r, name, nl);
		name[nl] = '\0';
		if (r->err)
			return errbuf_fail(err, errlen, -EBADMSG, "node %llu: name cut short",
					   (unsigned long long)id);
		if (memchr(name, '\0', nl) || fs_passthrough_check_name(name) < 0)
			return errbuf_fail(err, errlen, -EINVAL, "node %llu: not one entry name",
					   (unsigned long long)id);
		uint32_t i = (uint32_t)(id - 1);
		if (grow_array(&t->nodes, &t->cap_nodes, (size_t)i + 1, sizeof *t->nodes, 64, 0) < 0)
			return errbuf_fail(err, errlen, -ENOMEM, "no memory for the node table");
		for (; t->n_nodes < i; t->n_nodes++)
			t->nodes[t->n_nodes] = (struct fs_passthrough_node){ .fd = -1 };
		char *nm = strdup(name);
		if (!nm)
			return errbuf_fail(err, errlen, -ENOMEM, "no memory for the node table");
		t->nodes[i] = (struct fs_passthrough_node){
			.fd = -1, .used = true, .hashed = bits & FS_PASSTHROUGH_FORK_HASHED,
			.type = (mode_t)type, .dev = (dev_t)dev, .ino = (ino_t)ino,
			.nlookup = nlookup, .nameless = bits & FS_PASSTHROUGH_FORK_NAMELESS,
			.folds = -1, .parent = (uint32_t)(parent - 1), .name = nm,
			.lru_prev = FS_PASSTHROUGH_NONE, .lru_next = FS_PASSTHROUGH_NONE,
		};
		t->n_nodes = i + 1;
		t->n_live++;
	}
	return 0;
}

/* Reads the handle records into t, each on a known node of its kind. */
static int fs_passthrough_fork_read_handles(struct fs_passthrough_fork_tables *t,
					    struct statebuf_reader *r, uint32_t count, char *err,
					    size_t errlen)
{
	uint64_t next = 0;

	for (uint32_t k = 0; k < count; k++) {
		uint64_t fh = statebuf_get_u64(r), id = statebuf_get_u64(r);
		uint32_t flags = statebuf_get_u32(r), bits = statebuf_get_u32(r);
		if (r->err)
			return errbuf_fail(err, errlen, -EBADMSG, "handle %u of %u cut short", k,
					   count);
		if (fh < next || fh >= FS_PASSTHROUGH_FORK_MAX_HANDLES)
			return errbuf_fail(err, errlen, -EINVAL,
					   "handle %llu (increasing from %llu, below %u)",
					   (unsigned long long)fh, (unsigned long long)next,
					   FS_PASSTHROUGH_FORK_MAX_HANDLES);
		next = fh + 1;
		bool dir = bits & FS_PASSTHROUGH_FORK_DIR;
		const struct fs_passthrough_node *n =
			id >= 1 && id <= t->n_nodes && t->nodes[id - 1].used ? &t->nodes[id - 1] : NULL;
		if ((bits & ~FS_PASSTHROUGH_FORK_HANDLE_BITS) || !n ||
		    n->type != (dir ? S_IFDIR : S_IFREG) || (flags & O_ACCMODE) == O_ACCMODE)
			return errbuf_fail(err, errlen, -EINVAL,
					   "handle %llu: node %llu, bits %#x, flags %#x",
					   (unsigned long long)fh, (unsigned long long)id, bits, flags);
		uint32_t i = (uint32_t)fh;
		if (grow_array(&t->fhs, &t->cap_fhs, (size_t)i + 1, sizeof *t->fhs, 16, 0) < 0 ||
		    grow_array(&t->flags, &t->cap_flags, (size_t)i + 1, sizeof *t->flags, 16, 0) < 0)
			return errbuf_fail(err, errlen, -ENOMEM, "no memory for the handle table");
		for (; t->n_fhs < i; t->n_fhs++)
			t->fhs[t->n_fhs] = (struct fs_passthrough_handle){ .fd = -1 };
		t->fhs[i] = (struct fs_passthrough_handle){
			.fd = -1, .dir = dir, .stale = true, .node = (uint32_t)(id - 1),
			.next_free = FS_PASSTHROUGH_NONE,
		};
		/* Opened again only if it was open: a stale one stays so. */
		t->flags[i] = bits & FS_PASSTHROUGH_FORK_STALE ? UINT32_MAX :
				dir ? 0 : flags & FS_PASSTHROUGH_FORK_OPEN_FLAGS;
		t->n_fhs = i + 1;
	}
	return 0;
}

/* Every parent a known directory, the root above every node, no chain
 * deeper than FS_PASSTHROUGH_MAX_DEPTH. */
static int fs_passthrough_fork_check_tree(struct fs_passthrough_fork_tables *t, char *err,
					  size_t errlen)
{
	/* depth[i]: 0 not known yet, UINT32_MAX on the walk being made. */
	uint32_t *depth = calloc(t->n_nodes, sizeof *depth);
	uint32_t *walk = malloc(sizeof *walk * t->n_nodes);
	int rc = 0;

	if (!depth || !walk) {
		free(depth);
		free(walk);
		return errbuf_fail(err, errlen, -ENOMEM, "no memory to check the node table");
	}
	for (uint32_t i = 1; i < t->n_nodes && rc == 0; i++) {
		const struct fs_passthrough_node *n = &t->nodes[i];
		if (!n->used)
			continue;
		const struct fs_passthrough_node *pn = n->parent < t->n_nodes ? &t->nodes[n->parent] : NULL;
		if (!pn || !pn->used || pn->type != S_IFDIR)
			rc = errbuf_fail(err, errlen, -EINVAL, "node %u: parent %u is no known directory",
					 i + 1, n->parent + 1);
	}
	depth[0] = 1;
	for (uint32_t i = 1; i < t->n_nodes && rc == 0; i++) {
		if (!t->nodes[i].used)
			continue;
		uint32_t nw = 0, j = i;
		while (depth[j] == 0) {
			depth[j] = UINT32_MAX;
			walk[nw++] = j;
			j = t->nodes[j].parent;
		}
		if (depth[j] == UINT32_MAX) {
			rc = errbuf_fail(err, errlen, -EINVAL, "node %u is its own ancestor", j + 1);
			break;
		}
		for (uint32_t d = depth[j]; nw > 0; nw--) {
			if (++d > FS_PASSTHROUGH_MAX_DEPTH) {
				rc = errbuf_fail(err, errlen, -EINVAL, "node %u lies deeper than %u",
						 walk[nw - 1] + 1, FS_PASSTHROUGH_MAX_DEPTH);
				break;
			}
			depth[walk[nw - 1]] = d;
		}
	}
	free(depth);
	free(walk);
	return rc;
}

/* The path from the root of directory node i into buf (PATH_MAX bytes),
 * "" for the root; -ENAMETOOLONG past PATH_MAX.  The tree is checked. */
static int fs_passthrough_fork_path(const struct fs_passthrough_fork_tables *t, uint32_t i,
				    char *buf)
{
	size_t at = PATH_MAX - 1;

	buf[at] = '\0';
	for (; i != 0; i = t->nodes[i].parent) {
		size_t l = strlen(t->nodes[i].name);
		if (l + 1 > at)
			return -ENAMETOOLONG;
		at -= l;
		memcpy(buf + at, t->nodes[i].name, l);
		if (t->nodes[i].parent != 0)
			buf[--at] = '/';
	}
	memmove(buf, buf + at, PATH_MAX - at);
	return 0;
}

/* No node under a name the guest could not look up. */
static int fs_passthrough_fork_check_hidden(struct fs_passthrough *p,
					    const struct fs_passthrough_fork_tables *t, char *err,
					    size_t errlen)
{
	char *path = NULL;
	bool paths = fs_hidden_needs_path(p->hid);

	if (paths && !(path = malloc(PATH_MAX)))
		return errbuf_fail(err, errlen, -ENOMEM, "no memory to check the node table");
	int rc = 0;
	for (uint32_t i = 1; i < t->n_nodes && rc == 0; i++) {
		const struct fs_passthrough_node *n = &t->nodes[i];
		if (!n->used)
			continue;
		if (paths && fs_passthrough_fork_path(t, n->parent, path) < 0)
			rc = errbuf_fail(err, errlen, -EINVAL, "node %u: a path longer than %d", i + 1,
					 PATH_MAX);
		else if (fs_hidden_hidden(p->hid, paths ? path : NULL, n->name) != 0)
			rc = errbuf_fail(err, errlen, -EINVAL, "node %u: a hidden name", i + 1);
	}
	free(path);
	return rc;
}

struct fs_passthrough_fork_key {
	uint64_t dev, ino;
	uint32_t node;
};

static int fs_passthrough_fork_key_cmp(const void *a, const void *b)
{
	const struct fs_passthrough_fork_key *x = a, *y = b;
	if (x->dev != y->dev)
		return x->dev < y->dev ? -1 : 1;
	return x->ino < y->ino ? -1 : x->ino > y->ino;
}

/* At most one findable node per (dev, ino), as a lookup keeps it. */
static int fs_passthrough_fork_check_unique(const struct fs_passthrough_fork_tables *t,
					    char *err, size_t errlen)
{
	struct fs_passthrough_fork_key *k = malloc(sizeof *k * t->n_nodes);
	uint32_t nk = 0;
	int rc = 0;

	if (!k)
		return errbuf_fail(err, errlen, -ENOMEM, "no memory to check the node table");
	for (uint32_t i = 0; i < t->n_nodes; i++)
		if (t->nodes[i].used && t->nodes[i].hashed)
			k[nk++] = (struct fs_passthrough_fork_key){ (uint64_t)t->nodes[i].dev,
								    (uint64_t)t->nodes[i].ino, i };
	qsort(k, nk, sizeof *k, fs_passthrough_fork_key_cmp);
	for (uint32_t i = 1; i < nk && rc == 0; i++)
		if (k[i].dev == k[i - 1].dev && k[i].ino == k[i - 1].ino)
			rc = errbuf_fail(err, errlen, -EINVAL, "nodes %u and %u: one inode",
					 k[i - 1].node + 1, k[i].node + 1);
	free(k);
	return rc;
}

/* refs and pins as the tables keep them (children, handles, a lost
 * name), and no node that nothing holds. */
static int fs_passthrough_fork_count_refs(struct fs_passthrough_fork_tables *t, char *err,
					  size_t errlen)
{
	for (uint32_t i = 1; i < t->n_nodes; i++) {
		struct fs_passthrough_node *n = &t->nodes[i];
		if (!n->used)
			continue;
		t->nodes[n->parent].refs++;
		n->pins += n->nameless;
	}
	for (uint32_t i = 0; i < t->n_fhs; i++) {
		if (!t->fhs[i].stale) /* every handle read is stale until opened */
			continue;
		t->nodes[t->fhs[i].node].refs++;
		t->nodes[t->fhs[i].node].pins++;
	}
	for (uint32_t i = 1; i < t->n_nodes; i++)
		if (t->nodes[i].used && t->nodes[i].nlookup == 0 && t->nodes[i].refs == 0)
			return errbuf_fail(err, errlen, -EINVAL,
					   "node %u: no lookup, no child, no handle", i + 1);
	return 0;
}

/* The bucket array the loaded nodes are hashed into, made before the
 * tables are taken so that taking them cannot fail. */
static int fs_passthrough_fork_alloc_hash(struct fs_passthrough_fork_tables *t, char *err,
					  size_t errlen)
{
	uint32_t size = 256;
	while (size < (1u << 30) && t->n_live > size * 2)
		size *= 2;
	t->hash = malloc(sizeof *t->hash * size);
	if (!t->hash)
		return errbuf_fail(err, errlen, -ENOMEM, "no memory for the node hash");
	t->hash_size = size;
	return 0;
}

/* The checked tables replace p's (which hold the root alone); lock held.
 * Every handle is stale until fs_passthrough_fork_open gives it an fd. */
static void fs_passthrough_fork_take(struct fs_passthrough *p, struct fs_passthrough_fork_tables *t)
{
	struct fs_passthrough_node root = p->nodes[0];

	root.refs = t->nodes[0].refs;
	root.pins = t->nodes[0].pins;
	t->nodes[0] = root;
	free(p->nodes);
	p->nodes = t->nodes;
	p->cap_nodes = t->cap_nodes;
	p->n_nodes = t->n_nodes;
	p->n_live = t->n_live;
	p->free_node = FS_PASSTHROUGH_NONE;
	for (uint32_t i = p->n_nodes; i-- > 1;) {
		if (p->nodes[i].used)
			continue;
		p->nodes[i].hnext = p->free_node;
		p->free_node = i;
	}
	free(p->hash);
	p->hash = t->hash;
	p->hash_size = t->hash_size;
	fs_passthrough_hash_all(p);
	free(p->fhs);
	p->fhs = t->fhs;
	p->cap_fhs = t->cap_fhs;
	p->n_fhs = t->n_fhs;
	p->free_fh = FS_PASSTHROUGH_NONE;
	for (uint32_t i = p->n_fhs; i-- > 0;) {
		if (p->fhs[i].stale)
			continue;
		p->fhs[i].next_free = p->free_fh;
		p->free_fh = i;
	}
	p->lru_head = p->lru_tail = FS_PASSTHROUGH_NONE;
	t->nodes = NULL;
	t->fhs = NULL;
	t->hash = NULL;
	t->n_nodes = t->n_fhs = 0;
}

/* Opens handle i again from its node with flags, as OPEN or OPENDIR
 * would; lock held.  The fd, or a negative errno (the handle stays
 * stale). */
static int fs_passthrough_fork_open(struct fs_passthrough *p, uint32_t i, uint32_t flags)
{
	struct fs_passthrough_handle *h = &p->fhs[i];
	char name[32];
	int fd;

	if (p->ro && !h->dir && (flags & O_ACCMODE) != O_RDONLY)
		return -EROFS;
	int rc = fs_passthrough_reserve(p);
	if (rc < 0)
		return rc;
	int nfd = fs_passthrough_node_fd(p, &p->nodes[h->node]);
	if (nfd >= 0)
		nfd = fs_passthrough_check_current(p, nfd) < 0 ? -ESTALE : nfd;
	if (nfd < 0) {
		fs_passthrough_unreserve(p);
		return nfd;
	}
	if (h->dir) {
		fd = openat(nfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	} else {
		snprintf(name, sizeof name, "%d", nfd);
		fd = openat(p->proc_fd, name, (int)flags | O_CLOEXEC | O_NOCTTY);
	}
	if (fd < 0) {
		rc = -errno;
		fs_passthrough_unreserve(p);
		return rc;
	}
	return fd;
}

int fs_passthrough_fork_load(void *be, const uint8_t *bytes, size_t len, char *err, size_t errlen)
{
	struct fs_passthrough *p = be;
	struct fs_passthrough_fork_tables t;
	struct statebuf_reader r;
	int rc;

	memset(&t, 0, sizeof t);
	statebuf_reader_init(&r, bytes, len);
	uint32_t magic = statebuf_get_u32(&r), version = statebuf_get_u32(&r);
	uint64_t dev = statebuf_get_u64(&r), ino = statebuf_get_u64(&r);
	uint32_t nn = statebuf_get_u32(&r), nh = statebuf_get_u32(&r);
	if (r.err)
		return errbuf_fail(err, errlen, -EBADMSG, "node table cut short (%zu bytes)", len);
	if (magic != FS_PASSTHROUGH_FORK_MAGIC || version != FS_PASSTHROUGH_FORK_VERSION)
		return errbuf_fail(err, errlen, -EINVAL, "not a node table (version %u)", version);
	size_t left = statebuf_left(&r);
	if (nn >= FS_PASSTHROUGH_FORK_MAX_NODES || nh > FS_PASSTHROUGH_FORK_MAX_HANDLES ||
	    (size_t)nn * FS_PASSTHROUGH_FORK_NODE_LEN + (size_t)nh * FS_PASSTHROUGH_FORK_HANDLE_LEN >
		    left)
		return errbuf_fail(err, errlen, -EBADMSG,
				   "%u nodes and %u handles in %zu bytes", nn, nh, left);
	fs_passthrough_lock(p);
	if (p->n_live != 1 || p->n_nodes != 1 || p->n_fhs != 0 || p->fds != 0) {
		fs_passthrough_unlock(p);
		return errbuf_fail(err, errlen, -EBUSY, "the file system is in use here already");
	}
	if (dev != (uint64_t)p->nodes[0].dev || ino != (uint64_t)p->nodes[0].ino) {
		fs_passthrough_unlock(p);
		return errbuf_fail(err, errlen, -EINVAL,
				   "the table of another folder (root %llu:%llu, here %llu:%llu)",
				   (unsigned long long)dev, (unsigned long long)ino,
				   (unsigned long long)p->nodes[0].dev,
				   (unsigned long long)p->nodes[0].ino);
	}
	rc = fs_passthrough_fork_read_nodes(&t, &r, nn, err, errlen);
	if (rc == 0)
		rc = fs_passthrough_fork_read_handles(&t, &r, nh, err, errlen);
	if (rc == 0 && statebuf_left(&r) != 0)
		rc = errbuf_fail(err, errlen, -EBADMSG, "%zu bytes after the tables",
				 statebuf_left(&r));
	if (rc == 0)
		rc = fs_passthrough_fork_check_tree(&t, err, errlen);
	if (rc == 0)
		rc = fs_passthrough_fork_check_hidden(p, &t, err, errlen);
	if (rc == 0)
		rc = fs_passthrough_fork_check_unique(&t, err, errlen);
	if (rc == 0)
		rc = fs_passthrough_fork_count_refs(&t, err, errlen);
	if (rc == 0)
		rc = fs_passthrough_fork_alloc_hash(&t, err, errlen);
	if (rc < 0) {
		fs_passthrough_unlock(p);
		fs_passthrough_fork_tables_free(&t);
		return rc;
	}
	uint32_t *flags = t.flags;
	t.flags = NULL;
	fs_passthrough_fork_take(p, &t);
	for (uint32_t i = 0; i < p->n_fhs; i++) {
		if (!p->fhs[i].stale || flags[i] == UINT32_MAX)
			continue;
		int fd = fs_passthrough_fork_open(p, i, flags[i]);
		if (fd >= 0) {
			p->fhs[i].fd = fd;
			p->fhs[i].stale = false;
		}
	}
	fs_passthrough_unlock(p);
	free(flags);
	return 0;
}
