/* A TAP device as the guest's link: the test harness attaches the stack
 * to one whose other end lives in a network namespace the test made. */
#ifndef KBOX_TESTS_NET_TAP_H
#define KBOX_TESTS_NET_TAP_H

#include <stddef.h>

/* Create (or attach to) TAP device name (IFNAMSIZ - 1 bytes at most; ""
 * lets the kernel choose) with Ethernet frames and no packet-info header;
 * with virtio_net_hdr_len > 0, each frame read or written is preceded by a
 * virtio_net_hdr of that many bytes (IFF_VNET_HDR; the flag can only be
 * given when the device is made).  Returns a non-blocking, close-on-exec
 * descriptor and writes the device's name to out (outlen >= 16), or a
 * negative errno. */
int tap_open(const char *name, int virtio_net_hdr_len, char *out, size_t outlen);

#endif
