"""What every request body shares."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Lenient(BaseModel):
    """A body keeps the fields Keel reads; the many other options Mastra's client may send are accepted."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
