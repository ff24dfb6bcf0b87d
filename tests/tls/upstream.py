#!/usr/bin/env python3
"""An HTTPS test server for tests/tls/intercept.sh (loopback of a namespace
the test made): logs every request line, its Authorization header and its
body to LOG as JSON lines, answers /echo with "ok", redirects /redirect to
/echo on another port, and serves git's smart HTTP under /git/ through
`git http-backend` (clone and push).

  upstream.py ADDR PORT CERT KEY LOG GIT_ROOT [REDIRECT_PORT]
"""
import http.server
import json
import os
import ssl
import subprocess
import sys

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
                "body": body.decode("latin-1"),
            }) + "\n")

    def reply(self, code, data, headers=()):
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def handle_any(self):
        body = self.body()
        self.record(body)
        path = self.path
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

    do_GET = do_POST = do_PUT = handle_any


ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
srv = http.server.ThreadingHTTPServer((addr, int(port)), Handler)
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
srv.serve_forever()
