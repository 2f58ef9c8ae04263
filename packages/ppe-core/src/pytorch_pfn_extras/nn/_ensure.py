"""Shape and dtype checks usable in eager code and in TorchScript.

This module deliberately does not use ``from __future__ import annotations``:
TorchScript reads the class attribute annotations of :class:`Ensure` at runtime and
does not understand them as strings.
"""

import torch

from pytorch_pfn_extras.interop._checks import is_int


def _dtype_name(dtype: torch.dtype) -> str:
    if not torch.jit.is_scripting():  # type: ignore[attr-defined]
        return str(dtype)
    # TorchScript represents a dtype as an integer; give its messages readable names.
    dtypes = [
        torch.bool,
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
        torch.complex64,
        torch.complex128,
    ]
    names = [
        "torch.bool",
        "torch.uint8",
        "torch.int8",
        "torch.int16",
        "torch.int32",
        "torch.int64",
        "torch.float16",
        "torch.bfloat16",
        "torch.float32",
        "torch.float64",
        "torch.complex64",
        "torch.complex128",
    ]
    for i in range(len(dtypes)):
        if dtypes[i] == dtype:
            return names[i]
    return "dtype #" + str(dtype)


def _shape_str(shape: list[int | None]) -> str:
    dims = ["None" if dim is None else str(dim) for dim in shape]
    return "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"


def _sizes_str(sizes: list[int]) -> str:
    dims = [str(dim) for dim in sizes]
    return "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"


def _check(
    tensor: torch.Tensor,
    shape: list[int | None] | None,
    dtype: torch.dtype | None,
    broadcastable: bool,
    can_cast: bool,
) -> None:
    if shape is not None:
        actual = [int(dim) for dim in tensor.shape]
        wildcards = False
        for expected_dim in shape:
            if expected_dim is None:
                wildcards = True
        if broadcastable or wildcards:
            # As in PPE, a shape with a ``None`` is compared with broadcasting rules.
            ok = True
            for i in range(1, min(len(actual), len(shape)) + 1):
                expected_dim = shape[-i]
                dim = actual[-i]
                if (
                    expected_dim is not None
                    and dim != expected_dim
                    and dim != 1
                    and expected_dim != 1
                ):
                    ok = False
            if not ok:
                message = (
                    "tensor of shape "
                    + _sizes_str(actual)
                    + " is not broadcastable with the expected shape "
                    + _shape_str(shape)
                )
                if not broadcastable:
                    message += " (a shape with None is checked with broadcasting rules)"
                raise ValueError(message)
        else:
            ok = len(actual) == len(shape)
            if ok:
                for i in range(len(shape)):
                    expected_dim = shape[i]
                    if expected_dim is not None and actual[i] != expected_dim:
                        ok = False
            if not ok:
                message = (
                    "expected a tensor of shape "
                    + _shape_str(shape)
                    + ", got shape "
                    + _sizes_str(actual)
                )
                raise ValueError(message)
    if dtype is not None:
        if can_cast:
            if not torch.can_cast(tensor.dtype, dtype):
                message = (
                    "tensor of dtype "
                    + _dtype_name(tensor.dtype)
                    + " cannot be safely cast to the expected dtype "
                    + _dtype_name(dtype)
                )
                raise ValueError(message)
        elif tensor.dtype != dtype:
            message = (
                "expected a tensor of dtype "
                + _dtype_name(dtype)
                + ", got dtype "
                + _dtype_name(tensor.dtype)
            )
            raise ValueError(message)


def _validate_spec(
    shape: tuple[int | None, ...] | None,
    dtype: torch.dtype | None,
    broadcastable: bool,
    can_cast: bool,
) -> list[int | None] | None:
    if shape is None:
        if broadcastable:
            message = "broadcastable=True needs a shape to broadcast against, got shape=None"
            raise ValueError(message)
        spec = None
    else:
        if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
            message = f"shape must be a tuple of ints or None, got {shape!r}"
            raise TypeError(message)
        spec = list(shape)
        for dim in spec:
            if dim is not None and (not is_int(dim) or dim < 0):
                message = f"shape must hold non-negative ints or None, got {dim!r} in {shape!r}"
                raise ValueError(message)
    if dtype is not None and not isinstance(dtype, torch.dtype):
        message = f"dtype must be a torch.dtype, got {dtype!r}"
        raise TypeError(message)
    if can_cast and dtype is None:
        message = "can_cast=True needs a dtype to cast to, got dtype=None"
        raise ValueError(message)
    return spec


def ensure(
    tensor: torch.Tensor,
    shape: tuple[int | None, ...] | None = None,
    dtype: torch.dtype | None = None,
    broadcastable: bool = False,
    can_cast: bool = False,
) -> None:
    """Checks the shape and type of a tensor.

    Args:
        tensor: The tensor to check.
        shape: Tuple with the desired shape. If the input tensor shape is not
            compatible, ValueError will be raised. If ``None`` is set as a dimension
            value, that dimension will be ignored; as in PPE, a shape holding a
            ``None`` is then compared with broadcasting rules (a ``(2, 1)`` tensor
            passes ``(None, 2)``), a shape without ``None`` must be equal.
        dtype: Checks if the dtype of the input tensor matches the provided one.
        broadcastable: Check if the shapes are compatible using broadcasting rules
            instead of requiring them to be equal.
        can_cast: Check if the input tensor can be safely cast to ``dtype``
            (:func:`torch.can_cast`) instead of requiring the same dtype.

    Raises:
        ValueError: The tensor does not match; the message names the expected and the
            actual shape or dtype. Also raised for ``broadcastable`` without ``shape``
            and ``can_cast`` without ``dtype``.

    Example:
        >>> ensure(torch.zeros(8, 3), shape=(None, 3), dtype=torch.float32)
        >>> ensure(torch.zeros(8, 4), shape=(None, 3))
        Traceback (most recent call last):
        ...
        ValueError: tensor of shape (8, 4) is not broadcastable with the expected shape (None, 3) (a shape with None is checked with broadcasting rules)
    """
    spec = _validate_spec(shape, dtype, broadcastable, can_cast)
    _check(tensor, spec, dtype, broadcastable, can_cast)


class Ensure(torch.nn.Module):
    """Module to check the shape and dtype of a tensor; it returns the tensor unchanged.

    The check runs in eager mode and in TorchScript (``torch.jit.script`` of a model
    holding an ``Ensure`` compiles it).

    Args:
        shape: Tuple with the desired shape. If the input tensor shape is not
            compatible, ValueError will be raised. If ``None`` is set as a dimension
            value, that dimension will be ignored; a shape holding a ``None`` is
            compared with broadcasting rules, as :func:`ensure` describes.
        dtype: Checks if the dtype of the input tensor matches the provided one.
        broadcastable: Check if the shapes are compatible using broadcasting rules.
        can_cast: Check if the input tensor can be casted to the provided type.

    Raises:
        ValueError: Neither ``shape`` nor ``dtype`` is given, or ``broadcastable``
            without ``shape``, or ``can_cast`` without ``dtype``.

    Example:
        >>> model = torch.nn.Sequential(
        ...     Ensure(shape=(None, 3)), torch.nn.Linear(3, 1), Ensure(shape=(None, 1))
        ... )
        >>> model(torch.zeros(2, 3)).shape
        torch.Size([2, 1])
    """

    _shape: list[int | None] | None
    _dtype: torch.dtype | None
    _broadcastable: bool
    _can_cast: bool

    def __init__(
        self,
        *,
        shape: tuple[int | None, ...] | None = None,
        dtype: torch.dtype | None = None,
        broadcastable: bool = False,
        can_cast: bool = False,
    ) -> None:
        super().__init__()
        if shape is None and dtype is None:
            message = "Ensure needs something to check: give shape, dtype or both"
            raise ValueError(message)
        self._shape = _validate_spec(shape, dtype, broadcastable, can_cast)
        self._dtype = dtype
        self._broadcastable = broadcastable
        self._can_cast = can_cast

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        _check(input, self._shape, self._dtype, self._broadcastable, self._can_cast)
        return input

    def extra_repr(self) -> str:
        parts = []
        if self._shape is not None:
            parts.append("shape=" + _shape_str(self._shape))
        if self._dtype is not None:
            parts.append("dtype=" + str(self._dtype))
        if self._broadcastable:
            parts.append("broadcastable=True")
        if self._can_cast:
            parts.append("can_cast=True")
        return ", ".join(parts)
