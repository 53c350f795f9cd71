"""``perfseer-rt predict`` and ``perfseer-rt devices``."""

from __future__ import annotations

import click


def _table(results: list[dict]) -> str:
    lines = []
    for r in results:
        lines.append(f"{r['model']}  (device {r['device']}, batch {r['batch']})")
        for name, m in r["metrics"].items():
            lines.append(f"  {name:<22} {m['value']:>12.4g} {m['unit']}")
        if r["mig"]:
            mig = r["mig"]
            lines.append(f"  MIG ({mig['gpu']}): {mig['profile'] or 'none fits'} "
                         f"(needs {mig['required_mb']:.0f} MB incl. {100 * mig['margin']:.0f} % margin)")
        for w in r["warnings"]:
            lines.append(f"  warning: {w}")
    return "\n".join(lines)


@click.command()
@click.argument("models", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--batch", type=click.IntRange(min=1), default=None, help="Batch size (default 1).")
@click.option("--input", "inputs", multiple=True, metavar="NAME:D1xD2x...",
              help="Shape of one graph input (repeatable).")
@click.option("--device", default=None, help="Predictor device (see `perfseer-rt devices`).")
@click.option("--metrics", default=None, help="Comma-separated subset of the device's metrics.")
@click.option("--model", "model_name", default=None,
              help="Which of the device's predictors (default: the most accurate; see `perfseer-rt devices`).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
def predict(models, batch, inputs, device, metrics, model_name, as_json):
    """Predict the metrics of one or more ONNX MODELS on a device."""
    from perfseer_rt.cli import emit_json, parse_input_shapes
    from perfseer_rt.predict.api import predict as do_predict

    wanted = [m.strip() for m in metrics.split(",") if m.strip()] if metrics else None
    results = do_predict(list(models), batch=batch, device=device, metrics=wanted,
                         input_shapes=parse_input_shapes(inputs), model=model_name)
    if as_json:
        emit_json(results)
    else:
        click.echo(_table(results))


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def devices(as_json):
    """List the shipped predictors with their test accuracy."""
    from perfseer_rt.cli import emit_json
    from perfseer_rt.predict.registry import predictors

    rows = []
    for name, pred in sorted(predictors().items()):
        m = pred.manifest
        rows.append({"device": name, "description": m.device.description,
                     "metrics": [{"name": x.name, "unit": x.unit,
                                  "test_mape_pct": _acc(pred, x.name, "mape"),
                                  "test_within_10_pct": _acc(pred, x.name, "within_10")}
                                 for x in m.metrics],
                     "models": pred.model_names, "default_model": pred.default_model,
                     "mig_gpu": pred.mig_gpu,
                     "configurations": m.training_data.configurations if m.training_data
                     else None})
    if as_json:
        emit_json(rows)
        return
    if not rows:
        click.echo("no predictors installed")
    for r in rows:
        desc = r["description"]
        if isinstance(desc, dict):  # an environment block: name the hardware and runtime
            desc = ", ".join(str(desc[k]) for k in ("gpu_name", "cpu_model", "onnxruntime_version")
                             if desc.get(k))
        click.echo(f"{r['device']}: {desc}  ({r['configurations']} training configs; models "
                   f"{', '.join(r['models'])}, default {r['default_model']})")
        for x in r["metrics"]:
            mape = "n/a" if x["test_mape_pct"] is None else f"{x['test_mape_pct']:.2f} %"
            click.echo(f"  {x['name']:<20} [{x['unit']}]  test MAPE {mape}")


def _acc(pred, metric: str, field: str) -> float | None:
    acc = pred.test_accuracy(metric)
    return getattr(acc, field) if acc else None
