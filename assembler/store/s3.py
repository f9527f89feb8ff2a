"""``s3://BUCKET/PREFIX``: any S3-compatible service, through boto3 (``pip install assembler[s3]``).

The endpoint is ``[cache] s3-endpoint``, else ``AWS_ENDPOINT_URL``, else AWS; credentials and
region come from boto3's usual chain (``AWS_ACCESS_KEY_ID``, profiles, instance roles). A PUT
replaces an object in one step, so the blob is uploaded before the key object that names it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from assembler.errors import ToolchainError
from assembler.store import StoreUnavailable

MISSING = ("404", "NoSuchKey", "NotFound")
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
                                        config=Config(retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=10))

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

    def get(self, name: str) -> bytes | None:
        def read() -> bytes | None:
            body: bytes = self.client.get_object(Bucket=self.bucket, Key=self._key(name))["Body"].read()
            return body

        return self._request(name, read, missing=lambda: None)

    def get_file(self, name: str, target: Path) -> bool:
        def download() -> bool:
            self.client.download_file(self.bucket, self._key(name), str(target))
            return True

        return self._request(name, download, missing=lambda: False)

    def put(self, name: str, data: bytes) -> None:
        self._request(name, lambda: self.client.put_object(Bucket=self.bucket, Key=self._key(name), Body=data))

    def put_file(self, name: str, source: Path) -> None:
        self._request(name, lambda: self.client.upload_file(str(source), self.bucket, self._key(name)))
