"""Action plugin: one decision for the gguf_models role, "is every model in place, verified and
described?", so that a host that has them runs one task instead of the placing tasks.

    - llamafleet.fleet.gguf_models_state:
        models: "{{ gguf_models_list }}"
        dir: "{{ gguf_models_dir }}"
        takeover_owner: "{{ gguf_models_takeover_owner }}"
        verify_existing: "{{ gguf_models_verify_existing }}"
        inspect_command: "{{ gguf_models_inspect_command }}"
        min_free_mb: "{{ gguf_models_min_free_mb }}"
        allow_insecure_transport: "{{ gguf_models_allow_insecure_transport }}"
      register: _gguf_models_state

First it checks the list as the role always has (each model a name, exactly one of url or src, a
sha256 of 64 hex digits, url|src + sha256 on every part and on mmproj; unique names) and refuses a
variable an earlier version had (gguf_models_owner, _group, _create_owner, _file_mode, _dir_mode),
with the role's own messages, before anything is asked on the host.

Then it asks the role's own modules, in check mode, what the placing tasks would do
(tasks/install.yml, model.yml, file.yml): M(llamafleet.fleet.gguf_fetch) for the models
directory, each model's directory and each file (its sha256 file names the expected checksum,
root owns it, one link; with O(verify_existing) it is hashed again), and
M(llamafleet.fleet.gguf_metadata) for each model's saved metadata.json (the document it would
write is the one there). When none of them would change anything, the result is
C(current: true) and its C(metadata) is what the placing tasks would have set as
C(gguf_models_metadata) (each model's validated document plus C(dir) and C(path)); the role sets
that fact from it.

Anything else is C(current: false) with the C(reasons), and the role runs its placing tasks,
which make the change or fail with their own message: a module that refuses (a link planted at a
final name, a directory another account controls) is a reason here, never a failure, so the
refusal is reported by the task that would act. A configured O(inspect_command) (the metadata comes
from a command on the host) is always decided by the placing tasks.

Nothing is changed on the host, in check mode or not; the result never reports C(changed).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

_ARGS = frozenset(
    {
        "models",
        "dir",
        "takeover_owner",
        "verify_existing",
        "inspect_command",
        "min_free_mb",
        "allow_insecure_transport",
    }
)

#: runs one of the collection's modules in check mode on the host: (name, args) -> result
Runner = Callable[[str, dict[str, Any]], Mapping[str, Any]]


class StateInputError(Exception):
    """Bad input from the playbook: the task fails with this message."""


class ListError(Exception):
    """A gguf_models_list entry or a role variable the role refuses: the task fails with exactly
    this message (the role's own words, before anything is asked on the host)."""


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_REMOVED = re.compile(r"gguf_models_(owner|group|create_owner|file_mode|dir_mode)")


def check_list(models: Any) -> None:
    """The role's checks of gguf_models_list: each model a name (letters, digits, . _ -), exactly
    one of url or src, a sha256 of 64 hex digits, and url|src + sha256 on every part and on mmproj;
    the names unique. ListError naming the first entry that fails."""
    if not isinstance(models, list):
        raise ListError("gguf_models_list must be a list of models")

    def located(entry: Any) -> bool:
        return isinstance(entry, Mapping) and ("url" in entry or "src" in entry)

    for model in models:
        m = model if isinstance(model, Mapping) else {}
        name = m.get("name")
        parts = m.get("parts") or []
        good = (
            isinstance(name, str)
            and bool(_NAME.fullmatch(name))
            and ("url" in m) != ("src" in m)
            and "sha256" in m
            and bool(_HEX64.fullmatch(str(m["sha256"]).lower()))
            and isinstance(parts, list)
            and all(isinstance(p, Mapping) and "sha256" in p and located(p) for p in parts)
            and ("mmproj" not in m or (located(m["mmproj"]) and "sha256" in m["mmproj"]))
        )
        if not good:
            shown = name if isinstance(name, str) and name else "(no name)"
            raise ListError(
                f"gguf_models_list entry {shown}: each model needs a name (letters, digits, . _ -),"
                " exactly one of url or src, a sha256 of 64 hex digits, and url|src + sha256 on"
                " every part and on mmproj."
            )
    names = [m["name"] for m in models]
    if len(set(names)) != len(names):
        raise ListError(f"gguf_models_list has duplicate names: {names}")


def check_removed(variables: Mapping[str, Any]) -> None:
    """ListError when a variable an earlier version had is set (the models are root's now)."""
    found = sorted(n for n in variables if isinstance(n, str) and _REMOVED.fullmatch(n))
    if found:
        raise ListError(
            f"{', '.join(found)}: no longer used. Model directories and files are owned by root"
            " (root:root, directories 0755, files 0644) and only read by the service (see the"
            " role's README, Security). Remove these variables; to have root take over the"
            " directories an earlier version gave to an account, set gguf_models_takeover_owner"
            " to it."
        )


class _NotCurrentError(Exception):
    """Something the placing tasks would do (the message says what): the decision is made."""


def model_files(model: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The files of one gguf_models_list entry in the order tasks/model.yml places them: the
    model, its parts, its mmproj; each with its ``dest_name`` (``filename``, else the last part of
    the URL's or the source's path) and ``kind`` (model or mmproj)."""
    entries: list[tuple[Mapping[str, Any], str]] = [(model, "model")]
    entries += [(p, "model") for p in model.get("parts") or []]
    if model.get("mmproj") is not None:
        entries.append((model["mmproj"], "mmproj"))
    files = []
    for entry, kind in entries:
        if not isinstance(entry, Mapping):
            raise StateInputError(f"model {model.get('name')!r}: a part or mmproj is not a mapping")
        where = entry.get("url", entry.get("src"))
        if not isinstance(where, str) or not where:
            raise StateInputError(f"model {model.get('name')!r}: a file has neither url nor src")
        name = entry.get("filename") or posixpath.basename(urlsplit(where).path)
        files.append({**entry, "dest_name": str(name), "kind": kind})
    return files


def decide(params: Mapping[str, Any], run_module: Runner) -> dict[str, Any]:
    """The decision (see the module docstring) with ``run_module`` running a module in check
    mode. Returns ``{"current": bool, "reasons": [...], "metadata": {...}}`` (``metadata`` only
    when current). Raises StateInputError on bad input."""
    unknown = set(params) - _ARGS
    if unknown:
        raise StateInputError(f"unknown options: {', '.join(sorted(unknown))}")
    models = params.get("models") or []
    base = params.get("dir")
    if not isinstance(models, list) or not all(isinstance(m, Mapping) for m in models):
        raise StateInputError("models must be a list of mappings (gguf_models_list)")
    if not isinstance(base, str) or not base.startswith("/"):
        raise StateInputError(f"dir must be an absolute path, got {base!r}")
    base = posixpath.normpath(base)
    owner = params.get("takeover_owner") or ""
    common = {"base": base, "takeover_owner": owner}

    def would_change(what: str, module: str, args: dict[str, Any]) -> Mapping[str, Any]:
        """The module's check-mode result; _NotCurrentError (with the reason) when it would change
        something or fails: the placing tasks run then, and asking further is wasted."""
        result = run_module(module, args)
        if result.get("failed"):
            raise _NotCurrentError(f"{what}: {result.get('msg', 'failed')}")
        if result.get("changed"):
            raise _NotCurrentError(f"{what}: would change")
        return result

    if params.get("inspect_command"):
        return {
            "current": False,
            "reasons": ["gguf_models_inspect_command is set: the metadata comes from it"],
        }
    planned = [(model, *_model(model, base)) for model in models]  # bad input fails first
    metadata: dict[str, Any] = {}
    try:
        would_change(base, "gguf_fetch", {"state": "directory", "dest": base, **common})
        for model, name, mdir, files in planned:
            would_change(mdir, "gguf_fetch", {"state": "directory", "dest": mdir, **common})
            for f in files:
                dest = f"{mdir}/{f['dest_name']}"
                args: dict[str, Any] = {
                    "dest": dest,
                    "sha256": str(f.get("sha256", "")),
                    "verify_existing": bool(params.get("verify_existing")),
                    "min_free_mb": int(params.get("min_free_mb") or 0),
                    "allow_insecure_transport": bool(params.get("allow_insecure_transport")),
                    **common,
                }
                if "url" in f:
                    args["url"] = f["url"]
                    if model.get("headers"):
                        args["headers"] = dict(model["headers"])
                if not would_change(dest, "gguf_fetch", args).get("valid"):
                    raise _NotCurrentError(f"{dest}: not in place")
            paths = [f"{mdir}/{f['dest_name']}" for f in files if f["kind"] == "model"]
            mmproj = [f"{mdir}/{f['dest_name']}" for f in files if f["kind"] == "mmproj"]
            described_args: dict[str, Any] = {
                "path": paths[0],
                "parts": paths,
                "save": f"{mdir}/metadata.json",
                "model": name,
                "sha256": [str(f.get("sha256", "")).lower() for f in files if f["kind"] == "model"],
                **common,
            }
            if mmproj:
                described_args["mmproj"] = mmproj[0]
            save = described_args["save"]
            metadata[name] = would_change(save, "gguf_metadata", described_args).get("metadata")
    except _NotCurrentError as e:
        return {"current": False, "reasons": [str(e)]}
    return {"current": True, "reasons": [], "metadata": metadata}


def _model(model: Mapping[str, Any], base: str) -> tuple[str, str, list[dict[str, Any]]]:
    name = model.get("name")
    if not isinstance(name, str) or not name:
        raise StateInputError("every entry of models needs a name")
    return name, f"{base}/{name}", model_files(model)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        task_vars = task_vars or {}

        def run_module(name: str, args: dict[str, Any]) -> Mapping[str, Any]:
            # the modules' own check mode: they report what they would do and change nothing
            saved = self._task.check_mode
            self._task.check_mode = True
            try:
                found: Mapping[str, Any] = self._execute_module(
                    module_name=f"llamafleet.fleet.{name}",
                    module_args=args,
                    task_vars=task_vars,
                )
            finally:
                self._task.check_mode = saved
            return found

        try:
            check_list(self._task.args.get("models"))
            check_removed(task_vars)
        except ListError as e:
            raise AnsibleActionFail(str(e)) from None
        try:
            decision = decide(dict(self._task.args), run_module)
        except StateInputError as e:
            raise AnsibleActionFail(f"gguf_models_state: {e}") from None
        # the role sets gguf_models_metadata from `metadata` with set_fact: facts returned here
        # would be host facts, read at the top level only through INJECT_FACTS_AS_VARS
        result.update(decision, changed=False)
        return result
