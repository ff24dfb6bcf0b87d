#include "tests/net/tap.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

int tap_open(const char *name, int virtio_net_hdr_len, char *out, size_t outlen)
{
	struct ifreq ifr;
	int fd, e;

	if (strlen(name) >= IFNAMSIZ || outlen < IFNAMSIZ || virtio_net_hdr_len < 0)
		return -EINVAL;
	fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	memset(&ifr, 0, sizeof ifr);
	ifr.ifr_flags = IFF_TAP | IFF_NO_PI | (virtio_net_hdr_len ? IFF_VNET_HDR : 0);
	memcpy(ifr.ifr_name, name, strlen(name));
	if (ioctl(fd, TUNSETIFF, &ifr) < 0 ||
	    (virtio_net_hdr_len && ioctl(fd, TUNSETVNETHDRSZ, &virtio_net_hdr_len) < 0)) {
		e = -errno;
		close(fd);
		return e;
	}
	memcpy(out, ifr.ifr_name, IFNAMSIZ);
	out[IFNAMSIZ - 1] = '\0';
	return fd;
}
