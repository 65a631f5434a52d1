"""Resolve an app reference (`package.module:attr`) to an `App`."""

from __future__ import annotations

import importlib

from keel.app.definitions import App, AppLoadError
from keel.protocol.settings import load_settings


def app_reference(ref: str | None = None) -> str:
    """The reference to load: the argument, else the settings' (`KEEL_APP`, by default the bundled demo app)."""
    return ref or load_settings().app


def load_app(ref: str | None = None) -> App:
    ref = app_reference(ref)
    module_name, _, attr = ref.partition(":")
    if not module_name or not attr:
        raise AppLoadError(f"App reference {ref!r} must look like 'package.module:attr'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise AppLoadError(f"Cannot import {module_name!r} for app {ref!r}: {err}") from err
    value = getattr(module, attr, None)
    if callable(value) and not isinstance(value, App):
        value = value()
    if not isinstance(value, App):
        raise AppLoadError(f"{ref!r} is not a keel App (got {type(value).__name__})")
    return value
