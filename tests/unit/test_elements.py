"""Element ids are built and parsed in streams/engine/elements.py only: what it builds, it parses back."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.engine import elements

names = st.text(st.characters(codec="ascii", categories=("L", "N"), include_characters="-_./"), min_size=1)
kinds = st.sampled_from(["rank", "dp", "stage", "op", "link", "replica"])


@given(job=names, kind=kinds, index=st.integers(0, 10**6))
def test_a_job_element_parses_back_to_its_job_and_index(job: str, kind: str, index: int) -> None:
    built = elements.of_job(kind, job, index)
    assert elements.kind_of(built) == kind
    assert elements.is_kind(built, kind)
    assert elements.parse_of_job(built, kind) == (job, index)
    assert elements.split_of_job(built, kind) == (job, str(index))
    assert elements.index_of(built, kind) == index
    assert elements.job_of(built) == job


@given(job=names)
def test_a_job_id_parses_back_to_its_name(job: str) -> None:
    assert elements.job_of(elements.job(job)) == job
    assert elements.name_of(elements.job(job), "job") == job


def test_the_builders_give_the_documented_forms() -> None:
    assert elements.rank("llm", 52) == "rank:llm/52"
    assert elements.dp("llm", 3) == "dp:llm/3"
    assert elements.stage("llm", 1) == "stage:llm/1"
    assert elements.stage_link("llm", 1) == "link:llm/stage1-stage2"
    assert elements.of_job("op", "llm", "allreduce") == "op:llm/allreduce"
    assert elements.controller("hpa") == "controller:hpa"
    assert elements.cause("straggler") == "cause:straggler"
    assert elements.element("node", "n7") == "node:n7"
    assert elements.parent("replica:chat-prefill/3") == "replica:chat-prefill"


def test_ids_of_another_form_are_not_parsed_as_job_elements() -> None:
    assert elements.parse_of_job("rank:llm/52", "dp") is None
    assert elements.parse_of_job("rank:llm", "rank") is None  # no index
    assert elements.parse_of_job("op:llm/send", "op") is None  # not numeric
    assert elements.split_of_job("op:llm/send", "op") == ("llm", "send")
    assert elements.job_of("node:n7") == ""
    assert elements.name_of("node:n7", "service") == "node:n7"
    with pytest.raises(ValueError, match="not a rank element id"):
        elements.index_of("dp:llm/3", "rank")


@pytest.mark.parametrize(
    ("replica", "service", "belongs"),
    [
        ("replica:chat/2", "service:chat", True),
        ("replica:chat-prefill/0", "service:chat", True),
        ("replica:chatbot/0", "service:chat", False),
        ("node:chat/2", "service:chat", False),
        ("service:chat", "replica:chat/2", False),  # the order matters: a replica, then its service
    ],
)
def test_a_replica_belongs_to_its_service(replica: str, service: str, belongs: bool) -> None:
    assert elements.in_service(replica, service) is belongs
