#include "devices/virtio_fs.h"

#include "lib/errbuf.h"

#include <endian.h>
#include <errno.h>
#include <linux/fuse.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

enum { Q_HIPRIO, Q_REQUEST };

static struct virtio_fs *to_fs(struct virtqueue_dev *d)
{
	return (struct virtio_fs *)((char *)d - offsetof(struct virtio_fs, dev));
}

/* The opcode of the request in c, or 0 if its readable side is shorter
 * than a header (the server then rejects it anyway). */
static uint32_t chain_opcode(const struct virtqueue_chain *c)
{
	uint8_t h[offsetof(struct fuse_in_header, opcode) + 4];
	uint32_t got = 0;

	for (unsigned i = 0; i < c->nr_read && got < sizeof h; i++) {
		uint32_t n = c->seg[i].len < sizeof h - got ? c->seg[i].len
							    : (uint32_t)(sizeof h - got);
		memcpy(h + got, c->seg[i].ptr, n);
		got += n;
	}
	if (got < sizeof h)
		return 0;
	uint32_t op;
	memcpy(&op, h + offsetof(struct fuse_in_header, opcode), 4);
	return le32toh(op);
}

/* Serve one chain; returns the used length or a negative errno for a
 * guest error. */
static ssize_t serve(struct virtio_fs *f, const struct virtqueue_chain *c)
{
	struct iovec in[VIRTQUEUE_MAX_SEGS], out[VIRTQUEUE_MAX_SEGS];
	unsigned nin = 0, nout = 0;
	/* Requests that take no reply come without a reply area (hiprio);
	 * the server still wants room for a header it will not write. */
	uint8_t scratch[sizeof(struct fuse_out_header)];

	for (unsigned i = 0; i < c->nr; i++) {
		struct iovec v = { c->seg[i].ptr, c->seg[i].len };
		if (c->seg[i].write)
			out[nout++] = v;
		else
			in[nin++] = v;
	}
	if (nout == 0) {
		uint32_t op = chain_opcode(c);
		if (op != FUSE_FORGET && op != FUSE_BATCH_FORGET && op != FUSE_INTERRUPT)
			return -EINVAL;
		out[0] = (struct iovec){ scratch, sizeof scratch };
		nout = 1;
	}
	ssize_t n = fuse_server_handle(f->srv, in, (int)nin, out, (int)nout);
	if (n < 0)
		return n;
	return out[0].iov_base == scratch ? 0 : n;
}

static int fs_notify(struct virtqueue_dev *d, unsigned q)
{
	struct virtio_fs *f = to_fs(d);
	struct virtqueue *vq = &f->vqs[q];
	struct virtqueue_chain c;
	bool pushed = false;
	int err = 0;

	while (d->live) {
		int r = virtqueue_pop(vq, &c);
		if (r <= 0) {
			err = r;
			break;
		}
		ssize_t n = serve(f, &c);
		if (n < 0) {
			/* Not returned: the device stops, and the driver
			 * reclaims its buffers when it resets it. */
			err = -EINVAL;
			break;
		}
		virtqueue_push(vq, c.head, (uint32_t)n);
		f->stats.requests++;
		pushed = true;
	}
	if (pushed)
		virtqueue_dev_used(d, q);
	if (err < 0)
		f->stats.bad_chains++;
	return err;
}

static void fs_config_read(struct virtqueue_dev *d, uint32_t off, void *data, uint32_t len)
{
	struct virtio_fs *f = to_fs(d);
	uint8_t cfg[VIRTIO_FS_CONFIG_SIZE];
	uint32_t nq = htole32(1);

	memcpy(cfg, f->tag, VIRTIO_FS_TAG_LEN);
	memcpy(cfg + VIRTIO_FS_TAG_LEN, &nq, 4);
	memcpy(data, cfg + off, len); /* the transport bounded off + len */
}

/* The driver forgets every inode and handle with a reset; so does the
 * server, or their host fds would stay open until the next INIT. */
static void fs_reset(struct virtqueue_dev *d)
{
	fuse_server_reset(to_fs(d)->srv);
}

/* A template is made before guest-init mounts anything: a FUSE session
 * is this run's (its node table names this run's host files). */
static int fs_quiet(struct virtqueue_dev *d, char *err, size_t errlen)
{
	struct virtio_fs *f = to_fs(d);
	if (fuse_server_in_session(f->srv)) {
		snprintf(err, errlen, "virtio-fs %s: the guest has mounted it", f->tag);
		return -EBUSY;
	}
	return 0;
}

/* A fork (docs/snapshots.md, "Fork: the virtio-fs node table"): magic,
 * version and the tag, then the FUSE session's state with its node table
 * (fuse_server_fork_save).  The VM is paused: no request is in flight. */
#define VIRTIO_FS_FORK_MAGIC 0x4b534656u /* "VFSK" */
#define VIRTIO_FS_FORK_VERSION 1u
#define VIRTIO_FS_FORK_HEADER (8u + VIRTIO_FS_TAG_LEN)

static int virtio_fs_fork_save(struct virtqueue_dev *d, struct statebuf_writer *w, char *err,
			       size_t errlen)
{
	struct virtio_fs *f = to_fs(d);
	char why[200] = "";

	statebuf_u32(w, VIRTIO_FS_FORK_MAGIC);
	statebuf_u32(w, VIRTIO_FS_FORK_VERSION);
	statebuf_put(w, f->tag, VIRTIO_FS_TAG_LEN);
	int rc = fuse_server_fork_save(f->srv, w, why, sizeof why);
	if (rc < 0)
		return errbuf_fail(err, errlen, rc, "virtio-fs %.*s: %s", VIRTIO_FS_TAG_LEN, f->tag,
				   why);
	return 0;
}

/* No bytes: a template's state, saved quiet (no session): nothing to take. */
static int virtio_fs_fork_load(struct virtqueue_dev *d, const uint8_t *p, size_t len, char *err,
			       size_t errlen)
{
	struct virtio_fs *f = to_fs(d);
	struct statebuf_reader r;
	char tag[VIRTIO_FS_TAG_LEN], why[200] = "";

	if (len == 0)
		return 0;
	statebuf_reader_init(&r, p, len);
	uint32_t magic = statebuf_get_u32(&r), version = statebuf_get_u32(&r);
	statebuf_get(&r, tag, sizeof tag);
	int rc = 0;
	if (r.err)
		rc = errbuf_fail(why, sizeof why, -EBADMSG, "fork state cut short (%zu bytes)", len);
	else if (magic != VIRTIO_FS_FORK_MAGIC || version != VIRTIO_FS_FORK_VERSION)
		rc = errbuf_fail(why, sizeof why, -EINVAL, "not a virtio-fs fork state");
	else if (memcmp(tag, f->tag, sizeof tag) != 0)
		rc = errbuf_fail(why, sizeof why, -EINVAL, "the state of another share");
	else
		rc = fuse_server_fork_load(f->srv, p + VIRTIO_FS_FORK_HEADER,
					   len - VIRTIO_FS_FORK_HEADER, why, sizeof why);
	if (rc < 0)
		return errbuf_fail(err, errlen, rc, "virtio-fs %.*s: %s", VIRTIO_FS_TAG_LEN, f->tag,
				   why);
	return 0;
}

static const struct virtqueue_dev_ops fs_ops = {
	.config_read = fs_config_read,
	.notify = fs_notify,
	.reset = fs_reset,
	.quiet = fs_quiet,
	.fork_save = virtio_fs_fork_save,
	.fork_load = virtio_fs_fork_load,
};

int virtio_fs_init(struct virtio_fs *f, struct fuse_server *srv, const char *tag)
{
	size_t tl = tag ? strnlen(tag, VIRTIO_FS_TAG_LEN + 1) : 0;

	if (!srv || tl == 0 || tl > VIRTIO_FS_TAG_LEN ||
	    fuse_server_max_request(srv) > sizeof(struct fuse_in_header) +
						   sizeof(struct fuse_write_in) +
						   VIRTIO_FS_MAX_WRITE)
		return -EINVAL;
	memset(f, 0, sizeof *f);
	memcpy(f->tag, tag, tl); /* NUL-padded, not terminated at 36 bytes */
	f->srv = srv;
	virtqueue_init(&f->vqs[Q_HIPRIO], VIRTIO_FS_HIPRIO_SIZE);
	virtqueue_init(&f->vqs[Q_REQUEST], VIRTIO_FS_REQUEST_SIZE);
	f->dev.ops = &fs_ops;
	f->dev.device_id = VIRTIO_FS_DEVICE_ID;
	f->dev.features = (1ull << VIRTIO_F_EVENT_IDX) | (1ull << VIRTIO_F_INDIRECT_DESC);
	f->dev.config_size = VIRTIO_FS_CONFIG_SIZE;
	f->dev.nr_queues = 2;
	f->dev.vqs = f->vqs;
	return 0;
}
