"""The file boundary: every JSON file hetflow reads back (plans, profiles, multi-plans) is checked
against a pydantic model before any dataclass is built from it, and a bad file becomes ONE line
naming the file, the field path and what was expected."""
from __future__ import annotations

from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError

from hetflow.errors import InputError

M = TypeVar("M", bound=BaseModel)


class FileModel(BaseModel):
    """A record of a file: JSON types exactly (no "2" for 2), no unknown keys (a typo in a hand
    edit would otherwise be ignored silently)."""

    model_config = ConfigDict(strict=True, extra="forbid")


def exact_version(n: int) -> Any:
    """The type of a file's `version` key: exactly the integer n (not `true`, which a
    Literal[1] would take as 1)."""
    def check(v: int) -> int:
        if v != n:
            raise ValueError(f"expected {n}")
        return v

    return Annotated[int, AfterValidator(check)]


def _path(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _describe(err: dict) -> str:
    kind, ctx = err["type"], err.get("ctx", {})
    if kind == "missing":
        return "missing"
    if kind == "extra_forbidden":
        return "unknown key"
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        return f"expected a JSON object, got {_short(err['input'])}"
    if kind == "list_type":
        return f"expected a JSON array, got {_short(err['input'])}"
    if kind == "literal_error":
        return f"expected {ctx.get('expected')}, got {_short(err['input'])}"
    msg = err["msg"].replace("Input should be", "expected").replace("Value error, ", "")
    return f"{msg}, got {_short(err['input'])}"


def validate(model: type[M], data: Any, source: str, what: str) -> M:
    """`data` as `model`, or an InputError: '<source>: <what>: <field.path>: <expected>'."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        errs = e.errors(include_url=False)
        first = errs[0]
        more = f" (and {len(errs) - 1} more problem(s))" if len(errs) > 1 else ""
        raise InputError(f"{source}: not a valid {what}: {_path(first['loc'])}: "
                         f"{_describe(first)}{more}") from None
