"""The campaign loop: the same for one local worker or many Ray workers.

    plan.items() --skip done--> executor (one item per worker at a time)
                 <--[(record, graph)]-- as each item finishes --> store.write

Every ``reference_every`` written records (and at the start and the end) the
plan's reference items are queued again; the run ends when ``target``
configurations are recorded, the plan is exhausted, or ``time_budget_s``
would be passed (no new item starts after it; workers stop between batch
sizes at it). Progress is a tqdm bar over configurations.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Protocol

try:  # the training extra has it; a bare GPU image may not: then no bar, same loop
    from tqdm import tqdm
except ImportError:  # pragma: no cover - depends on the machine
    tqdm = None

from training.campaign.plan import Item
from training.campaign.store import Store


class Executor(Protocol):
    """Runs items on workers: ``free()`` workers, ``submit``, ``wait`` for one result."""

    def free(self) -> int: ...

    def submit(self, item: Item, upcoming: Item | None, deadline: float | None) -> None: ...

    def wait(self) -> tuple[Item, list[tuple[dict, Any]] | None]: ...

    def close(self) -> None: ...


class LocalExecutor:
    """One worker in this process (the single-machine path: no Ray)."""

    def __init__(self, worker: Any):
        self.worker = worker
        self._job: tuple | None = None

    def free(self) -> int:
        return 0 if self._job else 1

    def submit(self, item, upcoming, deadline) -> None:
        self._job = (item, upcoming, deadline)

    def wait(self):
        assert self._job is not None
        item, upcoming, deadline = self._job
        self._job = None
        return item, self.worker.run(item, upcoming, deadline)

    def busy(self) -> int:
        return 1 if self._job else 0

    def close(self) -> None:
        self.worker.close()


@dataclass
class Stats:
    written: int = 0
    references: int = 0
    duplicates: int = 0
    lost: int = 0  # items whose worker died (re-queued)
    stopped_by_budget: bool = False


def run(plan: Any, store: Store, executor: Any, *, target: int, reference: bool = True,
        reference_every: int = 100, time_budget_s: float | None = None,
        settings: dict | None = None, progress: bool = True,
        on_record: Callable[[dict], None] | None = None) -> Stats:
    """Run a campaign until ``store.count >= target`` (see module doc).

    An item whose worker died (``executor.wait`` returned ``None`` results)
    goes back to the queue for another worker.
    """
    stats = Stats()
    start = time.monotonic()
    deadline = time.time() + time_budget_s if time_budget_s else None
    settings = settings or {}
    store.save_campaign("running", settings)
    refs = plan.references() if reference else []
    queue: deque[Item] = deque(refs)
    stream: Iterator[Item] = (it for it in plan.items()
                              if not _planned_done(store, it))
    exhausted = False
    since_ref = 0
    bar = (tqdm if tqdm is not None else _NoBar)(
        total=target, initial=min(store.count, target), unit="cfg", file=sys.stderr,
        dynamic_ncols=True, disable=not progress)

    def out_of_time() -> bool:
        if not time_budget_s:
            return False
        return time.monotonic() - start > time_budget_s

    ahead: deque[Item] = deque()  # the stream's next item, peeked for the export prefetch

    def pull() -> Item | None:
        nonlocal exhausted
        if ahead:
            return ahead.popleft()
        if exhausted:
            return None
        for it in stream:
            skip = {b for b in (it.batches or ()) if store.is_done(it.arch_id, b)}
            return it.with_skip(skip) if skip else it
        exhausted = True
        return None

    def next_item() -> Item | None:
        return queue.popleft() if queue else pull()

    def peek() -> Item | None:
        if queue:
            return queue[0]
        if not ahead:
            nxt = pull()
            if nxt is None:
                return None
            ahead.append(nxt)
        return ahead[0]

    final_refs = False
    try:
        while True:
            want_more = store.count < target and not out_of_time()
            while executor.free() and (want_more or (queue and not out_of_time())):
                item = next_item()
                if item is None:
                    break
                executor.submit(item, peek() if want_more else None, deadline)
            if not executor.busy():
                if reference and refs and not final_refs and since_ref and not out_of_time():
                    final_refs = True  # close the run with the reference set
                    queue.extend(refs)
                    continue
                break
            item, results = executor.wait()
            if results is None:
                stats.lost += 1
                if not item.reference:
                    queue.appendleft(item)
                continue
            for record, graph in results:
                if store.write(record, graph):
                    stats.written += 1
                    if record.get("reference"):
                        stats.references += 1
                    else:
                        since_ref += 1
                        bar.update(1)
                    if on_record:
                        on_record(record)
                else:
                    stats.duplicates += 1
            if reference and refs and reference_every and since_ref >= reference_every:
                since_ref = 0
                queue.extend(refs)
        stats.stopped_by_budget = out_of_time() and store.count < target
    finally:
        bar.close()
        executor.close()
        finished = store.count >= target or (exhausted and not ahead and not queue)
        store.save_campaign("done" if finished else
                            "stopped" if stats.stopped_by_budget else "interrupted", settings)
    return stats


def _planned_done(store: Store, item: Item) -> bool:
    """Whether nothing of ``item`` is left: a probe item whose batch 1 is
    recorded (its other batch sizes were chosen then), or every fixed batch."""
    if item.batches is None:
        return store.is_done(item.arch_id, 1)
    return all(store.is_done(item.arch_id, b) for b in item.batches)


class _NoBar:
    """Progress as a line every 50 configurations (when tqdm is absent)."""

    def __init__(self, total: int, initial: int, disable: bool, **_: Any):
        self.n, self.total, self.disable = initial, total, disable

    def update(self, k: int) -> None:
        self.n += k
        if not self.disable and self.n % 50 == 0:
            print(f"{self.n}/{self.total} configurations", file=sys.stderr, flush=True)

    def close(self) -> None:
        pass
