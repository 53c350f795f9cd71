"""``perfseer-rt devices add-gpu / remove / gpu-specs``: a user's GPU from its
spec sheet, stored under PERFSEER_RT_HOME; bad input is one line and exit 2,
and nothing is written."""

import json

import pytest
from click.testing import CliRunner

from perfseer_rt.cli import main
from perfseer_rt.gpu import spec_store
from perfseer_rt.gpu.spec_sheet import read_sheet
from perfseer_rt.gpu.spec_store import shipped_sheet, user_gpu_specs


@pytest.fixture()
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFSEER_RT_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def assert_refused(res, *fragments):
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("perfseer-rt: error: ")
    for f in fragments:
        assert f in lines[0], lines[0]


def test_add_a_downclocked_card_and_read_it_back(home):
    res = cli("devices", "add-gpu", "my-4090", "--from", "rtx-4090", "--set", "boost_clock_mhz=2235",
              "--set", "fp32_tflops=73.2")
    assert res.exit_code == 0, res.output
    path = home / "devices" / "my-4090" / "gpu-spec.json"
    assert str(path) in res.stdout and "2235 MHz" in res.stdout
    sheet = read_sheet(path)
    base = shipped_sheet("rtx-4090")
    assert (sheet.boost_clock_mhz, sheet.fp32_tflops, sheet.sms) == (2235.0, 73.2, base.sms)
    assert "--set boost_clock_mhz=2235" in sheet.sources["boost_clock_mhz"]
    assert sheet.sources["memory_bandwidth_gbs"] == base.sources["memory_bandwidth_gbs"]
    assert user_gpu_specs(home / "devices") == {"my-4090": (path, sheet)}
    listed = cli("devices", "gpu-specs", "--json")
    rows = {r["name"]: r for r in json.loads(listed.stdout)}
    assert rows["my-4090"]["origin"] == "user" and rows["rtx-4090"]["origin"] == "shipped"
    assert rows["my-4090"]["boost_clock_mhz"] == 2235.0
    shown = cli("devices", "gpu-specs", "my-4090")
    assert json.loads(shown.stdout) == sheet.to_dict()
    table = cli("devices", "gpu-specs")
    assert table.exit_code == 0 and "my-4090" in table.stdout and "user" in table.stdout


def test_add_from_a_spec_file_with_json_output(home, tmp_path):
    doc = shipped_sheet("l4").to_dict()
    doc["name"] = "NVIDIA L4 (my cloud)"
    spec = tmp_path / "l4.json"
    spec.write_text(json.dumps(doc))
    res = cli("devices", "add-gpu", "cloud-l4", "--spec", spec, "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["device"] == "cloud-l4" and out["spec"] == doc
    assert read_sheet(out["path"]).name == "NVIDIA L4 (my cloud)"


def test_an_existing_gpu_is_replaced_only_with_force(home):
    assert cli("devices", "add-gpu", "g", "--from", "t4").exit_code == 0
    assert_refused(cli("devices", "add-gpu", "g", "--from", "a10"), "exists", "--force")
    assert read_sheet(home / "devices" / "g" / "gpu-spec.json").name == "Tesla T4"
    assert cli("devices", "add-gpu", "g", "--from", "a10", "--force").exit_code == 0
    assert read_sheet(home / "devices" / "g" / "gpu-spec.json").name == "NVIDIA A10"


@pytest.mark.parametrize("name,fragment", [
    ("h100", "shipped with perfseer-rt"),          # a shipped predictor
    ("rtx-4090", "shipped with perfseer-rt"),      # a shipped sheet
    ("../escape", "use letters, digits"),
    ("a/b", "use letters, digits"),
    (".hidden", "use letters, digits"),
    ("", "use letters, digits"),
])
def test_shipped_and_unsafe_names_are_refused(home, name, fragment):
    assert_refused(cli("devices", "add-gpu", name, "--from", "t4"), fragment)
    assert not (home / "devices").exists() or not any((home / "devices").iterdir())


def test_a_bad_spec_exits_2_with_one_line_naming_the_field_and_writes_nothing(home, tmp_path):
    doc = shipped_sheet("rtx-4090").to_dict()
    doc["memory_bandwidth_gbs"] = 1e9
    spec = tmp_path / "bad.json"
    spec.write_text(json.dumps(doc))
    assert_refused(cli("devices", "add-gpu", "bad", "--spec", spec),
                   str(spec), "spec field memory_bandwidth_gbs:", "not plausible")
    del doc["sms"]
    doc["memory_bandwidth_gbs"] = 1008
    spec.write_text(json.dumps(doc))
    assert_refused(cli("devices", "add-gpu", "bad", "--spec", spec), "spec field sms: missing")
    spec.write_text("{not json")
    assert_refused(cli("devices", "add-gpu", "bad", "--spec", spec), "not JSON")
    assert_refused(cli("devices", "add-gpu", "bad", "--spec", tmp_path / "absent.json"), "cannot read")
    assert_refused(cli("devices", "add-gpu", "bad", "--from", "rtx-4090", "--set", "boost_clock_mhz=1500"),
                   "spec field fp32_tflops:", "off 2 x sms")
    assert_refused(cli("devices", "add-gpu", "bad", "--from", "rtx-4090", "--set", "l2_cache_mb=lots"),
                   "spec field l2_cache_mb:")
    assert_refused(cli("devices", "add-gpu", "bad", "--from", "rtx-4090", "--set", "mig=h999-1gb"),
                   "spec field mig:", "not a MIG profile table")
    assert_refused(cli("devices", "add-gpu", "bad", "--from", "rtx-9090"), "no shipped GPU spec sheet")
    assert_refused(cli("devices", "add-gpu", "bad"), "--spec FILE.json or")
    assert_refused(cli("devices", "add-gpu", "bad", "--spec", spec, "--from", "t4"), "one of them")
    assert not (home / "devices").exists() or not any((home / "devices").iterdir())


def test_a_failed_write_leaves_no_folder(home, monkeypatch):
    def broken(path, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(spec_store, "atomic_write_bytes", broken)
    with pytest.raises(OSError):
        spec_store.add_user_gpu(home / "devices", "full", shipped_sheet("t4"))
    assert not (home / "devices" / "full").exists()


def test_remove_deletes_only_user_gpus(home):
    assert cli("devices", "add-gpu", "mine", "--from", "a10g").exit_code == 0
    calibrated = home / "devices" / "local-cpu"
    calibrated.mkdir(parents=True)
    (calibrated / "manifest.json").write_text("{}")
    res = cli("devices", "remove", "mine")
    assert res.exit_code == 0 and "removed GPU 'mine'" in res.stdout
    assert not (home / "devices" / "mine").exists()
    assert_refused(cli("devices", "remove", "mine"), "no user GPU 'mine'")
    assert_refused(cli("devices", "remove", "local-cpu"), "no user GPU 'local-cpu'")
    assert_refused(cli("devices", "remove", "h100"), "shipped devices cannot be removed")
    assert (calibrated / "manifest.json").exists()
    # and a calibrated entry's name cannot be taken by a GPU
    assert_refused(cli("devices", "add-gpu", "local-cpu", "--from", "t4", "--force"), "another kind of device")
    assert not (calibrated / "gpu-spec.json").exists()


def test_the_devices_listing_still_answers(home):
    res = cli("devices", "--json")
    assert res.exit_code == 0, res.output
    assert {r["device"] for r in json.loads(res.stdout)} >= {"h100-sxm", "rtx-4090", "cpu-amd-epyc-1t"}
    assert cli("devices").exit_code == 0
    helped = cli("devices", "--help")
    assert all(c in helped.stdout for c in ("add-gpu", "remove", "gpu-specs"))


def test_a_broken_user_sheet_is_named_with_the_way_out(home):
    assert cli("devices", "add-gpu", "mine", "--from", "t4").exit_code == 0
    path = home / "devices" / "mine" / "gpu-spec.json"
    doc = json.loads(path.read_text())
    doc["sms"] = -1
    path.write_text(json.dumps(doc))
    assert_refused(cli("devices", "gpu-specs"), str(path), "spec field sms:", "devices remove mine")
    assert cli("devices", "remove", "mine").exit_code == 0
    assert cli("devices", "gpu-specs").exit_code == 0
