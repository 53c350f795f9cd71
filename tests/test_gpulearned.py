"""The learned GPU layer's training side (training/gpulearned) and its runtime
(perfseer_rt/gpu/learned.py): labels from public records, kernel data, the
layer extrapolation, the fit, the export round trip."""

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest

torch = pytest.importorskip("torch")

from perfseer_rt import extract  # noqa: E402
from perfseer_rt.errors import DeviceError  # noqa: E402
from perfseer_rt.gpu import learned as L  # noqa: E402
from perfseer_rt.gpu import learned_features as LF  # noqa: E402
from perfseer_rt.gpu import step  # noqa: E402
from perfseer_rt.gpu.precision import get_precision  # noqa: E402
from perfseer_rt.gpu.spec_store import shipped_sheet  # noqa: E402
from tests.gpu_models import transformer  # noqa: E402
from training.gpulearned import fit as FT  # noqa: E402
from training.gpulearned import labels as LB  # noqa: E402
from training.gpulearned import tables as T  # noqa: E402
from training.gpulearned.__main__ import main as gl_main  # noqa: E402
from training.gpulearned.export import export  # noqa: E402
from training.gpulearned.report import accuracy_block  # noqa: E402
from training.gpulearned.tables import Label, extrapolate, label_data  # noqa: E402

SPEC = shipped_sheet("rtx-4090").to_gpu_spec()


def _label(path, batch=4, mode="inference", ms=1.0):
    return Label(str(path), batch, "rtx-4090", "amp-fp16", "nchw", mode, "sgd" if mode == "train" else None,
                 True, ms, "test/tfm", "transformer", "test")


@pytest.fixture(scope="module")
def layer_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tfm")
    out = {}
    for k in (1, 2, 3):
        out[k] = folder / f"tfm{k}.onnx"
        onnx.save(transformer(seq=32, dim=64, heads=2, layers=k), out[k])
    return out


def test_a_timm_record_becomes_a_label_only_with_its_rebuild(tmp_path):
    rec = {"onnx": "torchscript/m@224.onnx", "env": {"gpu_name": "NVIDIA GeForce RTX 3090", "torch_version": "1.13"},
           "setup": {"mode": "train", "precision": "amp-fp16", "layout": "nhwc"}, "batch": 256,
           "metrics": {"step_ms": 12.5}, "group": "resnet", "arch_kind": "cnn"}
    assert LB.timm_label(rec, tmp_path) is None
    (tmp_path / "torchscript").mkdir()
    (tmp_path / "torchscript" / "m@224.onnx").write_bytes(b"")
    lab = LB.timm_label(rec, tmp_path)
    assert (lab.gpu, lab.mode, lab.optimizer, lab.layout, lab.sdpa, lab.ms) == (
        "rtx-3090", "train", "sgd-momentum", "nhwc", False, 12.5)
    assert LB.sheet_of("AMD Instinct MI100") is None


def test_the_repeated_layer_extrapolates_exactly(layer_files):
    d1, d2, d3 = (label_data(_label(layer_files[k]), SPEC) for k in (1, 2, 3))
    e = extrapolate(d1, d2, 3)
    assert e.launches == pytest.approx(d3.launches) and e.host_ms == pytest.approx(d3.host_ms)
    assert (e.roof * e.count).sum() == pytest.approx((d3.roof * d3.count).sum(), rel=1e-9)
    assert e.count.sum() == pytest.approx(d3.count.sum())


def test_repeated_kernels_are_kept_once_with_their_count(layer_files):
    d = label_data(_label(layer_files[3]), SPEC)
    table = step.kernels(extract(str(layer_files[3]), batch=4), step.StepConfig(get_precision("amp-fp16")))
    assert d.count.sum() == len(table) and len(d.roof) < len(table)


def test_the_fit_recovers_a_known_correction_of_the_roofline(layer_files):
    """Targets made from the roofline and the host time by known factors (a
    mechanism test: no measurement is made up), small batches host-bound and
    large ones GPU-bound: the fitted layer reproduces them."""
    data = [label_data(_label(layer_files[k], batch=b), SPEC) for k in (1, 2, 3) for b in (2, 64, 2048, 8192)]
    y = np.array([step.total_ms(3.0 * (d.roof * d.count).sum() + 0.003 * d.launches, 0.5 * d.host_ms)
                  for d in data])
    model = FT.fit(data, y, ["g"] * len(data), FT.FitConfig(epochs=600, lr=2e-2, weight_decay=0.0))
    pred = FT.predict(model, data)
    assert np.max(np.abs(pred / y - 1)) < 0.05
    assert float(torch.exp(model.log_host_scale)) == pytest.approx(0.5, rel=0.1)


def _priced_by(model, table) -> np.ndarray:
    """What ``model`` (a fitted StepModel) makes of ``table``'s kernels on SPEC."""
    x = torch.from_numpy(np.ascontiguousarray(LF.features(table, SPEC, "nchw", True)[:, model.columns]))
    t_c, t_m = LF.roofline_ms(table, SPEC)
    with torch.no_grad():
        return np.maximum(np.maximum(t_c, t_m), 1e-6) * np.exp(model.mlp(x).double().numpy()) + \
            float(torch.exp(model.log_launch_ms)) * table["launches"]


def test_the_exported_layer_prices_kernels_as_the_fitted_one(tmp_path, layer_files):
    data = [label_data(_label(layer_files[k]), SPEC) for k in (1, 2)]
    model = FT.fit(data, np.array([1.0, 2.0]), ["g", "g"], FT.FitConfig(epochs=5))
    export({"inference": model, "train": model}, tmp_path, {"provenance": "test", "accuracy": None})
    doc = json.loads((tmp_path / "learned.json").read_text())
    assert doc["features"] == LF.names() and doc["format"] == L.FORMAT
    assert sorted(p.name for p in tmp_path.glob("*.onnx")) == ["learned.onnx"]  # one model, one file
    layer = L.load_learned(str(tmp_path))
    table = step.kernels(extract(str(layer_files[2]), batch=4), step.StepConfig(get_precision("amp-fp16")))
    assert layer.kernel_ms(table, SPEC, "nchw", True) == pytest.approx(_priced_by(model, table), rel=1e-4)
    assert layer.host_scale("train") == pytest.approx(float(torch.exp(model.log_host_scale)))


def test_a_layer_fitted_without_a_feature_reads_only_the_others(tmp_path, layer_files):
    """``FitConfig.drop``: the fit, its export and the runtime leave the
    named column out (``learned.json`` names what the files read); a layer
    naming a feature this version does not compute is refused."""
    data = [label_data(_label(layer_files[k]), SPEC) for k in (1, 2)]
    cfg = FT.FitConfig(epochs=5, drop=("log2_bytes_over_l2",))
    model = FT.fit(data, np.array([1.0, 2.0]), ["g", "g"], cfg)
    assert model.mlp.net[0].in_features == len(LF.names()) - 1
    export({"inference": model, "train": model}, tmp_path, {"provenance": "test", "accuracy": None})
    doc = json.loads((tmp_path / "learned.json").read_text())
    assert doc["features"] == [n for n in LF.names() if n != "log2_bytes_over_l2"]
    layer = L.load_learned(str(tmp_path))
    table = step.kernels(extract(str(layer_files[2]), batch=4), step.StepConfig(get_precision("amp-fp16")))
    assert layer.kernel_ms(table, SPEC, "nchw", True) == pytest.approx(_priced_by(model, table), rel=1e-4)
    doc["features"][0] = "not_a_feature"
    (tmp_path / "learned.json").write_text(json.dumps(doc))
    L.load_learned.cache_clear()
    with pytest.raises(DeviceError, match="'features' must name columns"):
        L.load_learned(str(tmp_path))
    L.load_learned.cache_clear()
    with pytest.raises(ValueError, match="no feature named nope"):
        FT.fit(data, np.array([1.0, 2.0]), ["g", "g"], FT.FitConfig(epochs=1, drop=("nope",)))


def test_cv_refuses_an_unknown_drop_before_reading_any_data(tmp_path, capsys):
    """``--drop`` is checked first: one line and exit 2, nothing built."""
    assert gl_main(["cv", "--cache", str(tmp_path / "cache"), "--drop", "log2_m+nope",
                    "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip().startswith("error: --drop: no feature named nope;")
    assert not (tmp_path / "cache").exists() and not (tmp_path / "out").exists()


def test_a_layer_per_mode_answers_each_mode_from_its_own_model(tmp_path, layer_files):
    """Two fits (other group weighting) exported as a layer per mode: each
    mode is priced by its own model and host scale, the single-model file
    of an earlier export is removed, and a layer whose mode file is missing
    is refused with a DeviceError."""
    data = [label_data(_label(layer_files[k]), SPEC) for k in (1, 2)]
    one = FT.fit(data, np.array([1.0, 2.0]), ["a", "b"], FT.FitConfig(epochs=5))
    (tmp_path / "learned.onnx").write_bytes(b"stale")
    two = FT.fit(data, np.array([3.0, 1.0]), ["a", "b"], FT.FitConfig(epochs=5, group_power=0.5))
    export({"inference": one, "train": two}, tmp_path, {"provenance": "test", "accuracy": None})
    assert sorted(p.name for p in tmp_path.glob("*.onnx")) == ["learned-inference.onnx", "learned-train.onnx"]
    layer = L.load_learned(str(tmp_path))
    table = step.kernels(extract(str(layer_files[2]), batch=4), step.StepConfig(get_precision("amp-fp16")))
    inf, train = (layer.kernel_ms(table, SPEC, "nchw", True, mode) for mode in ("inference", "train"))
    assert inf == pytest.approx(_priced_by(one, table), rel=1e-4)
    assert train == pytest.approx(_priced_by(two, table), rel=1e-4)
    assert not np.allclose(inf, train)
    (tmp_path / "learned-train.onnx").unlink()
    L.load_learned.cache_clear()
    with pytest.raises(DeviceError, match="a layer file for each of inference, train"):
        L.load_learned(str(tmp_path))


def test_cross_validation_keeps_each_fold_and_a_rerun_reuses_it(tmp_path, layer_files, monkeypatch):
    """With a fold store, a second run of the same folds and setting fits
    nothing and returns the same predictions; another setting, or other
    labels, is another fold."""
    labels = [_label(layer_files[k], batch=b) for k in (1, 2) for b in (2, 64)]
    data = [label_data(lab, SPEC) for lab in labels]
    y, groups, folds = np.array([1.0, 2.0, 1.5, 3.0]), ["a", "a", "b", "b"], ["f0", "f1", "f0", "f1"]
    ids = [T.label_id(lab) for lab in labels]
    assert len(set(ids)) == len(ids)
    cfg = FT.FitConfig(epochs=3)
    first = FT.cross_validate(data, y, groups, folds, cfg, progress=False, store=tmp_path, ids=ids)
    assert len(list(tmp_path.glob("*.npy"))) == 2
    monkeypatch.setattr(FT, "fit", lambda *a, **k: pytest.fail("a kept fold was fitted again"))
    again = FT.cross_validate(data, y, groups, folds, cfg, progress=False, store=tmp_path, ids=ids)
    assert np.array_equal(first, again)
    train, test = np.array([True, False, True, False]), np.array([False, True, False, True])
    keys = {FT.fold_key(FT.FitConfig(epochs=3, group_power=p), ids, v, train, test)
            for p, v in ((1.0, y), (0.5, y), (1.0, y * 2))}
    assert len(keys) == 3


def test_ablation_variants_change_only_what_they_name(layer_files):
    """``training.gpulearned.ablate``: ``drop`` removes exactly the named
    columns, ``add:clock`` appends the GPU's log2 boost clock (GHz) as one
    column, ``l2share:A`` recomputes the memory roofline, ``seed:N`` and
    ``groups:P`` keep the data and change only the fit, ``A,B`` applies
    both, ``transposes`` takes the data rebuilt with the layout transposes;
    an unknown feature is refused."""
    from training.gpulearned import ablate, dataset

    lab = _label(layer_files[1])
    data = [label_data(lab, SPEC)]
    names = LF.names()
    dropped, cfg = ablate.variant_data("drop:log10_tc_us+log10_tm_us", [lab], data, 7)
    keep = [i for i, n in enumerate(names) if n not in ("log10_tc_us", "log10_tm_us")]
    assert cfg == FT.FitConfig(epochs=7, drop=("log10_tc_us", "log10_tm_us")) and dropped is data
    assert FT.columns(cfg, len(names)) == keep
    assert FT.columns(cfg, len(names) + 1) == keep + [len(names)]  # an added column is kept
    added, _ = ablate.variant_data("add:clock", [lab], data, 7)
    assert added[0].x.shape[1] == len(names) + 1
    assert np.allclose(added[0].x[:, -1], np.log2(SPEC.clock_mhz / 1000.0))
    assert np.array_equal(added[0].x[:, :-1], data[0].x)
    dram, _ = ablate.variant_data("l2share:0", [lab], data, 7)
    assert dram[0].roof == pytest.approx(dataset.retime_memory(data[0], SPEC, share=0.0).roof)
    assert np.array_equal(dram[0].count, data[0].count)
    same, cfg = ablate.variant_data("seed:3", [lab], data, 7)
    assert cfg.seed == 3 and same is data
    same, cfg = ablate.variant_data("groups:0.5", [lab], data, 7)
    assert cfg.group_power == 0.5 and cfg.seed == 0 and same is data
    both, cfg = ablate.variant_data("groups:0.5,drop:log10_tc_us+log10_tm_us", [lab], data, 7)
    assert cfg.group_power == 0.5 and cfg.drop == ("log10_tc_us", "log10_tm_us") and both is data
    with pytest.raises(ValueError, match="no feature named"):
        ablate.variant_data("drop:not_a_feature", [lab], data, 7)
    rebuilt = [label_data(lab, SPEC, transposes=True)]  # ``transposes``: the data rebuilt, same fit
    got, cfg = ablate.variant_data("transposes", [lab], data, 7, lambda: rebuilt)
    assert got is rebuilt and cfg == FT.FitConfig(epochs=7)
    with pytest.raises(ValueError, match="unknown variant"):  # without a way to rebuild: refused
        ablate.variant_data("transposes", [lab], data, 7)


def test_ablation_table_has_a_row_per_variant_gpu_and_mode():
    from training.gpulearned import ablate

    doc = {"command": "python -m training.gpulearned.ablate --cache DIR", "labels": 5, "rows": [
        {"variant": "base", "held_out": "rtx-4090", "inference": {"n": 4, "mape": 30.0, "median": 24.4,
                                                                  "within_20": 39.5}},
        {"variant": "seed:1", "held_out": "v100", "inference": {"n": 0},
         "train": {"n": 1, "mape": 5.0, "median": -5.0, "within_20": 100.0}}]}
    md = ablate.markdown(doc)
    assert "| base | rtx-4090 | inference | 4 | 30.0 | +24.4 | 39.5 |" in md
    assert "| seed:1 | v100 | train | 1 | 5.0 | -5.0 | 100.0 |" in md
    assert "| seed:1 | v100 | inference" not in md  # no labels, no row
    assert doc["command"] in md



def test_a_new_ablation_table_keeps_the_sections_written_by_hand():
    """``ablate`` rewrites only its own part of ``ablation.md``: the first
    time the text before the first section, after that what lies between
    its marks; the sections written by hand stay as they were."""
    from training.gpulearned import ablate

    hand = "## A run written up by hand\n\nIts rule and its numbers.\n"
    first = ablate.spliced("# old table\n\n| x |\n\n" + hand, "# table one\n")
    assert first.startswith(ablate.BEGIN + "\n# table one\n" + ablate.END)
    assert first.endswith(hand) and "old table" not in first
    second = ablate.spliced(first + "\n## Another\n", "# table two\n")
    assert "table one" not in second and "# table two" in second
    assert second.endswith(hand + "\n## Another\n")
    assert ablate.spliced(None, "# t\n") == f"{ablate.BEGIN}\n# t\n{ablate.END}\n"


def test_the_memory_roofline_moves_what_fits_in_l2_at_the_l2s_bandwidth():
    """A kernel's bytes that the L2 holds move at the L2's bandwidth, the
    rest at DRAM's; ``share`` 0 is DRAM only; a kernel far larger than the
    L2 tends to DRAM's time."""
    l2 = SPEC.l2_mb * 1e6
    l2_bw = LF.L2_BYTES_PER_CLOCK_SM * SPEC.sms * SPEC.clock_mhz * 1e6
    dram = SPEC.mem_bw_gbs * 1e9
    small, huge = np.array([l2 * LF.L2_SHARE / 2]), np.array([l2 * 1e3])
    assert LF.memory_ms(small, SPEC) == pytest.approx(small / l2_bw * 1e3)
    assert LF.memory_ms(small, SPEC, share=0.0) == pytest.approx(small / dram * 1e3)
    assert LF.memory_ms(huge, SPEC) == pytest.approx(huge / dram * 1e3, rel=2e-3)
    assert LF.memory_ms(huge, SPEC)[0] > huge[0] / dram * 1e3 * (1 - 1e-3)


def test_dram_only_data_is_retimed_to_the_l2_roofline(layer_files, monkeypatch):
    """``dataset.retime_memory`` (the ablation's ``l2share`` variants): data
    whose memory side was DRAM only becomes what the current features give,
    and ``share`` 0 takes it back."""
    from training.gpulearned import dataset

    lab = _label(layer_files[2], batch=64)
    now = label_data(lab, SPEC)
    memory_ms = LF.memory_ms
    with monkeypatch.context() as m:
        m.setattr(LF, "memory_ms", lambda nbytes, spec, share=0.0: memory_ms(nbytes, spec, 0.0))
        old = label_data(lab, SPEC)
    assert not np.allclose(old.roof, now.roof)  # the L2 moves some kernels
    back = dataset.retime_memory(old, SPEC)
    assert np.allclose(back.x, now.x, rtol=1e-5, atol=1e-4)
    assert back.roof == pytest.approx(now.roof, rel=1e-5)
    assert dataset.retime_memory(now, SPEC, share=0.0).roof == pytest.approx(old.roof, rel=1e-5)


def test_the_shipped_layer_states_the_accuracy_of_the_committed_report():
    """The shipped record's held-out figures (and so each mode's default model)
    are the ones reports/gpu-learned/cv.json measured, not a stale copy."""
    root = Path(__file__).resolve().parents[1]
    cv = json.loads((root / "reports/gpu-learned/cv.json").read_text())
    shipped = json.loads((root / "exported_models/_gpu_learned/learned.json").read_text())
    want = accuracy_block(cv)
    got = {k: v for k, v in shipped["accuracy"].items() if k in want}
    assert got == want
    assert set(shipped["accuracy"]["by_mode"]) == {"inference", "train"}


def test_group_weights_follow_the_power_of_the_group_size():
    """At power 1 each (source, GPU, mode) group weighs the same in all, at 0
    each label does; between, a group of n labels weighs n ** (1 - power)."""
    groups = ["a"] * 9 + ["b"]
    for power in (0.0, 0.5, 1.0):
        w = FT.group_weights(groups, power)
        assert w.mean() == pytest.approx(1.0)
        assert w[:9].sum() / w[9] == pytest.approx(9 ** (1 - power))


def test_the_report_prices_the_blend_and_names_each_modes_default(tmp_path, layer_files):
    """``report.write`` (a mechanism test on made-up predictions): the blend
    column is learned^(1-w) x prior^w, each mode and model gets its own
    interval, the record's by-mode block carries them, and the default per
    mode is the model with the lowest MAPE with the GPU held out."""
    from perfseer_rt.gpu.predictor import BLEND_PRIOR_WEIGHT as W
    from training.gpulearned import report

    base = _label(layer_files[1])
    labels = [replace(base, mode=m, batch=b) for m in ("inference", "train") for b in (1, 2, 4, 8, 16)]
    y = np.ones(10)
    prior = np.array([1.3] * 5 + [0.8] * 5)
    logo = np.array([1.05, 0.95, 1.1, 0.9, 1.0] + [1.3] * 5)  # inference: learned best; train: blend best
    cfgs = {"inference": FT.FitConfig(group_power=0.5), "train": FT.FitConfig()}
    doc = report.write(tmp_path, labels, y, prior, logo, logo, {}, cfgs, command="test")
    assert doc["by_mode"]["train"]["blend_logo"]["mape"] == pytest.approx(
        100 * abs(1.3 ** (1 - W) * 0.8 ** W - 1), abs=0.05)
    assert report.default_models(doc) == {"inference": "learned", "train": "blend"}
    acc = accuracy_block(doc)
    assert set(acc["by_mode"]["train"]) == {"learned", "prior", "blend"}
    lo, hi = acc["by_mode"]["inference"]["learned"]["log_q"]
    assert lo < 0 < hi and acc["by_mode"]["train"]["prior"]["log_q"][0] > 0  # prior under-predicts train
    md = (tmp_path / "README.md").read_text()
    assert "inference answered by the one at P = 0.5, training steps by the one at P = 1" in md
    assert "inference: learned, train: blend" in md


def test_the_committed_report_is_its_cv_json_rendered_with_the_kind_and_layout_table():
    """``reports/gpu-learned/README.md`` is exactly what ``markdown`` makes of
    the committed ``cv.json`` (no figure edited by hand), and the table by
    kind, layout and mode is the one its rows give: every row counted once,
    each cell's MAPE the rows' own."""
    from training.gpulearned import report

    root = Path(__file__).resolve().parents[1]
    cv = json.loads((root / "reports/gpu-learned/cv.json").read_text())
    assert (root / "reports/gpu-learned/README.md").read_text() == report.markdown(cv)
    table = report.row_tables(cv["rows"])["by_kind_layout"]
    assert cv["by_kind_layout"] == table
    assert sum(cell["prior"]["n"] for cell in table.values()) == len(cv["rows"])
    rows = [r for r in cv["rows"] if (r["kind"], r["layout"], r["mode"]) == ("cnn", "nhwc", "train")]
    mape = 100 * np.mean([abs(r["logo_ms"] / r["measured_ms"] - 1) for r in rows])
    assert table["cnn nhwc train"]["learned_logo"]["mape"] == pytest.approx(mape, abs=0.05)
