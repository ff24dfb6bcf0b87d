#!/usr/bin/env python3
"""A tiny OpenAI-compatible model server for tests/e2e/opencode.sh: HTTPS on
loopback, answers every chat completion with a fixed text, streamed as
server-sent events (chunked) when the request says "stream": true and as one
JSON object otherwise; GET /v1/models lists the one model.  Each request is
logged to LOG as a JSON line with its request line, Host and Authorization
header (the test checks which key arrived).

  model_server.py ADDR PORT CERT KEY LOG [REPLY]

Nothing here is a model: the reply is REPLY (default "Hi from the test
model."), split into a few deltas so a client's stream parser is exercised.
"""
import http.server
import json
import ssl
import sys
import time

addr, port, cert, key, log = sys.argv[1:6]
reply_text = sys.argv[6] if len(sys.argv) > 6 else "Hi from the test model."
MODEL = "kbox-test"
MAX_BODY = 16 << 20


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def read_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            return self.rfile.read(min(n, MAX_BODY))
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while len(out) <= MAX_BODY:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                out += self.rfile.read(size)
                self.rfile.readline()
            return out
        return b""

    def record(self, req):
        with open(log, "a") as f:
            f.write(json.dumps({
                "line": self.requestline,
                "host": self.headers.get("Host"),
                "authorization": self.headers.get("Authorization"),
                "stream": bool(req.get("stream")) if isinstance(req, dict) else None,
                "model": req.get("model") if isinstance(req, dict) else None,
            }) + "\n")

    def send_json(self, code, obj):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def do_GET(self):
        self.record({})
        if self.path.rstrip("/").endswith("/models"):
            self.send_json(200, {"object": "list", "data": [
                {"id": MODEL, "object": "model", "created": 0, "owned_by": "kbox"}]})
        else:
            self.send_json(404, {"error": {"message": "not found", "type": "invalid_request_error"}})

    def do_POST(self):
        raw = self.read_body()
        try:
            req = json.loads(raw or b"{}")
        except ValueError:
            req = None
        self.record(req if isinstance(req, dict) else {})
        if not isinstance(req, dict) or not self.path.rstrip("/").endswith("/chat/completions"):
            self.send_json(400 if req is None else 404,
                           {"error": {"message": "bad request", "type": "invalid_request_error"}})
            return
        model = req.get("model") or MODEL
        now = int(time.time())
        usage = {"prompt_tokens": 10, "completion_tokens": 6, "total_tokens": 16}
        if not req.get("stream"):
            self.send_json(200, {
                "id": "chatcmpl-kbox", "object": "chat.completion", "created": now, "model": model,
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": reply_text}}],
                "usage": usage})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def event(delta, finish=None, extra=None):
            obj = {"id": "chatcmpl-kbox", "object": "chat.completion.chunk", "created": now,
                   "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            if extra:
                obj.update(extra)
            self.chunk(b"data: " + json.dumps(obj).encode() + b"\n\n")

        event({"role": "assistant", "content": ""})
        words = reply_text.split(" ")
        for i, w in enumerate(words):
            event({"content": w + (" " if i + 1 < len(words) else "")})
        event({}, "stop")
        if (req.get("stream_options") or {}).get("include_usage"):
            self.chunk(b"data: " + json.dumps({
                "id": "chatcmpl-kbox", "object": "chat.completion.chunk", "created": now,
                "model": model, "choices": [], "usage": usage}).encode() + b"\n\n")
        self.chunk(b"data: [DONE]\n\n")
        self.chunk(b"")


ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
srv = http.server.ThreadingHTTPServer((addr, int(port)), Handler)
srv.daemon_threads = True
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
srv.serve_forever()
