"""FLOPs of ONNX's recurrent layers (LSTM, GRU, RNN).

Each time step of each direction multiplies the step's input (``I`` wide)
and the previous hidden state (``H`` wide) by the gate weights: ``2 G H
(I + H)`` FLOPs per batch row, ``G`` gates (LSTM 4, GRU 3, RNN 1); the bias
(``B``, input and recurrent halves) adds ``2 G H``, LSTM peepholes (``P``)
``6 H``, and the gates' element-wise work per hidden unit (activations at
:data:`perfseer_rt.graph.ops.ELEMENTWISE_FLOPS`' Sigmoid/Tanh 4 each):

* LSTM: 3 sigmoids, 2 tanh, the cell update ``f c + i g`` and ``o tanh(c)``
  (4): 24;
* GRU: 2 sigmoids, 1 tanh, the reset product and ``(1 - z) h~ + z h`` (4): 16;
* RNN: 1 tanh: 4.

The weights (W, R, B, P) are the node's constant inputs and count as its
parameters like any other weight.
"""

from __future__ import annotations

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
#: Element-wise FLOPs per hidden unit and step (module docstring).
CELL_FLOPS = {"LSTM": 24, "GRU": 16, "RNN": 4}
#: Peephole FLOPs per hidden unit and step (LSTM with ``P``).
PEEPHOLE_FLOPS = 6


def recurrent_flops(op: str, x_shape: tuple[int, ...], w_shape: tuple[int, ...], hidden: int,
                    batch_first: bool, has_bias: bool, has_peepholes: bool) -> float:
    """FLOPs of one LSTM/GRU/RNN node.

    Args:
        op: ``LSTM``, ``GRU`` or ``RNN``.
        x_shape: the input X, ``[seq, batch, I]`` (``[batch, seq, I]`` when
            ``batch_first``: the ``layout=1`` attribute).
        w_shape: the input weights W, ``[directions, G H, I]``.
        hidden: the hidden size ``H`` (R's last dim).
        has_bias, has_peepholes: whether B (and, for LSTM, P) are given.

    Raises:
        ValueError: shapes that do not fit the op.
    """
    gates = GATES[op]
    if len(x_shape) != 3 or len(w_shape) != 3 or hidden < 1:
        raise ValueError(f"{op}: X must be 3-D, W [directions, {gates}H, I]")
    seq, batch = (x_shape[1], x_shape[0]) if batch_first else (x_shape[0], x_shape[1])
    dirs, rows, width = w_shape
    if rows != gates * hidden or width != x_shape[2]:
        raise ValueError(f"{op}: W {list(w_shape)} does not fit hidden {hidden} and X {list(x_shape)}")
    return float(dirs * seq * batch * hidden * _per_unit(op, width, hidden, has_bias,
                                                          has_peepholes))


def _per_unit(op: str, width: int, hidden: int, has_bias: bool, has_peepholes: bool) -> int:
    """FLOPs per hidden unit, time step, batch row and direction."""
    gates = GATES[op]
    bias = 2 * gates if has_bias else 0
    peepholes = PEEPHOLE_FLOPS if has_peepholes and op == "LSTM" else 0
    return 2 * gates * (width + hidden) + CELL_FLOPS[op] + bias + peepholes


def recurrent_steps(op: str, flops: float, in_elems: float, width: int, hidden: int,
                    has_bias: bool) -> tuple[int, int] | None:
    """(directions, sequence length x batch) of a recurrent node from its
    PerfGraph columns: ``flops`` (:func:`recurrent_flops`, peepholes aside),
    ``in_elems`` (X: seq x batch x width), the hidden size and the bias.
    None where the columns do not fit.
    """
    if width < 1 or hidden < 1 or in_elems < width:
        return None
    rows = in_elems / width
    dirs = flops / (rows * hidden * _per_unit(op, width, hidden, has_bias, False))
    if round(dirs) not in (1, 2) or abs(dirs - round(dirs)) > 0.05 or rows != int(rows):
        return None
    return round(dirs), int(rows)


def recurrent_batch(out_shape: tuple[int, ...] | None, dirs: int, hidden: int) -> int | None:
    """The batch of a recurrent node from the shape of one of its outputs:
    Y ``[seq, dirs, batch, H]`` (``[batch, seq, dirs, H]`` with layout 1) or
    Y_h / Y_c ``[dirs, batch, H]`` (``[batch, dirs, H]``); None where the
    shape does not tell."""
    if out_shape is None or not out_shape or out_shape[-1] != hidden:
        return None
    if len(out_shape) == 4:
        if out_shape[1] == dirs and out_shape[2] != dirs:
            return out_shape[2]
        if out_shape[2] == dirs and out_shape[1] != dirs:
            return out_shape[0]
    if len(out_shape) == 3:
        if out_shape[0] == dirs and out_shape[1] != dirs:
            return out_shape[1]
        if out_shape[1] == dirs and out_shape[0] != dirs:
            return out_shape[0]
    return None
