"""The profiler re-times a noisy window and says when it stays noisy
(perfseer_rt.profile.timing.stable_loop); its table shows the repeat CV.
Run times come from a scripted clock: nothing here is timed for real."""

from __future__ import annotations

import itertools

import pytest

from perfseer_rt.cli.profile import summary
from perfseer_rt.profile import timing
from perfseer_rt.profile.timing import MeasureSettings, stable_loop

NS = 1_000_000  # one ms


class ScriptedClock:
    """``perf_counter_ns`` that advances only when a run happens, by the next scripted duration."""

    def __init__(self, durations_ms):
        self.now = 0
        self.durations = iter(durations_ms)

    def perf_counter_ns(self) -> int:
        return self.now

    def run(self) -> None:
        self.now += int(next(self.durations) * NS)


@pytest.fixture
def clock(monkeypatch):
    def make(durations):
        c = ScriptedClock(durations)
        monkeypatch.setattr(timing, "time", c)
        return c
    return make


SETTINGS = dict(min_runs=10, min_time_s=0.0, max_time_s=1.0, warmup_runs=0, warmup_time_s=0.0)


def test_a_noisy_window_is_timed_again_and_the_steady_one_kept(clock):
    noisy = [1.0, 2.0] * 5  # robust CV ~ 0.5
    steady = [1.0] * 10
    c = clock(noisy + steady)
    samples, _, info = stable_loop(c.run, MeasureSettings(**SETTINGS, max_cv=0.05, retries=2))
    assert samples == [NS] * 10
    assert info["latency_windows"] == 2 and info["latency_stable"] is True and info["notes"] == []
    assert info["latency_window_cvs"][0] > 0.05 >= info["latency_window_cvs"][1]


def test_a_window_that_stays_noisy_is_reported_unstable(clock):
    c = clock(itertools.cycle([1.0, 2.0, 1.5]))
    samples, _, info = stable_loop(c.run, MeasureSettings(**SETTINGS, max_cv=0.05, retries=2))
    assert len(samples) == 10 and info["latency_windows"] == 3
    assert info["latency_stable"] is False and "latency unstable" in info["notes"][0]
    assert "5 % bound" in info["notes"][0]


def test_without_a_bound_one_window_and_no_verdict(clock):
    c = clock(itertools.cycle([1.0, 2.0]))
    _, _, info = stable_loop(c.run, MeasureSettings(**SETTINGS))
    assert info["latency_windows"] == 1 and info["latency_stable"] is None


def test_settings_refuse_a_bad_bound():
    with pytest.raises(ValueError):
        MeasureSettings(max_cv=0.0)
    with pytest.raises(ValueError):
        MeasureSettings(retries=-1)


def test_the_table_reports_the_cv_and_whether_the_bound_was_met():
    rec = {"model": "m.onnx", "provider_used": "CPUExecutionProvider", "threads": 1, "status": "ok",
           "latency_ms": 2.0, "latency_mean_ms": 2.4, "latency_min_ms": 1.9, "latency_p90_ms": 3.0,
           "latency_cv": 0.31, "latency_robust_cv": 0.12, "runs": 10, "window_s": 0.5,
           "latency_cv_bound": 0.05, "latency_stable": False, "latency_windows": 3,
           "notes": ["latency unstable: ..."], "env": {"cpu_model": "X"}}
    text = summary(rec)
    assert "repeat CV 31.0 % (robust 12.0 %; bound 5 %, NOT met after 3 window(s))" in text
    assert "note       latency unstable" in text
