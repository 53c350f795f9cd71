"""Calibrate the shipped predictor's intervals, out-of-distribution warning
and memory parts (the runtime side: :mod:`perfseer_rt.predict.uncertainty`).

Calibration data are predictions whose errors the predictor did not train
on, from two sources:

* the shipped model on its own validation architectures (new architectures
  of families it knows), and
* the family-split model on its held-out families (graphs of a kind it has
  never seen, scored against the family split's own training set).

The warning threshold on the distance score is the one that best separates,
on these data, configurations with an error above 25 % from those within
10 % (Youden's J). The intervals are split-conformal quantiles of
``log(measured / predicted)`` per metric, one pair below the threshold and
one above, each split by batch size
(:data:`perfseer_rt.predict.uncertainty.BATCH_GROUPS`).

Where the shipped model is the blend of SeerNet and the trees, each set
also carries the two models' gap (``log(SeerNet) - log(trees)``, the
blend's second ONNX output). Per metric, the disagreement warning's
threshold on ``|gap|`` is chosen as the distance threshold is (on that
metric's errors); the metrics' warnings are then added one at a time, the
best-separating first, and a metric's ships only if adding it raises the J
of "any warning fires" on the configs' worst errors, the distance warning
included (a warning that fires on as many good predictions as bad ones
only adds noise); and the
intervals are also computed on ``log(measured / predicted) / (floor +
|gap|)`` for each floor of :data:`FLOORS` (normalised split conformal, the
same bins): the metric ships the scaled intervals with the floor that
gives the narrowest mean interval on the calibration rows, if that is
narrower than the plain intervals' (both hold the coverage there by
construction). All of it is then *checked* on the real-model held-out
split, which neither the shipped model nor the calibration saw.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from perfseer_rt.predict import uncertainty as ru
from perfseer_rt.predict.manifest import MetricInterval, parse_section
from training.seernet.evaluate import ape

#: Errors (in %) that define a config the warning should catch / leave alone.
BAD_PCT, GOOD_PCT = 25.0, 10.0
#: Fewest calibration residuals behind one interval bin; a sparser
#: out-of-distribution bin takes the highest-scored residuals up to this count.
MIN_BIN = 30
#: Candidate floors (log units) of a disagreement-scaled interval.
FLOORS = (0.02, 0.05, 0.1, 0.2, 0.4)


@dataclass
class PredictionSet:
    """Predictions on graphs the model did not train on.

    ``pred`` and ``true`` are ``[G, M]`` in metric units (NaN: missing);
    ``scores`` the distance score of each graph to the model's training set;
    ``gaps`` ``[G, M]`` the blend's two models' ``log(SeerNet) - log(trees)``
    as reported (:func:`perfseer_rt.predict.uncertainty.phase_gaps`), or
    None for a model that is not a blend.
    """

    name: str
    true: np.ndarray
    pred: np.ndarray
    scores: np.ndarray
    batches: np.ndarray
    gaps: np.ndarray | None = None


def raw_features(samples: Sequence) -> np.ndarray:
    """:func:`perfseer_rt.predict.uncertainty.features` of every sample, ``[G, F]``."""
    return np.stack([ru.features(s.x, s.u) for s in samples]) if len(samples) else \
        np.zeros((0, len(ru.FEATURE_NAMES)))


def scores_against(samples: Sequence, reference_raw: np.ndarray, mean: np.ndarray, std: np.ndarray,
                   k: int) -> np.ndarray:
    """Distance scores of ``samples`` to the training graphs ``reference_raw``."""
    if not len(samples):
        return np.zeros(0)
    return ru.distance_scores(ru.standardize(raw_features(samples), mean, std),
                              ru.standardize(reference_raw, mean, std), k)


def _config_error(s: PredictionSet) -> np.ndarray:
    """Worst error over the metrics of each config, in % (NaN if none)."""
    e = ape(s.pred, s.true)
    e[~np.isfinite(e)] = -np.inf
    worst = e.max(axis=1)
    return np.where(np.isfinite(worst), worst, np.nan)


def fire_rates(scores: np.ndarray, errors: np.ndarray, threshold: float) -> dict:
    """Share (%) of bad (> 25 %) and good (<= 10 %) configs the warning fires on."""
    bad, good = errors > BAD_PCT, errors <= GOOD_PCT
    fires = scores > threshold
    def rate(m):
        return (float(100 * fires[m].mean()) if m.any() else None)
    return {"fires_on_error_gt_25_pct": rate(bad), "fires_on_error_le_10_pct": rate(good),
            "configs_gt_25": int(bad.sum()), "configs_le_10": int(good.sum()),
            "fires_overall_pct": float(100 * fires.mean()) if len(fires) else None}


def youden_j(fires: np.ndarray, errors: np.ndarray) -> float:
    """Share of bad (> 25 %) configs ``fires`` flags minus share of good
    (<= 10 %) ones; 0 where either kind is missing."""
    bad, good = errors > BAD_PCT, errors <= GOOD_PCT
    if not bad.any() or not good.any():
        return 0.0
    return float(fires[bad].mean() - fires[good].mean())


def choose_threshold(scores: np.ndarray, errors: np.ndarray) -> float:
    """The score above which to warn: maximises (fire rate on > 25 % errors)
    minus (fire rate on <= 10 % errors) over candidate quantiles of ``scores``;
    without bad configs, the 95th percentile."""
    bad, good = errors > BAD_PCT, errors <= GOOD_PCT
    if not bad.any() or not good.any():
        return float(np.percentile(scores, 95))
    best, best_j = float(np.percentile(scores, 95)), -np.inf
    for q in np.linspace(5, 98, 94):
        t = float(np.percentile(scores, q))
        j = (scores[bad] > t).mean() - (scores[good] > t).mean()
        if j > best_j + 1e-12:
            best, best_j = t, j
    return best


def calibrate(sets: Sequence[PredictionSet], metrics: Sequence[str], coverage: float = 0.9,
              gap_model: str | None = None, gap_output: str = "gap") -> dict:
    """Threshold, per-metric conformal bins and (with ``gap_model``, when
    every set has gaps) the disagreement section, from ``sets`` (module doc).

    Returns ``{"threshold", "intervals": {metric: {"coverage", "bins",
    "scale", "floor"}}, "calibration": {...}, "disagreement"}`` in the
    manifest's ``seernet.uncertainty`` form (without the feature/reference
    fields, which the exporter adds).
    """
    scores = np.concatenate([s.scores for s in sets])
    batches = np.concatenate([s.batches for s in sets])
    errors = np.concatenate([_config_error(s) for s in sets])
    with_gaps = gap_model is not None and all(s.gaps is not None for s in sets)
    gaps = np.concatenate([s.gaps for s in sets if s.gaps is not None]) if with_gaps else None
    ok = np.isfinite(errors)
    threshold = choose_threshold(scores[ok], errors[ok])
    intervals: dict[str, dict[str, Any]] = {}
    widths: dict[str, dict[str, float]] = {}
    chosen_on: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    gap_abs: dict[str, np.ndarray] = {}
    for j, m in enumerate(metrics):
        true = np.concatenate([s.true[:, j] for s in sets])
        pred = np.concatenate([s.pred[:, j] for s in sets])
        good = np.isfinite(true) & np.isfinite(pred) & (true > 0) & (pred > 0)
        if gaps is not None:
            good &= np.isfinite(gaps[:, j])
        if good.sum() < MIN_BIN:
            continue
        r, sc, bt = np.log(true[good] / pred[good]), scores[good], batches[good]
        plain = score_batch_bins(r, sc, bt, threshold, coverage)
        intervals[m] = {"coverage": coverage, "bins": plain, "scale": "none", "floor": None}
        widths[m] = {"plain": mean_width(plain, sc, bt)}
        if gaps is None:
            continue
        g = np.abs(gaps[good, j])
        best = widths[m]["plain"]
        for floor in FLOORS:
            scaled = score_batch_bins(r / (floor + g), sc, bt, threshold, coverage)
            width = widths[m][f"floor {floor:g}"] = mean_width(scaled, sc, bt, floor + g)
            if width < best:
                best = width
                intervals[m] = {"coverage": coverage, "bins": scaled, "scale": "disagreement", "floor": floor}
        chosen_on[m] = (g, ape(pred[good], true[good]))
        gap_abs[m] = np.where(np.isfinite(gaps[:, j]), np.abs(gaps[:, j]), 0.0)[ok]
    disagreement = None
    if with_gaps:
        thresholds, gap_record = gap_warnings(chosen_on, gap_abs, scores[ok] > threshold, errors[ok])
        disagreement = {"model": gap_model, "output": gap_output, "thresholds": thresholds,
                        "calibration": {"warning": gap_record, "mean_interval_width": widths,
                                        "method": "per metric: the |gap| threshold maximises fire rate on >25 % "
                                                  "errors minus on <=10 % of that metric; kept if adding it "
                                                  "raises that J of any warning on the worst errors; "
                                                  "intervals scaled by floor + |gap| where the narrowest "
                                                  f"mean width over floors {list(FLOORS)} beats the plain "
                                                  "intervals' on the calibration rows (log units)"}}
    return {"threshold": float(threshold), "intervals": intervals, "disagreement": disagreement,
            "calibration": {"sets": {s.name: int(len(s.scores)) for s in sets},
                            "warning_on_calibration": fire_rates(scores[ok], errors[ok], threshold),
                            "method": "split conformal on log(measured/predicted), per metric, "
                                      "one bin below and one above the distance threshold, "
                                      f"each split by batch size (groups up to {ru.BATCH_GROUPS}); "
                                      "threshold maximises fire rate on >25 % errors minus "
                                      "fire rate on <=10 % errors"}}


def gap_warnings(chosen_on: Mapping[str, tuple[np.ndarray, np.ndarray]], gaps: Mapping[str, np.ndarray],
                 fired: np.ndarray, worst: np.ndarray) -> tuple[dict[str, float], dict[str, dict[str, Any]]]:
    """The disagreement warning's thresholds (module doc): per metric, the
    ``|gap|`` threshold that best separates that metric's errors
    (``chosen_on[metric]`` = ``(|gap|, error %)``); then, best-separating
    first, a metric's kept only where adding it to ``fired`` (what already
    fires on the configs, distance warning included) raises the J of "any
    warning" on their ``worst`` errors (``gaps[metric]``: ``|gap|`` on those
    configs). Returns ``(kept thresholds, record per metric)``."""
    record: dict[str, dict[str, Any]] = {}
    for m, (g, err) in chosen_on.items():
        t = choose_threshold(g, err)
        record[m] = {"threshold": t, "youden_j": youden_j(g > t, err), **fire_rates(g, err, t)}
    kept: dict[str, float] = {}
    for m in sorted(record, key=lambda k: -record[k]["youden_j"]):
        more = fired | (gaps[m] > record[m]["threshold"])
        before, after = youden_j(fired, worst), youden_j(more, worst)
        record[m].update(kept=bool(after > before), any_warning_j_before=before, any_warning_j_after=after)
        if after > before:
            kept[m], fired = record[m]["threshold"], more
    return kept, record


def score_batch_bins(r: np.ndarray, sc: np.ndarray, bt: np.ndarray, threshold: float,
                     coverage: float) -> list[dict[str, Any]]:
    """The bins of one metric: residuals ``r`` below / above the distance
    ``threshold`` (a sparse out-of-distribution bin takes the highest-scored
    :data:`MIN_BIN`; too few in distribution: one score bin), each split by
    batch group (:func:`batch_bins`)."""
    inside = sc <= threshold
    out = ~inside
    if out.sum() < MIN_BIN:  # a sparse out-of-distribution bin: the highest-scored residuals
        out = np.zeros(len(r), bool)
        out[np.argsort(sc)[-MIN_BIN:]] = True
    score_bins = [(inside, threshold), (out, None)]
    if inside.sum() < MIN_BIN:  # too few in distribution: one score bin for all
        score_bins = [(np.ones(len(r), bool), None)]
    return [b for sel, max_score in score_bins for b in batch_bins(r, bt, sel, max_score, coverage)]


def mean_width(bins: Sequence[dict[str, Any]], sc: np.ndarray, bt: np.ndarray,
               unit: np.ndarray | None = None) -> float:
    """Mean ``hi - lo`` (log units) of the interval each row (score ``sc``,
    batch ``bt``) gets from ``bins``, times its ``unit`` where scaled."""
    w = np.array([next(b["hi"] - b["lo"] for b in bins if ru.takes(b["max_score"], b["max_batch"], s, int(a)))
                  for s, a in zip(sc, bt)])
    return float(np.mean(w * (1.0 if unit is None else unit)))


def batch_bins(r: np.ndarray, batches: np.ndarray, sel: np.ndarray, max_score: float | None,
               coverage: float) -> list[dict[str, Any]]:
    """The bins of one score bin (residuals ``r[sel]``), one per
    :data:`perfseer_rt.predict.uncertainty.BATCH_GROUPS` group; a group with
    fewer than :data:`MIN_BIN` residuals takes the score bin's quantiles."""
    pooled = ru.conformal_quantiles(r[sel], coverage)
    out, lower = [], 0
    for max_batch in ru.BATCH_GROUPS:
        group = sel & (batches > lower) & (True if max_batch is None else batches <= max_batch)
        n = int(group.sum())
        lo, hi = ru.conformal_quantiles(r[group], coverage) if n >= MIN_BIN else pooled
        out.append({"max_score": max_score, "max_batch": max_batch, "lo": lo, "hi": hi,
                    "count": n if n >= MIN_BIN else int(sel.sum())})
        lower = max_batch if max_batch is not None else lower
    return out


def fires(section: dict, s: PredictionSet, metrics: Sequence[str]) -> np.ndarray:
    """Whether any warning of ``section`` fires on each config of ``s``:
    the distance one, or a metric's disagreement one."""
    out = s.scores > section["threshold"]
    dis = section.get("disagreement")
    if dis and s.gaps is not None:
        for m, t in dis["thresholds"].items():
            out = out | (np.abs(np.nan_to_num(s.gaps[:, list(metrics).index(m)])) > t)
    return np.asarray(out, bool)


def evaluate(section: dict, s: PredictionSet, metrics: Sequence[str]) -> dict:
    """Coverage of the intervals (overall and per batch size) and the
    warnings' fire rates on one prediction set, all in %: ``warning`` the
    distance warning alone, ``any_warning`` it or a disagreement warning,
    ``disagreement_warning`` each metric's against that metric's errors."""
    errors = _config_error(s)
    out: dict = {"configs": int(len(s.scores)), "coverage": {},
                 "warning": fire_rates(s.scores, errors, section["threshold"]),
                 "any_warning": fire_rates(fires(section, s, metrics).astype(float), errors, 0.5)}
    dis = section.get("disagreement")
    if dis and s.gaps is not None:
        out["disagreement_warning"] = {
            m: fire_rates(np.abs(s.gaps[:, j]), ape(s.pred[:, j], s.true[:, j]), dis["thresholds"][m])
            for j, m in enumerate(metrics) if m in dis["thresholds"]}
    for j, m in enumerate(metrics):
        if m not in section["intervals"]:
            continue
        iv = parse_section(MetricInterval, section["intervals"][m], f"intervals.{m}")
        hit, batch = [], []
        for g in range(len(s.scores)):
            t, p = s.true[g, j], s.pred[g, j]
            q = ru.metric_interval(iv, s.scores[g], int(s.batches[g]),
                                   None if s.gaps is None else float(s.gaps[g, j]))
            if q is None or not (np.isfinite(t) and np.isfinite(p) and t > 0 and p > 0):
                continue
            lo, hi = q.around(p)
            hit.append(lo <= t <= hi)
            batch.append(int(s.batches[g]))
        hit_a, batch_a = np.array(hit, bool), np.array(batch)
        out["coverage"][m] = {
            "stated": section["intervals"][m]["coverage"] * 100, "scale": iv.scale,
            "held": float(100 * hit_a.mean()) if len(hit_a) else None, "count": int(len(hit_a)),
            "by_batch": {int(b): float(100 * hit_a[batch_a == b].mean()) for b in sorted(set(batch))}}
    return out


def combine_memory(pred: np.ndarray, metrics: Sequence[str], mode: str,
                   peak: str = "peak_mem_mb", load: str = "load_peak_mb",
                   run: str = "run_peak_mb") -> np.ndarray:
    """Predictions with the ``peak`` column as shipped: ``"direct"`` keeps the
    peak output, ``"max"`` takes the larger predicted phase."""
    out = np.array(pred, dtype=np.float64, copy=True)
    if mode == "max" and all(m in metrics for m in (peak, load, run)):
        i, a, b = metrics.index(peak), metrics.index(load), metrics.index(run)
        out[:, i] = np.fmax(out[:, a], out[:, b])
    return out
