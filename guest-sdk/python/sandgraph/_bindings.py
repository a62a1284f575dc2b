"""The capability bindings componentize-py generates, looked up when first
used: a build imports only the capabilities `[tool.sandgraph]
capabilities` names, and a graph calling another one gets an error saying
how to ask for it. Tests may replace a binding with `install`."""

import importlib
from typing import Any, Dict

from .errors import CapabilityNotImported

# The generated module of each capability.
_MODULES = {
    "llm": ("wit_world.imports.llm",),
    "tools": ("wit_world.imports.tools",),
    "http": (
        "wit_world.imports.outgoing_handler",
        "wit_world.imports.wasi_http_types",
        "wit_world.imports.streams",
        "wit_world.imports.poll",
    ),
}


def _import(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:  # not imported by this build, or not in a component
        return None


# Imported now, at build time: the component has no file system at run
# time, so what the snapshot does not hold cannot be imported later.
_installed: Dict[str, Any] = {
    f"{capability}/{i}": _import(name)
    for capability, names in _MODULES.items()
    for i, name in enumerate(names)
}


def binding(capability: str, index: int = 0) -> Any:
    """The `index`-th generated module of `capability`; raises
    `CapabilityNotImported` when the build did not import it."""
    module = _installed.get(f"{capability}/{index}")
    if module is None:
        raise CapabilityNotImported(capability)
    return module


def install(capability: str, *modules: Any) -> None:
    """Uses `modules` as the bindings of `capability` (tests); none: look
    them up again."""
    for i in range(len(_MODULES[capability])):
        _installed.pop(f"{capability}/{i}", None)
    for i, module in enumerate(modules):
        _installed[f"{capability}/{i}"] = module
