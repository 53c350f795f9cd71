"""A CPU device's run phase from the simulated arena (run_memory.json): the
file is read strictly, predict and calibrated entries use it, and the
network's run phase stays reachable."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from perfseer_rt.graph import extract
from perfseer_rt.predict import predict
from perfseer_rt.predict import run_memory as rm
from perfseer_rt.predict.manifest import ManifestError
from perfseer_rt.predict.ort_arena import footprint
from perfseer_rt.predict.registry import get_predictor
from perfseer_rt.predict.seernet_run import external_weights_mb, reported, run_predictor

EXAMPLE = Path(__file__).parents[1] / "examples" / "resnet18.onnx"
DEVICE = "cpu-amd-epyc-1t"


def shipped_doc() -> dict:
    return json.loads((get_predictor(DEVICE).folder / rm.RUN_MEMORY_FILE).read_text())


def test_the_shipped_file_is_valid_and_says_how_it_was_fitted():
    model = rm.parse(shipped_doc())
    assert model.arena_scale > 0 and set(model.weight_coefficients) <= set(rm.WEIGHT_COLUMNS)
    assert model.fitted_on["configurations"] > 1000 and "training.byod.run_memory" in model.fitted_on["command"]
    assert 0 < model.held_out["run_phase_mape"] < 100
    assert rm.parse(model.to_dict()) == model


@pytest.mark.parametrize("change, named", [
    (lambda d: d.pop("arena_scale"), "'arena_scale' missing"),
    (lambda d: d.update(colour="red"), "unknown field 'colour'"),
    (lambda d: d.update(arena_scale=0.0), "'arena_scale' is 0.0"),
    (lambda d: d.update(intercept_mb=float("nan")), "'intercept_mb' is nan"),
    (lambda d: d.update(intercept_mb=True), "'intercept_mb' is True"),
    (lambda d: d["weight_coefficients"].update(weight_conv1x1=-1.0), "weight_coefficients.weight_conv1x1"),
    (lambda d: d["weight_coefficients"].update(flops=1.0), "'weight_coefficients' must map"),
    (lambda d: d.update(version=99), "version 99"),
])
def test_a_bad_file_is_refused_naming_the_field(change, named):
    doc = shipped_doc()
    change(doc)
    with pytest.raises(ManifestError, match=named.replace("(", r"\(")):
        rm.parse(doc)


def test_an_unreadable_file_is_a_typed_error(tmp_path):
    (tmp_path / rm.RUN_MEMORY_FILE).write_text("{not json")
    with pytest.raises(ManifestError, match="cannot be read as JSON"):
        rm.of_folder(tmp_path)
    assert rm.of_folder(tmp_path / "none") is None


@pytest.mark.parametrize("batch", [1, 8])
def test_predict_reports_the_simulated_run_phase(batch):
    pred = get_predictor(DEVICE)
    model = pred.run_memory
    assert model is not None
    g = extract(EXAMPLE, batch=batch)
    raw, ext = run_predictor(pred, [g]), external_weights_mb([g])
    col = {n: j for j, n in enumerate(pred.outputs)}
    mem = pred.memory
    simulated = reported(pred, raw, ext, [g])
    network = reported(pred, raw, ext, [g], simulate_run=False)
    scale = pred.field_scale[mem.peak].factor if mem.peak in pred.field_scale else 1.0
    expected = (model.session_mb(g.u) + model.arena_scale * footprint(g.x, g.edge_index, g.edge_attr).resident
                / 2**20) * scale
    assert simulated[0, col[mem.run]] == pytest.approx(expected)
    assert network[0, col[mem.run]] != pytest.approx(expected)
    assert simulated[0, col[mem.load]] == network[0, col[mem.load]]    # the session phase is the network's
    assert simulated[0, col[mem.peak]] == max(simulated[0, col[mem.load]], simulated[0, col[mem.run]])
    parts = predict(EXAMPLE, device=DEVICE, batch=batch)[0]["metrics"]["peak_mem_mb"]["parts"]
    assert parts["inference_run_peak_mb"] == pytest.approx(expected)
    assert "arena simulated" in parts["run_phase_method"]


def test_the_run_phase_grows_with_the_batch_as_the_arena_does():
    model = get_predictor(DEVICE).run_memory
    assert model is not None
    small, large = (extract(EXAMPLE, batch=b) for b in (1, 16))
    run = model.run_phase_mb([small, large])
    session = model.session_mb(small.u)
    arena = [footprint(g.x, g.edge_index, g.edge_attr).resident / 2**20 for g in (small, large)]
    assert np.allclose(run - session, model.arena_scale * np.array(arena))
    assert model.session_mb(large.u) == session            # the weights do not change with the batch


def test_a_calibrated_entry_keeps_the_base_run_phase(tmp_path, monkeypatch):
    from perfseer_rt.calibrate.api import calibrate_from_measurements
    from perfseer_rt.calibrate.reference import references

    monkeypatch.setenv("PERFSEER_RT_HOME", str(tmp_path))
    refs = references()[:4]
    graphs = [extract(r.path, batch=r.batch) for r in refs]
    rows = [{"name": r.name, "latency_ms": 2.0 * (i + 1), "peak_mem_mb": 10.0 * (i + 1)} for i, r in enumerate(refs)]
    res = calibrate_from_measurements("mine", DEVICE, graphs, rows, tmp_path / "devices" / "mine")
    assert (res.folder / rm.RUN_MEMORY_FILE).is_file()
    assert get_predictor("mine").run_memory == get_predictor(DEVICE).run_memory
