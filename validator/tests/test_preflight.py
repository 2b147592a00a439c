"""The in-process preflight (llamafleet.preflight) that the roles' action plugin calls, the
per-instance `ignore:` mapping rendered into units and inline facts."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from llamafleet.errors import InputError
from llamafleet.facts import FactsError, apply_facts
from llamafleet.preflight import PreflightError, check_texts, instance_ignores, refusal

ROOT = Path(__file__).resolve().parents[2]
NO_CACHE = "[Service]\nRestart=on-failure\nExecStart=/x/llama-server -m /m.gguf --cache-ram 0\n"
SYMMETRIC = "[Service]\nExecStart=/x/llama-server -m /m.gguf -ctk turbo3 -ctv turbo3\n"


def test_ignores_render_one_comment_per_rule_sorted() -> None:
    got = instance_ignores({"ls010": "both turbo3 on purpose", "LS003": " cache on disk "}, "main")
    assert got == [
        "llamafleet: ignore-file[LS003] cache on disk",
        "llamafleet: ignore-file[LS010] both turbo3 on purpose",
    ]
    assert instance_ignores(None) == [] and instance_ignores({}) == []


@pytest.mark.parametrize(
    ("ignore", "needle"),
    [
        (["LS010"], "must be a mapping"),
        ({"XX999": "why"}, "not a rule id"),
        ({"LS010]\n[Service": "x"}, "not a rule id"),
        ({"LS010": ""}, "needs a reason"),
        ({"LS010": 3}, "needs a reason"),
        ({"LS010": "ok\nExecStartPre=+/bin/sh"}, "one line"),
    ],
)
def test_bad_ignores_are_refused_with_the_instance_named(ignore: object, needle: str) -> None:
    with pytest.raises(PreflightError) as err:
        instance_ignores(ignore, "main")
    assert needle in str(err.value) and "instance main" in str(err.value)


def test_an_ignore_comment_suppresses_the_rule_in_that_unit_only() -> None:
    comment = "# " + instance_ignores({"LS010": "measured: fine on this model"}, "a")[0] + "\n"
    checked = check_texts(
        [
            {"name": "a", "path": "llama-server-a.service", "text": comment + SYMMETRIC},
            {"name": "b", "path": "llama-server-b.service", "text": SYMMETRIC},
        ],
        fail_on="warning",
    )
    ids = {c.name: [f["id"] for f in c.findings] for c in checked}
    assert "LS010" not in ids["a"] and checked[0].suppressed >= 1
    assert "LS010" in ids["b"]


def test_findings_refuse_at_the_threshold_and_the_message_names_the_build() -> None:
    text = "[Service]\nExecStart=/x/llama-server -m /m.gguf --cache-ram 0\n"
    checked = check_texts([{"name": "main", "path": "u.service", "text": text}], fail_on="warning")
    assert checked[0].refused
    msg = refusal(checked, "instance", "b9079-ef8c15dbd6-cpu-0123456789", "Use ignore:.")
    assert msg.startswith(
        "llamafleet check refused instance main for build b9079-ef8c15dbd6-cpu-0123456789"
    )
    assert "fix:" in msg and msg.endswith("Use ignore:.")
    # below the threshold: no refusal, no message
    info_only = check_texts([{"name": "main", "path": "u.service", "text": text}], fail_on="error")
    assert not any(c.refused for c in info_only) or refusal(info_only, "instance")


def test_the_help_fact_is_inline_and_a_path_is_refused() -> None:
    help_text = (
        "-ctk,  --cache-type-k TYPE  KV cache data type for K\n  allowed values: f16, q8_0\n"
    )
    facts = apply_facts(
        {"build_manifest": {"help_text": help_text, "help_file": "/opt/x/help.txt"}}
    )
    assert facts.has_turbo is False
    for bad in (
        {"help_file": "/opt/llama.cpp/current/llama-server.help.txt"},
        {"gguf": "/srv/m.gguf"},
        {"build_manifest": "/opt/llama.cpp/current/manifest.json"},
    ):
        with pytest.raises(FactsError, match="name files"):
            apply_facts(bad, source="facts of main")


def test_bad_items_and_threshold_are_input_errors() -> None:
    with pytest.raises(InputError):
        check_texts([{"name": "x"}])
    with pytest.raises(InputError):
        check_texts([{"name": "x", "text": SYMMETRIC}], fail_on="fatal")


def test_the_action_plugin_runs_in_a_real_playbook(tmp_path: Path) -> None:
    """ansible-playbook on localhost with the role's action plugin: a refused unit fails the task
    with the build named, a suppressed one passes, and a .llamafleet.yaml in the directory
    ansible-playbook runs in is found."""
    pytest.importorskip("ansible")
    good = "# " + instance_ignores({"LS001": "r"})[0] + "\n" + NO_CACHE
    play = tmp_path / "play.yml"
    play.write_text(
        textwrap.dedent(
            f"""\
            - hosts: localhost
              gather_facts: false
              tasks:
                - name: check
                  llamafleet_check:
                    what: instance
                    build: b9079-test
                    items:
                      - name: good
                        path: llama-server-good.service
                        text: {json.dumps(good)}
                      - name: bad
                        path: llama-server-bad.service
                        text: {json.dumps(NO_CACHE)}
                    fail_on: error
                  register: out
                  ignore_errors: true
                - name: show
                  ansible.builtin.debug:
                    msg: "RESULT {{{{ out | to_json }}}}"
            """
        )
    )
    (tmp_path / ".git").mkdir()
    env = {
        "ANSIBLE_ACTION_PLUGINS": str(ROOT / "roles" / "llamafleet_common" / "action_plugins"),
        "ANSIBLE_LOCALHOST_WARNING": "false",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false",
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default",
        "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin",
    }

    def run() -> dict[str, Any]:
        proc = subprocess.run(
            [str(Path(sys.executable).parent / "ansible-playbook"), str(play)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        line = next(ln for ln in proc.stdout.splitlines() if '"msg": "RESULT ' in ln)
        result: dict[str, Any] = json.loads(
            json.loads("{" + line.strip().rstrip(",") + "}")["msg"][len("RESULT ") :]
        )
        return result

    out = run()
    assert out["failed"] is True and "for build b9079-test" in out["msg"]
    assert "instance bad" in out["msg"] and "instance good" not in out["msg"]
    assert out["config"] is None
    # per-text outcomes under `checks`: `results` is what Ansible reads as a loop's items
    assert "results" not in out and [c["name"] for c in out["checks"]] == ["good", "bad"]
    (tmp_path / ".llamafleet.yaml").write_text("skip: [LS001]\n")
    out = run()
    assert not out.get("failed") and out["config"].endswith(".llamafleet.yaml")
