"""`make run`: migrate, load the demo on first run, then run the web server and a
Celery worker side by side until Ctrl-C, which stops both cleanly.

Environment: HOST (default 127.0.0.1), PORT (default 8000), plus everything the
settings read (DATABASE_URL, CELERY_BROKER_URL, ...).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
MANAGE = [sys.executable, str(ROOT / "manage.py")]


def _step(args: list[str]) -> None:
    subprocess.run(args, cwd=ROOT, check=True)


def main() -> int:
    host = os.environ.get("HOST", "127.0.0.1")
    port = os.environ.get("PORT", "8000")
    _step([*MANAGE, "migrate", "--noinput", "-v", "0"])
    _step([*MANAGE, "demo", "--if-empty"])
    sys.path.insert(0, str(ROOT))
    from portal.demo_accounts import ADMIN, ANNOTATORS

    children = {
        "web": subprocess.Popen(
            [*MANAGE, "runserver", "--noreload", f"{host}:{port}"], cwd=ROOT
        ),
        "worker": subprocess.Popen(
            [
                str(BIN / "celery"),
                "-A",
                "rcp_platform",
                "worker",
                "--loglevel=info",
                "--concurrency=2",
                "--hostname=embedded@%h",
            ],
            cwd=ROOT,
        ),
    }
    print(
        f"\nRCP Platform: http://{host}:{port}/  (API docs: http://{host}:{port}/api/docs/)",
        flush=True,
    )
    print(f"  admin login:     {ADMIN[0]} / {ADMIN[1]}", flush=True)
    for name, password in ANNOTATORS:
        print(f"  annotator login: {name} / {password}", flush=True)
    print(
        "Web server and Celery worker running; press Ctrl-C to stop both.\n", flush=True
    )

    stopping = False

    def stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    code = 0
    while not stopping:
        for name, proc in children.items():
            if proc.poll() is not None:
                print(
                    f"{name} exited with code {proc.returncode}; stopping.",
                    file=sys.stderr,
                )
                stopping, code = True, proc.returncode or 1
        time.sleep(0.3)
    for proc in children.values():
        if proc.poll() is None:
            proc.send_signal(
                signal.SIGTERM
            )  # Celery: warm shutdown, finishes the current task
    deadline = time.monotonic() + 20
    for proc in children.values():
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
    print("Stopped web server and worker.")
    return code


if __name__ == "__main__":
    sys.exit(main())
