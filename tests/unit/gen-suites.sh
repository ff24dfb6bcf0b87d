#!/bin/sh
# Lists the Check suites defined by the unit-test sources given as
# arguments, for tests/unit/main.c: every `Suite *NAME_suite(void)`.
set -eu
names=$(grep -ho '^Suite \*[a-z0-9_]*_suite(void)' "$@" | sed 's/^Suite \*\([a-z0-9_]*\)_suite(void)/\1/')
for n in $names; do echo "Suite *${n}_suite(void);"; done
echo "#define KBOX_SUITES \\"
for n in $names; do echo "	X(${n}) \\"; done
echo
