/* Host <-> guest user and group ids for one mount.
 *
 * The host id that owns the mount (the kbox process's own uid and gid for a
 * -v folder, the image folder's owner for --image) is the guest's root, 0:
 * files the user owns are root's in the guest, and what guest root makes
 * belongs to the user on the host.  Host root (0) then cannot be guest
 * root too; it shows as the overflow id 65534 ("nobody"), as in a user
 * namespace.  Every other id stands for itself (a guest user 1000 is host
 * user 1000), so ids the image's /etc/passwd knows keep their names.  The
 * owner's own number has no host id behind it in the guest: nothing shows
 * as it, and a guest chown to it cannot be given.
 *
 * An owner of 0 (kbox run as root, or a root-owned image) is the identity
 * map.  Users and groups are mapped apart, each by its own owner. */
#ifndef KBOX_IDMAP_H
#define KBOX_IDMAP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* What host root shows as when the owner is not root. */
#define IDMAP_OVERFLOW 65534u

/* Zero-initialised, the identity map (kbox as root). */
struct idmap {
	uint32_t owner_uid; /* host uid shown as guest uid 0 */
	uint32_t owner_gid; /* host gid shown as guest gid 0 */
};

/* The map whose guest root is host uid/gid owner_uid/owner_gid. */
struct idmap idmap_owner(uid_t owner_uid, gid_t owner_gid);

/* The guest id that host uid (gid) appears as: 0 for the owner, 65534 for
 * host root under another owner, itself otherwise.  Total: every host id
 * gives one guest id. */
uint32_t idmap_uid_to_guest(const struct idmap *m, uint32_t host_uid);
uint32_t idmap_gid_to_guest(const struct idmap *m, uint32_t host_gid);

/* The host id behind guest uid (gid) into *host: the owner for 0, itself
 * for the others.  Returns false (and leaves *host alone) for an id no host
 * id appears as: the owner's own number under a non-root owner, and
 * (uint32_t)-1, which chown reads as "no change". */
bool idmap_uid_to_host(const struct idmap *m, uint32_t guest_uid,
		       uint32_t *host);
bool idmap_gid_to_host(const struct idmap *m, uint32_t guest_gid,
		       uint32_t *host);

#endif
