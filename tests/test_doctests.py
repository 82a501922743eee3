"""The runnable examples in module docstrings stay true."""
import doctest
import importlib

import pytest

MODULES = ["pkit.harness.channel", "pkit.harness.checks", "pkit.harness.contain", "pkit.harness.records",
           "pkit.harness.snapshot", "pkit.harness.solutions", "pkit.harness.problems", "pkit.harness.reference",
           "pkit.harness.problem", "pkit.harness", "pkit.bf16"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name))
    assert result.failed == 0 and result.attempted > 0
