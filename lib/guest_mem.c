#include "lib/guest_mem.h"

#include <errno.h>
#include <string.h>

int guest_mem_add_region(struct guest_mem *gm, uint64_t gpa, uint64_t size, void *host)
{
	if (size == 0 || host == NULL || gpa + size < gpa)
		return -EINVAL;
	if (gm->nr >= GUEST_MEM_MAX_REGIONS)
		return -ENOSPC;
	for (unsigned i = 0; i < gm->nr; i++) {
		const struct guest_mem_region *o = &gm->r[i];
		if (gpa < o->gpa + o->size && o->gpa < gpa + size)
			return -EINVAL;
	}
	gm->r[gm->nr++] = (struct guest_mem_region){ .gpa = gpa, .size = size, .host = host };
	return 0;
}

void *guest_mem_ptr(const struct guest_mem *gm, uint64_t gpa, uint64_t len)
{
	if (len == 0)
		len = 1;
	for (unsigned i = 0; i < gm->nr; i++) {
		const struct guest_mem_region *r = &gm->r[i];
		if (gpa < r->gpa)
			continue;
		uint64_t off = gpa - r->gpa;
		if (off >= r->size || len > r->size - off)
			continue;
		return r->host + off;
	}
	return NULL;
}

int guest_mem_read(const struct guest_mem *gm, void *dst, uint64_t gpa, uint64_t len)
{
	const void *p = guest_mem_ptr(gm, gpa, len);
	if (p == NULL)
		return -EFAULT;
	if (len)
		memcpy(dst, p, len);
	return 0;
}

int guest_mem_write(const struct guest_mem *gm, uint64_t gpa, const void *src, uint64_t len)
{
	void *p = guest_mem_ptr(gm, gpa, len);
	if (p == NULL)
		return -EFAULT;
	if (len)
		memcpy(p, src, len);
	return 0;
}

uint64_t guest_mem_total(const struct guest_mem *gm)
{
	uint64_t t = 0;
	for (unsigned i = 0; i < gm->nr; i++)
		t += gm->r[i].size;
	return t;
}
