"""Every language LibreChat's code tool offers, run for real on the `local` backend.

Each language costs two runs: one program that prints a token, echoes an argument and
writes a file, and one that fails to compile or throws.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from fastapi.testclient import TestClient

from codeexec.api.app import create_app
from codeexec.languages import LANGUAGES
from codeexec.sandbox.local import collect
from codeexec.sandbox.local.toolchains import TOOLCHAINS
from codeexec.settings import Settings

from ..calls import run, upload
from ..conftest import API_KEY
from ..helpers.images import png_size
from ..helpers.programs import ARG, HELLO, TOKEN
from ..serving import Services

# (lang, program, what stderr must say): compile errors and runtime errors alike.
BROKEN = [
    ("py", "raise ValueError('broken-py')", "ValueError: broken-py"),
    ("js", "throw new Error('broken-js')", "Error: broken-js"),
    ("ts", "const n: number = ;", 'Unexpected ";"'),
    # The source map points a runtime error at the TypeScript the model wrote.
    ("ts", "const f = (n: number): never => {\n  throw new Error('broken-ts');\n};\nf(1);", "/code/main.ts:2"),
    ("c", "int main(void) { return undeclared_name; }", "undeclared_name"),
    ("cpp", "int main() { return undeclared_name; }", "undeclared_name"),
    ("java", 'public class Broken { public static void main(String[] a) { int x = "s"; } }', "incompatible types"),
    ("php", '<?php throw new Exception("broken-php");', "broken-php"),
    ("rs", 'fn main() { let x: i32 = "s"; }', "mismatched types"),
    ("go", "package main\n\nfunc main() { x := 1 }\n", "not used"),
    ("d", 'void main() { int x = "s"; }', "cannot implicitly convert"),
    ("f90", "program p\n  integer :: x\n  x = 'text'\nend program p\n", "Cannot convert"),
    ("r", 'stop("broken-r")', "broken-r"),
    ("bash", "no_such_command_7f3a", "no_such_command_7f3a: command not found"),
]


def test_the_table_is_the_contracts_thirteen_languages() -> None:
    assert set(LANGUAGES) == {"py", "js", "ts", "c", "cpp", "java", "php", "rs", "go", "d", "f90", "r", "bash"}
    assert set(HELLO) == set(LANGUAGES) == set(TOOLCHAINS)


def test_health_lists_every_language_installed_here(client: TestClient) -> None:
    assert set(client.get("/health").json()["languages"]) == set(LANGUAGES)


@pytest.mark.parametrize("lang", sorted(HELLO))
def test_hello_args_and_a_written_file(client: TestClient, lang: str) -> None:
    body = run(client, HELLO[lang], lang, args=[ARG])
    assert body["stdout"] == f"{TOKEN}\n{ARG}\n"
    assert body["stderr"] == ""
    # Only what the program wrote: no source, no object file, no class file, no module file.
    assert [f["name"] for f in body["files"]] == ["out.txt"]
    download = client.get(f"/v1/download/{body['session_id']}/out.txt")
    assert download.status_code == 200
    assert download.content.strip() == TOKEN.encode()


@pytest.mark.parametrize(("lang", "code", "says"), BROKEN, ids=[f"{lang}-{i}" for i, (lang, *_) in enumerate(BROKEN)])
def test_errors_are_a_200_with_stderr(client: TestClient, lang: str, code: str, says: str) -> None:
    body = run(client, code, lang)
    assert says in body["stderr"]
    assert body["stdout"] == ""
    assert body["files"] == []


def test_java_starts_under_an_address_space_limit(settings: Settings, services: Services) -> None:
    # Without cgroups the memory limit is each process's address space, which a JVM with
    # default reservations (heap, class space, code cache) overruns before it runs a line.
    rlimits_only = settings.model_copy(update={"sandbox_cgroups": False})
    client = TestClient(create_app(services(rlimits_only)), headers={"X-API-Key": API_KEY})
    body = run(client, HELLO["java"], "java", args=[ARG])
    assert body["stdout"] == f"{TOKEN}\n{ARG}\n", body["stderr"]


def test_python_reads_an_uploaded_csv_and_saves_a_chart(client: TestClient) -> None:
    up = upload(client, "sales.csv", b"month,units\n1,10\n2,20\n3,30\n")
    code = """
import matplotlib.pyplot as plt
import numpy, pandas as pd, PIL, scipy
df = pd.read_csv("sales.csv")
print(df.shape, df["units"].sum())
df.plot(x="month", y="units")
plt.savefig("chart.png")
"""
    files = [{"id": "sales.csv", "session_id": up["session_id"], "name": "sales.csv"}]
    body = run(client, code, "py", files=files)
    assert body["stdout"] == "(3, 2) 60\n"
    assert body["stderr"] == ""
    assert [f["name"] for f in body["files"]] == ["chart.png"]  # the unchanged CSV is not an output
    download = client.get(f"/v1/download/{body['session_id']}/chart.png")
    assert download.headers["content-type"] == "image/png"
    assert png_size(download.content) == (640, 480)  # matplotlib's default figure at 100 dpi


def test_python_imports_the_sessions_own_modules(client: TestClient) -> None:
    up = upload(client, "helper.py", b"def greet():\n    return 'from-helper'\n")
    body = run(client, "import helper\nprint(helper.greet())", "py", session_id=up["session_id"])
    assert body["stdout"] == "from-helper\n", body["stderr"]


def test_r_plots_to_png_without_x11(client: TestClient) -> None:
    code = 'png("plot.png", width = 320, height = 240)\nplot(1:10, main = "r-plot")\ninvisible(dev.off())'
    body = run(client, code, "r")
    assert body["stderr"] == ""
    assert [f["name"] for f in body["files"]] == ["plot.png"]
    assert png_size(client.get(f"/v1/download/{body['session_id']}/plot.png").content) == (320, 240)


@pytest.mark.parametrize(
    ("code", "source"),
    [
        ("public class Greeter {}", "Greeter.java"),
        ("class Helper {}\npublic final class Solver {}", "Solver.java"),
        ("class Solution { public static void main(String[] a) {} }", "Solution.java"),
        ("System.out.println(1);", "Main.java"),
    ],
)
def test_java_source_is_named_after_its_class(code: str, source: str) -> None:
    assert LANGUAGES["java"].source_name(code) == source


def test_other_sources_keep_their_name() -> None:
    assert LANGUAGES["py"].source_name("class Greeter: pass") == "main.py"


def test_a_missing_linker_makes_a_language_unavailable() -> None:
    rust = TOOLCHAINS["rs"]
    assert rust.available()
    assert not replace(rust, needs=("/nonexistent/cc",)).available()


def test_missing_toolchain_is_a_400_naming_the_language(
    monkeypatch: pytest.MonkeyPatch, settings: Settings, services: Services
) -> None:
    d = TOOLCHAINS["d"]
    monkeypatch.setitem(TOOLCHAINS, "d", replace(d, compile=("/nonexistent/ldc2", *d.compile[1:])))
    client = TestClient(create_app(services(settings)), headers={"X-API-Key": API_KEY})
    reply = client.post("/v1/exec", json={"lang": "d", "code": "void main() {}"})
    assert reply.status_code == 400
    assert "lang 'd' is not available here" in reply.json()["details"]
    assert "d" not in client.get("/health").json()["languages"]


def test_slow_toolchains_get_their_own_time_limit(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, settings: Settings
) -> None:
    seen: list[float] = []
    real_finish = collect.finish  # what every run ends in, cold or warm

    def recording_finish(started: object, cgroup: object, timeout: float, *rest: object):
        seen.append(timeout)
        return real_finish(started, cgroup, timeout, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(collect, "finish", recording_finish)
    run(client, "true", "bash")
    run(client, "fn main() {}", "rs")
    assert TOOLCHAINS["rs"].min_timeout > settings.run_timeout_seconds
    assert seen == [settings.run_timeout_seconds, TOOLCHAINS["rs"].min_timeout]
