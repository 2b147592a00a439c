#!/usr/bin/python
# Apache-2.0
# ruff: noqa: E402
"""Ansible module: the rollout's prompt-cache gate, Claude Code's first request and the same
session's next turn sent to one llama-server instance, in one call."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: llamafleet_cache_gate
short_description: Prove that a llama-server serves Claude Code's next turn from its prompt cache
description:
  - Sends O(first) (Claude Code's first request of a session) and then O(next) (the same
    session's next turn, whose prompt starts with the first request's prompt and answer) to the
    instance's C(/v1/messages), and fails unless the next turn read at least O(ratio) of what the
    server holds of the first request (its C(input_tokens), C(cache_read_input_tokens) and
    C(output_tokens)) from its cache (the next answer's C(usage.cache_read_input_tokens)).
  - A request that is not answered with 200 fails the gate, with the status and the start of the
    answer (a chat template that fails on Claude Code's requests fails here).
  - The request goes to the instance only, as M(llamafleet.fleet.llamafleet_wait) sends its own
    (no proxy, no C(~/.netrc), no redirect followed), the certificate checked against O(ca_path).
  - Sends nothing in check mode.
version_added: "0.2.0"
options:
  url:
    description: The instance's C(/v1/messages) URL (http or https).
    type: str
    required: true
  first:
    description: The body of the first request (a Messages API request).
    type: dict
    required: true
  next:
    description: The body of the next turn.
    type: dict
    required: true
  headers:
    description: Request headers (the instance's C(x-api-key)); never shown in the task's result.
    type: dict
    default: {}
  ca_path:
    description: CA certificate (PEM) an https URL's certificate must be signed by.
    type: path
  ratio:
    description:
      - The share of the first request's prompt and answer the next turn must read from the cache.
    type: float
    default: 0.9
  timeout:
    description: Seconds each request may take.
    type: int
    default: 300
  name:
    description: The instance, as the messages name it.
    type: str
    default: instance
author: llamafleet
extends_documentation_fragment:
  - llamafleet.fleet.attributes.check
"""

EXAMPLES = r"""
- name: "Prompt-cache gate: Claude Code's first request and the same session's next turn"
  llamafleet.fleet.llamafleet_cache_gate:
    url: http://127.0.0.1:8080/v1/messages
    first: "{{ ('main' | llamafleet.fleet.llamafleet_claude_code_requests)[0] }}"
    next: "{{ ('main' | llamafleet.fleet.llamafleet_claude_code_requests)[1] }}"
    headers: {x-api-key: "{{ key }}"}
    name: main
"""

RETURN = r"""
prefix:
  description: Tokens the server holds of the first request (prompt and answer).
  returned: when both requests were answered
  type: int
read:
  description: Tokens the next turn read from the cache.
  returned: when both requests were answered
  type: int
needed:
  description: The fewest cached tokens that pass (O(ratio) of RV(prefix), rounded up).
  returned: when both requests were answered
  type: int
first_usage:
  description: The C(usage) of the first answer.
  returned: when it was answered
  type: dict
next_usage:
  description: The C(usage) of the next turn's answer.
  returned: when it was answered
  type: dict
"""

import json
import math
import urllib.error
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llamafleet.fleet.plugins.module_utils.instance_http import (
    UrlsError,
    open_instance,
)


class GateError(Exception):
    """The gate failed: the message says why."""


def _count(usage: dict[str, Any], key: str) -> int:
    value = usage.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise GateError(f"usage.{key} is not a count: {value!r}")
    return value


def post(
    url: str,
    body: dict[str, Any],
    headers: dict[str, str],
    ca_path: str | None,
    *,
    timeout: float,
    what: str,
) -> dict[str, Any]:
    """The answer's usage to one request; GateError when it is not answered with 200 and a JSON
    object with a usage mapping."""
    data = json.dumps(body).encode()
    sent = {"content-type": "application/json", **headers}
    try:
        with open_instance(url, ca_path, timeout, sent, data=data) as resp:
            text = resp.read(4 * 1024 * 1024)
    except urllib.error.HTTPError as e:
        start = e.read(300).decode("utf-8", "replace") if e.fp is not None else ""
        raise GateError(f"{what}: HTTP {e.code} from {url}: {start}") from None
    except (urllib.error.URLError, UrlsError, OSError) as e:
        raise GateError(f"{what}: no answer from {url}: {e}") from None
    try:
        answer = json.loads(text)
    except ValueError:
        raise GateError(f"{what}: the answer from {url} is not JSON") from None
    usage = answer.get("usage") if isinstance(answer, dict) else None
    if not isinstance(usage, dict):
        raise GateError(f"{what}: the answer from {url} has no usage")
    return usage


def gate(first: dict[str, Any], nxt: dict[str, Any], ratio: float, name: str) -> dict[str, Any]:
    """The gate's figures from the two answers' usage; GateError when the next turn read too
    little from the cache."""
    prefix = sum(
        _count(first, k) for k in ("input_tokens", "cache_read_input_tokens", "output_tokens")
    )
    read = _count(nxt, "cache_read_input_tokens")
    needed = math.ceil(prefix * ratio)
    found = {"prefix": prefix, "read": read, "needed": needed}
    if read < needed:
        raise GateError(
            f"prompt-cache gate failed on {name}: the next turn read {read} tokens from the cache;"
            f" the first request's prompt and answer, which it starts with, have {prefix}"
            f" (needed {int(ratio * 100)} %)."
        )
    return found


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "first": {"type": "dict", "required": True},
            "next": {"type": "dict", "required": True},
            "headers": {"type": "dict", "default": {}, "no_log": True},
            "ca_path": {"type": "path"},
            "ratio": {"type": "float", "default": 0.9},
            "timeout": {"type": "int", "default": 300},
            "name": {"type": "str", "default": "instance"},
        },
        supports_check_mode=True,
    )
    p = module.params
    if module.check_mode:
        module.exit_json(changed=False, skipped=True, msg="check mode: no request sent")
    if not 0 < p["ratio"] <= 1:
        module.fail_json(msg=f"ratio must be above 0 and at most 1, not {p['ratio']}")
    headers = {str(k): str(v) for k, v in p["headers"].items()}
    out: dict[str, Any] = {"changed": False}
    try:
        out["first_usage"] = post(
            p["url"],
            p["first"],
            headers,
            p["ca_path"],
            timeout=p["timeout"],
            what="the first request",
        )
        out["next_usage"] = post(
            p["url"], p["next"], headers, p["ca_path"], timeout=p["timeout"], what="the next turn"
        )
        out.update(gate(out["first_usage"], out["next_usage"], p["ratio"], p["name"]))
    except GateError as e:
        module.fail_json(msg=str(e), **out)
    out["msg"] = (
        f"{p['name']}: prompt cache reused {out['read']} of the first request's {out['prefix']}"
        f" tokens (prompt and answer) ({round(100 * out['read'] / max(out['prefix'], 1), 1)} %)"
    )
    module.exit_json(**out)


if __name__ == "__main__":
    main()
