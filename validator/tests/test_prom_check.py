"""testbed/prom-check.py, which the pool scenario uses to compare what Prometheus counted with
what the servers said: its comparison (synthetic snapshots and a load generator's summary; the
scenario runs it against the real Prometheus, mtail and llama-servers) and its address bound."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "testbed" / "prom-check.py"


@pytest.fixture(scope="module")
def prom() -> ModuleType:
    spec = importlib.util.spec_from_file_location("prom_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _snap(**per_host: tuple[float, float, float]) -> dict[str, Any]:
    """host=(evaluated by mtail, cached by mtail, the server's own evaluated counter)."""
    return {
        "instances": {
            f"{host}/main": {
                "received": ev + ca,
                "evaluated": ev,
                "cached": ca,
                "requests": 1.0,
                "server_evaluated": srv,
            }
            for host, (ev, ca, srv) in per_host.items()
        }
    }


def _load(**per_host: tuple[int, int]) -> dict[str, Any]:
    return {
        "summary": {"tokens": {h: {"cached": c, "evaluated": e} for h, (e, c) in per_host.items()}}
    }


def test_counters_that_agree(prom: ModuleType) -> None:
    before = _snap(gpu1=(100, 0, 1100), gpu2=(50, 10, 50))
    after = _snap(gpu1=(300, 900, 1300), gpu2=(50, 10, 50))
    out = prom.compare(before, after, _load(gpu1=(200, 900)))
    assert out["problems"] == []
    assert out["ratio_prometheus"] == out["ratio_load"] == round(900 / 1100, 4)
    row = next(r for r in out["instances"] if r["instance"] == "gpu1/main")
    assert (row["evaluated"], row["server_evaluated"], row["cached"]) == (200, 200, 900)


def test_counters_that_differ_are_named(prom: ModuleType) -> None:
    before = _snap(gpu1=(100, 0, 100))
    # mtail missed 5 evaluated tokens; the answers said 905 were read from the cache
    after = _snap(gpu1=(295, 900, 300))
    out = prom.compare(before, after, _load(gpu1=(200, 905)))
    assert any("mtail counted 195" in p and "grew by 200" in p for p in out["problems"])
    assert any("the answers said 905 / 200" in p for p in out["problems"])
    # without mtail: only the server's own counter against the answers (here they agree)
    assert prom.compare(before, after, _load(gpu1=(200, 905)), mtail=False)["problems"] == []
    off = prom.compare(before, after, _load(gpu1=(210, 905)), mtail=False)["problems"]
    assert off == [
        "gpu1/main: the server's own llamacpp:prompt_tokens_total grew by 200 in Prometheus, "
        "the answers said 210 evaluated"
    ]


@pytest.mark.parametrize("url", ["http://8.8.8.8:9090", "http://prometheus.example.org:9090"])
def test_only_test_hosts(prom: ModuleType, url: str) -> None:
    with pytest.raises(SystemExit):
        prom._check_url(url)
    assert prom._check_url("http://10.131.7.51:9090/") == "http://10.131.7.51:9090"
