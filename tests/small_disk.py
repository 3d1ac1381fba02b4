"""A small disk for full-disk tests: a tmpfs of a given size mounted on a test's directory.

Mounting needs root (CAP_SYS_ADMIN), as the netns fault tests do; where the machine does not
allow it, `SmallDisk.mount` raises DiskUnavailable and tests skip saying so. `fill` writes a
ballast file until the disk is full (ENOSPC), `free` removes it, `resize` grows or shrinks the
disk in place (`mount -o remount,size=`) without touching the files on it."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

BALLAST = ".ballast"
CHUNK = 1 << 16


class DiskUnavailable(RuntimeError):
    pass


class SmallDisk:
    def __init__(self, path: Path, size_bytes: int) -> None:
        self.path = path
        self.size_bytes = size_bytes
        self.mounted = False

    def mount(self) -> SmallDisk:
        self.path.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.size_bytes}",
                               "odradek-small-disk", str(self.path)],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise DiskUnavailable(f"cannot mount a tmpfs (needs root): {done.stderr.strip()}")
        self.mounted = True
        return self

    def resize(self, size_bytes: int) -> None:
        subprocess.run(["mount", "-o", f"remount,size={size_bytes}", str(self.path)],
                       check=True, capture_output=True)
        self.size_bytes = size_bytes

    def fill(self) -> int:
        """Writes a ballast file until the disk is full; the bytes it took."""
        written = 0
        zeros = b"\0" * CHUNK
        with open(self.path / BALLAST, "ab") as ballast:
            try:
                while True:
                    written += os.write(ballast.fileno(), zeros)
            except OSError as error:
                if error.errno != errno.ENOSPC:
                    raise
        return written

    def free(self) -> None:
        (self.path / BALLAST).unlink(missing_ok=True)

    def unmount(self) -> None:
        if self.mounted:
            # Lazy: a process that still holds files on it (a halted broker's) lets go later.
            subprocess.run(["umount", "-l", str(self.path)], check=False, capture_output=True)
            self.mounted = False
