"""Processes that end when the process that started them dies (no orphans after a `kill -9`)."""
from __future__ import annotations

import os
import threading
import time


def exit_with_parent(code: int = 70, period: float = 0.5, origin: str | int | None = None) -> None:
    """Start a daemon thread that ends this process with ``code`` once its parent has gone (the
    parent pid changes when the parent dies and the process is re-parented) or, when ``origin``
    names a pid (the kverify process that started a chain such as compute-sanitizer -> worker),
    once that process is gone. Both are checked once at once: a parent that died before this
    call (e.g. while the worker was still starting Python) ends it immediately."""
    parent = os.getppid()
    origin_pid = int(origin) if origin else None

    def gone() -> bool:
        if os.getppid() != parent:
            return True
        if origin_pid is not None:
            try:
                os.kill(origin_pid, 0)
            except ProcessLookupError:
                return True
            except PermissionError:
                pass
        return False

    if gone():
        os._exit(code)

    def watch():
        while True:
            if gone():
                os._exit(code)
            time.sleep(period)

    threading.Thread(target=watch, daemon=True, name="kverify-parent-watch").start()
