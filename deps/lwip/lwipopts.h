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

/* TCP: the packaged library's sizes, for now. */
#define TCP_MSS 1460
#define TCP_WND 0xFFFF
#define LWIP_WND_SCALE 1
#define TCP_RCV_SCALE 1
#define TCP_SND_BUF TCP_WND
#define LWIP_CHECKSUM_ON_COPY 1

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
