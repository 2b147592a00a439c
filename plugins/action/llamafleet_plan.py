"""Action plugin: ask llamafleet's memory planner, in-process on the controller, which context, KV
cache types, offload and slots fit a GPU for one model (what ``llamafleet plan --suggest`` prints),
with the model's metadata and tensors handed over as a mapping. Nothing is written to disk and
nothing runs on the managed host.

    - llamafleet.fleet.llamafleet_plan:
        name: main                  # named in the result and in errors
        model: {metadata: {...}, tensors: [...]}   # the gguf_models role's description
        vram_mib: 16376             # the GPU's memory
        ctx_size: 204800            # optional: the context wanted (default: 204800, at most the
                                    # model's training context)
        help_text: "..."            # optional: the build's --help; its KV cache types say whether
                                    # the TurboQuant types may be proposed (without it: not)
        margin_mib: 1024            # optional: memory to keep free (default: the planner's)

Returns ``fits`` (whether anything fits), ``suggestions`` (best first, each the planner's
``--suggest --format json`` entry), ``args`` (the best one as llama_server instance args: ctx_size,
cache_type_k, cache_type_v, gpu_layers, n_cpu_moe, cpu_moe, parallel; absent when nothing fits;
null values mean "leave unset"), ``turbo`` and ``name``. Check mode changes nothing here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.llamafleet.fleet.plugins.plugin_utils.validator import message

_ARGS = frozenset({"name", "model", "vram_mib", "ctx_size", "help_text", "margin_mib"})


class PlanInputError(Exception):
    """Bad input from the playbook: the task fails with this message."""


def instance_args(suggestion: Any) -> dict[str, Any]:
    """A suggestion (``llamafleet.planner.Suggestion``) as the args of an instance mapping (the
    names ``llamafleet.sources.render_argv`` renders). ``None``: leave the flag unset. All layers on
    the GPU is ``gpu_layers: 99``; the unified slots (llama-server's default: 4 slots sharing one
    KV cache) leave ``parallel`` unset, since an explicit ``-np N`` turns the unified cache off
    (rule LS003)."""
    ngl = suggestion.n_gpu_layers
    unified = suggestion.n_parallel < 1 or bool(suggestion.plan.kv_unified)
    return {
        "ctx_size": int(suggestion.ctx),
        "cache_type_k": str(suggestion.cache_type_k),
        "cache_type_v": str(suggestion.cache_type_v),
        "gpu_layers": 99 if ngl is None or ngl < 0 else int(ngl),
        "n_cpu_moe": int(suggestion.n_cpu_moe) if suggestion.n_cpu_moe > 0 else None,
        "cpu_moe": True if suggestion.cpu_moe else None,
        "parallel": None if unified else int(suggestion.n_parallel),
    }


def _number(value: Any, what: str, name: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise PlanInputError(f"{name}: {what} {value!r} is not a number") from None
    if number < 0:
        raise PlanInputError(f"{name}: {what} {value!r} is negative")
    return number


def plan(
    name: str,
    model: Any,
    vram_mib: Any,
    *,
    ctx_size: Any = None,
    help_text: str = "",
    margin_mib: Any = None,
) -> dict[str, Any]:
    """The planner's suggestions for ``model`` on a GPU of ``vram_mib`` MiB (see the module
    docstring for the result). Raises PlanInputError on bad input."""
    from llamafleet import planner
    from llamafleet.errors import InputError
    from llamafleet.facts import Facts
    from llamafleet.gguf_meta import model_from_dict

    if not isinstance(model, Mapping) or not isinstance(model.get("metadata"), Mapping):
        raise PlanInputError(
            f"{name}: model must be a mapping with metadata and tensors (the gguf_models role's "
            "description of the model)"
        )
    if not model.get("tensors"):
        raise PlanInputError(f"{name}: the model's description has no tensors to plan with")
    vram = _number(vram_mib, "vram_mib", name)
    if vram <= 0:
        raise PlanInputError(f"{name}: vram_mib must be above 0 (the GPU's memory in MiB)")
    want = int(_number(ctx_size, "ctx_size", name)) if ctx_size not in (None, "") else None
    margin = (
        planner.DEFAULT_MARGIN_MIB
        if margin_mib in (None, "")
        else _number(margin_mib, "margin_mib", name)
    )
    facts = Facts()
    if help_text:
        facts.set_help(str(help_text))
    turbo = facts.has_turbo is True
    try:
        found = planner.suggest(
            model_from_dict(dict(model), path=name),
            vram,
            want if want else None,
            margin_mib=margin,
            turbo=turbo,
        )
    except InputError as exc:
        raise PlanInputError(f"{name}: {exc}") from exc
    out: dict[str, Any] = {
        "name": name,
        "fits": bool(found),
        "turbo": turbo,
        "vram_mib": vram,
        "margin_mib": margin,
        "suggestions": [s.as_dict() for s in found],
    }
    if found:
        out["args"] = instance_args(found[0])
    return out


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = _ARGS

    def run(self, tmp: Any = None, task_vars: Any = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        try:
            import llamafleet.planner  # noqa: F401
        except ImportError as exc:
            raise AnsibleActionFail(message(exc)) from exc
        args = self._task.args
        unknown = sorted(set(args) - _ARGS)
        if unknown:
            raise AnsibleActionFail(f"llamafleet_plan: unknown option(s) {', '.join(unknown)}")
        name = str(args.get("name") or "model")
        try:
            planned = plan(
                name,
                args.get("model"),
                args.get("vram_mib"),
                ctx_size=args.get("ctx_size"),
                help_text=str(args.get("help_text") or ""),
                margin_mib=args.get("margin_mib"),
            )
        except PlanInputError as exc:
            raise AnsibleActionFail(f"llamafleet_plan: {exc}") from exc
        result.update(planned)
        result["changed"] = False
        return result
