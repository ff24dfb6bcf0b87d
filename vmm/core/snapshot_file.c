#include "vmm/core/snapshot_file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/kvm.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/errbuf.h"
#include "lib/fileio.h"

#define OFF_MAGIC   0
#define OFF_VERSION 8
#define OFF_HDRLEN  12
#define OFF_NSEC    16
#define OFF_FLAGS   20
#define OFF_METALEN 24
#define OFF_RAMOFF  32
#define OFF_RAMLEN  40
#define OFF_SUM     48
#define OFF_RSVD    56

#define IRQCHIP_LEN sizeof(((struct kvm_irqchip *)0)->chip)

/* What a section kind may hold: each tag at most once, len in [min, max]
 * and a multiple of unit. */
struct rule {
	uint32_t type, tag;
	uint32_t min, max, unit;
	int required;
};

static const struct rule rules[] = {
	{ SNAPSHOT_FILE_SEC_LAYOUT, SNAPSHOT_FILE_L_KEY, SNAPSHOT_FILE_KEY_LEN, SNAPSHOT_FILE_KEY_LEN, 1, 1 },
	{ SNAPSHOT_FILE_SEC_LAYOUT, SNAPSHOT_FILE_L_GEOMETRY, 32, 32, 1, 1 },
	{ SNAPSHOT_FILE_SEC_VM, SNAPSHOT_FILE_V_CLOCK, sizeof(struct kvm_clock_data),
	  sizeof(struct kvm_clock_data), 1, 1 },
	{ SNAPSHOT_FILE_SEC_VM, SNAPSHOT_FILE_V_PIT2, sizeof(struct kvm_pit_state2),
	  sizeof(struct kvm_pit_state2), 1, 1 },
	{ SNAPSHOT_FILE_SEC_VM, SNAPSHOT_FILE_V_PIC0, IRQCHIP_LEN, IRQCHIP_LEN, 1, 1 },
	{ SNAPSHOT_FILE_SEC_VM, SNAPSHOT_FILE_V_PIC1, IRQCHIP_LEN, IRQCHIP_LEN, 1, 1 },
	{ SNAPSHOT_FILE_SEC_VM, SNAPSHOT_FILE_V_IOAPIC, IRQCHIP_LEN, IRQCHIP_LEN, 1, 1 },
	{ SNAPSHOT_FILE_SEC_CPU, SNAPSHOT_FILE_C_REGS, sizeof(struct kvm_regs), sizeof(struct kvm_regs), 1, 1 },
	{ SNAPSHOT_FILE_SEC_CPU, SNAPSHOT_FILE_C_SREGS, sizeof(struct kvm_sregs), sizeof(struct kvm_sregs), 1, 1 },
	{ SNAPSHOT_FILE_SEC_CPU, SNAPSHOT_FILE_C_FPU, sizeof(struct kvm_fpu), sizeof(struct kvm_fpu), 1, 0 },
	{ SNAPSHOT_FILE_SEC_CPU, SNAPSHOT_FILE_C_XSAVE, sizeof(struct kvm_xsave), 1u << 20, 64, 0 },
	{ SNAPSHOT_FILE_SEC_CPU, SNAPSHOT_FILE_C_XCRS, sizeof(struct kvm_xcrs), sizeof(struct kvm_xcrs), 1, 0 },
	{ SNAPSHOT_FILE_SEC_CPU, SNAPSHOT_FILE_C_LAPIC, sizeof(struct kvm_lapic_state),
	  sizeof(struct kvm_lapic_state), 1, 1 },
	{ SNAPSHOT_FILE_SEC_CPU, SNAPSHOT_FILE_C_MP_STATE, sizeof(struct kvm_mp_state),
	  sizeof(struct kvm_mp_state), 1, 1 },
	{ SNAPSHOT_FILE_SEC_CPU, SNAPSHOT_FILE_C_EVENTS, sizeof(struct kvm_vcpu_events),
	  sizeof(struct kvm_vcpu_events), 1, 1 },
	{ SNAPSHOT_FILE_SEC_CPU, SNAPSHOT_FILE_C_DEBUGREGS, sizeof(struct kvm_debugregs),
	  sizeof(struct kvm_debugregs), 1, 1 },
	{ SNAPSHOT_FILE_SEC_CPU, SNAPSHOT_FILE_C_MSRS, sizeof(struct kvm_msr_entry),
	  SNAPSHOT_FILE_MAX_MSRS * sizeof(struct kvm_msr_entry), sizeof(struct kvm_msr_entry), 1 },
	{ SNAPSHOT_FILE_SEC_CPU, SNAPSHOT_FILE_C_CPUID, sizeof(struct kvm_cpuid_entry2),
	  SNAPSHOT_FILE_MAX_CPUID * sizeof(struct kvm_cpuid_entry2), sizeof(struct kvm_cpuid_entry2), 1 },
	{ SNAPSHOT_FILE_SEC_DEV, SNAPSHOT_FILE_D_NAME, 1, 31, 1, 1 },
	{ SNAPSHOT_FILE_SEC_DEV, SNAPSHOT_FILE_D_BLOB, 0, SNAPSHOT_FILE_MAX_DEV_BLOB, 1, 1 },
};
#define NRULES (sizeof rules / sizeof rules[0])

static uint64_t fnv1a(uint64_t h, const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

/* The checksum of the metadata with its own field taken as zero. */
static uint64_t meta_sum(const uint8_t *meta, size_t len)
{
	static const uint8_t zero[8];
	uint64_t h = 0xcbf29ce484222325ull;
	h = fnv1a(h, meta, OFF_SUM);
	h = fnv1a(h, zero, sizeof zero);
	return fnv1a(h, meta + OFF_SUM + 8, len - OFF_SUM - 8);
}

void snapshot_file_seal(uint8_t *meta, size_t len)
{
	if (len < SNAPSHOT_FILE_HDR_LEN)
		return;
	uint64_t h = meta_sum(meta, len);
	for (unsigned i = 0; i < 8; i++)
		meta[OFF_SUM + i] = (uint8_t)(h >> (8 * i));
}

int snapshot_file_header(const uint8_t *hdr, size_t len, uint64_t *meta_len, char *err, size_t errlen)
{
	if (len < SNAPSHOT_FILE_HDR_LEN || memcmp(hdr + OFF_MAGIC, SNAPSHOT_FILE_MAGIC, 8) != 0)
		return errbuf_fail(err, errlen, -EBADMSG, "not a kbox snapshot (no KBOXSNAP header)");
	uint32_t ver = statebuf_le32(hdr + OFF_VERSION);
	if (ver != SNAPSHOT_FILE_VERSION)
		return errbuf_fail(err, errlen, -EPROTO,
			       "snapshot format version %u, this kbox reads version %u", ver,
			       SNAPSHOT_FILE_VERSION);
	if (statebuf_le32(hdr + OFF_HDRLEN) != SNAPSHOT_FILE_HDR_LEN)
		return errbuf_fail(err, errlen, -EBADMSG, "snapshot header length %u, want %u",
			       statebuf_le32(hdr + OFF_HDRLEN), SNAPSHOT_FILE_HDR_LEN);
	uint64_t m = statebuf_le64(hdr + OFF_METALEN);
	if (m < SNAPSHOT_FILE_HDR_LEN || m > SNAPSHOT_FILE_MAX_META)
		return errbuf_fail(err, errlen, -EBADMSG, "snapshot metadata length %llu out of range",
			       (unsigned long long)m);
	*meta_len = m;
	return 0;
}

static const struct rule *rule_for(uint32_t type, uint32_t tag)
{
	for (size_t i = 0; i < NRULES; i++)
		if (rules[i].type == type && rules[i].tag == tag)
			return &rules[i];
	return NULL;
}

static const char *type_name(uint32_t t)
{
	switch (t) {
	case SNAPSHOT_FILE_SEC_LAYOUT: return "layout";
	case SNAPSHOT_FILE_SEC_VM: return "VM";
	case SNAPSHOT_FILE_SEC_CPU: return "vCPU";
	case SNAPSHOT_FILE_SEC_DEV: return "device";
	}
	return "?";
}

static int name_chars_ok(const uint8_t *p, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		if (!((p[i] >= 'a' && p[i] <= 'z') || (p[i] >= '0' && p[i] <= '9') || p[i] == '_' ||
		      p[i] == '-'))
			return 0;
	return 1;
}

/* Walk one section's records against the rules of its kind. */
static int check_records(const struct snapshot_file_sec *s, char *err, size_t errlen)
{
	uint64_t seen = 0; /* bit i: rules[i] met */
	uint64_t off = 0;
	while (off < s->len) {
		if (s->len - off < 8)
			return errbuf_fail(err, errlen, -EBADMSG, "%s section %u: record header cut short",
				       type_name(s->type), s->id);
		uint32_t tag = statebuf_le32(s->data + off), len = statebuf_le32(s->data + off + 4);
		const struct rule *r = rule_for(s->type, tag);
		if (!r)
			return errbuf_fail(err, errlen, -EBADMSG, "%s section %u: unknown record %u",
				       type_name(s->type), s->id, tag);
		uint64_t bit = 1ull << (r - rules);
		if (seen & bit)
			return errbuf_fail(err, errlen, -EBADMSG, "%s section %u: record %u twice",
				       type_name(s->type), s->id, tag);
		seen |= bit;
		if (len < r->min || len > r->max || len % r->unit)
			return errbuf_fail(err, errlen, -EBADMSG,
				       "%s section %u: record %u has %u bytes (want %u..%u, a "
				       "multiple of %u)",
				       type_name(s->type), s->id, tag, len, r->min, r->max, r->unit);
		uint64_t padded = ((uint64_t)len + 7) & ~7ull;
		if (padded > s->len - off - 8)
			return errbuf_fail(err, errlen, -EBADMSG,
				       "%s section %u: record %u runs past the section",
				       type_name(s->type), s->id, tag);
		const uint8_t *d = s->data + off + 8;
		for (uint64_t i = len; i < padded; i++)
			if (d[i])
				return errbuf_fail(err, errlen, -EBADMSG,
					       "%s section %u: record %u padding not zero",
					       type_name(s->type), s->id, tag);
		if (tag == SNAPSHOT_FILE_D_NAME && !name_chars_ok(d, len))
			return errbuf_fail(err, errlen, -EBADMSG, "device section %u: bad device name",
				       s->id);
		off += 8 + padded;
	}
	for (size_t i = 0; i < NRULES; i++)
		if (rules[i].type == s->type && rules[i].required && !(seen & (1ull << i)))
			return errbuf_fail(err, errlen, -EBADMSG, "%s section %u: record %u missing",
				       type_name(s->type), s->id, rules[i].tag);
	if (s->type == SNAPSHOT_FILE_SEC_CPU) {
		int fpu = snapshot_file_rec(s, SNAPSHOT_FILE_C_FPU, &(const uint8_t *){ 0 }, &(uint32_t){ 0 }) == 0;
		int xs = snapshot_file_rec(s, SNAPSHOT_FILE_C_XSAVE, &(const uint8_t *){ 0 }, &(uint32_t){ 0 }) == 0;
		int xcr = snapshot_file_rec(s, SNAPSHOT_FILE_C_XCRS, &(const uint8_t *){ 0 }, &(uint32_t){ 0 }) == 0;
		if (fpu == xs)
			return errbuf_fail(err, errlen, -EBADMSG,
				       "vCPU section %u: needs the FPU state or the XSAVE area, "
				       "exactly one", s->id);
		if (xcr && !xs)
			return errbuf_fail(err, errlen, -EBADMSG,
				       "vCPU section %u: XCRs without an XSAVE area", s->id);
	}
	return 0;
}

static int parse_layout(const struct snapshot_file_sec *s, struct snapshot_file_layout *l, char *err,
			size_t errlen)
{
	const uint8_t *d;
	uint32_t n;
	snapshot_file_rec(s, SNAPSHOT_FILE_L_KEY, &d, &n);
	memcpy(l->key, d, SNAPSHOT_FILE_KEY_LEN);
	snapshot_file_rec(s, SNAPSHOT_FILE_L_GEOMETRY, &d, &n);
	l->ncpus = statebuf_le32(d);
	l->tsc_khz = statebuf_le32(d + 4);
	l->ram_size = statebuf_le64(d + 8);
	l->low_ram = statebuf_le64(d + 16);
	l->high_base = statebuf_le64(d + 24);
	if (l->ncpus < 1 || l->ncpus > SNAPSHOT_FILE_MAX_CPUS)
		return errbuf_fail(err, errlen, -EBADMSG, "snapshot for %u vCPUs (1..%u)", l->ncpus,
			       SNAPSHOT_FILE_MAX_CPUS);
	if (l->ram_size == 0 || l->ram_size > SNAPSHOT_FILE_MAX_RAM || l->ram_size % SNAPSHOT_FILE_PAGE ||
	    l->low_ram == 0 || l->low_ram > l->ram_size || l->low_ram % SNAPSHOT_FILE_PAGE)
		return errbuf_fail(err, errlen, -EBADMSG, "snapshot RAM geometry out of range");
	/* Both below 2^41, so high_base + the high part cannot wrap. */
	if (l->low_ram < l->ram_size && (l->high_base < l->low_ram || l->high_base % SNAPSHOT_FILE_PAGE ||
					 l->high_base > SNAPSHOT_FILE_MAX_RAM))
		return errbuf_fail(err, errlen, -EBADMSG, "snapshot high RAM placement out of range");
	return 0;
}

int snapshot_file_parse(const uint8_t *meta, size_t meta_len, uint64_t file_size, struct snapshot_file_view *v,
		char *err, size_t errlen)
{
	memset(v, 0, sizeof *v);
	uint64_t m;
	int rc = snapshot_file_header(meta, meta_len, &m, err, errlen);
	if (rc < 0)
		return rc;
	if (m != meta_len)
		return errbuf_fail(err, errlen, -EBADMSG, "snapshot metadata is %zu bytes, header says %llu",
			       meta_len, (unsigned long long)m);
	if (statebuf_le32(meta + OFF_FLAGS) != 0 || statebuf_le64(meta + OFF_RSVD) != 0)
		return errbuf_fail(err, errlen, -EBADMSG, "snapshot header has unknown flags");
	if (statebuf_le64(meta + OFF_SUM) != meta_sum(meta, meta_len))
		return errbuf_fail(err, errlen, -EBADMSG, "snapshot metadata checksum does not match");
	uint32_t nsec = statebuf_le32(meta + OFF_NSEC);
	if (nsec > SNAPSHOT_FILE_MAX_SECTIONS || (uint64_t)nsec * SNAPSHOT_FILE_ENT_LEN > meta_len - SNAPSHOT_FILE_HDR_LEN)
		return errbuf_fail(err, errlen, -EBADMSG, "snapshot section count %u out of range", nsec);
	uint64_t ram_off = statebuf_le64(meta + OFF_RAMOFF), ram_len = statebuf_le64(meta + OFF_RAMLEN);
	uint64_t want_off = (meta_len + SNAPSHOT_FILE_PAGE - 1) & ~(uint64_t)(SNAPSHOT_FILE_PAGE - 1);
	if (ram_off != want_off || ram_len == 0 || ram_len > SNAPSHOT_FILE_MAX_RAM ||
	    ram_len % SNAPSHOT_FILE_PAGE || file_size < ram_off || file_size - ram_off != ram_len)
		return errbuf_fail(err, errlen, -EBADMSG,
			       "snapshot RAM (%llu bytes at %llu) does not fill the %llu-byte file",
			       (unsigned long long)ram_len, (unsigned long long)ram_off,
			       (unsigned long long)file_size);
	v->meta_len = meta_len;
	v->ram_off = ram_off;
	v->ram_len = ram_len;

	uint64_t next = SNAPSHOT_FILE_HDR_LEN + (uint64_t)nsec * SNAPSHOT_FILE_ENT_LEN;
	next = (next + 7) & ~7ull;
	for (uint32_t i = 0; i < nsec; i++) {
		const uint8_t *e = meta + SNAPSHOT_FILE_HDR_LEN + (size_t)i * SNAPSHOT_FILE_ENT_LEN;
		uint32_t type = statebuf_le32(e), id = statebuf_le32(e + 4);
		uint64_t off = statebuf_le64(e + 8), len = statebuf_le64(e + 16);
		if (type < SNAPSHOT_FILE_SEC_LAYOUT || type > SNAPSHOT_FILE_SEC_DEV)
			return errbuf_fail(err, errlen, -EBADMSG, "snapshot section %u of unknown kind %u",
				       i, type);
		uint32_t max_id = type == SNAPSHOT_FILE_SEC_CPU ? SNAPSHOT_FILE_MAX_CPUS
				  : type == SNAPSHOT_FILE_SEC_DEV ? SNAPSHOT_FILE_MAX_DEVS : 1;
		if (id >= max_id)
			return errbuf_fail(err, errlen, -EBADMSG, "%s section id %u out of range",
				       type_name(type), id);
		if (snapshot_file_find(v, type, id))
			return errbuf_fail(err, errlen, -EBADMSG, "%s section %u twice", type_name(type),
				       id);
		/* In order, 8-aligned, inside the metadata: no overlap. */
		if (off < next || off % 8 || off > meta_len || len > meta_len - off)
			return errbuf_fail(err, errlen, -EBADMSG,
				       "%s section %u at %llu (+%llu) out of place", type_name(type),
				       id, (unsigned long long)off, (unsigned long long)len);
		next = off + len;
		struct snapshot_file_sec *s = &v->sec[v->nsec++];
		*s = (struct snapshot_file_sec){ type, id, meta + off, len };
		if ((rc = check_records(s, err, errlen)) < 0)
			return rc;
		v->ndev += type == SNAPSHOT_FILE_SEC_DEV;
	}
	const struct snapshot_file_sec *ls = snapshot_file_find(v, SNAPSHOT_FILE_SEC_LAYOUT, 0);
	if (!ls)
		return errbuf_fail(err, errlen, -EBADMSG, "snapshot has no layout section");
	if (!snapshot_file_find(v, SNAPSHOT_FILE_SEC_VM, 0))
		return errbuf_fail(err, errlen, -EBADMSG, "snapshot has no VM section");
	if ((rc = parse_layout(ls, &v->layout, err, errlen)) < 0)
		return rc;
	if (v->layout.ram_size != ram_len)
		return errbuf_fail(err, errlen, -EBADMSG, "snapshot RAM is %llu bytes, layout says %llu",
			       (unsigned long long)ram_len, (unsigned long long)v->layout.ram_size);
	unsigned ncpu = 0;
	for (unsigned i = 0; i < v->nsec; i++)
		if (v->sec[i].type == SNAPSHOT_FILE_SEC_CPU) {
			if (v->sec[i].id >= v->layout.ncpus)
				return errbuf_fail(err, errlen, -EBADMSG,
					       "vCPU section %u in a snapshot of %u vCPUs",
					       v->sec[i].id, v->layout.ncpus);
			ncpu++;
		}
	if (ncpu != v->layout.ncpus)
		return errbuf_fail(err, errlen, -EBADMSG, "snapshot has %u vCPU sections for %u vCPUs",
			       ncpu, v->layout.ncpus);
	return 0;
}

const struct snapshot_file_sec *snapshot_file_find(const struct snapshot_file_view *v, uint32_t type, uint32_t id)
{
	for (unsigned i = 0; i < v->nsec; i++)
		if (v->sec[i].type == type && v->sec[i].id == id)
			return &v->sec[i];
	return NULL;
}

int snapshot_file_rec(const struct snapshot_file_sec *s, uint32_t tag, const uint8_t **data, uint32_t *len)
{
	uint64_t off = 0;
	while (s->len - off >= 8) {
		uint32_t t = statebuf_le32(s->data + off), n = statebuf_le32(s->data + off + 4);
		uint64_t padded = ((uint64_t)n + 7) & ~7ull;
		if (padded > s->len - off - 8)
			break;
		if (t == tag) {
			*data = s->data + off + 8;
			*len = n;
			return 0;
		}
		off += 8 + padded;
	}
	return -ENOENT;
}

void snapshot_file_build_init(struct snapshot_file_builder *b)
{
	memset(b, 0, sizeof *b);
	statebuf_init(&b->body);
}

void snapshot_file_build_free(struct snapshot_file_builder *b) { statebuf_free(&b->body); }

static void close_section(struct snapshot_file_builder *b)
{
	if (b->nsec)
		b->len[b->nsec - 1] = b->body.len - b->off[b->nsec - 1];
}

void snapshot_file_build_section(struct snapshot_file_builder *b, uint32_t type, uint32_t id)
{
	if (b->err)
		return;
	if (b->nsec == SNAPSHOT_FILE_MAX_SECTIONS) {
		b->err = -ENOSPC;
		return;
	}
	close_section(b);
	b->type[b->nsec] = type;
	b->id[b->nsec] = id;
	b->off[b->nsec] = b->body.len;
	b->nsec++;
}

void snapshot_file_build_rec(struct snapshot_file_builder *b, uint32_t tag, const void *data, size_t len)
{
	if (b->err)
		return;
	if (b->nsec == 0 || len > UINT32_MAX) {
		b->err = -EINVAL;
		return;
	}
	statebuf_u32(&b->body, tag);
	statebuf_u32(&b->body, (uint32_t)len);
	statebuf_put(&b->body, data, len);
	statebuf_pad(&b->body, 8);
}

void snapshot_file_build_layout(struct snapshot_file_builder *b, const struct snapshot_file_layout *l)
{
	uint8_t g[32];
	struct statebuf_writer w;
	statebuf_init(&w);
	statebuf_u32(&w, l->ncpus);
	statebuf_u32(&w, l->tsc_khz);
	statebuf_u64(&w, l->ram_size);
	statebuf_u64(&w, l->low_ram);
	statebuf_u64(&w, l->high_base);
	if (w.err || w.len != sizeof g) {
		b->err = w.err ? w.err : -EINVAL;
		statebuf_free(&w);
		return;
	}
	memcpy(g, w.buf, sizeof g);
	statebuf_free(&w);
	snapshot_file_build_section(b, SNAPSHOT_FILE_SEC_LAYOUT, 0);
	snapshot_file_build_rec(b, SNAPSHOT_FILE_L_KEY, l->key, SNAPSHOT_FILE_KEY_LEN);
	snapshot_file_build_rec(b, SNAPSHOT_FILE_L_GEOMETRY, g, sizeof g);
}

int snapshot_file_build_finish(struct snapshot_file_builder *b, uint64_t ram_len, struct statebuf_writer *meta)
{
	statebuf_init(meta);
	close_section(b);
	if (b->err || b->body.err)
		return b->err ? b->err : b->body.err;
	uint64_t base = ((uint64_t)SNAPSHOT_FILE_HDR_LEN + (uint64_t)b->nsec * SNAPSHOT_FILE_ENT_LEN + 7) & ~7ull;
	statebuf_put(meta, SNAPSHOT_FILE_MAGIC, 8);
	statebuf_u32(meta, SNAPSHOT_FILE_VERSION);
	statebuf_u32(meta, SNAPSHOT_FILE_HDR_LEN);
	statebuf_u32(meta, b->nsec);
	statebuf_u32(meta, 0);
	statebuf_u64(meta, 0); /* metadata length, below */
	statebuf_u64(meta, 0); /* RAM offset */
	statebuf_u64(meta, ram_len);
	statebuf_u64(meta, 0); /* checksum */
	statebuf_u64(meta, 0);
	for (unsigned i = 0; i < b->nsec; i++) {
		statebuf_u32(meta, b->type[i]);
		statebuf_u32(meta, b->id[i]);
		statebuf_u64(meta, base + b->off[i]);
		statebuf_u64(meta, b->len[i]);
	}
	statebuf_pad(meta, 8);
	statebuf_put(meta, b->body.buf, b->body.len);
	if (meta->err) {
		int e = meta->err;
		statebuf_free(meta);
		return e;
	}
	if (meta->len > SNAPSHOT_FILE_MAX_META) {
		statebuf_free(meta);
		return -EFBIG;
	}
	uint64_t ram_off = ((uint64_t)meta->len + SNAPSHOT_FILE_PAGE - 1) & ~(uint64_t)(SNAPSHOT_FILE_PAGE - 1);
	statebuf_set_u64(meta, OFF_METALEN, meta->len);
	statebuf_set_u64(meta, OFF_RAMOFF, ram_off);
	if (!meta->err)
		snapshot_file_seal(meta->buf, meta->len);
	return meta->err;
}

int snapshot_file_name_ok(const char *name)
{
	return fileio_name_ok(name, SNAPSHOT_FILE_NAME_MAX, ".") ? 0 : -EINVAL;
}

/* The folder, opened and checked: a real folder of ours, 0700 at most. */
static int open_private_dir(const char *dir, char *err, size_t errlen)
{
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return errbuf_fail(err, errlen, -errno, "snapshot folder %s: %s", dir, strerror(errno));
	struct stat st;
	if (fstat(dfd, &st) < 0) {
		int e = errno;
		close(dfd);
		return errbuf_fail(err, errlen, -e, "snapshot folder %s: %s", dir, strerror(e));
	}
	if (st.st_uid != geteuid() || (st.st_mode & 077)) {
		close(dfd);
		return errbuf_fail(err, errlen, -EPERM,
			       "snapshot folder %s is not private to this user (owner %u, mode "
			       "%03o; want %u, 0700): remove it and let kbox make it again",
			       dir, (unsigned)st.st_uid, (unsigned)(st.st_mode & 0777),
			       (unsigned)geteuid());
	}
	return dfd;
}

static int all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i + 8 <= n; i += 8) {
		uint64_t q;
		memcpy(&q, p + i, 8);
		if (q)
			return 0;
	}
	return 1;
}

/* Whether page i of RAM is zero: known so (a bit of known_zero), or
 * read. */
static int page_zero(const uint8_t *ram, uint64_t i, const uint8_t *known_zero)
{
	uint64_t p = i / SNAPSHOT_FILE_PAGE;
	if (known_zero && (known_zero[p / 8] >> (p % 8) & 1))
		return 1;
	return all_zero(ram + i, SNAPSHOT_FILE_PAGE);
}

/* RAM from ram_off on, page by page, runs of non-zero pages in one write
 * each; zero pages stay holes. */
static int write_ram(int fd, uint64_t ram_off, const uint8_t *ram, uint64_t len,
		     const uint8_t *known_zero)
{
	uint64_t i = 0;
	while (i < len) {
		while (i < len && page_zero(ram, i, known_zero))
			i += SNAPSHOT_FILE_PAGE;
		uint64_t start = i;
		while (i < len && i - start < (64u << 20) && !page_zero(ram, i, known_zero))
			i += SNAPSHOT_FILE_PAGE;
		if (i > start) {
			int rc = fileio_pwrite_all(fd, ram + start, (size_t)(i - start),
						   (off_t)(ram_off + start));
			if (rc < 0)
				return rc;
		}
	}
	return ftruncate(fd, (off_t)(ram_off + len)) < 0 ? -errno : 0;
}

static int meta_matches(const struct statebuf_writer *meta, uint64_t ram_len, char *err,
			size_t errlen)
{
	uint64_t hdr_meta;
	if (meta->err || snapshot_file_header(meta->buf, meta->len, &hdr_meta, err, errlen) < 0 ||
	    hdr_meta != meta->len || statebuf_le64(meta->buf + OFF_RAMLEN) != ram_len ||
	    ram_len % SNAPSHOT_FILE_PAGE)
		return errbuf_fail(err, errlen, -EINVAL, "snapshot metadata does not describe this RAM");
	return 0;
}

/* The metadata, then RAM at its offset with its zero pages as holes. */
static int write_body(int fd, const struct statebuf_writer *meta, const void *ram, uint64_t ram_len,
		      const uint8_t *known_zero)
{
	int rc = fileio_pwrite_all(fd, meta->buf, meta->len, 0);
	if (rc == 0)
		rc = write_ram(fd, statebuf_le64(meta->buf + OFF_RAMOFF), ram, ram_len, known_zero);
	return rc;
}

/* A regular file of the effective user's with no group or other access
 * (its links are the caller's to count). */
static bool private_file(const struct stat *st)
{
	return S_ISREG(st->st_mode) && st->st_uid == geteuid() && !(st->st_mode & 077);
}

/* A file descriptor for a fork: a regular file of the effective user's,
 * no group or other access, no more than one link (an O_TMPFILE has
 * none); empty when it is to be written. */
static int check_fd(int fd, bool empty, struct stat *st, char *err, size_t errlen)
{
	if (fstat(fd, st) < 0)
		return errbuf_fail(err, errlen, -errno, "snapshot file: %s", strerror(errno));
	if (!private_file(st) || st->st_nlink > 1)
		return errbuf_fail(err, errlen, -EPERM,
				   "the snapshot file is not a private file of this user (a regular "
				   "file of uid %u, mode 0600, at most one link)",
				   (unsigned)geteuid());
	if (empty && st->st_size != 0)
		return errbuf_fail(err, errlen, -EEXIST, "the snapshot file is not empty");
	return 0;
}

int snapshot_file_write_fd(int fd, const struct statebuf_writer *meta, const void *ram,
			   uint64_t ram_len, const uint8_t *known_zero, char *err, size_t errlen)
{
	struct stat st;
	int rc = meta_matches(meta, ram_len, err, errlen);
	if (rc < 0 || (rc = check_fd(fd, true, &st, err, errlen)) < 0)
		return rc;
	if ((rc = write_body(fd, meta, ram, ram_len, known_zero)) < 0) {
		if (ftruncate(fd, 0) < 0) {
			/* the reader checks the file whole anyway */
		}
		return errbuf_fail(err, errlen, rc, "cannot write the snapshot: %s", strerror(-rc));
	}
	return 0;
}

int snapshot_file_write(const char *dir, const char *name, const struct statebuf_writer *meta,
		const void *ram, uint64_t ram_len, char *err, size_t errlen)
{
	return snapshot_file_write_known(dir, name, meta, ram, ram_len, NULL, err, errlen);
}

int snapshot_file_write_known(const char *dir, const char *name, const struct statebuf_writer *meta,
			      const void *ram, uint64_t ram_len, const uint8_t *known_zero, char *err,
			      size_t errlen)
{
	if (snapshot_file_name_ok(name) < 0)
		return errbuf_fail(err, errlen, -EINVAL, "bad snapshot name '%s'", name);
	int mrc = meta_matches(meta, ram_len, err, errlen);
	if (mrc < 0)
		return mrc;
	int dfd = open_private_dir(dir, err, errlen);
	if (dfd < 0)
		return dfd;
	char tmp[SNAPSHOT_FILE_NAME_MAX + 40];
	snprintf(tmp, sizeof tmp, ".%s.tmp-%ld", name, (long)getpid());
	int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0 && errno == EEXIST) {
		/* Left by a kbox that died with our pid: no live process owns it. */
		unlinkat(dfd, tmp, 0);
		fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	}
	if (fd < 0) {
		int e = errno;
		close(dfd);
		return errbuf_fail(err, errlen, -e, "cannot create a snapshot in %s: %s", dir,
			       strerror(e));
	}
	const char *step = "write";
	int rc = write_body(fd, meta, ram, ram_len, known_zero);
	if (rc == 0 && fsync(fd) < 0) {
		rc = -errno;
		step = "fsync";
	}
	if (close(fd) < 0 && rc == 0) {
		rc = -errno;
		step = "close";
	}
	if (rc == 0 && renameat(dfd, tmp, dfd, name) < 0) {
		rc = -errno;
		step = "rename";
	}
	if (rc < 0) {
		unlinkat(dfd, tmp, 0);
		close(dfd);
		return errbuf_fail(err, errlen, rc, "cannot save snapshot %s/%s (%s): %s", dir, name,
			       step, strerror(-rc));
	}
	fsync(dfd);
	close(dfd);
	return 0;
}

int snapshot_file_make_unnamed(const char *dir, char *err, size_t errlen)
{
	int dfd = open_private_dir(dir, err, errlen);
	if (dfd < 0)
		return dfd;
	int fd = openat(dfd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
		/* No O_TMPFILE on this file system: a named file, unlinked at once. */
		char name[64];
		for (unsigned i = 0; fd < 0 && i < 16; i++) {
			uint64_t r = 0;
			if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r)
				break;
			snprintf(name, sizeof name, ".fork-%016llx", (unsigned long long)r);
			fd = openat(dfd, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
			if (fd >= 0)
				unlinkat(dfd, name, 0);
			else if (errno != EEXIST)
				break;
		}
	}
	int e = errno;
	close(dfd);
	if (fd < 0)
		return errbuf_fail(err, errlen, -e, "cannot make an unnamed file in %s: %s", dir,
				   strerror(e));
	return fd;
}

/* A file shorter than it says is a bad snapshot, not an I/O error. */
static int read_at(int fd, uint8_t *p, size_t n, off_t off)
{
	int rc = fileio_pread_all(fd, p, n, off);
	return rc == -ENODATA ? -EBADMSG : rc;
}

/* The header and metadata of the open file fd (st its fstat), parsed
 * into f, which takes fd on success.  what names the file in errors. */
static int take_file(int fd, const struct stat *stp, const char *what, struct snapshot_file_file *f,
		     char *err, size_t errlen)
{
	struct stat st = *stp;
	int rc;
	uint8_t hdr[SNAPSHOT_FILE_HDR_LEN];
	uint64_t meta_len;
	if ((uint64_t)st.st_size < SNAPSHOT_FILE_HDR_LEN)
		return errbuf_fail(err, errlen, -EBADMSG, "snapshot %s is too short", what);
	if ((rc = read_at(fd, hdr, sizeof hdr, 0)) < 0)
		return errbuf_fail(err, errlen, rc, "snapshot %s: cannot read it", what);
	if ((rc = snapshot_file_header(hdr, sizeof hdr, &meta_len, err, errlen)) < 0)
		return rc;
	if (meta_len > (uint64_t)st.st_size)
		return errbuf_fail(err, errlen, -EBADMSG, "snapshot %s is cut short", what);
	f->meta = malloc((size_t)meta_len);
	if (!f->meta)
		return errbuf_fail(err, errlen, -ENOMEM, "out of memory");
	if ((rc = read_at(fd, f->meta, (size_t)meta_len, 0)) < 0) {
		errbuf_fail(err, errlen, rc, "snapshot %s: cannot read it", what);
		goto fail;
	}
	if ((rc = snapshot_file_parse(f->meta, (size_t)meta_len, (uint64_t)st.st_size, &f->v, err,
			      errlen)) < 0)
		goto fail;
	f->fd = fd;
	f->size = (uint64_t)st.st_size;
	f->disk_bytes = (uint64_t)st.st_blocks * 512;
	return 0;
fail:
	free(f->meta);
	f->meta = NULL;
	return rc;
}

int snapshot_file_open(const char *dir, const char *name, struct snapshot_file_file *f, char *err, size_t errlen)
{
	memset(f, 0, sizeof *f);
	f->fd = -1;
	if (snapshot_file_name_ok(name) < 0)
		return errbuf_fail(err, errlen, -EINVAL, "bad snapshot name '%s'", name);
	int dfd = open_private_dir(dir, err, errlen);
	if (dfd < 0)
		return dfd;
	int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	int e = errno;
	close(dfd);
	if (fd < 0)
		return errbuf_fail(err, errlen, -e, "snapshot %s/%s: %s", dir, name, strerror(e));
	struct stat st;
	int rc;
	char what[PATH_MAX + SNAPSHOT_FILE_NAME_MAX + 2];
	snprintf(what, sizeof what, "%s/%s", dir, name);
	if (fstat(fd, &st) < 0) {
		rc = errbuf_fail(err, errlen, -errno, "snapshot %s: %s", what, strerror(errno));
		goto fail;
	}
	if (!private_file(&st) || st.st_nlink != 1) {
		rc = errbuf_fail(err, errlen, -EPERM,
			     "snapshot %s was not written by kbox for this user (a regular "
			     "file of uid %u, mode 0600, one link): not used",
			     what, (unsigned)geteuid());
		goto fail;
	}
	if ((rc = take_file(fd, &st, what, f, err, errlen)) == 0)
		return 0;
fail:
	close(fd);
	return rc;
}

int snapshot_file_open_fd(int fd, struct snapshot_file_file *f, char *err, size_t errlen)
{
	memset(f, 0, sizeof *f);
	f->fd = -1;
	struct stat st;
	int rc = check_fd(fd, false, &st, err, errlen);
	if (rc < 0)
		return rc;
	int dup = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	if (dup < 0)
		return errbuf_fail(err, errlen, -errno, "snapshot file: %s", strerror(errno));
	if ((rc = take_file(dup, &st, "file", f, err, errlen)) < 0)
		close(dup);
	return rc;
}

void snapshot_file_close(struct snapshot_file_file *f)
{
	if (f->fd >= 0)
		close(f->fd);
	free(f->meta);
	f->meta = NULL;
	f->fd = -1;
}
