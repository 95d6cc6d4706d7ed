"""Test deploy/compose/nginx.conf with a real nginx, offline, on loopback only.

1. ``nginx -t`` on a copy of the file in which only what cannot exist here is changed: the
   upstream ``gateway:8000`` becomes a local stand-in, the tokens secret becomes the repo's
   deploy/compose/tokens.conf, the listen port a free loopback port, and the pid and temp paths
   point into a scratch folder.
2. That nginx is started, in front of a stand-in gateway that answers with the headers it
   received, and requests check what the gateway's trust rests on: no token or a wrong one
   gets 401 with a Bearer challenge; a listed token reaches the gateway with its principal in
   X-Forwarded-User (a client's own X-Forwarded-User is overwritten) and without the
   Authorization header; /healthz answers; /status and /metrics are not exposed.

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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "deploy/compose/nginx.conf"
TOKENS = REPO / "deploy/compose/tokens.conf"
START_TIMEOUT = 10.0
"""Seconds for nginx to accept connections before the check gives up."""
REQUEST_TIMEOUT = 5.0


class Upstream(BaseHTTPRequestHandler):
    """The stand-in gateway: answers every request with the headers it received."""

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        body = json.dumps({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST

    def log_message(self, format: str, *args: object) -> None:
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_test_config(scratch: Path, listen: int, upstream: int) -> Path:
    text = CONF.read_text()
    replacements = [
        (r"server gateway:8000;", f"server 127.0.0.1:{upstream};"),
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


def request(url: str, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, data=b"{}", headers={"Content-Type": "application/json", **headers})
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nginx", required=True, type=Path)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="check-proxy-") as tmp:
        scratch = Path(tmp)
        listen, upstream_port = free_port(), free_port()
        conf = write_test_config(scratch, listen, upstream_port)
        base = [str(args.nginx), "-e", "/dev/stderr", "-p", str(scratch), "-c", str(conf)]
        tested = subprocess.run([*base, "-t", "-q"], capture_output=True, text=True)
        if tested.returncode != 0:
            print(f"FAIL {CONF}: nginx -t\n{tested.stderr}")
            return 1
        print(f"ok   {CONF.relative_to(REPO)}: nginx -t")

        upstream = ThreadingHTTPServer(("127.0.0.1", upstream_port), Upstream)
        threading.Thread(target=upstream.serve_forever, daemon=True).start()
        nginx = subprocess.Popen([*base, "-g", "daemon off;"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + START_TIMEOUT
            while True:
                try:
                    socket.create_connection(("127.0.0.1", listen), timeout=0.5).close()
                    break
                except OSError:
                    if nginx.poll() is not None or time.monotonic() > deadline:
                        print(
                            f"FAIL {CONF}: nginx did not start\n{nginx.stderr.read().decode() if nginx.stderr else ''}"
                        )
                        return 1
                    time.sleep(0.05)
            problems = run_checks(f"http://127.0.0.1:{listen}")
        finally:
            nginx.terminate()
            try:
                nginx.wait(timeout=5)
            except subprocess.TimeoutExpired:
                nginx.kill()
                nginx.wait()
            upstream.shutdown()
            upstream.server_close()
    if problems:
        print(f"FAIL {CONF}: {len(problems)} problem(s) with a real nginx")
        for problem in problems:
            print(f"     {problem}")
        return 1
    print(
        f"ok   {CONF.relative_to(REPO)}: 401 without a listed token; principal forwarded, spoofing overwritten, "
        "token dropped; /status and /metrics not exposed"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
