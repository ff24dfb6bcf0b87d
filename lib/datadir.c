#include "lib/datadir.h"

#include <errno.h>
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int datadir_path(const char *override, const char *name, char *buf, size_t len)
{
	const char *v = override ? getenv(override) : NULL;
	int n;
	if (v && v[0] == '/')
		n = snprintf(buf, len, "%s", v);
	else if ((v = getenv("XDG_DATA_HOME")) && v[0] == '/')
		n = snprintf(buf, len, "%s/kbox/%s", v, name);
	else if ((v = getenv("HOME")) && v[0] == '/')
		n = snprintf(buf, len, "%s/.local/share/kbox/%s", v, name);
	else
		return -ENOENT;
	if (n < 0 || (size_t)n >= len)
		return -ENAMETOOLONG;
	return 0;
}

int datadir_mkdirs(const char *dir)
{
	char p[PATH_MAX];
	size_t n = strlen(dir);
	if (n == 0 || n >= sizeof p)
		return -ENAMETOOLONG;
	memcpy(p, dir, n + 1);
	for (size_t i = 1; i <= n; i++) {
		if (p[i] != '/' && p[i] != 0)
			continue;
		char c = p[i];
		p[i] = 0;
		if (mkdir(p, 0700) < 0 && errno != EEXIST)
			return -errno;
		p[i] = c;
	}
	return 0;
}
