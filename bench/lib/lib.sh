# Shared by bench/boot, bench/exec and bench/lockdown (POSIX sh): sourced at the
# repository root once B (the build folder) and CC are set.  Builds
# bench/lib/benchtool.c into $TOOL ($B/bench/benchtool) when it is missing
# or older than its source, and defines the timing helpers below.

mkdir -p "$B/bench"
TOOL=$B/bench/benchtool
if [ ! -x "$TOOL" ] || [ bench/lib/benchtool.c -nt "$TOOL" ]; then
	$CC -std=c11 -O2 -Wall -Wextra -Werror -Wshadow -Wvla -o "$TOOL" bench/lib/benchtool.c
fi

# now: a monotonic timestamp in ns; ms T0 T1: T1 - T0 in ms (one decimal).
now() { "$TOOL" now; }
ms() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f\n", (b - a) / 1e6 }'; }
# median: the median of the numbers on stdin, one a line ("-" for none).
median() { sort -n | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "-" }'; }
# ratio A B: A / B to two decimals ("-" unless B > 0).
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f\n", a / b; else print "-" }'; }
