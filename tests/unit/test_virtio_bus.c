/* The bus's snapshot side (vmm/core/virtio_bus.c): the devices as snapshot
 * devices and the description a template's key is made from.  Neither
 * needs KVM, but virtio_bus_add does (an irqfd and ioeventfds on the VM),
 * so here the slots are filled by hand with what virtio_bus_add puts
 * there besides those: the bus, the queue count and a virtio-mmio
 * transport over the fake driver's RAM.  Real devices sit in them. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "devices/virtio_blk.h"
#include "devices/virtio_mmio_state.h"
#include "devices/virtio_net.h"
#include "devices/virtio_vsock.h"
#include "lib/statebuf.h"
#include "tests/lib/fake_virtio.h"
#include "tests/lib/unit_suite.h"
#include "vmm/core/snapshot.h"
#include "vmm/core/virtio_bus.h"

#define RAM 0x100000u
#define QSIZE 64u

static struct fv_driver drv;
static struct vm vm; /* never created: no vm_fd, no RAM of its own */
static struct virtio_bus bus, bus2;

static int nop_io(void *ctx, const struct iovec *iov, int n, uint64_t off) { return 0; }
static int nop_flush(void *ctx) { return 0; }
static int nop_range(void *ctx, uint64_t off, uint64_t len) { return 0; }
static int nop_wz(void *ctx, uint64_t off, uint64_t len, bool unmap) { return 0; }
static const struct blk_backend_ops nop_ops = { nop_io, nop_io, nop_flush, nop_range, nop_wz };

/* The next slot of b holds d, as virtio_bus_add leaves it minus KVM. */
static struct virtio_bus_slot *put(struct virtio_bus *b, struct virtqueue_dev *d)
{
	ck_assert_uint_lt(b->n, VIRTIO_BUS_MAX_DEVS);
	struct virtio_bus_slot *sl = &b->slot[b->n];
	memset(sl, 0, sizeof *sl);
	sl->bus = b;
	sl->irqfd = -1;
	for (unsigned q = 0; q < VIRTIO_BUS_MAX_QUEUES; q++)
		sl->qfd[q] = -1;
	sl->nq = d->nr_queues;
	ck_assert_int_eq(virtio_mmio_init(&sl->t, d, &drv.gm, NULL), 0);
	b->n++;
	return sl;
}

static void put_blk(struct virtio_bus *b, struct virtio_blk *blk, uint64_t bytes)
{
	struct blk_backend be = { .ops = &nop_ops, .size = bytes };
	ck_assert_int_eq(virtio_blk_init(blk, &be, NULL), 0);
	put(b, &blk->dev);
}

static void setup(void)
{
	ck_assert_int_eq(fv_init(&drv, 0, RAM), 0);
	memset(&vm, 0, sizeof vm);
	vm.kvm_fd = vm.vm_fd = -1;
	ck_assert_int_eq(virtio_bus_init(&bus, &vm), 0);
	ck_assert_int_eq(virtio_bus_init(&bus2, &vm), 0);
}

static void teardown(void)
{
	virtio_bus_destroy(&bus);
	virtio_bus_destroy(&bus2);
	fv_free(&drv);
}

static int describe(struct virtio_bus *b, char *buf, size_t len)
{
	memset(buf, 0xaa, len);
	return virtio_bus_describe(b, buf, len);
}

START_TEST(describe_lines)
{
	static struct virtio_blk blk;
	static struct virtio_vsock vs;
	char buf[1024];
	put_blk(&bus, &blk, 1u << 20);
	ck_assert_int_eq(virtio_vsock_init(&vs, 3, NULL, NULL), 0);
	put(&bus, &vs.dev);
	int n = describe(&bus, buf, sizeof buf);
	ck_assert_int_gt(n, 0);
	ck_assert_uint_eq(strlen(buf), (size_t)n);
	/* one line a slot: kind, id, queues, features, the config in hex
	 * (capacity 2048 sectors, little-endian, first) */
	char want[128];
	snprintf(want, sizeof want, "slot 0 blk id 2 queues 1 features %llx config 0008000000000000",
		 (unsigned long long)blk.dev.features);
	ck_assert_int_eq(strncmp(buf, want, strlen(want)), 0);
	char *second = strchr(buf, '\n');
	ck_assert_ptr_nonnull(second);
	second++;
	snprintf(want, sizeof want, "slot 1 vsock id 19 queues 3 features %llx config 0300000000000000\n",
		 (unsigned long long)vs.dev.features);
	ck_assert_str_eq(second, want);
	/* the first line: its head and 60 config bytes as 120 digits */
	snprintf(want, sizeof want, "slot 0 blk id 2 queues 1 features %llx config ",
		 (unsigned long long)blk.dev.features);
	ck_assert_uint_eq((size_t)(second - buf), strlen(want) + 2 * VIRTIO_BLK_CONFIG_SIZE + 1);
	virtio_vsock_destroy(&vs);
}
END_TEST

/* Two buses whose disks differ in size describe differently; equal ones
 * alike. */
START_TEST(describe_follows_config)
{
	static struct virtio_blk a, b, c;
	static struct virtio_bus bus3;
	char ta[1024], tb[1024], tc[1024];
	ck_assert_int_eq(virtio_bus_init(&bus3, &vm), 0);
	put_blk(&bus, &a, 1u << 20);
	put_blk(&bus2, &b, 2u << 20);
	put_blk(&bus3, &c, 1u << 20);
	int na = describe(&bus, ta, sizeof ta), nb = describe(&bus2, tb, sizeof tb),
	    nc = describe(&bus3, tc, sizeof tc);
	ck_assert_int_gt(na, 0);
	ck_assert_int_eq(na, nb);
	ck_assert_str_ne(ta, tb);
	ck_assert_int_eq(na, nc);
	ck_assert_str_eq(ta, tc);
	/* a read-only disk is offered another feature */
	static struct virtio_blk ro;
	struct blk_backend be = { .ops = &nop_ops, .size = 1u << 20, .read_only = true };
	ck_assert_int_eq(virtio_blk_init(&ro, &be, NULL), 0);
	bus3.n = 0;
	put(&bus3, &ro.dev);
	describe(&bus3, tc, sizeof tc);
	ck_assert_str_ne(ta, tc);
	virtio_bus_destroy(&bus3);
}
END_TEST

/* Every buffer short of the text and its NUL is refused, and nothing is
 * written past the length given. */
START_TEST(describe_too_small)
{
	static struct virtio_blk blk;
	static struct virtio_vsock vs;
	static char full[1024], buf[1100];
	put_blk(&bus, &blk, 1u << 20);
	ck_assert_int_eq(virtio_vsock_init(&vs, 3, NULL, NULL), 0);
	put(&bus, &vs.dev);
	int n = describe(&bus, full, sizeof full);
	ck_assert_int_gt(n, 0);
	for (size_t len = 0; len <= (size_t)n; len++) {
		memset(buf, 0xaa, sizeof buf);
		ck_assert_int_eq(virtio_bus_describe(&bus, buf, len), -ENOSPC);
		for (size_t i = len; i < sizeof buf; i++)
			ck_assert_uint_eq((uint8_t)buf[i], 0xaa);
	}
	ck_assert_int_eq(describe(&bus, buf, (size_t)n + 1), n);
	ck_assert_str_eq(buf, full);
	virtio_vsock_destroy(&vs);
}
END_TEST

/* No device: an empty string, and still a NUL to hold it. */
START_TEST(describe_empty_bus)
{
	char buf[16];
	ck_assert_int_eq(describe(&bus, buf, sizeof buf), 0);
	ck_assert_str_eq(buf, "");
	ck_assert_int_eq(describe(&bus, buf, 1), 0);
	ck_assert_str_eq(buf, "");
	ck_assert_int_eq(virtio_bus_describe(&bus, buf, 0), -ENOSPC);
}
END_TEST

START_TEST(snapshot_devs_listed)
{
	static struct virtio_blk blk;
	static struct virtio_vsock vs;
	struct snapshot_dev d[3];
	put_blk(&bus, &blk, 1u << 20);
	ck_assert_int_eq(virtio_vsock_init(&vs, 3, NULL, NULL), 0);
	put(&bus, &vs.dev);
	memset(d, 0x5a, sizeof d);
	ck_assert_uint_eq(virtio_bus_snapshot_devs(&bus, d, 3), 2);
	ck_assert_str_eq(d[0].name, "blk");
	ck_assert_uint_eq(d[0].slot, 0);
	ck_assert_ptr_eq(d[0].ctx, &bus.slot[0]);
	ck_assert_str_eq(d[1].name, "vsock");
	ck_assert_uint_eq(d[1].slot, 1);
	ck_assert_ptr_nonnull(d[1].save);
	ck_assert_ptr_nonnull(d[1].load);
	ck_assert_uint_eq(((uint8_t *)&d[2])[0], 0x5a); /* untouched */
	/* too few: the count says so, and no more than max are filled */
	memset(d, 0x5a, sizeof d);
	ck_assert_uint_eq(virtio_bus_snapshot_devs(&bus, d, 1), 2);
	ck_assert_str_eq(d[0].name, "blk");
	ck_assert_uint_eq(((uint8_t *)&d[1])[0], 0x5a);
	virtio_vsock_destroy(&vs);
}
END_TEST

/* save asks the device whether it is quiet first; load takes the state
 * and calls restored (virtio-net's MTU comes back only through it). */
START_TEST(snapshot_devs_save_and_load)
{
	static struct virtio_vsock vs, vs2;
	static struct virtio_net net, net2;
	const uint8_t mac[6] = VIRTIO_NET_GUEST_MAC;
	struct snapshot_dev d[2], d2[2];
	struct statebuf_writer w[2];
	char err[256] = "";

	ck_assert_int_eq(virtio_vsock_init(&vs, 3, NULL, NULL), 0);
	ck_assert_int_eq(virtio_net_init(&net, mac, NULL), 0);
	put(&bus, &vs.dev);
	put(&bus, &net.dev);
	ck_assert_int_eq(virtio_vsock_init(&vs2, 3, NULL, NULL), 0);
	ck_assert_int_eq(virtio_net_init(&net2, mac, NULL), 0);
	put(&bus2, &vs2.dev);
	put(&bus2, &net2.dev);
	ck_assert_uint_eq(virtio_bus_snapshot_devs(&bus, d, 2), 2);
	ck_assert_uint_eq(virtio_bus_snapshot_devs(&bus2, d2, 2), 2);
	ck_assert_str_eq(d[1].name, "net");

	/* the guest's drivers: vsock at its rings, virtio-net with MTU */
	drv.mmio = &bus.slot[0].t;
	ck_assert_int_eq(fv_driver_up(&drv, 1ull << VIRTIO_F_VERSION_1, 3, QSIZE), 0);
	struct fv_driver nd = drv; /* the same RAM, rings of its own above the vsock's */
	for (unsigned q = 0; q < 2; q++)
		fv_ring_at(&nd, q, FV_RING_BASE(3) + 0x4000 * q, QSIZE);
	nd.mmio = &bus.slot[1].t;
	ck_assert_int_eq(fv_negotiate(&nd, 1ull << VIRTIO_F_VERSION_1 | 1u << VIRTIO_NET_F_MAC |
						   1u << VIRTIO_NET_F_MTU),
			 0);
	for (unsigned q = 0; q < 2; q++)
		ck_assert_int_eq(fv_queue_setup(&nd, q), 0);
	fv_wr(&nd, FV_R_STATUS, VIRTIO_STATUS_ACKNOWLEDGE | VIRTIO_STATUS_DRIVER |
					VIRTIO_STATUS_FEATURES_OK | VIRTIO_STATUS_DRIVER_OK);
	ck_assert(vs.dev.live && net.dev.live && net.rx_mtu);

	/* not quiet: a request refused while no rx buffer waits leaves an
	 * RST owed; a frame waits for the guest */
	uint8_t pkt[VIRTIO_VSOCK_HDR_SIZE];
	struct virtio_vsock_hdr h = { .src_cid = 3, .dst_cid = VIRTIO_VSOCK_HOST_CID, .src_port = 7,
				      .dst_port = 9, .type = VIRTIO_VSOCK_TYPE_STREAM,
				      .op = VIRTIO_VSOCK_OP_REQUEST };
	virtio_vsock_hdr_encode(pkt, &h);
	memcpy(fv_at(&drv, 0x80000, sizeof pkt), pkt, sizeof pkt);
	struct fv_seg s = { 0x80000, sizeof pkt, false };
	fv_post(&drv, 1, &s, 1);
	ck_assert_uint_eq(vs.nr_rst, 1);
	uint8_t f[60] = { 0 };
	ck_assert_int_eq(virtio_net_rx_enqueue(&net, f, sizeof f), 0);
	for (unsigned i = 0; i < 2; i++) {
		statebuf_init(&w[i]);
		ck_assert_int_eq(d[i].save(d[i].ctx, &w[i], err, sizeof err), -EBUSY);
		ck_assert_uint_eq(w[i].len, 0);
	}
	ck_assert_ptr_nonnull(strstr(err, "frame(s) wait for the guest"));
	/* quiet again once the guest took both */
	struct fv_seg rb = { 0x90000, 0x1000, true };
	fv_post(&drv, 0, &rb, 1);
	ck_assert_uint_eq(vs.nr_rst, 0);
	struct fv_seg nb = { 0xa0000, VIRTIO_NET_HDR_SIZE + VIRTIO_NET_MAX_FRAME, true };
	fv_post(&nd, 0, &nb, 1);
	ck_assert(fv_used(&nd, 0, NULL, NULL));
	for (unsigned i = 0; i < 2; i++)
		ck_assert_int_eq(d[i].save(d[i].ctx, &w[i], err, sizeof err), 0);

	/* a blob for another slot's device, or garbage, is refused with the
	 * slot's kind first */
	ck_assert_int_eq(d2[1].load(d2[1].ctx, w[0].buf, w[0].len, err, sizeof err), -EINVAL);
	ck_assert_int_eq(strncmp(err, "net: ", 5), 0);
	ck_assert_int_eq(d2[0].load(d2[0].ctx, w[0].buf, w[0].len - 1, err, sizeof err), -EINVAL);
	ck_assert_int_eq(strncmp(err, "vsock: ", 7), 0);
	ck_assert(!vs2.dev.live && !net2.dev.live);

	for (unsigned i = 0; i < 2; i++)
		ck_assert_int_eq(d2[i].load(d2[i].ctx, w[i].buf, w[i].len, err, sizeof err), 0);
	ck_assert(vs2.dev.live && net2.dev.live);
	ck_assert(net2.rx_mtu); /* restored ran */
	/* the copy serves the guest's driver: a full-MTU frame arrives */
	static uint8_t big[VIRTIO_NET_MAX_FRAME];
	ck_assert_int_eq(virtio_net_rx_enqueue(&net2, big, sizeof big), 0);
	nd.mmio = &bus2.slot[1].t;
	fv_post(&nd, 0, &nb, 1);
	uint32_t len;
	ck_assert(fv_used(&nd, 0, NULL, &len));
	ck_assert_uint_eq(len, VIRTIO_NET_HDR_SIZE + sizeof big);
	for (unsigned i = 0; i < 2; i++)
		statebuf_free(&w[i]);
	virtio_vsock_destroy(&vs);
	virtio_vsock_destroy(&vs2);
	virtio_net_destroy(&net);
	virtio_net_destroy(&net2);
}
END_TEST

/* ---- fork (kbox fork): the devices saved as they run ---- */

/* The guest's drivers for a vsock in slot 0 of b (its rings where
 * fv_driver_up puts them) and a virtio-net in slot 1 (rings of its own
 * above, MTU offered), both live; nd is the net driver. */
static void drivers_up(struct virtio_bus *b, struct fv_driver *nd)
{
	drv.mmio = &b->slot[0].t;
	ck_assert_int_eq(fv_driver_up(&drv, 1ull << VIRTIO_F_VERSION_1, 3, QSIZE), 0);
	*nd = drv;
	for (unsigned q = 0; q < 2; q++)
		fv_ring_at(nd, q, FV_RING_BASE(3) + 0x4000 * q, QSIZE);
	nd->mmio = &b->slot[1].t;
	ck_assert_int_eq(fv_negotiate(nd, 1ull << VIRTIO_F_VERSION_1 | 1u << VIRTIO_NET_F_MAC |
						  1u << VIRTIO_NET_F_MTU),
			 0);
	for (unsigned q = 0; q < 2; q++)
		ck_assert_int_eq(fv_queue_setup(nd, q), 0);
	fv_wr(nd, FV_R_STATUS, VIRTIO_STATUS_ACKNOWLEDGE | VIRTIO_STATUS_DRIVER |
				       VIRTIO_STATUS_FEATURES_OK | VIRTIO_STATUS_DRIVER_OK);
}

/* Put an rx buffer in the vsock's queue without a notify: what the
 * copy finds in the RAM it restores. */
static void vsock_rx_offer(uint64_t gpa, uint32_t len)
{
	struct fv_seg s = { gpa, len, true };
	uint16_t head = drv.q[0].next_desc;
	fv_chain(&drv, 0, head, &s, 1);
	drv.q[0].next_desc = (uint16_t)((head + 1) % drv.q[0].size);
	fv_offer(&drv, 0, head);
}

static struct virtio_vsock fvs, fvs2;
static struct virtio_net fnet, fnet2;
static struct snapshot_dev tmpl[2], tmpl2[2], fork1[2], fork2[2];

/* vsock and virtio-net on bus and on bus2 (the copy's), their drivers
 * up on bus; the snapshot and fork devices of both. */
static void fork_setup(struct fv_driver *nd)
{
	const uint8_t mac[6] = VIRTIO_NET_GUEST_MAC;
	ck_assert_int_eq(virtio_vsock_init(&fvs, 3, NULL, NULL), 0);
	ck_assert_int_eq(virtio_net_init(&fnet, mac, NULL), 0);
	put(&bus, &fvs.dev);
	put(&bus, &fnet.dev);
	ck_assert_int_eq(virtio_vsock_init(&fvs2, 3, NULL, NULL), 0);
	ck_assert_int_eq(virtio_net_init(&fnet2, mac, NULL), 0);
	put(&bus2, &fvs2.dev);
	put(&bus2, &fnet2.dev);
	ck_assert_uint_eq(virtio_bus_snapshot_devs(&bus, tmpl, 2), 2);
	ck_assert_uint_eq(virtio_bus_snapshot_devs(&bus2, tmpl2, 2), 2);
	ck_assert_uint_eq(virtio_bus_fork_devs(&bus, fork1, 2), 2);
	ck_assert_uint_eq(virtio_bus_fork_devs(&bus2, fork2, 2), 2);
	drivers_up(&bus, nd);
	ck_assert(fvs.dev.live && fnet.dev.live && fnet.rx_mtu);
}

static void fork_teardown(void)
{
	virtio_vsock_destroy(&fvs);
	virtio_vsock_destroy(&fvs2);
	virtio_net_destroy(&fnet);
	virtio_net_destroy(&fnet2);
}

START_TEST(fork_devs_listed)
{
	struct fv_driver nd;
	fork_setup(&nd);
	struct snapshot_dev d[3];
	memset(d, 0x5a, sizeof d);
	ck_assert_uint_eq(virtio_bus_fork_devs(&bus, d, 3), 2);
	for (unsigned i = 0; i < 2; i++) {
		ck_assert_str_eq(d[i].name, tmpl[i].name);
		ck_assert_uint_eq(d[i].slot, i);
		ck_assert_ptr_eq(d[i].ctx, &bus.slot[i]);
		ck_assert_ptr_nonnull(d[i].save);
		ck_assert_ptr_nonnull(d[i].load);
		ck_assert(d[i].save != tmpl[i].save && d[i].load != tmpl[i].load);
	}
	ck_assert_uint_eq(((uint8_t *)&d[2])[0], 0x5a);
	memset(d, 0x5a, sizeof d);
	ck_assert_uint_eq(virtio_bus_fork_devs(&bus, d, 1), 2);
	ck_assert_uint_eq(((uint8_t *)&d[1])[0], 0x5a);
	fork_teardown();
}
END_TEST

/* A vsock holding a connection and a virtio-net with a frame waiting:
 * no template, but a fork; the copy loads both and resets the guest's
 * side of the connection at once. */
START_TEST(fork_devs_save_and_load)
{
	struct fv_driver nd;
	char err[256] = "";
	fork_setup(&nd);
	struct virtio_vsock_conn *c;
	ck_assert_int_eq(virtio_vsock_host_connect(&fvs, 52, NULL, &c), 0); /* no rx buffer yet */
	uint32_t local = c->local_port;
	uint8_t f[60] = { 0 };
	ck_assert_int_eq(virtio_net_rx_enqueue(&fnet, f, sizeof f), 0);

	struct statebuf_writer w[2];
	for (unsigned i = 0; i < 2; i++) {
		statebuf_init(&w[i]);
		err[0] = '\0';
		ck_assert_int_eq(tmpl[i].save(tmpl[i].ctx, &w[i], err, sizeof err), -EBUSY);
		ck_assert_uint_eq(w[i].len, 0);
		ck_assert_int_ne(err[0], '\0');
	}
	for (unsigned i = 0; i < 2; i++)
		ck_assert_int_eq(fork1[i].save(fork1[i].ctx, &w[i], err, sizeof err), 0);
	/* vsock: the transport's state, then version, next port, one pair;
	 * virtio-net: its transport's state alone */
	size_t vs_state = virtio_mmio_state_len(3), net_state = virtio_mmio_state_len(2);
	ck_assert_uint_eq(w[0].len, vs_state + 12 + 8);
	ck_assert_uint_eq(w[1].len, net_state);
	struct statebuf_reader r;
	statebuf_reader_init(&r, w[0].buf + vs_state, w[0].len - vs_state);
	ck_assert_uint_eq(statebuf_get_u32(&r), 1);
	ck_assert_uint_eq(statebuf_get_u32(&r), fvs.next_port);
	ck_assert_uint_eq(statebuf_get_u32(&r), 1);
	ck_assert_uint_eq(statebuf_get_u32(&r), local);
	ck_assert_uint_eq(statebuf_get_u32(&r), 52);
	/* the original goes on as it was */
	ck_assert_int_eq(c->state, VIRTIO_VSOCK_CONNECTING);
	ck_assert_int_eq(fnet.dev.ops->quiet(&fnet.dev, err, sizeof err), -EBUSY);

	/* a fork's blob is no template's: refused before anything changes */
	ck_assert_int_eq(tmpl2[0].load(tmpl2[0].ctx, w[0].buf, w[0].len, err, sizeof err), -EINVAL);
	ck_assert_int_eq(strncmp(err, "vsock: ", 7), 0);
	ck_assert_ptr_nonnull(strstr(err, "a template's has"));
	ck_assert(!fvs2.dev.live);

	/* the guest gave an rx buffer the original never heard of */
	vsock_rx_offer(0x90000, 0x1000);
	for (unsigned i = 0; i < 2; i++)
		ck_assert_int_eq(fork2[i].load(fork2[i].ctx, w[i].buf, w[i].len, err, sizeof err), 0);
	ck_assert(fvs2.dev.live && fnet2.dev.live);
	ck_assert(fnet2.rx_mtu); /* restored ran */
	ck_assert_uint_eq(fvs2.next_port, fvs.next_port);
	/* the RST left at restored, into the buffer the guest gave */
	uint32_t id, len;
	ck_assert(fv_used(&drv, 0, &id, &len));
	ck_assert_uint_eq(len, VIRTIO_VSOCK_HDR_SIZE);
	struct virtio_vsock_hdr h;
	virtio_vsock_hdr_decode(&h, fv_at(&drv, 0x90000, VIRTIO_VSOCK_HDR_SIZE));
	ck_assert_uint_eq(h.op, VIRTIO_VSOCK_OP_RST);
	ck_assert_uint_eq(h.src_port, local);
	ck_assert_uint_eq(h.dst_port, 52);
	ck_assert(!fv_used(&drv, 0, NULL, NULL));
	ck_assert_uint_eq(fvs2.nr_rst, 0);
	/* the copy's virtio-net starts with nothing for the guest */
	ck_assert_int_eq(fnet2.dev.ops->quiet(&fnet2.dev, err, sizeof err), 0);
	for (unsigned i = 0; i < 2; i++)
		statebuf_free(&w[i]);
	fork_teardown();
}
END_TEST

/* A template's blob (a quiet device, no fork state) loads as a fork's. */
START_TEST(fork_devs_load_a_template_blob)
{
	struct fv_driver nd;
	char err[256] = "";
	fork_setup(&nd);
	struct statebuf_writer w[2];
	for (unsigned i = 0; i < 2; i++) {
		statebuf_init(&w[i]);
		ck_assert_int_eq(tmpl[i].save(tmpl[i].ctx, &w[i], err, sizeof err), 0);
	}
	ck_assert_uint_eq(w[0].len, virtio_mmio_state_len(3));
	for (unsigned i = 0; i < 2; i++) {
		err[0] = '\0';
		ck_assert_msg(fork2[i].load(fork2[i].ctx, w[i].buf, w[i].len, err, sizeof err) == 0,
			      "%s: %s", fork2[i].name, err);
	}
	ck_assert(fvs2.dev.live && fnet2.dev.live && fnet2.rx_mtu);
	ck_assert_uint_eq(fvs2.nr_rst, 0);
	ck_assert_uint_eq(fvs2.next_port, VIRTIO_VSOCK_EPHEMERAL_BASE);
	for (unsigned i = 0; i < 2; i++)
		statebuf_free(&w[i]);
	fork_teardown();
}
END_TEST

/* Fork state a device refuses resets it; fork state for a device that
 * takes none is refused before the transport's. */
START_TEST(fork_devs_refuse_bad_fork_state)
{
	struct fv_driver nd;
	char err[256] = "";
	fork_setup(&nd);
	struct virtio_vsock_conn *c;
	ck_assert_int_eq(virtio_vsock_host_connect(&fvs, 52, NULL, &c), 0);
	struct statebuf_writer w[2];
	for (unsigned i = 0; i < 2; i++) {
		statebuf_init(&w[i]);
		ck_assert_int_eq(fork1[i].save(fork1[i].ctx, &w[i], err, sizeof err), 0);
	}
	size_t vs_state = virtio_mmio_state_len(3);
	w[0].buf[vs_state] ^= 0xff; /* another version */
	ck_assert_int_eq(fork2[0].load(fork2[0].ctx, w[0].buf, w[0].len, err, sizeof err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "vsock: malformed fork state"));
	ck_assert_uint_eq(fvs2.nr_rst, 0);
	for (unsigned i = 0; i < VIRTIO_VSOCK_MAX_CONNS; i++)
		ck_assert_int_eq(fvs2.conns[i].state, VIRTIO_VSOCK_FREE);
	/* cut inside the transport's state */
	ck_assert_int_eq(fork2[0].load(fork2[0].ctx, w[0].buf, vs_state - 1, err, sizeof err), -EINVAL);
	ck_assert_int_eq(strncmp(err, "vsock: ", 7), 0);

	/* virtio-net has no fork_load: a byte past its transport's state */
	uint8_t more[1024];
	ck_assert_uint_lt(w[1].len, sizeof more);
	memcpy(more, w[1].buf, w[1].len);
	more[w[1].len] = 1;
	ck_assert_int_eq(fork2[1].load(fork2[1].ctx, more, w[1].len + 1, err, sizeof err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "takes none"));
	ck_assert(!fnet2.dev.live);
	ck_assert_int_eq(fork2[1].load(fork2[1].ctx, more, w[1].len, err, sizeof err), 0);
	ck_assert(fnet2.dev.live);
	for (unsigned i = 0; i < 2; i++)
		statebuf_free(&w[i]);
	fork_teardown();
}
END_TEST

static unsigned open_fds(void)
{
	unsigned n = 0;
	DIR *d = opendir("/proc/self/fd");
	ck_assert_ptr_nonnull(d);
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

/* Without a VM the wiring fails: the error says so, the bus is as it
 * was, and the eventfds made for the slot are closed again. */
START_TEST(add_without_kvm_leaks_nothing)
{
	static struct virtio_vsock vs;
	char cmdline[256] = "", err[256] = "";
	ck_assert_int_eq(virtio_vsock_init(&vs, 3, NULL, NULL), 0);
	unsigned before = open_fds();
	for (unsigned i = 0; i < 3; i++) {
		ck_assert_int_eq(virtio_bus_add(&bus, &vs.dev, NULL, cmdline, sizeof cmdline, err,
						sizeof err),
				 -EBADF);
		ck_assert_ptr_nonnull(strstr(err, "cannot wire a virtio device to KVM"));
		ck_assert_uint_eq(bus.n, 0);
		ck_assert_str_eq(cmdline, "");
	}
	ck_assert_uint_eq(open_fds(), before);
	virtio_vsock_destroy(&vs);
}
END_TEST

Suite *virtio_bus_suite(void)
{
	return unit_suite_fixture("virtio_bus", "snapshot", setup, teardown, 0, describe_lines,
				  describe_follows_config, describe_too_small, describe_empty_bus,
				  snapshot_devs_listed, snapshot_devs_save_and_load,
				  add_without_kvm_leaks_nothing, fork_devs_listed,
				  fork_devs_save_and_load, fork_devs_load_a_template_blob,
				  fork_devs_refuse_bad_fork_state);
}
