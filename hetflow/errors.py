"""Typed errors. The CLI turns every HetflowError into a one-line message and exit code 2."""


class HetflowError(Exception):
    """Base of all errors hetflow raises on purpose."""

    exit_code = 2


class InputError(HetflowError):
    """Bad input from the user: a file, a model, a setting, a profile."""


class ModelError(InputError):
    """An ONNX model hetflow cannot read (names the file and, where known, the node)."""


class DeadlockError(HetflowError):
    """A dataflow graph that cannot run forever; names the blocked actors and channels."""


class InfeasibleError(HetflowError):
    """A well-formed problem with no solution (e.g. a utilisation cap no mapping can meet)."""


class BackendError(HetflowError):
    """A backend cannot run a sub-network on a processing element (names node and reason)."""


class RuntimeFault(HetflowError):
    """A pipelined run failed: names the processing element, stage and layer."""

    exit_code = 1


def first_line(e: BaseException) -> str:
    """The first line of an exception's message (its type's name when it has none): how a
    library's multi-line error is named in one of ours."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__

