"""Where an S3-compatible object store is and how to reach it: a bucket (and key prefix) on an endpoint, with the
credentials, filled from the standard AWS variables where the caller left them out (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION`` / ``AWS_DEFAULT_REGION``, ``AWS_ENDPOINT_URL_S3`` /
``AWS_ENDPOINT_URL``). Shared by `S3Filesystem` (workspace files) and the S3 payload store; `client()` builds the
`minio` client, imported on first use (`import minio` costs ~0.2 s)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Self
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from minio import Minio

AWS_ENDPOINT = "https://s3.amazonaws.com"
DEFAULT_REGION = "us-east-1"
CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 60.0
HTTP_RETRIES = 2
"""urllib3's own retries of a refused connection or a 5xx, before the call fails (minio's default of 5 takes ~6 s
to report an endpoint down; Temporal's retries are the long ones)."""


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
    ) -> Self:
        env = os.environ if env is None else env
        from_env = access_key_id is None and secret_access_key is None
        key = env.get("AWS_ACCESS_KEY_ID") if from_env else access_key_id
        secret = env.get("AWS_SECRET_ACCESS_KEY") if from_env else secret_access_key
        if bool(key) != bool(secret):
            raise ValueError("S3Filesystem needs both access_key_id and secret_access_key, or neither")
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
        raise ValueError(f"S3Filesystem endpoint must be http(s)://host[:port], not {url!r}")
    return f"{parts.scheme}://{parts.netloc}"
