"""Every example of the reference docs' Config chapter runs and prints what the docs say.

The docs call ``yaml.load(text)``, which PyYAML 6 refuses without a ``Loader``; the examples use
``yaml.safe_load``, which returns the same trees.
"""

from __future__ import annotations

import pytest
import yaml

from pytorch_pfn_extras.config import Config, customize_type


def printed(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return capsys.readouterr().out.splitlines()


def test_basic_access(capsys: pytest.CaptureFixture[str]) -> None:
    pre_eval_config = yaml.safe_load(
        """
foo:
  bar: 'bar_value'
  ls:
    - 'first'
    - key0: 'value0'
      key1: 'value1'
baz: 'baz_value'
"""
    )
    config = Config(pre_eval_config)
    print(config["/foo/ls/0"])
    print(config["/foo/ls/1/key0"])
    print(config["/foo/ls"])
    print(config["/baz"])
    assert printed(capsys) == [
        "first",
        "value0",
        "['first', {'key0': 'value0', 'key1': 'value1'}]",
        "baz_value",
    ]


def concat(x0: str, x1: str) -> str:
    return x0 + " " + x1


def test_callable_substitution(capsys: pytest.CaptureFixture[str]) -> None:
    pre_eval_config = yaml.safe_load(
        """
name:
  type: concat
  x0: 'First'
  x1: 'Last'
"""
    )
    types = {"concat": lambda x0, x1: x0 + " " + x1}
    config = Config(pre_eval_config, types)
    print(config["/name"])
    assert printed(capsys) == ["First Last"]


def test_nested_callable_substitution(capsys: pytest.CaptureFixture[str]) -> None:
    pre_eval_config = yaml.safe_load(
        """
name:
  type: concat
  x0: 'First'
  x1:
    type: concat
    x0: 'Middle'
    x1: 'Last'
"""
    )
    config = Config(pre_eval_config, {"concat": concat})
    print(config["/name"])
    assert printed(capsys) == ["First Middle Last"]


def test_class_substitution(capsys: pytest.CaptureFixture[str]) -> None:
    pre_eval_config = yaml.safe_load(
        """
dataset:
  type: Dataset
  n_class: 10
"""
    )

    class Dataset:
        def __init__(self, n_class: int) -> None:
            self.n_class = n_class

    config = Config(pre_eval_config, {"Dataset": Dataset})
    print(isinstance(config["/dataset"], Dataset))
    assert printed(capsys) == ["True"]
    assert config["/dataset"].n_class == 10


def test_absolute_path_substitution(capsys: pytest.CaptureFixture[str]) -> None:
    pre_eval_config = yaml.safe_load(
        """
foo: 'FOO'
boo:
  baz: '@/foo'
"""
    )
    config = Config(pre_eval_config)
    print(config["/boo/baz"])
    assert printed(capsys) == ["FOO"]


def test_relative_path_substitution(capsys: pytest.CaptureFixture[str]) -> None:
    pre_eval_config = yaml.safe_load(
        """
foo: 'FOO'
boo:
  baz: '@../foo'
"""
    )
    config = Config(pre_eval_config)
    print(config["/boo/baz"])
    assert printed(capsys) == ["FOO"]


def test_attribute_substitution(capsys: pytest.CaptureFixture[str]) -> None:
    pre_eval_config = yaml.safe_load(
        """
dataset:
  type: Dataset
  n_class: 10
n_data: '@/dataset.n_data'
"""
    )

    class Dataset:
        def __init__(self, n_class: int) -> None:
            self.n_class = n_class
            self.n_data = 4

    config = Config(pre_eval_config, {"Dataset": Dataset})
    print(config["/n_data"])
    assert printed(capsys) == ["4"]


def test_default_value_by_path_substitution(capsys: pytest.CaptureFixture[str]) -> None:
    pre_eval_config = yaml.safe_load(
        """
dataset:
  type: Dataset
n_class: 5
"""
    )

    @customize_type(n_class="/n_class")
    class Dataset:
        def __init__(self, n_class: int) -> None:
            self.n_class = n_class

    config = Config(pre_eval_config, {"Dataset": Dataset})
    print(config["/dataset"].n_class)
    assert printed(capsys) == ["5"]


def test_ignore_substitution(capsys: pytest.CaptureFixture[str]) -> None:
    pre_eval_config = yaml.safe_load(
        """
name:
  type: concat
  x0: 'First'
  x1: 'Last'
"""
    )
    config = Config(pre_eval_config, {"concat": concat})
    print(config["!/name"])
    assert printed(capsys) == ["{'type': 'concat', 'x0': 'First', 'x1': 'Last'}"]


def test_lazy_evaluation(capsys: pytest.CaptureFixture[str]) -> None:
    pre_eval_config = yaml.safe_load(
        """
foo:
  - type: f0
  - '@/bar'
bar:
  type: f1
baz:
  type: f2
"""
    )

    def f0() -> str:
        print("f0 called")
        return "f0_return"

    def f1() -> str:
        print("f1 called")
        return "f1_return"

    def f2() -> str:
        print("f2 called")
        return "f2_return"

    config = Config(pre_eval_config, {"f0": f0, "f1": f1, "f2": f2})
    assert config["/foo"] == ["f0_return", "f1_return"]  # f2 does not get called
    assert printed(capsys) == ["f0 called", "f1 called"]
