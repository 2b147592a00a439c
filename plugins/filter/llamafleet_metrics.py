"""Filters for the audit's Prometheus part (audit.yml, when a monitoring host exists): the PromQL
queries it sends to the monitoring role's Prometheus (`llamafleet_metrics_queries`, at
`llamafleet_prometheus_url`) and the
report rows made of their answers (`llamafleet_audit_metrics`): per llama-server instance, over
the window (default 24 h), the prompt tokens received, the share read from the prompt cache, the
prompt and generation speeds, and whether the instance is below the cache-ratio threshold while
it had traffic."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any, NoReturn

_WINDOW = re.compile(r"[0-9]+[smhdwy]\Z")
_BY = "sum by (llama_host, llama_instance)"


def _fail(msg: str) -> NoReturn:
    from ansible.errors import AnsibleFilterError

    raise AnsibleFilterError(msg)


def queries(window: Any) -> dict[str, str]:
    """The PromQL of each column, over ``window`` (a Prometheus duration such as 24h)."""
    w = str(window).strip()
    if not _WINDOW.match(w):
        _fail(f"audit_metrics_window: {window!r} is not a Prometheus duration such as 24h or 7d")

    def inc(metric: str) -> str:
        return f"{_BY} (increase({metric}[{w}]))"

    srv = '{job="llama_server"}'
    return {
        "received": inc("llama_server_prompt_tokens_received_total"),
        "cached": inc("llama_server_prompt_tokens_cached_total"),
        "evaluated": inc("llama_server_prompt_tokens_evaluated_total"),
        "prompt_tokens": inc(f"llamacpp:prompt_tokens_total{srv}"),
        "prompt_seconds": inc(f"llamacpp:prompt_seconds_total{srv}"),
        "generated_tokens": inc(f"llamacpp:tokens_predicted_total{srv}"),
        "generated_seconds": inc(f"llamacpp:tokens_predicted_seconds_total{srv}"),
        "up": f"{_BY} (up{srv})",
    }


def prometheus_url(listen: Any) -> str:
    """Where the audit reaches Prometheus on its own host, from monitoring_listen (ADDRESS:PORT):
    the address itself, or loopback for a wildcard."""
    text = str(listen).strip()
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 1 <= int(port) <= 65535:
        _fail(f"monitoring_listen: {listen!r} is not ADDRESS:PORT (such as 127.0.0.1:9090)")
    host = host.strip("[]")
    if host in ("", "0.0.0.0", "*"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _rate(num: float | None, den: float | None) -> float | None:
    if num is None or not den:
        return None
    return round(num / den, 2)


def audit_metrics(answers: Iterable[Mapping[str, Any]], threshold: Any) -> dict[str, Any]:
    """Rows from the uri results of the queries (each loop item ``_q`` = {name, expr}, ``json``
    the API's answer). An instance is ``below`` when it received prompt tokens and read a share
    under ``threshold`` from its cache. ``errors`` lists the queries that got no answer."""
    limit = _number(threshold)
    if limit is None or not 0 <= limit <= 1:
        _fail(f"monitoring_cache_ratio_threshold: {threshold!r} is not a share between 0 and 1")
    values: dict[tuple[str, str], dict[str, float]] = {}
    errors: list[str] = []
    for answer in answers:
        name = str((answer.get("_q") or {}).get("name", "?"))
        data = answer.get("json") or {}
        if answer.get("status") != 200 or data.get("status") != "success":
            errors.append(f"{name}: {answer.get('msg') or data.get('error') or 'no answer'}")
            continue
        for sample in data.get("data", {}).get("result", []):
            metric = sample.get("metric", {})
            key = (str(metric.get("llama_host", "?")), str(metric.get("llama_instance", "?")))
            number = _number((sample.get("value") or [None, None])[1])
            if number is not None:
                values.setdefault(key, {})[name] = number
    rows: list[dict[str, Any]] = []
    for (host, instance), v in sorted(values.items()):
        received = v.get("received")
        cached = v.get("cached")
        ratio = round(cached / received, 4) if cached is not None and received else None
        rows.append(
            {
                "host": host,
                "instance": instance,
                "up": v.get("up") == 1,
                "received": round(received) if received is not None else None,
                "evaluated": round(v["evaluated"]) if "evaluated" in v else None,
                "cache_ratio": ratio,
                "prompt_tps": _rate(v.get("prompt_tokens"), v.get("prompt_seconds")),
                "generation_tps": _rate(v.get("generated_tokens"), v.get("generated_seconds")),
                "below": ratio is not None and ratio < limit,
            }
        )
    return {"instances": rows, "threshold": limit, "errors": errors}


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "llamafleet_metrics_queries": queries,
            "llamafleet_prometheus_url": prometheus_url,
            "llamafleet_audit_metrics": audit_metrics,
        }
