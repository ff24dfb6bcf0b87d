#!/usr/bin/env python3
"""HTTP server for tests/net/run.sh, run on the loopback of a test-made
namespace: GET serves files from DIR (HTTP/1.1, keep-alive), GET
/stream?n=N&seed=S the N bytes of tests/net/bulk.py's stream S, POST /sha
answers the sha256 of the request body.  ADDR may be IPv6.  Usage:
server.py ADDR PORT DIR"""
import hashlib
import http.server
import os
import socket
import sys
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bulk  # noqa: E402


class Handler(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        h = hashlib.sha256()
        while n > 0:
            b = self.rfile.read(min(n, 65536))
            if not b:
                break
            h.update(b)
            n -= len(b)
        body = (h.hexdigest() + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        u = urllib.parse.urlparse(self.path)
        if u.path != "/stream":
            return super().do_GET()
        q = urllib.parse.parse_qs(u.query)
        n, seed = int(q["n"][0]), int(q["seed"][0])
        self.send_response(200)
        self.send_header("Content-Length", str(n))
        self.end_headers()
        for b in bulk.stream(n, seed):
            self.wfile.write(b)

    def log_message(self, *args):
        pass


addr, port, root = sys.argv[1], int(sys.argv[2]), sys.argv[3]
# Room for the 500-connection check: the default backlog of 5 would drop
# SYNs while the accept loop catches up.
http.server.ThreadingHTTPServer.request_queue_size = 1024
if ":" in addr:
    http.server.ThreadingHTTPServer.address_family = socket.AF_INET6
srv = http.server.ThreadingHTTPServer(
    (addr, port), lambda *a, **k: Handler(*a, directory=root, **k))
srv.serve_forever()
