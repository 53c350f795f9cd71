"""SeerNet, SeerNet-Multi and the baselines (paper 001), their training,
evaluation report and ONNX export.

Model code is plain torch (scatter ops only) so that the exported predictor
needs nothing but onnxruntime; torch_geometric is used by two baselines only.
"""

from training.seernet.normalization import Normalization
from training.seernet.sample import (
    GraphBatch,
    GraphSample,
    collate,
    concat_graphs,
    from_perfgraph,
)
from training.seernet.seernet import SeerNet, SeerNetConfig, count_parameters
from training.seernet.seernet_multi import SeerNetMulti

__all__ = [
    "GraphSample", "GraphBatch", "from_perfgraph", "collate", "concat_graphs",
    "Normalization", "SeerNet", "SeerNetMulti", "SeerNetConfig", "count_parameters",
]
