#include "netstack/datadir.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

int dd_path(const char *override, const char *name, char *buf, size_t len)
{
	const char *v = getenv(override);
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
