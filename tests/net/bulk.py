#!/usr/bin/env python3
"""Large transfers with a check of every byte, for tests/net/run.sh.

The bytes are a seeded pseudo-random stream (Python's Mersenne Twister,
cut in 1 MiB pieces), so neither side keeps a file of that size and no
piece repeats another: a lost, doubled or misplaced piece fails.

  bulk.py get HOST PORT N SEED   GET /stream from server.py, compared
                                 piece by piece with the stream itself
  bulk.py put HOST PORT N SEED   POST the stream to server.py's /sha,
                                 its answer compared with our sha256
Prints "ok SHA256" (exit 0) or what went wrong (exit 1)."""
import hashlib
import http.client
import random
import sys

PIECE = 1 << 20


def stream(n, seed):
    """The first n bytes of stream seed, in pieces of at most PIECE."""
    rng = random.Random(seed)
    while n > 0:
        k = min(n, PIECE)
        yield rng.randbytes(k)
        n -= k


def get(host, port, n, seed):
    c = http.client.HTTPConnection(host, port, timeout=120)
    c.request("GET", "/stream?n=%d&seed=%d" % (n, seed))
    r = c.getresponse()
    if r.status != 200:
        return "status %d" % r.status
    h = hashlib.sha256()
    off = 0
    for want in stream(n, seed):
        got = r.read(len(want))
        if got != want:
            return "bytes %d.. differ (%d of %d read)" % (off, len(got), len(want))
        h.update(got)
        off += len(got)
    if r.read(1):
        return "more than %d bytes" % n
    return "ok " + h.hexdigest()


def put(host, port, n, seed):
    c = http.client.HTTPConnection(host, port, timeout=120)
    h = hashlib.sha256()

    def body():
        for b in stream(n, seed):
            h.update(b)
            yield b
    c.request("POST", "/sha", body=body(), headers={"Content-Length": str(n)})
    r = c.getresponse()
    got = r.read().decode().strip()
    if got != h.hexdigest():
        return "server's sha256 %s, sent %s" % (got, h.hexdigest())
    return "ok " + got


if __name__ == "__main__":
    what, host, port, n, seed = sys.argv[1:6]
    out = (get if what == "get" else put)(host, int(port), int(n), int(seed))
    print(out)
    sys.exit(0 if out.startswith("ok ") else 1)
