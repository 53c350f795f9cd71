"""Re-record the pinned predictions of some shipped predictors (after a
deliberate retraining; a refactor must never need this).

    python -m tests.record_golden cpu-amd-epyc-1t [DEVICE ...]

Writes ``tests/data/golden_predictions.json`` with the named devices' models
predicted on the pinned graphs (see tests/test_golden_predictions.py); other
entries are kept as they are.
"""

from __future__ import annotations

import json
import sys

from perfseer_rt.predict.registry import predictors
from perfseer_rt.predict.seernet_run import run_predictor
from tests.test_golden_predictions import DATA, GOLDEN, load_graphs


def main(devices: list[str]) -> int:
    graphs = load_graphs()
    names = list(next(iter(GOLDEN.values())))
    out = dict(GOLDEN)
    for device in devices:
        pred = predictors()[device]
        for entry in [e for e in out if e.startswith(f"{device}/")]:
            del out[entry]
        for model in pred.model_names:
            values = run_predictor(pred, [graphs[n] for n in names], model)
            out[f"{device}/{model}"] = {n: [float(v) for v in row] for n, row in zip(names, values)}
    (DATA / "golden_predictions.json").write_text(json.dumps(dict(sorted(out.items())), indent=1) + "\n")
    print(f"re-recorded {', '.join(devices)}: {sum(e.split('/')[0] in devices for e in out)} models")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
