"""The fleet audit's pools (playbooks/audit.yml, filter llamafleet_audit_pool): each pool's URL
and every backend's state as HAProxy's runtime API reports it through the read-only
llama_pool_server module; a backend that does not take requests is marked in the Markdown report
and is what audit_fail_on fails on."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from conftest import load_ansible_plugin, plugin_path

PLAYBOOKS = Path(__file__).resolve().parents[2] / "playbooks"
FLEET = plugin_path("filter", "llamafleet_fleet")
TEMPLATE = PLAYBOOKS / "templates" / "fleet-audit.md.j2"

pytestmark = pytest.mark.skipif(
    not FLEET.is_file(), reason="run from a checkout of the whole repository"
)


@pytest.fixture(scope="module")
def fleet() -> ModuleType:
    return load_ansible_plugin(FLEET)


def _backend(name: str, address: str) -> dict[str, Any]:
    return {"name": name, "address": address, "port": 8080, "tls": True}


def _state(name: str, **look: Any) -> dict[str, Any]:
    """One result of the llama_pool_server loop (read-only: no state, no wait)."""
    return {"_b": _backend(name, "?"), "changed": False, "failed": False, "found": True, **look}


def _seen(**more: Any) -> dict[str, Any]:
    seen = {
        "host": "pool1",
        "bind": "0.0.0.0",
        "port": 8443,
        "tls": True,
        "ansible_host": "10.0.0.5",
        "backends": [
            _backend("gpu1", "10.0.0.11"),
            _backend("gpu2", "10.0.0.12"),
            _backend("gpu3", "10.0.0.13"),
            _backend("gpu4", "10.0.0.14"),
        ],
        "states": {
            "results": [
                _state("gpu1", status="UP", admin="ready", scur=2, check="Layer7 check passed"),
                _state("gpu2", status="DRAIN", admin="drain", scur=1, check="Layer7 check passed"),
                _state(
                    "gpu3", status="DOWN", admin="ready", scur=0, check="Layer4 connection problem"
                ),
                {
                    "_b": _backend("gpu4", "?"),
                    "changed": False,
                    "failed": False,
                    "found": False,
                    "msg": "llama/gpu4 is not in the pool",
                },
            ]
        },
        "health": {"status": 200, "json": {"status": "ok"}},
    }
    seen.update(more)
    return seen


def test_each_backend_as_haproxy_sees_it(fleet: ModuleType) -> None:
    pool = fleet.llamafleet_audit_pool(_seen())
    assert pool["host"] == "pool1" and pool["health"] == "ok"
    assert pool["url"] == "https://10.0.0.5:8443"
    rows = [(b["name"], b["status"], b["admin"], b["sessions"], b["up"]) for b in pool["backends"]]
    assert rows == [
        ("gpu1", "UP", "ready", 2, True),
        ("gpu2", "DRAIN", "drain", 1, False),
        ("gpu3", "DOWN", "ready", 0, False),
        ("gpu4", "not in HAProxy", "-", 0, False),
    ]
    assert pool["backends"][0]["address"] == "10.0.0.11:8080"
    assert pool["backends"][2]["check"] == "Layer4 connection problem"
    assert pool["backends"][3]["check"] == "llama/gpu4 is not in the pool"
    assert pool["not_up"] == ["gpu2", "gpu3", "gpu4"]


@pytest.mark.parametrize(
    ("more", "url"),
    [
        ({"bind": "10.0.0.6", "port": 443}, "https://10.0.0.6:443"),
        ({"bind": "::", "ansible_host": "fd00::5"}, "https://[fd00::5]:8443"),
        ({"bind": "127.0.0.1", "tls": False}, "http://127.0.0.1:8443"),
    ],
)
def test_the_pool_url(fleet: ModuleType, more: dict[str, Any], url: str) -> None:
    assert fleet.llamafleet_audit_pool(_seen(**more))["url"] == url


def test_a_pool_that_does_not_answer(fleet: ModuleType) -> None:
    """HAProxy not running: the module's error for each backend (failed_when false), the
    pool's /health without an answer."""
    states = {
        "results": [
            {"_b": _backend("gpu1", "?"), "failed": False, "msg": "HAProxy runtime API: refused"}
        ]
    }
    pool = fleet.llamafleet_audit_pool(
        _seen(backends=[_backend("gpu1", "10.0.0.11")], states=states, health={"status": -1})
    )
    assert pool["health"] == "no answer"
    assert pool["backends"] == [
        {
            "name": "gpu1",
            "address": "10.0.0.11:8080",
            "status": "unknown",
            "admin": "-",
            "sessions": 0,
            "check": "HAProxy runtime API: refused",
            "up": False,
        }
    ]


def _report(fleet: ModuleType) -> dict[str, Any]:
    hostvars = {
        "pool1": {"audit_pool_report": fleet.llamafleet_audit_pool(_seen())},
        "srv-1": {"audit_host_report": {"host": "srv-1", "instances": [], "clients": []}},
    }
    report: dict[str, Any] = fleet.llamafleet_audit_report(
        hostvars, ["srv-1"], [], ["pool1", "pool2"]
    )
    return report


def test_the_report_lists_the_pools(fleet: ModuleType) -> None:
    report = _report(fleet)
    assert [p["host"] for p in report["pools"]] == ["pool1"]
    assert report["unreached"] == ["pool2"]
    # without pools (an inventory without llama_pools): none, as before
    assert fleet.llamafleet_audit_report({}, [], [])["pools"] == []


def test_audit_fail_on_a_backend_not_up(fleet: ModuleType) -> None:
    report = _report(fleet)
    assert fleet.llamafleet_audit_failing(report, "error") == [
        "pool pool1 backend gpu2: DRAIN, admin drain, check Layer7 check passed",
        "pool pool1 backend gpu3: DOWN, admin ready, check Layer4 connection problem",
        "pool pool1 backend gpu4: not in HAProxy, admin -, check llama/gpu4 is not in the pool",
        "pool2: not reached",
    ]
    report["pools"][0]["health"] = "503"
    assert "pool pool1 https://10.0.0.5:8443: /health 503" in fleet.llamafleet_audit_failing(
        report, "error"
    )
    assert fleet.llamafleet_audit_failing(report, "none") == []


def test_the_markdown_report_marks_a_backend_not_up(fleet: ModuleType) -> None:
    jinja2 = pytest.importorskip("jinja2")
    env = jinja2.Environment(trim_blocks=True, undefined=jinja2.StrictUndefined)
    report = {"hosts": [], "pools": _report(fleet)["pools"], "unreached": []}
    text = env.from_string(TEMPLATE.read_text()).render(
        _audit_report=report, _audit_server_group=[]
    )
    lines = text.splitlines()
    assert "## Pools" in lines
    assert (
        "| pool1 | https://10.0.0.5:8443 | ok | gpu1 (10.0.0.11:8080) | UP | ready | 2 | "
        "Layer7 check passed |"
    ) in lines
    assert (
        "| pool1 | https://10.0.0.5:8443 | ok | gpu3 (10.0.0.13:8080) | **DOWN (not UP)** | ready "
        "| 0 | Layer4 connection problem |"
    ) in lines
    assert not [x for x in lines if "{%" in x or "{{" in x]
    # no pool: no section
    plain = env.from_string(TEMPLATE.read_text()).render(
        _audit_report={"hosts": [], "unreached": []}, _audit_server_group=[]
    )
    assert "## Pools" not in plain
