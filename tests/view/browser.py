"""Drive headless Chromium over the DevTools protocol, standard library only.

Chromium is started with ``--remote-debugging-pipe``: it reads CDP requests
from fd 3 and writes responses and events to fd 4, each message one JSON text
terminated by a NUL byte.  One page (target) is open at a time; commands for
it go through a flat session (``Target.attachToTarget`` with ``flatten``).

    from browser import Browser, require_chromium
    require_chromium(["view.browser"])       # exits 77 (ctest skip) if absent
    with Browser(width=800, height=600) as b:
        b.open("out/view.html")
        b.wait_for("document.querySelector('svg') !== null")
        w, h, rows = b.screenshot()          # rows[y][x] == (r, g, b)
        b.mouse_move(100, 200)
        assert not b.errors, b.errors
        assert b.requests == [b.url], b.requests

Every wait has a timeout; the browser's process group is killed on close,
on an exception inside ``with`` and at interpreter exit.
"""

import atexit
import base64
import fcntl
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from itertools import accumulate

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import skips  # noqa: E402  (tests/skips.py)

__all__ = ["Browser", "BrowserError", "JSError", "chromium_path",
           "require_chromium", "decode_png"]


_READ_FD = 3   # Chromium reads requests here
_WRITE_FD = 4  # and writes responses and events here


class BrowserError(RuntimeError):
    """Chromium died, answered a command with an error, or did not answer."""


class JSError(BrowserError):
    """An expression given to Browser.evaluate threw."""


def chromium_path():
    """The Chromium binary to run, or None.

    $MHA_CHROMIUM wins if set.  Debian's /usr/bin/chromium is a shell wrapper
    that adds flags from /etc/chromium.d (extensions, GPU rasterisation); the
    real binary behind it, /usr/lib/chromium/chromium, is used when present
    so that the flags are exactly the ones given here.
    """
    env = os.environ.get("MHA_CHROMIUM")
    if env:
        return env if os.access(env, os.X_OK) else None
    wrapper = shutil.which("chromium")
    real = "/usr/lib/chromium/chromium"
    if wrapper and os.access(real, os.X_OK):
        return real
    if wrapper:
        return wrapper
    for name in ("chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


def require_chromium(tests):
    """Return chromium_path(), or say why not and end the process through skips.skip(): with
    77 (ctest: skipped), or 1 when MHA_REQUIRE_ALL is set and MHA_ALLOW_SKIPS does not list
    the ctest `tests` this process runs."""
    path = chromium_path()
    if path is None:
        skips.skip(tests, "chromium not found (scripts/setup.sh --test installs it, "
                          "or set MHA_CHROMIUM)")
    return path


# --------------------------------------------------------------------- PNG

_MASK = (255).__and__


def _paeth_row(cur, prev, bpp):
    n = len(cur)
    for i in range(bpp):
        cur[i] = (cur[i] + prev[i]) & 0xFF
    for i in range(bpp, n):
        a = cur[i - bpp]
        b = prev[i]
        c = prev[i - bpp]
        p = a + b - c
        pa = p - a if p > a else a - p
        pb = p - b if p > b else b - p
        pc = p - c if p > c else c - p
        if pa <= pb and pa <= pc:
            pred = a
        elif pb <= pc:
            pred = b
        else:
            pred = c
        cur[i] = (cur[i] + pred) & 0xFF


def _add_bytes(x, y, n):
    """Bytewise (x + y) mod 256 of two n-byte strings, without a byte loop."""
    hi = int.from_bytes(b"\x80" * n, "big")
    lo = hi ^ int.from_bytes(b"\xff" * n, "big")
    a = int.from_bytes(x, "big")
    b = int.from_bytes(y, "big")
    return (((a & lo) + (b & lo)) ^ ((a ^ b) & hi)).to_bytes(n, "big")


def decode_png(data):
    """Decode an 8-bit RGB or RGBA, non-interlaced PNG.

    Returns (width, height, rows) with rows[y][x] == (r, g, b); alpha is
    dropped.  All five scanline filters are handled.
    """
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos = 8
    ihdr = None
    idat = []
    while pos + 8 <= len(data):
        length, ctype = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if len(body) != length:
            raise ValueError("truncated PNG chunk %r" % ctype)
        pos += 12 + length
        if ctype == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif ctype == b"IDAT":
            idat.append(body)
        elif ctype == b"IEND":
            break
    if ihdr is None:
        raise ValueError("PNG without IHDR")
    width, height, depth, colour, _comp, _filt, interlace = ihdr
    if depth != 8 or colour not in (2, 6) or interlace != 0:
        raise ValueError("unsupported PNG: depth %d colour type %d interlace %d"
                         % (depth, colour, interlace))
    bpp = 3 if colour == 2 else 4
    stride = width * bpp
    raw = zlib.decompress(b"".join(idat))
    if len(raw) < height * (stride + 1):
        raise ValueError("PNG image data too short")
    rows = []
    prev = bytes(stride)
    for y in range(height):
        start = y * (stride + 1)
        ftype = raw[start]
        line = raw[start + 1:start + 1 + stride]
        if ftype == 0:
            cur = line
        elif ftype == 2:  # Up
            cur = _add_bytes(line, prev, stride)
        elif ftype == 1:  # Sub: a running sum mod 256 along each channel
            buf = bytearray(stride)
            for c in range(bpp):
                buf[c::bpp] = bytes(map(_MASK, accumulate(line[c::bpp])))
            cur = bytes(buf)
        elif ftype == 3:  # Average
            buf = bytearray(line)
            for i in range(stride):
                left = buf[i - bpp] if i >= bpp else 0
                buf[i] = (buf[i] + ((left + prev[i]) >> 1)) & 0xFF
            cur = bytes(buf)
        elif ftype == 4:  # Paeth
            buf = bytearray(line)
            _paeth_row(buf, prev, bpp)
            cur = bytes(buf)
        else:
            raise ValueError("bad PNG filter type %d in row %d" % (ftype, y))
        prev = cur
        if bpp == 3:
            rows.append(list(zip(cur[0::3], cur[1::3], cur[2::3])))
        else:
            rows.append(list(zip(cur[0::4], cur[1::4], cur[2::4])))
    return width, height, rows


# ------------------------------------------------------------------ browser

_live = set()


def _kill_all_at_exit():
    for b in list(_live):
        b._kill()
        if b._tmp:
            shutil.rmtree(b._tmp, ignore_errors=True)


atexit.register(_kill_all_at_exit)


def _remote_text(obj):
    """A console argument (Runtime.RemoteObject) as text."""
    if "value" in obj:
        v = obj["value"]
        return v if isinstance(v, str) else json.dumps(v)
    if "unserializableValue" in obj:
        return obj["unserializableValue"]
    return obj.get("description") or obj.get("type", "?")


class Browser:
    """One headless Chromium process and the page last opened in it.

    errors   -- texts of console.error/console.assert calls, uncaught
                exceptions, Log entries of level error and failed network
                requests of the current page, since open()
    requests -- every URL the current page requested, in order, since open()
    url      -- the file:// URL given to the last open()
    """

    def __init__(self, width=1280, height=900, timeout=30):
        self.width = int(width)
        self.height = int(height)
        self.timeout = float(timeout)
        self.errors = []
        self.requests = []
        self.url = None
        self._proc = None
        self._tmp = None
        self._fds = []
        self._lock = threading.Condition()
        self._wlock = threading.Lock()
        self._next_id = 0
        self._replies = {}
        self._events = []       # (sessionId, method, params) of the page
        self._session = None
        self._target = None
        self._request_urls = {}  # requestId -> url
        self._dead = None       # why the connection ended, once it has
        self._reader = None
        binary = chromium_path()
        if binary is None:
            raise BrowserError("chromium not found")
        try:
            self._start(binary)
        except BaseException:
            self.close()
            raise

    # -- process and pipe --------------------------------------------------

    def _start(self, binary):
        self._tmp = tempfile.mkdtemp(prefix="mha-chromium-")
        profile = os.path.join(self._tmp, "profile")
        os.mkdir(profile)
        self._log_path = os.path.join(self._tmp, "chromium.log")
        args = [
            binary,
            "--headless=new",
            "--no-sandbox",            # we run as root
            "--disable-gpu",
            "--force-device-scale-factor=1",
            "--force-color-profile=srgb",   # exact colours in screenshots
            "--hide-scrollbars",
            "--remote-debugging-pipe",
            "--user-data-dir=" + profile,
            "--window-size=%d,%d" % (self.width, self.height),
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-default-apps",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--disable-features=Translate,MediaRouter,OptimizationHints",
            "--mute-audio",
            "--no-pings",
            "--password-store=basic",
            "--use-mock-keychain",
            "about:blank",
        ]
        # Two pipes: we write requests into to_chrome, Chromium writes into
        # from_chrome.  The child's ends are first moved to fds >= 10 so that
        # the dup2 onto 3 and 4 in the child cannot clobber one another.
        to_r, to_w = os.pipe()
        from_r, from_w = os.pipe()
        child_r = fcntl.fcntl(to_r, fcntl.F_DUPFD_CLOEXEC, 10)
        child_w = fcntl.fcntl(from_w, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(to_r)
        os.close(from_w)
        self._fds = [to_w, from_r]
        self._wfd, self._rfd = to_w, from_r

        def in_child():
            os.dup2(child_r, _READ_FD)   # dup2 leaves the copies inheritable
            os.dup2(child_w, _WRITE_FD)

        env = dict(os.environ)
        # Keep anything Chromium writes outside the profile in our temp dir.
        env["XDG_CONFIG_HOME"] = os.path.join(self._tmp, "config")
        env["XDG_CACHE_HOME"] = os.path.join(self._tmp, "cache")
        log = open(self._log_path, "wb")
        try:
            self._proc = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                close_fds=False,  # close_fds would close 3 and 4 again
                preexec_fn=in_child, start_new_session=True,
                cwd=self._tmp, env=env)
        finally:
            log.close()
            os.close(child_r)
            os.close(child_w)
        _live.add(self)
        self._reader = threading.Thread(target=self._read_loop,
                                        name="chromium-cdp", daemon=True)
        self._reader.start()
        self.version = self._send("Browser.getVersion")
        self._send("Target.setDiscoverTargets", {"discover": False})

    def _read_loop(self):
        pending = b""
        why = "Chromium closed the pipe"
        try:
            while True:
                chunk = os.read(self._rfd, 1 << 16)
                if not chunk:
                    break
                pending += chunk
                while True:
                    end = pending.find(b"\0")
                    if end < 0:
                        break
                    text, pending = pending[:end], pending[end + 1:]
                    try:
                        self._dispatch(json.loads(text))
                    except Exception as exc:  # keep reading
                        sys.stderr.write("browser.py: bad message: %r\n" % exc)
        except OSError as exc:
            why = "reading from Chromium failed: %s" % exc
        with self._lock:
            self._dead = why
            self._lock.notify_all()

    def _dispatch(self, msg):
        with self._lock:
            if "id" in msg:
                self._replies[msg["id"]] = msg
            else:
                sid = msg.get("sessionId")
                if sid is not None and sid == self._session:
                    self._on_event(msg["method"], msg.get("params", {}))
                    self._events.append((msg["method"], msg.get("params", {})))
            self._lock.notify_all()

    def _on_event(self, method, p):
        if method == "Runtime.consoleAPICalled":
            if p.get("type") in ("error", "assert"):
                text = " ".join(_remote_text(a) for a in p.get("args", []))
                self.errors.append("console.%s: %s" % (p["type"], text))
        elif method == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            exc = d.get("exception") or {}
            text = exc.get("description") or exc.get("value") or ""
            head = d.get("text", "Uncaught")
            self.errors.append("exception: %s %s" % (head, text) if text
                               else "exception: %s" % head)
        elif method == "Log.entryAdded":
            e = p.get("entry", {})
            if e.get("level") == "error":
                where = " (%s)" % e["url"] if e.get("url") else ""
                self.errors.append("log.%s: %s%s"
                                   % (e.get("source", "other"),
                                      e.get("text", ""), where))
        elif method == "Network.requestWillBeSent":
            url = p.get("request", {}).get("url", "")
            self._request_urls[p.get("requestId")] = url
            self.requests.append(url)
        elif method == "Network.loadingFailed":
            url = self._request_urls.get(p.get("requestId"), "?")
            self.errors.append("network: %s %s%s"
                               % (p.get("errorText", "failed"), url,
                                  " (canceled)" if p.get("canceled") else ""))

    def _log_tail(self, n=2000):
        try:
            with open(self._log_path, "rb") as f:
                return f.read()[-n:].decode("utf-8", "replace")
        except (OSError, AttributeError):
            return ""

    def _send(self, method, params=None, session=False, timeout=None):
        """Send one CDP command and return its result (a dict)."""
        timeout = self.timeout if timeout is None else timeout
        with self._lock:
            if self._dead:
                raise BrowserError("%s (%s); log:\n%s"
                                   % (self._dead, method, self._log_tail()))
            self._next_id += 1
            mid = self._next_id
        msg = {"id": mid, "method": method, "params": params or {}}
        if session:
            if self._session is None:
                raise BrowserError("no page open: call open() first")
            msg["sessionId"] = self._session
        data = json.dumps(msg).encode("utf-8") + b"\0"
        with self._wlock:
            view = memoryview(data)
            while view:
                try:
                    n = os.write(self._wfd, view)
                except OSError as exc:
                    raise BrowserError("writing to Chromium failed: %s; log:\n%s"
                                       % (exc, self._log_tail()))
                view = view[n:]
        deadline = time.monotonic() + timeout
        with self._lock:
            while mid not in self._replies:
                if self._dead:
                    raise BrowserError("%s while waiting for %s; log:\n%s"
                                       % (self._dead, method, self._log_tail()))
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BrowserError("no answer to %s within %gs"
                                       % (method, timeout))
                self._lock.wait(left)
            reply = self._replies.pop(mid)
        if "error" in reply:
            err = reply["error"]
            raise BrowserError("%s failed: %s %s" % (method, err.get("message"),
                                                     err.get("data", "")))
        return reply.get("result", {})

    def send(self, method, params=None, timeout=None):
        """Any CDP command for the current page, e.g. send('Page.reload')."""
        return self._send(method, params, session=True, timeout=timeout)

    # -- pages ---------------------------------------------------------------

    def _close_page(self):
        if self._target is None:
            return
        target, self._target = self._target, None
        with self._lock:
            self._session = None
        try:
            self._send("Target.closeTarget", {"targetId": target}, timeout=5)
        except BrowserError:
            pass

    def open(self, path):
        """Open file `path` in a new page and wait for its load event.

        Resets errors and requests.  Returns the file:// URL.
        """
        self._close_page()
        url = "file://" + os.path.abspath(path)
        if not os.path.exists(os.path.abspath(path)):
            raise FileNotFoundError(path)
        self.url = url
        with self._lock:
            self.errors = []
            self.requests = []
            self._request_urls = {}
            self._events = []
        target = self._send("Target.createTarget",
                            {"url": "about:blank"})["targetId"]
        self._target = target
        sid = self._send("Target.attachToTarget",
                         {"targetId": target, "flatten": True})["sessionId"]
        with self._lock:
            self._session = sid
            self._events = []
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": self.width, "height": self.height,
                   "deviceScaleFactor": 1, "mobile": False})
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(domain + ".enable")
        with self._lock:
            mark = len(self._events)
        nav = self.send("Page.navigate", {"url": url})
        if nav.get("errorText"):
            raise BrowserError("navigating to %s failed: %s"
                               % (url, nav["errorText"]))
        loader = nav.get("loaderId")

        def loaded():
            navigated = False
            for method, p in self._events[mark:]:
                if method == "Page.frameNavigated":
                    frame = p.get("frame", {})
                    if not frame.get("parentId") and (
                            loader is None or frame.get("loaderId") == loader):
                        navigated = True
                elif method == "Page.loadEventFired" and navigated:
                    return True
            return False

        self._wait_event(loaded, self.timeout, "the load event of " + url)
        # Belt and braces: the document really is ours and complete.
        self.wait_for("document.readyState === 'complete' && "
                      "location.href === %s" % json.dumps(url), self.timeout)
        return url

    def _wait_event(self, predicate, timeout, what):
        deadline = time.monotonic() + timeout
        with self._lock:
            while not predicate():
                if self._dead:
                    raise BrowserError("%s while waiting for %s; log:\n%s"
                                       % (self._dead, what, self._log_tail()))
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BrowserError("timed out after %gs waiting for %s"
                                       % (timeout, what))
                self._lock.wait(min(left, 0.5))

    def evaluate(self, expression, await_promise=True):
        """Value of a JS expression in the page (JSON-able values only).

        Raises JSError with the exception text if it throws (or its promise
        rejects).  undefined comes back as None.
        """
        res = self.send("Runtime.evaluate",
                        {"expression": expression, "returnByValue": True,
                         "awaitPromise": bool(await_promise),
                         "userGesture": True})
        if "exceptionDetails" in res:
            d = res["exceptionDetails"]
            exc = d.get("exception") or {}
            text = exc.get("description") or exc.get("value") or d.get("text")
            raise JSError("%s\n  in: %s" % (text, expression))
        obj = res.get("result", {})
        if "unserializableValue" in obj:
            return float(obj["unserializableValue"]) if obj[
                "unserializableValue"] in ("NaN", "Infinity", "-Infinity",
                                           "-0") else obj["unserializableValue"]
        return obj.get("value")

    def wait_for(self, expression, timeout=10):
        """Poll until `expression` is truthy; return its value.

        An expression that throws counts as false (the element may not exist
        yet); the last exception is reported if the time runs out.
        """
        deadline = time.monotonic() + timeout
        last_error = None
        while True:
            try:
                value = self.evaluate(expression)
                if value:
                    return value
            except JSError as exc:
                last_error = exc
            if time.monotonic() >= deadline:
                raise BrowserError("timed out after %gs waiting for %s%s"
                                   % (timeout, expression,
                                      "; last error: %s" % last_error
                                      if last_error else ""))
            time.sleep(0.05)

    # -- input ---------------------------------------------------------------

    def _mouse(self, kind, x, y, **extra):
        params = {"type": kind, "x": float(x), "y": float(y)}
        params.update(extra)
        self.send("Input.dispatchMouseEvent", params)

    def mouse_move(self, x, y):
        """Move the mouse to CSS pixel (x, y) of the viewport."""
        self._mouse("mouseMoved", x, y, button="none", buttons=0)

    def click(self, x, y):
        """Left click at CSS pixel (x, y): move, press, release."""
        self._mouse("mouseMoved", x, y, button="none", buttons=0)
        self._mouse("mousePressed", x, y, button="left", buttons=1,
                    clickCount=1)
        self._mouse("mouseReleased", x, y, button="left", buttons=0,
                    clickCount=1)

    # -- screenshots ---------------------------------------------------------

    def screenshot_png(self):
        """The viewport as PNG bytes."""
        res = self.send("Page.captureScreenshot",
                        {"format": "png", "captureBeyondViewport": False})
        return base64.b64decode(res["data"])

    def screenshot(self):
        """The viewport as (width, height, rows), rows[y][x] == (r, g, b)."""
        return decode_png(self.screenshot_png())

    def save_screenshot(self, path):
        """Write the viewport as a PNG file; returns path."""
        data = self.screenshot_png()
        with open(path, "wb") as f:
            f.write(data)
        return path

    # -- teardown ------------------------------------------------------------

    def _kill(self):
        proc = self._proc
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                proc.kill()
        if proc is not None:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            # Helpers (renderer, zygote) share the group; reap stragglers.
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        _live.discard(self)

    def close(self):
        """Ask Chromium to quit, kill its process group, remove the profile."""
        proc = self._proc
        if proc is not None and proc.poll() is None and not self._dead:
            try:
                self._send("Browser.close", timeout=3)
            except BrowserError:
                pass
            try:
                proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                pass
        self._kill()
        # Join the reader before closing its fd (the number could be reused).
        # With the process group gone the pipe is at EOF and the reader ends.
        if self._reader is not None:
            self._reader.join(timeout=5)
            self._reader = None
        for fd in self._fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds = []
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
        self._proc = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self._kill()
        except Exception:
            pass
