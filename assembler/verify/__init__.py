"""`assemble verify`: runtime proof, on several torch versions, that a wheel built once works."""

from assembler.verify.report import Status, VerifyReport
from assembler.verify.runner import verify_wheel, workspace_manifest

__all__ = ["Status", "VerifyReport", "verify_wheel", "workspace_manifest"]
