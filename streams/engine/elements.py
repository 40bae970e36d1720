"""Operator-graph element ids, built and parsed here only: ``<kind>:<name>``, where a job's elements are
``<kind>:<job>/<index>`` (``rank:llm/52``, ``dp:llm/3``, ``stage:llm/1``) and fabric elements are named by
their exporter (``node:n7``, ``device:n7/gpu3``, ``service:chat``)."""

from __future__ import annotations


def element(kind: str, name: str) -> str:
    return f"{kind}:{name}"


def job(name: str) -> str:
    return f"job:{name}"


def of_job(kind: str, job_name: str, index: int | str) -> str:
    """An element of a job: ``rank``, ``dp`` (a data-parallel replica), ``stage``, ..."""
    return f"{kind}:{job_name}/{index}"


def rank(job_name: str, r: int) -> str:
    return of_job("rank", job_name, r)


def kind_of(element_id: str) -> str:
    return element_id.partition(":")[0]


def parse_of_job(element_id: str, kind: str) -> tuple[str, int] | None:
    """``(job, index)`` of ``<kind>:<job>/<index>``, or None when the id is not of that form."""
    if not element_id.startswith(f"{kind}:"):
        return None
    name, sep, index = element_id[len(kind) + 1 :].rpartition("/")
    if not sep or not index.isdigit():
        return None
    return name, int(index)


def job_of(element_id: str) -> str:
    """The job of ``job:<j>`` (or of a job element): the name, else ''."""
    if element_id.startswith("job:"):
        return element_id[4:]
    name, sep, _ = element_id.partition(":")[2].rpartition("/")
    return name if sep else ""
