"""Render every page of the built documentation site in headless Chromium and fail on errors.

    mkdocs build --strict && python scripts/check_docs.py [--site=site] [--chromium=chromium]

Serves `site/` on 127.0.0.1 (a free port) and loads each page (`**/index.html`) with
`chromium --headless --dump-dom`, one fresh browser profile per page. A page fails when

* the browser logs a console message (`--enable-logging=stderr`: every `console.*` call and
  every uncaught exception is logged as a CONSOLE line; the site's own scripts log nothing),
* any request the page makes is answered with an HTTP error (a missing figure, script,
  stylesheet or font),
* an `<img>` of the rendered DOM was not fetched, or its bytes are not a PNG, JPEG, GIF, SVG
  or WebP image,
* the rendered DOM loads a script, stylesheet or image from outside the site (the site must
  render offline).

Prints one line per failing page and a summary; exits 1 if any page failed. Needs Debian's
`chromium` (`apt-get install chromium`); runs as root with `--no-sandbox`.
"""

from __future__ import annotations

import argparse
import functools
import html.parser
import http.server
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import unquote, urljoin, urlparse

CONSOLE = re.compile(r":CONSOLE[:(]\d*\)?\]?\s*(.*)")
IMAGE_MAGIC = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF87a", b"GIF89a", b"RIFF")


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Serves the site and records (path, status) of every request."""

    requests: list[tuple[str, int]]
    lock = threading.Lock()

    def log_request(self, code="-", size="-"):
        with self.lock:
            self.requests.append((unquote(urlparse(self.path).path), int(code)))

    def log_message(self, format, *args):  # quiet: failures are reported per page
        pass


class _Resources(html.parser.HTMLParser):
    """The `<img src>` values and every script / stylesheet / image URL of a DOM."""

    def __init__(self):
        super().__init__()
        self.images: list[str] = []
        self.loads: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img" and a.get("src"):
            self.images.append(a["src"])
            self.loads.append(a["src"])
        elif tag == "script" and a.get("src"):
            self.loads.append(a["src"])
        elif tag == "link" and a.get("href") and (a.get("rel") or "") in ("stylesheet", "preload", "icon"):
            self.loads.append(a["href"])


def _is_image(path: Path) -> bool:
    head = path.read_bytes()[:256]
    return head.startswith(IMAGE_MAGIC) or b"<svg" in head.lower()


def check_page(
    url: str, site: Path, root_url: str, requests: list, chromium: str, budget_ms: int
) -> list[str]:
    """Load `url`; return the problems found (empty when the page is clean)."""
    start = len(requests)
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.run(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                f"--user-data-dir={profile}",
                "--enable-logging=stderr",
                "--log-level=0",
                f"--virtual-time-budget={budget_ms}",
                "--dump-dom",
                url,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    problems = [f"console: {m.group(1)}" for m in map(CONSOLE.search, proc.stderr.splitlines()) if m]
    if proc.returncode != 0 or "<html" not in proc.stdout.lower():
        problems.append(f"chromium exited {proc.returncode} without a DOM")
        return problems
    fetched = requests[start:]
    problems += [f"HTTP {code}: {path}" for path, code in fetched if code >= 400]
    ok = {path for path, code in fetched if code < 400}
    dom = _Resources()
    dom.feed(proc.stdout)
    for src in dom.loads:
        absolute = urljoin(url, src)
        if not absolute.startswith(root_url) and not absolute.startswith("data:"):
            problems.append(f"loads from outside the site: {absolute}")
    for src in dom.images:
        absolute = urljoin(url, src)
        if absolute.startswith("data:") or not absolute.startswith(root_url):
            continue
        path = unquote(urlparse(absolute).path)
        file = site / path.lstrip("/")
        if path not in ok:
            problems.append(f"image not loaded: {path}")
        elif not file.is_file() or not _is_image(file):
            problems.append(f"not an image: {path}")
    return problems


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", default="site", help="the built site (mkdocs build)")
    parser.add_argument("--chromium", default="chromium", help="the Chromium executable")
    parser.add_argument("--budget_ms", type=int, default=5000, help="virtual time each page gets to settle")
    args = parser.parse_args(argv)
    site = Path(args.site).resolve()
    pages = sorted(p for p in site.rglob("index.html") if "assets" not in p.relative_to(site).parts)
    if not pages:
        raise SystemExit(f"--site: no index.html under {site} (run `mkdocs build` first)")
    requests: list[tuple[str, int]] = []
    handler = functools.partial(type("Handler", (_Handler,), {"requests": requests}), directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    root_url = f"http://127.0.0.1:{server.server_address[1]}/"
    started, failed, images = time.perf_counter(), 0, 0
    try:
        for page in pages:
            rel = page.parent.relative_to(site).as_posix()
            url = root_url + (f"{rel}/" if rel != "." else "")
            problems = check_page(url, site, root_url, requests, args.chromium, args.budget_ms)
            images += len(re.findall(r"<img\b", page.read_text(errors="replace")))
            if problems:
                failed += 1
                print(f"FAIL {url}: " + "; ".join(problems))
    finally:
        server.shutdown()
    print(
        f"{len(pages)} page(s), {images} <img> tag(s) in their sources, {failed} failed, "
        f"{time.perf_counter() - started:.0f} s"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
