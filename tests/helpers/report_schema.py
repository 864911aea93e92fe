"""The bench commands' JSON reports checked against the schemas they ship (``journal-engine bench`` and
``bench --served``). Import after ``pytest.importorskip("jsonschema")``."""
from __future__ import annotations

import copy

import jsonschema
import pytest


def assert_meets_schema(document: dict, schema: dict) -> None:
    """``schema`` is a valid JSON Schema (draft 2020-12) and ``document`` meets it."""
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(document, schema)


def assert_refused_without(document: dict, schema: dict, field: str) -> None:
    """``schema`` refuses ``document`` with ``field`` taken out of its first result."""
    broken = copy.deepcopy(document)
    del broken["results"][0][field]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)
