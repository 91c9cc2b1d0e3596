"""The sandbox as an unprivileged user: bubblewrap's other path (`--unshare-user`, no capabilities), the
one every non-root user of the pipeline takes. When the tests run as root, one grading run is made as
`nobody` (setpriv, else runuser) and must keep the same guarantees: a right program right, a wrong one
wrong, no network (not even the host's loopback), no writes outside its folder (a world-writable folder
outside /tmp stays untouched). Skipped, with the reason, when that cannot be arranged (not root, no
setpriv/runuser, or no interpreter `nobody` can run with the project's packages)."""

from __future__ import annotations

import json
import os
import shutil
import site
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from _sandbox_programs import DISK_FILL, SECRET_HUNT, SOCKET_HUNT, reached, unix_server

from prm_synth.grading import sandbox

ROOT = Path(__file__).resolve().parents[2]
NOBODY = 65534
# the child: grades each (name, program) of argv[1]'s JSON with the code grader, prints name -> verdict
CHILD = """
import json, os, sys
from prm_synth.config.grader import SandboxLimits
from prm_synth.grading.code import CodeGrader
from prm_synth.grading.keys import dump_key
spec = json.loads(sys.argv[1])
key = dump_key({"tests": "def check(candidate):\\n    assert candidate(1) == 2\\n", "entry_point": "inc"})
grader = CodeGrader(SandboxLimits(cpu_s=5, wall_s=120, workers=1))
out = {"uid": os.getuid()}
for name, program in spec.items():
    v = grader.grade("```python\\n" + program + "```\\n", key)
    out[name] = [v.status, v.reason]
print("RESULT " + json.dumps(out))
"""


def _drop() -> list[str] | None:
    """The command prefix that runs a program as `nobody`, or None."""
    if shutil.which("setpriv"):
        return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    if shutil.which("runuser"):
        return ["runuser", "-u", "nobody", "--"]
    return None


MARKER = f"prm-synth-marker-{uuid.uuid4().hex}"
# secrets planted in the grading process's environment: none may reach a program (bwrap's own process
# inside the sandbox, readable at /proc/1/environ by this user, included)
PLANTED = {"OPENAI_API_KEY": "sk-" + MARKER, "HF_TOKEN": "hf_" + MARKER, "PRM_SYNTH_PLANTED": MARKER}


def _environment() -> dict[str, str]:
    paths = [str(ROOT), *site.getsitepackages()]
    # HOME "/": some systems give `nobody` that home; the sandbox once hid "/" as a home, and every run failed
    return {"PATH": "/usr/bin:/bin", "PYTHONPATH": os.pathsep.join(paths), "HOME": "/", "LANG": "C.UTF-8", **PLANTED}


def _interpreter(drop: list[str]) -> str | None:
    """An interpreter `nobody` can run that imports the project (this one, else the system's of the same
    version: a pyenv or venv Python under /root is out of `nobody`'s reach)."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    system = shutil.which(version, path="/usr/local/bin:/usr/bin:/bin") or ""
    for candidate in (os.path.realpath(sys.executable), system):
        if not candidate:
            continue
        # through `env`: a second exec by `nobody` itself, as the sandbox's own exec of the interpreter is
        probe = subprocess.run(
            [*drop, "env", candidate, "-c", "import prm_synth.grading.code"],
            env=_environment(),
            capture_output=True,
            timeout=120,
        )
        if probe.returncode == 0:
            return candidate
    return None


def _setup() -> tuple[list[str], str]:
    if os.geteuid() != 0:
        pytest.skip("not running as root: every sandbox here is already made by an unprivileged user")
    if sandbox.bwrap_binary() is None:
        pytest.skip("bubblewrap is not installed")
    drop = _drop()
    if drop is None:
        pytest.skip("neither setpriv nor runuser is installed: no way to become an unprivileged user")
    python = _interpreter(drop)
    if python is None:
        pytest.skip("no Python that `nobody` may run imports the project (its files are out of nobody's reach)")
    return drop, python


def test_a_grading_run_as_an_unprivileged_user_keeps_the_guarantees() -> None:
    drop, python = _setup()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    escape = Path("/var/tmp") / f"prm-synth-escape-{uuid.uuid4().hex}"  # world-writable, outside /tmp
    socket_path = f"/tmp/prm-synth-sock-{uuid.uuid4().hex[:12]}"  # a host socket anyone may connect to
    abstract = f"\0prm-synth-{uuid.uuid4().hex}"
    servers = [unix_server(socket_path), unix_server(abstract)]
    # each hostile program passes only if what it tries succeeds: a pass would be an escape
    programs = {
        "right": "def inc(x):\n    return x + 1\n",
        "wrong": "def inc(x):\n    return x\n",
        "network": (
            "import socket\ntry:\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=5).close()\n    reached = True\n"
            "except OSError:\n    reached = False\n"
            "def inc(x):\n    return x + 1 if reached else x\n"
        ),
        "write": (
            f"try:\n    open({str(escape)!r}, 'w').write('escaped')\n    wrote = True\n"
            "except OSError:\n    wrote = False\n"
            "def inc(x):\n    return x + 1 if wrote else x\n"
        ),
        "sockets": SOCKET_HUNT.format(paths=[socket_path], abstract=abstract),
        "disk": DISK_FILL.format(bound=256 << 20),  # the default disk_mb, its folder, /tmp and /dev/shm together
        "secrets": SECRET_HUNT.format(marker=MARKER.encode()),
        # right only if it can read another process's environment: the hunt above is not empty
        "reads_environ": SECRET_HUNT.format(marker=MARKER.encode()).replace("found = any", "found = readable or any"),
    }
    try:
        done = subprocess.run(
            [*drop, "env", python, "-c", CHILD, json.dumps(programs)],
            env=_environment(),
            cwd="/",
            capture_output=True,
            text=True,
            timeout=600,
        )
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing reached the host's loopback
        assert not any(reached(s) for s in servers)  # nor a host unix socket
    finally:
        listener.close()
        for server in servers:
            server.close()
        Path(socket_path).unlink(missing_ok=True)
        escaped = escape.exists()
        if escaped:
            escape.unlink()
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    result = json.loads(lines[-1].removeprefix("RESULT "))
    assert result["uid"] == NOBODY
    assert result["right"] == ["correct", "passed"]
    assert result["wrong"][0] == "incorrect"
    assert result["network"][0] == "incorrect", result["network"]  # no network: the connection failed
    assert result["write"][0] == "incorrect", result["write"]  # the write outside its folder failed
    assert result["sockets"] == ["incorrect", "failed:AssertionError"], result["sockets"]
    assert result["disk"] == ["incorrect", "failed:AssertionError"], result["disk"]
    assert result["secrets"] == ["incorrect", "failed:AssertionError"], result["secrets"]
    assert result["reads_environ"] == ["correct", "passed"]  # /proc/1/environ was read, and held none
    assert not escaped
