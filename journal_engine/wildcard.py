"""Address-settings wildcard matching (``journal_engine.wildcard.matches`` / ``is_wild``).

The implementation lives in ``journal_engine.broker.artemis.wildcard``; this module is the public path.
"""
from .broker.artemis.wildcard import (DEFAULT_WILDCARDS, WildcardConfiguration, contains_wildcard, is_wild, matches,
                              to_regex, unescape, verify_match)

__all__ = ["matches", "is_wild", "verify_match", "to_regex", "unescape", "contains_wildcard",
           "WildcardConfiguration", "DEFAULT_WILDCARDS"]
