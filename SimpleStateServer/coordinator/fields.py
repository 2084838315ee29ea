"""Parsing of request fields, as coordination/protocol.py declares them. Form bodies give strings, JSON bodies give
numbers; both are accepted and every failure names the field."""

import math

from coordination import protocol
from coordination.records import FieldError

_ECHO_LIMIT = 40


def integer_field(data, name, minimum=0, maximum=None):
    raw = _required(data, name)
    if isinstance(raw, bool) or not isinstance(raw, (int, str)):
        raise FieldError(name, f"must be an integer, got {_echo(raw)}")
    try:
        value = int(raw)
    except ValueError:
        raise FieldError(name, f"must be an integer, got {_echo(raw)}") from None
    if value < minimum:
        raise FieldError(name, f"must be >= {minimum}, got {value}")
    _check_maximum(name, value, maximum)
    return value


def _check_maximum(name, value, maximum):
    if maximum is not None and value > maximum:
        raise FieldError(name, f"must be <= {maximum:g}, got {_echo(value)}")


def float_field(data, name, minimum=None, maximum=None):
    raw = _required(data, name)
    if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
        raise FieldError(name, f"must be a number, got {_echo(raw)}")
    try:
        value = float(raw)
    except (ValueError, OverflowError):
        raise FieldError(name, f"must be a number, got {_echo(raw)}") from None
    if not math.isfinite(value):
        raise FieldError(name, f"must be a finite number, got {_echo(raw)}")
    if minimum is not None and value < minimum:
        raise FieldError(name, f"must be >= {minimum}, got {value}")
    _check_maximum(name, value, maximum)
    return value


def optional_float_field(data, name, minimum=None, maximum=None):
    if _is_absent(data.get(name)):
        return None
    return float_field(data, name, minimum, maximum)


def optional_integer_field(data, name, default, minimum=0, maximum=None):
    if _is_absent(data.get(name)):
        return default
    return integer_field(data, name, minimum, maximum)


def optional_text_field(data, name, default):
    raw = data.get(name)
    if _is_absent(raw):
        return default
    if not isinstance(raw, str):
        raise FieldError(name, f"must be text, got {_echo(raw)}")
    return raw


def _required(data, name):
    raw = data.get(name)
    if _is_absent(raw):
        raise FieldError(name, "is missing")
    return raw


def _is_absent(raw):
    return raw is None or raw == ""


def _echo(raw):
    text = repr(raw)
    return text if len(text) <= _ECHO_LIMIT else text[:_ECHO_LIMIT] + "..."


def read(endpoint, data):
    """{name: value} of a request to `endpoint`, every declared field checked as declared; an absent optional
    field is None (a switch: False)."""
    return {field.name: _READERS[field.kind](data, field) for field in endpoint.fields}


def _integer(data, field):
    minimum = 0 if field.minimum is None else int(field.minimum)
    if field.required:
        return integer_field(data, field.name, minimum, field.maximum)
    return optional_integer_field(data, field.name, default=None, minimum=minimum, maximum=field.maximum)


def _number(data, field):
    if field.required:
        return float_field(data, field.name, field.minimum, field.maximum)
    return optional_float_field(data, field.name, field.minimum, field.maximum)


def _text(data, field):
    value = optional_text_field(data, field.name, default=None)
    if value is None and field.required:
        raise FieldError(field.name, "is missing")
    if value is not None and field.maximum is not None and len(value) > field.maximum:
        raise FieldError(field.name, f"must be at most {field.maximum:g} characters, got {len(value)}")
    return value


def _switch(data, field):
    value = integer_field(data, field.name) if field.required else optional_integer_field(data, field.name, default=0)
    if value not in (0, 1):
        raise FieldError(field.name, "must be 0 or 1")
    return bool(value)


_READERS = {protocol.INTEGER: _integer, protocol.NUMBER: _number, protocol.TEXT: _text, protocol.SWITCH: _switch}
