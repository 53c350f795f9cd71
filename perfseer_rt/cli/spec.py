"""The options of :mod:`perfseer_rt.predict.options` as click options, for
the commands that predict (``predict``, ``check``, ``fit``)."""

from __future__ import annotations

from typing import Any, Callable, TypeVar

import click

from perfseer_rt.predict import options

_F = TypeVar("_F", bound=Callable[..., Any])


def spec_options(fn: Callable[..., Any]) -> Callable[[_F], _F]:
    """click options for every option of :mod:`perfseer_rt.predict.options`
    that ``fn`` (the command's library call) takes; the command receives
    them as ``opt_<name>`` keywords, for :func:`spec_values`."""
    def decorate(command: _F) -> _F:
        for opt, _ in reversed(options.options_for(fn)):
            if opt.switch:
                command = click.option(opt.flag, f"opt_{opt.name}", is_flag=True, default=False,
                                       help=opt.help)(command)
                continue
            kind: Any = click.Choice(list(opt.choices)) if opt.choices else str
            command = click.option(opt.flag, f"opt_{opt.name}", multiple=opt.multiple, type=kind,
                                   default=() if opt.multiple else opt.default,
                                   show_default=opt.default is not None, metavar=opt.metavar,
                                   help=opt.help)(command)
        return command
    return decorate


def spec_values(fn: Callable[..., Any], params: dict[str, Any]) -> dict[str, Any]:
    """``fn``'s keyword arguments from the ``opt_<name>`` values of
    :func:`spec_options` in ``params`` (removed from it); options not given
    are left out."""
    given: dict[str, list[str]] = {}
    for key in [k for k in params if k.startswith("opt_")]:
        value = params.pop(key)
        if isinstance(value, bool):  # a switch: given when set
            value = "true" if value else None
        if value is not None and value != ():
            given[key[4:]] = list(value) if isinstance(value, tuple) else [str(value)]
    return options.parse_options(fn, given)
