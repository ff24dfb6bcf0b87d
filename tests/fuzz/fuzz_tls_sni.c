/* Input: the first bytes of a guest's TCP stream.
 *   - tls_sni_parse must never read outside them, and what it reports
 *     must hold: a reported name is valid and normalised, the hello ends
 *     at `consumed` (one byte less is "more, please"; the prefix alone
 *     parses the same), and NEED_MORE never follows from fewer bytes
 *     than a verdict.
 *   - The same bytes also go, in pieces sized by the last byte, into an
 *     interception engine as the guest's
 *     stream; it must end in a clean verdict (still waiting, verifying
 *     upstream, or failed with a reason) and never crash. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "netstack/tls_cert.h"
#include "netstack/tls_mitm.h"
#include "netstack/tls_sni.h"
#include "netstack/tls_trust.h"

static void check_parse(const uint8_t *data, size_t size)
{
	struct tls_hello h, h2;
	int st = tls_sni_parse(data, size, &h);
	if (st != TLS_SNI_OK)
		return;
	if (h.consumed == 0 || h.consumed > size)
		abort();
	if (h.has_sni && !h.sni_invalid) {
		char again[TLS_NAME_MAX + 1];
		if (tls_sni_name_normalize(h.sni, strlen(h.sni), again) < 0 || strcmp(again, h.sni) != 0)
			abort();
	} else if (h.sni[0] != '\0') {
		abort();
	}
	if (h.tls13_only && (h.offers_tls12 || !h.offers_tls13))
		abort();
	if (h.alpn_n > TLS_ALPN_KEEP || h.alpn_n > h.alpn_total)
		abort();
	if (tls_sni_parse(data, h.consumed, &h2) != TLS_SNI_OK || strcmp(h.sni, h2.sni) != 0 ||
	    h2.consumed != h.consumed)
		abort();
	if (tls_sni_parse(data, h.consumed - 1, &h2) != TLS_SNI_NEED_MORE)
		abort();
}

static struct tls_cert_ca *ca;
static struct tls_trust *trust;

static void check_engine(const uint8_t *data, size_t size)
{
	if (!ca && (tls_cert_ca_generate("fuzz CA", time(NULL), &ca) < 0 || tls_trust_new(&trust) < 0))
		abort();
	struct tls_mitm_config cfg = { .ca = ca, .trust = trust };
	struct mitm *m;
	if (tls_mitm_new(&cfg, "api.example.test", NULL, &m) < 0)
		abort();
	size_t piece = size > 0 ? (size_t)data[size - 1] % 64 + 1 : 1;
	size_t off = 0, taken;
	while (off < size && tls_mitm_guest_in(m, data + off, size - off < piece ? size - off : piece, &taken) == 0 &&
	       taken > 0)
		off += taken;
	size_t n;
	const uint8_t *out = tls_mitm_guest_out(m, &n);
	if (tls_mitm_error(m)) {
		/* failed: at most our own alert toward the guest, nothing upstream */
		if ((out && n != 7) || tls_mitm_upstream_out(m, &n))
			abort();
	}
	tls_mitm_close_guest(m);
	if (!tls_mitm_error(m) || !(tls_mitm_want(m) & (TLS_MITM_DONE | TLS_MITM_WANT_GUEST_OUT)))
		abort();
	tls_mitm_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	check_parse(data, size);
	check_engine(data, size);
	return 0;
}
