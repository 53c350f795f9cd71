"""The options of predict and check live in one table
(perfseer_rt/predict/options.py): the click options, the service's query
parameters and OpenAPI page, and the keywords passed to the library all come
from it, so an option added there appears everywhere at once."""

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from perfseer_rt.cli import main
from perfseer_rt.cli.spec import spec_options, spec_values
from perfseer_rt.errors import OptionError
from perfseer_rt.predict import options
from perfseer_rt.predict.many import predict_many

ROOT = Path(__file__).resolve().parents[1]
RESNET = ROOT / "examples" / "resnet18.onnx"


def flags(command: click.Command) -> set[str]:
    return {o for p in command.params for o in getattr(p, "opts", []) if o.startswith("--")}


def test_cli_flags_are_the_table():
    from perfseer_rt.cli.predict import check, predict
    from perfseer_rt.predict.budget import check as do_check

    for command, fn in ((predict, predict_many), (check, do_check)):
        table = {opt.flag for opt, _ in options.options_for(fn)}
        assert table <= flags(command)
        assert flags(command) - table <= {"--json", "--keep-going", "--workers"}


def test_a_new_option_appears_on_the_cli_and_over_http(monkeypatch):
    """One Option added to the table, and a call that takes its keyword: the
    click command has the flag, the service's parameters and OpenAPI page
    have it, and its value reaches the call."""
    pytest.importorskip("fastapi")
    from perfseer_rt.serve.params import RequestLimits, openapi_parameters, parse_request

    new = options.Option("schedule", ("schedule",), "Learning-rate schedule.",
                         options.choice(("cosine", "step")), choices=("cosine", "step"))
    monkeypatch.setattr(options, "OPTIONS", options.OPTIONS + (new,))
    seen = {}

    def call(model, device=None, schedule=None):
        seen.update(device=device, schedule=schedule)

    @click.command()
    @spec_options(call)
    def cmd(**opts):
        call("m.onnx", **spec_values(call, opts))

    res = CliRunner().invoke(cmd, ["--schedule", "step", "--device", "h100"])
    assert res.exit_code == 0, res.output
    assert seen == {"device": "h100", "schedule": "step"}
    assert "--schedule [cosine|step]" in CliRunner().invoke(cmd, ["--help"]).output
    req = parse_request(call, {"schedule": ["cosine"]}, RequestLimits())
    assert req.kwargs == {"schedule": "cosine"}
    param = next(p for p in openapi_parameters(call) if p["name"] == "schedule")
    assert param["schema"]["enum"] == ["cosine", "step"] and "`--schedule`" in param["description"]
    with pytest.raises(OptionError, match="schedule 'linear' is not one of 'cosine', 'step'"):
        parse_request(call, {"schedule": ["linear"]}, RequestLimits())


def test_keywords_passed_on_to_predict_reach_it(monkeypatch):
    """predict_many passes a keyword it does not take itself on to
    perfseer_rt.predict: an option of predict's reaches it through the CLI."""
    import perfseer_rt.predict.api as api
    import perfseer_rt.predict.many as many

    new = options.Option("clock", ("clock_mhz",), "SM clock, MHz.", options.parse_limit)
    monkeypatch.setattr(options, "OPTIONS", options.OPTIONS + (new,))
    real = api.predict
    got = {}

    def predict(models, batch=None, device=None, metrics=None, input_shapes=None, model=None,
                precision=None, dims=None, mode="inference", extrapolate=False, clock_mhz=None):
        got["clock_mhz"] = clock_mhz
        return real(models, device=device, metrics=metrics, model=model, precision=precision,
                    mode=mode, extrapolate=extrapolate)

    monkeypatch.setattr(api, "predict", predict)
    monkeypatch.setattr(many, "predict", predict)
    assert ("clock", "clock_mhz") in [(o.name, k) for o, k in options.options_for(predict_many)]
    kwargs = options.parse_options(predict_many, {"clock": ["1410"]})
    predict_many([str(RESNET)], [1], progress=False, **kwargs)
    assert got == {"clock_mhz": 1410.0}


def test_cli_predict_and_check_take_the_table_options():
    res = CliRunner().invoke(main, ["predict", str(RESNET), "--model", "seernet", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)[0]["predictor"]["model"] == "seernet"
    bert = ROOT / "tests" / "models" / "bert_base.onnx"
    res = CliRunner().invoke(main, ["check", str(bert), "--dim", "seq=64", "--max-memory-mb",
                                    "100000", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["prediction"]["batch"] == 1
    for bad in ("inf", "nan", "0", "x"):
        res = CliRunner().invoke(main, ["check", str(RESNET), "--max-memory-mb", bad])
        assert res.exit_code == 2 and f"--max-memory-mb {bad!r}: expected a positive, finite" \
            in res.stderr, res.output


def test_parsers_name_the_option_as_written():
    assert options.parse_dims("dim", ["seq=128", "past=0"]) == {"seq": 128, "past": 0}
    with pytest.raises(OptionError, match=r"^dim 'seq': expected NAME=VALUE .* e\.g\. dim seq=128$"):
        options.parse_dims("dim", ["seq"])
    with pytest.raises(OptionError, match=r"^--batch '1,x': expected positive integers"):
        options.parse_batches("--batch", ["1,x"])
    assert options.parse_batches("batch", ["8,1,8"]) == [8, 1]
    with pytest.raises(OptionError, match="given 2 times with different values"):
        options.parse_batch("batch", ["1", "2"])
    assert options.parse_list("metrics", ["a,b", "b, c"]) == ["a", "b", "c"]


def test_inspect_json_is_a_layer_table():
    res = CliRunner().invoke(main, ["inspect", str(RESNET), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["totals"]["nodes"] == len(doc["layers"]) == 49
    assert sum(layer["flops"] for layer in doc["layers"]) == pytest.approx(doc["totals"]["flops"])
    assert sum(layer["flops_share"] for layer in doc["layers"]) == pytest.approx(1.0)
    conv = doc["layers"][0]
    assert conv["op"] == "Conv" and conv["outputs"][0]["shape"] == [1, 64, 112, 112]
    assert doc["ops"]["Conv"] == 20


def test_predict_table_says_a_warning_once_per_model(tmp_path):
    bert = ROOT / "tests" / "models" / "bert_base.onnx"
    res = CliRunner().invoke(main, ["predict", str(bert), "--dim", "seq=128", "--batch", "1,2,4",
                                    "--device", "h100"])
    assert res.exit_code == 0, res.output
    warnings = [ln for ln in res.stdout.splitlines() if ln.startswith("warning:")]
    assert warnings and len(warnings) == len(set(warnings))
    assert all(ln.startswith(f"warning: {bert}: ") for ln in warnings)  # every batch has them
