#!/usr/bin/python
# Apache-2.0
"""Ansible module: wait until a llama-server unit answers /health, failing fast when it
crash-loops."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: llamafleet_wait
short_description: Wait for a llama-server instance to serve, or fail fast with its journal
description:
  - Polls the instance's C(/health) URL until it answers 200 (503 means the model is still loading).
  - >-
    Watches the systemd unit at the same time. When it has been restarted O(max_restarts) times by
    C(Restart=) since the wait began, or is C(failed) or stopped, the wait ends at once instead of
    running out the timeout: a model that does not load, a bad flag or a missing file shows up in
    seconds, with the last lines of the unit's journal in the message.
  - Never changes anything. In check mode it returns at once.
options:
  unit: {type: str, required: true, description: The systemd unit (llama-server-NAME.service).}
  url: {type: str, required: true, description: The C(/health) URL (http or https).}
  ca_path:
    type: path
    description:
      - CA certificate (PEM) an https URL's server certificate must be signed by; the host name
        of the URL must be in the certificate. Without it, the system's CAs.
  timeout: {type: int, default: 300, description: Seconds to wait in all.}
  max_restarts:
    type: int
    default: 2
    description: Automatic restarts during the wait that mean a crash loop.
  journal_lines: {type: int, default: 20, description: Lines of the journal to return on failure.}
author: llamafleet
extends_documentation_fragment:
  - llamafleet.fleet.attributes.check
"""

RETURN = r"""
elapsed: {description: Seconds waited.}
restarts: {description: Automatic restarts of the unit during the wait.}
state: {description: The unit's ActiveState/SubState at the end.}
journal: {description: The unit's last journal lines (on failure).}
error: {description: Why the last request got no answer (e.g. a certificate that does not verify).}
"""

# imports after the module's documentation (Ansible's layout)
import ssl  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
import urllib.error  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.llamafleet.fleet.plugins.module_utils.instance_http import (  # noqa: E402
    UrlsError,
    open_instance,
)


def unit_state(unit: str) -> dict[str, str]:
    out = subprocess.run(
        ["systemctl", "show", "--property=ActiveState,SubState,NRestarts,Result", unit],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def check_ca(ca_path: str | None) -> None:
    """Load the CA file once before polling (raises OSError or ssl.SSLError when it cannot be
    used), so a bad file is said at once, not as every poll's failure."""
    if ca_path:
        ssl.create_default_context(cafile=ca_path)


def health(url: str, ca_path: str | None = None) -> tuple[int, str]:
    """The HTTP status of url (0 without an answer) and the error, if any (https: verified
    against ca_path, else the system's CAs; no proxy, no redirect: open_instance)."""
    try:
        with open_instance(url, ca_path, timeout=5) as r:  # a URL the role built
            return int(r.status), ""
    except urllib.error.HTTPError as e:
        return int(e.code), ""
    except urllib.error.URLError as e:
        return 0, str(e.reason)
    except (UrlsError, OSError, ValueError) as e:
        return 0, str(e)


def journal(unit: str, lines: int) -> list[str]:
    out = subprocess.run(
        ["journalctl", "--unit", unit, "--lines", str(lines), "--no-pager", "--output", "cat"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return out.splitlines()[-lines:]


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "unit": {"type": "str", "required": True},
            "url": {"type": "str", "required": True},
            "ca_path": {"type": "path"},
            "timeout": {"type": "int", "default": 300},
            "max_restarts": {"type": "int", "default": 2},
            "journal_lines": {"type": "int", "default": 20},
        },
        supports_check_mode=True,
    )
    p = module.params
    if module.check_mode:
        module.exit_json(changed=False, skipped=True, msg="check mode: not waiting")

    start = time.monotonic()
    base = int(unit_state(p["unit"]).get("NRestarts", "0") or 0)
    status, st, restarts = 0, {}, 0
    why, error = "", ""
    https = p["url"].lower().startswith("https:")
    try:
        check_ca(p["ca_path"] if https else None)
    except (OSError, ssl.SSLError) as e:
        module.fail_json(msg="cannot load the CA certificate {}: {}".format(p["ca_path"], e))
    while True:
        status, error = health(p["url"], p["ca_path"] if https else None)
        elapsed = round(time.monotonic() - start, 1)
        st = unit_state(p["unit"])
        restarts = int(st.get("NRestarts", "0") or 0) - base
        state = f"{st.get('ActiveState', '?')}/{st.get('SubState', '?')}"
        if status == 200:
            module.exit_json(
                changed=False, elapsed=elapsed, restarts=restarts, state=state, status=status
            )
        if restarts >= p["max_restarts"]:
            why = f"restarted {restarts} times in {elapsed} s (crash loop)"
        elif st.get("ActiveState") == "failed":
            why = "failed ({})".format(st.get("Result", "?"))
        elif st.get("ActiveState") == "inactive":
            why = "stopped"
        elif elapsed >= p["timeout"]:
            why = "no /health 200 within {} s (last answer: {})".format(
                p["timeout"], status or ("none: " + error if error else "none")
            )
        if why:
            break
        time.sleep(1)

    tail = journal(p["unit"], p["journal_lines"])
    module.fail_json(
        msg="{} {}; last journal lines:\n{}".format(p["unit"], why, "\n".join(tail[-8:])),
        elapsed=elapsed,
        restarts=restarts,
        state=state,
        status=status,
        error=error,
        journal=tail,
    )


if __name__ == "__main__":
    main()
