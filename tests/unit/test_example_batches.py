"""The Keras demo: its batch arithmetic (every batch splits evenly over 1, 4 or 8 devices) and
its digits file."""

from __future__ import annotations

import importlib.util
from types import ModuleType

import pytest

from tests.conftest import REPO_ROOT


def demo() -> ModuleType:
    path = REPO_ROOT / "examples" / "keras_digits.py"
    spec = importlib.util.spec_from_file_location("keras_digits", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("devices", [1, 4, 8])
@pytest.mark.parametrize(("samples", "target"), [(1500, 50), (750, 50), (297, 99), (7, 3)])
def test_every_batch_divides_by_the_device_count(samples: int, target: int, devices: int) -> None:
    batch, used = demo().batch_plan(samples, devices, target=target)
    assert batch % devices == 0 and target <= batch < target + devices
    assert used % devices == 0 and samples - devices < used <= samples
    assert (used % batch) % devices == 0  # the last, partial batch too


def test_one_device_keeps_the_demos_batches() -> None:
    assert demo().batch_plan(750, 1, target=50) == (50, 750)
    assert demo().batch_plan(297, 1, target=99) == (99, 297)
    with pytest.raises(ValueError, match="must be >= 1"):
        demo().batch_plan(10, 0, target=5)


def test_the_digits_file_holds_the_whole_data_set_as_the_demo_reads_it() -> None:
    """examples/digits.csv.gz, as load_digits() gives it: 1797 images of 8x8 pixels scaled to
    0-1, every digit 0-9 present (the counts of the UCI set's test part)."""
    import numpy as np

    x, y = demo().load_digits()
    assert x.shape == (1797, 64) and x.dtype == np.float32 and y.dtype == np.int32
    assert x.min() == 0.0 and x.max() == 1.0
    assert np.bincount(y).tolist() == [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]
