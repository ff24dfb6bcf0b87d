/* Input: text lines.  Each line is offered to the rule parser (a user's
 * --allow/--deny string) and as a name to the DNS-time check; the last 16
 * bytes of the input also serve as an address and port to judge against
 * the rules accepted.  Invariants: a parse error always comes with a
 * message; an accepted rule keeps its port and prefix length in range;
 * nothing crashes or reads past a string. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "netstack/policy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > 4096)
		return 0;
	char *text = malloc(size + 1);
	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	struct policy p;
	policy_init(&p, (data[0] & 1) ? POLICY_MODE_ALLOWLIST : POLICY_MODE_PUBLIC);
	struct policy_decision d;
	char *save = NULL;
	for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char err[256] = "";
		struct policy_rule r;
		int rc = policy_parse_rule(line, &r, err, sizeof err);
		if (rc < 0 && (rc != -EINVAL || err[0] == '\0'))
			abort();
		if (rc == 0) {
			if (r.kind == POLICY_RULE_NET && r.plen > (r.net.family == 4 ? 32 : 128))
				abort();
			if (policy_add_rule(&p, line, err, sizeof err) != 0)
				abort();
		}
		policy_check_name(&p, line, &d);
		if (!d.rule)
			abort();
	}
	if (size >= 18) {
		struct policy_addr a = { .family = (data[size - 18] & 1) ? 6 : 4 };
		memcpy(a.b, data + size - 16, 16);
		if (a.family == 4)
			memset(a.b + 4, 0, 12);
		uint16_t port = (uint16_t)(data[size - 17] << 8 | data[size - 18]);
		policy_check(&p, NULL, &a, port, &d);
		if (!d.rule)
			abort();
		policy_check_answer(&p, "example.com", &a, &d);
		char buf[64];
		if (policy_addr_format(&a, buf, sizeof buf) != 0)
			abort();
		struct policy_addr back;
		if (policy_addr_parse(buf, &back) != 0 || memcmp(back.b, a.b, 16) != 0)
			abort();
	}
	policy_free(&p);
	free(text);
	return 0;
}
