#!/usr/bin/env python3
"""Read a llamafleet Prometheus (the monitoring role's) from a test: what it counted per
llama-server instance, compared with what the servers themselves said, and its alerts
(Python standard library only).

    prom-check.py snapshot --prometheus http://10.131.7.51:9090 --json before.json [--settle 30]
    prom-check.py compare before.json after.json load.json [--json summary.json]
    prom-check.py alert --prometheus URL --name LlamaServerDown --label llama_host=gpu3 \\
        --timeout 180 [--absent]
    prom-check.py query --prometheus URL 'llama_fleet:prompt_cache_hit_ratio:rate'

snapshot: per instance (llama_host, llama_instance) the counters of the mtail program (prompt
tokens received, evaluated, read from the cache, requests) and the server's own
llamacpp:prompt_tokens_total as Prometheus scraped it; with --settle, it waits until two reads
a scrape apart agree (every sample of the load has been scraped).
compare: between two snapshots, per instance, the tokens mtail counted against the server's own
counter (evaluated) and against the usage of every answer the load generator received
(testbed/pool-load.py: evaluated and read from the cache, per backend), and the cache hit ratio
both ways; exit 1 when they differ.
alert: polls the alerts API until the alert is firing for an instance with these labels (prints
the seconds it took), or with --absent checks that it stays away for the whole timeout.

It talks only to private or loopback addresses (test hosts) and stops at --timeout.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

MTAIL = {
    "received": "llama_server_prompt_tokens_received_total",
    "evaluated": "llama_server_prompt_tokens_evaluated_total",
    "cached": "llama_server_prompt_tokens_cached_total",
    "requests": "llama_server_prompt_requests_total",
}
SERVER = {"server_evaluated": 'llamacpp:prompt_tokens_total{job="llama_server"}'}
MAX_TIMEOUT = 1800.0


def _check_url(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SystemExit(f"prom-check: {url!r} is not an http(s) URL")
    try:
        ip = ipaddress.ip_address(parts.hostname)
    except ValueError:
        raise SystemExit(f"prom-check: {url!r}: give a test host's IP address") from None
    if not (ip.is_private or ip.is_loopback):
        raise SystemExit(f"prom-check: {url!r} is not a test host (private or loopback)")
    return url.rstrip("/")


def _get(url: str, path: str, params: dict[str, str] | None = None) -> Any:
    full = f"{url}{path}" + ("?" + urllib.parse.urlencode(params) if params else "")
    with urllib.request.urlopen(full, timeout=15) as resp:
        data = json.loads(resp.read())
    if data.get("status") != "success":
        raise SystemExit(f"prom-check: {full}: {data}")
    return data["data"]


def query(url: str, expr: str) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = _get(url, "/api/v1/query", {"query": expr})["result"]
    return result


def _key(metric: dict[str, str]) -> str:
    return f"{metric.get('llama_host', '?')}/{metric.get('llama_instance', '?')}"


def read(url: str) -> dict[str, dict[str, float]]:
    """Per instance ("host/instance"), every counter of MTAIL and SERVER (absent: not there)."""
    out: dict[str, dict[str, float]] = {}
    for name, expr in {**MTAIL, **SERVER}.items():
        # sum over anything else (an instance label of the target): one value per instance
        for sample in query(url, f"sum by (llama_host, llama_instance) ({expr})"):
            out.setdefault(_key(sample["metric"]), {})[name] = float(sample["value"][1])
    return out


def cmd_snapshot(args: argparse.Namespace) -> int:
    url = _check_url(args.prometheus)
    settle = min(args.settle, MAX_TIMEOUT)
    deadline = time.monotonic() + settle
    snap = read(url)
    while settle > 0:
        time.sleep(args.interval)
        again = read(url)
        if again == snap:
            break
        snap = again
        if time.monotonic() > deadline:
            raise SystemExit(f"prom-check: the counters still changed after {settle:.0f} s")
    data = {"time": time.time(), "instances": snap}
    Path(args.json).write_text(json.dumps(data, indent=1))
    for key, values in sorted(snap.items()):
        print(key, " ".join(f"{k}={v:g}" for k, v in sorted(values.items())))
    return 0


def _ratio(cached: float, evaluated: float) -> float | None:
    total = cached + evaluated
    return round(cached / total, 4) if total else None


def compare(
    before: dict[str, Any], after: dict[str, Any], load: dict[str, Any], mtail: bool = True
) -> dict[str, Any]:
    """Per instance: the deltas Prometheus saw and what the load generator was told. The load's
    backends are inventory names (X-Llamafleet-Backend); an instance is "host/instance"."""
    tokens: dict[str, Any] = load["summary"]["tokens"]
    rows: list[dict[str, Any]] = []
    problems: list[str] = []
    for key in sorted(set(before["instances"]) | set(after["instances"])):
        b = before["instances"].get(key, {})
        a = after["instances"].get(key, {})
        d = {name: a.get(name, 0.0) - b.get(name, 0.0) for name in [*MTAIL, *SERVER]}
        host = key.split("/", 1)[0]
        told = tokens.get(host, {"cached": 0, "evaluated": 0})
        row = {
            "instance": key,
            **{k: int(v) for k, v in d.items()},
            "load_cached": int(told["cached"]),
            "load_evaluated": int(told["evaluated"]),
            "ratio_prometheus": _ratio(d["cached"], d["evaluated"]),
            "ratio_load": _ratio(told["cached"], told["evaluated"]),
        }
        rows.append(row)
        if d["server_evaluated"] != told["evaluated"]:
            problems.append(
                f"{key}: the server's own llamacpp:prompt_tokens_total grew by "
                f"{d['server_evaluated']:g} in Prometheus, the answers said {told['evaluated']} "
                "evaluated"
            )
        if not mtail:
            continue
        if d["evaluated"] != d["server_evaluated"]:
            problems.append(
                f"{key}: mtail counted {d['evaluated']:g} prompt tokens evaluated, the server's "
                f"own llamacpp:prompt_tokens_total grew by {d['server_evaluated']:g}"
            )
        if d["evaluated"] != told["evaluated"] or d["cached"] != told["cached"]:
            problems.append(
                f"{key}: Prometheus has {d['cached']:g} cached / {d['evaluated']:g} evaluated, "
                f"the answers said {told['cached']} / {told['evaluated']}"
            )
        if d["received"] != d["cached"] + d["evaluated"]:
            problems.append(f"{key}: received != cached + evaluated ({d})")
    total = {
        name: sum(r[name] for r in rows)
        for name in ("cached", "evaluated", "load_cached", "load_evaluated")
    }
    return {
        "instances": rows,
        "ratio_prometheus": _ratio(total["cached"], total["evaluated"]),
        "ratio_load": _ratio(total["load_cached"], total["load_evaluated"]),
        "problems": problems,
    }


def cmd_compare(args: argparse.Namespace) -> int:
    load = [json.loads(Path(p).read_text()) for p in (args.before, args.after, args.load)]
    out = compare(load[0], load[1], load[2], mtail=not args.without_mtail)
    print(
        f"{'instance':<22} {'received':>9} {'evaluated':>9} {'server':>9} {'cached':>9} "
        f"{'answers':>17} {'ratio':>7} {'answers':>7}"
    )
    for r in out["instances"]:
        told = f"{r['load_cached']}/{r['load_evaluated']}"
        print(
            f"{r['instance']:<22} {r['received']:>9} {r['evaluated']:>9} "
            f"{r['server_evaluated']:>9} {r['cached']:>9} {told:>17} "
            f"{_pct(r['ratio_prometheus']):>7} {_pct(r['ratio_load']):>7}"
        )
    print(
        f"cache hit ratio: Prometheus {_pct(out['ratio_prometheus'])}, "
        f"the answers {_pct(out['ratio_load'])}"
    )
    for p in out["problems"]:
        print("  differs:", p)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 1 if out["problems"] else 0


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f} %"


def _matches(alert: dict[str, Any], name: str, labels: dict[str, str]) -> bool:
    have = alert.get("labels", {})
    return have.get("alertname") == name and all(have.get(k) == v for k, v in labels.items())


def cmd_alert(args: argparse.Namespace) -> int:
    url = _check_url(args.prometheus)
    labels = dict(item.split("=", 1) for item in args.label)
    timeout = min(args.timeout, MAX_TIMEOUT)
    t0 = time.monotonic()
    seen = "inactive"
    while time.monotonic() - t0 < timeout:
        alerts = _get(url, "/api/v1/alerts")["alerts"]
        states = {a["state"] for a in alerts if _matches(a, args.name, labels)}
        seen = "firing" if "firing" in states else ("pending" if states else "inactive")
        if seen == "firing":
            took = time.monotonic() - t0
            if args.absent:
                print(f"{args.name} {labels} fired after {took:.0f} s; it must not")
                return 1
            print(f"{args.name} {labels} firing after {took:.0f} s")
            return 0
        time.sleep(args.interval)
    if args.absent:
        print(f"{args.name} {labels} not firing for {timeout:.0f} s (last state: {seen})")
        return 0
    print(f"{args.name} {labels} not firing after {timeout:.0f} s (last state: {seen})")
    return 1


def cmd_query(args: argparse.Namespace) -> int:
    url = _check_url(args.prometheus)
    for sample in query(url, args.expr):
        print(json.dumps(sample["metric"], sort_keys=True), sample["value"][1])
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    snap = sub.add_parser("snapshot", help="the counters of every instance")
    snap.add_argument("--prometheus", required=True)
    snap.add_argument("--json", required=True)
    snap.add_argument("--settle", type=float, default=0.0, help="wait until they stop changing")
    snap.add_argument("--interval", type=float, default=6.0, help="seconds between two reads")
    snap.set_defaults(func=cmd_snapshot)
    cmp_ = sub.add_parser("compare", help="two snapshots against a load run")
    cmp_.add_argument("before")
    cmp_.add_argument("after")
    cmp_.add_argument("load", help="the JSON testbed/pool-load.py wrote")
    cmp_.add_argument("--json", default="")
    cmp_.add_argument(
        "--without-mtail",
        action="store_true",
        help="compare only the server's own counter with the answers",
    )
    cmp_.set_defaults(func=cmd_compare)
    al = sub.add_parser("alert", help="wait for an alert (or check it stays away)")
    al.add_argument("--prometheus", required=True)
    al.add_argument("--name", required=True)
    al.add_argument("--label", action="append", default=[], help="NAME=VALUE (repeatable)")
    al.add_argument("--timeout", type=float, default=180.0)
    al.add_argument("--interval", type=float, default=2.0)
    al.add_argument("--absent", action="store_true")
    al.set_defaults(func=cmd_alert)
    q = sub.add_parser("query", help="an instant query")
    q.add_argument("--prometheus", required=True)
    q.add_argument("expr")
    q.set_defaults(func=cmd_query)
    args = p.parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
