"""`odradek console` in a child process, for the console's browser tests: it listens on a free
port of 127.0.0.1 and the URL it prints is `url`."""

from __future__ import annotations

import subprocess
from pathlib import Path

from broker_process import ODRADEK, wait_until

#: Debian's Chromium, which the browser tests drive through Playwright.
CHROMIUM = Path("/usr/bin/chromium")


class ConsoleProcess:
    def __init__(self, workdir: Path, bootstrap: str, *extra: str) -> None:
        self.out = workdir / "console.out"
        with open(self.out, "wb") as out:
            self.proc = subprocess.Popen(
                [*ODRADEK, "console", "--bootstrap-server", bootstrap,
                 "--listen", "127.0.0.1:0", *extra],
                stdout=out, stderr=subprocess.STDOUT)

        def listening() -> str | None:
            if self.proc.poll() is not None:
                raise RuntimeError(f"console exited {self.proc.returncode}: "
                                   f"{self.out.read_text()}")
            for line in self.out.read_text().splitlines():
                if "listening on " in line:
                    return line.split("listening on ")[1].split()[0].rstrip("/")
            return None

        self.url = wait_until(listening, 30, message="the console to listen")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            assert self.proc.wait(15) == 0, self.out.read_text()
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
