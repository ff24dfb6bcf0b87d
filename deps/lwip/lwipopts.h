/*
 * kbox's options for lwIP (deps/lwip/build.sh compiles Debian's lwIP
 * source package with this file; every file of kbox that includes an
 * lwIP header sees the same one, since the options change the layout of
 * lwIP's structures).
 *
 * lwIP here terminates the guest's TCP connections inside the kbox
 * process; its IP layer is bypassed (netstack/ parses the guest's frames
 * itself and hands TCP segments to tcp_input), so only TCP and the
 * thread that runs its timers are really used.
 */
#ifndef KBOX_LWIPOPTS_H
#define KBOX_LWIPOPTS_H

/* An OS with threads: tcpip_init starts lwIP's thread (TCP timers), and
 * kbox's threads call into lwIP holding the core lock. */
#define NO_SYS 0
#define LWIP_TCPIP_CORE_LOCKING 1
#define LWIP_NETCONN 0
#define LWIP_SOCKET 0

/* Memory from malloc: no fixed pools, so MEMP_NUM_TCP_PCB and friends
 * are no cap (netstack/ bounds its flows itself). */
#define MEM_LIBC_MALLOC 1
#define MEMP_MEM_MALLOC 1
#define MEM_USE_POOLS 0
#if defined __LP64__
#define MEM_ALIGNMENT 8
#else
#define MEM_ALIGNMENT 4
#endif

#define LWIP_IPV4 1
#define LWIP_IPV6 1
#define LWIP_ARP 1
#define LWIP_ETHERNET 1
#define LWIP_ICMP 1
#define LWIP_UDP 1
#define LWIP_TCP 1
#define LWIP_RAW 0
#define LWIP_IGMP 0
#define LWIP_DHCP 0
#define LWIP_DNS 0
#define IP_FORWARD 0
#define LWIP_NETIF_LOOPBACK 0
#define LWIP_HAVE_LOOPIF 0
#define LWIP_NETIF_TX_SINGLE_PBUF 1
#define SO_REUSE 1
#define LWIP_TCP_KEEPALIVE 1
#define LWIP_RANDOMIZE_INITIAL_LOCAL_PORTS 1

/* TCP sized for a virtual link, not for a microcontroller.
 *
 * The MSS lets one segment fill a 64 KiB frame: the guest's NIC offers
 * a 65520-byte MTU (devices/virtio_net.h), and a pbuf's length is 16
 * bits, so the segment plus lwIP's header room (Ethernet, IPv6's 40-byte
 * IP header, TCP, each rounded to MEM_ALIGNMENT) must stay below 64 KiB.
 * A guest at MTU 1500 states its MSS in its SYN and gets segments of
 * that size (merged into large frames by lib/gso.h where it takes them).
 *
 * Windows of 2 MiB with window scaling: receive and send, per
 * connection.  Memory is bounded by them: lwIP holds at most TCP_WND of
 * the guest's bytes (tcp_recved is called only for bytes the host socket
 * took) and TCP_SND_BUF of the host's. */
#define TCP_MSS 65448
#define TCP_WND (2 * 1024 * 1024)
#define LWIP_WND_SCALE 1
#define TCP_RCV_SCALE 6 /* 65535 << 6 is just under 4 MiB */
#define TCP_SND_BUF (2 * 1024 * 1024)
/* Queue entries for TCP_SND_BUF in 1460-byte segments too. */
#define TCP_SND_QUEUELEN 2048
#define LWIP_CHECKSUM_ON_COPY 0
/* init.c's sanity checks assume a small MSS: one wants TCP_SNDLOWAT (the
 * writable mark of the socket API, which is not built) 4 MSS below 64 KiB.
 * The others hold for the values above: TCP_SND_BUF >= 2 MSS,
 * TCP_SND_QUEUELEN >= 2 TCP_SND_BUF / MSS, TCP_WND >= MSS. */
#define LWIP_DISABLE_TCP_SANITY_CHECKS 1
/* Pool pbufs (which nothing kbox uses takes) keep their usual size: the
 * default, MSS plus headers, would overflow memp's 16-bit sizes. */
#define PBUF_POOL_BUFSIZE 1536

/* Checksums: every frame from the guest had its IP and TCP checksums
 * verified by lib/frame.c before it reaches lwIP, so lwIP does not check
 * them again. */
#define CHECKSUM_CHECK_IP 0
#define CHECKSUM_CHECK_TCP 0
#define CHECKSUM_CHECK_UDP 0
#define CHECKSUM_CHECK_ICMP 0
/* Generating them is decided per netif: the stack turns TCP's off when
 * its peer completes partial checksums (netstack/stack.c, stack_create). */
#define LWIP_CHECKSUM_CTRL_PER_NETIF 1

/* lwIP's argument checks (LWIP_ERROR) return an error instead of
 * aborting; its assertions of its own invariants still abort. */
#define LWIP_NOASSERT_ON_ERROR 1

#define LWIP_STATS 0
#define LWIP_STATS_DISPLAY 0

/* Debian's Unix port (port/sys_arch.c) checks the core lock on every
 * lwIP call that needs it: a call without it is an abort, not a race. */
void sys_check_core_locking(void);
#define LWIP_ASSERT_CORE_LOCKED() sys_check_core_locking()
void sys_mark_tcpip_thread(void);
#define LWIP_MARK_TCPIP_THREAD() sys_mark_tcpip_thread()
void sys_lock_tcpip_core(void);
#define LOCK_TCPIP_CORE() sys_lock_tcpip_core()
void sys_unlock_tcpip_core(void);
#define UNLOCK_TCPIP_CORE() sys_unlock_tcpip_core()

#endif /* KBOX_LWIPOPTS_H */
