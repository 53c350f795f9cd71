"""PerfGraph extraction: ONNX model -> node, edge and global features."""

from perfseer_rt.graph.extract import extract
from perfseer_rt.graph.perfgraph import PerfGraph

__all__ = ["PerfGraph", "extract"]
