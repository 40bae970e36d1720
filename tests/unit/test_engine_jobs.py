"""The engine splits a batch by job (:func:`streams.engine.engine._by_job`): per job, in sorted order, its rows in
batch order; a batch of one job whole, whichever string objects spell its name."""

from __future__ import annotations

import numpy as np

from streams.contract.envelope import SampleBatch
from streams.engine.engine import _by_job


def batch(jobs: list[str]) -> SampleBatch:
    names = np.empty(len(jobs), dtype=object)
    names[:] = ["".join(list(j)) for j in jobs]  # equal texts, other objects (as from two messages)
    return SampleBatch("metric", np.arange(len(jobs)), {"job": names, "value": np.arange(len(jobs), dtype=np.float64)})


def test_a_batch_of_one_job_is_given_whole() -> None:
    b = batch(["llm", "llm", "llm"])
    [(job, columns)] = _by_job(b)
    assert job == "llm" and columns is b.columns


def test_a_batch_of_several_jobs_is_split_in_job_order_rows_in_batch_order() -> None:
    got = _by_job(batch(["b", "", "a", "b", "a"]))
    assert [job for job, _ in got] == ["", "a", "b"]
    assert [c["value"].tolist() for _, c in got] == [[1.0], [2.0, 4.0], [0.0, 3.0]]


def test_an_empty_batch_has_no_job() -> None:
    assert _by_job(batch([])) == []
