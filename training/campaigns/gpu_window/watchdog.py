"""A watchdog over one configuration at a time: the deadline of a GPU window
is checked only between configurations, so a configuration that hangs (a
stuck NVML call, a kernel that never returns) would otherwise spend the rest
of the window.

``arm(key, make_record)`` before a configuration, ``disarm()`` after it. When
an armed configuration runs past ``limit_s`` seconds, the watchdog writes the
record ``make_record()`` gives (its status says it hung), logs it, and ends
the process with ``exit_code`` at once (``os._exit``: a hung CUDA call cannot
be interrupted from Python). ``gpu_window.sh`` starts a fresh process, which
skips the configuration because its record exists.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable

from training.campaigns.gpu_window.shards import ShardWriter

#: How often the watchdog looks, seconds.
TICK_S = 0.5
#: Default limit of one configuration, seconds (the window's longest run about 15 s).
WATCHDOG_S = 90.0


class Watchdog:
    def __init__(self, limit_s: float, writer: ShardWriter, log: Callable[[str], None], exit_code: int) -> None:
        self.limit_s = limit_s
        self.writer = writer
        self.log = log
        self.exit_code = exit_code
        self._lock = threading.Lock()
        self._armed: tuple[str, float, Callable[[], dict[str, Any]]] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gpu-window-watchdog", daemon=True)
        self._thread.start()

    def arm(self, key: str, make_record: Callable[[], dict[str, Any]]) -> None:
        with self._lock:
            self._armed = (key, time.monotonic() + self.limit_s, make_record)

    def disarm(self) -> None:
        with self._lock:  # waits for a firing watchdog, which ends the process
            self._armed = None

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(TICK_S):
            with self._lock:
                if self._armed is None or time.monotonic() < self._armed[1]:
                    continue
                key, _, make_record = self._armed
                try:
                    self.writer.write(make_record())
                    self.writer.close()
                finally:
                    self.log(f"watchdog: {key} ran past {self.limit_s:.0f} s; recorded as hung, the "
                             f"process ends (exit {self.exit_code}; gpu_window.sh restarts it)")
                    os._exit(self.exit_code)
