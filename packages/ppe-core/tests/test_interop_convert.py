from __future__ import annotations

from typing import Any

import numpy
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from pytorch_pfn_extras.interop import (
    as_ndarray,
    as_numpy_dtype,
    from_ndarray,
    from_numpy_dtype,
    get_xp,
)

NUMPY_DTYPES = [
    "bool",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "int8",
    "int16",
    "int32",
    "int64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
]


def _one(dtype: numpy.dtype[Any]) -> Any:
    return numpy.ones((), dtype=dtype)[()]


# ---------------------------------------------------------------- from_ndarray


@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
def test_from_ndarray_shares_memory_both_ways(dtype: str) -> None:
    array = numpy.zeros((2, 3), dtype=dtype)
    tensor = from_ndarray(array)
    assert tensor.dtype is from_numpy_dtype(dtype)
    assert tensor.shape == (2, 3)
    assert tensor.device.type == "cpu"
    tensor[1, 2] = 1
    assert array[1, 2] == _one(array.dtype)
    array[0, 0] = 1
    assert tensor[0, 0].item() == 1


@pytest.mark.parametrize(
    "view",
    [lambda a: a.T, lambda a: a[:, ::2], lambda a: a[1:, 1:3], lambda a: a[::2, ::3]],
    ids=["transposed", "strided-columns", "window", "two-strides"],
)
def test_from_ndarray_shares_memory_with_positive_stride_views(view: Any) -> None:
    base = numpy.arange(24, dtype=numpy.float64).reshape(4, 6)
    array = view(base)
    assert not array.flags.c_contiguous or array.size < base.size
    tensor = from_ndarray(array)
    numpy.testing.assert_array_equal(tensor.numpy(), array)
    tensor.fill_(-1)
    assert (array == -1).all()
    assert (base == -1).sum() == array.size


@pytest.mark.parametrize(
    "view",
    [lambda a: a[::-1], lambda a: a[:, ::-2], lambda a: numpy.flip(a)],
    ids=["reversed-rows", "reversed-columns", "flipped"],
)
def test_from_ndarray_copies_arrays_with_negative_strides(view: Any) -> None:
    base = numpy.arange(12, dtype=numpy.int32).reshape(3, 4)
    array = view(base)
    tensor = from_ndarray(array)
    numpy.testing.assert_array_equal(tensor.numpy(), array)
    tensor.fill_(0)
    numpy.testing.assert_array_equal(base, numpy.arange(12).reshape(3, 4))


def test_from_ndarray_copies_a_record_field_whose_stride_is_not_a_multiple_of_the_item() -> None:
    records = numpy.zeros(3, dtype=[("a", "i1"), ("b", "f4")])
    records["b"] = [1.5, 2.5, 3.5]
    tensor = from_ndarray(records["b"])
    assert tensor.dtype is torch.float32
    assert tensor.tolist() == [1.5, 2.5, 3.5]


@pytest.mark.parametrize("dtype", [">i4", ">f8", ">c8"])
def test_from_ndarray_converts_non_native_byte_order(dtype: str) -> None:
    array = numpy.array([1, 2, 300], dtype=dtype)
    tensor = from_ndarray(array)
    assert tensor.dtype is from_numpy_dtype(dtype)
    numpy.testing.assert_array_equal(tensor.numpy(), array)


def test_from_ndarray_copies_read_only_arrays_without_warning() -> None:
    array = numpy.arange(4.0)
    array.flags.writeable = False
    tensor = from_ndarray(array)  # filterwarnings=error: PyTorch's warning would fail here
    tensor.add_(1)
    numpy.testing.assert_array_equal(array, numpy.arange(4.0))
    assert tensor.tolist() == [1.0, 2.0, 3.0, 4.0]


@pytest.mark.parametrize("shape", [(), (0,), (0, 3), (2, 0, 1)], ids=str)
def test_from_ndarray_handles_scalars_and_empty_arrays(shape: tuple[int, ...]) -> None:
    array = numpy.full(shape, 7, dtype=numpy.int64)
    tensor = from_ndarray(array)
    assert tensor.shape == shape
    assert tensor.dtype is torch.int64
    if not shape:
        assert tensor.item() == 7


def test_from_ndarray_accepts_ndarray_subclasses() -> None:
    array = numpy.ma.masked_array([1.0, 2.0], mask=[False, True])
    tensor = from_ndarray(array)
    tensor[0] = 5.0
    assert array.data[0] == 5.0


def _read_only(array: Any) -> Any:
    array.flags.writeable = False
    return array


@pytest.mark.parametrize(
    "dtype", ["O", "U3", "M8[s]", ">M8[s]", [("a", "f4"), ("b", "f8")]], ids=repr
)
@pytest.mark.parametrize(
    "layout", [lambda a: a, lambda a: a[::-1], _read_only], ids=["plain", "reversed", "read-only"]
)
def test_from_ndarray_rejects_dtypes_torch_lacks_naming_the_dtype(dtype: Any, layout: Any) -> None:
    array = layout(numpy.zeros(2, dtype=dtype))
    with pytest.raises(TypeError, match="PyTorch has no dtype") as info:
        from_ndarray(array)
    assert str(array.dtype) in str(info.value)


@pytest.mark.parametrize(
    ("bad", "name"),
    [([1, 2], "list"), (3.0, "float"), (None, "NoneType"), (torch.zeros(2), "torch.Tensor")],
    ids=["list", "float", "None", "tensor"],
)
def test_from_ndarray_rejects_non_arrays_naming_the_type(bad: Any, name: str) -> None:
    with pytest.raises(TypeError, match=rf"expects a numpy.ndarray or cupy.ndarray, got .*{name}"):
        from_ndarray(bad)


# ---------------------------------------------------------------- as_ndarray


@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
def test_as_ndarray_shares_memory_both_ways(dtype: str) -> None:
    torch_dtype = from_numpy_dtype(dtype)
    tensor = torch.zeros(2, 3, dtype=torch_dtype)
    array = as_ndarray(tensor)
    assert isinstance(array, numpy.ndarray)
    assert array.dtype == as_numpy_dtype(torch_dtype)
    assert array.shape == (2, 3)
    array[1, 2] = 1
    assert tensor[1, 2].item() == 1
    tensor[0, 0] = 1
    assert array[0, 0] == _one(array.dtype)


def test_as_ndarray_keeps_strides_of_non_contiguous_tensors() -> None:
    base = torch.arange(24.0).reshape(4, 6)
    view = base.t()[::2]
    array = as_ndarray(view)
    numpy.testing.assert_array_equal(array, view.numpy())
    assert array.strides == tuple(s * base.element_size() for s in view.stride())
    array[...] = -1
    assert (base == -1).sum().item() == view.numel()


def test_as_ndarray_detaches_tensors_that_require_grad() -> None:
    weight = torch.ones(3, requires_grad=True)
    array = as_ndarray(weight)
    array[0] = 4.0  # not tracked by autograd, but visible in the tensor
    assert weight[0].item() == 4.0
    assert weight.requires_grad
    (weight * 2).sum().backward()
    assert weight.grad is not None
    assert weight.grad.tolist() == [2.0, 2.0, 2.0]


@pytest.mark.parametrize(
    "dtype",
    [
        torch.bfloat16,
        torch.float8_e5m2,
        pytest.param(
            torch.complex32,
            marks=pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental"),
        ),
    ],
    ids=str,
)
def test_as_ndarray_rejects_dtypes_numpy_lacks_naming_the_dtype(dtype: torch.dtype) -> None:
    tensor = torch.zeros(2, dtype=torch.float32).to(dtype)
    with pytest.raises(TypeError, match=rf"NumPy has no dtype equivalent to {dtype}"):
        as_ndarray(tensor)


def test_as_ndarray_rejects_sparse_tensors() -> None:
    with pytest.raises(TypeError, match=r"layout torch.sparse_coo; call tensor.to_dense\(\)"):
        as_ndarray(torch.eye(2).to_sparse())


def test_as_ndarray_rejects_lazy_conjugate_and_negative_views() -> None:
    complex_tensor = torch.tensor([1 + 2j, 3 - 1j])
    with pytest.raises(ValueError, match=r"conjugate bit.*resolve_conj\(\)"):
        as_ndarray(complex_tensor.conj())
    with pytest.raises(ValueError, match=r"negative bit.*resolve_neg\(\)"):
        as_ndarray(complex_tensor.conj().imag)
    numpy.testing.assert_array_equal(
        as_ndarray(complex_tensor.conj().resolve_conj()), [1 - 2j, 3 + 1j]
    )


def test_as_ndarray_rejects_meta_tensors_naming_the_device() -> None:
    with pytest.raises(ValueError, match=r"supports the cpu device .* got meta"):
        as_ndarray(torch.empty(2, device="meta"))


@pytest.mark.parametrize("bad", [numpy.zeros(2), [1.0], "tensor"], ids=repr)
def test_as_ndarray_rejects_non_tensors_naming_the_type(bad: Any) -> None:
    with pytest.raises(TypeError, match=rf"expects a torch.Tensor, got .*{type(bad).__name__}"):
        as_ndarray(bad)


# ---------------------------------------------------------------- get_xp


@pytest.mark.parametrize(
    "obj",
    [
        torch.zeros(2),
        torch.zeros(2, requires_grad=True),
        torch.device("cpu"),
        numpy.zeros(2),
        numpy.float32(1.0),
        numpy.ma.masked_array([1.0]),
    ],
    ids=["tensor", "grad-tensor", "device", "ndarray", "numpy-scalar", "masked-array"],
)
def test_get_xp_returns_numpy_for_cpu_objects(obj: Any) -> None:
    assert get_xp(obj) is numpy


@pytest.mark.parametrize("obj", [torch.device("meta"), torch.empty(1, device="meta")], ids=repr)
def test_get_xp_rejects_devices_other_than_cpu_and_cuda(obj: Any) -> None:
    with pytest.raises(ValueError, match="got meta"):
        get_xp(obj)


@pytest.mark.parametrize(
    ("bad", "name"), [("cuda", "str"), ([1], "list"), (None, "NoneType"), (1.5, "float")]
)
def test_get_xp_rejects_other_objects_naming_the_type(bad: Any, name: str) -> None:
    with pytest.raises(TypeError, match=rf"get_xp\(\) expects .*, got {name}"):
        get_xp(bad)


# ---------------------------------------------------------------- properties


def _sliced_arrays() -> st.SearchStrategy[numpy.ndarray[Any, Any]]:
    dtypes = st.sampled_from([numpy.dtype(d) for d in NUMPY_DTYPES])
    arrays = hnp.arrays(dtypes, hnp.array_shapes(min_dims=0, max_dims=3, max_side=5))
    return arrays.flatmap(
        lambda a: st.tuples(st.just(a), hnp.basic_indices(a.shape, allow_newaxis=True)).map(
            lambda pair: numpy.asarray(pair[0][pair[1]])
        )
    )


@settings(deadline=None)
@given(_sliced_arrays())
def test_round_trip_preserves_values_dtype_and_shape_of_any_view(array: Any) -> None:
    tensor = from_ndarray(array)
    assert tensor.dtype is from_numpy_dtype(array.dtype)
    assert tuple(tensor.shape) == array.shape
    back = as_ndarray(tensor)
    assert back.dtype == array.dtype
    numpy.testing.assert_array_equal(back, array)
    if array.size and all(s >= 0 for s in array.strides) and array.flags.writeable:
        assert numpy.shares_memory(back, array)
