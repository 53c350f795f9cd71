"""``perfseer-rt profile``: measure one ONNX model here, on the CPU or a GPU.

The latency's repeat CV is reported with the bound it was held to
(``--max-cv``, default 5 % robust CV): a noisier window is timed again, and
one that stays above it is reported as unstable (a note; exit code still 0).

Exit codes: 0 measured; 1 the run failed (status ``oom`` or
``error``, the record is still printed); 2 a user error (unknown provider,
no GPU, missing file, unresolved shape), as one line on stderr.
"""

from __future__ import annotations

import json
import math
from typing import Any

import click

from perfseer_rt.cli.common import dim_opt, input_opt, parse_dims, parse_input_shapes
from perfseer_rt.profile.api import profile as run_profile
from perfseer_rt.profile.session import provider_name
from perfseer_rt.profile.timing import DEFAULT_MAX_CV, PRESETS, MeasureSettings


def _fmt(v: Any, spec: str = ".3f", unit: str = "") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    return f"{v:{spec}}{unit}"


def _pct(v: Any, spec: str = ".1f") -> str:
    return _fmt(v * 100 if isinstance(v, (int, float)) else None, spec, " %")


def summary(rec: dict[str, Any]) -> str:
    """A few readable lines for people."""
    env = rec.get("env") or {}
    where = env.get("gpu_name") if rec.get("provider_used") == "CUDAExecutionProvider" \
        else env.get("cpu_model")
    lines = [f"model      {rec.get('model')}",
             f"provider   {rec.get('provider_used') or rec.get('provider_requested')}"
             f" on {where}" + (f", {rec['threads']} thread(s)" if rec.get("threads") else ""),
             "inputs     " + ", ".join(f"{k}:{'x'.join(map(str, v))}"
                                        for k, v in (rec.get("input_shapes") or {}).items()),
             f"status     {rec.get('status')}"]
    if rec.get("status") != "ok":
        lines.append(f"error      {rec.get('error')}")
        return "\n".join(lines)
    lines += [
        f"latency    {_fmt(rec['latency_ms'])} ms median, mean {_fmt(rec['latency_mean_ms'])}, "
        f"min {_fmt(rec['latency_min_ms'])}, p90 {_fmt(rec['latency_p90_ms'])} "
        f"({rec['runs']} runs in {_fmt(rec['window_s'], '.2f')} s)",
        f"repeat CV {_pct(rec.get('latency_cv'))} (robust {_pct(rec.get('latency_robust_cv'))}"
        + (f"; bound {_pct(rec['latency_cv_bound'], '.0f')}, "
           f"{'met' if rec.get('latency_stable') else 'NOT met'} after {rec.get('latency_windows')} window(s)"
           if rec.get("latency_cv_bound") else "") + ")",
        f"peak mem   {_fmt(rec.get('peak_mem_mb'), '.1f')} MiB over baseline "
        f"({rec.get('peak_mem_method')}; process peak "
        f"{_fmt(rec.get('peak_mem_process_mb'), '.1f')} MiB)",
    ]
    if rec.get("provider_used") == "CUDAExecutionProvider":
        lines += [
            f"SM util    {_fmt(rec.get('sm_util_pct'), '.1f')} % (NVML), process "
            f"{_fmt(rec.get('proc_sm_util_pct'), '.1f')} %, GPM SM active "
            f"{_fmt(rec.get('gpm_sm_active_pct'), '.1f')} %, occupancy "
            f"{_fmt(rec.get('gpm_sm_occupancy_pct'), '.1f')} %",
            f"energy     {_fmt(rec.get('energy_mj'), '.2f')} mJ per batch "
            f"({_fmt(rec.get('power_w'), '.1f')} W)",
        ]
    for note in rec.get("notes") or []:
        lines.append(f"note       {note}")
    return "\n".join(lines)


@click.command("profile")
@click.argument("model", type=click.Path(dir_okay=False, path_type=str))
@click.option("--provider", default="cpu", show_default=True, metavar="cpu|cuda",
              help="Execution provider to measure on.")
@click.option("--batch", type=click.IntRange(min=1), default=None,
              help="Batch size; resolves a dynamic first input dim.")
@input_opt
@dim_opt
@click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True,
              help="Intra-op threads (CPU provider).")
@click.option("--min-runs", type=click.IntRange(min=1), default=10, show_default=True,
              help="Least number of timed runs.")
@click.option("--min-time", type=click.FloatRange(min=0), default=None,
              help="Least timed window in seconds [default: 0.5 cpu, 1.0 cuda].")
@click.option("--max-time", type=click.FloatRange(min=0), default=30.0, show_default=True,
              help="Stop timing after this many seconds once 3 runs exist.")
@click.option("--max-cv", type=click.FloatRange(min=0), default=DEFAULT_MAX_CV, show_default=True,
              help="Bound on the timed window's robust CV (1.4826 MAD / median, a fraction); a window "
                   "above it is timed again (--retries), then reported as unstable. 0: no bound.")
@click.option("--retries", type=click.IntRange(min=0), default=2, show_default=True,
              help="CPU: windows timed again at most while the CV bound is not met (CUDA reports only).")
@click.option("--conv-algo", type=click.Choice(["EXHAUSTIVE", "HEURISTIC", "DEFAULT"]),
              default=None, help="CUDA cudnn_conv_algo_search [default: EXHAUSTIVE].")
@click.option("--json", "as_json", is_flag=True, help="Print the record as JSON.")
def profile(model: str, provider: str, batch: int | None, inputs: tuple[str, ...],
            dims: tuple[str, ...], threads: int,
            min_runs: int, min_time: float | None, max_time: float, max_cv: float, retries: int,
            conv_algo: str | None, as_json: bool) -> None:
    """Measure latency, peak memory (and on CUDA utilization and energy) of MODEL."""
    is_cuda = provider_name(provider) == "CUDAExecutionProvider"
    base = PRESETS["cuda" if is_cuda else "cpu"]
    min_time = base.min_time_s if min_time is None else min_time
    settings = MeasureSettings(min_runs=min_runs, min_time_s=min_time,
                               max_time_s=max(max_time, min_time),
                               max_runs=max(base.max_runs, min_runs),
                               warmup_runs=base.warmup_runs, warmup_time_s=base.warmup_time_s,
                               max_cv=max_cv or None, retries=retries)
    options = {"cudnn_conv_algo_search": conv_algo} if conv_algo else None
    rec = run_profile(model, provider, batch=batch, input_shapes=parse_input_shapes(inputs),
                      dims=parse_dims(dims), threads=threads, settings=settings, provider_options=options)
    if as_json:
        click.echo(json.dumps(rec, separators=(",", ":")))
    else:
        click.echo(summary(rec))
    if rec.get("status") != "ok":
        click.get_current_context().exit(1)
