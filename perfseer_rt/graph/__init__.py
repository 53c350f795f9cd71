"""PerfGraph extraction: ONNX model -> node, edge and global features."""

from perfseer_rt.graph.extract import extract, extract_batches, resolve_input_shapes
from perfseer_rt.graph.many import extract_many, iter_extract_many
from perfseer_rt.graph.perfgraph import PerfGraph

__all__ = ["PerfGraph", "extract", "extract_batches", "extract_many", "iter_extract_many",
           "resolve_input_shapes"]
