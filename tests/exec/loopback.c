/* The exec agent and client against each other on the host, no VM: the
 * agent serves over a socketpair (one command) or an AF_UNIX listener
 * (many), the client is this process with its own stdio.
 *
 *   loopback [OPTS] -- CMD [ARG...]          agent in a forked child
 *   loopback -l PATH                         agent listening on PATH
 *   loopback -s PATH [OPTS] -- CMD [ARG...]  client of that agent
 *   loopback -H PATH -p PORT                 the same behind a fake hybrid
 *                                            vsock socket: "CONNECT PORT\n"
 *                                            gets "OK 1073741824\n", any
 *                                            other port is refused
 *   loopback -s PATH -p PORT [OPTS] -- ...   client through agent_conn_open_once
 * OPTS: -t (tty), -r ROWS, -c COLS, -e K=V (repeatable), -w DIR.
 * Exits with the command's status, or 255 with a message if the session
 * failed. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "guest-init/agent.h"
#include "vmm/sandbox/agent_conn.h"
#include "vmm/sandbox/exec_client.h"

#define MAX_ENV 64

static int unix_addr(const char *path, struct sockaddr_un *a)
{
	memset(a, 0, sizeof *a);
	a->sun_family = AF_UNIX;
	if (strlen(path) >= sizeof a->sun_path)
		return -ENAMETOOLONG;
	strcpy(a->sun_path, path);
	return 0;
}

/* A listening AF_UNIX socket at path, in place of any earlier one, or -1. */
static int listen_unix(const char *path)
{
	struct sockaddr_un a;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (unix_addr(path, &a) < 0) {
		close(fd);
		return -1;
	}
	unlink(path);
	if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 64) < 0) {
		perror("loopback: listen");
		close(fd);
		return -1;
	}
	return fd;
}

static int serve(const char *path)
{
	int fd = listen_unix(path);
	if (fd < 0)
		return 255;
	int rc = agent_serve_listener(fd);
	fprintf(stderr, "loopback: agent: %s\n", strerror(-rc));
	return 255;
}

/* One hybrid-vsock connection: the CONNECT line, then the agent. */
static int hybrid_conn(int fd, unsigned port)
{
	char line[32], want[32];
	size_t n = 0;
	snprintf(want, sizeof want, "CONNECT %u\n", port);
	while (n < sizeof line - 1 && read(fd, line + n, 1) == 1)
		if (line[n++] == '\n')
			break;
	line[n] = 0;
	if (strcmp(line, want) != 0)
		return 1;
	static const char ok[] = "OK 1073741824\n";
	if (write(fd, ok, sizeof ok - 1) != (ssize_t)sizeof ok - 1)
		return 1;
	return agent_serve_fd(fd) < 0;
}

static int serve_hybrid(const char *path, unsigned port)
{
	int fd = listen_unix(path);
	if (fd < 0)
		return 255;
	signal(SIGCHLD, SIG_IGN);
	for (;;) {
		int c = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0)
			continue;
		if (fork() == 0)
			_exit(hybrid_conn(c, port));
		close(c);
	}
}

static int connect_to(const char *path)
{
	struct sockaddr_un a;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || unix_addr(path, &a) < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

int main(int argc, char **argv)
{
	struct exec_proto_exec req = { .cwd = "" };
	char *env[MAX_ENV + 1] = { 0 };
	const char *sock_path = NULL, *hybrid_path = NULL;
	int port = -1;
	int opt;
	while ((opt = getopt(argc, argv, "tr:c:e:w:l:s:H:p:")) != -1) {
		switch (opt) {
		case 't':
			req.flags |= EXEC_PROTO_FLAG_TTY;
			break;
		case 'r':
			req.rows = (uint16_t)atoi(optarg);
			break;
		case 'c':
			req.cols = (uint16_t)atoi(optarg);
			break;
		case 'e':
			if (req.envc == MAX_ENV)
				return 255;
			env[req.envc++] = optarg;
			break;
		case 'w':
			req.cwd = optarg;
			break;
		case 'l':
			return serve(optarg);
		case 's':
			sock_path = optarg;
			break;
		case 'H':
			hybrid_path = optarg;
			break;
		case 'p':
			port = atoi(optarg);
			break;
		default:
			fprintf(stderr, "usage: see tests/exec/loopback.c\n");
			return 255;
		}
	}
	if (hybrid_path)
		return port < 0 ? 255 : serve_hybrid(hybrid_path, (unsigned)port);
	if (optind >= argc) {
		fprintf(stderr, "loopback: no command\n");
		return 255;
	}
	req.argc = (uint32_t)(argc - optind);
	req.argv = argv + optind;
	req.envp = env;

	int fd;
	pid_t agent = -1;
	if (sock_path && port >= 0) {
		fd = agent_conn_open_once(sock_path, (unsigned)port, 5000);
		if (fd < 0) {
			fprintf(stderr, "loopback: connect: %s\n", strerror(-fd));
			return 255;
		}
	} else if (sock_path) {
		fd = connect_to(sock_path);
		if (fd < 0) {
			perror("loopback: connect");
			return 255;
		}
	} else {
		int sv[2];
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
			perror("loopback: socketpair");
			return 255;
		}
		agent = fork();
		if (agent < 0) {
			perror("loopback: fork");
			return 255;
		}
		if (agent == 0) {
			/* Out of the client's process group, like an agent in
			 * a VM: a Ctrl-C or a group kill reaches the client
			 * only, which must forward it. */
			setpgid(0, 0);
			close(sv[0]);
			_exit(agent_serve_fd(sv[1]) < 0 ? 1 : 0);
		}
		close(sv[1]);
		fd = sv[0];
	}
	int rc = exec_client_run(fd, &req);
	close(fd);
	if (agent > 0) {
		int st;
		while (waitpid(agent, &st, 0) < 0 && errno == EINTR)
			;
	}
	if (rc < 0) {
		fprintf(stderr, "loopback: session failed: %s\n", strerror(-rc));
		return 255;
	}
	return rc;
}
