"""A seeded slice of the extractor fuzzer (``benchmarks/fuzz_extract.py``)
and the crashes it found, as regression tests."""

import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from benchmarks.fuzz_extract import (
    MEMORY_MB,
    _is_failure,
    built_seeds,
    fuzz,
    make_case,
    run_case,
    supervised,
)
from perfseer_rt import extract
from perfseer_rt.errors import GraphError
from perfseer_rt.profile import hostmem
from tests.onnx_builders import const, model


@pytest.mark.slow  # ~6 CPU-s, but minutes of wall time on a loaded machine
def test_fuzz_slice_has_no_traceback_hang_bad_feature_or_file():
    out = fuzz(cases=300, seed=0, hang_s=120, progress=False)
    assert out["cases"] == 300
    assert out["traceback"] == 0, out["failures"]
    assert out["internal"] == 0, out["failures"]
    assert out["slow_over_5s"] == 0, out["failures"]
    assert out["over_memory"] == 0, out["failures"]
    assert out["bad_features"] == 0, out["failures"]
    assert out["files_written"] == 0, out["failures"]
    # the mutations leave some models valid, not all refused: ~10 % of cases
    # (seed 15 at 10,000 cases: 1,021); at least half that here
    assert out["ok"] >= 15


def test_cases_are_reproducible():
    seeds = built_seeds()
    assert make_case(seeds, 3, 17) == make_case(seeds, 3, 17)


def test_initializer_dims_larger_than_its_data_are_refused():
    """Fuzz seed 0 case 160: a 1-element shape constant re-dimensioned to
    2^40 made onnx build a tensor of rank 2^40 (a hang)."""
    nodes = [helper.make_node("Reshape", ["x", "s"], ["y"])]
    m = model(nodes, [("x", [2, 4])], [("y", None)], [const("s", (1,), [-1], dtype=np.int64)])
    m.graph.initializer[0].dims[0] = 2**40
    t0 = time.process_time()
    with pytest.raises(GraphError, match="stores only"):
        extract(m)
    assert time.process_time() - t0 < 1


def test_long_integer_shape_input_is_refused():
    nodes = [helper.make_node("Reshape", ["x", "s"], ["y"])]
    m = model(nodes, [("x", [2, 4]), ("s", [2**30], TensorProto.INT64)], [("y", None)])
    with pytest.raises(GraphError, match="1-D integer tensor"):
        extract(m)


def test_name_returned_as_bytes_is_a_graph_error():
    """Fuzz seed 0 cases 26/28/44: protobuf returns invalid UTF-8 strings as
    bytes; sorting or matching them raised TypeError."""
    m = model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [("x", [1, 4])],
              [("y", None)])
    raw = m.SerializeToString().replace(b"relu", b"\xffelu")
    res = run_case(raw, None, [])
    assert res["outcome"] == "typed" and "UTF-8" in res["message"]


def test_huge_static_input_dim_is_refused_fast():
    """Fuzz seed 2 case 638: Swin with an input 2^31-1 wide stalled onnx's
    shape inference (time grows with the dim value)."""
    from pathlib import Path

    import onnx

    from perfseer_rt.errors import ShapeError
    m = onnx.load(str(Path(__file__).parent / "models" / "swin_tiny.onnx"), load_external_data=False)
    m.graph.input[0].type.tensor_type.shape.dim[3].dim_value = 2**31 - 1
    t0 = time.process_time()
    with pytest.raises(ShapeError, match="over the supported maximum"):
        extract(m)
    assert time.process_time() - t0 < 1


def test_attribute_declared_as_another_kind_is_refused_not_an_abort():
    """Fuzz seed 10 case 6079: Swin's Constant with its tensor ``value``
    declared FLOAT made onnx's C++ shape inference abort the process (a
    failed std::clamp assertion), no exception to catch."""
    m = model([helper.make_node("Constant", [], ["c"], name="k",
                                value=helper.make_tensor("v", TensorProto.INT64, [1], [4])),
               helper.make_node("Reshape", ["x", "c"], ["y"])], [("x", [2, 2])], [("y", None)])
    m.graph.node[0].attribute[0].type = onnx.AttributeProto.FLOAT
    with pytest.raises(GraphError, match="node 'k': attribute 'value' is declared FLOAT but holds a "
                                         "TENSOR value"):
        extract(m)
    m.graph.node[0].attribute[0].type = onnx.AttributeProto.TENSOR
    assert extract(m).node_ops == ["Reshape"]


def test_a_case_that_kills_its_process_is_counted_and_the_run_goes_on(monkeypatch, tmp_path):
    """Seed 10 case 6079 aborted the whole fuzzer from inside onnx's C++
    code before the supervisor: cases now run in child processes."""
    monkeypatch.setenv("PSRT_FUZZ_ABORT_AT", "2")
    out = supervised(cases=5, seed=0, hang_s=120, crashes=tmp_path)
    assert out["cases"] == 5 and out["aborted"] == 1
    assert [f["case"] for f in out["failures"]] == [2]
    assert (tmp_path / "seed0_case2.onnx").exists()
    assert out["ok"] + out["typed"] == 4


def test_a_case_s_peak_memory_is_measured_and_judged(tmp_path):
    """Each case's own peak (the process's VmHWM is reset before it): a
    Constant given perm=2^40 once made onnx's inference take 20 GB."""
    data = model([helper.make_node("Expand", ["x", "s"], ["y"])], [("x", [1, 1])], [("y", None)],
                 [const("s", (2,), [4096, 16384], dtype=np.int64)]).SerializeToString()
    res = run_case(data, 1, [tmp_path])
    assert res["outcome"] == "ok" and not _is_failure(res)
    if hostmem.hwm_reset_works():
        assert 0 <= res["mem_mb"] < 64  # shapes only: no 256 MiB tensor
    else:  # no per-case peak where the kernel cannot reset VmHWM: none is made up
        assert "mem_mb" not in res
    assert _is_failure({**res, "mem_mb": MEMORY_MB + 1})
