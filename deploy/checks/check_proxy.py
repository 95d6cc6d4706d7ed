"""Test deploy/compose/nginx.conf with a real nginx, offline, on loopback only.

1. ``nginx -t`` on a copy of the file in which only what cannot exist here is changed: Docker's
   DNS (``resolver 127.0.0.11``) becomes a stand-in DNS server on loopback that answers
   ``gateway`` with loopback addresses, the tokens secret becomes the repo's
   deploy/compose/tokens.conf, the listen port a free loopback port, and the pid and temp paths
   point into a scratch folder.
2. That nginx is started, in front of a stand-in gateway that answers with the headers it
   received, and requests check what the gateway's trust rests on: no token or a wrong one
   gets 401 with a Bearer challenge; a listed token reaches the gateway with its principal in
   X-Forwarded-User (a client's own X-Forwarded-User is overwritten) and without the
   Authorization header; /healthz answers; /status and /metrics are not exposed.
3. Fail-over, with ``gateway`` resolving to two replicas: one draining (it answers every POST
   with the gateway's 503 + Retry-After) or one gone (nothing listens at its address), the
   other well. Every POST must get the well replica's 200, and the draining one must have been
   asked (so the 503 was retried, body and all, not avoided by luck).

Usage: check_proxy.py --nginx PATH [--scratch DIR]. Exit 0 when all hold.
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "deploy/compose/nginx.conf"
TOKENS = REPO / "deploy/compose/tokens.conf"
START_TIMEOUT = 10.0
"""Seconds for nginx to accept connections before the check gives up."""
REQUEST_TIMEOUT = 5.0
FAILOVER_REQUESTS = 12
"""POSTs sent while one of two replicas drains or is gone: round-robin sends half to it."""
FAILOVER_DEADLINE = 60.0
"""Seconds the draining phase may go on sending POSTs until nginx has asked the draining
replica at least once (nginx may serve a cached DNS answer a little past its TTL on a busy
machine, so a fixed count alone could miss it)."""
WELL, DRAINING, GONE = "127.0.0.1", "127.0.0.2", "127.0.0.3"
"""The stand-in replicas' addresses (all of 127.0.0.0/8 is loopback on Linux)."""


class Upstream(BaseHTTPRequestHandler):
    """The stand-in gateway: answers every request with the headers it received."""

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        received = self.rfile.read(length)
        body = json.dumps(
            {"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "body": received.decode()}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST

    def log_message(self, format: str, *args: object) -> None:
        pass


class Draining(BaseHTTPRequestHandler):
    """A draining replica: the gateway's refusal (gateway/http/drain.py) to every request."""

    asked = 0

    def do_POST(self) -> None:
        Draining.asked += 1
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = b'{"jsonrpc":"2.0","error":{"code":-31004,"message":"the gateway is shutting down"}}'
        self.send_response(503)
        self.send_header("Content-Type", "application/json")
        self.send_header("Retry-After", "5")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class Dns:
    """A DNS server on loopback UDP that answers every A question with ``addresses`` (TTL 5 s):
    Docker's embedded DNS, as nginx's resolver sees it."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = int(self.sock.getsockname()[1])
        self.addresses: list[str] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                query, peer = self.sock.recvfrom(512)
            except OSError:
                return
            end = 12
            while query[end] != 0:
                end += query[end] + 1
            question = query[12 : end + 5]
            answers = b"".join(
                b"\xc0\x0c\x00\x01\x00\x01" + (5).to_bytes(4, "big") + b"\x00\x04" + socket.inet_aton(a)
                for a in self.addresses
            )
            header = query[:2] + b"\x81\x80" + b"\x00\x01" + len(self.addresses).to_bytes(2, "big") + b"\x00\x00" * 2
            self.sock.sendto(header + question + answers, peer)

    def close(self) -> None:
        self.sock.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_test_config(scratch: Path, listen: int, upstream: int, dns: int) -> Path:
    text = CONF.read_text()
    replacements = [
        (r"set \$gateway_upstream gateway:8000;", f"set $gateway_upstream gateway:{upstream};"),
        (r"resolver 127\.0\.0\.11 ", f"resolver 127.0.0.1:{dns} "),
        (r"include /run/secrets/proxy_tokens;", f"include {TOKENS};"),
        (r"(?m)^pid .*;$", f"pid {scratch}/nginx.pid;"),
        (r"listen 8080;", f"listen 127.0.0.1:{listen};"),
        (
            r"(?m)^http \{",
            "http {\n"
            + "".join(
                f"    {kind}_temp_path {scratch}/{kind};\n"
                for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
            ),
        ),
    ]
    for pattern, replacement in replacements:
        text, count = re.subn(pattern, replacement, text, count=1)
        if count != 1:
            raise SystemExit(f"FAIL {CONF}: expected to find {pattern!r} (update deploy/checks/check_proxy.py)")
    path = scratch / "nginx.conf"
    path.write_text(text)
    return path


def request(url: str, headers: dict[str, str], data: bytes = b"{}") -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def tokens() -> list[tuple[str, str]]:
    """(Authorization value, principal) pairs from the map file."""
    return re.findall(r'^"(Bearer [^"]+)"\s+([^;\s]+);', TOKENS.read_text(), re.MULTILINE)


def run_checks(base: str) -> list[str]:
    problems = []
    entries = tokens()
    if len(entries) < 2:
        return [f"{TOKENS}: expected at least two token lines"]

    status, _, _ = request(f"{base}/healthz", {})
    if status != 200:
        problems.append(f"/healthz answered {status}, not 200")
    for label, headers in (("no token", {}), ("a wrong token", {"Authorization": "Bearer not-a-listed-token"})):
        status, response_headers, _ = request(f"{base}/mcp", headers)
        challenge = {k.lower(): v for k, v in response_headers.items()}.get("www-authenticate", "")
        if status != 401 or not challenge.startswith("Bearer"):
            problems.append(f"/mcp with {label} answered {status} ({challenge!r}), not 401 with a Bearer challenge")
    for path, (authorization, principal) in (("/mcp", entries[0]), ("/servers/files/mcp", entries[1])):
        status, _, body = request(f"{base}{path}", {"Authorization": authorization, "X-Forwarded-User": "admin"})
        if status != 200:
            problems.append(f"{path} with {principal}'s token answered {status}, not 200")
            continue
        seen = json.loads(body)["headers"]
        if seen.get("x-forwarded-user") != principal:
            problems.append(
                f"{path}: the gateway saw X-Forwarded-User {seen.get('x-forwarded-user')!r}, not {principal!r}"
            )
        if "authorization" in seen:
            problems.append(f"{path}: the Authorization header reached the gateway")
    for path in ("/status", "/metrics"):
        status, _, _ = request(f"{base}{path}", {"Authorization": entries[0][0]})
        if status != 404:
            problems.append(f"{path} answered {status} through the proxy, not 404")
    return problems


def failover_problems(base: str, dns: Dns, authorization: str, upstream_port: int) -> list[str]:
    """Two replicas, one draining then one gone: every POST must reach the well one."""
    problems = []
    draining = ThreadingHTTPServer((DRAINING, upstream_port), Draining)
    threading.Thread(target=draining.serve_forever, daemon=True).start()
    try:
        for state, other in (("draining", DRAINING), ("gone", GONE)):
            # The troubled replica first: nginx tries a fresh answer's addresses in order (a cached
            # one from a random start), so most requests meet it first and must be retried.
            dns.addresses = [other, WELL]
            time.sleep(5.5)  # nginx holds a DNS answer for its TTL (valid=5s): let the last one age out
            statuses = []
            index, deadline = 0, time.monotonic() + FAILOVER_DEADLINE
            # At least FAILOVER_REQUESTS; while draining, on until the draining one was asked.
            while index < FAILOVER_REQUESTS or (
                state == "draining" and Draining.asked == 0 and time.monotonic() < deadline
            ):
                status, _, body = request(f"{base}/mcp", {"Authorization": authorization}, f'{{"n":{index}}}'.encode())
                statuses.append(status)
                if status == 200 and json.loads(body)["body"] != f'{{"n":{index}}}':
                    problems.append(f"a retried POST reached the well replica without its body: {body!r}")
                index += 1
            if set(statuses) != {200}:
                problems.append(f"with one replica {state}, POSTs got {statuses}, not 200 every time")
        if Draining.asked == 0:
            problems.append("the draining replica was never asked: the check proved no retry")
    finally:
        draining.shutdown()
        draining.server_close()
    return problems


@contextmanager
def running_nginx(base: list[str], listen: int) -> Iterator[subprocess.Popen[bytes]]:
    nginx = subprocess.Popen([*base, "-g", "daemon off;"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                socket.create_connection(("127.0.0.1", listen), timeout=0.5).close()
                break
            except OSError:
                if nginx.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(
                        f"FAIL {CONF}: nginx did not start\n{nginx.stderr.read().decode() if nginx.stderr else ''}"
                    ) from None
                time.sleep(0.05)
        yield nginx
    finally:
        nginx.terminate()
        try:
            nginx.wait(timeout=5)
        except subprocess.TimeoutExpired:
            nginx.kill()
            nginx.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nginx", required=True, type=Path)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="check-proxy-") as tmp:
        scratch = Path(tmp)
        listen, upstream_port = free_port(), free_port()
        dns = Dns()
        dns.addresses = [WELL]
        conf = write_test_config(scratch, listen, upstream_port, dns.port)
        base = [str(args.nginx), "-e", "/dev/stderr", "-p", str(scratch), "-c", str(conf)]
        tested = subprocess.run([*base, "-t", "-q"], capture_output=True, text=True)
        if tested.returncode != 0:
            print(f"FAIL {CONF}: nginx -t\n{tested.stderr}")
            return 1
        print(f"ok   {CONF.relative_to(REPO)}: nginx -t")

        upstream = ThreadingHTTPServer((WELL, upstream_port), Upstream)
        threading.Thread(target=upstream.serve_forever, daemon=True).start()
        try:
            with running_nginx(base, listen):
                problems = run_checks(f"http://127.0.0.1:{listen}")
                problems += failover_problems(f"http://127.0.0.1:{listen}", dns, tokens()[0][0], upstream_port)
        finally:
            upstream.shutdown()
            upstream.server_close()
            dns.close()
    if problems:
        print(f"FAIL {CONF}: {len(problems)} problem(s) with a real nginx")
        for problem in problems:
            print(f"     {problem}")
        return 1
    print(
        f"ok   {CONF.relative_to(REPO)}: 401 without a listed token; principal forwarded, spoofing overwritten, "
        "token dropped; /status and /metrics not exposed; POSTs fail over from a draining (503) and a gone replica"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
