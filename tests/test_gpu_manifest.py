"""The gpu-prior device manifest is read strictly (perfseer_rt/gpu/manifest.py)."""

import copy
import json
from pathlib import Path

import pytest

from perfseer_rt.gpu.calibrate import Correction
from perfseer_rt.gpu.manifest import GpuPriorManifest, parse_gpu_prior
from perfseer_rt.predict import registry
from perfseer_rt.predict.manifest import ManifestError

ROOT = Path(__file__).parents[1]
GPU_ENTRIES = sorted(p for p in (ROOT / "exported_models").glob("*/manifest.json")
                     if json.loads(p.read_text()).get("kind") == "gpu-prior")


@pytest.fixture()
def doc():
    return json.loads((ROOT / "exported_models/h100/manifest.json").read_text())


@pytest.mark.parametrize("path", GPU_ENTRIES, ids=[p.parent.name for p in GPU_ENTRIES])
def test_shipped_gpu_prior_manifests_parse(path):
    doc = json.loads(path.read_text())
    m = parse_gpu_prior(doc)
    assert isinstance(m, GpuPriorManifest)
    assert m.device.name == path.parent.name
    assert m.gpu_spec.sms == doc["spec"]["Num_Sm"] and m.kernel_launch_ms == doc["kernel_launch_ms"]


def test_the_h100_entry_reads_as_its_document(doc):
    m = parse_gpu_prior(doc)
    assert m.spec.Num_Sm == 132 and m.spec.TC16_FLOPs == 989500
    assert m.memory_overhead.cuda_context_mib == 500.0 and m.calibration is None
    assert [x.name for x in m.metrics] == ["latency_ms", "peak_mem_mb"]


@pytest.mark.parametrize("where", [(), ("spec",), ("memory_overhead",), ("device",),
                                   ("training_data",)])
def test_a_missing_field_is_an_error_naming_it(doc, where):
    block = doc
    for k in where:
        block = block[k]
    for key in list(block):
        bad = copy.deepcopy(doc)
        target = bad
        for k in where:
            target = target[k]
        del target[key]
        name = ".".join([*where, key])
        with pytest.raises(ManifestError, match=rf"manifest field {name} is missing"):
            parse_gpu_prior(bad)


@pytest.mark.parametrize("where", [(), ("spec",), ("memory_overhead",)])
def test_an_unknown_field_is_an_error_naming_it(doc, where):
    target = doc
    for k in where:
        target = target[k]
    target["surprise"] = 1
    name = ".".join([*where, "surprise"])
    with pytest.raises(ManifestError, match=rf"manifest field {name} is not in schema"):
        parse_gpu_prior(doc)


def test_a_mistyped_field_is_an_error_naming_it(doc):
    doc["spec"]["Num_Sm"] = "many"
    with pytest.raises(ManifestError, match=r"spec\.Num_Sm: expected an integer"):
        parse_gpu_prior(doc)


def test_a_calibration_block_is_typed(doc):
    doc["calibration"] = {"alpha": 0.1, "beta": 1.0, "pairs": 5, "mape_before": 20.0,
                          "mape_after": 5.0, "families": ["linear", "bmm"]}
    assert parse_gpu_prior(doc).calibration == Correction(0.1, 1.0, 5, 20.0, 5.0, ("linear", "bmm"))
    doc["calibration"]["extra"] = 1
    with pytest.raises(ManifestError, match=r"calibration\.extra is not in schema"):
        parse_gpu_prior(doc)


def test_the_registry_refuses_a_bad_gpu_prior_entry(tmp_path, doc):
    del doc["kernel_launch_ms"]
    (tmp_path / "manifest.json").write_text(json.dumps(doc))
    with pytest.raises(ManifestError, match=r"manifest\.json: manifest field kernel_launch_ms is missing"):
        registry.typed_manifest(tmp_path / "manifest.json", doc)
