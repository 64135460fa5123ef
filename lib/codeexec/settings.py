"""Settings, read once from the environment (pydantic-settings does the parsing).

Every limit a user can hit has a default here and an environment variable of the same
name in upper case; the README lists them.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore", frozen=True)

    # Auth. No key configured means every route but /health answers 401: fail closed.
    code_exec_api_key: SecretStr | None = None
    # The organization sessions belong to when the caller names no tenant.
    code_exec_org: str = "default"

    sandbox_backend: Literal["local", "agentcore"] = "local"
    # local backend: one directory per session under here.
    sandbox_root: Path = Path("/var/tmp/codeexec")
    # The host uid/gid a sandboxed program runs as when the service runs as root.
    sandbox_uid: int = 65534
    sandbox_gid: int = 65534

    lease_ttl_seconds: int = 86_400  # LibreChat re-uploads files older than 23 hours
    idle_timeout_seconds: int = 3_600
    # How often the embedded server's reaper runs (on Lambda, the schedule decides).
    reap_interval_seconds: float = 60.0

    run_timeout_seconds: float = 30.0
    max_output_bytes: int = 1_048_576  # each of stdout and stderr
    max_upload_bytes: int = 5_242_880  # under API Gateway's and Lambda's 6 MB cap


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
