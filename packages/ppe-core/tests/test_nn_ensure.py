from __future__ import annotations

import re
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pytorch_pfn_extras.nn import Ensure, ensure

SCRIPT_DEPRECATION = "ignore:`torch.jit.script` is deprecated:DeprecationWarning"


@pytest.mark.parametrize(
    ("shape", "expected"),
    [
        ((2, 3), (2, 3)),
        ((2, 3), (None, 3)),
        ((2, 3), (None, None)),
        ((), ()),
        ((5,), (5,)),
        ((0, 4), (0, None)),
    ],
)
def test_matching_shapes_pass(shape: tuple[int, ...], expected: tuple[int | None, ...]) -> None:
    tensor = torch.zeros(shape)
    ensure(tensor, shape=expected)
    assert Ensure(shape=expected)(tensor) is tensor


@pytest.mark.parametrize(
    ("shape", "expected", "message"),
    [
        (
            (2, 4),
            (None, 3),
            "tensor of shape (2, 4) is not broadcastable with the expected shape (None, 3) "
            "(a shape with None is checked with broadcasting rules)",
        ),
        ((2, 3, 1), (2, 3), "expected a tensor of shape (2, 3), got shape (2, 3, 1)"),
        ((2, 1), (2, 3), "expected a tensor of shape (2, 3), got shape (2, 1)"),
        ((3,), (), "expected a tensor of shape (), got shape (3,)"),
    ],
)
def test_mismatching_shapes_name_expected_and_actual(
    shape: tuple[int, ...], expected: tuple[int | None, ...], message: str
) -> None:
    tensor = torch.zeros(shape)
    with pytest.raises(ValueError, match=re.escape(message)):
        ensure(tensor, shape=expected)
    with pytest.raises(ValueError, match=re.escape(message)):
        Ensure(shape=expected)(tensor)


@pytest.mark.parametrize(
    ("shape", "expected", "ok"),
    [
        ((4, 3), (3,), True),
        ((4, 1), (4, 5), True),
        ((1,), (2, 5), True),
        ((7, 3), (None, 3), True),
        ((4, 3), (4,), False),
        ((2, 3), (3, 3), False),
        ((2, 5, 3), (None, 4), False),
    ],
)
def test_broadcastable_shapes_follow_broadcasting_rules(
    shape: tuple[int, ...], expected: tuple[int | None, ...], ok: bool
) -> None:
    tensor = torch.zeros(shape)
    if ok:
        ensure(tensor, shape=expected, broadcastable=True)
        return
    message = f"tensor of shape {tuple(shape)} is not broadcastable with the expected shape"
    with pytest.raises(ValueError, match=re.escape(message)):
        ensure(tensor, shape=expected, broadcastable=True)


@pytest.mark.parametrize(
    ("shape", "expected"),
    [
        ((2, 1), (None, 2)),  # the size-1 dimension broadcasts to 2
        ((4, 1, 3), (None, 5, 3)),
        ((3,), (None, 3)),  # fewer dimensions broadcast too
        ((), (None,)),
        ((6, 2, 3), (None, 3)),
    ],
)
def test_a_shape_with_none_accepts_broadcastable_tensors_as_in_ppe(
    shape: tuple[int, ...], expected: tuple[int | None, ...]
) -> None:
    tensor = torch.zeros(shape)
    ensure(tensor, shape=expected)
    assert Ensure(shape=expected)(tensor) is tensor


@pytest.mark.parametrize(("shape", "expected"), [((2, 3), (None, 2)), ((4, 2, 2), (3, None, 2))])
def test_a_shape_with_none_rejects_tensors_that_do_not_broadcast(
    shape: tuple[int, ...], expected: tuple[int | None, ...]
) -> None:
    with pytest.raises(
        ValueError, match=re.escape(f"tensor of shape {shape} is not broadcastable")
    ):
        Ensure(shape=expected)(torch.zeros(shape))


def test_dtype_must_match_exactly_by_default() -> None:
    ensure(torch.zeros(2, dtype=torch.int64), dtype=torch.int64)
    with pytest.raises(
        ValueError,
        match=re.escape("expected a tensor of dtype torch.float64, got dtype torch.float32"),
    ):
        Ensure(dtype=torch.float64)(torch.zeros(2))


@pytest.mark.parametrize(
    ("dtype", "target", "ok"),
    [
        (torch.int32, torch.float32, True),
        (torch.float16, torch.float64, True),
        (torch.bool, torch.int8, True),
        (torch.float32, torch.int64, False),
        (torch.complex64, torch.float64, False),
    ],
)
def test_can_cast_accepts_safe_casts_only(
    dtype: torch.dtype, target: torch.dtype, ok: bool
) -> None:
    tensor = torch.zeros(3, dtype=dtype)
    if ok:
        ensure(tensor, dtype=target, can_cast=True)
        return
    message = f"tensor of dtype {dtype} cannot be safely cast to the expected dtype {target}"
    with pytest.raises(ValueError, match=re.escape(message)):
        Ensure(dtype=target, can_cast=True)(tensor)


def test_shape_and_dtype_are_both_checked() -> None:
    check = Ensure(shape=(None, 2), dtype=torch.float32)
    check(torch.zeros(5, 2))
    with pytest.raises(ValueError, match="shape"):
        check(torch.zeros(5, 3))
    with pytest.raises(ValueError, match="dtype"):
        check(torch.zeros(5, 2, dtype=torch.float64))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({}, ValueError, "give shape, dtype or both"),
        ({"dtype": torch.float32, "broadcastable": True}, ValueError, "broadcastable=True needs"),
        ({"shape": (1,), "can_cast": True}, ValueError, "can_cast=True needs"),
        ({"shape": (2, -1)}, ValueError, r"non-negative ints or None, got -1 in \(2, -1\)"),
        ({"shape": (2.0,)}, ValueError, r"got 2\.0"),
        ({"shape": 3}, TypeError, "shape must be a tuple of ints or None, got 3"),
        ({"dtype": "float32"}, TypeError, "dtype must be a torch.dtype, got 'float32'"),
    ],
)
def test_invalid_specifications_are_rejected(
    kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        Ensure(**kwargs)


def test_the_function_validates_its_specification_too() -> None:
    with pytest.raises(ValueError, match="broadcastable=True needs a shape"):
        ensure(torch.zeros(1), broadcastable=True)


def test_repr_shows_the_checks() -> None:
    check = Ensure(shape=(None, 3), dtype=torch.int8, can_cast=True)
    assert repr(check) == "Ensure(shape=(None, 3), dtype=torch.int8, can_cast=True)"


@pytest.mark.filterwarnings(SCRIPT_DEPRECATION)
def test_models_using_ensure_can_be_scripted() -> None:
    model = torch.nn.Sequential(
        Ensure(shape=(None, 3), dtype=torch.float32),
        torch.nn.Linear(3, 2),
        Ensure(shape=(2,), broadcastable=True),
        Ensure(dtype=torch.float64, can_cast=True),
    )
    scripted = torch.jit.script(model)
    x = torch.randn(4, 3)
    torch.testing.assert_close(scripted(x), model(x))

    with pytest.raises(
        torch.jit.Error,
        match=re.escape(
            "tensor of shape (4, 5) is not broadcastable with the expected shape (None, 3)"
        ),
    ):
        scripted(torch.zeros(4, 5))
    # Scripted, a shape with None is checked with broadcasting rules too.
    torch.jit.script(Ensure(shape=(None, 3)))(torch.zeros(4, 1))
    with pytest.raises(
        torch.jit.Error,
        match=re.escape("expected a tensor of dtype torch.float32, got dtype torch.int64"),
    ):
        scripted(torch.zeros(4, 3, dtype=torch.int64))


@pytest.mark.filterwarnings(SCRIPT_DEPRECATION)
def test_scripted_checks_name_dtypes_like_eager_ones() -> None:
    scripted = torch.jit.script(Ensure(dtype=torch.bfloat16, can_cast=True))
    with pytest.raises(
        torch.jit.Error,
        match=re.escape(
            "tensor of dtype torch.complex128 cannot be safely cast to the expected dtype torch.bfloat16"
        ),
    ):
        scripted(torch.zeros(1, dtype=torch.complex128))


def _reference_matches(
    actual: tuple[int, ...], expected: tuple[int | None, ...], broadcastable: bool
) -> bool:
    if not broadcastable and None not in expected:
        return actual == expected
    # A shape with None is compared with broadcasting rules, as in PPE;
    # None takes the size of the tensor's aligned dimension.
    concrete = list(expected)
    for i in range(1, len(expected) + 1):
        if concrete[-i] is None:
            concrete[-i] = actual[-i] if i <= len(actual) else 1
    try:
        torch.broadcast_shapes(actual, tuple(concrete))
    except RuntimeError:
        return False
    return True


@settings(max_examples=150, deadline=None)
@given(
    actual=st.lists(st.integers(0, 3), max_size=4).map(tuple),
    expected=st.lists(st.one_of(st.none(), st.integers(0, 3)), max_size=4).map(tuple),
    broadcastable=st.booleans(),
)
def test_shape_check_agrees_with_a_reference(
    actual: tuple[int, ...], expected: tuple[int | None, ...], broadcastable: bool
) -> None:
    tensor = torch.empty(actual)
    try:
        ensure(tensor, shape=expected, broadcastable=broadcastable)
    except ValueError:
        passed = False
    else:
        passed = True
    assert passed == _reference_matches(actual, expected, broadcastable)
