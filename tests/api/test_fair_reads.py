"""Listings and downloads take a share as runs and uploads do: one caller's flood of
listings of a large session is refused past its share (429), and another caller's
download and listing are still served."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
from fastapi.testclient import TestClient

from codeexec.api.admission import LISTINGS, Admission
from codeexec.errors import RateLimited

from ..calls import run
from ..conftest import API_KEY


def test_a_flood_of_listings_is_refused_past_its_share(client: TestClient, live_server: str) -> None:
    big = run(client, "for i in range(5000):\n    open(f'f{i}.txt', 'w')")["session_id"]
    headers = {"X-API-Key": API_KEY}

    def listing(_: int) -> int:
        url = f"{live_server}/files/{big}"
        return httpx.get(url, params={"detail": "full"}, headers=headers, timeout=60).status_code

    with ThreadPoolExecutor(24) as pool:
        statuses = list(pool.map(listing, range(48)))
    assert set(statuses) == {200, 429} and statuses.count(200) >= LISTINGS // 2, statuses
    assert client.get("/health").status_code == 200


def test_each_caller_keeps_its_share_of_listings_and_downloads() -> None:
    admission = Admission(runs=4, uploads=4)
    held = []
    for kind in ("listing", "download"):
        entered = 0
        try:
            while True:  # one caller takes all it may
                held.append(admission.read(kind, "flooder"))
                held[-1].__enter__()
                entered += 1
        except RateLimited:
            held.pop()
        assert entered >= 1
        with admission.read(kind, "someone-else"):  # a newcomer still finds a slot
            pass
    for slot in held:
        slot.__exit__(None, None, None)
    with admission.read("listing", "flooder"):  # and the flooder's slots came back
        pass
