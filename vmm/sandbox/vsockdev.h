/* The guest's vsock device in `kbox run`: a virtio-vsock device
 * (devices/virtio_vsock.h) whose host side is the sandbox's control socket
 * (devices/vsock_unix.h), where `kbox exec` and `kbox run` itself reach the
 * guest's exec agent, wired to the bus. */
#ifndef KBOX_VMM_VSOCKDEV_H
#define KBOX_VMM_VSOCKDEV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "devices/virtio_vsock.h"
#include "devices/vsock_unix.h"
#include "vmm/core/virtio_bus.h"

struct vsockdev {
	struct virtio_vsock vs;
	struct vsock_unix vu;
	bool vs_made, vu_made;
};

/* Create the device for guest CID cid, listen on the socket at sock_path
 * and add the device to bus (its kernel command-line argument is appended
 * to cmdline, cmdlen bytes).  0 or a negative errno with the message in
 * err; what was made is undone by vsockdev_destroy, which is safe to call
 * either way on a zeroed struct. */
int vsockdev_attach(struct vsockdev *d, struct virtio_bus *bus, uint64_t cid, const char *sock_path,
		    char *cmdline, size_t cmdlen, char *err, size_t errlen);

/* Close the socket and free the device; after the bus's device thread has
 * stopped (virtio_bus_destroy), as it calls into both. */
void vsockdev_destroy(struct vsockdev *d);

#endif
