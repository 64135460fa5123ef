"""The fake MicroVM control plane (tests/fakes/microvms.py), trusted over HTTPS."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from codeexec.settings import Settings

from ..fakes.microvms import FakeMicrovms, running_fake


@contextlib.contextmanager
def trusted_fake(settings: Settings, monkeypatch: pytest.MonkeyPatch, **options: Any) -> Iterator[FakeMicrovms]:
    """The fake, its endpoints' certificate authority trusted by every HTTPS client here."""
    root = Path(settings.sandbox_root) / "vms"  # reachable by the sandbox uid, unlike tmp_path
    with running_fake(root, settings, **options) as fake:
        fake.ca.cert_pem.write_to_path(str(root.parent / "ca.pem"))
        monkeypatch.setenv("SSL_CERT_FILE", str(root.parent / "ca.pem"))
        yield fake
