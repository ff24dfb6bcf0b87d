/* The passthrough backend's tables (fs_passthrough_priv.h): the nodes the
 * guest knows, hashed by (dev, ino), their O_PATH fds reopened on demand
 * and closed least recently used first under the fd cap, and the open
 * handles.  The operations that use them are in fs_passthrough.c. */
#include "devices/fs_passthrough_priv.h"

#include "lib/grow.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static uint32_t fs_passthrough_hash(const struct fs_passthrough *p, dev_t dev, ino_t ino)
{
	uint64_t h = (uint64_t)ino * 0x9e3779b97f4a7c15ull ^ (uint64_t)dev;
	h ^= h >> 29;
	return (uint32_t)(h & (p->hash_size - 1));
}

int fs_passthrough_rehash(struct fs_passthrough *p, uint32_t size)
{
	uint32_t *h = malloc(sizeof *h * size);

	if (!h)
		return -ENOMEM;
	free(p->hash);
	p->hash = h;
	p->hash_size = size;
	fs_passthrough_hash_all(p);
	return 0;
}

void fs_passthrough_hash_all(struct fs_passthrough *p)
{
	for (uint32_t i = 0; i < p->hash_size; i++)
		p->hash[i] = FS_PASSTHROUGH_NONE;
	for (uint32_t i = 0; i < p->n_nodes; i++) {
		struct fs_passthrough_node *n = &p->nodes[i];
		if (!n->used || !n->hashed)
			continue;
		uint32_t b = fs_passthrough_hash(p, n->dev, n->ino);
		n->hnext = p->hash[b];
		p->hash[b] = i;
	}
}

struct fs_passthrough_node *fs_passthrough_find(struct fs_passthrough *p, dev_t dev, ino_t ino)
{
	for (uint32_t i = p->hash[fs_passthrough_hash(p, dev, ino)]; i != FS_PASSTHROUGH_NONE;
	     i = p->nodes[i].hnext)
		if (p->nodes[i].dev == dev && p->nodes[i].ino == ino)
			return &p->nodes[i];
	return NULL;
}

void fs_passthrough_unhash(struct fs_passthrough *p, uint32_t i)
{
	struct fs_passthrough_node *n = &p->nodes[i];
	if (!n->hashed)
		return;
	uint32_t *link = &p->hash[fs_passthrough_hash(p, n->dev, n->ino)];
	while (*link != i)
		link = &p->nodes[*link].hnext;
	*link = n->hnext;
	n->hashed = false;
}

static void fs_passthrough_lru_unlink(struct fs_passthrough *p, uint32_t i)
{
	struct fs_passthrough_node *n = &p->nodes[i];
	if (n->lru_prev != FS_PASSTHROUGH_NONE)
		p->nodes[n->lru_prev].lru_next = n->lru_next;
	else
		p->lru_head = n->lru_next;
	if (n->lru_next != FS_PASSTHROUGH_NONE)
		p->nodes[n->lru_next].lru_prev = n->lru_prev;
	else
		p->lru_tail = n->lru_prev;
	n->lru_prev = n->lru_next = FS_PASSTHROUGH_NONE;
}

static void fs_passthrough_lru_front(struct fs_passthrough *p, uint32_t i)
{
	struct fs_passthrough_node *n = &p->nodes[i];
	n->lru_prev = FS_PASSTHROUGH_NONE;
	n->lru_next = p->lru_head;
	if (p->lru_head != FS_PASSTHROUGH_NONE)
		p->nodes[p->lru_head].lru_prev = i;
	else
		p->lru_tail = i;
	p->lru_head = i;
}

static bool fs_passthrough_in_lru(const struct fs_passthrough *p, uint32_t i)
{
	const struct fs_passthrough_node *n = &p->nodes[i];
	return i != 0 && n->fd >= 0 && n->pins == 0;
}

static void fs_passthrough_close_node_fd(struct fs_passthrough *p, uint32_t i)
{
	struct fs_passthrough_node *n = &p->nodes[i];
	if (n->fd < 0 || i == 0)
		return;
	if (fs_passthrough_in_lru(p, i))
		fs_passthrough_lru_unlink(p, i);
	close(n->fd);
	n->fd = -1;
	p->fds--;
}

void fs_passthrough_pin(struct fs_passthrough *p, uint32_t i)
{
	if (fs_passthrough_in_lru(p, i))
		fs_passthrough_lru_unlink(p, i);
	p->nodes[i].pins++;
}

static void fs_passthrough_unpin(struct fs_passthrough *p, uint32_t i)
{
	p->nodes[i].pins--;
	if (fs_passthrough_in_lru(p, i))
		fs_passthrough_lru_front(p, i);
}

/* Room for one more fd under the cap: closes the least recently used node
 * fd unless the current reopen walk uses it (pinned nodes are not in the
 * LRU at all).  Handles are never closed for room. */
static int fs_passthrough_make_room(struct fs_passthrough *p)
{
	while (p->fds >= p->max_fds) {
		uint32_t t = p->lru_tail;
		if (t == FS_PASSTHROUGH_NONE || p->nodes[t].gen == p->gen)
			return -EMFILE;
		fs_passthrough_close_node_fd(p, t);
	}
	return 0;
}

int64_t fs_passthrough_insert(struct fs_passthrough *p, const struct stat *st, uint32_t parent,
		   const char *name)
{
	uint32_t i;
	char *nm = NULL;

	if (name && !(nm = strdup(name)))
		return -ENOMEM;
	if (p->free_node != FS_PASSTHROUGH_NONE) {
		i = p->free_node;
		p->free_node = p->nodes[i].hnext;
	} else {
		/* Indices stay below FS_PASSTHROUGH_NONE. */
		if (grow_array(&p->nodes, &p->cap_nodes, (size_t)p->n_nodes + 1, sizeof *p->nodes, 64,
			       FS_PASSTHROUGH_NONE) < 0) {
			free(nm);
			return -ENOMEM;
		}
		i = p->n_nodes++;
	}
	struct fs_passthrough_node *n = &p->nodes[i];
	*n = (struct fs_passthrough_node){
		.fd = -1, .used = true, .hashed = true,
		.type = st->st_mode & S_IFMT, .dev = st->st_dev,
		.ino = st->st_ino, .parent = parent, .name = nm,
		.lru_prev = FS_PASSTHROUGH_NONE, .lru_next = FS_PASSTHROUGH_NONE, .folds = -1,
	};
	if (parent != FS_PASSTHROUGH_NONE)
		p->nodes[parent].refs++;
	uint32_t b = fs_passthrough_hash(p, n->dev, n->ino);
	n->hnext = p->hash[b];
	p->hash[b] = i;
	p->n_live++;
	if (p->n_live > p->hash_size * 2 && p->hash_size < (1u << 30))
		fs_passthrough_rehash(p, p->hash_size * 2); /* on failure chains grow */
	return i;
}

/* Frees node i if nothing holds it any more, then its parent likewise. */
static void fs_passthrough_release_node(struct fs_passthrough *p, uint32_t i)
{
	while (i != 0 && i != FS_PASSTHROUGH_NONE) {
		struct fs_passthrough_node *n = &p->nodes[i];
		if (!n->used || n->nlookup > 0 || n->refs > 0)
			return;
		uint32_t parent = n->parent;
		fs_passthrough_unhash(p, i);
		fs_passthrough_close_node_fd(p, i);
		free(n->name);
		n->name = NULL;
		n->used = false;
		n->pins = 0;
		n->nameless = false;
		n->hnext = p->free_node;
		p->free_node = i;
		p->n_live--;
		if (parent == FS_PASSTHROUGH_NONE)
			return;
		p->nodes[parent].refs--;
		i = parent;
	}
}

/* Whether a is b or one of b's ancestors. */
static bool fs_passthrough_is_ancestor(const struct fs_passthrough *p, uint32_t a, uint32_t b)
{
	for (unsigned d = 0; b != FS_PASSTHROUGH_NONE; d++) {
		if (a == b || d > FS_PASSTHROUGH_MAX_DEPTH)
			return true; /* too deep to tell: treat as a loop */
		b = p->nodes[b].parent;
	}
	return false;
}

void fs_passthrough_rename_node(struct fs_passthrough *p, uint32_t i, uint32_t parent, const char *name)
{
	struct fs_passthrough_node *n = &p->nodes[i];
	if (i == 0 || (n->parent == parent && strcmp(n->name, name) == 0))
		return;
	if (fs_passthrough_is_ancestor(p, i, parent))
		return;
	char *nm = strdup(name);
	if (!nm)
		return; /* the old name is still a name to try */
	free(n->name);
	n->name = nm;
	if (n->parent == parent)
		return;
	uint32_t old = n->parent;
	n->parent = parent;
	p->nodes[parent].refs++;
	p->nodes[old].refs--;
	fs_passthrough_release_node(p, old);
}

int fs_passthrough_open_beneath(int dirfd, const char *name, uint64_t flags,
		     uint64_t mode)
{
	struct open_how how;

	memset(&how, 0, sizeof how);
	how.flags = flags | O_NOFOLLOW | O_CLOEXEC;
	how.mode = mode;
	how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
		      RESOLVE_NO_MAGICLINKS;
	long fd = syscall(SYS_openat2, dirfd, name, &how, sizeof how);
	return fd < 0 ? -errno : (int)fd;
}

/* Marks node i's fd as used by this operation. */
static int fs_passthrough_touch(struct fs_passthrough *p, uint32_t i)
{
	struct fs_passthrough_node *n = &p->nodes[i];
	n->gen = p->gen;
	if (fs_passthrough_in_lru(p, i) && p->lru_head != i) {
		fs_passthrough_lru_unlink(p, i);
		fs_passthrough_lru_front(p, i);
	}
	return n->fd;
}

/* Opens node i from its parent's open fd, checking it is still the same
 * inode. */
static int fs_passthrough_reopen_one(struct fs_passthrough *p, uint32_t i)
{
	struct fs_passthrough_node *n = &p->nodes[i];
	struct stat st;
	int pfd = fs_passthrough_touch(p, n->parent);
	int rc = fs_passthrough_make_room(p);

	if (rc < 0)
		return rc;
	int fd = fs_passthrough_open_beneath(pfd, n->name, O_PATH, 0);
	if (fd < 0)
		return fd == -ENOENT || fd == -ELOOP || fd == -EXDEV ? -ESTALE : fd;
	if (fstat(fd, &st) < 0 || st.st_dev != n->dev || st.st_ino != n->ino ||
	    (st.st_mode & S_IFMT) != n->type) {
		close(fd);
		return -ESTALE;
	}
	n->fd = fd;
	p->fds++;
	if (fs_passthrough_in_lru(p, i))
		fs_passthrough_lru_front(p, i);
	n->gen = p->gen;
	return 0;
}

int fs_passthrough_node_fd(struct fs_passthrough *p, struct fs_passthrough_node *n)
{
	uint32_t want = fs_passthrough_index(p, n);

	p->gen++;
	if (n->fd >= 0)
		return fs_passthrough_touch(p, want);
	for (unsigned round = 0; round <= FS_PASSTHROUGH_MAX_DEPTH; round++) {
		/* The closed node nearest the root on the way to want. */
		uint32_t c = want;
		unsigned d = 0;
		while (p->nodes[p->nodes[c].parent].fd < 0) {
			c = p->nodes[c].parent;
			if (++d > FS_PASSTHROUGH_MAX_DEPTH)
				return -ESTALE;
		}
		int rc = fs_passthrough_reopen_one(p, c);
		if (rc < 0)
			return rc;
		if (c == want)
			return p->nodes[want].fd;
	}
	return -ESTALE;
}

void fs_passthrough_hold(struct fs_passthrough *p, uint32_t i)
{
	p->nodes[i].refs++;
	fs_passthrough_pin(p, i);
}

void fs_passthrough_drop(struct fs_passthrough *p, uint32_t i)
{
	fs_passthrough_unpin(p, i);
	p->nodes[i].refs--;
	fs_passthrough_release_node(p, i);
}

void fs_passthrough_put(struct fs_passthrough *p, uint32_t i)
{
	fs_passthrough_lock(p);
	fs_passthrough_drop(p, i);
	fs_passthrough_unlock(p);
}

int fs_passthrough_get(struct fs_passthrough *p, uint64_t nodeid, uint32_t *idx)
{
	struct fs_passthrough_node *n = fs_passthrough_node(p, nodeid);

	if (!n)
		return -ESTALE;
	int fd = fs_passthrough_node_fd(p, n);
	if (fd < 0)
		return fd;
	*idx = fs_passthrough_index(p, n);
	fs_passthrough_hold(p, *idx);
	return fd;
}

int fs_passthrough_get_unlocked(struct fs_passthrough *p, uint64_t nodeid, uint32_t *idx)
{
	fs_passthrough_lock(p);
	int fd = fs_passthrough_get(p, nodeid, idx);
	fs_passthrough_unlock(p);
	return fd;
}

int fs_passthrough_reserve(struct fs_passthrough *p)
{
	p->gen++;
	int rc = fs_passthrough_make_room(p);
	if (rc < 0)
		return rc;
	p->fds++;
	return 0;
}

void fs_passthrough_unreserve(struct fs_passthrough *p)
{
	p->fds--;
}

void fs_passthrough_forget_locked(struct fs_passthrough *p, uint64_t nodeid, uint64_t nlookup)
{
	struct fs_passthrough_node *n = fs_passthrough_node(p, nodeid);

	if (!n || nodeid == 1)
		return;
	n->nlookup = nlookup >= n->nlookup ? 0 : n->nlookup - nlookup;
	if (n->nlookup == 0)
		fs_passthrough_release_node(p, (uint32_t)(nodeid - 1));
}

/* The handle fh of that kind, stale or not, or NULL; lock held. */
static struct fs_passthrough_handle *fs_passthrough_fh_any(struct fs_passthrough *p, uint64_t fh,
							    bool dir)
{
	if (fh >= p->n_fhs || (p->fhs[fh].fd < 0 && !p->fhs[fh].stale) || p->fhs[fh].closing ||
	    p->fhs[fh].dir != dir)
		return NULL;
	return &p->fhs[fh];
}

struct fs_passthrough_handle *fs_passthrough_fh(struct fs_passthrough *p, uint64_t fh, bool dir)
{
	struct fs_passthrough_handle *h = fs_passthrough_fh_any(p, fh, dir);
	return h && !h->stale ? h : NULL;
}

int fs_passthrough_fh_get(struct fs_passthrough *p, uint64_t fh, bool dir, uint32_t *node)
{
	int fd = -EBADF;

	fs_passthrough_lock(p);
	struct fs_passthrough_handle *h = fs_passthrough_fh_any(p, fh, dir);
	if (h && h->stale) {
		fd = -ESTALE;
	} else if (h) {
		h->busy++;
		fd = h->fd;
		if (node)
			*node = h->node;
	}
	fs_passthrough_unlock(p);
	return fd;
}

/* Closes handle i and lets go of its node; lock held, nothing busy on it. */
static void fs_passthrough_fh_free(struct fs_passthrough *p, uint32_t i)
{
	struct fs_passthrough_handle *h = &p->fhs[i];

	if (!h->stale) {
		close(h->fd);
		p->fds--;
	}
	h->fd = -1;
	h->stale = false;
	h->closing = false;
	h->next_free = p->free_fh;
	p->free_fh = i;
	fs_passthrough_unpin(p, h->node);
	p->nodes[h->node].refs--;
	fs_passthrough_release_node(p, h->node);
}

void fs_passthrough_fh_put(struct fs_passthrough *p, uint64_t fh)
{
	fs_passthrough_lock(p);
	struct fs_passthrough_handle *h = &p->fhs[fh];
	if (--h->busy == 0 && h->closing)
		fs_passthrough_fh_free(p, (uint32_t)fh);
	fs_passthrough_unlock(p);
}

int fs_passthrough_fh_new(struct fs_passthrough *p, int fd, bool dir, uint32_t node, uint64_t *fh)
{
	uint32_t i;

	if (p->free_fh != FS_PASSTHROUGH_NONE) {
		i = p->free_fh;
		p->free_fh = p->fhs[i].next_free;
	} else {
		if (grow_array(&p->fhs, &p->cap_fhs, (size_t)p->n_fhs + 1, sizeof *p->fhs, 16, FS_PASSTHROUGH_NONE) < 0) {
			close(fd);
			fs_passthrough_unreserve(p);
			return -ENOMEM;
		}
		i = p->n_fhs++;
	}
	p->fhs[i] = (struct fs_passthrough_handle){ .fd = fd, .dir = dir, .node = node,
					 .next_free = FS_PASSTHROUGH_NONE };
	p->nodes[node].refs++;
	fs_passthrough_pin(p, node);
	*fh = i;
	return 0;
}

int fs_passthrough_fh_close(struct fs_passthrough *p, uint64_t fh, bool dir)
{
	int rc = -EBADF;

	fs_passthrough_lock(p);
	struct fs_passthrough_handle *h = fs_passthrough_fh_any(p, fh, dir);
	if (h) {
		h->closing = true;
		if (h->busy == 0)
			fs_passthrough_fh_free(p, (uint32_t)fh);
		rc = 0;
	}
	fs_passthrough_unlock(p);
	return rc;
}

void fs_passthrough_reset(void *be)
{
	struct fs_passthrough *p = be;

	fs_passthrough_lock(p);
	for (uint32_t i = 0; i < p->n_fhs; i++)
		if (p->fhs[i].fd >= 0 || p->fhs[i].stale)
			fs_passthrough_fh_free(p, i);
	for (uint32_t i = 1; i < p->n_nodes; i++) {
		if (!p->nodes[i].used)
			continue;
		fs_passthrough_close_node_fd(p, i);
		free(p->nodes[i].name);
		p->nodes[i].used = false;
	}
	p->n_nodes = 1;
	p->n_live = 1;
	p->free_node = FS_PASSTHROUGH_NONE;
	p->lru_head = p->lru_tail = FS_PASSTHROUGH_NONE;
	p->nodes[0].refs = 0;
	for (uint32_t b = 0; b < p->hash_size; b++)
		p->hash[b] = FS_PASSTHROUGH_NONE;
	p->nodes[0].hnext = FS_PASSTHROUGH_NONE;
	p->hash[fs_passthrough_hash(p, p->nodes[0].dev, p->nodes[0].ino)] = 0;
	p->n_fhs = 0;
	p->free_fh = FS_PASSTHROUGH_NONE;
	fs_passthrough_unlock(p);
}

/* The counters are read under the lock; the const in the contract is the
 * caller's view, the mutex inside is not. */
unsigned fs_passthrough_open_fds(const struct fs_passthrough *p)
{
	struct fs_passthrough *q = (struct fs_passthrough *)p;

	fs_passthrough_lock(q);
	unsigned n = q->fds;
	fs_passthrough_unlock(q);
	return n;
}

unsigned fs_passthrough_inodes(const struct fs_passthrough *p)
{
	struct fs_passthrough *q = (struct fs_passthrough *)p;

	fs_passthrough_lock(q);
	unsigned n = q->n_live - 1;
	fs_passthrough_unlock(q);
	return n;
}
