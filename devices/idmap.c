/* Host <-> guest id mapping; see idmap.h.  Users and groups follow the same
 * rule, each with its own owner. */
#include "devices/idmap.h"

struct idmap idmap_owner(uid_t owner_uid, gid_t owner_gid)
{
	return (struct idmap){ .owner_uid = (uint32_t)owner_uid,
			       .owner_gid = (uint32_t)owner_gid };
}

static uint32_t to_guest(uint32_t owner, uint32_t host)
{
	if (host == owner)
		return 0;
	/* owner != 0 here: guest 0 is taken, so host root overflows. */
	if (host == 0)
		return IDMAP_OVERFLOW;
	return host;
}

static bool to_host(uint32_t owner, uint32_t guest, uint32_t *host)
{
	if (guest == UINT32_MAX)
		return false;
	if (guest == 0) {
		*host = owner;
		return true;
	}
	/* Under a non-root owner no host id shows as the owner's number
	 * (the owner shows as 0): giving it would make a file that then
	 * reads back as root's. */
	if (guest == owner)
		return false;
	*host = guest;
	return true;
}

uint32_t idmap_uid_to_guest(const struct idmap *m, uint32_t host_uid)
{
	return to_guest(m->owner_uid, host_uid);
}

uint32_t idmap_gid_to_guest(const struct idmap *m, uint32_t host_gid)
{
	return to_guest(m->owner_gid, host_gid);
}

bool idmap_uid_to_host(const struct idmap *m, uint32_t guest_uid,
		       uint32_t *host)
{
	return to_host(m->owner_uid, guest_uid, host);
}

bool idmap_gid_to_host(const struct idmap *m, uint32_t guest_gid,
		       uint32_t *host)
{
	return to_host(m->owner_gid, guest_gid, host);
}
