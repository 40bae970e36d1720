"""Operator-graph element ids, built and parsed here only: ``<kind>:<name>``, where a job's elements are
``<kind>:<job>/<index>`` (``rank:llm/52``, ``dp:llm/3``, ``stage:llm/1``, ``op:llm/allreduce``) and fabric
elements are named by their exporter (``node:n7``, ``device:n7/gpu3``, ``service:chat``,
``replica:chat/2``). Causes of waste and controllers use the same form (``cause:straggler``,
``controller:hpa``)."""

from __future__ import annotations


def prefix(kind: str) -> str:
    """What every id of ``kind`` starts with (``rank:``), e.g. for a vectorised test."""
    return element(kind, "")


def element(kind: str, name: str) -> str:
    return f"{kind}:{name}"  # (the one place the form is written: made for every element of every step)


def job(name: str) -> str:
    return element("job", name)


def controller(name: str) -> str:
    return element("controller", name)


def cause(name: str) -> str:
    """A cause of waste in the roll-ups (``cause:straggler``)."""
    return element("cause", name)


def of_job(kind: str, job_name: str, index: int | str) -> str:
    """An element of a job: ``rank``, ``dp`` (a data-parallel replica), ``stage``, ``op``, ..."""
    return element(kind, f"{job_name}/{index}")


def rank(job_name: str, r: int) -> str:
    return of_job("rank", job_name, r)


def dp(job_name: str, d: int) -> str:
    return of_job("dp", job_name, d)


def stage(job_name: str, s: int) -> str:
    return of_job("stage", job_name, s)


def stage_link(job_name: str, s: int) -> str:
    """The pipeline link from stage ``s`` to stage ``s + 1``."""
    return of_job("link", job_name, f"stage{s}-stage{s + 1}")


def spread(job_name: str, dimension: str) -> str:
    """The group cause "variation across ``dimension``" of a job (``spread:llm/dp``: across its data-parallel
    replicas), healed by bringing every member to the typical one."""
    return of_job("spread", job_name, dimension)


def kind_of(element_id: str) -> str:
    return element_id.partition(":")[0]


def is_kind(element_id: str, kind: str) -> bool:
    return element_id.startswith(f"{kind}:")  # (prefix(kind), without its call: tested per element id)


def name_of(element_id: str, kind: str) -> str:
    """The name in ``<kind>:<name>`` (the id unchanged when it is of another kind)."""
    return element_id.removeprefix(prefix(kind))


def split_of_job(element_id: str, kind: str) -> tuple[str, str] | None:
    """``(job, index)`` of ``<kind>:<job>/<index>`` with the index as written, or None when not of that form."""
    head = f"{kind}:"  # (is_kind and name_of in one look: called per element id of many)
    if not element_id.startswith(head):
        return None
    name, sep, index = element_id[len(head) :].rpartition("/")
    return (name, index) if sep else None


def parse_of_job(element_id: str, kind: str) -> tuple[str, int] | None:
    """``(job, index)`` of ``<kind>:<job>/<index>`` with a numeric index, or None when the id is not of that
    form."""
    parts = split_of_job(element_id, kind)
    if parts is None or not parts[1].isdigit():
        return None
    return parts[0], int(parts[1])


def index_of(element_id: str, kind: str) -> int:
    """The numeric index of ``<kind>:<job>/<index>``; ValueError when the id is not of that form."""
    parsed = parse_of_job(element_id, kind)
    if parsed is None:
        raise ValueError(f"not a {kind} element id: {element_id!r}")
    return parsed[1]


def parent(element_id: str) -> str:
    """The id without its last ``/<index>`` (``replica:chat-prefill/3`` -> ``replica:chat-prefill``)."""
    return element_id.rpartition("/")[0]


def job_of(element_id: str) -> str:
    """The job of ``job:<j>`` (or of a job element): the name, else ''."""
    if is_kind(element_id, "job"):
        return name_of(element_id, "job")
    name, sep, _ = element_id.partition(":")[2].rpartition("/")
    return name if sep else ""


def in_service(replica_id: str, service_id: str) -> bool:
    """``replica:<s>/<i>`` (or ``replica:<s>-<stage>/<i>``) belongs to ``service:<s>``."""
    if not (is_kind(replica_id, "replica") and is_kind(service_id, "service")):
        return False
    name = name_of(service_id, "service")
    return name_of(replica_id, "replica").startswith((f"{name}/", f"{name}-"))
