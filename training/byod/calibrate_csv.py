"""``python -m training.byod calibrate``: a CSV of measured models + a base
device -> a calibrated device entry, with its cross-validated error.

The few-shot path for a new ONNX device: no training, seconds. The base
device's shipped predictor predicts every model of the CSV; per metric, a
correction measured ~ base prediction is fitted
(:func:`perfseer_rt.calibrate.fit.fit_correction`) and its error estimated
by leave-one-out over the CSV's rows; the entry is written exactly as
``perfseer-rt calibrate`` writes one (:func:`perfseer_rt.calibrate.api.calibrate_from_measurements`),
so ``perfseer-rt predict --device NAME`` uses it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from perfseer_rt.calibrate.api import CalibrationResult, calibrate_from_measurements
from perfseer_rt.errors import PerfSeerError
from perfseer_rt.predict.registry import get_predictor, shipped_predictors, user_root
from training.byod.errors import ByodError
from training.byod.graphs import GraphCache, graphs_for
from training.byod.table import read_csv
from training.byod.train_csv import resolve_models

MIN_MODELS = 10


def calibrate_from_csv(csv: str | Path, model_column: str, metrics: Sequence[str], device: str, base: str, *,
                       batch_column: str | None = None, batch: int | None = None, model_format: str = "{}",
                       out: str | Path | None = None, overwrite: bool = False,
                       cache: GraphCache | None = None, description: str | None = None) -> CalibrationResult:
    """See the module doc. Raises ByodError on bad input (one line, the row named)."""
    try:
        base_pred = get_predictor(base)
        if device in shipped_predictors():
            raise ByodError(f"{device!r} is a shipped device; choose another --device")
        unknown = [m for m in metrics if m not in base_pred.metrics]
        if unknown:
            raise ByodError(f"base {base!r} predicts {', '.join(base_pred.metrics)}; cannot calibrate "
                            f"{', '.join(unknown)}")
        meas = read_csv(csv, model_column, metrics, batch_column, batch)
        if model_format != "{}":
            if model_format.count("{}") != 1:
                raise ByodError(f"--model-format {model_format!r} must contain '{{}}' once (where the cell goes), "
                                "e.g. --model-format 'nb201:{}'")
            meas.models = [model_format.replace("{}", m) for m in meas.models]
        keep = [i for i in range(len(meas)) if any(np.isfinite(meas.metrics[m][i]) for m in metrics)]
        if len(keep) < MIN_MODELS:
            raise ByodError(f"{meas.path}: {len(keep)} measured rows; calibration needs at least {MIN_MODELS}")
        refs = resolve_models(meas, model_column)
        graphs = graphs_for([refs[i] for i in keep], [meas.batches[i] for i in keep], cache or GraphCache(),
                            "graphs")
        rows = [{"name": meas.models[i], "batch": meas.batches[i],
                 **{m: (float(meas.metrics[m][i]) if np.isfinite(meas.metrics[m][i]) else None) for m in metrics}}
                for i in keep]
        folder = Path(out) if out else user_root() / device
        env = description or f"{device}: measurements from {Path(csv).name}"
        return calibrate_from_measurements(device, base, graphs, rows, folder, overwrite=overwrite, env=env,
                                           how=f"python -m training.byod calibrate: {len(rows)} measured models "
                                               f"from {Path(csv).name}")
    except PerfSeerError as exc:
        raise ByodError(str(exc)) from None
