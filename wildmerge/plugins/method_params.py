"""A merge method's parameters, declared once as a pydantic model: names, types, defaults, ranges, scope.

mergekit wants ``ParameterSpec`` tuples and the recipe check wants ranges; both are read from the model, so a
default or a range is written in exactly one place. A field's mergekit name is its alias when it has one
(``lambda`` is a Python keyword); ``per_model(...)`` marks a parameter every merged model sets for itself.
"""

import functools
import inspect
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, Callable, Dict, Optional, Tuple

from annotated_types import Ge, Gt, Le, Lt
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from typing_extensions import Annotated

from wildmerge.errors import ConfigError

_NON_BASE = "non_base"  # mergekit's ParameterScope.NON_BASE: one value per merged (non-base) model


def per_model(default: Any = PydanticUndefined, **kwargs) -> Any:
    """A ``Field`` that every merged model sets for itself (mergekit's ``models[i].parameters``)."""
    return Field(default, json_schema_extra={"scope": _NON_BASE}, **kwargs)


def is_per_model(field: FieldInfo) -> bool:
    return isinstance(field.json_schema_extra, dict) and field.json_schema_extra.get("scope") == _NON_BASE


def interval(field: FieldInfo) -> Optional[str]:
    """The valid interval of a numeric field as text, e.g. ``(0.0, 1.0]``; None when it has no bound."""
    lo = hi = None
    lo_bracket, hi_bracket = "(", ")"
    for rule in field.metadata:
        if isinstance(rule, Ge):
            lo, lo_bracket = rule.ge, "["
        elif isinstance(rule, Gt):
            lo = rule.gt
        elif isinstance(rule, Le):
            hi, hi_bracket = rule.le, "]"
        elif isinstance(rule, Lt):
            hi = rule.lt
    if lo is None and hi is None:
        return None
    low = "-inf" if lo is None else float(lo)
    high = "inf" if hi is None else float(hi)
    return f"{lo_bracket}{low}, {high}{hi_bracket}"


class MethodParams(BaseModel):
    """Base class of every method's parameter model."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @classmethod
    def fields_by_name(cls) -> Dict[str, FieldInfo]:
        """{name as written in a recipe: field}, in declaration order."""
        return {field.alias or name: field for name, field in cls.model_fields.items()}

    @classmethod
    def defaults(cls) -> Dict[str, Any]:
        """{name: default} of every parameter that has one (a required one, like TA's ``weight``, has none)."""
        return {n: f.default for n, f in cls.fields_by_name().items() if not f.is_required()}

    @classmethod
    def with_defaults(cls, kernel: Callable) -> Callable:
        """``kernel`` as its method calls it, for callers outside mergekit (tests, benchmarks): each keyword left out
        takes the default declared here (kernels have no defaults of their own)."""
        names = list(inspect.signature(kernel).parameters)
        defaults = cls.defaults()

        @functools.wraps(kernel)
        def call(*args, **kwargs):
            rest = {n: defaults[n] for n in names[len(args):] if n not in kwargs and n in defaults}
            return kernel(*args, **kwargs, **rest)

        return call

    @classmethod
    def parameter_specs(cls) -> Tuple[Any, ...]:
        """mergekit's ``ParameterSpec`` tuple, derived from the fields (a required field has no default)."""
        from mergekit.merge_methods.base import MISSING, ParameterScope, ParameterSpec

        return tuple(
            ParameterSpec(name, field.annotation,
                          ParameterScope.NON_BASE if is_per_model(field) else ParameterScope.SHARED,
                          default=MISSING if field.is_required() else field.default,
                          description=field.description)
            for name, field in cls.fields_by_name().items()
        )

    @classmethod
    def check_value(cls, method: str, name: str, value: Any) -> Any:
        """The validated value, or a ConfigError naming the method, the parameter, the value and what is valid."""
        field = cls.fields_by_name()[name]
        try:
            return _adapter(cls, name).validate_python(value)
        except ValidationError as exc:
            error = exc.errors()[0]
            bounds = interval(field)
            if bounds is not None and error["type"] in _RANGE_ERRORS:
                raise ConfigError(f"{method}: parameter {name!r} = {value} is out of range; it must be in {bounds}") \
                    from None
            reason = str(error["ctx"]["error"]) if error["type"] == "value_error" else error["msg"]
            raise ConfigError(f"{method}: parameter {name!r} = {value!r} is invalid: {reason}") from None

    @classmethod
    def check_resolved(cls, method: str, parameters: Dict[str, Any]) -> None:
        """Check the parameters mergekit hands a merge method (a per-model one is a {model: value} mapping)."""
        fields = cls.fields_by_name()
        for name, value in parameters.items():
            if name not in fields:
                continue
            if is_per_model(fields[name]) and isinstance(value, Mapping):
                for one in value.values():
                    cls.check_value(method, name, one)
            else:
                cls.check_value(method, name, value)


_RANGE_ERRORS = ("greater_than", "greater_than_equal", "less_than", "less_than_equal", "finite_number")


@lru_cache(maxsize=None)
def _adapter(cls, name: str) -> TypeAdapter:
    field = cls.fields_by_name()[name]
    return TypeAdapter(Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation)
