"""Typed config construction and validation with OmegaConf.

A registry entry's dataclass is the schema; user values (from a recipe or ``a.b=c`` overrides)
are merged into it. OmegaConf rejects unknown fields and values that cannot be converted to the
declared type; both become one-line :class:`UserError` messages naming the valid choices.
"""

from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

from recombine.errors import UserError, choices_hint
from recombine.registry import Entry


def validate_into(schema_object: Any, values: dict[str, Any], where: str) -> Any:
    """Merge ``values`` into the dataclass instance ``schema_object``; return a new instance."""
    schema = OmegaConf.structured(schema_object)
    field_names = list(schema.keys())
    for key in values:
        if key not in field_names:
            raise UserError(f"unknown field {where}.{key}; {choices_hint(str(key), field_names)}")
    try:
        merged = OmegaConf.merge(schema, OmegaConf.create(values))
        return OmegaConf.to_object(merged)
    except ConfigKeyError as e:  # nested unknown key
        raise UserError(f"unknown field {where}.{e.full_key}") from None
    except OmegaConfBaseException as e:
        message = str(e.msg).splitlines()[0] if getattr(e, "msg", None) else str(e).splitlines()[0]
        raise UserError(f"bad value for {where}.{e.full_key or e.key}: {message}") from None


def build_config(entry: Entry, values: dict[str, Any], section: str) -> Any:
    """The typed config of a registry entry: its preset defaults, then ``values`` on top."""
    return validate_into(entry.default_config(), values, section)
