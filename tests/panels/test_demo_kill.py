"""The issue's acceptance run, as a user would do it: on the demo study
(``manage.py demo``), ``run_panel`` with three simulated judges in both modes is
SIGKILLed mid-run, then run again: it completes, and no request answered before
the kill is asked again. The study report then carries both runs.

Self-contained: its own SQLite file and var folder, ``manage.py`` subprocesses,
simulated judges served from this process (their counters are the oracle).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from judging.simulated import start_simulated_judge
from tests.conftest import REPO


@pytest.fixture
def demo(tmp_path):
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "RCP_VAR_DIR": str(tmp_path / "var"),
        "JUDGE_LIMITER_URL": f"file://{tmp_path / 'slots'}",
        "PANELS_HEARTBEAT_STALE_S": "1",
        "DEBUG": "true",
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)

    def manage(*args: str, timeout: float = 180) -> str:
        out = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert out.returncode == 0, out.stderr[-3000:]
        return out.stdout

    servers = [start_simulated_judge(seed=i, latency_ms=250)[0] for i in (1, 2, 3)]
    manage("migrate", "-v0")
    manage("demo")
    for i, server in enumerate(servers, 1):
        manage(
            "add_judge", "--name", f"sim{i}", "--base-url", server.url,
            "--model", "simulated", "--concurrency", "1",
        )  # fmt: skip
    manage("add_panel", "--name", "trio", "--judge", "sim1", "--judge", "sim2",
           "--judge", "sim3")  # fmt: skip
    db = sqlite3.connect(tmp_path / "db.sqlite3", timeout=30)
    yield manage, env, servers, db
    db.close()
    for server in servers:
        server.stop()


def _done(db, mode: str) -> set[tuple[str, str]]:
    """(judge name, prompt hash) of stored answers: lists prompts are the same for
    every judge, so a request is known by both."""
    return set(
        db.execute(
            "SELECT j.name, r.prompt_sha256 FROM panels_panelrequest r"
            " JOIN panels_panelrun u ON r.run_id = u.id"
            " JOIN judging_judge j ON r.judge_id = j.id"
            " WHERE u.mode = ? AND r.status = 'done'",
            (mode,),
        )
    )


def test_demo_runs_killed_then_resumed_ask_nothing_answered(demo):
    """Both modes: killed after 6 stored answers, resumed to 18 of 18; only the
    requests in flight at the kill were asked twice; the report has both runs."""
    manage, env, servers, db = demo
    for mode in ("lists", "rubric"):
        _kill_and_resume(manage, env, servers, db, mode)
    report = json.loads(manage("study_report", "--study", "Demo study", "--json"))
    runs = {run["mode"]: run for run in report["panels"]["runs"]}
    assert set(runs) == {"lists", "rubric"}
    for run in runs.values():
        assert run["status"] == "done" and run["answered"] == run["total"] == 18
        assert run["contests"] == 3 and sum(run["verdicts"].values()) == 3
        assert set(run["per_judge"]) == {"sim1", "sim2", "sim3"}
    assert runs["rubric"]["per_judge"]["sim1"]["first_list_share"] is None
    assert runs["lists"]["per_judge"]["sim1"]["first_list_share"]["n"] >= 1


def _kill_and_resume(manage, env, servers, db, mode: str) -> None:
    for server in servers:
        server.reset_stats()
    args = ["--study", "Demo study", "--panel", "trio", "--mode", mode]
    assert "total: 18 calls over 3 contests" in manage("run_panel", *args, "--estimate")
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "run_panel", *args, "--inline"],
        cwd=REPO,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while len(_done(db, mode)) < 6:
        assert proc.poll() is None, "the run ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = _done(db, mode)
    assert 6 <= len(before) < 18
    time.sleep(1.5)  # the dead runner's heartbeat goes stale
    out = manage("run_panel", *args, "--inline")
    assert f"({len(before)} answered already)" in out
    assert "done: 18/18 answered (18 valid, 0 invalid)" in out
    after = _done(db, mode)
    assert len(after) == 18 and before <= after
    answered = {
        (f"sim{i}", digest): n
        for i, server in enumerate(servers, 1)
        for digest, n in server.stats()["answered"].items()
    }
    assert set(answered) == after
    assert all(answered[d] == 1 for d in before), "a stored answer was asked again"
    # Only requests in flight at the kill (one per judge at most) were asked twice.
    assert sum(answered.values()) - 18 <= 3
