/* Host side of the exec channel (docs/exec-protocol.md): runs one command
 * in the guest over an already connected stream and connects it to this
 * process's stdin, stdout and stderr, as `kbox exec` and `kbox run` do. */
#ifndef KBOX_EXEC_CLIENT_H
#define KBOX_EXEC_CLIENT_H

#include "proto/exec_proto.h"


/* Run req over fd (a connected stream to the agent, already past any
 * CONNECT handshake; made non-blocking; not closed).  Streams fd 0 to the
 * command's stdin (EOF becomes STDIN_EOF) and its STDOUT/STDERR frames to
 * fds 1 and 2; an ERROR frame is printed on fd 2.  While it runs, SIGINT,
 * SIGTERM, SIGHUP and SIGQUIT are caught and forwarded to the command,
 * SIGPIPE is ignored (a closed stdout discards further output and sends
 * the command SIGPIPE), and previous dispositions are restored before it
 * returns.  With EXEC_PROTO_FLAG_TTY and a terminal on fd 0, that terminal is put
 * in raw mode and restored on every return path (input typed before
 * that is read as canonical lines first, so an end-of-file typed ahead
 * stays an end-of-file rather than a NUL byte); its size is sent on
 * SIGWINCH, and used for the request when req->rows and req->cols are
 * both 0.  Not reentrant: one call at a time per process.
 *
 * Returns the command's exit status (0-255, 128 + signal for a killed
 * command, 127/126 when it could not be started), or a negative errno if
 * the request cannot be encoded (-E2BIG, -EINVAL) or the connection ends
 * before EXIT (-ECONNRESET, -EPROTO for a malformed stream). */
int exec_client_run(int fd, const struct exec_proto_exec *req);

#endif
