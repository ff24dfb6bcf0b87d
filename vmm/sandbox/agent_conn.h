/* Reaching the exec agent in a sandbox through its hybrid vsock socket. */
#ifndef KBOX_AGENT_CONN_H
#define KBOX_AGENT_CONN_H

#include <stdatomic.h>

#include "proto/exec_proto.h"

/* The agent's vsock port inside the guest. */
#define AGENT_PORT EXEC_PROTO_VSOCK_PORT

/* One attempt: connect to the sandbox's control socket, ask for guest
 * port `port` ("CONNECT port\n") and wait up to timeout_ms for "OK …\n".
 * Returns the connected stream fd, -ECONNREFUSED if the guest refused (no
 * listener yet), or another negative errno. */
int agent_conn_open_once(const char *sock, unsigned port, int timeout_ms);

/* Retry agent_conn_open_once (after 1, 2, 4 ... ms, then every 100 ms)
 * until it succeeds, *stop becomes non-zero (-ESHUTDOWN), or timeout_ms
 * passes (-ETIMEDOUT; < 0 = never). */
int agent_conn_open(const char *sock, unsigned port, int timeout_ms, atomic_int *stop);

#endif
