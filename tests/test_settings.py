"""`keel.protocol.settings`: the environment (any case), flags over it, every malformed value named at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from keel.protocol.settings import SettingsError, load_settings


@pytest.fixture(autouse=True)
def _no_keel_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in [n for n in os.environ if n.upper().startswith("KEEL_")]:
        monkeypatch.delenv(name)


def test_flags_win_over_the_environment_and_each_value_says_where_it_came_from(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KEEL_NAMESPACE", "from-env")
    monkeypatch.setenv("keel_task_queue", "lower-case")
    monkeypatch.setenv("KEEL_DATA_DIR", str(tmp_path / "d"))
    settings = load_settings(namespace="from-flag", api_port="4200", logs="WARNING")
    assert (settings.namespace, settings.task_queue, settings.api_port, settings.logs) == (
        "from-flag", "lower-case", 4200, "warn",
    )  # fmt: skip
    assert settings.storage_url == f"sqlite:///{tmp_path / 'd' / 'keel.db'}"
    sources = settings.sources()
    assert (sources["namespace"], sources["task_queue"], sources["storage_url"], sources["ui_port"]) == (
        "flag", "environment", "derived", "default",
    )  # fmt: skip
    assert settings.as_json()["data_dir"] == str(tmp_path / "d")


def test_every_malformed_value_is_named_in_one_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEEL_TEMPORAL_PORT", "seventy")
    monkeypatch.setenv("KEEL_UI_PORT", "70000")
    monkeypatch.setenv("KEEL_TRACE_RETENTION_HOURS", "0")
    monkeypatch.setenv("KEEL_LOGS", "loud")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    message = str(caught.value)
    for part in (
        "KEEL_TEMPORAL_PORT must be an integer from 1 to 65535, not 'seventy'",
        "KEEL_UI_PORT must be an integer from 1 to 65535, not '70000'",
        "KEEL_TRACE_RETENTION_HOURS must be a number above 0, not '0'",
        "KEEL_LOGS must be one of off, debug, info, warn, error, not 'loud'",
    ):
        assert part in message


def test_an_address_and_a_port_that_disagree_are_refused_and_an_empty_optional_port_is_unset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KEEL_METRICS_PORT", "")
    monkeypatch.setenv("KEEL_TEMPORAL_ADDRESS", "temporal.internal:7233")
    settings = load_settings()
    assert (settings.temporal_host, settings.temporal_port, settings.metrics_port) == ("temporal.internal", 7233, None)
    with pytest.raises(SettingsError, match=r"KEEL_TEMPORAL_ADDRESS is temporal\.internal:7233 but KEEL_TEMPORAL_PORT"):
        load_settings(temporal_port=7000)
    with pytest.raises(SettingsError, match="must be HOST:PORT"):
        load_settings(temporal_address="no-port")


def test_a_malformed_flag_is_named_as_given_not_as_the_variable() -> None:
    with pytest.raises(SettingsError, match="api_port must be an integer from 1 to 65535, not 0") as caught:
        load_settings(api_port=0)
    assert "KEEL_API_PORT" not in str(caught.value)
    assert repr(load_settings().as_json()["trace_retention_hours"]) == "72.0"  # as `keel config` printed it
