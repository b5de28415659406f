#!/usr/bin/env python3
"""A store that ignores conditional writes, for scripts/cluster --store ministack-nc: an HTTP
proxy in front of an S3-compatible store that removes If-Match and If-None-Match from every
request and forwards the rest as sent (the Host header and a presigned request's query stay,
so the store still judges its expiry). The standalone twin of tests/common/s3proxy.rs's
Mode::DropConditions, for the cluster torture, which runs instances as separate processes.
More headers to remove may follow the ports: tests/it/azure_probe_store.rs removes Azure's
x-ms-source-if-match too, for a blob service that ignores every condition (the probe
authorizes its requests by a SAS in the query, which does not sign these headers).

Usage: drop_conditions_proxy.py LISTEN_PORT UPSTREAM_PORT [HEADER...] (both on 127.0.0.1)
"""

import http.client
import http.server
import sys

DROPPED = {"if-match", "if-none-match"}
# Hop-by-hop, or recomputed here: the body is read whole and sent with its length.
HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "proxy-connection"}


def read_body(handler):
    if handler.headers.get("transfer-encoding", "").lower() == "chunked":
        out = b""
        while True:
            size = int(handler.rfile.readline().split(b";")[0].strip(), 16)
            if size == 0:
                while handler.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return out
            out += handler.rfile.read(size)
            handler.rfile.readline()
    return handler.rfile.read(int(handler.headers.get("content-length") or 0))


class Proxy(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    upstream = 0

    def forward(self):
        body = read_body(self)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in DROPPED | HOP}
        if body or self.command in ("PUT", "POST"):
            headers["Content-Length"] = str(len(body))
        conn = http.client.HTTPConnection("127.0.0.1", self.upstream, timeout=120)
        try:
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        except OSError as e:
            self.send_error(502, f"drop_conditions_proxy: upstream: {e}")
            return
        finally:
            conn.close()
        self.send_response_only(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() not in HOP:
                self.send_header(k, v)
        if self.command == "HEAD":
            # A HEAD's length is the object's, not of a body this answer has.
            if resp.getheader("content-length") is not None:
                self.send_header("Content-Length", resp.getheader("content-length"))
        else:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = forward

    def log_message(self, *args):
        pass


def main():
    listen, upstream = int(sys.argv[1]), int(sys.argv[2])
    DROPPED.update(h.lower() for h in sys.argv[3:])
    Proxy.upstream = upstream
    server = http.server.ThreadingHTTPServer(("127.0.0.1", listen), Proxy)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
