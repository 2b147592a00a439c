"""The audit's Prometheus part (plugins/filter/llamafleet_metrics.py): every query it
sends is evaluated by the real promtool (Debian's 2.42, as the monitoring role installs it) on
24 hours of series shaped like the monitoring role's (mtail's counters, llama-server's own,
up), and the report rows are made from the answers as the Prometheus HTTP API returns them."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from conftest import REPO, load_ansible_plugin, plugin_path, tool

PLUGIN = plugin_path("filter", "llamafleet_metrics")


@pytest.fixture(scope="module")
def metrics() -> ModuleType:
    return load_ansible_plugin(PLUGIN)


def _series(name: str, host: str, values: str, job: str) -> dict[str, str]:
    return {
        "series": f'{name}{{llama_host="{host}",llama_instance="main",job="{job}"}}',
        "values": values,
    }


def test_every_query_on_24_hours_of_series(metrics: ModuleType, tmp_path: Path) -> None:
    """gpu1 reads 90 % of 1000 prompt tokens an hour from its cache, gpu2 10 %; llama-server's
    own counters give 400 prompt tokens/s and 20 generated tokens/s on gpu1; gpu2 is down now."""
    q = metrics.queries("24h")
    series = [
        _series("llama_server_prompt_tokens_received_total", "gpu1", "0+1000x24", "llama_mtail"),
        _series("llama_server_prompt_tokens_cached_total", "gpu1", "0+900x24", "llama_mtail"),
        _series("llama_server_prompt_tokens_evaluated_total", "gpu1", "0+100x24", "llama_mtail"),
        _series("llama_server_prompt_tokens_received_total", "gpu2", "0+1000x24", "llama_mtail"),
        _series("llama_server_prompt_tokens_cached_total", "gpu2", "0+100x24", "llama_mtail"),
        _series("llamacpp:prompt_tokens_total", "gpu1", "0+100x24", "llama_server"),
        _series("llamacpp:prompt_seconds_total", "gpu1", "0+0.25x24", "llama_server"),
        _series("llamacpp:tokens_predicted_total", "gpu1", "0+400x24", "llama_server"),
        _series("llamacpp:tokens_predicted_seconds_total", "gpu1", "0+20x24", "llama_server"),
        _series("up", "gpu1", "1x24", "llama_server"),
        _series("up", "gpu2", "1x23 0", "llama_server"),
    ]
    want = {
        "received": {"gpu1": 24000, "gpu2": 24000},
        "cached": {"gpu1": 21600, "gpu2": 2400},
        "evaluated": {"gpu1": 2400},
        "prompt_tokens": {"gpu1": 2400},
        "prompt_seconds": {"gpu1": 6},
        "generated_tokens": {"gpu1": 9600},
        "generated_seconds": {"gpu1": 480},
        "up": {"gpu1": 1, "gpu2": 0},
    }
    assert set(want) == set(q)
    tests = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1h",
                "input_series": series,
                "promql_expr_test": [
                    {
                        "expr": q[name],
                        "eval_time": "24h",
                        "exp_samples": [
                            {
                                "labels": f'{{llama_host="{h}",llama_instance="main"}}',
                                "value": v,
                            }
                            for h, v in sorted(want[name].items())
                        ],
                    }
                    for name in sorted(q)
                ],
            }
        ],
    }
    path = tmp_path / "queries-test.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    done = subprocess.run(
        [tool("promtool"), "test", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # the same answers, as the HTTP API would give them to the audit's uri task
    answers = [
        {
            "_q": {"name": name, "expr": q[name]},
            "status": 200,
            "json": {
                "status": "success",
                "data": {
                    "result": [
                        {
                            "metric": {"llama_host": h, "llama_instance": "main"},
                            "value": [0, str(v)],
                        }
                        for h, v in want[name].items()
                    ]
                },
            },
        }
        for name in q
    ]
    report = metrics.audit_metrics(answers, 0.5)
    gpu1, gpu2 = report["instances"]
    assert gpu1 == {
        "host": "gpu1",
        "instance": "main",
        "up": True,
        "received": 24000,
        "evaluated": 2400,
        "cache_ratio": 0.9,
        "prompt_tps": 400.0,
        "generation_tps": 20.0,
        "below": False,
    }
    assert gpu2["cache_ratio"] == 0.1 and gpu2["below"] and not gpu2["up"]
    assert gpu2["prompt_tps"] is None and report["errors"] == []


def test_an_instance_without_traffic_is_not_below(metrics: ModuleType) -> None:
    answers: list[dict[str, Any]] = [
        {
            "_q": {"name": "received"},
            "status": 200,
            "json": {
                "status": "success",
                "data": {
                    "result": [
                        {
                            "metric": {"llama_host": "gpu3", "llama_instance": "main"},
                            "value": [0, "0"],
                        }
                    ]
                },
            },
        },
        {"_q": {"name": "cached"}, "status": -1, "msg": "Connection refused"},
    ]
    report = metrics.audit_metrics(answers, 0.5)
    assert report["instances"][0]["cache_ratio"] is None
    assert not report["instances"][0]["below"]
    assert report["errors"] == ["cached: Connection refused"]


@pytest.mark.parametrize("window", ["24 h", "1d;drop", "", "24"])
def test_a_bad_window_is_refused(metrics: ModuleType, window: str) -> None:
    from ansible.errors import AnsibleFilterError

    with pytest.raises(AnsibleFilterError, match="audit_metrics_window"):
        metrics.queries(window)


def test_a_bad_threshold_is_refused(metrics: ModuleType) -> None:
    from ansible.errors import AnsibleFilterError

    with pytest.raises(AnsibleFilterError, match="monitoring_cache_ratio_threshold"):
        metrics.audit_metrics([], "1.5")


@pytest.mark.parametrize(
    ("listen", "url"),
    [
        ("127.0.0.1:9090", "http://127.0.0.1:9090"),
        ("0.0.0.0:9090", "http://127.0.0.1:9090"),
        ("[::]:9090", "http://[::1]:9090"),
        ("[fd00::5]:9091", "http://[fd00::5]:9091"),
        ("10.0.0.7:9090", "http://10.0.0.7:9090"),
    ],
)
def test_where_the_audit_reaches_prometheus(metrics: ModuleType, listen: str, url: str) -> None:
    assert metrics.prometheus_url(listen) == url


def test_a_bad_listen_address_is_refused(metrics: ModuleType) -> None:
    from ansible.errors import AnsibleFilterError

    for bad in ("9090", "127.0.0.1", "127.0.0.1:http", "127.0.0.1:70000"):
        with pytest.raises(AnsibleFilterError, match="monitoring_listen"):
            metrics.prometheus_url(bad)


def test_the_report_shows_the_cache_and_marks_an_instance_below(metrics: ModuleType) -> None:
    jinja2 = pytest.importorskip("jinja2")
    template_path = REPO / "playbooks" / "templates" / "fleet-audit.md.j2"
    env = jinja2.Environment(trim_blocks=True, undefined=jinja2.StrictUndefined)
    answers = [
        {
            "_q": {"name": name},
            "status": 200,
            "json": {
                "status": "success",
                "data": {
                    "result": [
                        {"metric": {"llama_host": h, "llama_instance": "main"}, "value": [0, v]}
                        for h, v in values
                    ]
                },
            },
        }
        for name, values in {
            "received": [("gpu1", "1000"), ("gpu2", "1000")],
            "cached": [("gpu1", "950"), ("gpu2", "12")],
            "up": [("gpu1", "1"), ("gpu2", "1")],
        }.items()
    ]
    report: dict[str, Any] = {"hosts": [], "unreached": [], "pools": []}
    report["metrics"] = [
        {**metrics.audit_metrics(answers, 0.5), "host": "mon1", "window": "24h", "prometheus": ""}
    ]
    text = env.from_string(template_path.read_text()).render(
        _audit_report=report, _audit_server_group=[]
    )
    lines = text.splitlines()
    assert "## Prompt cache, last 24h (Prometheus on mon1)" in lines
    assert "| gpu1 | main | yes | 1000 | 95.0 % | - | - |" in lines
    assert "| gpu2 | main | yes | 1000 | **1.2 % (below)** | - | - |" in lines
