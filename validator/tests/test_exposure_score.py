"""The llama_server role's `llamafleet_exposure_score` filter: the overall exposure score of
`systemd-analyze security UNIT` output, and the verify.yml task that reports it."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

SERVICE_TASKS = (
    Path(__file__).resolve().parents[2] / "roles" / "llama_server" / "tasks" / "verify.yml"
)
ESC = "\x1b"

# what systemd-analyze prints before the summary line (abridged)
TABLE = (
    "  NAME                                                        DESCRIPTION"
    "                                      EXPOSURE\n"
    "✓ PrivateNetwork=                                            Service has no access to the "
    "host's network\n"
    "✗ RestrictAddressFamilies=~AF_(INET|INET6)                   Service may allocate Internet "
    "sockets                            0.3\n"
    "✓ User=/DynamicUser=                                         Service runs under a static "
    "non-root user identity\n"
)


@pytest.mark.parametrize(
    ("summary", "expected"),
    [
        # UTF-8 locale: arrow and the ASCII smiley systemd prints when emoji are off
        ("→ Overall exposure level for llama-server-x.service: 1.2 OK :-)", "1.2 OK"),
        # no arrow (older systemd, or the arrow dropped by a pipe)
        ("Overall exposure level for llama-server-x.service: 1.2 OK :-)", "1.2 OK"),
        # ASCII glyphs (LANG=C)
        ("-> Overall exposure level for llama-server-x.service: 1.2 OK :-)", "1.2 OK"),
        ("→ Overall exposure level for llama-server-big.service: 5.5 MEDIUM :-|", "5.5 MEDIUM"),
        ("→ Overall exposure level for llama-server-x.service: 7.9 EXPOSED :-{", "7.9 EXPOSED"),
        ("→ Overall exposure level for llama-server-x.service: 9.6 UNSAFE :-{", "9.6 UNSAFE"),
        ("→ Overall exposure level for sshd.service: 10.0 DANGEROUS :-{", "10.0 DANGEROUS"),
        ("→ Overall exposure level for x.service: 0.0 PERFECT 🙂", "0.0 PERFECT"),
        # emoji smiley
        ("→ Overall exposure level for llama-server-x.service: 2.1 OK 🙂", "2.1 OK"),
        # colour codes around the unit name, the score and the level (SYSTEMD_COLORS=1)
        (
            f"→ {ESC}[0;1;39mOverall exposure level for llama-server-x.service{ESC}[0m: "
            f"{ESC}[0;1;32m1.2 OK{ESC}[0m :-)",
            "1.2 OK",
        ),
        (
            f"{ESC}[1mOverall exposure level for llama-server-x.service{ESC}[0m: "
            f"{ESC}[38;5;185m7.9 EXPOSED{ESC}[0m :-{{",
            "7.9 EXPOSED",
        ),
        # captured from systemd 252 (Debian 12): `systemd-analyze security --offline=yes UNIT`
        # in LANG=C, in C.UTF-8, and with SYSTEMD_COLORS=1 (colours and an OSC 8 hyperlink)
        ("-> Overall exposure level for llama-server-x.service: 8.7 EXPOSED :-(", "8.7 EXPOSED"),
        ("-> Overall exposure level for bad.service: 9.6 UNSAFE :-{", "9.6 UNSAFE"),
        ("-> Overall exposure level for good.service: 0.6 SAFE :-}", "0.6 SAFE"),
        ("\u2192 Overall exposure level for bad.service: 9.6 UNSAFE \U0001f628", "9.6 UNSAFE"),
        (
            f"-> {ESC}[0;1;39mOverall exposure level for {ESC}]8;;file://vm/tmp/sa/"
            f"llama-server-x.service\x07llama-server-x.service{ESC}]8;;\x07{ESC}[0m: "
            f"{ESC}[0;1;38;5;185m8.7 EXPOSED{ESC}[0m :-(",
            "8.7 EXPOSED",
        ),
        (
            f"\u2192 {ESC}[0;1;39mOverall exposure level for {ESC}]8;;file://vm/tmp/sa/"
            f"bad.service\x07bad.service{ESC}]8;;\x07{ESC}[0m: {ESC}[0;1;31m9.6 UNSAFE{ESC}[0m "
            "\U0001f628",
            "9.6 UNSAFE",
        ),
        # a hyperlink closed with ESC \\ instead of BEL
        (
            f"Overall exposure level for {ESC}]8;;file://h/u.service{ESC}\\u.service"
            f"{ESC}]8;;{ESC}\\: 1.0 OK :-)",
            "1.0 OK",
        ),
        # a unit name with ':' in it (an escaped instance name)
        ("→ Overall exposure level for llama-server@a:b.service: 3.4 OK :-)", "3.4 OK"),
        # a score without a level word
        ("→ Overall exposure level for llama-server-x.service: 4.0", "4.0"),
    ],
)
def test_summary_forms(server_filters: ModuleType, summary: str, expected: str) -> None:
    f = server_filters.llamafleet_exposure_score
    assert f(summary) == expected
    assert f(f"{TABLE}\n{summary}\n") == expected  # as the whole output, with its table


@pytest.mark.parametrize(
    "text",
    [
        "",
        None,
        "Failed to connect to bus: No such file or directory\n",
        "Unit llama-server-x.service not found.\n",
        TABLE,
        "Overall exposure level for x.service: n/a\n",
    ],
)
def test_no_summary_is_na(server_filters: ModuleType, text: Any) -> None:
    assert server_filters.llamafleet_exposure_score(text) == "n/a"


def test_the_last_summary_counts(server_filters: ModuleType) -> None:
    text = (
        "→ Overall exposure level for a.service: 9.6 UNSAFE :-{\n"
        "→ Overall exposure level for b.service: 1.2 OK :-)\n"
    )
    assert server_filters.llamafleet_exposure_score(text) == "1.2 OK"


def test_registered_as_a_filter(server_filters: ModuleType) -> None:
    filters = server_filters.FilterModule().filters()
    assert filters["llamafleet_exposure_score"] is server_filters.llamafleet_exposure_score


def _report_task() -> dict[str, Any]:
    tasks = yaml.safe_load(SERVICE_TASKS.read_text())
    (task,) = [t for t in tasks if str(t.get("name", "")).startswith("Report the exposure score")]
    return dict(task)


def test_service_task_uses_the_filter(server_filters: ModuleType) -> None:
    from jinja2.nativetypes import NativeEnvironment

    task = _report_task()
    expr = task["ansible.builtin.set_fact"]["llama_server_security_scores"]
    assert "llamafleet_exposure_score" in expr and "regex" not in expr
    env = NativeEnvironment()
    env.filters["combine"] = lambda a, b: {**a, **b}
    env.filters["llamafleet.fleet.llamafleet_exposure_score"] = (
        server_filters.llamafleet_exposure_score
    )
    scores: dict[str, str] = {}
    for name, out in (
        ("x", f"{TABLE}\n→ Overall exposure level for llama-server-x.service: 1.2 OK :-)\n"),
        ("y", "Failed to connect to bus\n"),
    ):
        result: Any = env.from_string(expr).render(
            llama_server_security_scores=scores, _r={"_i": {"name": name}, "stdout": out}
        )
        assert isinstance(result, dict)
        scores = result
    assert scores == {"x": "1.2 OK", "y": "n/a"}
    # a result without stdout (the task was skipped on that host) reads as n/a too
    result = env.from_string(expr).render(_r={"_i": {"name": "z"}})
    assert result == {"z": "n/a"}
