"""Where an `S3Filesystem` connects and how the object store's failures become workspace errors.

`S3Location.resolve()` fills what the caller left out from the standard AWS variables (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION`` / ``AWS_DEFAULT_REGION``, ``AWS_ENDPOINT_URL_S3``
/ ``AWS_ENDPOINT_URL``); `client()` builds the `minio` client (imported on first use: `import minio` costs
~0.2 s, which loading an app with a local workspace should not pay). `translate()` maps an exception of a call:

    NoSuchKey                                       FileNotFound            (callers refine it)
    NoSuchBucket                                    FilesystemError         naming the bucket and endpoint
    AccessDenied, SignatureDoesNotMatch, 401/403    PermissionDenied        naming the bucket: never retried
    5xx, SlowDown, connection refused, timeouts     FilesystemUnavailable   retryable
    any other S3 error                              FilesystemError
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self
from urllib.parse import urlsplit

from keel.protocol import s3
from keel.workspace_providers.errors import (
    FileNotFound,
    FilesystemError,
    FilesystemUnavailable,
    PermissionDenied,
    WorkspaceError,
)

if TYPE_CHECKING:
    pass


_DENIED = {
    "AccessDenied",
    "AccountProblem",
    "AllAccessDisabled",
    "ExpiredToken",
    "InvalidAccessKeyId",
    "InvalidToken",
    "SignatureDoesNotMatch",
    "TokenRefreshRequired",
}
_TRANSIENT = {"InternalError", "RequestTimeout", "ServiceUnavailable", "SlowDown", "OperationAborted"}


class S3Location(s3.S3Location):
    """`keel.protocol.s3.S3Location` whose bad options are a `WorkspaceError`."""

    @classmethod
    def resolve(cls, *args: Any, **kwargs: Any) -> Self:
        try:
            return super().resolve(*args, **kwargs)
        except ValueError as err:
            raise WorkspaceError(str(err)) from None


def provider_name(location: S3Location) -> str:
    """What Mastra's instructions call the store, from the endpoint's host."""
    if not location.endpoint_given:
        return "AWS S3"
    host = (urlsplit(location.endpoint).hostname or "").lower()
    if host == "r2.cloudflarestorage.com" or host.endswith((".r2.cloudflarestorage.com", ".cloudflare.com")):
        return "Cloudflare R2"
    if host == "storage.googleapis.com" or host.endswith(".googleapis.com"):
        return "Google Cloud Storage"
    if host.endswith((".blob.core.windows.net", ".azure.com")):
        return "Azure Blob"
    return "MinIO" if "minio" in host else "S3"


def s3_code(err: BaseException) -> str | None:
    """The S3 error code of a minio `S3Error`, else None."""
    from minio.error import S3Error

    return err.code if isinstance(err, S3Error) else None


def translate(err: BaseException, path: str, location: S3Location) -> WorkspaceError:
    """The workspace error for a failed call on `path` (see the module docstring)."""
    import urllib3
    from minio.error import InvalidResponseError, S3Error, ServerError

    if isinstance(err, WorkspaceError):
        return err
    if isinstance(err, S3Error):
        code, status = err.code or "", err.response.status if err.response is not None else 0
        if code == "NoSuchKey":
            return FileNotFound(path)
        if code == "NoSuchBucket":
            return FilesystemError(f'Bucket "{location.bucket}" not found at {location.endpoint}', path)
        if code in _DENIED or status in (401, 403):
            return denied(path, location, code or str(status))
        if code in _TRANSIENT or status >= 500:
            return unavailable(path, location, f"{code or status}: {err.message}")
        return FilesystemError(f"S3 {code or status}: {err.message}: {path}", path)
    if isinstance(err, ServerError):
        return unavailable(path, location, f"HTTP {err.status_code}")
    if isinstance(err, InvalidResponseError):
        return unavailable(path, location, str(err)[:200])
    if isinstance(err, urllib3.exceptions.HTTPError | OSError):
        return unavailable(path, location, _reason(err))
    return FilesystemError(f"{type(err).__name__}: {err}: {path}", path)


def denied(path: str, location: S3Location, code: str) -> PermissionDenied:
    return PermissionDenied(
        path, f"access (S3 refused the request to {location.where}: {code}; check the credentials and bucket policy)"
    )


def unavailable(path: str, location: S3Location, reason: str) -> FilesystemUnavailable:
    return FilesystemUnavailable(f"S3 endpoint {location.endpoint} unreachable ({location.where}): {reason}", path)


def _reason(err: BaseException) -> str:
    """The innermost OS-level cause (`Connection refused`), else the exception's class name."""
    seen: BaseException | None = err
    for _ in range(10):
        if seen is None:
            break
        if isinstance(seen, OSError) and seen.strerror:
            return seen.strerror
        seen = getattr(seen, "reason", None) or seen.__cause__ or seen.__context__
    return type(err).__name__
