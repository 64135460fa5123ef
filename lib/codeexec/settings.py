"""Settings, read once from the environment (pydantic-settings does the parsing).

Every limit a user can hit has a default here and an environment variable of the same
name in upper case; docs/isolation.md lists them. With SECRETS_DIR set, each file there
named after a setting (CODE_EXEC_API_KEY, RUNNER_KEY; a Kubernetes Secret mounted as a
volume) gives its value too, where the environment does not: keys then stay out of every
process's environment.
"""

from __future__ import annotations

import os
import re
import socket
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal, Self
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SecretsSettingsSource,
    SettingsConfigDict,
)

# What LibreChat's tokens carry unless its CODEAPI_JWT_ISSUER / CODEAPI_JWT_AUDIENCE say otherwise.
LIBRECHAT_ISSUER = "librechat"
LIBRECHAT_AUDIENCE = "codeapi"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore", frozen=True)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Files of SECRETS_DIR after the environment (pydantic-settings' secrets_dir, named
        at run time: a directory fixed in the class would be looked for, and warned about, on
        every host)."""
        secrets_dir = os.environ.get("SECRETS_DIR")
        files = SecretsSettingsSource(settings_cls, secrets_dir=secrets_dir) if secrets_dir else file_secret_settings
        return init_settings, env_settings, dotenv_settings, files

    # Auth. No key configured means every route but /health answers 401: fail closed.
    code_exec_api_key: SecretStr | None = None
    # The operator's console (/admin, docs/operations.md): its own key, never the service's;
    # unset, the console and its API answer 404.
    code_exec_admin_key: SecretStr | None = None
    # Named keys, each with its own name, organization and limits (service_keys.py), read
    # again when the file changes; beside CODE_EXEC_API_KEY or instead of it.
    code_exec_api_keys_file: Path | None = None
    # Signs programmatic continuation tokens; unset: derived from the service key, else
    # one per process (tokens then continue only in the process that issued them).
    code_exec_token_secret: SecretStr | None = None
    # The organization sessions belong to when the caller names no tenant.
    code_exec_org: str = "default"
    # Comma lists. `key`: X-API-Key (a bearer beside it names the tenant). `jwt`: a valid
    # bearer token alone authenticates. A mode with nothing configured serves nothing.
    # Unset: `key`, and `jwt` too when CODE_EXEC_JWT_PUBLIC_KEY is set (see `auth_modes`).
    code_exec_auth_modes: Annotated[frozenset[Literal["key", "jwt"]] | None, NoDecode] = None
    # Bearer tokens (docs/api.md "Tenant tokens (OIDC)"): verified when a key set is configured.
    code_exec_jwt_jwks_url: str | None = None  # https:// or file:// (http:// only on loopback)
    # Or the public key itself (docs/librechat.md): a PEM, the PEM in base64, or a key set's
    # JSON; the other half of LibreChat's CODEAPI_JWT_PRIVATE_KEY_BASE64. With it, the
    # issuer and audience default to LibreChat's.
    code_exec_jwt_public_key: str | None = None
    code_exec_jwt_issuer: str | None = None
    code_exec_jwt_audience: str | None = None
    code_exec_jwt_org_claim: str = "tenant_id"  # the claim LibreChat (v0.8.6+) puts its tenant in
    code_exec_jwt_algorithms: Annotated[frozenset[str], NoDecode] = frozenset({"RS256", "ES256", "EdDSA"})

    # `memory` is no sandbox: for tests and trying the API (docs/backends.md).
    sandbox_backend: Literal["local", "memory", "agentcore", "runner", "microvm"] = "local"
    # local backend: one btrfs subvolume per session under here; made a btrfs filesystem
    # of its own (an image beside it, loop-mounted) when it is not on one.
    sandbox_root: Path = Path("/var/lib/codeexec")
    sandbox_image_bytes: int = 0  # that image's size; 0: half the free space there, at most 64 GiB
    # The host uid/gid a sandboxed program runs as: one no other process of the host uses
    # (inside the sandbox it is nobody, 65534).
    sandbox_uid: int = 61000
    sandbox_gid: int = 61000
    # agentcore backend (the region comes from AWS_REGION, as for any AWS client).
    agentcore_code_interpreter_id: str = "aws.codeinterpreter.v1"
    agentcore_endpoint_url: str | None = None  # another endpoint, such as a local fake
    # runner backend: a `python -m codeexec.runner` to lease sandboxes from. RUNNER_KEY is
    # the key the runner demands and the backend sends (docs/backends.md "The runner").
    runner_url: str | None = None
    runner_key: SecretStr | None = None
    # Many runners (docs/fleet.md): their URLs, the i-th being runner i, or a template with
    # `{i}` and a count (a StatefulSet's pods by their DNS names). RUNNER_URL is one runner.
    runner_urls: Annotated[tuple[str, ...], NoDecode] = ()
    runner_url_template: str | None = None
    runner_count: int = Field(default=0, ge=0, le=64)
    # How long a runner may take to take a connection: one that does not is marked down,
    # and its sessions answer 503 with a retry hint, rather than hold their calls.
    runner_connect_timeout_seconds: float = Field(default=2.0, gt=0)
    # On a runner: its index in the fleet, a number or `ordinal` (the number that ends its
    # host name, as a StatefulSet's pod's does). Unset: a lone runner.
    runner_index: str | None = None
    # microvm backend (docs/backends.md "MicroVMs"): the image VMs run, the connector that
    # closes their egress, and another control-plane endpoint, such as the tests' fake.
    microvm_image: str | None = None
    microvm_egress_connector: str | None = None
    microvm_ingress_connector: str | None = None
    microvm_endpoint_url: str | None = None
    # How long a new VM may take to answer before it counts as failed to boot.
    microvm_boot_seconds: float = 60.0

    # What the servers tell (docs/operations.md): their log, one JSON object a line or text,
    # and the port their Prometheus metrics listen on (0: none), the service's and the
    # runner's apart, so that both can run on one host.
    log_format: Literal["json", "text"] = "json"
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    metrics_port: int = Field(default=9464, ge=0, le=65535)
    runner_metrics_port: int = Field(default=9465, ge=0, le=65535)

    lease_ttl_seconds: int = 86_400  # LibreChat re-uploads files older than 23 hours
    idle_timeout_seconds: int = 3_600
    # How often the embedded server's reaper runs (on Lambda, the schedule decides).
    reap_interval_seconds: float = 60.0

    run_timeout_seconds: float = 30.0
    max_output_bytes: int = 1_048_576  # each of stdout and stderr
    # What LibreChat sends at most (its axios maxBodyLength); the SAM template sets 4 MiB,
    # the most that passes API Gateway and Lambda.
    max_upload_bytes: int = 157_286_400
    # Any other request body (an exec, a continuation): JSON that large is an attack, not code.
    max_request_bytes: int = 10_485_760
    # Runs at once in this process; more are refused at once (429). 0: from the cores and
    # the memory (each run may hold RUN_MEMORY_BYTES).
    max_concurrent_runs: int = 0
    max_concurrent_uploads: int = 16  # uploads at once (one may wait for a run in its session)
    # A run taking longer than this is answered 200 at once, with a space every so often
    # ahead of the JSON, so that a proxy's idle timeout does not cut the connection.
    exec_keepalive_seconds: float = 15.0
    # Files listed in one exec reply; the rest stay in the session and in its listing.
    max_files_per_run: int = 100
    # A private S3 bucket through which downloads of large files go (docs/aws.md "Large files"):
    # a download of at least `large_files_from_bytes` is answered with a redirect to it.
    # Unset, every download is answered directly. The S3 endpoint comes from the AWS
    # SDK's own settings (AWS_ENDPOINT_URL_S3 for a local one).
    large_files_bucket: str | None = None
    # Below Lambda's 6 MB response once base64-encoded (4/3 of the size), with room to spare.
    large_files_from_bytes: int = 4_500_000
    # The most a request can carry to this deployment, where something in front caps it
    # (the SAM template: API Gateway's and Lambda's 6 MB). Only said in an upload's 413.
    gateway_request_bytes: int | None = None
    # local backend limits (docs/isolation.md).
    run_cpu_seconds: int = 30  # CPU time of each process of a run
    # A whole run's memory (a cgroup), or each process's address space where the host has
    # no memory cgroup. Also the size of each of the run's RAM disks, /tmp and /dev/shm.
    run_memory_bytes: int = 1_073_741_824
    # Processes and threads of a whole run (a cgroup), or of the sandbox uid (RLIMIT_NPROC).
    run_max_processes: int = 256
    # The cores one run's libraries may use: BLAS, OpenMP, numexpr, joblib and the like
    # start this many threads, not one per core of the host, which the runs share.
    run_cpus: int = Field(default=1, ge=1)
    max_file_bytes: int = 104_857_600  # one file a run writes
    max_session_bytes: int = 1_073_741_824  # all of a session's files together
    # Storage quotas over all of a user's (an organization's) sessions, on every host of a
    # fleet together (docs/operations.md "Quotas"); 0: none.
    max_user_bytes: int = Field(default=0, ge=0)
    max_tenant_bytes: int = Field(default=0, ge=0)
    # Use cgroups where the host offers them; false leaves rlimits alone to hold.
    sandbox_cgroups: bool = True
    # Runs made ahead (`local`, as root), forked from a server that imported numpy, pandas
    # and matplotlib, and from a bare one (py runs naming none of them, any other language
    # by exec). With none ready a run is forked on demand; 0 turns them off.
    warm_python: int = 4
    warm_sandboxes: int = 4
    # Runs made ahead from a third server that has also imported SciPy, seaborn, scikit-learn,
    # statsmodels and plotly, for the py runs naming them (a server of about 300 MB); 0: off.
    warm_scientific: int = 2

    @field_validator("code_exec_auth_modes", "code_exec_jwt_algorithms", mode="before")
    @classmethod
    def _comma_list(cls, value: object) -> object:
        return frozenset(v.strip() for v in value.split(",") if v.strip()) if isinstance(value, str) else value

    @field_validator("code_exec_auth_modes")
    @classmethod
    def _no_modes_is_the_default(cls, value: frozenset[str] | None) -> frozenset[str] | None:
        return value or None  # an empty variable (compose passes one through) is an unset one

    @field_validator("code_exec_api_keys_file")
    @classmethod
    def _readable_keys_file(cls, value: Path | None) -> Path | None:
        if value is not None:
            from .service_keys import parse  # only for a deployment with named keys

            try:
                parse(value.read_text())
            except OSError as exc:
                raise ValueError(f"CODE_EXEC_API_KEYS_FILE {value} cannot be read: {exc.strerror}") from None
            except ValueError as exc:
                raise ValueError(f"CODE_EXEC_API_KEYS_FILE {value}: {exc}") from None
        return value

    @field_validator("code_exec_jwt_public_key")
    @classmethod
    def _usable_public_key(cls, value: str | None) -> str | None:
        if value and value.strip():
            from .bearer_tokens import given_keys  # PyJWT only for a deployment that checks tokens

            given_keys(value)  # a ValueError names the variable and what is wrong
            return value
        return None

    @property
    def auth_modes(self) -> frozenset[str]:
        if self.code_exec_auth_modes:
            return self.code_exec_auth_modes
        return frozenset({"key", "jwt"} if self.code_exec_jwt_public_key else {"key"})

    @property
    def jwt_issuer(self) -> str:
        return self.code_exec_jwt_issuer or (LIBRECHAT_ISSUER if self.code_exec_jwt_public_key else "")

    @property
    def jwt_audience(self) -> str:
        return self.code_exec_jwt_audience or (LIBRECHAT_AUDIENCE if self.code_exec_jwt_public_key else "")

    @field_validator("runner_urls", mode="before")
    @classmethod
    def _ordered_comma_list(cls, value: object) -> object:
        return tuple(v.strip() for v in value.split(",") if v.strip()) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _one_way_to_name_runners(self) -> Self:
        ways = [name for name, set_ in (("RUNNER_URL", self.runner_url), ("RUNNER_URLS", self.runner_urls),
                                        ("RUNNER_URL_TEMPLATE", self.runner_url_template)) if set_]  # fmt: skip
        if len(ways) > 1:
            raise ValueError(f"name the runners one way, not with {' and '.join(ways)}")
        if bool(self.runner_url_template) != bool(self.runner_count):
            raise ValueError("RUNNER_URL_TEMPLATE and RUNNER_COUNT go together ({i} counts 0 to RUNNER_COUNT-1)")
        if self.runner_url_template and "{i}" not in self.runner_url_template:
            raise ValueError(f"RUNNER_URL_TEMPLATE '{self.runner_url_template}' has no {{i}} for the runner's index")
        for name, url in [("RUNNER_URL", self.runner_url), *(("RUNNER_URLS", u) for u in self.runner_urls)]:
            if url:
                _check_runner_url(name, url)
        if self.runner_url_template:
            _check_runner_url("RUNNER_URL_TEMPLATE", self.runner_url_template.replace("{i}", "0"))
        self.fleet_index()  # a malformed RUNNER_INDEX refuses to start, with its sentence
        if len(self.fleet_urls()) > 64:
            raise ValueError("a fleet has 64 runners at most (a session id's first character names its runner)")
        return self

    def fleet_index(self) -> int | None:
        """This runner's index in its fleet (RUNNER_INDEX), None for a lone runner."""
        value = self.runner_index
        if not value:
            return None
        if value == "ordinal":  # a StatefulSet's pod is <name>-<ordinal>
            host = socket.gethostname().split(".")[0]
            ordinal = re.search(r"-(\d+)$", host)
            if ordinal is None:
                raise ValueError(f"RUNNER_INDEX=ordinal, but the host name '{host}' does not end in -<number>")
            value = ordinal[1]
        if not value.isdigit() or int(value) >= 64:
            raise ValueError(f"RUNNER_INDEX must be 0 to 63 or 'ordinal', not '{self.runner_index}'")
        return int(value)

    def fleet_urls(self) -> tuple[str, ...]:
        """The runners of a fleet, runner i at i; () without one (RUNNER_URL is one runner
        whose ids name no runner)."""
        if self.runner_url_template:
            return tuple(self.runner_url_template.replace("{i}", str(i)) for i in range(self.runner_count))
        return self.runner_urls

    @field_validator("code_exec_jwt_algorithms")
    @classmethod
    def _asymmetric_only(cls, value: frozenset[str]) -> frozenset[str]:
        # `none` checks nothing, and an HMAC algorithm would take the public key as its secret.
        refused = {a for a in value if a.lower() == "none" or a.upper().startswith("HS")}
        if refused or not value:
            raise ValueError(f"CODE_EXEC_JWT_ALGORITHMS must list asymmetric algorithms only; refused: {refused}")
        return value

    @field_validator("code_exec_jwt_jwks_url")
    @classmethod
    def _key_set_url(cls, value: str | None) -> str | None:
        url = urlsplit(value or "")
        loopback = url.scheme == "http" and url.hostname in ("127.0.0.1", "localhost", "::1")
        if value and url.scheme not in ("https", "file") and not loopback:
            raise ValueError("CODE_EXEC_JWT_JWKS_URL must be an https:// or file:// URL")
        return value

    @model_validator(mode="after")
    def _issuer_and_audience_with_keys(self) -> Self:
        # A key set alone would accept any token it signed, for any service: refuse to start.
        if self.code_exec_jwt_jwks_url and not (self.code_exec_jwt_issuer and self.code_exec_jwt_audience):
            raise ValueError("CODE_EXEC_JWT_JWKS_URL needs CODE_EXEC_JWT_ISSUER and CODE_EXEC_JWT_AUDIENCE")
        return self


def _check_runner_url(name: str, url: str) -> None:
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 (a malformed port raises here)
    except ValueError:
        parts = parts._replace(netloc="")
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise ValueError(f"{name}: '{url}' is not a runner's URL (http://host:port)")


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
