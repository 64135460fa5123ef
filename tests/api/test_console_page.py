"""Issue 41, items 1 and 4 (the page; its API: tests/api/test_console.py): the operator's console
as a person sees it, in Debian's Chromium, headless, against a service over a fleet of three
runners: the key asked for and a wrong one refused, the three runners up, a run it made counted,
a failure it provoked listed with the stderr line that names its error, a runner it stopped shown down
within 5 s, nothing asked while the page is out of view, and no hostile string run or
parsed: a stderr line, a user id and a file name carry <script> and <img onerror>, and the page
shows them as text (or not at all) and breaks none of its Content-Security-Policy.

Screenshots of the page, wide and on a phone, are kept in the test's tmp_path.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright
from pydantic import SecretStr

from codeexec.api.app import create_app
from codeexec.settings import Settings

from ..conftest import API_KEY
from ..helpers.fleet import Fleet
from ..serving import Services, fleet_settings, serving

ADMIN_KEY = "admin-key-0123456789"
# Debian's Chromium (deps/apt.txt): Playwright's own browser download is not used.
CHROMIUM = shutil.which("chromium-headless-shell") or "/usr/bin/chromium-headless-shell"
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync",
]  # fmt: skip
# Each would mark the page if it ran as script, or show as an element if parsed as HTML.
HOSTILE = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
HOSTILE_STDERR = f"import sys\nprint({HOSTILE!r}, file=sys.stderr)\nsys.exit(3)"
# Before the page's own script: every breach of the page's policy is noted.
WATCH = """
window.__violations = [];
document.addEventListener("securitypolicyviolation", (e) => window.__violations.push(e.violatedDirective));
"""
SHOWN_DOWN_SECONDS = 5
REFRESH_SECONDS = 2  # console.js's EVERY_MS


@pytest.fixture
def fleet(settings: Settings) -> Iterator[Fleet]:
    with Fleet.running(settings, 3) as made:
        yield made


@pytest.fixture
def console(settings: Settings, fleet: Fleet, services: Services) -> Iterator[str]:
    """A service over the fleet, with a console, on loopback: its base URL."""
    configured = fleet_settings(settings, fleet.urls).model_copy(update={"code_exec_admin_key": SecretStr(ADMIN_KEY)})
    with serving(create_app(services(configured))) as url:
        yield url


@pytest.fixture
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


def run(api: httpx.Client, code: str, **extra: object) -> dict:
    reply = api.post("/v1/exec", json={"lang": "py", "code": code, **extra})
    assert reply.status_code == 200, reply.text
    return reply.json()


def in_view(page: Page, shown: bool) -> None:
    """The page as the browser tells it when its tab is hidden or shown again."""
    page.evaluate(
        """(shown) => {
            const state = shown ? "visible" : "hidden";
            Object.defineProperty(document, "visibilityState", {configurable: true, get: () => state});
            document.dispatchEvent(new Event("visibilitychange"));
        }""",
        shown,
    )


def unbreached(page: Page) -> None:
    """No planted script ran, and the page broke none of its policy (an inline script or
    style of its own would have)."""
    assert page.evaluate("window.__pwned") is None
    assert page.evaluate("window.__violations") == []
    assert page.title() == "codeexec console"


def test_a_person_sees_the_fleet_its_runs_and_failures_and_a_runner_stopped(
    console: str, fleet: Fleet, browser: Browser, tmp_path: Path
) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.add_init_script(WATCH)
    asked: list[str] = []  # every request the page sent
    page.on("request", lambda request: asked.append(request.url))
    page.goto(f"{console}/admin")

    # The key is asked for; a wrong one (the service key) is refused and asked for again.
    page.fill("#key", API_KEY)
    page.click("#login button")
    expect(page.locator("#refused")).to_contain_text("refused")
    expect(page.locator("#console")).to_be_hidden()
    page.screenshot(path=tmp_path / "console-key-refused.png")
    page.fill("#key", ADMIN_KEY)
    page.click("#login button")

    hosts = page.locator("#hosts .host")
    expect(hosts).to_have_count(3)
    for index in range(3):
        expect(hosts.nth(index)).to_contain_text(f"runner {index}")
        expect(hosts.nth(index).locator(".badge")).to_have_text("up")
    expect(page.locator("#fleet-summary")).to_have_text("3 of 3 up")

    with httpx.Client(base_url=console, headers={"X-API-Key": API_KEY}, timeout=60) as api:
        run(api, "print('hello')", user_id=HOSTILE)
        runs = page.locator("#runs-summary .stat", has_text="Runs").locator("b")
        expect(runs).to_have_text("1")
        failed = run(api, "raise ValueError('provoked')")
        hostile = run(api, HOSTILE_STDERR, user_id=HOSTILE)
        uploaded = api.post("/v1/upload", files={"file": (f"{HOSTILE}.txt", b"x")}, headers={"User-Id": HOSTILE})
        assert uploaded.status_code == 200, uploaded.text

    expect(runs).to_have_text("3")
    expect(page.locator("#runs-summary .stat", has_text="Failed").locator("b")).to_have_text("2 (error 2)")
    expect(page.locator("#runs-chart rect.fill-error")).not_to_have_count(0)
    provoked = page.locator("#failures-table tbody tr", has_text=failed["session_id"])
    expect(provoked).to_contain_text("ValueError: provoked")
    expect(provoked).to_contain_text("error")
    # The hostile line is shown as the text it is: no element of it, no script of it.
    planted = page.locator("#failures-table tbody tr", has_text=hostile["session_id"]).locator("td.stderr")
    expect(planted).to_have_text(HOSTILE)
    assert page.locator("main img, main script").count() == 0
    # The console names users by their digest and files not at all: the planted user id and
    # file name appear nowhere, the stderr line once.
    expect(page.locator("#users-table tbody tr")).not_to_have_count(0)
    assert (page.locator("main").text_content() or "").count("__pwned = 2") == 1
    page.screenshot(path=tmp_path / "console.png", full_page=True)

    # On a phone (in dark mode): one column, nothing wider than the screen.
    phone = browser.new_page(
        viewport={"width": 390, "height": 844}, is_mobile=True, device_scale_factor=2, color_scheme="dark"
    )
    phone.add_init_script(WATCH)
    phone.goto(f"{console}/admin")
    phone.fill("#key", ADMIN_KEY)
    phone.click("#login button")
    expect(phone.locator("#hosts .host")).to_have_count(3)
    expect(phone.locator("#failures-table tbody tr", has_text=hostile["session_id"])).to_be_attached()
    phone.screenshot(path=tmp_path / "console-phone.png", full_page=True)
    assert phone.evaluate("document.documentElement.scrollWidth") <= 390
    unbreached(phone)
    phone.close()

    # Out of view, the page asks nothing; back in view, at once.
    overview = f"{console}/admin/api/overview"
    in_view(page, False)
    before = asked.count(overview)
    page.wait_for_timeout(REFRESH_SECONDS * 2200)
    assert asked.count(overview) == before
    with page.expect_request(overview, timeout=1000):
        in_view(page, True)

    # A runner stopped is shown down within 5 s; the others stay up.
    fleet.stop(1)
    stopped = time.monotonic()
    expect(hosts.nth(1).locator(".badge")).to_have_text("down", timeout=SHOWN_DOWN_SECONDS * 1000)
    print(f"runner 1 shown down {time.monotonic() - stopped:.1f} s after it stopped")
    expect(page.locator("#fleet-summary")).to_have_text("2 of 3 up")
    expect(page.locator("#silent")).to_contain_text("runner 1 did not answer")
    for index in (0, 2):
        expect(hosts.nth(index).locator(".badge")).to_have_text("up")
    page.screenshot(path=tmp_path / "console-runner-down.png", full_page=True)

    unbreached(page)
    print(f"screenshots in {tmp_path}")
