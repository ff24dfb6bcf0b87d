/* libarchive loaded on first use; see archive_lib.h. */
#define ARCHIVE_LIB_SELF
#include "vmm/image/archive_lib.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>

#include "lib/errbuf.h"

struct archive_lib archive_lib;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static char load_err[256]; /* empty when every function was found */

static void load(void)
{
	/* RTLD_NOW: a missing function shows here, not mid-image. */
	void *h = dlopen(ARCHIVE_LIB_SONAME, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *why = dlerror();
		snprintf(load_err, sizeof load_err,
			 "cannot load libarchive (%s), which images need: install Debian's "
			 "libarchive13",
			 why ? why : ARCHIVE_LIB_SONAME);
		return;
	}
#define ARCHIVE_LIB_SYM(f)                                                                         \
	if (!load_err[0] && !(*(void **)&archive_lib.f = dlsym(h, #f)))                            \
		snprintf(load_err, sizeof load_err, "%s has no %s: not the libarchive kbox needs",  \
			 ARCHIVE_LIB_SONAME, #f);
	ARCHIVE_LIB_FUNCS(ARCHIVE_LIB_SYM)
#undef ARCHIVE_LIB_SYM
	/* The library stays loaded for the process's life. */
}

int archive_lib_load(char *err, size_t errlen)
{
	pthread_once(&once, load);
	if (load_err[0])
		return errbuf_fail(err, errlen, -ENOENT, "%s", load_err);
	return 0;
}

struct archive *archive_lib_tar_reader(int *rc, char *err, size_t errlen)
{
	*rc = archive_lib_load(err, errlen);
	if (*rc < 0)
		return NULL;
	struct archive *a = archive_lib.archive_read_new();
	if (!a) {
		*rc = errbuf_fail(err, errlen, -ENOMEM, "out of memory");
		return NULL;
	}
	archive_lib.archive_read_support_filter_all(a);
	archive_lib.archive_read_support_format_tar(a);
	return a;
}
