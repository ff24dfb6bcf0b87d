#!/usr/bin/env python3
"""An HTTPS test server for tests/tls/intercept.sh (loopback of a namespace
the test made): logs every request line, its Authorization header and its
body to LOG as JSON lines, answers /echo with "ok", redirects /redirect to
/echo on another port, and serves git's smart HTTP under /git/ through
`git http-backend` (clone and push).  Like a careless server, it also
reflects what it got: /reflect answers with the request's head and body
(and the Authorization value in a header), /reflect-enc with the
Authorization value in the encodings a client might meet (base64 with and
without padding, URL-safe, Basic user:value, percent-encoded, JSON
escapes), /reflect-chunked?N with the head in a chunked body cut every N
bytes, /gzip with the head gzip-compressed whatever the client accepts,
and TRACE as a server that allows it would.

  upstream.py ADDR PORT CERT KEY LOG GIT_ROOT [REDIRECT_PORT]
"""
import base64
import gzip
import http.server
import json
import os
import ssl
import subprocess
import sys
import urllib.parse

addr, port, cert, key, log, git_root = sys.argv[1:7]
redirect_port = sys.argv[7] if len(sys.argv) > 7 else None


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            return self.rfile.read(n)
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        return b""

    def record(self, body):
        with open(log, "a") as f:
            f.write(json.dumps({
                "line": self.requestline,
                "host": self.headers.get("Host"),
                "authorization": self.headers.get("Authorization"),
                "accept-encoding": self.headers.get("Accept-Encoding"),
                "body": body.decode("latin-1"),
            }) + "\n")

    def reply(self, code, data, headers=()):
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def reflected(self, body):
        return (self.requestline + "\r\n").encode("latin-1") + bytes(self.headers) + body

    def chunked(self, data, n, headers=()):
        self.send_response(200)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i in range(0, len(data), n):
            part = data[i:i + n]
            self.wfile.write(b"%x;ext=1\r\n%s\r\n" % (len(part), part))
            self.wfile.flush()
        self.wfile.write(b"0\r\nX-Trailer-Echo: %s\r\n\r\n" % self.auth_value().encode("latin-1"))

    def auth_value(self):
        a = self.headers.get("Authorization") or ""
        return a.split(" ", 1)[1] if " " in a else a

    def encodings(self):
        v = self.auth_value().encode("latin-1")
        forms = {
            "plain": v.decode("latin-1"),
            "b64": base64.b64encode(v).decode(),
            "b64-nopad": base64.b64encode(v).decode().rstrip("="),
            "b64-shift1": base64.b64encode(b"x" + v).decode(),
            "b64-shift2": base64.b64encode(b"xy" + v + b"z").decode(),
            "b64url": base64.urlsafe_b64encode(b"\xfb" + v).decode().rstrip("="),
            "basic": "Basic " + base64.b64encode(b"user:" + v).decode(),
            "pct": "".join("%%%02X" % c for c in v),
            "pct-lower": "".join("%%%02x" % c for c in v),
            "json": "".join("\\u%04x" % c for c in v),
            "mixed": "".join(("%%%02X" if i % 2 else "\\u%04X") % c for i, c in enumerate(v)),
        }
        return json.dumps(forms).encode()

    def handle_any(self):
        body = self.body()
        self.record(body)
        path = self.path
        if path == "/reflect":
            return self.reply(200, self.reflected(body), [("X-Echo-Authorization", self.auth_value())])
        if path == "/reflect-enc":
            return self.reply(200, self.encodings(), [("Content-Type", "application/json")])
        if path.startswith("/reflect-chunked"):
            n = int(urllib.parse.urlsplit(path).query or "7")
            return self.chunked(self.reflected(body), n)
        if path == "/gzip":
            return self.reply(200, gzip.compress(self.reflected(body)), [("Content-Encoding", "gzip")])
        if path.startswith("/git/"):
            return self.git(path, body)
        if path.startswith("/redirect") and redirect_port:
            return self.reply(302, b"", [("Location", "https://host.kbox.internal:%s/echo" % redirect_port)])
        self.reply(200, b"ok\n", [("Content-Type", "text/plain")])

    def git(self, path, body):
        p, _, q = path.partition("?")
        env = dict(os.environ, GIT_PROJECT_ROOT=git_root, GIT_HTTP_EXPORT_ALL="1",
                   PATH_INFO=p[len("/git"):], QUERY_STRING=q, REQUEST_METHOD=self.command,
                   CONTENT_TYPE=self.headers.get("Content-Type", ""), CONTENT_LENGTH=str(len(body)),
                   REMOTE_USER="test", REMOTE_ADDR="127.0.0.1")
        r = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True)
        head, _, data = r.stdout.partition(b"\r\n\r\n")
        code, headers = 200, []
        for line in head.split(b"\r\n"):
            k, _, v = line.decode().partition(":")
            if k.lower() == "status":
                code = int(v.split()[0])
            elif k:
                headers.append((k, v.strip()))
        self.reply(code, data, headers)

    def do_TRACE(self):
        self.record(b"")
        self.reply(200, self.reflected(b""), [("Content-Type", "message/http")])

    do_GET = do_POST = do_PUT = handle_any


ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
srv = http.server.ThreadingHTTPServer((addr, int(port)), Handler)
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
srv.serve_forever()
