/* benchtool: the few measurements the bench/ scripts cannot take precisely
 * from a shell (process spawns cost milliseconds; a hardware-KVM boot takes
 * tens of them).
 *
 *   benchtool now
 *       CLOCK_MONOTONIC in nanoseconds.
 *   benchtool boot [-l LOG] FIFO MARKER TIMEOUT_S [END] -- CMD [ARG...]
 *       Runs CMD, whose serial console goes to the FIFO, and prints one line:
 *       "first_ms=F marker_ms=M end_ms=D exit_ms=E status=S rss_kib=R guest_kib=G"
 *       F: first console byte; M: first line containing MARKER, where the
 *       smaps of CMD are sampled (R: total Rss, G: Rss of the largest
 *       anonymous mapping, i.e. guest RAM); D: first line containing END,
 *       after which CMD gets SIGTERM (for a VMM that cannot end the guest by
 *       itself); E: CMD's exit. Times are from just before the fork; -1 if
 *       it did not happen. CMD gets SIGTERM, then SIGKILL, after TIMEOUT_S
 *       (status=timeout). With -l, every console line is also written to LOG
 *       as "MS<TAB>LINE", MS its arrival (when its newline came) from just
 *       before the fork, so that a script can set the guest's own printk
 *       timestamps beside the host's clock.
 *   benchtool waitfor FILE OFFSET NEEDLE COUNT TIMEOUT_S
 *       Waits until FILE, read from byte OFFSET on, holds COUNT occurrences of
 *       NEEDLE, and prints the monotonic time (ns) at which it saw them; exit
 *       status 1 on timeout.
 *   benchtool out TIMEOUT_S -- CMD [ARG...]
 *       Runs CMD with its stdout on a pipe, which is read and dropped, and
 *       prints one line: "first_ms=F exit_ms=E bytes=N status=S", F the first
 *       byte on CMD's stdout, E CMD's exit (both from just before the fork;
 *       -1 if it did not happen), N the bytes it wrote there. After
 *       TIMEOUT_S, CMD gets SIGTERM, then SIGKILL (status=timeout).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static double ms_since(int64_t t0, int64_t t)
{
	return t < 0 ? -1.0 : (double)(t - t0) / 1e6;
}

/* Total Rss and the Rss of the largest anonymous mapping of pid, in KiB. */
static int smaps_sample(pid_t pid, long *total, long *guest)
{
	char path[64], line[512];
	snprintf(path, sizeof path, "/proc/%d/smaps", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -errno;
	long cur_size = 0, best_size = -1, best_rss = 0;
	int cur_anon = 0;
	*total = 0;
	while (fgets(line, sizeof line, f)) {
		unsigned long lo, hi, ino;
		char perms[8], dev[16];
		int name_at = 0;
		if (sscanf(line, "%lx-%lx %7s %*x %15s %lu %n", &lo, &hi, perms, dev, &ino,
			   &name_at) == 5) {
			/* Anonymous: no inode and no name ([heap] and [stack] have one). */
			cur_anon = ino == 0 && line[name_at] == '\0';
			cur_size = (long)((hi - lo) >> 10);
			continue;
		}
		long v;
		if (sscanf(line, "Rss: %ld kB", &v) == 1) {
			*total += v;
			if (cur_anon && cur_size > best_size) {
				best_size = cur_size;
				best_rss = v;
			}
		}
	}
	fclose(f);
	*guest = best_rss;
	return 0;
}

/* SIGTERM, up to 5 s for the exit (kbox then removes its sandbox
 * directory), then SIGKILL. */
static void end_child(pid_t pid, int *status)
{
	kill(pid, SIGTERM);
	pid_t w = 0;
	for (int i = 0; i < 50 && (w = waitpid(pid, status, WNOHANG)) == 0; i++)
		nanosleep(&(struct timespec){ 0, 100000000 }, NULL);
	if (w == 0) {
		kill(pid, SIGKILL);
		waitpid(pid, status, 0);
	}
}

static int cmd_boot(int argc, char **argv)
{
	const char *end = NULL;
	FILE *log = NULL;
	if (argc >= 3 && strcmp(argv[1], "-l") == 0) {
		log = fopen(argv[2], "we");
		if (!log) {
			perror(argv[2]);
			return 2;
		}
		argc -= 2;
		memmove(argv + 1, argv + 3, (size_t)(argc - 1) * sizeof *argv);
		argv[argc] = NULL;
	}
	if (argc >= 6 && strcmp(argv[4], "--") != 0) {
		end = argv[4];
		argc--;
		memmove(argv + 4, argv + 5, (size_t)argc * sizeof *argv);
	}
	if (argc < 6 || strcmp(argv[4], "--") != 0) {
		fprintf(stderr,
			"usage: benchtool boot [-l LOG] FIFO MARKER TIMEOUT_S [END] -- CMD [ARG...]\n");
		if (log)
			fclose(log);
		return 2;
	}
	const char *marker = argv[2];
	int64_t timeout = (int64_t)atoi(argv[3]) * 1000000000;
	/* O_RDWR: the open does not wait for a writer and reads never see EOF. */
	int fifo = open(argv[1], O_RDWR | O_NONBLOCK | O_CLOEXEC);
	if (fifo < 0) {
		perror(argv[1]);
		if (log)
			fclose(log);
		return 2;
	}
	int64_t t0 = now_ns();
	pid_t pid = fork();
	if (pid < 0) {
		perror("fork");
		return 2;
	}
	if (pid == 0) {
		execvp(argv[5], argv + 5);
		perror(argv[5]);
		_exit(127);
	}
	int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (pfd < 0) {
		perror("pidfd_open");
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		return 2;
	}
	int64_t t_first = -1, t_marker = -1, t_end = -1, t_exit = -1;
	long rss = -1, guest = -1;
	char line[4096];
	size_t llen = 0;
	int status = 0, timed_out = 0;
	for (;;) {
		int64_t left = t0 + timeout - now_ns();
		if (left <= 0) {
			timed_out = 1;
			end_child(pid, &status);
			break;
		}
		struct pollfd p[2] = { { fifo, POLLIN, 0 }, { pfd, POLLIN, 0 } };
		int n = poll(p, 2, (int)(left / 1000000) + 1);
		if (n < 0 && errno != EINTR)
			break;
		if (p[0].revents & POLLIN) {
			char buf[4096];
			ssize_t r = read(fifo, buf, sizeof buf);
			int64_t t = now_ns();
			if (r > 0 && t_first < 0)
				t_first = t;
			for (ssize_t i = 0; i < r; i++) {
				if (buf[i] != '\n' && llen < sizeof line - 1) {
					line[llen++] = buf[i];
					continue;
				}
				line[llen] = '\0';
				llen = 0;
				if (log) {
					size_t l = strlen(line);
					while (l > 0 && line[l - 1] == '\r')
						l--;
					fprintf(log, "%.1f\t%.*s\n", ms_since(t0, t), (int)l, line);
				}
				if (t_marker < 0 && strstr(line, marker)) {
					t_marker = t;
					smaps_sample(pid, &rss, &guest);
				}
				if (end && t_end < 0 && strstr(line, end)) {
					t_end = t;
					kill(pid, SIGTERM);
				}
			}
			continue;
		}
		if (p[1].revents & POLLIN) {
			waitpid(pid, &status, 0);
			t_exit = now_ns();
			break;
		}
	}
	if (log)
		fclose(log);
	char st[32];
	if (timed_out)
		snprintf(st, sizeof st, "timeout");
	else if (WIFEXITED(status))
		snprintf(st, sizeof st, "%d", WEXITSTATUS(status));
	else
		snprintf(st, sizeof st, "sig%d", WTERMSIG(status));
	printf("first_ms=%.1f marker_ms=%.1f end_ms=%.1f exit_ms=%.1f status=%s rss_kib=%ld "
	       "guest_kib=%ld\n",
	       ms_since(t0, t_first), ms_since(t0, t_marker), ms_since(t0, t_end),
	       ms_since(t0, t_exit), st, rss, guest);
	return 0;
}

static int cmd_waitfor(int argc, char **argv)
{
	if (argc != 6) {
		fprintf(stderr, "usage: benchtool waitfor FILE OFFSET NEEDLE COUNT TIMEOUT_S\n");
		return 2;
	}
	const char *needle = argv[3];
	size_t nlen = strlen(needle);
	long want = atol(argv[4]);
	int64_t deadline = now_ns() + (int64_t)atoi(argv[5]) * 1000000000;
	if (nlen == 0 || nlen > 256)
		return 2;
	int fd = open(argv[1], O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		perror(argv[1]);
		return 2;
	}
	if (lseek(fd, atol(argv[2]), SEEK_SET) < 0) {
		perror("lseek");
		return 2;
	}
	/* Keep the last nlen-1 bytes so a needle split across reads counts. */
	char buf[65536 + 256];
	size_t keep = 0;
	long seen = 0;
	while (seen < want) {
		ssize_t r = read(fd, buf + keep, sizeof buf - 256);
		if (r < 0 && errno != EINTR)
			return 2;
		if (r <= 0) {
			if (now_ns() > deadline)
				return 1;
			/* A regular file cannot be polled; a short sleep bounds the
			 * error to well under a millisecond. */
			nanosleep(&(struct timespec){ 0, 200000 }, NULL);
			continue;
		}
		size_t len = keep + (size_t)r;
		size_t i = 0;
		while (i + nlen <= len) {
			if (memcmp(buf + i, needle, nlen) == 0) {
				seen++;
				i += nlen;
			} else {
				i++;
			}
		}
		keep = len - i;
		memmove(buf, buf + len - keep, keep);
	}
	printf("%lld\n", (long long)now_ns());
	return 0;
}

static int cmd_out(int argc, char **argv)
{
	if (argc < 4 || strcmp(argv[2], "--") != 0) {
		fprintf(stderr, "usage: benchtool out TIMEOUT_S -- CMD [ARG...]\n");
		return 2;
	}
	int64_t timeout = (int64_t)atoi(argv[1]) * 1000000000;
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0) {
		perror("pipe2");
		return 2;
	}
	int64_t t0 = now_ns();
	pid_t pid = fork();
	if (pid < 0) {
		perror("fork");
		return 2;
	}
	if (pid == 0) {
		if (dup2(p[1], 1) < 0)
			_exit(127);
		execvp(argv[3], argv + 3);
		perror(argv[3]);
		_exit(127);
	}
	close(p[1]);
	int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (pfd < 0) {
		perror("pidfd_open");
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		return 2;
	}
	int64_t t_first = -1, t_exit = -1;
	long long bytes = 0;
	int status = 0, timed_out = 0, out_open = 1;
	for (;;) {
		int64_t left = t0 + timeout - now_ns();
		if (left <= 0) {
			timed_out = 1;
			end_child(pid, &status);
			break;
		}
		/* The pipe until its EOF (a child of CMD may hold it open past
		 * CMD's exit: then the exit ends the run). */
		struct pollfd q[2] = { { out_open ? p[0] : -1, POLLIN, 0 }, { pfd, POLLIN, 0 } };
		int n = poll(q, 2, (int)(left / 1000000) + 1);
		if (n < 0 && errno != EINTR)
			break;
		if (q[0].revents & (POLLIN | POLLHUP)) {
			char buf[65536];
			ssize_t r = read(p[0], buf, sizeof buf);
			if (r > 0) {
				if (t_first < 0)
					t_first = now_ns();
				bytes += r;
			} else if (r == 0 || errno != EINTR) {
				out_open = 0;
			}
			continue;
		}
		if (q[1].revents & POLLIN) {
			waitpid(pid, &status, 0);
			t_exit = now_ns();
			break;
		}
	}
	close(p[0]);
	close(pfd);
	char st[32];
	if (timed_out)
		snprintf(st, sizeof st, "timeout");
	else if (WIFEXITED(status))
		snprintf(st, sizeof st, "%d", WEXITSTATUS(status));
	else
		snprintf(st, sizeof st, "sig%d", WTERMSIG(status));
	printf("first_ms=%.1f exit_ms=%.1f bytes=%lld status=%s\n", ms_since(t0, t_first),
	       ms_since(t0, t_exit), bytes, st);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "now") == 0) {
		printf("%lld\n", (long long)now_ns());
		return 0;
	}
	if (argc >= 2 && strcmp(argv[1], "boot") == 0)
		return cmd_boot(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "waitfor") == 0)
		return cmd_waitfor(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "out") == 0)
		return cmd_out(argc - 1, argv + 1);
	fprintf(stderr, "usage: benchtool now | boot ... | waitfor ... | out ...\n");
	return 2;
}
