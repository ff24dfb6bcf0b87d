#!/usr/bin/env python3
"""A tiny model server for tests/e2e/opencode.sh and agents.sh: HTTPS on
loopback, answering with a fixed text in three APIs, each streamed as
server-sent events (chunked) when the request says "stream": true and as one
JSON object otherwise:
  - OpenAI chat completions (POST .../chat/completions; OpenCode);
  - OpenAI Responses (POST .../responses; Codex), whose WebSocket upgrade
    of GET .../responses is declined with 426 so the client falls back;
  - Anthropic messages (POST .../messages; Claude Code), and
    .../messages/count_tokens.
GET .../models lists the one model.  Each request is logged to LOG as a
JSON line with its request line, Host, Authorization and X-Api-Key
headers (the tests check which key arrived) and the time its request
line was read ("t", seconds since the epoch: bench/agent's first request).

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
                "x-api-key": self.headers.get("X-Api-Key"),
                "stream": bool(req.get("stream")) if isinstance(req, dict) else None,
                "model": req.get("model") if isinstance(req, dict) else None,
                "t": self.t0,
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

    def route(self):
        return self.path.split("?")[0].rstrip("/")

    def sse_start(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def sse(self, name, obj):
        self.chunk(b"event: " + name.encode() + b"\ndata: " + json.dumps(obj).encode() + b"\n\n")

    def words(self):
        w = reply_text.split(" ")
        return [x + (" " if i + 1 < len(w) else "") for i, x in enumerate(w)]

    def anthropic(self, req):
        model = req.get("model") or MODEL
        if self.route().endswith("/count_tokens"):
            self.send_json(200, {"input_tokens": 10})
            return
        usage = {"input_tokens": 10, "output_tokens": 6}
        msg = {"id": "msg_kbox", "type": "message", "role": "assistant", "model": model,
               "content": [], "stop_reason": None, "stop_sequence": None,
               "usage": {"input_tokens": 10, "output_tokens": 1}}
        if not req.get("stream"):
            msg.update({"content": [{"type": "text", "text": reply_text}],
                        "stop_reason": "end_turn", "usage": usage})
            self.send_json(200, msg)
            return
        self.sse_start()
        self.sse("message_start", {"type": "message_start", "message": msg})
        self.sse("content_block_start", {"type": "content_block_start", "index": 0,
                                         "content_block": {"type": "text", "text": ""}})
        for w in self.words():
            self.sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                             "delta": {"type": "text_delta", "text": w}})
        self.sse("content_block_stop", {"type": "content_block_stop", "index": 0})
        self.sse("message_delta", {"type": "message_delta",
                                   "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                                   "usage": {"output_tokens": 6}})
        self.sse("message_stop", {"type": "message_stop"})
        self.chunk(b"")

    def openai_responses(self, req):
        model = req.get("model") or MODEL
        now = int(time.time())
        item = {"type": "message", "id": "msg_kbox", "status": "completed", "role": "assistant",
                "content": [{"type": "output_text", "text": reply_text, "annotations": []}]}
        usage = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
                 "output_tokens": 6, "output_tokens_details": {"reasoning_tokens": 0},
                 "total_tokens": 16}
        resp = {"id": "resp_kbox", "object": "response", "created_at": now, "status": "completed",
                "model": model, "output": [item], "usage": usage}
        if not req.get("stream"):
            self.send_json(200, resp)
            return
        self.sse_start()
        self.sse("response.created", {"type": "response.created",
                                      "response": dict(resp, status="in_progress", output=[])})
        self.sse("response.output_item.added", {"type": "response.output_item.added", "output_index": 0,
                                                "item": dict(item, status="in_progress", content=[])})
        for w in self.words():
            self.sse("response.output_text.delta", {"type": "response.output_text.delta",
                                                    "item_id": "msg_kbox", "output_index": 0,
                                                    "content_index": 0, "delta": w})
        self.sse("response.output_text.done", {"type": "response.output_text.done", "item_id": "msg_kbox",
                                               "output_index": 0, "content_index": 0, "text": reply_text})
        self.sse("response.output_item.done", {"type": "response.output_item.done", "output_index": 0,
                                               "item": item})
        self.sse("response.completed", {"type": "response.completed", "response": resp})
        self.chunk(b"")

    def do_GET(self):
        self.t0 = time.time()
        self.record({})
        if self.route().endswith("/responses"):
            # No WebSocket here: the client falls back to POST.
            self.send_json(426, {"error": {"message": "use POST", "type": "invalid_request_error"}})
        elif self.route().endswith("/models"):
            self.send_json(200, {"object": "list", "data": [
                {"id": MODEL, "object": "model", "created": 0, "owned_by": "kbox"}]})
        else:
            self.send_json(404, {"error": {"message": "not found", "type": "invalid_request_error"}})

    def do_POST(self):
        self.t0 = time.time()
        raw = self.read_body()
        try:
            req = json.loads(raw or b"{}")
        except ValueError:
            req = None
        self.record(req if isinstance(req, dict) else {})
        if isinstance(req, dict) and "/messages" in self.route():
            self.anthropic(req)
            return
        if isinstance(req, dict) and self.route().endswith("/responses"):
            self.openai_responses(req)
            return
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
