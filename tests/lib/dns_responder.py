#!/usr/bin/env python3
"""A tiny DNS server for tests, on 127.0.0.1 only (TESTING.md).

    dns_responder.py PORT PORTFILE LOG NAME=A.B.C.D...

Binds UDP 127.0.0.1:PORT (0: any free port), writes the bound port to
PORTFILE once it listens, then answers each question: an A question for a
listed NAME gets that address; any other question for a listed name gets
an empty answer; an unlisted name gets NXDOMAIN.  Every question is
appended to LOG as "NAME TYPE".  Runs until killed.
"""
import os
import socket
import struct
import sys


def main():
    port, portfile, log = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    answers = {}
    for arg in sys.argv[4:]:
        name, addr = arg.split("=", 1)
        answers[name.lower()] = socket.inet_aton(addr)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", port))
    with open(portfile + ".tmp", "w") as f:
        f.write(str(s.getsockname()[1]))
    os.rename(portfile + ".tmp", portfile)
    while True:
        m, peer = s.recvfrom(512)
        if len(m) < 12:
            continue
        qid, _flags, qd = struct.unpack(">HHH", m[:6])
        labels, i = [], 12
        while i < len(m) and m[i] != 0 and m[i] < 64:
            labels.append(m[i + 1:i + 1 + m[i]].decode("ascii", "replace"))
            i += 1 + m[i]
        if qd != 1 or i + 5 > len(m):
            continue
        qtype = struct.unpack(">H", m[i + 1:i + 3])[0]
        name = ".".join(labels).lower()
        with open(log, "a") as f:
            f.write("%s %d\n" % (name, qtype))
        addr = answers.get(name)
        ans = b""
        if addr is not None and qtype == 1:
            ans = struct.pack(">HHHIH", 0xC00C, 1, 1, 60, 4) + addr
        rcode = 0 if addr is not None else 3
        hdr = struct.pack(">HHHHHH", qid, 0x8180 | rcode, 1,
                          1 if ans else 0, 0, 0)
        s.sendto(hdr + m[12:i + 5] + ans, peer)


if __name__ == "__main__":
    main()
