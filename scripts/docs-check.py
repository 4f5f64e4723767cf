#!/usr/bin/env python3
"""Check the documentation site the way a reader sees it: in headless Chromium, offline.

Builds the site strictly (mkdocs.yml), serves it on 127.0.0.1, opens every page at 1280x900
with every request that would leave loopback blocked, and fails if on any page:

- a picture did not load (an <img> whose naturalWidth is 0), or is shown below 70 % of its
  size (its text would be too small to read);
- raw diagram source shows (an element of class ``mermaid``, or visible text that starts
  like Mermaid source: ``flowchart``, ``sequenceDiagram``, ``graph LR``, ...);
- a code block scrolls sideways (a ``pre > code`` whose scrollWidth exceeds its clientWidth:
  the page and the lines that do not fit are listed); a program's output quoted verbatim
  (a ``text`` block, or the lines of a ``console`` block other than its ``$ `` commands)
  may scroll rather than be misquoted;
- the page asked for anything outside loopback (fonts, scripts, images from a CDN);
- reStructuredText markup shows raw outside code (a Sphinx role such as ``:class:``, a
  literal-block ``::`` ending a line, a double backtick): a docstring written for Sphinx,
  which the reference's renderer (mkdocstrings, Google style, Markdown) does not read.

It saves a full-page screenshot of each page (PNG) in the directory given (default
/tmp/docs-shots) and prints one line per page. Exit status 1 when any page fails.

Chromium is Debian's (``apt-get install chromium``; CHROMIUM names another binary), driven
through the DevTools protocol over a pipe: no browser download, no Python dependency beyond
the ``docs`` extra's mkdocs.

    .venv/bin/python scripts/docs-check.py [SHOTS_DIR] [--site BUILT_SITE]
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import functools
import html.parser
import http.server
import ipaddress
import json
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
WIDTH, HEIGHT = 1280, 900
MIN_PICTURE_SCALE = 0.7
PAGE_TIMEOUT = 30.0

# Runs in the page once it has loaded; returns what the checks need.
PAGE_PROBE = r"""
(async () => {
  await document.fonts.ready;
  const images = [...document.images];
  await Promise.all(images.map((img) => img.complete ? null
    : new Promise((done) => { img.addEventListener('load', done);
                              img.addEventListener('error', done); })));
  const shown = (el) => el.checkVisibility ? el.checkVisibility() : el.offsetParent !== null;
  const main = document.querySelector('article') || document.body;
  const pictures = images.map((img) => ({
    src: img.getAttribute('src').slice(0, 80),
    content: main.contains(img),
    natural: img.naturalWidth,
    width: img.getBoundingClientRect().width,
  }));
  const source = new RegExp('^(flowchart|sequenceDiagram|classDiagram|stateDiagram|erDiagram'
    + '|gantt)\\b|^graph\\s+(TB|TD|BT|RL|LR)\\b');
  const raw = [];
  for (const el of document.querySelectorAll('.mermaid')) {
    raw.push('element of class mermaid: ' + el.textContent.trim().slice(0, 60));
  }
  const matching = [...main.querySelectorAll('p, li, td, pre, code, div')]
    .filter((el) => source.test((el.innerText || '').trimStart()) && shown(el));
  for (const el of matching) {
    if (matching.some((other) => other !== el && el.contains(other))) continue;
    const first = el.innerText.trimStart().split('\n')[0];
    raw.push(el.tagName.toLowerCase() + ': ' + first.slice(0, 60));
  }
  const blocks = [...document.querySelectorAll('pre > code')];
  const overflow = [];
  blocks.forEach((code, index) => {
    if (code.scrollWidth <= code.clientWidth) return;
    const style = getComputedStyle(code);
    const probe = document.createElement('span');
    probe.style.whiteSpace = 'pre';
    probe.textContent = 'x'.repeat(200);
    code.appendChild(probe);
    const charWidth = probe.getBoundingClientRect().width / 200;
    probe.remove();
    const inner = code.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
    const fits = Math.floor(inner / charWidth);
    const lines = code.innerText.replace(/\n$/, '').split('\n');
    // A program's output shown verbatim (```text, and the lines of ```console that are not
    // the typed `$ ` command) may scroll: cutting it would misquote the program.
    const box = code.closest('[class*="language-"]');
    const lang = box ? [...box.classList].find((c) => c.startsWith('language-')) : '';
    const typed = (text) => lang === 'language-console' ? text.startsWith('$ ')
      : lang !== 'language-text';
    let long = lines.map((text, i) => ({line: i + 1, text, length: [...text].length}))
      .filter((l) => l.length > fits);
    if (long.length && !long.some((l) => typed(l.text))) return;
    long = long.filter((l) => typed(l.text));
    if (!lines.some((text) => [...text].length > fits)) {
      long = [lines.reduce((a, b, i) => ([...b].length > a.length
        ? {line: i + 1, text: b, length: [...b].length} : a), {line: 0, text: '', length: -1})];
    }
    overflow.push({block: index + 1, fits, long});
  });
  return {
    title: document.title,
    height: Math.ceil(document.documentElement.scrollHeight),
    pictures, raw, blocks: blocks.length, overflow,
  };
})()
"""


# Sphinx markup as Markdown leaves it in the text: a role (":class:", ":py:meth:"), "::"
# ending a paragraph before a literal block, a ``literal`` whose backticks did not pair.
RAW_MARKUP = re.compile(
    r"(?<![\w:]):(?:py:)?(?:class|meth|func|attr|mod|exc|data|obj|ref|const|doc):(?!\w)"
    r"|(?<=\w)::(?=\s|$)|``(?:[^`\n]*``)?"
)


class _Prose(html.parser.HTMLParser):
    """The text of a page outside code, scripts and styles, one string per block of text."""

    SKIP = frozenset({"code", "pre", "script", "style", "kbd", "samp"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.depth = 0
        self.texts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.SKIP:
            self.depth += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIP and self.depth:
            self.depth -= 1

    def handle_data(self, data: str) -> None:
        if not self.depth and data.strip():
            self.texts.append(data)


def raw_markup(page_html: str) -> list[str]:
    """Each piece of the page's prose where reStructuredText markup shows raw, in context."""
    prose = _Prose()
    prose.feed(page_html)
    found = []
    for text in prose.texts:
        for match in RAW_MARKUP.finditer(text):
            around = text[max(0, match.start() - 30) : match.end() + 30]
            found.append(" ".join(around.split()))
    return list(dict.fromkeys(found))


def is_loopback(url: str) -> bool:
    """Whether loading this URL stays on this machine."""
    parts = urlsplit(url)
    if parts.scheme in ("data", "blob", "about", "chrome", "devtools"):
        return True
    host = (parts.hostname or "").strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Browser:
    """Headless Chromium, spoken to with the DevTools protocol over --remote-debugging-pipe."""

    def __init__(self, binary: str, profile: Path) -> None:
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        args = [
            binary,
            "--headless",
            "--remote-debugging-pipe",
            f"--user-data-dir={profile}",
            f"--window-size={WIDTH},{HEIGHT}",
            "--hide-scrollbars",
            "--no-sandbox",  # root in CI; the browser only opens this site
            "--disable-gpu",
            "--disable-dev-shm-usage",  # containers often have a small /dev/shm
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-sync",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-default-apps",
            "--mute-audio",
            # Belt and braces beside the request interception below: no name resolves.
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1, EXCLUDE localhost",
            "about:blank",
        ]
        # The pipe protocol reads commands on fd 3 and writes replies on fd 4.
        self._log = (profile / "chromium.log").open("wb")
        self._process = subprocess.Popen(
            ["sh", "-c", f'exec "$0" "$@" 3<&{to_browser_r} 4>&{from_browser_w}', *args],
            pass_fds=(to_browser_r, from_browser_w),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self.handlers: dict[str, Callable[[dict[str, Any], str | None], None]] = {}

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.send_nowait("Browser.close")
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)
        self._log.close()

    def send_nowait(
        self, method: str, params: dict | None = None, session: str | None = None
    ) -> int:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        data = json.dumps(message).encode() + b"\0"
        while data:
            data = data[os.write(self._to_browser, data) :]
        return self._next_id

    def send(
        self, method: str, params: dict | None = None, session: str | None = None, timeout=30.0
    ) -> dict[str, Any]:
        wanted = self.send_nowait(method, params, session)
        for message in self._messages(timeout, f"no answer to {method}"):
            if message.get("id") == wanted:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
        raise AssertionError("unreachable")

    def wait_until(self, done: Callable[[], bool], timeout: float, what: str) -> None:
        """Reads messages (their handlers run) until done() holds."""
        if done():
            return
        for _ in self._messages(timeout, what):
            if done():
                return

    def _messages(self, timeout: float, what: str) -> Iterator[dict[str, Any]]:
        """Every message from the browser until the caller has what it waits for; events are
        passed to their handlers on the way."""
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\0", 1)
                message = json.loads(raw)
                handler = self.handlers.get(message.get("method", ""))
                if handler:
                    handler(message.get("params", {}), message.get("sessionId"))
                yield message
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"Chromium: {what} within {timeout:.0f} s")
            ready, _, _ = select.select([self._from_browser], [], [], left)
            if ready:
                chunk = os.read(self._from_browser, 1 << 20)
                if not chunk:
                    self._log.flush()
                    log = Path(self._log.name).read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"Chromium exited ({self._process.poll()}):\n{log}")
                self._buffer += chunk


class Page:
    """One tab: sized to the site's reference width, every non-loopback request blocked."""

    def __init__(self, browser: Browser) -> None:
        self.browser = browser
        target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        self.left_loopback: list[str] = []
        self.loaded = False
        browser.handlers["Page.loadEventFired"] = self._on_load
        browser.handlers["Fetch.requestPaused"] = self._on_request
        browser.handlers["Network.requestWillBeSent"] = self._on_network
        browser.handlers["Network.webSocketCreated"] = self._on_network
        for method, params in [
            ("Page.enable", {}),
            ("Network.enable", {}),
            ("Network.setCacheDisabled", {"cacheDisabled": True}),
            ("Fetch.enable", {"patterns": [{"urlPattern": "*"}]}),
            (
                "Emulation.setDeviceMetricsOverride",
                {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False},
            ),
        ]:
            self.call(method, params)

    def call(self, method: str, params: dict | None = None, timeout=PAGE_TIMEOUT) -> dict:
        return self.browser.send(method, params, self.session, timeout)

    def _on_request(self, params: dict[str, Any], session: str | None) -> None:
        url = params["request"]["url"]
        if is_loopback(url):
            self.browser.send_nowait(
                "Fetch.continueRequest", {"requestId": params["requestId"]}, session
            )
        else:
            self.browser.send_nowait(
                "Fetch.failRequest",
                {"requestId": params["requestId"], "errorReason": "BlockedByClient"},
                session,
            )

    def _on_load(self, params: dict[str, Any], session: str | None) -> None:
        if session == self.session:
            self.loaded = True

    def _on_network(self, params: dict[str, Any], session: str | None) -> None:
        url = params.get("request", {}).get("url") or params.get("url", "")
        if session == self.session and not is_loopback(url) and url not in self.left_loopback:
            self.left_loopback.append(url)

    def open(self, url: str) -> dict[str, Any]:
        self.left_loopback = []
        self.loaded = False
        navigated = self.call("Page.navigate", {"url": url})
        if navigated.get("errorText"):
            raise RuntimeError(f"{url}: {navigated['errorText']}")
        self.browser.wait_until(lambda: self.loaded, PAGE_TIMEOUT, f"{url} did not load")
        result = self.call(
            "Runtime.evaluate",
            {"expression": PAGE_PROBE, "awaitPromise": True, "returnByValue": True},
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"{url}: the page probe failed: {result['exceptionDetails']}")
        return result["result"]["value"]

    def screenshot(self, path: Path, height: int) -> None:
        # Cap the height: a screenshot taller than this is not looked at whole anyway.
        clip = {"x": 0, "y": 0, "width": WIDTH, "height": min(height, 16000), "scale": 1}
        shot = self.call(
            "Page.captureScreenshot",
            {"format": "png", "captureBeyondViewport": True, "clip": clip},
        )
        path.write_bytes(base64.b64decode(shot["data"]))


@contextlib.contextmanager
def serve(site: Path) -> Iterator[str]:
    """The built site over HTTP on 127.0.0.1 (an ephemeral port), for as long as the block runs."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def build(site: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(site)]
    subprocess.run(command, cwd=ROOT, env=env, check=True)


def pages(site: Path) -> list[str]:
    """Every page of the built site, as a path under its root ('' is the home page)."""
    found = []
    for index in site.rglob("index.html"):
        relative = index.parent.relative_to(site).as_posix()
        if relative.split("/")[0] in ("assets", "search"):
            continue
        found.append("" if relative == "." else relative + "/")
    return sorted(found)


def check_page(
    page: Page, base: str, site: Path, path: str, shots: Path
) -> tuple[bool, str, list[str]]:
    seen = page.open(base + path)
    name = path.strip("/").replace("/", "-") or "index"
    page.screenshot(shots / f"{name}.png", seen["height"])
    problems: list[str] = []
    # Material swaps a .mermaid element for its own once its page script runs: look at the HTML.
    html = (site / path / "index.html").read_text(encoding="utf-8")
    if re.search(r"class=\"[^\"]*\bmermaid\b", html):
        problems.append("an element of class mermaid (diagram source for a CDN script)")
    for picture in seen["pictures"]:
        if picture["natural"] == 0:
            problems.append(f"picture did not load: {picture['src']}")
        elif picture["content"] and picture["width"] < MIN_PICTURE_SCALE * picture["natural"]:
            scale = picture["width"] / picture["natural"]
            problems.append(
                f"picture shown at {scale:.0%} of its size (text too small): {picture['src']}"
            )
    problems += [f"raw diagram source shows: {raw}" for raw in seen["raw"]]
    problems += [f"raw reStructuredText markup shows: {raw}" for raw in raw_markup(html)]
    for block in seen["overflow"]:
        for line in block["long"]:
            problems.append(
                f"code block {block['block']} scrolls sideways (fits {block['fits']} characters):"
                f" line {line['line']} has {line['length']}: {line['text']}"
            )
    problems += [f"request left loopback: {url}" for url in page.left_loopback]
    content = [p for p in seen["pictures"] if p["content"]]
    pictures = ", ".join(
        f"{Path(p['src']).name} {p['width'] / p['natural']:.0%}" if p["natural"] else p["src"]
        for p in content
    )
    summary = (
        f"{'ok  ' if not problems else 'FAIL'} /{path:<22} {len(content)} pictures"
        f"{' (' + pictures + ')' if pictures else ''}, {seen['blocks']} code blocks,"
        f" {len(page.left_loopback)} requests off loopback -> {name}.png"
    )
    return not problems, summary, problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("shots", nargs="?", default="/tmp/docs-shots", help="screenshot directory")
    parser.add_argument("--site", help="an already built site (default: build one now)")
    args = parser.parse_args()
    binary = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(binary).exists():
        print(f"docs-check: no Chromium at {binary} (apt-get install chromium)", file=sys.stderr)
        return 2
    shots = Path(args.shots)
    shots.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="docs-check-") as scratch:
        site = Path(args.site) if args.site else Path(scratch) / "site"
        if not args.site:
            build(site)
        profile = Path(scratch) / "profile"
        profile.mkdir()
        failed: list[tuple[str, list[str]]] = []
        with serve(site) as base:
            browser = Browser(binary, profile)
            try:
                page = Page(browser)
                for path in pages(site):
                    ok, summary, problems = check_page(page, base, site, path, shots)
                    print(summary, flush=True)
                    if not ok:
                        failed.append((path, problems))
            finally:
                browser.close()
    for path, problems in failed:
        print(f"\n/{path}:")
        for problem in problems:
            print(f"  {problem}")
    took = time.monotonic() - started
    verdict = f"{len(failed)} pages failed" if failed else "every page passed"
    print(f"\ndocs-check: {verdict} ({took:.0f} s); screenshots in {shots}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
