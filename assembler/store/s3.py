"""``s3://BUCKET/PREFIX``: any S3-compatible service, through boto3 (``pip install assembler[s3]``).

The endpoint is ``[cache] s3-endpoint``, else ``AWS_ENDPOINT_URL``, else AWS; credentials and
region come from boto3's usual chain (``AWS_ACCESS_KEY_ID``, profiles, instance roles). A PUT
replaces an object in one step, so the blob is uploaded before the key object that names it.
Every request times out (connect 10 s, each read ``S3_READ_TIMEOUT_S``), and a GET is bounded by
the object's ``Content-Length``, checked before the body is read and again while it streams."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from assembler.errors import ToolchainError
from assembler.store import CHUNK, StoreUnavailable, UnusableObject, WrongSize

MISSING = ("404", "NoSuchKey", "NotFound")
S3_READ_TIMEOUT_S = 60  # one socket read, not the whole download
T = TypeVar("T")


class S3Backend:
    def __init__(self, bucket: str, prefix: str, endpoint: str | None) -> None:
        try:
            import boto3
            from botocore.config import Config
        except ImportError:
            raise ToolchainError("an s3:// artifact store needs boto3", hint="pip install 'assembler[s3]'") from None
        self.bucket, self.prefix = bucket, prefix
        self.url = f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"
        self.client: Any = boto3.client("s3", endpoint_url=endpoint,
                                        config=Config(retries={"max_attempts": 3, "mode": "standard"},
                                                      connect_timeout=10,
                                                      read_timeout=S3_READ_TIMEOUT_S))

    def _key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    def _failed(self, error: Exception, name: str) -> StoreUnavailable:
        return StoreUnavailable(f"{self.url}/{name}: {type(error).__name__}: {error}")

    def _request(self, name: str, call: Callable[[], T], missing: Callable[[], T] | None = None) -> T:
        """One boto3 call about ``name``: a missing object is ``missing()`` where the caller
        expects one; any other failure is StoreUnavailable naming the object."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return call()
        except ClientError as error:
            if missing is not None and str(error.response.get("Error", {}).get("Code")) in MISSING:
                return missing()
            raise self._failed(error, name) from None
        except BotoCoreError as error:
            raise self._failed(error, name) from None

    def exists(self, name: str) -> bool:
        def head() -> bool:
            self.client.head_object(Bucket=self.bucket, Key=self._key(name))
            return True

        return self._request(name, head, missing=lambda: False)

    def _body(self, name: str, most: int, exact: bool) -> Any:
        """The streaming body of ``name``, once its Content-Length is ``most`` (``exact``) or at most it."""
        response = self.client.get_object(Bucket=self.bucket, Key=self._key(name))
        body, length = response["Body"], int(response.get("ContentLength", -1))
        if (length != most) if exact else not 0 <= length <= most:
            body.close()
            want = f"its key object says {most}" if exact else f"the limit is {most}"
            raise (WrongSize if exact else UnusableObject)(f"{self.url}/{name} is {length} bytes, {want}")
        return body

    def get(self, name: str, limit: int) -> bytes | None:
        def read() -> bytes | None:
            body = self._body(name, limit, exact=False)
            with body:
                data: bytes = body.read(limit + 1)
            if len(data) > limit:
                raise UnusableObject(f"{self.url}/{name} sent more than the limit of {limit} bytes")
            return data

        return self._request(name, read, missing=lambda: None)

    def get_file(self, name: str, target: Path, size: int) -> bool:
        def download() -> bool:
            body = self._body(name, size, exact=True)
            copied = 0
            with body, target.open("wb") as out:
                while copied <= size:
                    block = body.read(min(CHUNK, size + 1 - copied))
                    if not block:
                        break
                    out.write(block)
                    copied += len(block)
            if copied != size:
                raise WrongSize(f"{self.url}/{name} sent {copied} bytes, its key object says {size}")
            return True

        return self._request(name, download, missing=lambda: False)

    def put(self, name: str, data: bytes) -> None:
        self._request(name, lambda: self.client.put_object(Bucket=self.bucket, Key=self._key(name), Body=data))

    def put_file(self, name: str, source: Path) -> None:
        self._request(name, lambda: self.client.upload_file(str(source), self.bucket, self._key(name)))
