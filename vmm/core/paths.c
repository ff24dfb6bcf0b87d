#include "vmm/core/paths.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int paths_exe_dir(char *buf, size_t len)
{
	ssize_t n = readlink("/proc/self/exe", buf, len - 1);
	if (n < 0)
		return -errno;
	if ((size_t)n >= len - 1)
		return -ENAMETOOLONG;
	buf[n] = '\0';
	char *slash = strrchr(buf, '/');
	if (!slash)
		return -EINVAL;
	*slash = '\0';
	return 0;
}

void paths_default(const char *name, char *buf, size_t len)
{
	char dir[4096];
	if (paths_exe_dir(dir, sizeof dir) < 0) {
		snprintf(buf, len, "%s", name);
		return;
	}
	snprintf(buf, len, "%s/../lib/kbox/%s", dir, name);
	if (access(buf, R_OK) == 0)
		return;
	snprintf(buf, len, "%s/%s", dir, name);
}
