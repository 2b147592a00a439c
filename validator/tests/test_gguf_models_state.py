"""The gguf_models role's one decision (plugins/action/gguf_models_state.py, roles/gguf_models/
tasks/main.yml): on a host that has every model in place, verified and described, one task
sets gguf_models_metadata and the placing tasks are not included; anything else runs them, and
they change it or refuse it with their own message.

The playbook tests run the real role with the real ansible-playbook on this machine (connection
local, as root: the modules chown to root) on a throwaway models directory, with a real GGUF v3
file served over loopback HTTP (ModelServer) or copied from the controller. The `decide` tests
hand it recorded-shaped module answers: they stand for gguf_fetch's and gguf_metadata's results
(changed, valid, failed, metadata) and show only how the decision reads them."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from conftest import (
    REPO,
    ModelServer,
    gguf_bytes,
    load_ansible_plugin,
    module_utils,
    plugin_path,
    run_playbook,
)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the modules chown to root")


MODEL = gguf_bytes()
MODEL_SHA = hashlib.sha256(MODEL).hexdigest()
OTHER = gguf_bytes("other")
OTHER_SHA = hashlib.sha256(OTHER).hexdigest()


@pytest.fixture(scope="module")
def state_mod() -> ModuleType:
    """The action plugin: the list's checks, on the controller."""
    return load_ansible_plugin(plugin_path("action", "gguf_models_state"))


@pytest.fixture(scope="module")
def decide_mod() -> ModuleType:
    """The decision the module makes on the host (module_utils/gguf_state.py)."""
    return module_utils("gguf_state")


@pytest.fixture(scope="module")
def server() -> Iterator[ModelServer]:
    srv = ModelServer()
    srv.files["/tiny.gguf"] = MODEL
    yield srv
    srv.close()


# ------------------------------------------------------------------ the decision, module answers


class Answers:
    """What gguf_fetch and gguf_metadata answer in check mode, by the path they are asked about
    (``dest``, else ``save``): a converged host unless told otherwise."""

    def __init__(self, **by_path: Mapping[str, Any]) -> None:
        self.by_path = by_path
        self.asked: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, module: str, args: dict[str, Any]) -> Mapping[str, Any]:
        self.asked.append((module, args))
        path = args.get("dest") or args.get("save")
        found = self.by_path.get(str(path))
        if found is not None:
            return found
        if module == "gguf_metadata":
            return {"changed": False, "metadata": {"model": args["model"], "path": args["path"]}}
        return {"changed": False, "valid": True}


MODELS = [
    {"name": "tiny", "url": "https://example.org/x/tiny-Q8_0.gguf", "sha256": "A" * 64},
    {
        "name": "big",
        "src": "/srv/incoming/big-00001-of-00002.gguf",
        "sha256": "b" * 64,
        "parts": [{"src": "/srv/incoming/big-00002-of-00002.gguf", "sha256": "c" * 64}],
        "mmproj": {
            "url": "https://example.org/mm.gguf",
            "filename": "mmproj.gguf",
            "sha256": "d" * 64,
        },
        "headers": {"Authorization": "Bearer t"},
    },
]


def test_a_converged_host_is_current_with_the_facts_the_tasks_would_set(decide_mod: Any) -> None:
    answers = Answers()
    got = decide_mod.decide({"models": MODELS, "dir": "/srv/models/"}, answers)
    assert got["current"] is True and got["reasons"] == []
    assert got["metadata"] == {
        "tiny": {"model": "tiny", "path": "/srv/models/tiny/tiny-Q8_0.gguf"},
        "big": {"model": "big", "path": "/srv/models/big/big-00001-of-00002.gguf"},
    }
    dests = [a.get("dest") or a.get("save") for _m, a in answers.asked]
    assert dests == [
        "/srv/models",
        "/srv/models/tiny",
        "/srv/models/tiny/tiny-Q8_0.gguf",
        "/srv/models/tiny/metadata.json",
        "/srv/models/big",
        "/srv/models/big/big-00001-of-00002.gguf",
        "/srv/models/big/big-00002-of-00002.gguf",
        "/srv/models/big/mmproj.gguf",
        "/srv/models/big/metadata.json",
    ]
    meta = answers.asked[-1][1]
    # as tasks/model.yml describes it: the model's files only, lower-case checksums, the mmproj
    assert meta["parts"] == [
        "/srv/models/big/big-00001-of-00002.gguf",
        "/srv/models/big/big-00002-of-00002.gguf",
    ]
    assert meta["sha256"] == ["b" * 64, "c" * 64]
    assert meta["mmproj"] == "/srv/models/big/mmproj.gguf"
    assert answers.asked[3][1]["sha256"] == ["a" * 64]
    # the token goes to the URL files, as file.yml sends it; a copied file has no URL
    by_dest = {a.get("dest"): a for _m, a in answers.asked}
    assert by_dest["/srv/models/big/mmproj.gguf"]["headers"] == {"Authorization": "Bearer t"}
    assert "url" not in by_dest["/srv/models/big/big-00001-of-00002.gguf"]


@pytest.mark.parametrize(
    ("path", "answer", "why"),
    [
        ("/srv/models", {"changed": True}, "the models directory would be created or taken over"),
        ("/srv/models/tiny", {"changed": True}, "a model's directory"),
        ("/srv/models/tiny/tiny-Q8_0.gguf", {"changed": True, "valid": False}, "not there"),
        ("/srv/models/tiny/tiny-Q8_0.gguf", {"changed": True, "valid": True}, "its sha256 file"),
        ("/srv/models/tiny/tiny-Q8_0.gguf", {"changed": False, "valid": False}, "not valid"),
        ("/srv/models/big/big-00002-of-00002.gguf", {"changed": True}, "a part"),
        ("/srv/models/big/mmproj.gguf", {"changed": True}, "the mmproj"),
        ("/srv/models/big/metadata.json", {"changed": True, "metadata": {}}, "another document"),
        (
            "/srv/models/tiny/tiny-Q8_0.gguf",
            {"failed": True, "msg": "Refused: a link at the final name"},
            "a module refuses: a reason, not a failure",
        ),
    ],
)
def test_anything_the_tasks_would_do_runs_them(
    decide_mod: Any, path: str, answer: Mapping[str, Any], why: str
) -> None:
    got = decide_mod.decide({"models": MODELS, "dir": "/srv/models"}, Answers(**{path: answer}))
    assert got["current"] is False, why
    assert "metadata" not in got
    assert any(r.startswith(path + ":") for r in got["reasons"]), got["reasons"]


def test_an_inspect_command_leaves_the_decision_to_the_tasks(decide_mod: Any) -> None:
    answers = Answers()
    got = decide_mod.decide(
        {"models": MODELS, "dir": "/srv/models", "inspect_command": "gguf-dump {path}"}, answers
    )
    assert got["current"] is False and "gguf_models_inspect_command" in got["reasons"][0]
    assert answers.asked == []


def test_no_model_is_current_once_the_directory_is(decide_mod: Any) -> None:
    assert decide_mod.decide({"models": [], "dir": "/srv/models"}, Answers())["metadata"] == {}


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"models": MODELS, "dir": "srv/models"}, "absolute path"),
        ({"models": "tiny", "dir": "/srv/models"}, "list of mappings"),
        ({"models": [{"url": "https://e/x.gguf"}], "dir": "/srv/models"}, "needs a name"),
        ({"models": [{"name": "x", "sha256": "a" * 64}], "dir": "/srv/models"}, "neither url"),
        ({"models": [], "dir": "/srv/models", "model": "x"}, "unknown options: model"),
    ],
)
def test_bad_input_is_refused(decide_mod: Any, params: dict[str, Any], message: str) -> None:
    with pytest.raises(decide_mod.StateInputError, match=message):
        decide_mod.decide(params, Answers())


GOOD = {"name": "tiny", "url": "https://e/tiny.gguf", "sha256": "A" * 64}


@pytest.mark.parametrize(
    "entry",
    [
        {**GOOD, "name": "-tiny"},
        {**GOOD, "name": "a/b"},
        {"url": GOOD["url"], "sha256": GOOD["sha256"]},
        {**GOOD, "src": "/x.gguf"},
        {"name": "tiny", "sha256": GOOD["sha256"]},
        {**GOOD, "sha256": "a" * 63},
        {**GOOD, "parts": [{"url": "https://e/p2.gguf"}]},
        {**GOOD, "parts": [{"sha256": "b" * 64}]},
        {**GOOD, "mmproj": {"url": "https://e/mm.gguf"}},
        {**GOOD, "mmproj": {"sha256": "c" * 64}},
        "tiny",
    ],
)
def test_the_list_check_refuses_an_entry_the_role_cannot_place(state_mod: Any, entry: Any) -> None:
    with pytest.raises(state_mod.ListError, match=r"each model needs a name \(letters"):
        state_mod.check_list([GOOD | {"name": "first"}, entry])


def test_the_list_check_passes_a_whole_entry_and_refuses_a_name_twice(state_mod: Any) -> None:
    whole = {
        **GOOD,
        "parts": [{"url": "https://e/p2.gguf", "sha256": "b" * 64}],
        "mmproj": {"src": "/srv/mm.gguf", "sha256": "c" * 64},
    }
    state_mod.check_list([whole, {**GOOD, "name": "other"}])
    with pytest.raises(state_mod.ListError, match=r"duplicate names: \['tiny', 'tiny'\]"):
        state_mod.check_list([whole, GOOD])


def test_a_variable_of_an_earlier_version_is_refused(state_mod: Any) -> None:
    state_mod.check_removed({"gguf_models_dir": "/srv", "gguf_models_owner_x": 1})
    with pytest.raises(
        state_mod.ListError, match=r"^gguf_models_file_mode, gguf_models_owner: no longer used"
    ):
        state_mod.check_removed({"gguf_models_owner": "llama", "gguf_models_file_mode": "0644"})


def test_the_role_refuses_a_bad_list_before_asking_the_host(tmp_path: Path, open_tmp: Path) -> None:
    models = open_tmp / "models"
    bad = [{"name": "tiny", "url": "https://e/tiny.gguf", "sha256": "x" * 64}]
    done = run_playbook(tmp_path, _play(models, bad))
    assert done.returncode != 0
    assert "gguf_models_list entry tiny: each model needs a name" in done.stdout, done.stdout[
        -3000:
    ]
    assert not models.exists()


# ------------------------------------------------------------------ the real role, twice


def _play(models_dir: Path, models: list[dict[str, Any]], *, check: bool = False) -> str:
    return f"""
    - hosts: localhost
      connection: local
      gather_facts: false
      vars:
        gguf_models_dir: {models_dir}
        gguf_models_takeover_owner: ""
        gguf_models_min_free_mb: 1
        gguf_models_allow_insecure_transport: true
        gguf_models_list: {json.dumps(models)}
      tasks:
        - ansible.builtin.include_role:
            name: llamafleet.fleet.gguf_models
        - ansible.builtin.debug:
            msg: "RESULT facts {{{{ gguf_models_metadata | to_json }}}}"
        - ansible.builtin.debug:
            msg: "RESULT current {{{{ _gguf_models_state.current | to_json }}}}"
    """


def _run(tmp_path: Path, play: str, *args: str) -> tuple[dict[str, Any], str]:
    done = run_playbook(tmp_path, play, *args)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    found: dict[str, Any] = {}
    for line in done.stdout.splitlines():
        m = re.match(r'\s*"msg": "RESULT (\w+) (.*)"$', line)
        if m:
            found[m.group(1)] = json.loads(json.loads(f'"{m.group(2)}"'))
    recap = re.search(r"localhost\s+: ok=(\d+)\s+changed=(\d+).*skipped=(\d+)", done.stdout)
    assert recap, done.stdout[-2000:]
    found["ok"], found["changed"], found["skipped"] = (int(g) for g in recap.groups())
    return found, done.stdout


def test_the_role_decides_once_on_a_converged_host(
    tmp_path: Path, open_tmp: Path, server: ModelServer
) -> None:
    models = open_tmp / "models"
    model = [{"name": "tiny", "url": server.url + "/tiny.gguf", "sha256": MODEL_SHA}]
    first, _ = _run(tmp_path, _play(models, model))
    assert first["current"] is False and first["changed"] > 0
    assert (models / "tiny" / "tiny.gguf").read_bytes() == MODEL
    second, out = _run(tmp_path, _play(models, model))
    assert second["current"] is True and second["changed"] == 0
    # the same fact the placing tasks set (the model's document plus dir and path)
    assert second["facts"] == first["facts"]
    assert second["facts"]["tiny"]["path"] == str(models / "tiny" / "tiny.gguf")
    assert "Download tiny.gguf" not in out and "Place each model" not in out
    # the role's own tasks on a converged host: its argument check, the decision (which checks
    # the list too), the fact from it and the include it skips
    own = re.findall(r"^TASK \[llamafleet\.fleet\.gguf_models : (.*?)\] \*", out, re.M)
    assert len(own) == 4, own
    check, _ = _run(tmp_path, _play(models, model), "--check")
    assert check["current"] is True and check["changed"] == 0
    # one module run on the host decides (it ran gguf_fetch three times and gguf_metadata once,
    # each over the connection, before): what Ansible puts on the host, -vvv without pipelining
    _, out = _run(tmp_path, _play(models, model), "-vvv")
    # (besides the facts of the role's dependency, llamafleet_common)
    sent = set(re.findall(r"AnsiballZ_(\w+)\.py", out)) - {"setup", "llamafleet_gpu_facts"}
    assert sent == {"gguf_models_state"}, sorted(sent)


def test_a_changed_checksum_or_document_is_placed_again(
    tmp_path: Path, open_tmp: Path, server: ModelServer
) -> None:
    models = open_tmp / "models"
    model = [{"name": "tiny", "url": server.url + "/tiny.gguf", "sha256": MODEL_SHA}]
    _run(tmp_path, _play(models, model))
    # someone rewrote metadata.json: the decision sees the document would be written again
    saved = models / "tiny" / "metadata.json"
    doc = json.loads(saved.read_text())
    saved.write_text(json.dumps({**doc, "context_length": 1}))
    again, _ = _run(tmp_path, _play(models, model))
    assert again["current"] is False and again["changed"] >= 1
    assert json.loads(saved.read_text())["context_length"] == 4096
    # another model under the same name: placed again (a copy from the controller this time)
    src = tmp_path / "other.gguf"
    src.write_bytes(OTHER)
    other = [{"name": "tiny", "src": str(src), "filename": "tiny.gguf", "sha256": OTHER_SHA}]
    moved, _ = _run(tmp_path, _play(models, other))
    assert moved["current"] is False and moved["changed"] >= 1
    assert (models / "tiny" / "tiny.gguf").read_bytes() == OTHER
    assert moved["facts"]["tiny"]["sha256"] == [OTHER_SHA]
    settled, _ = _run(tmp_path, _play(models, other))
    assert settled["current"] is True and settled["changed"] == 0


def test_a_link_planted_at_a_final_name_is_still_refused(
    tmp_path: Path, open_tmp: Path, server: ModelServer
) -> None:
    """The attack the placing tasks refuse (a link at the model's final name, pointing at a file
    root would otherwise hash and describe) must not be hidden by the decision: it is a reason
    to run them, and they fail naming the file."""
    models = open_tmp / "models"
    model = [{"name": "tiny", "url": server.url + "/tiny.gguf", "sha256": MODEL_SHA}]
    _run(tmp_path, _play(models, model))
    final = models / "tiny" / "tiny.gguf"
    target = open_tmp / "elsewhere.gguf"
    target.write_bytes(MODEL)
    final.unlink()
    final.symlink_to(target)
    done = run_playbook(tmp_path, _play(models, model))
    assert done.returncode != 0
    assert "Refused" in done.stdout and str(final) in done.stdout, done.stdout[-3000:]
    assert "Decide whether every model is in place" in done.stdout


def test_the_role_runs_the_decision_before_the_placing_tasks() -> None:
    import yaml

    tasks = yaml.safe_load((REPO / "roles/gguf_models/tasks/main.yml").read_text())
    decision = [t for t in tasks if "llamafleet.fleet.gguf_models_state" in t]
    (place,) = [t for t in tasks if "ansible.builtin.include_tasks" in t]
    assert len(decision) == 1 and tasks.index(decision[0]) < tasks.index(place)
    assert place["when"] == "not _gguf_models_state.current"
    assert place["ansible.builtin.include_tasks"]["file"] == "install.yml"
