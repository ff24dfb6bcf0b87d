/* Exec agent: runs commands inside the guest for the host, one per
 * connection, speaking the frames of proto/exec_proto.h
 * (docs/exec-protocol.md).  Built into guest-init, and natively into the
 * loopback test, so the transport is injectable: the listener and the
 * per-connection handler take plain fds. */
#ifndef KBOX_AGENT_H
#define KBOX_AGENT_H

/* Listen on AF_VSOCK port (any CID) and serve connections forever, as
 * agent_serve_listener does.  Call it in a process of its own (it changes
 * signal dispositions and never returns while the listener works).
 * Returns a negative errno if the socket cannot be set up or accept fails
 * for good; the caller then leaves with _exit. */
int agent_serve(unsigned port);

/* Ask for a connection to cid:port and close it at once, whatever the
 * answer: a signal to the host that carries nothing else. */
void agent_vsock_knock(unsigned cid, unsigned port);

/* A vsock stream socket listening on port (any CID) with backlog: its fd,
 * or a negative errno. */
int agent_vsock_listen(unsigned port, int backlog);

/* Accept connections on the listening stream socket lfd, each handled by
 * agent_serve_fd in a forked child, so that many commands run at once.
 * Handlers are reaped automatically (SIGCHLD is ignored in this process).
 * Returns only on a persistent accept error, as a negative errno. */
int agent_serve_listener(int lfd);

/* Serve one connection on the connected stream fd: read the EXEC frame,
 * run the command with pipes or a pty, shuttle its I/O, signals and
 * window size until it exits and its output is drained, send EXIT and
 * close fd.  Blocks the caller for the command's lifetime; ignores
 * SIGPIPE and resets SIGCHLD to default in the calling process.  Returns
 * 0 once EXIT was sent, or a negative errno (-EPROTO for a malformed
 * stream, -ECONNRESET if the host went away: the command's process group
 * then gets SIGHUP). */
int agent_serve_fd(int fd);

/* From then on every command's EXIT is sent only after sync() and a
 * freeze and thaw of each of the n mount points in rw_paths (which must
 * stay valid): kbox stops the VM when the main command has exited, so
 * what it wrote to a disk volume must be on the device by then, and the
 * journal empty (guest-init calls it when it mounted a disk).  Call
 * before agent_serve. */
void agent_sync_on_exit(const char *const *rw_paths, unsigned n);

/* Accept the next connection on the vsock listener lfd that comes from
 * the host (CID 2); one from anywhere else is closed.  The fd, or a
 * negative errno. */
int agent_vsock_accept_host(int lfd);

#endif
