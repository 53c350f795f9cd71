"""``perfseer-rt predict``, ``devices``, ``check`` and ``fit``.

The human table and the ``--json`` list render the same result dicts (the
shared contract of :func:`perfseer_rt.predict.predict`); optional keys may be
missing and are then left out of the table.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from perfseer_rt.cli.common import emit_json
from perfseer_rt.cli.spec import spec_options, spec_values
from perfseer_rt.errors import PerfSeerError
from perfseer_rt.predict.budget import check as do_check
from perfseer_rt.predict.budget import fit as do_fit
from perfseer_rt.predict.explain import device_rows
from perfseer_rt.predict.many import expand_models, predict_many
from perfseer_rt.predict.train_mode import summary


def _fmt(x: float) -> str:
    return f"{x:.4g}" if abs(x) < 1e5 else f"{x:,.0f}"


def metric_cell(m: dict[str, Any]) -> str:
    """``value`` or ``value [lo, hi]`` (the interval when there is one)."""
    cell = _fmt(m["value"])
    iv = m.get("interval")
    if iv:
        cov = m.get("coverage")
        cell += f" [{_fmt(iv[0])}, {_fmt(iv[1])}]" + (f" {100 * cov:.0f}%" if cov else "")
    return cell


def render_table(results: list[dict[str, Any]]) -> str:
    """A human-readable table: one header per predictor, one row per model x batch,
    then what each column means."""
    if not results:
        return "no models"
    lines: list[str] = []
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in results:
        p = r.get("predictor") or {"device": r.get("device")}
        groups.setdefault((p.get("device"), p.get("model")), []).append(r)
    for rows in groups.values():
        p = rows[0].get("predictor") or {"device": rows[0].get("device")}
        head = f"predictor  {p.get('device')}"
        if p.get("model"):
            head += f" / {p['model']} ({p.get('kind', '?')}, version {p.get('version', '?')})"
        lines.append(head)
        if p.get("description"):
            lines.append(f"device     {p['description']}")
        if p.get("provenance"):
            lines.append(f"source     {p['provenance']}")
        if rows[0].get("mode"):
            lines.append(f"mode       {rows[0]['mode']}")
        metrics = list(dict.fromkeys(k for r in rows for k in r.get("metrics", {})))
        units = {k: r["metrics"][k].get("unit", "") for r in rows for k in r.get("metrics", {})}
        header = ["model", "batch"] + [f"{k} [{units[k]}]" for k in metrics]
        gpus = sorted({r["mig"]["gpu"] for r in rows if r.get("mig") and r["mig"].get("gpu")})
        if any(r.get("mig") for r in rows):
            header.append(f"MIG profile on {', '.join(gpus) or 'GPU'}")
        table = [header]
        for r in rows:
            row = [str(r.get("model")), str(r.get("batch"))]
            row += [metric_cell(r["metrics"][k]) if k in r.get("metrics", {}) else "-"
                    for k in metrics]
            if any(x.get("mig") for x in rows):
                mig = r.get("mig") or {}
                row.append(f"{mig.get('profile') or 'none fits'} (needs "
                           f"{mig.get('required_mb', 0):.0f} MiB incl. "
                           f"{100 * mig.get('margin', 0):.0f} % margin)" if mig else "-")
            table.append(row)
        widths = [max(len(row[i]) for row in table) for i in range(len(header))]
        lines.append("")
        for row in table:
            lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                                   for i, (c, w) in enumerate(zip(row, widths))).rstrip())
        lines.append("")
        for k in metrics:
            meaning = next((r["metrics"][k].get("meaning") for r in rows
                            if r["metrics"].get(k, {}).get("meaning")), None)
            if meaning:
                lines.append(f"{k}: {meaning}")
        if any(r["metrics"][k].get("interval") for r in rows for k in r.get("metrics", {})):
            lines.append("[lo, hi]: the prediction interval (with its coverage when known)")
        lines += warning_lines(rows)
        lines.append("")
    return "\n".join(lines).rstrip()


def warning_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Each model's warnings once, not once per batch size: ``warning: MODEL:
    TEXT`` when every batch of the model has it, else ``warning: MODEL batch
    B[, B...]: TEXT``."""
    batches: dict[Any, list[Any]] = {}
    said: dict[tuple[Any, str], list[Any]] = {}
    for r in rows:
        batches.setdefault(r.get("model"), []).append(r.get("batch"))
        for w in r.get("warnings") or []:
            said.setdefault((r.get("model"), w), []).append(r.get("batch"))
    return [f"warning: {model}: {w}" if len(b) == len(batches[model]) else
            f"warning: {model} batch {', '.join(map(str, b))}: {w}"
            for (model, w), b in said.items()]


_device_opt = click.option("--device", default=None,
                           help="Predictor device (see `perfseer-rt devices`).")
_model_opt = click.option("--model", "model_name", default=None,
                          help="Which of the device's predictors (default: the most accurate).")


_mode_opt = click.option(
    "--mode", type=click.Choice(["inference", "train"]), default="inference", show_default=True,
    help="inference: one inference call; train: one training step (forward, loss, backward, "
         "optimizer update) with the device's training-step predictor (GPU-prior devices: "
         "priced from their kernel prior, AdamW).")


@click.command()
@click.argument("models", nargs=-1, required=True, type=click.Path(exists=False))
@spec_options(predict_many)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list (one object per "
              "model and batch) instead of the table.")
@click.option("--keep-going", is_flag=True, help="A model that cannot be extracted gets its "
              "error line on stderr and the others are predicted (exit 2 at the end); by "
              "default the first such model ends the run.")
@click.option("--workers", type=click.IntRange(1, 256), default=1, show_default=True,
              help="Processes to extract the models in.")
def predict(models: tuple[str, ...], as_json: bool, keep_going: bool, workers: int, **opts: Any) -> None:
    """Predict the metrics of ONNX MODELS (files or folders of .onnx) on a device."""
    kwargs = spec_values(predict_many, opts)  # the options of perfseer_rt/predict/options.py
    failed: list[str] = []

    def report(model: str, exc: PerfSeerError) -> None:
        failed.append(model)
        click.echo(f"perfseer-rt: error: {exc}", err=True)  # named by its model (predict_many)

    results = predict_many(expand_models(models), kwargs.pop("batches", [None]), workers=workers,
                           on_error=report if keep_going else None, **kwargs)
    if as_json:
        emit_json(results)
    else:
        click.echo(render_table(results))
    if failed:
        click.echo(f"perfseer-rt: {len(failed)} of {len(failed) + len({r['model'] for r in results})} "
                   "model(s) could not be extracted or lie far outside the predictor's domain "
                   "(their errors are above)", err=True)
        sys.exit(2)


@click.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def devices(ctx: click.Context, as_json: bool) -> None:
    """List the predictors (shipped and calibrated) with their test accuracy;
    the subcommands add and remove your own GPUs (from their spec sheets)."""
    if ctx.invoked_subcommand is not None:
        return
    rows = [{**r, "train_mode": summary(r["device"])} for r in device_rows()]
    if as_json:
        emit_json(rows)
        return
    if not rows:
        click.echo("no predictors installed")
    for r in rows:
        origin = (f"calibrated from {r['base']}" if r.get("base")
                  else f"{r['configurations']} training configs")
        click.echo(f"{r['device']}: {r['description']}  ({origin}; models "
                   f"{', '.join(r['models'])}, default {r['default_model']}"
                   + "".join(f"; {mode}: {name}" for mode, name in sorted(r.get("default_model_by_mode", {}).items())
                             if name != r["default_model"]) + ")")
        if r.get("local_cpu_match") is not None:
            click.echo("  this machine's CPU: " + ("matches" if r["local_cpu_match"] else
                                                   "differs (run `perfseer-rt calibrate`)"))
        if r.get("kind") == "gpu-prior":
            click.echo(f"  provenance: {r['predictor']['provenance']}")
        if r.get("leave_one_gpu_out"):
            click.echo(f"  per-operator MAPE with this GPU held out: "
                       f"{r['leave_one_gpu_out']['mape']:.1f} % (reports/gpu-prior)")
        if r.get("whole_model"):
            w = r["whole_model"]
            click.echo(f"  whole-model latency MAPE: {w['mape']:.1f} % on {w['labels']} timings "
                       f"measured by others ({w['source']})")
        for x in r["metrics"]:
            mape = "n/a" if x["test_mape_pct"] is None else f"{x['test_mape_pct']:.2f} %"
            click.echo(f"  {x['name']:<20} [{x['unit']}]  "
                       f"{'cross-validated' if r.get('base') else 'test'} MAPE {mape}")
        if r.get("train_mode"):
            t = r["train_mode"]
            click.echo(f"  training step (--mode train): {t['description']}")
            if t.get("whole_model"):
                w = t["whole_model"]
                click.echo(f"    forward + backward MAPE: {w['mape']:.1f} % on {w['labels']} training "
                           f"runs measured by others ({w['source']})")
            for x in t["metrics"]:
                mape = "n/a" if x["test_mape_pct"] is None else f"{x['test_mape_pct']:.2f} %"
                click.echo(f"    {x['name']:<18} [{x['unit']}]  test MAPE {mape}")


def _judged(c: dict[str, Any]) -> str:
    how = ("interval upper end" if c["judged_by"] == "interval_upper"
           else "predicted value, no interval")
    return (f"{c['metric']} {_fmt(c['judged'])} {c.get('unit') or ''} ({how}) "
            f"{'<=' if c['ok'] else '>'} limit {_fmt(c['limit'])}")


@click.command()
@click.argument("model", type=click.Path(dir_okay=False))
@spec_options(do_check)
@click.option("--json", "as_json", is_flag=True, help="Print the verdict as JSON.")
def check(model: str, as_json: bool, **opts: Any) -> None:
    """Does MODEL meet the budget on a device? Exit 0 yes, 1 no, 2 bad input.

    A prediction with an interval is judged by its upper end."""
    verdict = do_check(model, **spec_values(do_check, opts))  # perfseer_rt/predict/options.py
    if as_json:
        emit_json(verdict)
    else:
        p = verdict["prediction"]
        click.echo(f"{'PASS' if verdict['ok'] else 'FAIL'}  {p['model']} batch {p['batch']} "
                   f"on {p['device']}")
        for c in verdict["checks"]:
            click.echo(f"  {_judged(c)}")
        for w in p.get("warnings") or []:
            click.echo(f"  warning: {w}")
    sys.exit(0 if verdict["ok"] else 1)


@click.command()
@click.argument("model", type=click.Path(dir_okay=False))
@spec_options(do_fit)
@click.option("--dim", "dim", default=None, metavar="NAME",
              help="Search this named input dim (e.g. seq) instead of the batch.")
@click.option("--max-value", type=click.IntRange(min=1), default=1 << 16, show_default=True,
              help="Largest value to try.")
@click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON.")
def fit(model: str, dim: str | None, max_value: int, as_json: bool, **opts: Any) -> None:
    """The largest batch (or --dim value) of MODEL within budget on a device
    (--max-memory-mb, or the usable memory of --mig-profile on a MIG GPU).

    Judged by the upper end of each prediction's interval when there is one.
    Exit 0 with an answer, 1 when even 1 breaks the budget, 2 on bad input."""
    kwargs = spec_values(do_fit, opts)  # perfseer_rt/predict/options.py
    kwargs.setdefault("max_memory_mb", None)
    ans = do_fit(model, dim=dim, max_value=max_value, **kwargs)
    if as_json:
        emit_json(ans)
    else:
        p = ans["prediction"]
        if ans["value"] is None:
            click.echo(f"nothing fits: {ans['dim']} 1 of {p['model']} on {p['device']} "
                       "breaks the budget")
        else:
            click.echo(f"{ans['dim']} {ans['value']}: the largest that fits "
                       f"({p['model']} on {p['device']})")
        for c in ans["checks"]:
            click.echo(f"  {_judged(c)}")
        if ans["next"] is not None and ans["value"] is not None:
            broke = [c for c in ans["next_checks"] if not c["ok"]]
            click.echo(f"  {ans['dim']} {ans['value'] + 1} would not: "
                       + "; ".join(_judged(c) for c in broke))
        if p.get("mig"):
            click.echo(f"  MIG on {p['mig']['gpu']}: smallest slice {p['mig'].get('profile')}")
    sys.exit(0 if ans["value"] is not None else 1)
