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

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from keel.workspace_providers.errors import (
    FileNotFound,
    FilesystemError,
    FilesystemUnavailable,
    PermissionDenied,
    WorkspaceError,
)

if TYPE_CHECKING:
    from minio import Minio

AWS_ENDPOINT = "https://s3.amazonaws.com"
DEFAULT_REGION = "us-east-1"
CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 60.0
HTTP_RETRIES = 2
"""urllib3's own retries of a refused connection or a 5xx, before the call fails as `FilesystemUnavailable`
(minio's default of 5 takes ~6 s to report an endpoint down; Temporal's retries are the long ones)."""

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


@dataclass(frozen=True)
class S3Location:
    """A bucket (and key prefix, ``""`` or ending in ``/``) on an endpoint, with the credentials to reach it."""

    bucket: str
    prefix: str
    endpoint: str
    region: str
    access_key: str | None
    secret_key: str | None
    session_token: str | None
    endpoint_given: bool

    @classmethod
    def resolve(
        cls,
        bucket: str,
        prefix: str,
        endpoint: str | None,
        region: str | None,
        access_key_id: str | None,
        secret_access_key: str | None,
        session_token: str | None,
        env: Mapping[str, str] | None = None,
    ) -> S3Location:
        env = os.environ if env is None else env
        from_env = access_key_id is None and secret_access_key is None
        key = env.get("AWS_ACCESS_KEY_ID") if from_env else access_key_id
        secret = env.get("AWS_SECRET_ACCESS_KEY") if from_env else secret_access_key
        if bool(key) != bool(secret):
            raise WorkspaceError("S3Filesystem needs both access_key_id and secret_access_key, or neither")
        token = (env.get("AWS_SESSION_TOKEN") if from_env else None) if session_token is None else session_token
        url = endpoint or env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
        clean = prefix.strip("/")
        return cls(
            bucket=bucket,
            prefix=f"{clean}/" if clean else "",
            endpoint=_endpoint_url(url or AWS_ENDPOINT),
            region=region or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or DEFAULT_REGION,
            access_key=key or None,
            secret_key=secret or None,
            session_token=token or None,
            endpoint_given=url is not None,
        )

    @property
    def where(self) -> str:
        """`bucket "b" at http://host:port`, as the error messages name it."""
        return f'bucket "{self.bucket}" at {self.endpoint}'

    def client(self) -> Minio:
        import certifi
        import urllib3
        from minio import Minio

        parts = urlsplit(self.endpoint)
        http = urllib3.PoolManager(
            timeout=urllib3.Timeout(connect=CONNECT_TIMEOUT, read=READ_TIMEOUT),
            maxsize=16,
            cert_reqs="CERT_REQUIRED",
            ca_certs=os.environ.get("SSL_CERT_FILE") or certifi.where(),
            retries=urllib3.Retry(
                total=HTTP_RETRIES, backoff_factor=0.2, status_forcelist=[500, 502, 503, 504], raise_on_status=False
            ),
        )
        return Minio(
            parts.netloc,
            access_key=self.access_key,
            secret_key=self.secret_key,
            session_token=self.session_token,
            secure=parts.scheme == "https",
            region=self.region,
            http_client=http,
        )


def _endpoint_url(url: str) -> str:
    """`url` as ``scheme://host[:port]`` (a bare ``host:port`` is https); a path or query is refused."""
    parts = urlsplit(url if "://" in url else f"https://{url}")
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.path not in ("", "/") or parts.query:
        raise WorkspaceError(f"S3Filesystem endpoint must be http(s)://host[:port], not {url!r}")
    return f"{parts.scheme}://{parts.netloc}"


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
