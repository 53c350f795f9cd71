"""The same campaign over many devices or hosts with Ray: one actor per device.

Each actor owns one :class:`~training.campaign.worker.DeviceWorker` (or what
``make_worker`` builds) and runs one item at a time; the driver (the
:func:`training.campaign.loop.run` loop) hands out items and writes every
returned record to the one store, so resume and de-duplication stay where
they are. An actor that dies (a lost host, a killed process) loses only the
item it was running: the loop queues it again for another actor.

Ray is imported here only; the single-machine path never imports this module.
"""

from __future__ import annotations

from typing import Any, Callable

import ray

from training.campaign.plan import Item


@ray.remote(max_restarts=0)
class _DeviceActor:
    def __init__(self, make_worker: Callable[[int], Any], index: int):
        self.worker = make_worker(index)

    def run(self, item: Item, upcoming: Item | None, deadline: float | None):
        return self.worker.run(item, upcoming, deadline)

    def close(self) -> None:
        self.worker.close()


class RayExecutor:
    """``devices`` actors, each with ``num_gpus`` / ``num_cpus`` of its own.

    Args:
        make_worker: ``device index -> worker`` (pickled to the actors).
        devices: how many actors (one per GPU or host).
        num_gpus, num_cpus: Ray resources each actor holds.
    """

    def __init__(self, make_worker: Callable[[int], Any], devices: int, *, num_gpus: float = 0,
                 num_cpus: float = 1):
        opts = {"num_gpus": num_gpus, "num_cpus": num_cpus}
        # @ray.remote turns the class into an ActorClass; ray's hints keep the plain class
        self.actors = [_DeviceActor.options(**opts).remote(make_worker, i)  # type: ignore[attr-defined]
                       for i in range(devices)]
        self.idle = list(self.actors)
        self.running: dict[Any, tuple[Any, Item]] = {}  # ref -> (actor, item)

    def free(self) -> int:
        return len(self.idle)

    def busy(self) -> int:
        return len(self.running)

    def submit(self, item: Item, upcoming: Item | None, deadline: float | None) -> None:
        """Start ``item`` on an idle actor. ``upcoming`` is not passed on: which
        actor gets it is not known yet, so each actor exports its own item."""
        actor = self.idle.pop()
        self.running[actor.run.remote(item, None, deadline)] = (actor, item)

    def wait(self) -> tuple[Item, list | None]:
        """The next finished item and its results (None: its actor died)."""
        [ref], _ = ray.wait(list(self.running), num_returns=1)
        actor, item = self.running.pop(ref)
        try:
            results = ray.get(ref)
        except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError):
            self.actors.remove(actor)  # dead: its item goes back to the queue
            if not self.actors:
                raise RuntimeError("every campaign worker died") from None
            return item, None
        self.idle.append(actor)
        return item, results

    def kill(self, index: int) -> None:
        """Kill one actor (tests: a lost device)."""
        ray.kill(self.actors[index], no_restart=True)

    def close(self) -> None:
        for actor in self.actors:
            try:
                ray.get(actor.close.remote(), timeout=30)
            except Exception:  # noqa: BLE001 - a dead actor has nothing to close
                pass
            ray.kill(actor)
