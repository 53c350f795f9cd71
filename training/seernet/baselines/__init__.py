"""The paper's baselines, trained on the same batches and splits as SeerNet.

Every torch baseline takes SeerNet's inputs ``(x, edge_index, edge_attr, u,
node_batch)`` (normalized) and returns ``[G, num_outputs]`` standardized log
metrics. :class:`GlobalGBM` is a scikit-learn model on the global features.
PMGNS and Eagle use torch_geometric (training only; they are not exported).
"""

from training.seernet.baselines.gbm import GlobalGBM
from training.seernet.baselines.kernel_additive import KernelAdditive
from training.seernet.baselines.mlp_node import MLPNode

__all__ = ["MLPNode", "PMGNS", "Eagle", "KernelAdditive", "GlobalGBM"]


def __getattr__(name):  # lazy: torch_geometric (optional, heavy) is imported only when asked for
    if name == "PMGNS":
        from training.seernet.baselines.pmgns import PMGNS  # lazy: torch_geometric
        return PMGNS
    if name == "Eagle":
        from training.seernet.baselines.eagle import Eagle  # lazy: torch_geometric
        return Eagle
    raise AttributeError(name)
