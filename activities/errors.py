"""Domain errors mapped to the `ApplicationError`s Temporal retries or not."""

from __future__ import annotations

from temporalio.exceptions import ApplicationError

from keel.app import Agent, App, UnknownAgent


def find_agent(app: App, agent_id: str) -> Agent:
    """The app's agent; an unknown id is deterministic, so it fails the activity without retries."""
    try:
        return app.agent(agent_id)
    except UnknownAgent as err:
        raise ApplicationError(str(err), type="UnknownAgent", non_retryable=True) from None
