#!/usr/bin/python
# Apache-2.0
"""Ansible module: wait until a llama-server instance has no request in flight (its own view,
after the pool stopped sending it new ones)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: llama_pool_backend_idle
short_description: Wait until a llama-server instance processes no request
description:
  - Runs on the llama-server host. Reads C(/metrics) (C(llamacpp:requests_processing) and
    C(llamacpp:requests_deferred), served with C(--metrics)), else C(/slots) (no slot
    C(is_processing)), with the instance's own key read from O(key_file) on the host (the key never
    passes through Ansible), until nothing is processed or queued.
  - An instance that does not answer (stopped, restarting) has nothing in flight (C(serving) false).
  - Fails after O(timeout) seconds with the counts, or at once when neither C(/metrics) nor
    C(/slots) is served or the key is refused.
  - Changes nothing; in check mode it returns at once.
options:
  url:
    type: str
    required: true
    description: "The instance's base URL (https://127.0.0.1:8080)."
  key_file:
    type: path
    description:
      - File whose first line is a key the instance accepts (the llama_server role's instance key).
  ca_path: {type: path, description: CA certificate an https URL's certificate must be signed by.}
  timeout: {type: int, default: 900, description: Seconds to wait in all.}
  interval: {type: float, default: 1.0, description: Seconds between two looks.}
author: llamafleet
extends_documentation_fragment:
  - llamafleet.fleet.attributes.check
"""

RETURN = r"""
serving: {description: Whether the instance answered.}
source: {description: "What was read: metrics, slots (or none when it did not answer)."}
processing: {description: Requests being processed at the last look.}
deferred: {description: Requests waiting for a slot at the last look.}
waited: {description: Seconds waited.}
"""

# imports after the module's documentation (Ansible's layout)
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import time  # noqa: E402
import urllib.error  # noqa: E402
from typing import Any  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.llamafleet.fleet.plugins.module_utils.instance_http import (  # noqa: E402
    UrlsError,
    open_instance,
)

_METRIC = re.compile(r"^llamacpp:(requests_processing|requests_deferred)\s+([0-9.eE+-]+)\s*$", re.M)


class NotServedError(Exception):
    """The endpoint is not served by this instance (HTTP 501, or 404 on older builds)."""


class RefusedError(Exception):
    """The key was refused (HTTP 401/403)."""


def read_key(path: str | None) -> str:
    if not path:
        return ""
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                return line.strip()
    return ""


def parse_metrics(text: str) -> tuple[int, int]:
    """(processing, deferred) from llama-server's Prometheus text."""
    found = {name: int(float(value)) for name, value in _METRIC.findall(text)}
    if "requests_processing" not in found:
        raise NotServedError("no llamacpp:requests_processing in /metrics")
    return found["requests_processing"], found.get("requests_deferred", 0)


def parse_slots(text: str) -> tuple[int, int]:
    """(processing, 0) from /slots: the slots whose is_processing is true."""
    slots = json.loads(text)
    if not isinstance(slots, list):
        raise NotServedError("/slots did not answer a list")
    return sum(1 for s in slots if isinstance(s, dict) and s.get("is_processing")), 0


def fetch(url: str, key: str, ca_path: str | None) -> str:
    """The body of url (at most 4 MiB); the key goes to the instance only (open_instance)."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        with open_instance(url, ca_path, timeout=10, headers=headers) as r:  # the role's URL
            body: bytes = r.read(4 * 1024 * 1024)
            return body.decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        if e.code in (404, 501):
            raise NotServedError(f"{url} answered {e.code}") from None
        if e.code in (401, 403):
            raise RefusedError(f"{url} answered {e.code}: the key was refused") from None
        raise


def look(base: str, key: str, ca_path: str | None) -> tuple[str, int, int]:
    """(source, processing, deferred): /metrics, else /slots."""
    try:
        return ("metrics", *parse_metrics(fetch(base + "/metrics", key, ca_path)))
    except NotServedError:
        pass
    try:
        return ("slots", *parse_slots(fetch(base + "/slots", key, ca_path)))
    except NotServedError:
        raise NotServedError(
            f"{base} serves neither /metrics nor /slots: turn on metrics (the llama_server "
            "role's default args have metrics: true) so a drain can see its requests finish"
        ) from None


def _not_serving(base: str, waited: float, why: str) -> dict[str, Any]:
    return {
        "changed": False,
        "serving": False,
        "source": "none",
        "processing": 0,
        "deferred": 0,
        "waited": round(waited, 1),
        "msg": f"{base}: {why}: nothing in flight",
    }


def run(module: AnsibleModule) -> dict[str, Any]:
    p = module.params
    if module.check_mode:
        return {"changed": False, "serving": None, "source": "none", "waited": 0}
    base = p["url"].rstrip("/")
    ca_path = None
    if base.startswith("https://"):
        if p["ca_path"] and not os.path.exists(p["ca_path"]):
            # the llama_server role writes the CA with the instance: never set up, nothing in flight
            return _not_serving(base, 0.0, f"its CA file {p['ca_path']} does not exist yet")
        ca_path = p["ca_path"] or None
    unread = ""
    try:
        key = read_key(p["key_file"])
    except OSError as e:
        # an instance never set up has no key file, and answers nothing either
        key, unread = "", f" (its key file {p['key_file']} could not be read: {e})"
    start = time.monotonic()
    while True:
        waited = time.monotonic() - start
        try:
            source, processing, deferred = look(base, key, ca_path)
        except (NotServedError, RefusedError) as e:
            module.fail_json(msg=str(e) + unread)
        except (urllib.error.URLError, UrlsError, OSError) as e:
            # not answering: stopped or restarting, so nothing is in flight
            return _not_serving(base, waited, f"it does not answer ({getattr(e, 'reason', e)})")
        if processing == 0 and deferred == 0:
            return {
                "changed": False,
                "serving": True,
                "source": source,
                "processing": 0,
                "deferred": 0,
                "waited": round(waited, 1),
            }
        if waited >= p["timeout"]:
            module.fail_json(
                msg=(
                    f"{base}: llama-server still processes {processing} request(s) with "
                    f"{deferred} waiting (/{source}) after {waited:.0f} s; the pool sends it "
                    "nothing new (drain) but requests sent to it directly, or a client that "
                    "gave up, keep it busy"
                ),
                serving=True,
                source=source,
                processing=processing,
                deferred=deferred,
                waited=round(waited, 1),
            )
        time.sleep(p["interval"])


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "key_file": {"type": "path", "no_log": False},
            "ca_path": {"type": "path"},
            "timeout": {"type": "int", "default": 900},
            "interval": {"type": "float", "default": 1.0},
        },
        supports_check_mode=True,
    )
    module.exit_json(**run(module))


if __name__ == "__main__":
    main()
