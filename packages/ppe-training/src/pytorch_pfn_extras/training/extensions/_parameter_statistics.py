"""ParameterStatistics: report statistics of the parameters and gradients of modules."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias

import torch

from pytorch_pfn_extras.training._extension import PRIORITY_WRITER, Extension
from pytorch_pfn_extras.training._trigger_util import TriggerLike
from pytorch_pfn_extras.training.extensions._percentiles import linear_percentiles

if TYPE_CHECKING:
    from pytorch_pfn_extras.training._manager_protocol import ExtensionsManagerProtocol

StatisticFn: TypeAlias = Callable[[torch.Tensor], Any]

PERCENTILE_SIGMAS = (0.13, 2.28, 15.87, 50.0, 84.13, 97.72, 99.87)
"""Percentiles of the ``'percentile'`` statistic: the mean and -3 to +3 sigmas of a normal."""


def _percentile(x: torch.Tensor) -> torch.Tensor:
    """NumPy's ``percentile(x, PERCENTILE_SIGMAS)`` (linear interpolation), of any size."""
    return linear_percentiles(x, PERCENTILE_SIGMAS)


DEFAULT_STATISTICS: Mapping[str, StatisticFn] = {
    "mean": torch.mean,
    "std": lambda x: torch.std(x, correction=0),
    "min": torch.amin,
    "max": torch.amax,
    "zeros": lambda x: torch.count_nonzero(x == 0),
    "percentile": _percentile,
}
"""The statistics reported by ``statistics='default'``, as in PPE."""


class _Target(NamedTuple):
    """One tensor whose statistics are reported: a parameter's data or gradient."""

    key: str  # "<prefix>/<link name>/<param name>/<data|grad>"
    parameter: torch.nn.Parameter
    attr: str  # "data" or "grad"


def _named_links(links: Any) -> list[tuple[str | None, torch.nn.Module]]:
    if isinstance(links, torch.nn.Module):
        items: list[tuple[str | None, Any]] = [(None, links)]
    elif isinstance(links, Mapping):
        items = [(str(name), link) for name, link in links.items()]
    elif isinstance(links, Iterable) and not isinstance(links, (str, bytes)):
        items = [(None, link) for link in links]
    else:
        message = (
            "ParameterStatistics: links must be a torch.nn.Module, an iterable of modules or a "
            f"mapping of names to modules, got {type(links).__name__}"
        )
        raise TypeError(message)
    if not items:
        message = "ParameterStatistics: links is empty; give at least one torch.nn.Module"
        raise ValueError(message)
    named: list[tuple[str | None, torch.nn.Module]] = []
    for name, link in items:
        if not isinstance(link, torch.nn.Module):
            message = f"ParameterStatistics: links must be torch.nn.Module, got {link!r}"
            raise TypeError(message)
        if name is None:
            attr = getattr(link, "name", None)
            name = attr if isinstance(attr, str) and attr else None
        named.append((name, link))
    return named


def _statistic_functions(statistics: Any) -> dict[str, StatisticFn]:
    if isinstance(statistics, str):
        if statistics != "default":
            message = (
                "ParameterStatistics: statistics must be 'default', a dict of name -> function "
                f"or names among {sorted(DEFAULT_STATISTICS)}, got {statistics!r}"
            )
            raise ValueError(message)
        return dict(DEFAULT_STATISTICS)
    if isinstance(statistics, Mapping):
        functions = dict(statistics)
    else:
        names = list(statistics)
        unknown = [name for name in names if name not in DEFAULT_STATISTICS]
        if unknown:
            message = (
                f"ParameterStatistics: unknown statistics {unknown}; the built-in ones are "
                f"{sorted(DEFAULT_STATISTICS)} (pass a dict name -> function for others)"
            )
            raise ValueError(message)
        functions = {name: DEFAULT_STATISTICS[name] for name in names}
    for name, function in functions.items():
        if not isinstance(name, str) or not name:
            message = (
                f"ParameterStatistics: statistic names must be non-empty strings, got {name!r}"
            )
            raise ValueError(message)
        if not callable(function):
            message = (
                f"ParameterStatistics: the statistic {name!r} must be a function of a 1-D "
                f"tensor, got {function!r}"
            )
            raise TypeError(message)
    return functions


class ParameterStatistics(Extension):
    """An extension to report parameter statistics.

    When its trigger fires, each statistic function is applied to every parameter of
    ``links`` (flattened to one dimension) and to its gradient, as they are at that moment,
    and the values are reported into the observation (the extension has the writer
    priority, so a :class:`~pytorch_pfn_extras.training.extensions.LogReport` logs them).
    Nothing runs between triggers, and the values stay tensors on the parameters' device
    (no synchronization): the cost is paid once per trigger.

    Keys are ``<prefix>/<link name>/<param name>/<data|grad>/<statistic>``, e.g.
    ``'stats/encoder/fc1.weight/grad/mean'``; the prefix is omitted when ``None``, the link
    name when the module has no ``name`` attribute (a mapping ``{name: module}`` names them
    too); parameter names are those of ``named_parameters()``. A statistic returning several
    values gets one key per value with an index appended (``.../percentile/0``).

    Args:
        links: A module, an iterable of modules, or a mapping of names to modules. Children
            of a module are reported separately, one key per parameter.
        statistics: ``'default'`` (``mean``, ``std``, ``min``, ``max``, ``zeros``, the count
            of zeros, and ``percentile``, at :data:`PERCENTILE_SIGMAS`), a dict of name to
            function of a 1-D tensor returning a number or a tensor, or an iterable of
            names of the default statistics.
        report_params: Report the statistics of the parameter values.
        report_grads: Report the statistics of the gradients (parameters without gradient
            are skipped).
        prefix: Prefix of the report keys.
        trigger: When to compute and report the statistics; one epoch by default.
        skip_nan_params: Report NaN for every statistic of a tensor containing NaN instead
            of computing them (the keys stay the same, so logs keep their columns).

    Raises:
        ValueError: An unknown statistic name, empty ``links``, or two parameters with the
            same key (give the modules names).
        TypeError: ``links`` holds something that is not a module, or a statistic is not
            callable.

    Example:
        >>> manager.extend(extensions.ParameterStatistics(model, prefix="stats"))
    """

    trigger: TriggerLike = (1, "epoch")
    priority = PRIORITY_WRITER
    needs_model_state = True

    def __init__(
        self,
        links: Any,
        statistics: Any = "default",
        report_params: bool = True,
        report_grads: bool = True,
        prefix: str | None = None,
        trigger: TriggerLike = (1, "epoch"),
        skip_nan_params: bool = False,
    ) -> None:
        self._statistics = _statistic_functions(statistics)
        self.trigger = trigger
        self._skip_nan_params = skip_nan_params
        attrs = [attr for attr, on in (("data", report_params), ("grad", report_grads)) if on]
        self._targets: list[_Target] = []
        seen: set[str] = set()
        for link_name, link in _named_links(links):
            for param_name, parameter in link.named_parameters():
                base = "/".join(part for part in (prefix, link_name, param_name) if part)
                if base in seen:
                    message = (
                        f"ParameterStatistics: two parameters would be reported as {base!r}; "
                        "give the modules distinct names (a `name` attribute or a mapping)"
                    )
                    raise ValueError(message)
                seen.add(base)
                self._targets.extend(_Target(f"{base}/{attr}", parameter, attr) for attr in attrs)

    def register_statistics(self, name: str, function: StatisticFn) -> None:
        """Add (or replace) the statistic ``name``, a function of a 1-D tensor."""
        self._statistics.update(_statistic_functions({name: function}))

    def _compute(self, x: torch.Tensor) -> tuple[list[str], torch.Tensor]:
        """The stacked statistics of ``x`` (float64, on its device) and their key suffixes."""
        x = x.detach().flatten()
        if not x.is_floating_point():  # integer or boolean parameters (no gradient)
            x = x.to(torch.float64)
        suffixes: list[str] = []
        parts: list[torch.Tensor] = []
        empty = x.numel() == 0
        for name, function in self._statistics.items():
            if empty:  # min/max/percentile are undefined: NaN, one value per statistic
                value = torch.full((1,), float("nan"), dtype=torch.float64, device=x.device)
            else:
                value = torch.as_tensor(function(x), device=x.device).to(torch.float64)
                value = value.reshape(-1)
            n = value.numel()
            suffixes.extend([name] if n == 1 else [f"{name}/{i}" for i in range(n)])
            parts.append(value)
        stacked = torch.cat(parts)
        if self._skip_nan_params and not empty:
            stacked = torch.where(torch.isnan(x).any(), float("nan"), stacked)
        return suffixes, stacked

    def __call__(self, manager: ExtensionsManagerProtocol) -> None:
        """Compute the statistics of the current parameters and gradients, and report them."""
        report: dict[str, Any] = {}
        with torch.no_grad():
            for target in self._targets:
                tensor = target.parameter if target.attr == "data" else target.parameter.grad
                if tensor is None:
                    continue
                suffixes, stacked = self._compute(tensor)
                report.update(
                    zip([f"{target.key}/{suffix}" for suffix in suffixes], stacked.unbind())
                )
        manager.reporter.report(report)
