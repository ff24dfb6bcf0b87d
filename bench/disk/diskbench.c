/* diskbench: the disk measurements of bench/disk, the same code in the
 * guest (static, musl) and on the host.
 *
 *   diskbench FILE MIB [direct]
 *   diskbench now        CLOCK_MONOTONIC in nanoseconds (busybox's date
 *                        has no %N), for timing dd in the guest
 *
 * On FILE (made or overwritten; at least MIB MiB long afterwards) it
 * measures, in this order, and prints one "name=value" line each:
 *   seq_write_mibs   MIB MiB in 1 MiB write()s from offset 0, then fsync();
 *                    the time includes the fsync
 *   seq_read_mibs    the same range read back in 1 MiB read()s
 *   rand_read_iops   4 KiB pread()s at random 4 KiB-aligned offsets in the
 *                    range, for 2 s
 *   rand_write_iops  4 KiB pwrite()s likewise, for 2 s, then one fsync()
 *                    (inside the time)
 *   fsync_per_s      4 KiB pwrite() + fdatasync() pairs at one offset, for
 *                    2 s
 * With "direct" the reads and the random writes use O_DIRECT (the guest
 * side: its page cache would otherwise answer them, and the device would
 * not be measured); without it they go through the page cache (the host
 * side, where the device's own reads and writes land too).
 * Exit status 0, or 1 with a message on stderr. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MIB (1u << 20)
#define BLK 4096u
#define RUN_S 2.0

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static uint64_t rng = 0x243f6a8885a308d3ull;
static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static int die(const char *what)
{
	fprintf(stderr, "diskbench: %s: %s\n", what, strerror(errno));
	return 1;
}

int main(int argc, char **argv)
{
	if (argc == 2 && strcmp(argv[1], "now") == 0) {
		printf("%.0f\n", now() * 1e9);
		return 0;
	}
	if (argc < 3) {
		fprintf(stderr, "usage: diskbench FILE MIB [direct]\n");
		return 2;
	}
	const char *path = argv[1];
	long mib = strtol(argv[2], NULL, 10);
	int direct = argc > 3 && strcmp(argv[3], "direct") == 0;
	if (mib < 1 || mib > 65536) {
		fprintf(stderr, "diskbench: MIB from 1 to 65536\n");
		return 2;
	}
	uint8_t *buf;
	if (posix_memalign((void **)&buf, BLK, MIB) != 0)
		return die("memory");
	for (unsigned i = 0; i < MIB; i++)
		buf[i] = (uint8_t)(rnd() >> 32);
	uint64_t span = (uint64_t)mib * MIB, blocks = span / BLK;

	int fd = open(path, O_RDWR | O_CREAT, 0600);
	if (fd < 0)
		return die(path);
	double t0 = now();
	for (long i = 0; i < mib; i++)
		if (pwrite(fd, buf, MIB, (off_t)i * MIB) != (ssize_t)MIB)
			return die("write");
	if (fsync(fd) < 0)
		return die("fsync");
	double t = now() - t0;
	printf("seq_write_mibs=%.1f\n", (double)mib / t);
	close(fd);

	fd = open(path, O_RDWR | (direct ? O_DIRECT : 0));
	if (fd < 0)
		return die(path);
	t0 = now();
	for (long i = 0; i < mib; i++)
		if (pread(fd, buf, MIB, (off_t)i * MIB) != (ssize_t)MIB)
			return die("read");
	t = now() - t0;
	printf("seq_read_mibs=%.1f\n", (double)mib / t);

	unsigned long n = 0;
	t0 = now();
	do {
		for (int k = 0; k < 64; k++, n++)
			if (pread(fd, buf, BLK, (off_t)(rnd() % blocks) * BLK) != (ssize_t)BLK)
				return die("random read");
	} while ((t = now() - t0) < RUN_S);
	printf("rand_read_iops=%.0f\n", (double)n / t);

	n = 0;
	t0 = now();
	do {
		for (int k = 0; k < 64; k++, n++)
			if (pwrite(fd, buf, BLK, (off_t)(rnd() % blocks) * BLK) != (ssize_t)BLK)
				return die("random write");
	} while (now() - t0 < RUN_S);
	if (fsync(fd) < 0)
		return die("fsync");
	t = now() - t0;
	printf("rand_write_iops=%.0f\n", (double)n / t);

	n = 0;
	t0 = now();
	do {
		if (pwrite(fd, buf, BLK, 0) != (ssize_t)BLK || fdatasync(fd) < 0)
			return die("write + fdatasync");
		n++;
	} while ((t = now() - t0) < RUN_S);
	printf("fsync_per_s=%.0f\n", (double)n / t);
	close(fd);
	free(buf);
	return 0;
}
