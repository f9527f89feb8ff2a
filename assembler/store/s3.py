"""``s3://BUCKET/PREFIX``: any S3-compatible service, through boto3 (``pip install assembler[s3]``).

The endpoint is ``[cache] s3-endpoint``, else ``AWS_ENDPOINT_URL``, else AWS; credentials and
region come from boto3's usual chain (``AWS_ACCESS_KEY_ID``, profiles, instance roles). A PUT
replaces an object in one step, so the blob is uploaded before the key object that names it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from assembler.errors import ToolchainError
from assembler.store import StoreUnavailable

MISSING = ("404", "NoSuchKey", "NotFound")


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

    def exists(self, name: str) -> bool:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.head_object(Bucket=self.bucket, Key=self._key(name))
            return True
        except ClientError as error:
            if str(error.response.get("Error", {}).get("Code")) in MISSING:
                return False
            raise self._failed(error, name) from None
        except BotoCoreError as error:
            raise self._failed(error, name) from None

    def get(self, name: str) -> bytes | None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            body: bytes = self.client.get_object(Bucket=self.bucket, Key=self._key(name))["Body"].read()
            return body
        except ClientError as error:
            if str(error.response.get("Error", {}).get("Code")) in MISSING:
                return None
            raise self._failed(error, name) from None
        except BotoCoreError as error:
            raise self._failed(error, name) from None

    def get_file(self, name: str, target: Path) -> bool:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.download_file(self.bucket, self._key(name), str(target))
            return True
        except ClientError as error:
            if str(error.response.get("Error", {}).get("Code")) in MISSING:
                return False
            raise self._failed(error, name) from None
        except BotoCoreError as error:
            raise self._failed(error, name) from None

    def put(self, name: str, data: bytes) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.put_object(Bucket=self.bucket, Key=self._key(name), Body=data)
        except (ClientError, BotoCoreError) as error:
            raise self._failed(error, name) from None

    def put_file(self, name: str, source: Path) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.upload_file(str(source), self.bucket, self._key(name))
        except (ClientError, BotoCoreError) as error:
            raise self._failed(error, name) from None
