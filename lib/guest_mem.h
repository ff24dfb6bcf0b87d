/* Guest physical memory: the one checked way from a guest address to a
 * host pointer. */
#ifndef KBOX_GUEST_MEM_H
#define KBOX_GUEST_MEM_H

#include <stddef.h>
#include <stdint.h>

#define GUEST_MEM_MAX_REGIONS 4

struct guest_mem_region {
	uint64_t gpa;  /* first guest-physical address of the region */
	uint64_t size; /* bytes; never 0 for a region in use */
	uint8_t *host; /* host mapping of the first byte */
};

struct guest_mem {
	struct guest_mem_region r[GUEST_MEM_MAX_REGIONS];
	unsigned nr;
};

/* Add [gpa, gpa+size) backed by host.  Regions must not overlap, size must
 * be non-zero and gpa+size must not wrap.  Returns 0, -EINVAL or -ENOSPC. */
int guest_mem_add_region(struct guest_mem *gm, uint64_t gpa, uint64_t size, void *host);

/* Host pointer for the guest range [gpa, gpa+len), or NULL unless the whole
 * range lies inside one RAM region.  len 0 is treated as 1 byte so that a
 * pointer is never returned for an address outside RAM.  The check is done
 * by subtracting before comparing, so no sum can overflow. */
void *guest_mem_ptr(const struct guest_mem *gm, uint64_t gpa, uint64_t len);

/* Copy len bytes between guest memory and a host buffer.  Returns 0, or
 * -EFAULT if any byte of the guest range is not RAM (nothing is copied). */
int guest_mem_read(const struct guest_mem *gm, void *dst, uint64_t gpa, uint64_t len);
int guest_mem_write(const struct guest_mem *gm, uint64_t gpa, const void *src, uint64_t len);

/* Total bytes of RAM across all regions. */
uint64_t guest_mem_total(const struct guest_mem *gm);

#endif
