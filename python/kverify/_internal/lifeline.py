"""Processes that end when the process that started them dies (no orphans after a `kill -9`)."""
from __future__ import annotations

import os
import threading
import time


def exit_with_parent(code: int = 70, period: float = 0.5) -> None:
    """Start a daemon thread that ends this process with ``code`` once its parent has gone
    (the parent pid changes when the parent dies and the process is re-parented)."""
    parent = os.getppid()

    def watch():
        while True:
            if os.getppid() != parent:
                os._exit(code)
            time.sleep(period)

    threading.Thread(target=watch, daemon=True, name="kverify-parent-watch").start()
