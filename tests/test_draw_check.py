"""An untuned check's draw leaves out every model the predictor may have
seen, and is the same for the same seed; the re-extraction picks the
architectures whose stored weights moved with the batch."""

from __future__ import annotations

import json

import numpy as np

from training.dataset.reextract import WEIGHT, varying_weights
from training.seernet.draw_check import check_models, dataset_models, draw
from training.seernet.recalibrate import model_name
from training.zoo.real import hf_text


def test_draw_excludes_data_and_checks_and_repeats_by_seed(tmp_path):
    (tmp_path / "ds" / "records").mkdir(parents=True)
    recs = [{"spec": f"timm:model={m},res=224"} for m in ("resnet50", "vit_small_patch16_224")]
    recs += [{"spec": "hf:model=gpt2,seq=64"}, {"spec": "resnet:depth=18,width=1.0,res=224"}]
    (tmp_path / "ds" / "records" / "part-0.jsonl").write_text("\n".join(map(json.dumps, recs)) + "\n")
    check = tmp_path / "user_check_x.json"
    check.write_text(json.dumps({"rows": [{"spec": "timm:model=efficientnet_b0,res=224"}],
                                 "specs": ["hf:model=bert-base,seq=64"]}))
    seen = dataset_models([tmp_path / "ds"]) | check_models([check])
    assert seen == {"timm:model=resnet50", "timm:model=vit_small_patch16_224", "hf:model=gpt2",
                    "timm:model=efficientnet_b0", "hf:model=bert-base"}
    timm, hf = draw(3, 40, seen, seen)
    assert len(timm) == 40 and timm == draw(3, 40, seen, seen)[0] and timm != draw(4, 40, seen, seen)[0]
    drawn = {model_name(s) for s in timm + hf}
    assert not drawn & seen
    assert {m for m in drawn if m.startswith("hf:")} == \
        {f"hf:model={n}" for n in hf_text.ARCHITECTURES} - {"hf:model=gpt2", "hf:model=bert-base"}


def test_varying_weights_finds_batch_dependent_weights():
    def graph(weight):
        u = np.zeros(WEIGHT + 1, np.float32)
        u[WEIGHT] = weight
        return (None, None, None, u)
    graphs = {"a/b1": graph(100.0), "a/b8": graph(100.5), "b/b1": graph(100.0), "b/b8": graph(180.0)}
    records = [{"arch_id": k.split("/")[0], "graph_key": k} for k in graphs]
    assert varying_weights(graphs, records) == ["b"]
