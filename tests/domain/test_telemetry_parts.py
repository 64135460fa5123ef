"""The pieces telemetry, the console and the named keys are made of, on their own: a request
id taken or replaced, a run's outcome, an hour's minutes and their percentiles, and a keys
file read or refused line by line. No service, no sandbox."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from codeexec.sandbox.port import Limit, LimitHit, OwnerTag, RunResult
from codeexec.service_keys import key_hash, parse
from codeexec.telemetry.calls import STDERR_HEAD_CHARS, Call, Ran, outcome, request_id, stderr_head
from codeexec.telemetry.history import BOUNDS, History, percentile


@pytest.mark.parametrize("given", ["lc-42.a", "Root=1-67891233-abcdef012345678912345678", "a" * 128])
def test_a_well_formed_request_id_is_kept(given: str) -> None:
    assert request_id(given) == given


@pytest.mark.parametrize("given", [None, "", "a" * 129, "bad\x01id", "two words", 'quote"d', "new\nline"])
def test_anything_else_is_replaced(given: str | None) -> None:
    made = request_id(given)
    assert made != given and len(made) == 32 and made.isalnum()


@pytest.mark.parametrize(
    ("exit_code", "hits", "said"),
    [
        (0, (), "ok"),
        (1, (), "error"),
        (None, (LimitHit(Limit.TIME, 3),), "timeout"),
        (None, (LimitHit(Limit.CPU, 1),), "timeout"),
        (None, (LimitHit(Limit.MEMORY, 1 << 20),), "memory"),
        (None, (LimitHit(Limit.CANCELLED, 0),), "cancelled"),
        (0, (LimitHit(Limit.OUTPUT, 10, stopped=False, stream="stdout"),), "ok"),  # cut, not stopped
        (None, (LimitHit(Limit.PROCESSES, 24),), "error"),
    ],
)
def test_a_runs_outcome_is_one_of_a_few(exit_code: int | None, hits: tuple[LimitHit, ...], said: str) -> None:
    assert outcome(RunResult("", "", exit_code, hits)) == said


def called(history: History, seconds: float, result: str = "ok", user: str = "u", status: int = 200) -> None:
    run = Ran("py", result, seconds, "warm", "Traceback (most recent call last):" if result != "ok" else "")
    history.called(Call("id", "POST", route="/v1/exec", status=status, key="default",
                        owner=OwnerTag("org", user), run=run))  # fmt: skip


@pytest.mark.parametrize(
    ("stderr", "shown"),
    [
        ("Traceback (most recent call last):\n  File \"<string>\", line 1\nZeroDivisionError: division by zero\n",
         "ZeroDivisionError: division by zero"),
        ("\nError: Cannot find module 'left-pad'\n    at Module._resolve\n", "Error: Cannot find module 'left-pad'"),
        ("main.go:3:1: syntax error\n", "main.go:3:1: syntax error"),
        ("  \n", ""),
        ("x" * 1000, "x" * STDERR_HEAD_CHARS),
    ],
)
def test_the_console_shows_the_stderr_line_that_says_what_went_wrong(stderr: str, shown: str) -> None:
    assert stderr_head(stderr) == shown


def test_an_hour_keeps_each_minute_and_forgets_what_is_older() -> None:
    now = [1_000_000.0]
    history = History(clock=lambda: now[0])
    for seconds in (0.01, 0.02, 0.03, 2.0):
        called(history, seconds)
    called(history, 0.5, "timeout", user="v")
    history.called(Call("id", "POST", route="/v1/exec", status=429, key="default"))
    [minute] = history.summary()["minutes"]
    assert (minute["runs"], minute["failures"], minute["rate_limited"]) == (5, {"timeout": 1}, 1)
    summary = history.summary()
    assert summary["runs_by"]["user"] == {"u": 4, "v": 1}
    assert summary["keys"] == {"default": {"calls": 6, "runs": 5, "rate_limited": 1}}
    assert [f["outcome"] for f in summary["failures"]] == ["timeout"]
    now[0] += 61 * 60  # an hour and a minute later
    assert history.summary() == {"minutes": [], "failures": [], "runs_by": {"user": {}, "tenant": {}}, "keys": {}}


def test_percentiles_read_from_summed_buckets_are_within_a_bucket() -> None:
    durations = [0.005] * 50 + [0.1] * 45 + [3.0] * 5
    buckets: Counter[int] = Counter()
    for seconds in durations:
        buckets[next(i for i, bound in enumerate(BOUNDS) if seconds <= bound)] += 1
    p50, p95 = percentile(buckets, 0.5), percentile(buckets, 0.95)
    assert p50 is not None and 0.005 <= p50 <= 0.005 * 1.25
    assert p95 is not None and 0.1 <= p95 <= 0.1 * 1.25
    assert percentile(Counter(), 0.5) is None


def test_a_keys_file_is_read_line_by_line_and_a_wrong_line_named_without_its_content() -> None:
    good = json.dumps({"name": "team-a", "sha256": key_hash("k1"), "runs_at_once": 2})
    rotated = json.dumps({"name": "team-a", "sha256": key_hash("k2")})
    keys = parse(f"# a comment\n\n{good}\n{rotated}\n")
    assert {key.name for key in keys.values()} == {"team-a"} and len(keys) == 2
    for wrong, said in (
        ('{"name": "x", "sha256": "the-key-itself"}', "line 2 is not a service key"),
        ('{"name": "x y", "sha256": "' + "0" * 64 + '"}', "line 2 is not a service key"),
        ('{"name": "x", "sha256": "' + "0" * 64 + '", "admin": true}', "line 2 is not a service key"),
        (good, "line 2 repeats the key of another line"),
    ):
        with pytest.raises(ValueError) as refused:
            parse(f"{good}\n{wrong}\n")
        assert str(refused.value).startswith(said) and "the-key-itself" not in str(refused.value)
