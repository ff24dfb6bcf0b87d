/* Growable arrays (see grow.h). */
#include "lib/grow.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int grow_array(void *arrp, size_t *cap, size_t need, size_t size, size_t first, size_t max)
{
	size_t limit = SIZE_MAX / (size ? size : 1);
	size_t n = *cap ? *cap : (first ? first : 1);
	void *old, *grown;

	if (need <= *cap)
		return 0;
	if (max && limit > max)
		limit = max;
	if (need > limit)
		return -E2BIG;
	while (n < need)
		n = n > limit / 2 ? limit : n * 2;
	if (n > limit)
		n = limit;
	/* arrp may point at a pointer of any object type: copied, not cast. */
	memcpy(&old, arrp, sizeof old);
	grown = realloc(old, n * size);
	if (!grown)
		return -ENOMEM;
	memcpy(arrp, &grown, sizeof grown);
	*cap = n;
	return 0;
}
