"""Older versions of a current predictor manifest, for the tests of the
upgrade chain (:func:`perfseer_rt.predict.manifest.upgrade`)."""

from __future__ import annotations

import json
from typing import Any


def as_version(doc: dict[str, Any], version: int) -> dict[str, Any]:
    """``doc`` (a current, schema-6 seernet manifest) written as schema
    ``version`` (2-5): each step down drops what that step's upgrade adds
    back (a disagreement-scaled interval's bins then read as unscaled: a
    document for the reader's tests, not the same predictor)."""
    out = json.loads(json.dumps(doc))
    if version <= 5 and out.get("training_data") is not None:
        out["training_data"].pop("ops", None)
    section = out["seernet"]
    unc = section.get("uncertainty")
    if version <= 4 and unc is not None:
        unc.pop("disagreement", None)
        for iv in unc["intervals"].values():
            iv.pop("scale", None)
            iv.pop("floor", None)
    if version <= 3:
        section.pop("field_scale", None)
        for iv in (unc or {}).get("intervals", {}).values():
            for b in iv["bins"]:
                b.pop("max_batch", None)
    if version <= 2:
        section.pop("uncertainty", None)
        section.pop("memory", None)
    out["schema_version"] = version
    return out
