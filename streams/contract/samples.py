"""Sample kinds carried in a telemetry envelope (validated models; no I/O)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

# Event-time seconds: finite, and not absurd (before 1970 or after year ~2286 is a producer bug).
EventTime = Annotated[float, Field(ge=0, le=1e10, allow_inf_nan=False)]
Seconds = Annotated[float, Field(gt=0, le=1e6, allow_inf_nan=False)]
Name = Annotated[str, Field(min_length=1, max_length=256)]


class Sample(BaseModel):
    """Common base: unknown future fields are tolerated (ignored), values are checked strictly."""

    model_config = ConfigDict(extra="ignore", frozen=True, strict=True, allow_inf_nan=False)


class StepSample(Sample):
    """One training step (or one served request batch) of a job, as its driver saw it."""

    kind: Literal["step"] = "step"
    job: Name
    step: Annotated[int, Field(ge=0, le=2**53)]
    start: EventTime
    duration: Seconds
    output_units: Annotated[float, Field(ge=0, le=1e15, allow_inf_nan=False)] = 0.0
    attempts: Annotated[int, Field(ge=1, le=1_000_000)] = 1
    status: Annotated[str, Field(max_length=64)] = "ok"
