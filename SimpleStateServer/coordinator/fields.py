"""Parsing of request fields. Form bodies give strings, JSON bodies give numbers; both
are accepted and every failure names the field."""

import math

from coordinator.state import FieldError

_ECHO_LIMIT = 40


def integer_field(data, name, minimum=0):
    raw = _required(data, name)
    if isinstance(raw, bool) or not isinstance(raw, (int, str)):
        raise FieldError(name, f"must be an integer, got {_echo(raw)}")
    try:
        value = int(raw)
    except ValueError:
        raise FieldError(name, f"must be an integer, got {_echo(raw)}") from None
    if value < minimum:
        raise FieldError(name, f"must be >= {minimum}, got {value}")
    return value


def float_field(data, name, minimum=None):
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
    return value


def optional_float_field(data, name, minimum=None):
    if _is_absent(data.get(name)):
        return None
    return float_field(data, name, minimum)


def optional_integer_field(data, name, default, minimum=0):
    if _is_absent(data.get(name)):
        return default
    return integer_field(data, name, minimum)


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
