/* /dev/fuse harness: serves a host directory through kbox's FUSE server at
 * a mountpoint, with the host kernel playing the guest.  Real programs then
 * run on the mount (tests/fuse/run.sh, bench/fs).
 *
 *   kbox-fuse-mount [-r] [-n] [-H PATTERN]... [-A PATTERN]... [-m MAXFDS] [-c SECONDS]
 *                   [-t THREADS] [-O] [-U UID:GID] SRC MNT
 *     -r  read-only mount (the server refuses writes; the kernel mount is
 *         left writable so that the server's refusal is what is tested)
 *     -n  hide nothing (explicit empty hidden list)
 *     -H  add a hidden pattern (replaces the default list)
 *     -A  add a hidden pattern to the list in force (the defaults, or
 *         the -H ones): sandbox.yaml's hidden_extra
 *     -m  cap on host fds held for the guest
 *     -c  seconds the kernel may cache names and attributes (default 1)
 *     -t  threads answering requests (default 4, at most 64, and at most
 *         the number of CPUs the process may run on): each reads
 *         its own clone of the /dev/fuse fd (FUSE_DEV_IOC_CLONE) and calls
 *         the one shared server, so the kernel's parallel requests (git's
 *         preload lstat's, parallel lookups in one directory) are answered
 *         in parallel
 *     -O  answer OPENDIR with a handle even when the kernel offers
 *         FUSE_NO_OPENDIR_SUPPORT (by default directories are then opened
 *         without a message, and READDIR names the node)
 *     -U  serve as that user and group, as kbox run by an ordinary user
 *         does: the mount is made as root, then the server drops every
 *         privilege (no supplementary groups) and its guest root is
 *         UID:GID (devices/idmap.h); without -U the guest root is the
 *         harness's own user, root, the identity map
 *
 * Runs in the foreground until the mount goes away (umount), then every
 * thread sees ENODEV, they are joined, and it exits 0.  Needs root
 * (mount(2); an unprivileged FUSE mount needs fusermount, which the test
 * machines lack: -U is how the server runs as an ordinary user). */
#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <grp.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "devices/fs_passthrough.h"
#include "devices/fuse_server.h"

#define MAX_HIDDEN 64
#define MAX_THREADS 64

static int usage(void)
{
	fprintf(stderr, "usage: kbox-fuse-mount [-r] [-n] [-H PATTERN]... [-A PATTERN]... "
			"[-m MAXFDS] [-c SECONDS] [-t THREADS] [-O] [-U UID:GID] SRC MNT\n");
	return 2;
}

/* Threads beyond the first are woken only when requests queue up.  A thread
 * that takes a request and sees another already waiting wakes an idle
 * thread to read it; a thread done with its request parks while another one
 * reads.  A client that sends one request at a time (find, ls, tar) is then
 * served by one thread with no hand-off, and a burst (git's parallel index
 * preload) by several: the kernel would otherwise hand each request to the
 * next of N blocked readers in turn, a cross-CPU wakeup per request. */
struct pool {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	unsigned reading, idle;
	bool done;
};

struct worker {
	pthread_t tid;
	int fd;
	struct fuse_server *srv;
	struct pool *pool;
	int rc;
};

/* Before a read: parks while another thread reads (and the pool goes on);
 * false once the pool is done. */
static bool pool_enter(struct pool *p)
{
	pthread_mutex_lock(&p->mu);
	while (p->reading > 0 && !p->done) {
		p->idle++;
		pthread_cond_wait(&p->cv, &p->mu);
		p->idle--;
	}
	bool go = !p->done;
	if (go)
		p->reading++;
	pthread_mutex_unlock(&p->mu);
	return go;
}

/* After a read returned a request on fd: if more are queued and nobody is
 * reading, wakes an idle thread to take them. */
static void pool_took(struct pool *p, int fd)
{
	pthread_mutex_lock(&p->mu);
	p->reading--;
	bool wake = p->reading == 0 && p->idle > 0;
	pthread_mutex_unlock(&p->mu);
	struct pollfd pf = { .fd = fd, .events = POLLIN };
	if (wake && poll(&pf, 1, 0) > 0)
		pthread_cond_signal(&p->cv);
}

static void pool_quit(struct pool *p)
{
	pthread_mutex_lock(&p->mu);
	p->done = true;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
}

/* The kernel only passes a read buffer at least max_write + headers long. */
static int serve(struct worker *w)
{
	size_t in_size = fuse_server_max_request(w->srv);
	size_t out_size = in_size;
	char *in = malloc(in_size), *out = malloc(out_size);
	int rc = 0;

	if (!in || !out) {
		fprintf(stderr, "kbox-fuse-mount: out of memory\n");
		rc = 1;
		goto done;
	}
	while (pool_enter(w->pool)) {
		ssize_t n = read(w->fd, in, in_size);
		if (n < 0) {
			pool_took(w->pool, w->fd);
			/* ENOENT: the request was interrupted before we read it. */
			if (errno == EINTR || errno == ENOENT || errno == EAGAIN)
				continue;
			if (errno != ENODEV) {
				perror("kbox-fuse-mount: read /dev/fuse");
				rc = 1;
			}
			break;
		}
		pool_took(w->pool, w->fd);
		ssize_t r = fuse_server_handle_buf(w->srv, in, (size_t)n, out,
						   out_size);
		if (r < 0) {
			fprintf(stderr, "kbox-fuse-mount: bad request (%s)\n",
				strerror((int)-r));
			continue;
		}
		/* ENOENT on write: the kernel gave up on the request. */
		if (r > 0 && write(w->fd, out, (size_t)r) < 0 && errno != ENOENT) {
			if (errno == ENODEV)
				break;
			perror("kbox-fuse-mount: write /dev/fuse");
		}
		if (fuse_server_destroyed(w->srv))
			break;
	}
done:
	/* The mount is gone (or this thread failed): the parked threads
	 * leave too, the ones in read() see ENODEV. */
	pool_quit(w->pool);
	free(in);
	free(out);
	return rc;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;

	w->rc = serve(w);
	return NULL;
}

/* Serves the mount on fd with n threads, each on its own clone of fd (or
 * on fd itself where cloning fails), until the mount goes away; every
 * thread is joined and every clone closed.  Returns 0 or 1. */
static int serve_threads(int fd, struct fuse_server *srv, unsigned n)
{
	/* More threads than CPUs to run on cannot answer in parallel, only
	 * hand requests to each other (pinned to one CPU, 4 threads made
	 * git status 25 % slower than 1). */
	cpu_set_t cpus;
	if (sched_getaffinity(0, sizeof cpus, &cpus) == 0 &&
	    (unsigned)CPU_COUNT(&cpus) < n)
		n = (unsigned)CPU_COUNT(&cpus);
	struct worker w[MAX_THREADS];
	struct pool pool = { .mu = PTHREAD_MUTEX_INITIALIZER,
			     .cv = PTHREAD_COND_INITIALIZER };
	unsigned started = 0;
	int rc = 0;

	for (unsigned i = 0; i < n; i++) {
		w[i] = (struct worker){ .fd = fd, .srv = srv, .pool = &pool };
		if (i > 0) {
			uint32_t master = (uint32_t)fd;
			int c = open("/dev/fuse", O_RDWR | O_CLOEXEC);
			if (c >= 0 && ioctl(c, FUSE_DEV_IOC_CLONE, &master) == 0) {
				w[i].fd = c;
			} else if (c >= 0) {
				close(c);
			}
		}
		if (i > 0 && pthread_create(&w[i].tid, NULL, worker_main, &w[i]) != 0) {
			if (w[i].fd != fd)
				close(w[i].fd);
			fprintf(stderr, "kbox-fuse-mount: %u threads only\n", i);
			break;
		}
		started = i + 1;
	}
	/* The main thread is worker 0. */
	w[0].rc = serve(&w[0]);
	for (unsigned i = 1; i < started; i++) {
		pthread_join(w[i].tid, NULL);
		if (w[i].fd != fd)
			close(w[i].fd);
		rc |= w[i].rc;
	}
	return rc | w[0].rc;
}

int main(int argc, char **argv)
{
	const char *hidden[MAX_HIDDEN], *extra[MAX_HIDDEN];
	struct fs_passthrough_config cfg = { 0 };
	struct fuse_server_config scfg = { 0 };
	struct rlimit rl;
	double timeout = 1.0;
	unsigned threads = 4;
	unsigned as_uid = 0, as_gid = 0;
	bool as_user = false;
	int opt;

	while ((opt = getopt(argc, argv, "rnH:A:m:c:t:OU:")) != -1) {
		switch (opt) {
		case 'r':
			cfg.readonly = true;
			break;
		case 'n':
			cfg.hidden.set = true;
			break;
		case 'H':
			if (cfg.hidden.n == MAX_HIDDEN)
				return usage();
			cfg.hidden.set = true;
			hidden[cfg.hidden.n++] = optarg;
			break;
		case 'A':
			if (cfg.hidden.n_extra == MAX_HIDDEN)
				return usage();
			extra[cfg.hidden.n_extra++] = optarg;
			break;
		case 'm':
			cfg.max_fds = (unsigned)strtoul(optarg, NULL, 10);
			break;
		case 'c':
			timeout = strtod(optarg, NULL);
			break;
		case 't':
			threads = (unsigned)strtoul(optarg, NULL, 10);
			if (threads < 1 || threads > MAX_THREADS)
				return usage();
			break;
		case 'O':
			scfg.keep_opendir = true;
			break;
		case 'U':
			if (sscanf(optarg, "%u:%u", &as_uid, &as_gid) != 2)
				return usage();
			as_user = true;
			break;
		default:
			return usage();
		}
	}
	if (argc - optind != 2)
		return usage();
	cfg.root = argv[optind];
	cfg.hidden.list = hidden;
	cfg.hidden.extra = extra;
	const char *mnt = argv[optind + 1];

	/* The backend keeps inode fds under its cap by closing the least
	 * recently used ones and reopening them on demand; a higher limit
	 * spares those reopens.  As root, raise the hard limit to the
	 * system's ceiling (fs.nr_open) first; else take what the hard limit
	 * allows. */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
		FILE *f = fopen("/proc/sys/fs/nr_open", "r");
		unsigned long ceiling = 0;
		if (f) {
			if (fscanf(f, "%lu", &ceiling) != 1)
				ceiling = 0;
			fclose(f);
		}
		struct rlimit want = { ceiling, ceiling };
		if (ceiling <= rl.rlim_max || setrlimit(RLIMIT_NOFILE, &want) < 0) {
			rl.rlim_cur = rl.rlim_max;
			setrlimit(RLIMIT_NOFILE, &rl);
		}
	}
	signal(SIGPIPE, SIG_IGN);

	struct fs_passthrough *fs;
	int rc = fs_passthrough_new(&cfg, &fs);
	if (rc < 0) {
		fprintf(stderr, "kbox-fuse-mount: cannot serve %s: %s\n",
			cfg.root, strerror(-rc));
		return 1;
	}
	scfg.entry_timeout = timeout;
	scfg.attr_timeout = timeout;
	scfg.posix_locks = true;
	/* As kbox does: guest root is the serving process's own user. */
	scfg.ids = as_user ? idmap_owner(as_uid, as_gid) :
			     idmap_owner(geteuid(), getegid());
	struct fuse_server *srv;
	rc = fuse_server_new(&fs_passthrough_ops, fs, &scfg, &srv);
	if (rc < 0) {
		fprintf(stderr, "kbox-fuse-mount: %s\n", strerror(-rc));
		fs_passthrough_free(fs);
		return 1;
	}
	int fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		perror("kbox-fuse-mount: open /dev/fuse");
		return 1;
	}
	char opts[256];
	snprintf(opts, sizeof opts,
		 "fd=%d,rootmode=40000,user_id=0,group_id=0,"
		 "default_permissions,allow_other",
		 fd);
	if (mount("kbox", mnt, "fuse.kbox", MS_NOSUID | MS_NODEV, opts) < 0) {
		fprintf(stderr, "kbox-fuse-mount: mount %s: %s\n", mnt,
			strerror(errno));
		return 1;
	}
	/* Dumpable again after the uid change, as a process started by that
	 * user is (its own /proc/self/fd stays its own). */
	if (as_user && (setgroups(0, NULL) < 0 || setresgid(as_gid, as_gid, as_gid) < 0 ||
			setresuid(as_uid, as_uid, as_uid) < 0 ||
			prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) < 0)) {
		perror("kbox-fuse-mount: drop to -U's user");
		return 1;
	}
	rc = serve_threads(fd, srv, threads);
	close(fd);
	fuse_server_free(srv);
	fs_passthrough_free(fs);
	return rc;
}
