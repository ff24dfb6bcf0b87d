#include "vmm/sandbox/vsockdev.h"

#include <string.h>

#include "lib/errbuf.h"

static unsigned vsock_fds(void *ctx, struct pollfd *p, unsigned max)
{
	return vsock_unix_pollfds(ctx, p, max);
}

static void vsock_handle(void *ctx, const struct pollfd *p, unsigned n)
{
	vsock_unix_handle(ctx, p, n);
}

int vsockdev_attach(struct vsockdev *d, struct virtio_bus *bus, uint64_t cid, const char *sock_path,
		    char *cmdline, size_t cmdlen, char *err, size_t errlen)
{
	int rc = virtio_vsock_init(&d->vs, cid, NULL, NULL);
	if (rc < 0)
		return errbuf_fail(err, errlen, rc, "cannot create the vsock device: %s", strerror(-rc));
	d->vs_made = true;
	rc = vsock_unix_init(&d->vu, &d->vs, sock_path, true);
	if (rc < 0)
		return errbuf_fail(err, errlen, rc, "cannot listen on %s: %s", sock_path, strerror(-rc));
	d->vu_made = true;
	struct virtio_bus_poller vp = { vsock_fds, vsock_handle, &d->vu };
	return virtio_bus_add(bus, &d->vs.dev, &vp, cmdline, cmdlen, err, errlen);
}

void vsockdev_destroy(struct vsockdev *d)
{
	if (d->vu_made)
		vsock_unix_destroy(&d->vu);
	if (d->vs_made)
		virtio_vsock_destroy(&d->vs);
	d->vu_made = d->vs_made = false;
}
