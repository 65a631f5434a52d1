"""How each domain error reaches Temporal: one table of its error type and whether Temporal retries it.

Every activity runs inside `translated()`, which raises the table's `ApplicationError` for the first row whose
exception class matches (rows are ordered most specific first). The retry policies (`keel.workflows.options`)
list no error types of their own: an error is retried exactly when its row says so, up to the policy's
attempts; a deterministic failure fails at once, because the next attempt would fail the same way.

    domain exception                          Temporal error type     retried
    ----------------------------------------  ----------------------  ------------------------------------
    keel.app.UnknownAgent                     UnknownAgent            no
    keel.app.UnknownTool                      UnknownTool             no
    keel.app.AppError                         AppError                no   (a bad app definition: duplicate tool names)
    keel.workspace_providers.WorkspaceError   WorkspaceError          no   (a workspace misconfigured)
    keel.model_providers.ModelRetryableError  ModelRetryableError     yes, after the provider's retry-after
    keel.model_providers.ModelRequestError    ModelRequestError       no   (4xx: bad key, bad request)
    keel.model_providers.ModelError           ModelResponseError      no   (an answer that cannot be parsed)
    keel.storage.ThreadNotFound               ThreadNotFound          no
    keel.storage.StorageConfigError           StorageConfigError      no
    keel.storage.SchemaError                  SchemaError             no
    keel.storage.DatabaseNotFound             DatabaseNotFound        no
    keel.storage.StorageUnavailable           StorageUnavailable      yes  (an outage rides on the backoff)
    keel.storage.StorageError                 StorageError            yes
    PayloadTooLarge                           PayloadTooLarge         no   (the same value would be refused again)
    RunIdReused                               RunIdReused             no
    MissingMessages                           MissingMessages         no   (storage lost what a step wrote)

An `ApplicationError` raised by Keel code or by a tool passes through with its own flags; the data converter's
`InvalidInput` (an input that fails its contract model) is non-retryable too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

from temporalio.exceptions import ApplicationError

from keel.app import AppError, UnknownAgent, UnknownTool
from keel.model_providers import ModelError, ModelRequestError, ModelRetryableError
from keel.storage import (
    DatabaseNotFound,
    SchemaError,
    StorageConfigError,
    StorageError,
    StorageUnavailable,
    ThreadNotFound,
)
from keel.workspace_providers import WorkspaceError


class ActivityFailure(Exception):
    """Base of the failures Keel's activities detect themselves."""


class PayloadTooLarge(ActivityFailure):
    """A value larger than Keel stores, even by reference."""


class RunIdReused(ActivityFailure):
    """A run id that an earlier run already used."""


class MissingMessages(ActivityFailure):
    """Messages the run's history says were written are not in storage (a database that lost committed data)."""


@dataclass(frozen=True)
class Failure:
    exception: type[Exception]
    type: str
    retryable: bool


FAILURES: tuple[Failure, ...] = (
    Failure(UnknownAgent, "UnknownAgent", retryable=False),
    Failure(UnknownTool, "UnknownTool", retryable=False),
    Failure(AppError, "AppError", retryable=False),
    Failure(ModelRetryableError, "ModelRetryableError", retryable=True),
    Failure(ModelRequestError, "ModelRequestError", retryable=False),
    Failure(ModelError, "ModelResponseError", retryable=False),
    Failure(ThreadNotFound, "ThreadNotFound", retryable=False),
    Failure(StorageConfigError, "StorageConfigError", retryable=False),
    Failure(SchemaError, "SchemaError", retryable=False),
    Failure(DatabaseNotFound, "DatabaseNotFound", retryable=False),
    Failure(StorageUnavailable, "StorageUnavailable", retryable=True),
    Failure(StorageError, "StorageError", retryable=True),
    Failure(PayloadTooLarge, "PayloadTooLarge", retryable=False),
    Failure(RunIdReused, "RunIdReused", retryable=False),
    Failure(MissingMessages, "MissingMessages", retryable=False),
    Failure(WorkspaceError, "WorkspaceError", retryable=False),
)
"""The table (see the module docstring), most specific exception first."""

NON_RETRYABLE_TYPES = tuple(f.type for f in FAILURES if not f.retryable)


def application_error(err: Exception) -> ApplicationError | None:
    """The `ApplicationError` the table gives `err`, or None for an exception it does not list."""
    for row in FAILURES:
        if isinstance(err, row.exception):
            delay = None
            if isinstance(err, ModelRetryableError) and err.retry_after is not None:
                delay = timedelta(seconds=err.retry_after)
            return ApplicationError(str(err), type=row.type, non_retryable=not row.retryable, next_retry_delay=delay)
    return None


@contextlib.contextmanager
def translated() -> Iterator[None]:
    """Raise the table's `ApplicationError` for a domain exception escaping the block."""
    try:
        yield
    except ApplicationError:
        raise
    except Exception as err:
        mapped = application_error(err)
        if mapped is None:
            raise
        raise mapped from err


__all__ = [
    "FAILURES",
    "NON_RETRYABLE_TYPES",
    "ActivityFailure",
    "MissingMessages",
    "PayloadTooLarge",
    "RunIdReused",
    "application_error",
    "translated",
]
