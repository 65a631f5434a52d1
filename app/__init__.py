"""The app model: agents, tools and the `App` that the worker, CLI and HTTP API load."""

from keel.app.definitions import (
    Agent,
    App,
    AppError,
    AppLoadError,
    Classifier,
    Tool,
    ToolContext,
    UnknownAgent,
    UnknownTool,
    tool,
)
from keel.app.loader import app_reference, load_app

__all__ = [
    "Agent",
    "App",
    "AppError",
    "AppLoadError",
    "Classifier",
    "Tool",
    "ToolContext",
    "UnknownAgent",
    "UnknownTool",
    "app_reference",
    "load_app",
    "tool",
]
