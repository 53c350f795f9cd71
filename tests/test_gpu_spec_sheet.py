"""GPU spec sheets (perfseer-rt-gpu-spec/1): the shipped ones, and every rule of
the schema refusing a sheet that breaks it, naming the field."""

import csv
import json
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import fields
from pathlib import Path

import pytest

from perfseer_rt.errors import PerfSeerError
from perfseer_rt.gpu.spec_sheet import (
    FIELD_NAMES,
    FORMAT,
    NUMERIC_FIELDS,
    SpecSheet,
    SpecSheetError,
    loads_sheet,
    parse_assignment,
    parse_sheet,
    read_sheet,
)
from perfseer_rt.gpu.spec_store import sheets_dir, shipped_gpu_specs, shipped_sheet
from perfseer_rt.predict.mig import MIG_PROFILES

PRIOR_CONFIGS = Path(__file__).resolve().parents[2] / "shared" / "external" / "neusight-kernels" / "device_configs"
ROOT = Path(__file__).resolve().parents[1]
SHIPPED = shipped_gpu_specs()
#: the GPUs the issue asks for, by the sheet that covers them
REQUIRED = ("h100-sxm", "h100-pcie", "h200-sxm", "a100-40gb-sxm", "a100-40gb-pcie", "a100-80gb-sxm",
            "a100-80gb-pcie", "l40s", "l4", "a10g", "a10", "t4", "v100-sxm2-16gb", "v100-sxm2-32gb",
            "v100-pcie-16gb", "v100-pcie-32gb", "p100-pcie-16gb", "rtx-3090", "rtx-4090", "rtx-5090",
            "rtx-6000-ada", "rtx-a6000", "a40", "p4")
SECONDARY = ("techpowerup", "baseten", "lockwood")


def test_the_schema_and_the_dataclass_have_the_same_fields():
    assert set(FIELD_NAMES) == {f.name for f in fields(SpecSheet)} - {"sources"}


def test_the_required_gpus_ship():
    assert set(REQUIRED) <= set(SHIPPED), sorted(set(REQUIRED) - set(SHIPPED))


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_every_shipped_sheet_is_valid_and_sourced(name):
    path, sheet = SHIPPED[name]
    assert read_sheet(path) == sheet  # parses, passes every consistency rule
    doc = json.loads(path.read_text())
    assert doc == sheet.to_dict()  # written in the canonical form (what add-gpu --from stores)
    for f in NUMERIC_FIELDS:
        if getattr(sheet, f) is None:
            continue
        src = sheet.sources[f]
        assert "https://" in src, (name, f)
        if any(s in src.lower() for s in SECONDARY):  # a secondary source says so
            assert "secondary" in src.lower() or "derived" in src.lower(), (name, f)
    assert sheet.mig is None or sheet.mig in MIG_PROFILES
    assert abs(sheet.fp32_tflops / sheet.derived_fp32_tflops - 1) < 0.05  # shipped sheets agree closely


def test_geforce_cards_accumulate_fp32_at_half_rate_the_others_at_full_rate():
    for name, (_, s) in SHIPPED.items():
        if s.fp16_tensor_tflops is None:
            continue
        ratio = s.fp16_tensor_fp32acc_tflops / s.fp16_tensor_tflops
        assert ratio == pytest.approx(0.5 if "GeForce" in s.name else 1.0, rel=0.01), name


def test_the_gpus_of_the_neusight_data_have_sheets():
    """Every NVIDIA GPU of data/neusight-e2e/labels.csv and of NeuSight's
    device configs (the kernel prior's GPUs) has a sheet of the same product
    name (as nvidia-smi prints it)."""
    names = {s.name for _, s in SHIPPED.values()}
    with open(ROOT / "data" / "neusight-e2e" / "labels.csv") as fh:
        labelled = {r["gpu"].replace("_", " ") for r in csv.DictReader(fh)}
    prior = {json.loads(p.read_text())["Device"] for p in PRIOR_CONFIGS.glob("*.json")}
    nvidia = {g for g in labelled | prior if not g.startswith("AMD")}
    assert len(nvidia) >= 8
    assert nvidia <= names, sorted(nvidia - names)


def test_to_gpu_spec_uses_the_fp32_accumulate_tensor_peak():
    s = shipped_sheet("rtx-4090")
    g = s.to_gpu_spec()
    assert (g.sms, g.cores_per_sm, g.clock_mhz, g.mem_gb, g.mem_bw_gbs, g.l2_mb) == (128, 128, 2520, 24, 1008, 72)
    assert g.fp32_gflops == pytest.approx(82600) and g.tc16_gflops == pytest.approx(165200)
    assert shipped_sheet("p100-pcie-16gb").to_gpu_spec().tc16_gflops is None


def test_an_unknown_shipped_sheet_lists_the_known_ones():
    with pytest.raises(PerfSeerError, match="rtx-4090"):
        shipped_sheet("rtx-9090")


def test_shipped_sheets_are_package_data():
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert '"perfseer_rt.gpu" = ["spec_sheets/*.json"]' in pyproject
    assert sheets_dir() == ROOT / "perfseer_rt" / "gpu" / "spec_sheets" or sheets_dir().is_dir()


# ---- each rule refuses a crafted sheet, naming the field ----

def good() -> dict:
    return shipped_sheet("rtx-4090").to_dict()


def _set(**kw):
    def mutate(doc):
        doc.update(kw)
    return mutate


def _drop(key):
    def mutate(doc):
        del doc[key]
    return mutate


def _drop_source(key):
    def mutate(doc):
        del doc["sources"][key]
    return mutate


BAD = [
    ("missing field", _drop("sms"), "sms", "missing"),
    ("missing nullable field", _drop("tf32_tensor_tflops"), "tf32_tensor_tflops", "write null"),
    ("unknown field", _set(shader_clock_mhz=2000), "shader_clock_mhz", "unknown field"),
    ("wrong format", _set(format="perfseer-rt-gpu-spec/9"), "format", "not supported"),
    ("no format", _drop("format"), "format", "missing"),
    ("string for a number", _set(sms="128"), "sms", "expected a number"),
    ("bool for a number", _set(memory_gib=True), "memory_gib", "expected a number"),
    ("fractional count", _set(sms=127.5), "sms", "whole number"),
    ("negative", _set(tdp_w=-450), "tdp_w", "must be positive"),
    ("zero", _set(l2_cache_mb=0), "l2_cache_mb", "must be positive"),
    ("not finite", _set(fp32_tflops=float("inf")), "fp32_tflops", "not a finite number"),
    ("nan", _set(boost_clock_mhz=float("nan")), "boost_clock_mhz", "not a finite number"),
    ("absurd bandwidth", _set(memory_bandwidth_gbs=1e9), "memory_bandwidth_gbs", "not plausible (expected 10-20000)"),
    ("absurd clock (GHz for MHz)", _set(boost_clock_mhz=2.52), "boost_clock_mhz", "not plausible"),
    ("null where required", _set(fp32_tflops=None), "fp32_tflops", "is null"),
    ("bad vendor", _set(vendor="AMD"), "vendor", "not one of NVIDIA"),
    ("bad architecture", _set(architecture="lovelace"), "architecture", "not one of"),
    ("bad form factor", _set(form_factor="usb"), "form_factor", "not one of"),
    ("empty name", _set(name="  "), "name", "not a name"),
    ("capability of another architecture", _set(compute_capability="8.6"), "compute_capability", "not a ada"),
    ("cores per SM of another architecture", _set(fp32_cores_per_sm=64, fp32_tflops=41.3), "fp32_cores_per_sm",
     "not what a ada SM has"),
    ("fp32 off the SM x clock product", _set(fp32_tflops=100.0), "fp32_tflops", "off 2 x sms"),
    ("fp32 accumulate above fp16 accumulate", _set(fp16_tensor_fp32acc_tflops=400.0, bf16_tensor_fp32acc_tflops=400.0),
     "fp16_tensor_fp32acc_tflops", "never runs faster"),
    ("tensor peak below fp32", _set(tf32_tensor_tflops=41.3), "tf32_tensor_tflops", "below fp32_tflops"),
    ("sparse bf16", _set(bf16_tensor_fp32acc_tflops=330.4), "bf16_tensor_fp32acc_tflops", "one rate"),
    ("sparse tf32", _set(tf32_tensor_tflops=165.2), "tf32_tensor_tflops", "half the fp16 fp32-accumulate rate"),
    ("fp8 below fp32", _set(fp8_tensor_tflops=50.0), "fp8_tensor_tflops", "below fp32_tflops"),
    ("fp8 below fp16 fp32acc", _set(fp8_tensor_tflops=100.0), "fp8_tensor_tflops", "never slower than fp16"),
    ("null tensor peak on a GPU that has it", _set(bf16_tensor_fp32acc_tflops=None), "bf16_tensor_fp32acc_tflops",
     "have bf16 tensor cores"),
    ("power limit below TDP",
     lambda d: (d.update(max_power_limit_w=300), d["sources"].update(max_power_limit_w="x" * 9)),
     "max_power_limit_w", "below tdp_w"),
    ("bad MIG name", _set(mig="H100 80GB!"), "mig", "not a MIG table name"),
    ("no sources", _drop("sources"), "sources", "missing"),
    ("a figure without its source", _drop_source("memory_bandwidth_gbs"), "sources.memory_bandwidth_gbs",
     "every figure needs its public source"),
    ("a source of an unknown field", lambda d: d["sources"].update(foo="x" * 10), "sources.foo", "not a field"),
    ("a source that is not text", lambda d: d["sources"].update(sms=7), "sources.sms", "expected the source"),
]


@pytest.mark.parametrize("what,mutate,field,fragment", BAD, ids=[b[0] for b in BAD])
def test_each_rule_refuses_a_bad_sheet_naming_the_field(what, mutate, field, fragment):
    doc = good()
    mutate(doc)
    with pytest.raises(SpecSheetError) as info:
        parse_sheet(doc)
    msg = str(info.value)
    assert info.value.field == field
    assert msg.startswith(f"spec field {field}: "), msg
    assert fragment in msg, msg
    assert "\n" not in msg
    assert isinstance(info.value, PerfSeerError)


def test_pre_ampere_formats_must_be_null():
    doc = shipped_sheet("v100-sxm2-16gb").to_dict()
    doc["bf16_tensor_fp32acc_tflops"] = 125.0
    doc["sources"]["bf16_tensor_fp32acc_tflops"] = "made up for the test"
    with pytest.raises(SpecSheetError, match="spec field bf16_tensor_fp32acc_tflops: volta GPUs have no bf16"):
        parse_sheet(doc)
    doc = shipped_sheet("p100-pcie-16gb").to_dict()
    doc["fp16_tensor_tflops"] = 40.0
    doc["sources"]["fp16_tensor_tflops"] = "made up for the test"
    with pytest.raises(SpecSheetError, match="pascal GPUs have no fp16 tensor cores"):
        parse_sheet(doc)


def test_the_document_itself_is_checked(tmp_path):
    with pytest.raises(SpecSheetError, match="a spec sheet is a JSON object, not list"):
        parse_sheet([1, 2])
    with pytest.raises(SpecSheetError, match=r"spec field sms: given twice"):
        loads_sheet('{"format": "%s", "sms": 1, "sms": 2}' % FORMAT)
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": ')
    with pytest.raises(SpecSheetError, match=rf"^{bad}: not JSON \("):
        read_sheet(bad)
    with pytest.raises(SpecSheetError, match=rf"^{tmp_path / 'none.json'}: cannot read the spec sheet"):
        read_sheet(tmp_path / "none.json")
    doc = good()
    doc["sms"] = "many"
    bad.write_text(json.dumps(doc))
    with pytest.raises(SpecSheetError, match=rf"^{bad}: spec field sms: expected a number"):
        read_sheet(bad)
    bad.write_bytes(b"\xff\xfe{}")
    with pytest.raises(SpecSheetError, match="not UTF-8"):
        read_sheet(bad)


def test_round_trip_and_overrides():
    s = shipped_sheet("rtx-4090")
    assert parse_sheet(json.loads(s.to_json())) == s
    slower = s.with_values({"boost_clock_mhz": 2235.0, "fp32_tflops": 73.2}, source="measured here")
    assert slower.boost_clock_mhz == 2235.0 and slower.sources["fp32_tflops"] == "measured here"
    assert slower.sources["sms"] == s.sources["sms"]
    with pytest.raises(SpecSheetError, match=r"spec field fp32_tflops: 82.6 TFLOPS is 58 % off .* = 52.4 TFLOPS"):
        s.with_values({"boost_clock_mhz": 1600.0}, source="the user")
    assert parse_assignment("boost_clock_mhz=2100") == ("boost_clock_mhz", 2100.0)
    assert parse_assignment("sms = 120") == ("sms", 120)
    assert parse_assignment("max_power_limit_w=null") == ("max_power_limit_w", None)
    assert parse_assignment("name=My card") == ("name", "My card")
    with pytest.raises(SpecSheetError, match="spec field sms: 'lots' is not a number"):
        parse_assignment("sms=lots")
    with pytest.raises(SpecSheetError, match="spec field warp_size: unknown field"):
        parse_assignment("warp_size=32")
    with pytest.raises(SpecSheetError, match="expected FIELD=VALUE"):
        parse_assignment("sms")


@pytest.mark.slow
def test_the_wheel_ships_every_sheet(tmp_path):
    """``pip install .`` carries the sheets: build the wheel of a copy of the
    package (no network: the build backend installed here; the predictors'
    folder left empty) and list it."""
    pytest.importorskip("setuptools")
    pytest.importorskip("wheel")
    src = tmp_path / "src"
    shutil.copytree(ROOT / "perfseer_rt", src / "perfseer_rt", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    (src / "exported_models").mkdir()
    shutil.copy(ROOT / "exported_models" / "__init__.py", src / "exported_models" / "__init__.py")
    res = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                          "-w", str(tmp_path / "dist"), str(src)], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("perfseer_rt-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"perfseer_rt/gpu/spec_sheets/{n}.json" for n in SHIPPED} <= names


URL = re.compile(r"https://[^\s,;)]+")


def doc_row(key: str, s: SpecSheet) -> str:
    """The row of docs/gpu-spec-sheets.md's table of shipped sheets."""
    def f(v):
        return "-" if v is None else f"{v:g}"

    urls: list[str] = []
    for name, src in s.sources.items():
        if name != "compute_capability":
            urls += [u for u in URL.findall(src) if u not in urls]
    links = " ".join(f"[{u.rstrip('/').rsplit('/', 1)[-1].replace('%20(1)', '')}]({u})" for u in urls)
    return (f"| `{key}` | {s.name} | {s.architecture} {s.compute_capability} | {s.sms} | {f(s.boost_clock_mhz)} | "
            f"{f(s.memory_gib)} | {f(s.memory_bandwidth_gbs)} | {f(s.l2_cache_mb)} | {f(s.fp32_tflops)} | "
            f"{f(s.tf32_tensor_tflops)} | {f(s.fp16_tensor_tflops)} | {f(s.fp16_tensor_fp32acc_tflops)} | "
            f"{f(s.bf16_tensor_fp32acc_tflops)} | {f(s.fp8_tensor_tflops)} | {f(s.tdp_w)} | {links} |")


def test_the_docs_table_shows_every_shipped_sheet_as_it_is():
    doc = (ROOT / "docs" / "gpu-spec-sheets.md").read_text().splitlines()
    shipped_part = doc[doc.index("## Shipped sheets"):]
    rows = [line for line in shipped_part if line.startswith("| `")]
    assert rows == [doc_row(k, s) for k, (_, s) in SHIPPED.items()]
    for f in FIELD_NAMES:  # and the schema table names every field
        assert f"| `{f}` |" in "\n".join(doc), f
