"""Prometheus metrics of the service (``GET /metrics``), with
prometheus-client: requests by endpoint and status, their latency, the
queue, the jobs running, rejections by reason and worker restarts. Each app
has its own registry (tests make several apps in one process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

#: Seconds: from a health check's milliseconds to a transformer's extraction.
BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter("perfseer_rt_requests", "HTTP requests answered, by endpoint and "
                                "status", ["endpoint", "status"], registry=r)
        self.latency = Histogram("perfseer_rt_request_duration_seconds", "Time to answer a "
                                 "request, seconds (upload, queue and work included)",
                                 ["endpoint"], buckets=BUCKETS_S, registry=r)
        self.queue_depth = Gauge("perfseer_rt_queue_depth", "Requests waiting for a worker",
                                 registry=r)
        self.running = Gauge("perfseer_rt_jobs_running", "Jobs running in workers", registry=r)
        self.admitted = Gauge("perfseer_rt_requests_admitted", "Work requests holding a place "
                              "(uploading, queued or running)", registry=r)
        self.workers_ready = Gauge("perfseer_rt_workers_idle", "Started, warm workers without a "
                                   "job", registry=r)
        self.rejected = Counter("perfseer_rt_rejected", "Work requests refused or stopped for "
                                "capacity: queue_full (429), wait_timeout (503), deadline (504)",
                                ["reason"], registry=r)
        self.worker_events = Counter("perfseer_rt_worker_events", "Worker processes started, "
                                     "failed to start, or stopped (deadline, memory, crashed, "
                                     "cancelled)", ["event"], registry=r)
