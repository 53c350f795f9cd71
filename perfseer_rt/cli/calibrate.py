"""``perfseer-rt calibrate``."""

from __future__ import annotations

import math

import click
from tqdm import tqdm

from perfseer_rt.calibrate.api import ROUND_SPREAD_WARN
from perfseer_rt.calibrate.api import calibrate as do_calibrate
from perfseer_rt.calibrate.reference import references
from perfseer_rt.calibrate.threads import check_threads
from perfseer_rt.cli.common import emit_json
from perfseer_rt.predict.correction import Correction


def _how(c: Correction) -> str:
    if c.kind == "kinds" and c.ratios:
        return "per kind of work: " + ", ".join(f"{k} x{v:.2f}" for k, v in c.ratios.items())
    return f"one factor x{math.exp(c.a):.3f}" if c.kind == "scale" else f"power law e^{c.a:.3f} x base^{c.b:.3f}"


@click.command()
@click.option("--name", default=None, help="Device name of the entry (default local-cpu-<N>t / local-cuda).")
@click.option("--base", default="cpu-amd-epyc-1t", show_default=True,
              help="Shipped device whose predictor is corrected.")
@click.option("--provider", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True,
              help="Profile on the CPU or a CUDA GPU.")
@click.option("--threads", type=click.IntRange(min=1), default=None,
              help="CPU intra-op threads to calibrate at (default: the count onnxruntime uses here when a "
                   "session sets none); the entry predicts at that count only.")
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="Entry folder (default $PERFSEER_RT_HOME/devices/NAME, else "
                   "~/.local/share/perfseer-rt/devices/NAME; predict finds only those).")
@click.option("--models", "n_models", type=click.IntRange(min=3), default=None,
              help="Profile only the first N reference models (default: all of them, about a minute; "
                   "small zoo models first, published architectures at real-model sizes last).")
@click.option("--force", is_flag=True, help="Replace an existing entry of that name.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def calibrate(name: str | None, base: str, provider: str, threads: int | None, out: str | None,
              n_models: int | None, force: bool, as_json: bool) -> None:
    """Profile bundled reference models here; write a calibrated device entry."""
    if threads is not None:
        check_threads(threads)  # before the progress bar: one line, nothing measured
    refs = references()[:n_models] if n_models else references()
    with tqdm(total=len(refs), unit="model", desc="calibrate", disable=as_json, leave=False) as bar:
        def progress(done: int, total: int, model: str) -> None:
            bar.set_postfix_str(model)
            bar.update(1)

        res = do_calibrate(name, base=base, provider=provider, out=out, refs=refs, overwrite=force,
                           progress=progress, threads=threads)
    if as_json:
        emit_json({"device": res.device, "folder": str(res.folder), "base": res.base,
                   "seconds": res.seconds, "corrections": {m: c.to_dict() for m, c in res.corrections.items()},
                   "expected_on_real_models": res.expected, "round_spread": res.round_spread,
                   "models": res.measured, "busy_models": res.busy})
        return
    threads_used = next((c.threads for c in res.corrections.values() if c.threads), None)
    click.echo(f"wrote device {res.device!r} to {res.folder} ({res.seconds:.0f} s; base {res.base}"
               + (f"; {threads_used} intra-op thread(s)" if threads_used else "") + ")")
    for m, c in res.corrections.items():
        click.echo(f"  {m:<12} cross-validated MAPE {c.cv_mape:.1f} % ({c.cv_within_10:.0f} % within +-10 %, "
                   f"{c.count} models; uncorrected base {c.base_mape:.1f} %; {_how(c)})")
        exp = res.expected.get(m) or {}
        if exp.get("expected_mape") is not None:
            click.echo(f"  {'':<12} on real models expect about {exp['expected_mape']:.1f} % (with the shipped "
                       f"predictor's own {exp['base_real_mape']:.1f} % on real models it never saw)")
    if len(res.busy) * 4 > len(res.measured):
        click.echo(f"  warning: the machine was busy ({len(res.busy)} of {len(res.measured)} models ran their median "
                   "over 1.25x their fastest run); latency calibration is unreliable: rerun on a quiet machine "
                   "with --force")
    spread = res.round_spread
    if spread is not None and spread > ROUND_SPREAD_WARN:
        click.echo(f"  warning: the two rounds of each reference model differ by {100 * spread:.0f} % (standard "
                   f"deviation; a quiet machine: a few %): this machine's speed changed while it was measured, "
                   "and real models measured at another moment will differ by as much; rerun on a quiet machine "
                   "with --force")
    failed = [r for r in res.measured if r["status"] != "ok"]
    for r in failed:
        click.echo(f"  not measured: {r['name']}: {r['error']}")
    if out is None:
        click.echo(f"use it: perfseer-rt predict MODEL.onnx --device {res.device}")
