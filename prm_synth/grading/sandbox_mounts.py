"""What a sandboxed program sees of the host: the interpreter and the system's libraries, read-only, and
nothing else of the host's file system (no /run, /var, /tmp, /home or /root of the host, so no host
socket, no other program's folder, no user file).

The sandbox's root is bubblewrap's own empty tmpfs, read-only once it is set up; into it go:
- read-only: /usr and the top-level /bin, /sbin, /lib* (as the host's symlinks into /usr where the host
  merged them), the loader's cache files of /etc, and the Python interpreter's installation
  (`sys.base_prefix`, and the folders of the executable and the standard library where they lie outside
  it: a pyenv under /root is bound alone, not its home);
- its own /proc (its own pid namespace) and a minimal /dev (null, zero, random, urandom, tty, full);
- one tmpfs of `disk_mb` at /dev/shm, the program's whole writable space: /tmp is a symlink to it, and
  the program's folder /tmp/run (its files copied in by bubblewrap from memory, the host's disk never
  holds them) lies in it, so the run folder, its temporary files and /dev/shm share one bound.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

WRITABLE = "/dev/shm"  # the sandbox's one writable mount; /tmp points to it
RUN_FOLDER = "/tmp/run"  # the program's folder and working directory, as the program sees it
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# the dynamic loader's configuration (libraries in multiarch folders are found through its cache)
_ETC_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime")


def _inside(path: str, folders: list[str]) -> bool:
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


def interpreter_folders() -> list[str]:
    """The folders the isolated interpreter (`python -I -S`) reads: its prefix, its executable's folder
    and its standard library, each by its real path, the ones inside another left out."""
    # the base installation's paths, not a virtual environment's (-S: no site packages are read)
    paths = sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_exec_prefix})
    executable = os.path.dirname(os.path.realpath(sys.executable))
    wanted = [sys.base_prefix, sys.base_exec_prefix, executable, paths["stdlib"], paths["platstdlib"]]
    real = sorted({os.path.realpath(p) for p in wanted if p and os.path.isdir(p)}, key=len)
    kept: list[str] = []
    for path in real:
        if not _inside(path, kept):
            kept.append(path)
    return kept


def system_args() -> list[str]:
    """bwrap arguments binding the system's folders and the interpreter read-only."""
    args: list[str] = []
    bound: list[str] = []
    for folder in _SYSTEM_DIRS:
        if os.path.islink(folder):
            args += ["--symlink", os.readlink(folder), folder]
        elif os.path.isdir(folder):
            args += ["--ro-bind", folder, folder]
            bound.append(folder)
    for name in _ETC_FILES:
        args += ["--ro-bind-try", name, name]
    for folder in interpreter_folders():
        if _inside(folder, bound):
            continue
        # the folders on the way exist only in the sandbox's root, world-readable (for `nobody`)
        parts = Path(folder).parts
        for depth in range(2, len(parts)):
            args += ["--perms", "0755", "--dir", str(Path(*parts[:depth]))]
        args += ["--ro-bind", folder, folder]
        bound.append(folder)
    return args


def writable_args(disk_bytes: int, files: dict[str, int]) -> list[str]:
    """bwrap arguments for /proc, /dev, the bounded tmpfs with the run folder, and the program's files
    (`files`: name -> a readable file descriptor bubblewrap copies it from)."""
    args = ["--proc", "/proc", "--dev", "/dev"]
    args += ["--perms", "1777", "--size", str(disk_bytes), "--tmpfs", WRITABLE, "--symlink", WRITABLE, "/tmp"]
    run = f"{WRITABLE}/run"
    args += ["--perms", "0777", "--dir", run]  # the program's own tmpfs: its only user may write here
    for name, fd in files.items():
        args += ["--perms", "0444", "--file", str(fd), f"{run}/{name}"]
    args += ["--remount-ro", "/dev"]  # /dev's own tmpfs has no bound: nothing may be written there
    args += ["--chdir", RUN_FOLDER]
    return args
