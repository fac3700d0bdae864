"""Read user YAML files and validate user mappings with pydantic, reporting mistakes as one InputError.

pydantic's own messages are precise but long; users need the file, the key
path and what is allowed, plus the closest valid key when they mistyped one.
"""

from __future__ import annotations

import types
import typing
from typing import Any, Literal, TypeVar

import pydantic

from scalesim.errors import ALLOWED_KEYS, InputError, did_you_mean
from scalesim.yaml_load import read_yaml  # noqa: F401  (re-exported: duplicate keys refused, sizes bounded)

M = TypeVar("M", bound=pydantic.BaseModel)


class Strict(pydantic.BaseModel):
    """Base for user-facing schemas: unknown keys are errors, values are frozen, numbers finite
    (`.inf` or `.nan` would make every result inf or nan, and JSON has neither)."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @pydantic.field_validator("*", mode="before")
    @classmethod
    def _no_booleans_for_numbers(cls, value: Any, info: pydantic.ValidationInfo) -> Any:
        """YAML's true/false (yes/no, on/off) where a number belongs: pydantic would read 1 or 0
        (`zero: true` ran ZeRO-1, silently)."""
        if isinstance(value, bool):
            numbers = _numbers_only(cls.model_fields[info.field_name].annotation)
            if numbers is not None:
                raise ValueError(f"expected {numbers}, got {str(value).lower()} (YAML reads true, false, yes, no, "
                                 "on and off as booleans)")
        return value

    @pydantic.model_validator(mode="before")
    @classmethod
    def _empty_sections_take_defaults(cls, data: Any) -> Any:
        """An optional section with all its keys commented out (`parallel:` and nothing under it, which
        YAML reads as null) takes its defaults, as if left out; a required one stays an error."""
        if isinstance(data, dict) and None in data.values():
            data = {k: v for k, v in data.items() if v is not None or not _defaults_when_empty(cls.model_fields.get(k))}
        return data


def _defaults_when_empty(field: Any) -> bool:
    """Whether a field is an optional section (a mapping of keys, with a default) that cannot be null."""
    if field is None or field.is_required() or _first_model(field.annotation) is None:
        return False
    return type(None) not in typing.get_args(field.annotation)


def _numbers_only(annotation: Any) -> str | None:
    """What a field takes when it takes only numbers (or null), e.g. "a number" or "one of 0, 1, 2, 3";
    None when a boolean (or anything else) may go there.

    >>> _numbers_only(int), _numbers_only(float | None), _numbers_only(Literal[0, 1]), _numbers_only(bool | int)
    ('a number', 'a number', 'one of 0, 1', None)
    """
    if annotation in (int, float):
        return "a number"
    if typing.get_origin(annotation) is typing.Annotated:        # pydantic.PositiveInt and the like
        return _numbers_only(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) is Literal:
        values = typing.get_args(annotation)
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
        return f"one of {', '.join(str(v) for v in values)}" if numeric else None
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        options = [_numbers_only(a) for a in typing.get_args(annotation) if a is not type(None)]
        return options[0] if len(options) == 1 else ("a number" if options and all(options) else None)
    return None


def _fields_at(model: type[pydantic.BaseModel], loc: tuple, required: bool = False) -> list[str]:
    """Field names of the (nested) model that a location points into (only its required ones)."""
    current: Any = model
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        fields = getattr(current, "model_fields", None)
        if not fields or part not in fields:
            return []
        annotation = fields[part].annotation
        current = _first_model(annotation)
        if current is None:
            return []
    return [name for name, f in (getattr(current, "model_fields", {}) or {}).items() if f.is_required() or not required]


def _first_model(annotation: Any) -> type[pydantic.BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _first_model(arg)
        if found is not None:
            return found
    return None


def validate(model: type[M], data: Any, *, file: str | None = None, key_prefix: str | None = None,
             also_allowed: tuple[str, ...] = ()) -> M:
    """Build `model` from `data` or raise InputError naming the first bad key. `also_allowed`: top-level
    keys the caller reads before `model` sees the data (listed with the model's own when a key is unknown)."""
    if not isinstance(data, dict):
        raise InputError("is empty; expected a mapping of keys" if data is None else
                         f"expected a mapping of keys, got {_yaml_kind(data)}", file=file, key=key_prefix)
    try:
        return model.model_validate(data)
    except InputError as exc:       # raised by a validator that knows the key (scalesim/limits.py)
        raise exc.located(file=file, key_prefix=key_prefix) from None
    except pydantic.ValidationError as exc:
        raise input_error(model, exc, file=file, key_prefix=key_prefix, also_allowed=also_allowed) from None


def input_error(model: type[M], exc: pydantic.ValidationError, *, file: str | None = None,
                key_prefix: str | None = None, also_allowed: tuple[str, ...] = ()) -> InputError:
    """pydantic's errors from building `model` as one InputError naming the first bad key (`validate`)."""
    err, loc = _most_specific(model, exc.errors())
    path = ".".join(str(p) for p in loc)
    key = f"{key_prefix}.{path}" if key_prefix and path else (key_prefix or path or None)
    if err["type"] == "extra_forbidden":
        allowed = _fields_at(model, loc) + (list(also_allowed) if len(loc) == 1 else [])
        return InputError(f"unknown key.{did_you_mean(loc[-1], allowed)}{ALLOWED_KEYS}{', '.join(allowed)}",
                          file=file, key=key)
    if err["type"] == "missing":
        return InputError("is required but missing", file=file, key=key)
    if err["type"] in ("model_type", "model_attributes_type", "dict_type"):     # a section not a mapping
        keys = _fields_at(model, (*loc, None))
        listed = f" ({', '.join(keys)})" if keys else ""
        needed = _fields_at(model, (*loc, None), required=True)
        if err.get("input") is None and needed:      # `cluster:` with all its keys commented out
            return InputError(f"is empty; this section is required: a mapping of keys with at least {', '.join(needed)} "
                              f"(allowed: {', '.join(keys)})", file=file, key=key)
        return InputError(f"expected a mapping of keys{listed}, got {_yaml_kind(err.get('input'))}",
                          file=file, key=key)
    message = err["msg"]
    if message.startswith("Value error, "):
        message = message[len("Value error, "):]
    got = err.get("input")
    if err["type"] not in ("value_error",) and not isinstance(got, (dict, list)):
        shown = repr(got)
        message += f" (got {shown if len(shown) <= 80 else shown[:77] + '...'})"
    return InputError(message, file=file, key=key)


def _yaml_kind(value: Any) -> str:
    """What a YAML value is, in YAML's words.

    >>> _yaml_kind(None), _yaml_kind([1]), _yaml_kind(5), _yaml_kind("fast"), _yaml_kind(True)
    ('nothing (null)', 'a list', 'a number (5)', "text ('fast')", 'a boolean (true)')
    """
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, (int, float)):
        return f"a number ({value:g})"
    if isinstance(value, str):
        shown = repr(value)
        return f"text ({shown if len(shown) <= 40 else shown[:37] + '...'})"
    return "a list" if isinstance(value, list) else "a mapping"


def _most_specific(model: type[pydantic.BaseModel], errors: list[dict]) -> tuple[dict, tuple]:
    """The error to report and its key path: the first bad key's, or where its value is a union
    (`bool | TpCommOverlapSpec`) the deepest error inside it, which names the nested key (every
    branch fails, and pydantic lists the `bool` branch's "valid boolean" first); union branch
    tags and validator names left out of the path."""
    located = [(e, _key_path(model, e["loc"])) for e in errors]
    first = located[0][1]
    inside = [item for item in located if item[1][:len(first)] == first]
    return max(inside, key=lambda item: len(item[1]))


def _key_path(model: type[pydantic.BaseModel], loc: tuple) -> tuple:
    """`loc` without validator names and the tags pydantic adds after a union field (its branch's type name)."""
    out: list = []
    current: Any = model
    parts = [p for p in loc if not (isinstance(p, str) and p.startswith("function-"))]
    i = 0
    while i < len(parts):
        part = parts[i]
        out.append(part)
        fields = getattr(current, "model_fields", None) or {}
        if isinstance(part, str) and part in fields:
            annotation = fields[part].annotation
            branches = {getattr(a, "__name__", None) for a in getattr(annotation, "__args__", ()) or ()}
            if len(branches) > 1 and i + 1 < len(parts) and str(parts[i + 1]).split("[")[0] in branches:
                i += 1
            current = _first_model(annotation)
        elif not isinstance(part, int):
            current = None
        i += 1
    return tuple(out)
