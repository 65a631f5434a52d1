"""What every request body shares."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, StringConstraints

from keel.protocol.identifiers import attribute_problem, title_problem


class Lenient(BaseModel):
    """A body keeps the fields Keel reads; the many other options Mastra's client may send are accepted."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)


def _indexable(value: str) -> str:
    problem = attribute_problem("an id a run may be indexed by", value)
    if problem is not None:
        raise ValueError(problem)
    return value


IndexedId = Annotated[str, AfterValidator(_indexable)]
"""A thread or resource id: runs on it are indexed by it, so it must fit a Temporal search attribute (a thread
made with a longer one could never be run on). Messages sent to a thread go through its entity, whose workflow id
holds the agent and thread ids: that is checked when a message is sent (at most 1,000 bytes in all)."""
NonEmptyIndexedId = Annotated[str, StringConstraints(min_length=1), AfterValidator(_indexable)]


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("holds a NUL character: storage cannot look such an id up (SQLite), or hold it (PostgreSQL)")
    return value


StoredId = Annotated[str, StringConstraints(min_length=1), AfterValidator(_no_nul)]
"""An id of the caller's that storage keys a row by (a message's)."""


def _titled(value: str) -> str:
    if problem := title_problem(value):
        raise ValueError(problem)
    return value


Title = Annotated[str, AfterValidator(_titled)]
"""A thread's title (`MAX_TITLE_CHARS`)."""


def in_utc(value: datetime) -> datetime:
    """`value` in UTC, one without an offset taken as UTC (as Mastra's server takes a JavaScript date string);
    ValueError for a time that has none in UTC (year 1 at +01:00)."""
    try:
        return value.astimezone(UTC) if value.tzinfo is not None else value.replace(tzinfo=UTC)
    except OverflowError:
        raise ValueError("must be a time that exists in UTC") from None


UtcTime = Annotated[datetime, AfterValidator(in_utc)]
"""A time in a body or a query: compared with stored times, which are all in UTC (a time without an offset
compared with one answered 500 before)."""
