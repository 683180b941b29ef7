"""The workers' wire (embedded in kg-exec): the channel to the parent, the request loop, the
watchdog, error replies and JSON safety. Every other worker module imports this one first: it
completes the import path the workers start without.

Protocol: the Rust parent hands the worker one end of a socketpair, inherited under the
descriptor number in argv[1] (no filesystem path: nothing another process could bind or connect
to). The worker first sends {"ready": true}, then reads one JSON request per line and answers
each with one JSON line: {"result": "ok", ...} or {"result": "error", "kind": ..., "message": ...},
after any number of asides ({"aside": true, "op": "timed_key", "index": i}, each answered by one
line). The parent parses this envelope strictly and bounds every message (kg-exec's protocol.rs).
Nothing is ever parsed from stdout/stderr: those are captured as the log. A second socket,
inherited under the number in $KG_FD_CHANNEL, carries file descriptors only (device memory
pools, kgvmm), one per one-byte message.
"""

import json
import math
import os
import socket
import sys
import threading
import time
import traceback


def _extend_sys_path():
    """Workers start with `-I -S`: no site module, so no start-up code of the interpreter's site
    directories (`.pth` import lines, sitecustomize, usercustomize) runs in them, whatever a
    candidate planted there. kg-exec hands over the import path the site module would have built
    (`KG_SYS_PATH`, a JSON list; path lines of `.pth` files only, nothing executed)."""
    raw = os.environ.pop("KG_SYS_PATH", None)
    if raw:
        for p in json.loads(raw):
            if p not in sys.path:
                sys.path.append(p)


_extend_sys_path()


_WATCHDOG = []


def start_parent_watchdog():
    """Kills this worker's whole process group if the parent (kg-exec) goes away.

    The parent's pid comes as argv[2] (so a worker started just as kg-bench died still knows
    whom to watch); it is started before torch is imported.
    """
    if _WATCHDOG:
        return
    if os.getppid() == 0:
        # Process 1 of our own PID namespace (kg-exec's sandbox): the parent is outside it,
        # and the sandbox's relay process kills us when the parent goes away.
        return
    try:
        parent = int(sys.argv[2])
    except (IndexError, ValueError):
        parent = os.getppid()
    if os.getppid() != parent:
        os.killpg(os.getpgrp(), 9)

    def watch():
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                try:
                    os.killpg(os.getpgrp(), 9)
                finally:
                    os._exit(70)

    t = threading.Thread(target=watch, name="kg-parent-watchdog", daemon=True)
    t.start()
    _WATCHDOG.append(t)


# The environment variable naming the descriptor channel's number (kg-exec's process.rs).
FD_CHANNEL_ENV = "KG_FD_CHANNEL"


class Channel:
    """JSON-lines over the socket the parent handed down as descriptor `fd`."""

    def __init__(self, fd):
        self.sock = socket.socket(fileno=int(fd))
        # Ours alone: nothing this worker starts inherits it.
        self.sock.set_inheritable(False)
        self.rfile = self.sock.makefile("rb")
        # The second socket the parent handed down at start: file descriptors only
        # (kgvmm pools), one per one-byte message.
        fd = os.environ.pop(FD_CHANNEL_ENV, "")
        self.fds = socket.socket(fileno=int(fd)) if fd.isdigit() else None
        if self.fds is not None:
            self.fds.set_inheritable(False)

    def send_fd(self, fd):
        """Sends descriptor `fd` (still ours to close) to the parent."""
        if self.fds is None:
            raise OSError("the parent handed down no descriptor channel")
        socket.send_fds(self.fds, [b"F"], [fd])

    def recv_fd(self, timeout):
        """The next descriptor the parent sent (ours to close), waiting up to `timeout` s."""
        if self.fds is None:
            raise OSError("the parent handed down no descriptor channel")
        self.fds.settimeout(timeout)
        # Room for one descriptor: the kernel closes any more sent in the same message.
        _, fds, _, _ = socket.recv_fds(self.fds, 1, 1)
        if not fds:
            raise OSError("the parent sent no descriptor")
        return fds[0]

    def recv(self):
        line = self.rfile.readline()
        if not line:
            return None
        return json.loads(line)

    def send(self, obj):
        data = (json.dumps(json_safe(obj), allow_nan=False, default=str) + "\n").encode()
        self.sock.sendall(data)

    def aside(self, obj):
        """Asks the parent something in the middle of answering a request (an `aside` line, one
        reply line back); the request's own reply still comes last."""
        self.send(dict(obj, aside=True))
        r = self.recv()
        if r is None:
            raise ConnectionError("the parent closed the socket during an aside")
        return r


# The channel of the running worker (for asides from inside a request handler).
CHANNEL = []


_F64_MAX = 1.7976931348623157e308


def json_safe(obj):
    """Replaces non-finite floats (JSON has none) so a reply about garbage outputs stays valid:
    +-inf becomes +-f64::MAX (still "larger than any tolerance"), NaN becomes null."""
    if isinstance(obj, float):
        if math.isnan(obj):
            return None
        if math.isinf(obj):
            return _F64_MAX if obj > 0 else -_F64_MAX
        return obj
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


# Characters of an error's message and of its traceback sent at most (head and tail): the parent
# bounds every message (kg-exec's protocol.rs ERROR_TEXT_LIMIT), and a compiler's whole output or
# a deep recursion must not push a legitimate error past it.
ERROR_TEXT_LIMIT = 32 * 1024


def clip_text(text, limit=ERROR_TEXT_LIMIT):
    """`text` (a str) if it is short enough, else its head and tail with a marker between."""
    text = str(text)
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters dropped ...]\n{text[-half:]}"


def error_reply(kind, message, tb=None):
    r = {"result": "error", "kind": kind, "message": clip_text(message)}
    if tb:
        r["traceback"] = clip_text(tb)
    return r


def serve(handlers):
    """Runs the request loop: says it is ready, then dispatches on `op`, answers every request
    once."""
    if len(sys.argv) < 2 or not sys.argv[1].isdigit():
        sys.stderr.write("usage: worker.py CHANNEL_FD [PARENT_PID]\n")
        sys.exit(2)
    start_parent_watchdog()
    chan = Channel(int(sys.argv[1]))
    CHANNEL.append(chan)
    chan.send({"ready": True})
    while True:
        try:
            req = chan.recv()
        except (ConnectionError, OSError):
            return
        if req is None:
            return
        op = req.get("op")
        if op == "shutdown":
            chan.send({"result": "ok"})
            return
        fn = handlers.get(op)
        if fn is None:
            chan.send(error_reply("protocol", f"unknown op `{op}`"))
            continue
        try:
            reply = fn(req)
        except Exception as e:  # the handler decides statuses; this is a bug or a user error
            reply = error_reply("exception", f"{type(e).__name__}: {e}", traceback.format_exc())
        try:
            chan.send(reply)
        except (ValueError, TypeError) as e:
            chan.send(error_reply("protocol", f"reply not serialisable: {e}"))


def flush_stdio():
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        pass


def finite_or_none(x):
    return x if isinstance(x, (int, float)) and math.isfinite(x) else None
