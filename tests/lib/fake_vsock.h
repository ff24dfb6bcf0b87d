/* The fake guest driver's layout for the vsock device's tests and fuzz
 * targets (over tests/lib/fake_virtio.h): 1 MiB of guest RAM, queues of
 * QSIZE entries with their rings at FV_RING_BASE(q), rx buffers of RXLEN
 * bytes (a header and 4096 bytes of payload) every RXSLOT bytes from
 * RXBUF, one tx packet buffer at TXBUF, and the guest's CID. */
#ifndef KBOX_TESTS_FAKE_VSOCK_H
#define KBOX_TESTS_FAKE_VSOCK_H

#include "devices/virtio_vsock.h"

#define RAM 0x100000u
#define QSIZE 64u
#define RXBUF 0x80000u
#define RXSLOT 0x1100u
#define RXLEN (VIRTIO_VSOCK_HDR_SIZE + 4096u)
#define TXBUF 0x40000u
#define CID 3u

#endif
