"""Every side effect of a Keel run, as Temporal activities."""

from keel.activities.agent_loop import AgentActivities

__all__ = ["AgentActivities"]
