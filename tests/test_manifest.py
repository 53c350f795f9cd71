"""The predictor manifest: one typed, versioned schema, read strictly."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from perfseer_rt.predict.manifest import KIND_SECTIONS, ManifestError, parse_manifest, read_manifest
from perfseer_rt.predict.registry import SEPARATE_SCHEMA_KINDS
from tests.manifest_versions import as_version

ROOT = Path(__file__).parents[1]
ALL_SHIPPED = sorted((ROOT / "exported_models").glob("*/manifest.json"))
#: Those under the strict schema; the rest have their own schema (gpu-prior).
SHIPPED = [p for p in ALL_SHIPPED
           if json.loads(p.read_text()).get("kind") not in SEPARATE_SCHEMA_KINDS]


@pytest.fixture()
def doc():
    return json.loads((ROOT / "exported_models/cpu-amd-epyc-1t/manifest.json").read_text())


@pytest.mark.parametrize("path", SHIPPED, ids=[p.parent.name for p in SHIPPED])
def test_shipped_manifests_parse_and_round_trip(path):
    doc = json.loads(path.read_text())
    m = read_manifest(path)
    assert m.to_dict() == doc
    assert m.kind == "seernet" and m.seernet.session.intra_op_num_threads == 1


def test_every_shipped_manifest_is_typed_or_a_named_pass_through_kind():
    from perfseer_rt.predict import registry

    registry.predictors.cache_clear()
    preds = registry.predictors()
    assert len(preds) >= len(ALL_SHIPPED) and SHIPPED
    for pred in preds.values():
        if pred.kind in SEPARATE_SCHEMA_KINDS:
            assert pred.schema is None
        else:
            assert pred.schema is not None and pred.schema.kind == pred.kind == "seernet"


def test_an_unknown_kind_is_refused_not_passed_through(doc):
    doc["kind"] = "gpu-prior2"
    with pytest.raises(ManifestError, match="unknown kind 'gpu-prior2'"):
        parse_manifest(doc)


@pytest.mark.parametrize("where, field", [
    ((), "created"), (("seernet",), "session"), (("seernet", "models", 0), "sha256"),
    (("training_data",), "batch_sizes"), (("seernet", "normalization", "global"), "std"),
    (("accuracy", "arch", "seernet", "latency_ms"), "count"),
])
def test_a_missing_field_is_named(doc, where, field):
    node = doc
    for k in where:
        node = node[k]
    del node[field]
    name = ".".join(str(k) for k in where if not isinstance(k, int))
    with pytest.raises(ManifestError, match="missing") as e:
        parse_manifest(doc)
    assert field in str(e.value) and name.split(".")[0] in str(e.value)


def test_unknown_fields_are_errors_not_ignored(doc):
    bad = copy.deepcopy(doc)
    bad["seernet"]["models"][0]["threads"] = 4
    with pytest.raises(ManifestError, match=r"seernet\.models\[0\]\.threads is not in schema"):
        parse_manifest(bad)
    bad = copy.deepcopy(doc)
    bad["extra"] = 1
    with pytest.raises(ManifestError, match="field extra is not in schema"):
        parse_manifest(bad)


def test_wrong_types_versions_and_kinds(doc):
    bad = copy.deepcopy(doc)
    bad["seernet"]["session"]["intra_op_num_threads"] = "1"
    with pytest.raises(ManifestError, match="session.intra_op_num_threads: expected an integer"):
        parse_manifest(bad)
    bad = copy.deepcopy(doc)
    bad["schema_version"] = 1
    with pytest.raises(ManifestError, match="migrate_manifest"):
        parse_manifest(bad)
    bad = copy.deepcopy(doc)
    bad["kind"] = "gpu-prior"
    with pytest.raises(ManifestError, match="unknown kind 'gpu-prior'"):
        parse_manifest(bad)
    bad = copy.deepcopy(doc)
    bad["seernet"]["default_model"] = "nope"
    with pytest.raises(ManifestError, match="default_model: 'nope' is not one of the models"):
        parse_manifest(bad)


def test_disagreement_and_scaled_intervals_are_checked_and_a_version_4_reads_without_them(doc):
    def with_scale(scale, floor, disagreement):
        bad = copy.deepcopy(doc)
        unc = bad["seernet"]["uncertainty"]
        unc["intervals"]["peak_mem_mb"].update(scale=scale, floor=floor)
        unc["disagreement"] = disagreement
        return bad

    ok = {"model": "seernet_gbm", "output": "gap", "thresholds": {"peak_mem_mb": 0.1}, "calibration": {}}
    m = parse_manifest(with_scale("disagreement", 0.05, ok))
    assert m.seernet.uncertainty.intervals["peak_mem_mb"].floor == 0.05
    assert m.seernet.uncertainty.disagreement.thresholds == {"peak_mem_mb": 0.1}
    for scale, floor, dis, message in [
            ("disagreement", 0.05, None, "needs seernet.uncertainty.disagreement"),
            ("disagreement", None, ok, "a floor > 0"),
            ("none", 0.05, ok, "floor: set on an unscaled interval"),
            ("wider", None, ok, "'wider' is not one of"),
            ("none", None, {**ok, "model": "nope"}, "disagreement.model: 'nope'"),
            ("none", None, {**ok, "thresholds": {"nope_ms": 0.1}}, "thresholds.nope_ms")]:
        with pytest.raises(ManifestError, match=message):
            parse_manifest(with_scale(scale, floor, dis))
    v4 = as_version(with_scale("none", None, ok), 4)
    parsed = parse_manifest(v4).seernet.uncertainty
    assert parsed.disagreement is None and {iv.scale for iv in parsed.intervals.values()} == {"none"}
    v4["seernet"]["uncertainty"]["disagreement"] = None
    with pytest.raises(ManifestError, match="not in schema version 4"):
        parse_manifest(v4)


def test_training_ops_are_typed_and_a_version_5_reads_without_them(doc):
    good = copy.deepcopy(doc)
    good["training_data"]["ops"] = {"Conv": 12, "LRN": 1}
    assert parse_manifest(good).training_data.ops == {"Conv": 12, "LRN": 1}
    bad = copy.deepcopy(good)
    bad["training_data"]["ops"] = {"Conv": "12"}
    with pytest.raises(ManifestError, match="training_data.ops"):
        parse_manifest(bad)
    v5 = as_version(good, 5)
    assert "ops" not in v5["training_data"] and parse_manifest(v5).training_data.ops is None
    v5["training_data"]["ops"] = None
    with pytest.raises(ManifestError, match="not in schema version 5"):
        parse_manifest(v5)


def test_a_new_kind_carries_its_own_section(doc, monkeypatch):
    """Another kind (e.g. a GPU prior) registers its section; the common part stays."""
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Prior:
        table: str

    monkeypatch.setitem(KIND_SECTIONS, "gpu-prior", Prior)
    new = {k: v for k, v in doc.items() if k != "seernet"}
    new.update(kind="gpu-prior", **{"gpu-prior": {"table": "roofline.json"}})
    m = parse_manifest(new)
    assert m.section == Prior("roofline.json") and m.to_dict() == new
    with pytest.raises(ManifestError, match="kind 'gpu-prior', not a seernet"):
        _ = m.seernet
    new["seernet"] = doc["seernet"]
    with pytest.raises(ManifestError, match="field seernet is not in schema"):
        parse_manifest(new)


def test_registry_refuses_a_bad_manifest(tmp_path, monkeypatch, doc):
    from perfseer_rt.predict import registry

    folder = tmp_path / "dev"
    folder.mkdir()
    del doc["seernet"]["normalization_baked_in"]
    (folder / "manifest.json").write_text(json.dumps(doc))
    monkeypatch.setattr(registry, "models_root", lambda: tmp_path)
    registry.predictors.cache_clear()
    try:
        with pytest.raises(ManifestError, match=r"manifest.json: manifest field "
                                                r"seernet.normalization_baked_in is missing"):
            registry.predictors()
    finally:
        registry.predictors.cache_clear()


def test_migrate_upgrades_a_version_3_manifest_once(tmp_path):
    from training.seernet.migrate_manifest import migrate

    doc = json.loads((ROOT / "exported_models" / "nb201-pixel3" / "manifest.json").read_text())
    v3 = tmp_path / "v3.json"
    v3.write_text(json.dumps(as_version(doc, 3)))
    assert migrate(str(v3)) and read_manifest(v3).seernet.field_scale is None
    assert not migrate(str(v3))  # current now
