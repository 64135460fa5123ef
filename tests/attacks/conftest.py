"""What the attack suites share: the service under the limits they attack (helpers/attacks.py
LIMITS), and a client of it on loopback that sends what the attacks send."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from codeexec.settings import Settings

from ..helpers.attacks import LIMITS, attacked


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update=LIMITS)


@pytest.fixture
def api(live_server: str) -> Iterator[httpx.Client]:
    with attacked(live_server) as client:
        yield client
