"""Hostile programs the sandbox tests share: each passes its test only if what it tries succeeds."""

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
