# Apache-2.0
"""The gguf_models role's one decision, "is every model in place, verified and described?", made
on the host in one module run (the module gguf_models_state): it asks the role's own placing code
(gguf_place: the directories and each file; gguf_describe: each model's metadata.json) in check
mode, as the placing tasks (tasks/install.yml, model.yml, file.yml) would run it, and stops at the
first thing they would change."""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from ansible_collections.llamafleet.fleet.plugins.module_utils.gguf_describe import (
    MetadataError,
    describe_model,
)
from ansible_collections.llamafleet.fleet.plugins.module_utils.gguf_place import (
    FetchError,
    fetch,
)
from ansible_collections.llamafleet.fleet.plugins.module_utils.safefs import (
    InvalidMetadataError,
    UnsafePathError,
)

#: the decision's options (the module's, and the gguf_models_state action plugin's)
ARGS = frozenset(
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
    unknown = set(params) - ARGS
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


def ask_here(name: str, args: dict[str, Any]) -> Mapping[str, Any]:
    """What the module ``name`` (gguf_fetch, gguf_metadata) would answer in check mode, asked in
    this process: its result, or ``{"failed": True, "msg": ...}`` with the message it would fail
    with (a refusal is a reason of the decision, never a failure of it)."""
    if os.geteuid() != 0:
        return {"failed": True, "msg": f"{name} must run as root (become: true)"}
    found: Mapping[str, Any]
    try:
        if name == "gguf_fetch":
            found = fetch(dict(args), check_mode=True)
            return found
        if name == "gguf_metadata":
            found = describe_model(dict(args), check_mode=True)
            return found
    except FetchError as e:
        return {"failed": True, "msg": str(e)}
    except UnsafePathError as e:
        return {"failed": True, "msg": f"Refused: {e}"}
    except (MetadataError, InvalidMetadataError, OSError, ValueError) as e:
        return {"failed": True, "msg": str(e)}
    raise StateInputError(f"no such module to ask: {name}")
