#!/usr/bin/env python3
"""A trivial OpenAI-style backend for the serving tests and bench/serve: canned
replies, so that what is measured or checked is the router. Usage:
    canned_backend.py --host H --port P
GET /health; GET /env (the isolation variables it was started with);
POST /v1/chat/completions, /v1/completions (both with "stream"), /v1/embeddings.
A request may carry "test_delay_s" (seconds before each streamed piece, or
before a whole reply), "max_tokens" (the number of pieces, default 4) and
"test_close_port" (the backend on that port closes the connection unanswered).
Replies carry OpenAI's "usage" (prompt tokens: the prompt's words; completion
tokens: the pieces); a stream has it in a last chunk with
"stream_options": {"include_usage": true}. GET /stats: the connections, POST
requests and connections that carried a POST it took (whether the router
keeps connections alive)."""
import argparse, json, os, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ISOLATION = ["CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
             "ROCR_VISIBLE_DEVICES", "TPU_VISIBLE_CHIPS", "TPU_WORKER_ID", "TPU_WORKER_HOSTNAMES", "RANK", "WORLD_SIZE",
             "CORRAL_JOB_ID", "CORRAL_NODE_ID", "MASTER_ADDR", "MASTER_PORT"]


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def setup(self):
        super().setup()
        self.server.conns += 1

    def reply(self, code, obj, ctype="application/json"):
        body = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/health":
            self.reply(200, {"status": "ok"})
        elif self.path == "/stats":
            self.reply(200, {"connections": self.server.conns, "requests": self.server.posts,
                             "post_connections": self.server.post_conns})
        elif self.path == "/env":
            self.reply(200, {k: os.environ.get(k) for k in ISOLATION} | {"pid": os.getpid()})
        else:
            self.reply(404, {"error": {"message": "no such path"}})

    def do_POST(self):
        self.server.posts += 1
        if not getattr(self, "posted", False):  # one handler per connection
            self.posted = True
            self.server.post_conns += 1
        n = int(self.headers.get("Content-Length") or 0)
        try:
            req = json.loads(self.rfile.read(n) or b"{}")
        except ValueError:
            return self.reply(400, {"error": {"message": "bad json"}})
        if req.get("test_close_port") == self.server.server_port:
            self.close_connection = True  # closed before the first byte of a reply
            return
        delay = float(req.get("test_delay_s") or 0)
        pieces = int(req.get("max_tokens") or 4)
        me = "%s:%d" % (os.environ.get("CORRAL_NODE_ID", "-"), self.server.server_port)
        chat = self.path == "/v1/chat/completions"
        if self.path == "/v1/embeddings":
            return self.reply(200, {"object": "list", "model": req.get("model"),
                                    "data": [{"object": "embedding", "index": 0,
                                              "embedding": [0.25, -0.5, 1.0]}],
                                    "usage": {"prompt_tokens": 1, "total_tokens": 1}})
        if self.path not in ("/v1/chat/completions", "/v1/completions"):
            return self.reply(404, {"error": {"message": "no such path"}})
        words = ["w%d " % i for i in range(pieces)]
        prompt = req.get("prompt") if isinstance(req.get("prompt"), str) else " ".join(
            str(m.get("content")) for m in req.get("messages") or [] if isinstance(m, dict))
        usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": pieces,
                 "total_tokens": len(prompt.split()) + pieces}
        if not req.get("stream"):
            time.sleep(delay)
            text = "".join(words) + "from " + me + self.server.tag
            choice = ({"index": 0, "message": {"role": "assistant", "content": text},
                       "finish_reason": "stop"} if chat else
                      {"index": 0, "text": text, "finish_reason": "stop"})
            return self.reply(200, {"id": "canned-1", "object": "chat.completion" if chat else
                                    "text_completion", "created": 0, "model": req.get("model"),
                                    "choices": [choice], "usage": usage})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def chunk(s):
            b = s.encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(b), b))
            self.wfile.flush()
        for w in words + ["from " + me]:
            time.sleep(delay)
            delta = ({"index": 0, "delta": {"content": w}, "finish_reason": None} if chat else
                     {"index": 0, "text": w, "finish_reason": None})
            chunk("data: " + json.dumps({"id": "canned-1", "object": "chat.completion.chunk"
                                         if chat else "text_completion", "created": 0,
                                         "model": req.get("model"), "choices": [delta]}) + "\n\n")
        if (req.get("stream_options") or {}).get("include_usage"):
            chunk("data: " + json.dumps({"id": "canned-1", "object": "chat.completion.chunk"
                                         if chat else "text_completion", "created": 0,
                                         "model": req.get("model"), "choices": [],
                                         "usage": usage}) + "\n\n")
        chunk("data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--tag", default="")
    a = ap.parse_args()
    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer.request_queue_size = 1024
    srv = ThreadingHTTPServer((a.host, a.port), H)
    srv.tag = " " + a.tag if a.tag else ""
    srv.conns = srv.posts = srv.post_conns = 0
    print("canned backend on %s:%d" % (a.host, a.port), flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
