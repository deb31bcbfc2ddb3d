"""The pytest processes' own garbage collection: what they hold is frozen before each test.

A worker of `make test` holds a large heap for its whole life: every test module, moto with
botocore's service models (moto's server runs inside it), and what its module fixtures keep.
Python's cyclic collector walks all of that on each full collection, and a full collection
comes whenever the heap has grown by a quarter. Measured on one AWS end-to-end test (gc
callbacks, 2-core VM): the pytest process ran 3.1 s of CPU, 1.1 s of it in 9 full collections;
perf over a mixed run put 37-49% of the pytest processes' CPU in the collector.

`gc.freeze()` moves every object that exists into a permanent generation that collections skip
(Python's tool for long-lived heaps, such as a server's after its start-up). Here a collection
and then a freeze run once the tests are collected, and again once each test's fixtures are
set up, so a collection during a test walks only what that test made since. The collection
before each freeze matters: frozen without it, the previous test's garbage stayed for good and
a worker grew from 0.7 GB to 1.7 GB over some 190 tests, and `make test` got no faster.

Measured (2-core VM, tests/integration/aws, tests/unit/aws and tests/unit/runtime on 2
workers): the workers' CPU 31.4 s -> 22.1 s, the run's CPU 78.5 s -> 62.7 s, the same peak
memory per worker (0.8 GB).
"""

from __future__ import annotations

import gc

import pytest


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    gc.collect()
    gc.freeze()
    # Python's rule for full collections (the oldest generation grew by a quarter) counts only
    # what is not frozen, so after a freeze it would allow one every 10th collection of the
    # middle generation; 100 of those (about 700,000 allocations) is the floor here instead.
    gc.set_threshold(700, 10, 100)


@pytest.hookimpl(trylast=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # trylast: after pytest's own set-up hook, which made this test's fixtures.
    gc.collect()
    gc.freeze()
