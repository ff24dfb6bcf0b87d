/* Container images: a content-addressed store of flattened root file
 * systems, loaded from `docker save` archives and OCI image layouts in a
 * tar, or imported from a directory.  Every byte of an archive is
 * hostile: paths are resolved beneath the rootfs without following any
 * symlink, blobs are checked against their digests, sizes are capped.
 *
 * Store layout ($KBOX_IMAGE_DIR, else $XDG_DATA_HOME/kbox/images, else
 * ~/.local/share/kbox/images), all mode 0700:
 *   rootfs/<id>   a finished root file system (only ever renamed in whole)
 *   meta/<id>     "size N\ncreated UNIX-TIME\nsource TEXT\n"
 *   refs/<name>:<tag>   "<id>\n"
 *   tmp/          work dirs of loads in progress, each held by a flock
 *   lock          flock serialising commits and removals
 * <id> is 64 hex digits: the sha256 of the image config for archives, a
 * digest of the tree for imports. */
#ifndef KBOX_IMAGE_H
#define KBOX_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#define IMAGE_HEX_LEN 64
#define IMAGE_NAME_MAX 128
#define IMAGE_TAG_MAX 128
#define IMAGE_REF_MAX (IMAGE_NAME_MAX + 1 + IMAGE_TAG_MAX + 1)
#define IMAGE_MAX_LAYERS 128
#define IMAGE_MAX_TAGS 8
#define IMAGE_MAX_PER_ARCHIVE 8
#define IMAGE_MEMBER_MAX 256
#define IMAGE_ERR_MAX 512
#define IMAGE_USERS_MAX 256 /* sandbox names listed by image_remove */

/* ---- A bounded JSON reader (just enough for manifests and configs) ---- */

enum image_json_type { IMAGE_JSON_OBJ = 1, IMAGE_JSON_ARR, IMAGE_JSON_STR, IMAGE_JSON_NUM,
		       IMAGE_JSON_LIT };

/* One value (or object key).  start/len span the source text (for strings
 * the part between the quotes); count is the number of members (objects:
 * key/value pairs); next is the index of the token after this subtree. */
struct image_json_tok {
	uint8_t type;
	uint32_t start, len, count, next;
};

struct image_json {
	const char *src;
	struct image_json_tok *tok;
	uint32_t n;
};

/* Parses SRC[0..LEN) as one JSON value into at most CAP tokens (nesting at
 * most 32 deep).  Returns 0, -EINVAL on a syntax error, -E2BIG when CAP
 * tokens do not suffice. */
int image_json_parse(struct image_json *j, const char *src, size_t len,
		     struct image_json_tok *tok, uint32_t cap);

/* Index of the value of KEY in object token OBJ (first occurrence), or
 * -ENOENT (also when OBJ is not an object). */
int image_json_get(const struct image_json *j, int obj, const char *key);

/* Index of element I of array token ARR, or -ENOENT. */
int image_json_elem(const struct image_json *j, int arr, uint32_t i);

/* Decodes string token T into OUT (NUL-terminated, UTF-8).  Returns 0,
 * -EINVAL if T is not a string or holds \u0000, -ENAMETOOLONG if it does
 * not fit in LEN bytes. */
int image_json_str(const struct image_json *j, int t, char *out, size_t len);

/* ---- Manifests ---- */

/* One image of an archive: where its config and layers are (archive
 * member paths) and the sha256 each must have ("" when the archive does
 * not say; a docker layer's is then filled from the config's diff_ids). */
struct image_manifest {
	char config[IMAGE_MEMBER_MAX];
	char config_sha[IMAGE_HEX_LEN + 1];
	unsigned nlayers;
	char layer[IMAGE_MAX_LAYERS][IMAGE_MEMBER_MAX];
	char layer_sha[IMAGE_MAX_LAYERS][IMAGE_HEX_LEN + 1];
	unsigned ntags;
	char tag[IMAGE_MAX_TAGS][IMAGE_REF_MAX];
};

/* Parses a docker-archive manifest.json (an array of {Config, RepoTags,
 * Layers}) into at most MAX entries of OUT.  Tags that are not valid kbox
 * references after image_ref_from_repo are dropped.  Returns the number
 * of images (>= 1) or -EINVAL / -E2BIG. */
int image_parse_docker_manifest(const char *buf, size_t len, struct image_manifest *out,
				unsigned max);

/* A manifest or nested index listed by an OCI index. */
struct image_oci_desc {
	char sha[IMAGE_HEX_LEN + 1];
	int is_index;
	char ref[IMAGE_REF_MAX];
};

/* Picks from an OCI index (index.json or a nested image index) the
 * manifest for linux/amd64 (or the first image manifest when none says
 * its platform).  Returns 0, -ENOENT if it lists no image, -EINVAL. */
int image_parse_oci_index(const char *buf, size_t len, struct image_oci_desc *out);

/* Parses an OCI (or docker v2) image manifest: config and layer digests,
 * as paths blobs/sha256/HEX.  Returns 0, -EINVAL or -E2BIG. */
int image_parse_oci_manifest(const char *buf, size_t len, struct image_manifest *out);

/* Reads rootfs.diff_ids from an image config into at most MAX hex
 * strings.  Returns their number or -EINVAL. */
int image_parse_diff_ids(const char *buf, size_t len, char (*hex)[IMAGE_HEX_LEN + 1],
			 unsigned max);

/* ---- Names ---- */

/* Splits and checks NAME[:TAG]: NAME is [a-z0-9] then [a-z0-9._-] (at most
 * IMAGE_NAME_MAX), TAG is [A-Za-z0-9_] then [A-Za-z0-9_.-] (default
 * "latest").  Returns 0 or -EINVAL. */
int image_ref_parse(const char *in, char *name, size_t nlen, char *tag, size_t tlen);

/* Turns a registry reference (docker.io/library/alpine:3.19) into a kbox
 * one (alpine:3.19): the last path component, registry and digest
 * dropped.  Writes NAME:TAG to OUT.  Returns 0 or -EINVAL. */
int image_ref_from_repo(const char *repo, char *out, size_t len);

/* Splits an archive layer member path into what a whiteout means: returns
 * 0 for an ordinary entry, 1 for ".wh.NAME" (NAME written to WHAT), 2 for
 * the opaque marker ".wh..wh..opq", 3 for other ".wh..wh." (aufs
 * bookkeeping, ignored), -EINVAL for a whiteout with an empty or dot
 * NAME. */
int image_whiteout(const char *base, char *what, size_t len);

/* ---- Store ---- */

struct image_ctx {
	/* Called now and then during a load; NULL for silence. */
	void (*progress)(void *arg, const char *phase, uint64_t done, uint64_t total);
	void *progress_arg;
	uint64_t max_bytes;	/* file data written per image; 0: default 64 GiB */
	uint64_t max_entries;	/* entries per image; 0: default 4 Mi */
	int force;		/* image_remove: even an image running sandboxes use */
	/* Results: */
	char err[IMAGE_ERR_MAX];	/* the first failure, for one line on stderr */
	char id[IMAGE_HEX_LEN + 1];	/* the last image stored */
	char ref[IMAGE_REF_MAX];	/* and its name */
	int existed;			/* it was already in the store */
	char users[IMAGE_USERS_MAX];	/* image_remove: running sandboxes on it, ", "-joined */
	unsigned devices_skipped, owners_skipped, xattrs_skipped;
};

/* The store directory into BUF.  Returns 0, -ENOENT (no HOME) or
 * -ENAMETOOLONG. */
int image_store_dir(char *buf, size_t len);

/* Loads every image of the tar FILE (docker-archive or OCI layout) into
 * the store, named NAME[:TAG] if REF is set (then the archive must hold
 * exactly one image), else by the archive's own tags or FILE's basename.
 * Returns 0 or a negative errno with ctx->err set. */
int image_load(struct image_ctx *ctx, const char *file, const char *ref);

/* Copies the tree DIR into the store as REF.  Symlinks are copied as
 * links and never followed.  Returns 0 or -errno with ctx->err set. */
int image_import(struct image_ctx *ctx, const char *dir, const char *ref);

/* Applies the layer tar (plain or compressed) at PATH on top of the tree
 * open at ROOTFD, refusing (-EPERM, ctx->err set) any entry that would
 * land outside it.  Directory modes and times are set once the layer is
 * done.  Exposed for the tests. */
int image_apply_layer(struct image_ctx *ctx, int rootfd, const char *path);

/* One image of the store, for image_list. */
struct image_info {
	char ref[IMAGE_REF_MAX];
	char id[IMAGE_HEX_LEN + 1];
	uint64_t size;
	int64_t created;
	char source[256];
};

/* Calls FN for every reference in the store, sorted by name.  Returns 0
 * or -errno (ctx->err set). */
int image_list(struct image_ctx *ctx, void (*fn)(void *arg, const struct image_info *),
	       void *arg);

/* Removes REF (a name or an id prefix: then every name of that image) and
 * the image's rootfs when no name is left.  A rootfs that running
 * sandboxes use (vmm/sandbox/sandbox.h records it) is never deleted under them:
 * without ctx->force, removing its last name fails with -EBUSY (their
 * names in ctx->users and ctx->err); with it, the names go, ctx->users
 * lists the sandboxes, and the rootfs stays until a later image_remove,
 * image_load or image_import finds it nameless and unused.  (The same
 * holds when a load moves a name to another image.)  Returns 0 or
 * -errno. */
int image_remove(struct image_ctx *ctx, const char *ref);

/* Resolves REF for `kbox run --image`: a path (contains '/' or starts with
 * '.') is copied as is; anything else is a store name or id prefix and
 * gives that image's rootfs directory.  Returns 0, -ENOENT, -ENOTUNIQ (an
 * ambiguous id prefix) or -ENAMETOOLONG. */
int image_resolve(const char *ref, char *dir, size_t len);

/* Holds the image store's lock shared, so that no removal or load runs
 * until the returned fd is closed: `kbox run` records the rootfs it uses
 * under it, and a removal then either finished before (the rootfs is
 * gone) or sees the record.  The fd, -ENOENT (no store) or -errno. */
int image_store_hold(void);

/* `kbox image ...` (argv[0] is "image").  Returns the exit status. */
int image_main(int argc, char **argv);

#endif
