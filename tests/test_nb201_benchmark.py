"""The NAS-Bench-201 benchmark (benchmarks/nb201): HELP protocol helpers, the
HELP CSV reader, the few-shot adapters, and the command's refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from benchmarks.nb201 import fewshot, protocol  # noqa: E402
from benchmarks.nb201.cli import main  # noqa: E402
from benchmarks.nb201.help_data import device_batch, load_help, parse_batches  # noqa: E402
from tests.test_byod import CELLS  # noqa: E402
from training.byod.errors import ByodError  # noqa: E402


def test_pool_and_test_sets_are_helps():
    assert list(protocol.POOL) == list(range(900)) and list(protocol.TEST) == list(range(900, 1900))
    rng = np.random.default_rng(0)
    lat = rng.lognormal(2, 0.3, 1900)
    pool, test = protocol.protocol_sets(lat)
    assert len(pool) == 720 and len(test) == 800
    # HELP: argsort, keep positions int(0.1 n):int(0.9 n)
    want = np.sort(np.arange(900)[np.argsort(lat[:900])[90:810]])
    np.testing.assert_array_equal(pool, want)
    assert lat[pool].min() >= np.sort(lat[:900])[90] and lat[pool].max() <= np.sort(lat[:900])[809]
    assert set(test) <= set(range(900, 1900))


def test_trim_breaks_ties_by_index():
    lat = np.array([1.0] * 10)  # all tied (whole-ms devices have many ties)
    np.testing.assert_array_equal(protocol.trim(range(10), lat), np.arange(1, 9))


def test_spearman_matches_scipy_or_hand():
    a = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    assert protocol.spearman(a, a[::-1]) == pytest.approx(-1.0)
    # by hand: ranks (1,2,3,4,5) vs (2,1,4,3,5): d^2 = 4, rho = 1 - 6*4/(5*24) = 0.8
    assert protocol.spearman(a, np.array([2.0, 1.0, 4.0, 3.0, 5.0])) == pytest.approx(0.8)
    x = np.array([3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0, 5.0, 3.0])
    y = np.array([2.0, 7.0, 1.0, 8.0, 2.0, 8.0, 1.0, 8.0, 2.0, 8.0])
    try:
        from scipy.stats import spearmanr
    except ImportError:
        spearmanr = None
    if spearmanr is not None:
        assert protocol.spearman(x, y) == pytest.approx(spearmanr(x, y)[0], abs=1e-12)
    np.testing.assert_allclose(protocol.rankdata(np.array([10.0, 20.0, 10.0])), [1.5, 3.0, 1.5])


def test_draws_are_deterministic_subsets():
    pool = np.arange(100, 820)
    a = protocol.draw(pool, 10, "pixel3", seed=0)
    assert len(a) == 10 and set(a) <= set(pool)
    np.testing.assert_array_equal(a, protocol.draw(pool, 10, "pixel3", seed=0))
    assert not np.array_equal(a, protocol.draw(pool, 10, "pixel3", seed=1))
    np.testing.assert_array_equal(protocol.draw(pool, 900, "pixel3"), pool)


def test_cell_paths():
    assert protocol.cell_paths(CELLS[1][0]) == {"cut": False, "dead_ops": 0}
    # node 3 sums only none edges: the cell output is zero
    assert protocol.cell_paths("|nor_conv_3x3~0|+|none~0|none~1|+|none~0|none~1|none~2|")["cut"]
    # node 1's conv feeds nothing that reaches node 3
    assert protocol.cell_paths("|nor_conv_3x3~0|+|skip_connect~0|none~1|+|none~0|none~1|skip_connect~2|") \
        == {"cut": False, "dead_ops": 1}


def test_fit_ridge_recovers_a_linear_device():
    from benchmarks.nb201.seernet_multi import fit_ridge

    rng = np.random.default_rng(0)
    heads = rng.normal(size=(20, 5))      # predicted log latencies on 5 known devices
    log_lat = 2.0 + 0.3 * heads[:, 1] + 0.1 * heads[:, 3]
    head = fit_ridge(heads, np.exp(log_lat))
    assert head.alpha <= 1.0 and head.loo_mse < 1e-3
    new = rng.normal(size=(50, 5))
    np.testing.assert_allclose(head.predict_log(new), 2.0 + 0.3 * new[:, 1] + 0.1 * new[:, 3], atol=0.05)



# ------------------------------------------------------------- HELP data
def help_csv(path, n=1900, devices=("dev_a", "dev_b"), bad=None):
    """A HELP-shaped CSV over the 8 real cells (repeated); the latencies are a
    deterministic function of the cell, enough for the reader and the refusals."""
    lines = ["index,arch_str," + ",".join(f"{d}_ms" for d in devices)]
    for i in range(n):
        cell, ms = CELLS[i % len(CELLS)]
        vals = [f"{ms * (1 + j):.4f}" for j in range(len(devices))]
        if bad is not None and i == bad[0]:
            vals[0] = bad[1]
        lines.append(f"{i},{cell}," + ",".join(vals))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_load_help_reads_and_refuses(tmp_path):
    data = load_help(help_csv(tmp_path / "ok.csv"))
    assert data.devices == ["dev_a", "dev_b"] and len(data.cells) == 1900
    assert data.latency["dev_b"][1] == pytest.approx(2 * CELLS[1][1], rel=1e-4)
    with pytest.raises(ByodError, match="pass --csv"):
        load_help(None)
    with pytest.raises(ByodError, match="no HELP latency CSV"):
        load_help(tmp_path / "missing.csv")
    with pytest.raises(ByodError, match="1000 rows"):
        load_help(help_csv(tmp_path / "short.csv", n=1000))
    with pytest.raises(ByodError, match="row 6, column dev_a_ms: 'fast' is not a number"):
        load_help(help_csv(tmp_path / "bad.csv", bad=(5, "fast")))
    with pytest.raises(ByodError, match="not positive"):
        load_help(help_csv(tmp_path / "neg.csv", bad=(5, "-1")))


def test_unknown_device_batch_is_refused_not_guessed():
    assert device_batch("titanxp_256") == 256 and device_batch("pixel3") == 1
    with pytest.raises(ByodError, match=r"--batch edgetpu=B"):
        device_batch("edgetpu")
    assert device_batch("edgetpu", parse_batches(["edgetpu=8"])) == 8
    for bad in ("edgetpu", "edgetpu=0", "=4", "edgetpu=x"):
        with pytest.raises(ByodError, match="expected DEVICE=BATCH"):
            parse_batches([bad])


def test_cli_refuses_missing_csv_and_unknown_batch(tmp_path, capsys):
    with pytest.raises(SystemExit):  # --csv is required: no default path outside the repo
        main(["seernet"])
    assert "--csv" in capsys.readouterr().err
    p = help_csv(tmp_path / "h.csv", devices=("edgetpu",))
    code = main(["seernet", "--csv", str(p), "--out", str(tmp_path / "o"), "--parts", "flops",
                 "--cache", str(tmp_path / "c")])
    err = capsys.readouterr().err
    assert code == 2 and "nb201: error: device 'edgetpu': batch size unknown" in err
    assert not (tmp_path / "o").exists()


# ---------------------------------------------------------------- few-shot
def test_encode_cells():
    x = fewshot.encode(CELLS[1][0])
    assert x.shape == (37,) and x[:30].sum() == 6
    counts = dict(zip(fewshot.OPS, x[30:35]))
    assert counts == {"none": 0, "skip_connect": 2, "nor_conv_1x1": 0, "nor_conv_3x3": 3, "avg_pool_3x3": 1}
    with pytest.raises(ValueError, match="not a NAS-Bench-201 cell"):
        fewshot.encode("|bogus~0|")


def _profiles(rng, n=300, d=6):
    return rng.normal(size=(n, d))


def test_similarity_adapter_finds_the_matching_device():
    """A new device that ranks like known device 2 (up to scale): the head
    weights device 2 most and ranks held-out architectures like it."""
    rng = np.random.default_rng(0)
    z = _profiles(rng)
    lat = np.exp(1.5 + 0.4 * z[:, 2])
    head = fewshot.fit_similarity(z[:10], lat[:10])
    assert int(np.argmax(head.weights)) == 2
    assert protocol.spearman(head.predict_log(z[10:]), lat[10:]) > 0.9


def test_ridge_adapter_recovers_a_mixture():
    rng = np.random.default_rng(1)
    z = _profiles(rng)
    log_lat = 0.5 + 0.3 * z.mean(1) + 0.2 * (z[:, 0] - z.mean(1))
    head = fewshot.fit_ridge(z[:20], np.exp(log_lat[:20]))
    np.testing.assert_allclose(head.predict_log(z[20:]), log_lat[20:], atol=0.05)


def test_simridge_leaves_the_span_of_one_device():
    """A device that mixes two known devices: the similarity head can only
    rescale a weighted profile dominated by one of them; simridge fits the
    mixture from 15 samples."""
    rng = np.random.default_rng(4)
    z = _profiles(rng, n=400, d=6)
    lat = np.exp(1.0 + 0.5 * z[:, 1] - 0.4 * z[:, 4])
    heads = fewshot.fit_adapters(z[:15], lat[:15], ("similarity", "simridge-0.3"))
    sim = protocol.spearman(heads["similarity"].predict_log(z[15:]), lat[15:])
    simridge = protocol.spearman(heads["simridge-0.3"].predict_log(z[15:]), lat[15:])
    assert simridge > 0.97 and simridge > sim + 0.1
    with pytest.raises(ValueError, match="unknown adapter 'lasso'"):
        fewshot.fit_adapters(z[:15], lat[:15], ("lasso",))


def test_select_picks_by_validation_and_evaluate_reports_draws():
    """On devices that are exact copies of a known device's profile, the
    adapters are near-perfect; the selection table and the per-mode, per-k
    rows carry what the report prints."""
    rng = np.random.default_rng(2)
    z = _profiles(rng, n=1900, d=4)
    from benchmarks.nb201.help_data import HelpData

    data = HelpData(["c"] * 1900, {"v": np.exp(1 + 0.5 * z[:, 1]), "t": np.exp(2 + 0.3 * z[:, 3])})
    ref = np.arange(0, 900, 7)[:30]
    fold = fewshot.Fold("device", "v", ["v"], ["a", "b", "c", "d"], z, ref)
    sel = fewshot.select(data, [fold], draws=2, shots=(10, 20))
    assert set(sel["chosen"]["random"]) == {"10", "20"} and set(sel["chosen"]["reference"]) == {"10", "20"}
    assert sel["spearman_pool_rest"]["random"]["similarity"]["10"] > 0.99
    assert fewshot.chosen_adapter(sel, "reference", 50) == sel["chosen"]["reference"]["20"]
    rows = fewshot.evaluate(data, z, "t", sel, draws=3, reference=ref, variants=[ref[::-1]], shots=(10, 900))
    assert rows["random"]["10"]["draws"] == 3 and rows["reference"]["10"]["draws"] == 1
    assert rows["random"]["900"] is rows["reference"]["900"] and rows["random"]["900"]["k"] == 720
    assert rows["random"]["10"]["spearman"] > 0.99 and rows["reference"]["10"]["count"] == 800
    assert rows["reference"]["10"]["variants"]["count"] == 1
    assert 0 <= rows["reference"]["10"]["in_trimmed_pool"] <= 10


def test_pruned_cell_drops_dead_code():
    assert protocol.pruned_cell(CELLS[1][0]) == CELLS[1][0]  # nothing dead
    # node 1's conv feeds only a none edge: dead
    assert protocol.pruned_cell("|nor_conv_3x3~0|+|skip_connect~0|none~1|+|none~0|none~1|skip_connect~2|") \
        == "|none~0|+|skip_connect~0|none~1|+|none~0|none~1|skip_connect~2|"
    cut = "|nor_conv_3x3~0|+|none~0|none~1|+|none~0|none~1|none~2|"
    assert protocol.pruned_cell(cut) == "|none~0|+|none~0|none~1|+|none~0|none~1|none~2|"
    for cell, _ in CELLS:
        assert protocol.cell_paths(protocol.pruned_cell(cell))["dead_ops"] == 0


def test_choose_view_finds_a_device_that_drops_dead_code():
    """Twin profiles that differ on a third of the architectures: a device
    following the pruned half is recognized from 12 samples, one following the
    as-written half is not mistaken for it, and samples where the halves agree
    keep the as-written view."""
    rng = np.random.default_rng(5)
    z = _profiles(rng, n=200, d=4)
    twin = z.copy()
    twin[::3] -= rng.uniform(0.5, 2.0, size=(len(z[::3]), 1))  # dead code dropped: faster everywhere
    both = np.c_[z, twin]
    assert fewshot.choose_view(both[:12], np.exp(1 + 0.5 * twin[:12, 2])) == 1
    assert fewshot.choose_view(both[:12], np.exp(1 + 0.5 * z[:12, 2])) == 0
    clean = np.array([i for i in range(200) if i % 3][:12])
    assert fewshot.choose_view(both[clean], np.exp(1 + 0.5 * twin[clean, 2])) == 0
    np.testing.assert_array_equal(fewshot.in_view(both, 1, True), twin)
    assert fewshot.in_view(z, 1, False) is z


def test_ridge_loo_shortcut_equals_refitting():
    rng = np.random.default_rng(3)
    z, y = rng.normal(size=(12, 5)), rng.normal(size=12)
    slow = np.mean([(fewshot._ridge_fit(np.delete(z, i, 0), np.delete(y, i), 2.0).predict_log(z[i:i + 1])[0]
                     - y[i]) ** 2 for i in range(12)])
    assert fewshot._ridge_loo(z, y, 2.0) == pytest.approx(slow, rel=1e-6)


# ------------------------------------------------------- reference set
SYN_DEVICES = ("1080ti_1", "2080ti_1", "silver_4114", "silver_4210r", "pixel3", "samsung_a50")


def synthetic_help(path, seed=0, scramble=()):
    """A HELP-shaped CSV of 1,900 random NB201 cells and 6 devices named as
    HELP's (so their kinds are known) whose log latency is a device-specific
    mix of per-operation costs and one interaction; ``scramble`` devices get
    unrelated random latencies instead."""
    rng = np.random.default_rng(seed)
    ops = np.array(fewshot.OPS)
    cells = ["|{}~0|+|{}~0|{}~1|+|{}~0|{}~1|{}~2|".format(*ops[rng.integers(0, 5, 6)]) for _ in range(1900)]
    x = np.stack([fewshot.encode(c) for c in cells])
    costs = rng.uniform(0.05, 1.0, size=(len(SYN_DEVICES), 5))
    inter = rng.uniform(0, 0.2, size=len(SYN_DEVICES))
    noise = np.random.default_rng(seed + 1)
    lines = ["index,arch_str," + ",".join(f"{d}_ms" for d in SYN_DEVICES)]
    lat = np.exp(np.stack([1 + np.log1p(x[:, 30:35] @ costs[j]) + inter[j] * x[:, 33] * x[:, 34]
                           + noise.normal(0, 0.02, 1900) for j in range(len(SYN_DEVICES))], 1))
    for j, d in enumerate(SYN_DEVICES):
        if d in scramble:
            lat[:, j] = noise.lognormal(2, 0.5, 1900)
    for i, c in enumerate(cells):
        lines.append(f"{i},{c}," + ",".join(f"{v:.5f}" for v in lat[i]))
    path.write_text("\n".join(lines) + "\n")
    return path


SMALL = fewshot.PretrainConfig(hidden=16, epochs=40, seeds=1)


def test_reference_order_identifies_devices_better_than_random_sets(tmp_path):
    from benchmarks.nb201 import reference

    data = load_help(synthetic_help(tmp_path / "s.csv"))
    devices = list(SYN_DEVICES[:4])
    z, _ = fewshot.pretrain(data, devices, SMALL)
    assert z.shape == (1900, 8)  # as written, then pruned twins, equal where nothing is dead
    clean = np.array([protocol.pruned_cell(c) == c for c in data.cells])
    assert 0 < clean.sum() < 1900
    np.testing.assert_array_equal(z[clean, 4:], z[clean, :4])
    assert np.abs(z[~clean, 4:] - z[~clean, :4]).max() > 0
    z = z[:, :4]
    lat = {d: data.latency[d] for d in devices}
    cand = reference.candidates(lat, data.cells)
    for d in devices:  # every candidate is inside every device's trimmed pool
        assert set(cand) <= set(protocol.protocol_sets(lat[d])[0])
    for i in cand:  # and computes what it says: no cut cell, no dead operation
        assert protocol.cell_paths(data.cells[i]) == {"cut": False, "dead_ops": 0}
        assert protocol.pruned_cell(data.cells[i]) == data.cells[i]  # not even a dead skip connection
    assert any(protocol.cell_paths(c)["cut"] or protocol.cell_paths(c)["dead_ops"] for c in data.cells[:900])
    order = reference.order(z, lat, data.cells, 10)
    assert len(set(order)) == 10 and set(order) <= set(cand)
    np.testing.assert_array_equal(order, reference.order(z, lat, data.cells, 10))  # deterministic
    np.testing.assert_array_equal(order[:5], reference.order(z, lat, data.cells, 5))  # nested
    chosen = reference.objective(z, lat, order)
    randoms = [reference.objective(z, lat, protocol.draw(cand, 10, "r", s)) for s in range(8)]
    assert chosen < min(randoms)
    variant = reference.order(z, lat, data.cells, 10, seed=3)
    assert set(variant) <= set(cand) and not np.array_equal(variant, order)
    with pytest.raises(ValueError, match="one per pre-training device"):
        reference.order(z[:, :3], lat, data.cells, 10)


@pytest.mark.slow
def test_fewshot_run_never_reads_test_devices_and_reproduces(tmp_path):
    """The reference order, the validation folds and the chosen adapters are
    the same whatever the test devices' columns hold; a second run from an
    empty cache reproduces every figure."""
    from benchmarks.nb201.fewshot_run import run

    test, k = ["2080ti_1", "pixel3"], (10, 20, 900)
    a = run(str(synthetic_help(tmp_path / "a.csv")), tmp_path / "ra", test, None, 2, tmp_path / "ca", "a", SMALL, k)
    b = run(str(synthetic_help(tmp_path / "b.csv", scramble=test)), tmp_path / "rb", test, None, 2,
            tmp_path / "cb", "b", SMALL, k)
    assert a["reference"] == b["reference"] and a["selection"] == b["selection"]
    assert len(a["reference"]["order"]) == 20
    assert [f["name"] for f in a["selection"]["folds"]] == ["1080ti_1", "silver_4114", "silver_4210r",
                                                            "samsung_a50", "cpu", "gpu", "phone"]
    assert a["devices"] != b["devices"]  # the test columns do count where they should
    again = run(str(tmp_path / "a.csv"), tmp_path / "ra2", test, None, 2, tmp_path / "ca2", "a", SMALL, k)

    def figures(r):  # everything but the fit times
        return {d: {m: {kk: {x: v for x, v in row.items() if x != "fit_seconds"} for kk, row in rows.items()}
                    for m, rows in modes.items()} for d, modes in r["devices"].items()}

    assert figures(again) == figures(a) and again["reference"] == a["reference"]
    md = (tmp_path / "ra" / "fewshot.md").read_text()
    assert "## The reference set" in md and "random samples" in md
    assert a["mean"]["reference"]["10"]["variants"]["count"] == 2


def test_reference_cli_prints_cells_to_measure(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(fewshot, "PretrainConfig", lambda: SMALL)
    p = synthetic_help(tmp_path / "s.csv")
    code = main(["reference", "--csv", str(p), "--k", "4", "--exclude", "pixel3", "--json",
                 "--cache", str(tmp_path / "c")])
    rows = json.loads(capsys.readouterr().out)
    cells = load_help(p).cells
    assert code == 0 and len(rows) == 4 and all(cells[r["index"]] == r["cell"] for r in rows)
    code = main(["reference", "--csv", str(p), "--exclude", "edgetpu", "--cache", str(tmp_path / "c")])
    assert code == 2 and "--exclude edgetpu: not a column" in capsys.readouterr().err
