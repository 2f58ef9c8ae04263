from __future__ import annotations

from typing import Any

import numpy
import pytest
import torch

from pytorch_pfn_extras.interop import as_numpy_dtype, from_numpy_dtype

PAIRS = [
    (torch.bool, numpy.bool_),
    (torch.uint8, numpy.uint8),
    (torch.uint16, numpy.uint16),
    (torch.uint32, numpy.uint32),
    (torch.uint64, numpy.uint64),
    (torch.int8, numpy.int8),
    (torch.int16, numpy.int16),
    (torch.int32, numpy.int32),
    (torch.int64, numpy.int64),
    (torch.float16, numpy.float16),
    (torch.float32, numpy.float32),
    (torch.float64, numpy.float64),
    (torch.complex64, numpy.complex64),
    (torch.complex128, numpy.complex128),
]
PAIR_IDS = [str(t).removeprefix("torch.") for t, _ in PAIRS]


@pytest.mark.parametrize(("torch_dtype", "numpy_type"), PAIRS, ids=PAIR_IDS)
def test_every_common_dtype_maps_both_ways(torch_dtype: torch.dtype, numpy_type: type) -> None:
    assert as_numpy_dtype(torch_dtype) is numpy_type
    assert from_numpy_dtype(numpy_type) is torch_dtype
    assert from_numpy_dtype(numpy.dtype(numpy_type)) is torch_dtype
    assert from_numpy_dtype(as_numpy_dtype(torch_dtype)) is torch_dtype


@pytest.mark.parametrize(("torch_dtype", "numpy_type"), PAIRS, ids=PAIR_IDS)
def test_mapping_agrees_with_torch_own_conversion(
    torch_dtype: torch.dtype, numpy_type: type
) -> None:
    assert torch.zeros(2, dtype=torch_dtype).numpy().dtype == as_numpy_dtype(torch_dtype)
    assert torch.from_numpy(numpy.zeros(2, dtype=numpy_type)).dtype is from_numpy_dtype(numpy_type)


def test_numpy_type_compares_equal_to_numpy_dtype() -> None:
    assert as_numpy_dtype(torch.float32) == numpy.dtype("float32")
    assert numpy.zeros(1, dtype=as_numpy_dtype(torch.int16)).dtype == numpy.int16


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("float32", torch.float32),
        ("<f4", torch.float32),
        (">f4", torch.float32),  # byte order does not matter for the dtype
        (">c16", torch.complex128),
        ("?", torch.bool),
        ("e", torch.float16),
        (float, torch.float64),
        (bool, torch.bool),
        (complex, torch.complex128),
        (numpy.longlong, torch.int64),
        (numpy.intc, torch.int32),
        (numpy.ubyte, torch.uint8),
    ],
    ids=repr,
)
def test_from_numpy_dtype_accepts_anything_numpy_dtype_accepts(
    spec: Any, expected: torch.dtype
) -> None:
    assert from_numpy_dtype(spec) is expected


@pytest.mark.parametrize(
    "torch_dtype",
    [
        torch.bfloat16,
        torch.complex32,
        torch.float8_e4m3fn,
        torch.float8_e5m2,
        torch.qint8,
        torch.quint8,
        torch.qint32,
    ],
    ids=str,
)
def test_torch_dtype_without_numpy_equivalent_is_a_clear_error(torch_dtype: torch.dtype) -> None:
    with pytest.raises(TypeError, match=rf"NumPy has no dtype equivalent to {torch_dtype}"):
        as_numpy_dtype(torch_dtype)


UNSUPPORTED_NUMPY = [
    "O",
    "U3",
    "S2",
    "M8[s]",
    "m8[ms]",
    "V4",
    [("a", "f4"), ("b", "i8")],
    "(2,)f4",
]
if numpy.dtype(numpy.longdouble).itemsize > 8:
    UNSUPPORTED_NUMPY += [numpy.longdouble, numpy.clongdouble]


@pytest.mark.parametrize("spec", UNSUPPORTED_NUMPY, ids=repr)
def test_numpy_dtype_without_torch_equivalent_is_a_clear_error(spec: Any) -> None:
    dtype = numpy.dtype(spec)
    with pytest.raises(TypeError, match="PyTorch has no dtype equivalent") as info:
        from_numpy_dtype(spec)
    assert str(dtype) in str(info.value)


@pytest.mark.parametrize(
    "bad", ["float32", numpy.float32, numpy.dtype("f4"), 3, None, [1]], ids=repr
)
def test_as_numpy_dtype_rejects_non_torch_dtypes_naming_the_type(bad: Any) -> None:
    with pytest.raises(TypeError, match=rf"expects a torch.dtype, got {type(bad).__name__}"):
        as_numpy_dtype(bad)


@pytest.mark.parametrize(
    "bad",
    [None, torch.float32, "not-a-dtype", object()],
    ids=lambda v: "object" if type(v) is object else repr(v),
)
def test_from_numpy_dtype_rejects_non_numpy_dtypes_naming_the_value(bad: Any) -> None:
    with pytest.raises(TypeError, match=r"from_numpy_dtype\(\) expects a NumPy dtype") as info:
        from_numpy_dtype(bad)
    assert repr(bad) in str(info.value)
