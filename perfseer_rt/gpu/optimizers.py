"""Optimizer state and step temporaries, as ``torch.optim`` allocates them.

Read from ``torch/optim/*.py`` (PyTorch 2.13, the ``_multi_tensor_*``
functions: the foreach implementation PyTorch picks by default when every
parameter is on a CUDA device; default hyper-parameters):

==============  ======  ===========  =================================================
name            state   temporaries  what
==============  ======  ===========  =================================================
sgd             0       0            ``_foreach_add_(params, grads, alpha=-lr)``
sgd-momentum    1       0            momentum buffer (a clone of the first gradient)
adam            2       1            exp_avg, exp_avg_sq; ``_foreach_sqrt(exp_avg_sq)``
adamw           2       1            as adam; decoupled decay is in place
adadelta        2       2            square_avg, acc_delta; ``std`` and ``deltas`` lists
rmsprop         1       1            square_avg; ``_foreach_sqrt`` (``avg``)
adagrad         1       1            sum; ``_foreach_sqrt`` (``std``)
==============  ======  ===========  =================================================

State and temporaries are per parameter tensor, in the parameter's dtype; a
temporary list lives for the whole foreach call (every parameter's piece at
once). The ``step`` counters live on the host (not ``capturable``). A
non-zero ``weight_decay`` on sgd / sgd-momentum / adadelta / rmsprop /
adagrad adds one gradient-sized list (``_foreach_add(grads, params)``)
alive with the others; adam frees it before ``sqrt`` (its peak is
unchanged) and adamw decays in place.
Parameters that received no gradient get no state (PyTorch skips them).
"""

from __future__ import annotations

from dataclasses import dataclass

from perfseer_rt.errors import PerfSeerError


@dataclass(frozen=True)
class OptimizerRule:
    state: int           #: state tensors per parameter
    temporaries: int     #: parameter-sized temporary lists alive at once in step()
    state_from_grad: bool = False   #: state created as a copy of the gradient (momentum)
    decay_list: bool = False        #: weight decay adds a gradient-sized list


OPTIMIZERS: dict[str, OptimizerRule] = {
    "sgd": OptimizerRule(0, 0, decay_list=True),
    "sgd-momentum": OptimizerRule(1, 0, state_from_grad=True, decay_list=True),
    "adam": OptimizerRule(2, 1),
    "adamw": OptimizerRule(2, 1),
    "adadelta": OptimizerRule(2, 2, decay_list=True),
    "rmsprop": OptimizerRule(1, 1, decay_list=True),
    "adagrad": OptimizerRule(1, 1, decay_list=True),
}


def optimizer_rule(name: str) -> OptimizerRule:
    """The rule of optimizer ``name``.

    Raises:
        PerfSeerError: an unknown optimizer.
    """
    r = OPTIMIZERS.get(name.lower())
    if r is None:
        raise PerfSeerError(f"optimizer {name!r}: expected one of {', '.join(OPTIMIZERS)}")
    return r
