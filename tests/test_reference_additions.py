"""The reference server's small additions LibreChat may lean on (CONTRACT.md, G2): the
language names it takes, `artifact_truncation`, a client's `timeout`, and two inputs of
one name in one run."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from codeexec.languages import ALIASES, LANGUAGES

# One program per language that only that language runs, printing "ok".
OK = {
    "py": "print('ok')",
    "js": "console.log(typeof require === 'function' ? 'ok' : 'no node')",
    "ts": "const said: string = 'ok';\nconsole.log(said);",
    "bash": "echo ok",
    "c": '#include <stdio.h>\nint main(void) { puts("ok"); return 0; }',
    "cpp": '#include <iostream>\nint main() { std::cout << "ok" << std::endl; }',
    "java": 'public class Main { public static void main(String[] a) { System.out.println("ok"); } }',
    "php": '<?php echo "ok\\n";',
    "rs": 'fn main() { println!("ok"); }',
    "go": 'package main\n\nimport "fmt"\n\nfunc main() { fmt.Println("ok") }\n',
    "d": 'import std.stdio;\nvoid main() { writeln("ok"); }',
    "f90": "program p\n  print '(a)', 'ok'\nend program p\n",
    "r": 'cat("ok\\n")',
}


def test_every_alias_names_a_language_of_the_contract() -> None:
    assert set(OK) == set(LANGUAGES)
    assert set(ALIASES.values()) <= set(LANGUAGES)
    assert not set(ALIASES) & set(LANGUAGES)
    for name in ("python", "python3", "javascript", "node", "nodejs", "node-js", "bun", "typescript", "sh", "shell",
                 "rust", "golang", "c++", "fortran"):  # fmt: skip
        assert name in ALIASES, name


@pytest.mark.parametrize(("alias", "lang"), sorted(ALIASES.items()))
def test_an_alias_runs_as_its_language_and_the_reply_names_it_as_sent(
    client: TestClient, alias: str, lang: str
) -> None:
    reply = client.post("/v1/exec", json={"lang": alias, "code": OK[lang]})
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert (body["stdout"], body["stderr"], body["language"]) == ("ok\n", "", alias)


def test_a_name_in_capitals_is_the_same_language(client: TestClient) -> None:
    body = client.post("/v1/exec", json={"lang": "Python", "code": OK["py"]}).json()
    assert (body["stdout"], body["language"]) == ("ok\n", "Python")


def test_an_unknown_language_is_a_400_naming_it(client: TestClient) -> None:
    reply = client.post("/v1/exec", json={"lang": "cobol", "code": "DISPLAY 'ok'."})
    assert reply.status_code == 400
    assert "'cobol'" in reply.json()["details"]
