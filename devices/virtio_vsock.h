/* virtio-vsock device (virtio 1.2 §5.10), stream sockets only.
 *
 * A state machine over the rx/tx/event queues and a bounded connection
 * table; it never touches a socket.  The host side is a backend: callbacks
 * the device makes (struct virtio_vsock_backend) and functions the backend calls
 * (virtio_vsock_host_*).  Guest→host data waits in a per-connection buffer whose
 * size is the credit we advertise; host→guest data waits in another and
 * leaves only within the guest's advertised credit.
 *
 * Guest errors: a malformed ring or packet buffer (short header, len that
 * does not match the buffer, chain errors) stops the device
 * (DEVICE_NEEDS_RESET); a well-formed packet with bad fields (type, cid,
 * op) is dropped and answered with RST where there is someone to answer;
 * a connection that breaks the credit rules is reset.
 *
 * Like the transport, not thread-safe: the VMM serializes calls. */
#ifndef KBOX_VIRTIO_VSOCK_H
#define KBOX_VIRTIO_VSOCK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "devices/virtqueue.h"

#define VIRTIO_VSOCK_DEVICE_ID 19
#define VIRTIO_VSOCK_HOST_CID 2
#define VIRTIO_VSOCK_HDR_SIZE 44
#define VIRTIO_VSOCK_QUEUE_SIZE 256
#define VIRTIO_VSOCK_MAX_CONNS 64
/* Credit we advertise per connection, and the size of the host→guest
 * buffer; both are allocated only while a connection exists. */
#define VIRTIO_VSOCK_BUF_ALLOC (256u * 1024)
/* Largest payload accepted in one guest packet or put in one rx packet. */
#define VIRTIO_VSOCK_MAX_PKT (64u * 1024)
/* Host-initiated connections use local ports from here up. */
#define VIRTIO_VSOCK_EPHEMERAL_BASE 0x40000000u
/* Pending RSTs for packets that have no connection; more are dropped. */
#define VIRTIO_VSOCK_MAX_RST 64

#define VIRTIO_VSOCK_SHUT_RCV 1u
#define VIRTIO_VSOCK_SHUT_SEND 2u

enum virtio_vsock_op {
	VIRTIO_VSOCK_OP_INVALID = 0,
	VIRTIO_VSOCK_OP_REQUEST = 1,
	VIRTIO_VSOCK_OP_RESPONSE = 2,
	VIRTIO_VSOCK_OP_RST = 3,
	VIRTIO_VSOCK_OP_SHUTDOWN = 4,
	VIRTIO_VSOCK_OP_RW = 5,
	VIRTIO_VSOCK_OP_CREDIT_UPDATE = 6,
	VIRTIO_VSOCK_OP_CREDIT_REQUEST = 7,
};

#define VIRTIO_VSOCK_TYPE_STREAM 1

/* The packet header in host byte order. */
struct virtio_vsock_hdr {
	uint64_t src_cid, dst_cid;
	uint32_t src_port, dst_port;
	uint32_t len;
	uint16_t type, op;
	uint32_t flags;
	uint32_t buf_alloc, fwd_cnt;
};

/* Decode 44 little-endian bytes. */
void virtio_vsock_hdr_decode(struct virtio_vsock_hdr *h, const uint8_t raw[VIRTIO_VSOCK_HDR_SIZE]);

/* Encode h as 44 little-endian bytes. */
void virtio_vsock_hdr_encode(uint8_t raw[VIRTIO_VSOCK_HDR_SIZE], const struct virtio_vsock_hdr *h);

struct virtio_vsock_conn;
struct virtio_vsock;

/* Callbacks into the host side.  ctx is vsock.backend_ctx.  Inside a
 * callback the backend may call virtio_vsock_host_* for any connection, except
 * that a connection passed to closed() is gone when it returns. */
struct virtio_vsock_backend {
	/* The guest connects to host port; return 0 to accept (the backend
	 * may set a user pointer) or a negative errno to refuse with RST. */
	int (*connect_request)(void *ctx, struct virtio_vsock_conn *c, uint32_t port);
	/* A host-initiated connection was accepted (err 0) or refused. */
	void (*connected)(void *ctx, struct virtio_vsock_conn *c, int err);
	/* Guest data waits: read it with virtio_vsock_host_recv. */
	void (*readable)(void *ctx, struct virtio_vsock_conn *c);
	/* Guest credit grew: virtio_vsock_host_send may take more. */
	void (*writable)(void *ctx, struct virtio_vsock_conn *c);
	/* The guest will send no more (VIRTIO_VSOCK_SHUT_SEND) and/or receive no
	 * more (VIRTIO_VSOCK_SHUT_RCV); the flags are cumulative. */
	void (*shutdown)(void *ctx, struct virtio_vsock_conn *c, uint32_t flags);
	/* The connection is gone (guest RST, credit violation, device
	 * reset); c is freed when this returns. */
	void (*closed)(void *ctx, struct virtio_vsock_conn *c);
};

enum virtio_vsock_state {
	VIRTIO_VSOCK_FREE,
	VIRTIO_VSOCK_CONNECTING, /* host sent REQUEST, waiting for RESPONSE */
	VIRTIO_VSOCK_CONNECTED,
};

/* One connection; the backend only holds the pointer. */
struct virtio_vsock_conn {
	enum virtio_vsock_state state;
	uint32_t local_port;   /* host side */
	uint32_t peer_port;    /* guest side */
	void *user;            /* the backend's */
	/* guest→host: rx_cnt counts bytes received, fwd_cnt bytes the
	 * backend took; the difference sits in rxbuf. */
	uint8_t *rxbuf;
	uint32_t rx_cnt, fwd_cnt, fwd_cnt_sent;
	/* host→guest: tx_cnt counts bytes sent; txbuf holds tx_len bytes
	 * from tx_head that are not sent yet. */
	uint8_t *txbuf;
	uint32_t tx_head, tx_len, tx_cnt;
	uint32_t peer_buf_alloc, peer_fwd_cnt;
	uint32_t peer_shut;    /* VIRTIO_VSOCK_SHUT_* the guest announced */
	uint32_t host_shut;    /* VIRTIO_VSOCK_SHUT_* the backend asked for */
	unsigned pending;      /* control packets to send (private bits) */
};

struct virtio_vsock_stats {
	uint64_t bad_packets;  /* dropped for bad header fields */
	uint64_t resets_sent;
	uint64_t overruns;     /* connections reset for exceeding credit */
};

struct virtio_vsock {
	struct virtqueue_dev dev;     /* give &dev to a transport */
	struct virtqueue vqs[3];
	uint64_t guest_cid;
	const struct virtio_vsock_backend *backend;
	void *backend_ctx;
	struct virtio_vsock_conn conns[VIRTIO_VSOCK_MAX_CONNS];
	/* RSTs owed: up to VIRTIO_VSOCK_MAX_RST while the device runs; a
	 * fork's copy may owe one more per connection of the original's. */
	struct { uint32_t local, peer; } rst[VIRTIO_VSOCK_MAX_RST + VIRTIO_VSOCK_MAX_CONNS];
	unsigned nr_rst;
	unsigned rr;           /* round-robin start for rx fairness */
	uint32_t next_port;
	unsigned busy;         /* depth of rx flushing, against re-entry */
	bool again;            /* work arrived while flushing */
	struct virtio_vsock_stats stats;
};

/* Initialise v for a guest with cid guest_cid (≥ 3, < 2^32 - 1) and the
 * given backend (callbacks may be NULL).  Then attach &v->dev to a
 * transport, e.g. virtio_mmio_init(&mmio, &v->dev, gm, irq).  Returns 0 or
 * -EINVAL. */
int virtio_vsock_init(struct virtio_vsock *v, uint64_t guest_cid, const struct virtio_vsock_backend *backend,
	       void *backend_ctx);

/* Drop every connection (closed() is called for each) and free buffers. */
void virtio_vsock_destroy(struct virtio_vsock *v);

/* Connect to guest port.  Returns 0 and sets *out (a CONNECTING
 * connection; connected() tells the outcome), -ENOSPC if the table is full,
 * -ENOTCONN if the driver is not running, or -ENOMEM. */
int virtio_vsock_host_connect(struct virtio_vsock *v, uint32_t port, void *user, struct virtio_vsock_conn **out);

/* Queue up to len bytes for the guest.  Returns the number taken (0 when
 * the buffer is full: wait for writable()), -ENOTCONN if c cannot send
 * (not connected, or shut down for sending by either side). */
ssize_t virtio_vsock_host_send(struct virtio_vsock *v, struct virtio_vsock_conn *c, const void *buf, size_t len);

/* Bytes the backend could queue right now without being refused. */
size_t virtio_vsock_host_send_room(const struct virtio_vsock_conn *c);

/* Take up to len bytes the guest sent.  Returns the count (0 if none
 * waits); the freed space is credited back to the guest. */
size_t virtio_vsock_host_recv(struct virtio_vsock *v, struct virtio_vsock_conn *c, void *buf, size_t len);

/* Bytes of guest data waiting in c. */
size_t virtio_vsock_host_pending(const struct virtio_vsock_conn *c);

/* Half- or full-close towards the guest (VIRTIO_VSOCK_SHUT_* flags); the
 * SHUTDOWN packet leaves after the queued data.  Returns 0 or -ENOTCONN. */
int virtio_vsock_host_shutdown(struct virtio_vsock *v, struct virtio_vsock_conn *c, uint32_t flags);

/* Abort c: RST to the guest and the connection is freed at once (closed()
 * is not called).  Queued data in both directions is dropped. */
void virtio_vsock_host_close(struct virtio_vsock *v, struct virtio_vsock_conn *c);

#endif
