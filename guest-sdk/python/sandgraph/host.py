"""The host's `log` and `cancelled`. Outside a component (native tests),
`log` writes to stderr and `cancelled` is always false."""

import sys

_LEVELS = ("trace", "debug", "info", "warn", "error")

try:
    from wit_world.imports import host as _host
    try:
        from wit_world.imports import types as _wit
    except ImportError:  # renamed beside wasi:http's own `types`
        from wit_world.imports import sandgraph_graph_types as _wit
except ImportError:  # not inside a component
    _host = None


def log(level: str, message: str) -> None:
    """Writes `message` to the host log at `level` (trace, debug, info,
    warn, error), under the graph's name. The host truncates long lines and
    rate-limits floods. (`print` works too: the host logs the guest's stdout
    and stderr.)"""
    if level not in _LEVELS:
        raise ValueError(f"log level {level!r} is not one of {', '.join(_LEVELS)}")
    text = str(message).encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    if _host is None:
        print(f"[{level}] {text}", file=sys.stderr)
    else:
        _host.log(getattr(_wit.LogLevel, level.upper()), text)


def cancelled() -> bool:
    """True once the run's soft deadline has passed or its caller cancelled:
    a long node should wrap up and return. After a grace period the host
    stops the graph by force. Always false outside a component."""
    return False if _host is None else bool(_host.cancelled())
