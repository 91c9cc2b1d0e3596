"""Hostile programs the sandbox tests share: each passes its test only if what it tries succeeds."""

from __future__ import annotations

import os
import socket

# Passes only if a planted secret is visible: in its own environment or any /proc/*/environ it can read.
SECRET_HUNT = """import os
MARKERS = (b"OPENAI_API_KEY", b"HF_TOKEN", {marker!r})
seen = b"\\0".join(k.encode() + b"=" + v.encode() for k, v in os.environ.items())
readable = []
for pid in os.listdir("/proc"):
    if pid.isdigit() and int(pid) != os.getpid():
        try:
            seen += open(f"/proc/{{pid}}/environ", "rb").read()
            readable.append(pid)
        except OSError:
            pass
found = any(m in seen for m in MARKERS)
def inc(x):
    return x + 1 if found else x
"""

# Passes only if it connects to a unix socket: the paths given, and every socket it finds in the file
# system it sees (the system folders left out: /usr is read-only and large) or the abstract name given.
SOCKET_HUNT = """import os, socket, stat
paths = {paths!r}
for top in ("/", "/tmp", "/run", "/var/run", "/dev/shm"):
    for folder, dirs, files in os.walk(top):
        if folder in ("/proc", "/sys", "/usr"):
            dirs[:] = []
            continue
        for name in files:
            path = os.path.join(folder, name)
            try:
                if stat.S_ISSOCK(os.lstat(path).st_mode):
                    paths.append(path)
            except OSError:
                pass
connected = []
for path in [*paths, {abstract!r}]:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        s.sendall(b"escaped")
        connected.append(path)
    except OSError:
        pass
    finally:
        s.close()
def inc(x):
    return x + 1 if connected else x
"""

# Writes 15 MB files into its folder, /tmp and /dev/shm in turn until a write fails, then frees them; it
# passes only if it wrote more than `bound` bytes in all (the three share one bound).
DISK_FILL = """import os
written, i = 0, 0
names = []
try:
    while written < 4 * {bound}:
        name = ("f{{}}", "/tmp/f{{}}", "/dev/shm/f{{}}")[i % 3].format(i)
        names.append(name)
        with open(name, "wb") as f:
            f.write(b"x" * (15 << 20))
        written += 15 << 20
        i += 1
except OSError:
    pass
for name in names:
    try:
        os.unlink(name)
    except OSError:
        pass
def inc(x):
    return x + 1 if written > {bound} else x
"""


def unix_server(path: str) -> socket.socket:
    """A listening unix socket (a path, or an abstract name starting with a NUL) anyone may connect to."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    if not path.startswith("\0"):
        os.chmod(path, 0o777)
    server.listen(8)
    server.setblocking(False)
    return server


def reached(server: socket.socket) -> bool:
    """Did anyone connect to `server`?"""
    try:
        server.accept()[0].close()
        return True
    except BlockingIOError:
        return False
