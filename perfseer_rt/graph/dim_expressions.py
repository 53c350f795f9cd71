"""Symbolic input dims written as arithmetic of other dims.

Exporters name some dims by an expression of others: optimum's decoders
with a KV cache take an ``attention_mask`` of ``past_sequence_length +
sequence_length`` tokens, Whisper's ``encoder_sequence_length / 2``; torch's
dynamo exporter writes ``s0 + 1`` or ``2*s1``. Such a dim takes its value
from the named dims given (``--dim past_sequence_length=15 --dim
sequence_length=1``), so a user names each dim once, never the expression.

Only integer arithmetic is read (``+ - * // %``, ``/`` where it divides
exactly, unary minus, parentheses, integer literals) on names the user gave;
anything else (a name not given, a non-integer, a division that leaves a
remainder, a string longer than :data:`MAX_EXPRESSION_CHARS`) is no value,
and the dim stays unresolved as any unnamed dim would. The string is parsed
with :mod:`ast`, never evaluated.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Mapping

#: Longest dim name read as an expression (a file's names are untrusted).
MAX_EXPRESSION_CHARS = 200

_BINARY: dict[type[ast.operator], Callable[[int, int], int]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}


class _NoValue(Exception):
    """The expression has no integer value from the dims given."""


def names(expression: str) -> list[str]:
    """The dim names an expression reads, in order of first use ([] where
    it is not an expression this module reads)."""
    tree = _parse(expression)
    if tree is None:
        return []
    found: dict[str, None] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found[node.id] = None
    return list(found)


def evaluate(expression: str, dims: Mapping[str, int]) -> int | None:
    """The value of a dim named ``expression`` from the ``dims`` given, or
    None (see the module docstring)."""
    tree = _parse(expression)
    if tree is None:
        return None
    try:
        return _value(tree.body, dims)
    except (_NoValue, ZeroDivisionError, OverflowError):
        return None


def _parse(expression: str) -> ast.Expression | None:
    """The expression's tree where it holds an operator (a plain name is
    looked up as is), else None."""
    if not expression or len(expression) > MAX_EXPRESSION_CHARS:
        return None
    try:
        tree = ast.parse(expression, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if not isinstance(tree.body, (ast.BinOp, ast.UnaryOp)):
        return None
    return tree


def _value(node: ast.expr, dims: Mapping[str, int]) -> int:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in dims:
            raise _NoValue(node.id)
        return int(dims[node.id])
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_value(node.operand, dims)
    if isinstance(node, ast.BinOp):
        left, right = _value(node.left, dims), _value(node.right, dims)
        if isinstance(node.op, ast.Div):
            if left % right:
                raise _NoValue("an inexact division")
            return left // right
        fn = _BINARY.get(type(node.op))
        if fn is not None:
            return fn(left, right)
    raise _NoValue(type(node).__name__)
