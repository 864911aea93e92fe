"""JMS selector parsing and evaluation: Artemis's SelectorTest and UnknownHandlingSelectorTest facts,
three-valued logic, type rules, literals, and parse errors with their column and token."""
from __future__ import annotations

import math

import pytest

from journal_engine import ConfigError, Selector, SelectorError
from journal_engine.broker.selector import compile_selector
from journal_engine.limits import SELECTOR_NESTING_DEPTH_MAX

pytestmark = pytest.mark.same_on_both   # selectors parsed and evaluated in Python, no core object


def artemis_message() -> dict:
    """The properties of Artemis SelectorTest.createMessage()."""
    return {
        "name": "James", "location": "London",
        "byteProp": 123, "byteProp2": 33, "shortProp": 123, "intProp": 123, "longProp": 123,
        "floatProp": 123.0, "doubleProp": 123.0,
        "rank": 123, "version": 2,
        "quote": "'In God We Trust'", "foo": "_foo",
        "punctuation": "!#$&()*+,-./:;<=>?@[\\]^`{|}~",
        "endingUnderScore": "XD7xlJIQn_",
        "trueProp": True, "falseProp": False,
    }


HEADERS = {"JMSType": "selector-test", "JMSMessageID": "connection:1:1:1:1"}


def check(selector: str, expected: bool, properties: dict | None = None, headers: dict | None = HEADERS) -> None:
    props = artemis_message() if properties is None else properties
    assert Selector(selector).matches(props, headers) is expected, selector


# ------------------------------------------------------------------------------- Artemis SelectorTest

def test_boolean_selector():
    check("(trueProp OR falseProp) AND trueProp", True)
    check("(trueProp OR falseProp) AND falseProp", False)


def test_jms_header_identifiers_come_from_headers():
    headers = {"JMSType": "selector-test", "JMSMessageID": "id:test:1:1:1:1"}
    check("JMSType = 'selector-test'", True, headers=headers)
    check("JMSType = 'crap'", False, headers=headers)
    check("JMSMessageID = 'id:test:1:1:1:1'", True, headers=headers)
    check("JMSMessageID = 'id:not-test:1:1:1:1'", False, headers=headers)
    headers = {"JMSType": "1001"}
    check("JMSType='1001'", True, headers=headers)
    check("JMSType='1001' OR JMSType='1002'", True, headers=headers)
    check("JMSType = 'crap'", False, headers=headers)


def test_headers_take_precedence_over_properties():
    selector = Selector("JMSPriority > 4")
    assert selector.matches({"JMSPriority": 1}, {"JMSPriority": 9})
    assert not selector.matches({"JMSPriority": 9}, {"JMSPriority": 1})
    assert selector.matches({"JMSPriority": 9}, None)
    assert selector.matches({"JMSPriority": 9}, {"AMQAddress": "orders"})


def test_basic_selectors():
    check("name = 'James'", True)
    check("rank > 100", True)
    check("rank >= 123", True)
    check("rank >= 124", False)


@pytest.mark.parametrize("prop", ["byteProp", "shortProp", "intProp", "longProp", "floatProp", "doubleProp"])
def test_property_types_compare_numerically(prop):
    check(f"{prop} = 123", True)
    check(f"{prop} = 10", False)


def test_and_or_selectors():
    check("name = 'James' and rank < 200", True)
    check("name = 'James' and rank > 200", False)
    check("name = 'Foo' and rank < 200", False)
    check("unknown = 'Foo' and anotherUnknown < 200", False)
    check("name = 'James' or rank < 200", True)
    check("name = 'James' or rank > 200", True)
    check("name = 'Foo' or rank < 200", True)
    check("name = 'Foo' or rank > 200", False)
    check("unknown = 'Foo' or anotherUnknown < 200", False)


def test_arithmetic():
    check("rank + 2 = 125", True)
    check("(rank + 2) = 125", True)
    check("125 = (rank + 2)", True)
    check("rank + version = 125", True)
    check("rank + 2 < 124", False)
    check("name + '!' = 'James!'", True)
    check("rank - 2 = 121", True)
    check("rank - version = 121", True)
    check("rank - 2 > 122", False)
    check("rank * 2 = 246", True)
    check("rank * version = 246", True)
    check("rank * 2 < 130", False)
    check("rank / version = 61.5", True)       # division is always floating point
    check("rank / 3 > 100.0", False)
    check("rank / 3 > 100", False)
    check("version / 2 = 1", True)
    check("rank % 100 = 23", True)
    check("-rank = -123 AND +rank = 123 AND - -rank = 123", True)
    check("2 + 3 * 4 = 14 AND (2 + 3) * 4 = 20 AND 10 - 4 - 3 = 3", True)


def test_arithmetic_follows_java_double_rules_without_raising():
    check("rank / 0 > 1000000", True)          # +Infinity
    check("-rank / 0 < -1000000", True)        # -Infinity
    check("rank % 0 = rank % 0", True)         # NaN: Java's Double.equals holds NaN equal to NaN
    check("rank % 0 > 1000000", True)          # and Double.compareTo orders NaN above every number
    assert Selector("x / 0 = 1").evaluate({"x": 0}) is False
    assert Selector("name - 1 = 0").evaluate(artemis_message()) is None   # not a number: UNKNOWN


def test_string_concatenation_prints_like_java():
    check("name + 1.0 = 'James1.0'", True)
    check("name + trueProp = 'Jamestrue'", True)
    check("name + 1e10 = 'James1.0E10'", True)
    check("name + rank = 'James123'", True)


def test_between():
    check("rank between 100 and 150", True)
    check("rank between 10 and 120", False)
    check("rank not between 10 and 120", True)
    check("rank not between 100 and 150", False)
    check("rank between 123 and 123", True)
    check("rank between 150 and 100", False)


def test_in():
    check("name in ('James', 'Bob', 'Gromit')", True)
    check("name in ('Bob', 'James', 'Gromit')", True)
    check("name in ('Gromit', 'Bob', 'James')", True)
    check("name in ('Gromit', 'Bob', 'Cheddar')", False)
    check("name not in ('Gromit', 'Bob', 'Cheddar')", True)
    check("name in ('James')", True)


def test_is_null():
    check("dummy is null", True)
    check("dummy is not null", False)
    check("name is not null", True)
    check("name is null", False)


def test_like():
    props = artemis_message() | {"modelClassId": "com.whatever.something.foo.bar", "modelInstanceId": "170",
                                 "modelRequestError": "abc", "modelCorrelatedClientId": "whatever"}
    selector = ("modelClassId LIKE 'com.whatever.something.%' AND modelInstanceId = '170' AND "
                "(modelRequestError IS NULL OR modelCorrelatedClientId = 'whatever')")
    check(selector, True, props)
    props["modelCorrelatedClientId"] = "shouldFailNow"
    check(selector, False, props)
    props = artemis_message() | {"modelClassId": "com.whatever.something.foo.bar", "modelInstanceId": "170",
                                 "modelCorrelatedClientId": "shouldNotMatch"}
    check(selector, True, props)


def test_like_comparisons():
    check("quote LIKE '''In G_d We Trust'''", True)
    check("quote LIKE '''In Gd_ We Trust'''", False)
    check("quote NOT LIKE '''In G_d We Trust'''", False)
    check("quote NOT LIKE '''In Gd_ We Trust'''", True)
    check("foo LIKE '%oo'", True)
    check("foo LIKE '%ar'", False)
    check("foo NOT LIKE '%oo'", False)
    check("foo NOT LIKE '%ar'", True)
    check("foo LIKE '!_%' ESCAPE '!'", True)
    check("quote LIKE '!_%' ESCAPE '!'", False)
    check("foo NOT LIKE '!_%' ESCAPE '!'", False)
    check("quote NOT LIKE '!_%' ESCAPE '!'", True)
    check("punctuation LIKE '!#$&()*+,-./:;<=>?@[\\]^`{|}~'", True)   # regex metacharacters are literal


def test_like_escape_that_is_itself_a_wildcard_character():
    check("foo LIKE '%_%' ESCAPE '%'", True)
    check("endingUnderScore LIKE '_D7xlJIQn$_' ESCAPE '$'", True)
    check("endingUnderScore LIKE '_D7xlJIQn__' ESCAPE '_'", True)
    check("endingUnderScore LIKE '%D7xlJIQn%_' ESCAPE '%'", True)
    check("endingUnderScore LIKE '%D7xlJIQn%'  ESCAPE '%'", True)
    check("endingUnderScore LIKE '%D7xlJIQn%%'  ESCAPE '%'", False)     # literal '%' at the end
    check("endingUnderScore LIKE '_D7xlJIQn\\_' ESCAPE '\\'", True)
    check("endingUnderScore LIKE '%D7xlJIQn\\_' ESCAPE '\\'", True)


def test_like_matches_across_lines_and_whole_value_only():
    assert Selector("t LIKE 'a%b'").matches({"t": "a\nb"})
    assert not Selector("t LIKE 'a%'").matches({"t": "ba"})
    assert not Selector("t LIKE 'a_'").matches({"t": "a"})


def test_mats_henricson_use_cases():
    props = artemis_message()
    check("SessionserverId=1870414179", False, props)
    props["SessionserverId"] = 1870414179
    check("SessionserverId=1870414179", True, props)
    props["SessionserverId"] = 1234
    check("SessionserverId=1870414179", False, props)
    check("Command NOT IN ('MirrorLobbyRequest', 'MirrorLobbyReply')", False, props)
    props["Command"] = "Cheese"
    check("Command NOT IN ('MirrorLobbyRequest', 'MirrorLobbyReply')", True, props)
    props["Command"] = "MirrorLobbyRequest"
    check("Command NOT IN ('MirrorLobbyRequest', 'MirrorLobbyReply')", False, props)
    props["Command"] = "MirrorLobbyReply"
    check("Command NOT IN ('MirrorLobbyRequest', 'MirrorLobbyReply')", False, props)


@pytest.mark.parametrize("selector", [
    "1.0 < 1.1", "-1.1 < 1.0", "1.0E1 < 1.1E1", "-1.1E1 < 1.0E1",
    "1. < 1.1", "-1.1 < 1.", "1.E1 < 1.1E1", "-1.1E1 < 1.E1",
    ".1 < .5", "-.5 < .1", ".1E1 < .5E1", "-.5E1 < .1E1",
    "4E10 < 5E10", "5E8 < 5E10", "-4E10 < 2E10", "-5E8 < 2E2", "4E+10 < 5E+10", "4E-10 < 5E-10",
])
def test_float_literal_syntax(selector):
    check(selector, True)


def test_string_quote_parsing():
    check("quote = '''In God We Trust'''", True)
    assert Selector("s = 'it''s'").matches({"s": "it's"})
    assert Selector("s = ''").matches({"s": ""})


# ---------------------------------------------------------------- Artemis UnknownHandlingSelectorTest

UNKNOWN_PROPS = {"trueProp": True, "falseProp": False, "nullProp": None}


def evaluates(selector: str, expected: bool | None) -> None:
    """As UnknownHandlingSelectorTest asserts: the value, and what NOT of it selects."""
    assert Selector(selector).evaluate(UNKNOWN_PROPS) is expected, selector
    negated = Selector(f"not({selector})")
    assert negated.matches(UNKNOWN_PROPS) is (expected is False), f"not({selector})"


def test_not_truth_table():
    evaluates("trueProp", True)
    evaluates("falseProp", False)
    evaluates("unknownProp", None)
    assert Selector("not(trueProp)").evaluate(UNKNOWN_PROPS) is False
    assert Selector("not(falseProp)").evaluate(UNKNOWN_PROPS) is True
    assert Selector("not(unknownProp)").evaluate(UNKNOWN_PROPS) is None


def test_and_truth_table():
    evaluates("trueProp AND trueProp", True)
    evaluates("trueProp AND falseProp", False)
    evaluates("falseProp AND trueProp", False)
    evaluates("falseProp AND falseProp", False)
    evaluates("falseProp AND unknownProp", False)
    evaluates("unknownProp AND falseProp", False)
    evaluates("trueProp AND unknownProp", None)
    evaluates("unknownProp AND trueProp", None)
    evaluates("unknownProp AND unknownProp", None)


def test_or_truth_table():
    evaluates("trueProp OR trueProp", True)
    evaluates("trueProp OR falseProp", True)
    evaluates("falseProp OR trueProp", True)
    evaluates("trueProp OR unknownProp", True)
    evaluates("unknownProp OR trueProp", True)
    evaluates("falseProp OR falseProp", False)
    evaluates("falseProp OR unknownProp", None)
    evaluates("unknownProp OR falseProp", None)
    evaluates("unknownProp OR unknownProp", None)


@pytest.mark.parametrize("prop", ["unknownProp", "nullProp"])
@pytest.mark.parametrize("condition", [
    "= 0", "> 0", ">= 0", "< 0", "<= 0", "<> 0", "LIKE 'zero'", "NOT LIKE 'zero'", "IN ('zero')",
    "NOT IN ('zero')", "BETWEEN 1 AND 2", "NOT BETWEEN 1 AND 2",
])
def test_comparison_with_missing_or_null_is_unknown(prop, condition):
    evaluates(f"{prop} {condition}", None)


def test_is_null_and_is_not_null():
    evaluates("unknownProp IS NULL", True)
    evaluates("nullProp IS NULL", True)
    evaluates("trueProp IS NULL", False)
    evaluates("unknownProp IS NOT NULL", False)
    evaluates("nullProp IS NOT NULL", False)
    evaluates("trueProp IS NOT NULL", True)


@pytest.mark.parametrize("selector", ["-unknownProp = 0", "+unknownProp = 0", "unknownProp * 2 = 0",
                                      "unknownProp / 2 = 0", "unknownProp + 2 = 0", "unknownProp - 2 = 0"])
def test_arithmetic_with_null_is_unknown(selector):
    evaluates(selector, None)


def test_non_boolean_identifier_as_condition_is_unknown():
    assert Selector("name").evaluate({"name": "James"}) is None
    assert Selector("NOT name").evaluate({"name": "James"}) is None
    assert Selector("flag").matches({"flag": True})


# ------------------------------------------------------------------------------------------ type rules

def test_string_never_equals_a_number_and_the_comparison_is_false_not_unknown():
    props = {"s": "1", "n": 1, "b": True}
    assert Selector("s = 1").evaluate(props) is False
    assert Selector("NOT (s = 1)").evaluate(props) is True
    assert Selector("s <> 1").evaluate(props) is True
    assert Selector("n = '1'").evaluate(props) is False
    assert Selector("b = 1").evaluate(props) is False
    assert Selector("b = TRUE").evaluate(props) is True
    assert Selector("s > n").evaluate(props) is False
    assert Selector("s <= n").evaluate(props) is False


def test_numbers_promote_between_integer_and_floating_point():
    props = {"i": 3, "f": 3.0, "big": 2**53 + 1}
    assert Selector("i = f").matches(props)
    assert Selector("i = 3.0 AND f = 3 AND i >= 2.5 AND f < 4").matches(props)
    assert Selector("big = 9007199254740992.0").matches(props)   # Java promotes the long to a double


def test_strings_and_booleans_order_between_identifiers():
    props = {"a": "apple", "b": "banana", "t": True, "f": False}
    assert Selector("a < b").matches(props)
    assert Selector("t > f").matches(props)


def test_like_on_a_non_string_is_false_and_in_on_a_non_string_is_unknown():
    props = {"n": 5}
    assert Selector("n LIKE '5'").evaluate(props) is False
    assert Selector("n NOT LIKE '5'").evaluate(props) is True
    assert Selector("n IN ('5')").evaluate(props) is None
    assert Selector("n NOT IN ('5')").evaluate(props) is None


def test_not_binds_looser_than_comparison():
    props = {"x": 2, "s": "James"}
    assert Selector("NOT x = 1").matches(props)
    assert Selector("NOT x = 1").evaluate(props) == Selector("NOT (x = 1)").evaluate(props)
    assert not Selector("NOT s IS NOT NULL").matches(props)
    assert Selector("NOT s LIKE 'B%' AND NOT x BETWEEN 5 AND 6").matches(props)
    assert Selector("NOT NOT x = 2").matches(props)


def test_and_binds_tighter_than_or():
    props = {"a": 1, "b": 0, "c": 1}
    assert Selector("a = 1 OR b = 1 AND c = 0").matches(props)
    assert not Selector("(a = 1 OR b = 1) AND c = 0").matches(props)


# ------------------------------------------------------------------------------------- lexical matters

def test_keywords_are_case_insensitive_and_identifiers_case_sensitive():
    props = {"name": "x", "Name": "y"}
    assert Selector("name = 'x' aNd Name = 'y' Or NOT TRUE").matches(props)
    assert Selector("Name IS NOT NULL and NAME is null").matches(props)


def test_integer_literals_decimal_long_hex_octal():
    assert Selector("0x1F = 31 AND 0X1f = 31 AND 017 = 15 AND 0 = 0 AND 5L = 5 AND 5l = 5").matches({})
    assert Selector("x = 9223372036854775807").matches({"x": 2**63 - 1})


def test_identifiers_may_hold_dollar_underscore_and_digits():
    assert Selector("$a_1 = 1 AND _b$ = 2").matches({"$a_1": 1, "_b$": 2})


def test_comments_are_skipped():
    assert Selector("x = 1 -- the rest is a comment\n AND /* inline */ y = 2").matches({"x": 1, "y": 2})


@pytest.mark.parametrize("text", [None, "", "   ", "\n\t"])
def test_empty_selector_matches_everything(text):
    selector = Selector(text)
    assert selector.matches_everything
    assert selector.matches({})
    assert selector.matches(None)


def test_identifiers_are_reported():
    assert Selector("a = 1 AND (b IS NULL OR c IN ('x'))").identifiers == {"a", "b", "c"}


# ---------------------------------------------------------------------------------------------- errors

@pytest.mark.parametrize("text, column, token, fragment", [
    ("3+5", 1, "3", "needs a condition"),
    ("True AND 3+5", 10, "3", "needs a condition"),
    ("=TEST 'test'", 1, "=", "expected a value"),
    ("prop1 = prop2 foo AND string = 'Test'", 15, "foo", "unexpected identifier 'foo'"),
    ("a = 1 AMD  b = 2", 7, "AMD", "unexpected identifier 'AMD'"),
    ("x = NULL", 5, "NULL", "IS NULL"),
    ("x > 'a'", 5, "'a'", "only numbers"),
    ("x BETWEEN 'a' AND 'z'", 11, "'a'", "only numbers"),
    ("x != 3", 3, "!=", "use '<>'"),
    ("x = \"a\"", 5, '"', "single quotes"),
    ("x = 'abc", 5, "'abc", "unterminated string"),
    ("x IN (1, 2)", 7, "1", "string literal"),
    ("x LIKE 'a' ESCAPE 'ab'", 19, "'ab'", "exactly one character"),
    ("x LIKE y", 8, "y", "string literal"),
    ("(x = 1", 7, None, "')'"),
    ("x = ", 5, None, "expected a value"),
    ("x = 1 AND", 10, None, "expected a value"),
    ("XPATH '//a'", 1, "XPATH", "not supported"),
    ("TRUE = 1", 1, "TRUE", "boolean literal"),
    ("'a' + 1 IN ('x')", 1, "'a'", "IN needs an identifier"),
    ("x = 1 # 2", 7, "#", "unexpected character"),
    ("x IS 5", 6, "5", "expected NULL"),
    ("x BETWEEN 1 OR 2", 13, "OR", "expected AND"),
    ("x = 'a' * 2", 5, "'a'", "string literal cannot"),
    ("x = -'a'", 6, "'a'", "needs a number"),
    ("(x = 1) + 2 = 3", 2, "x", "condition"),
    ("x = 1 /* never closed", 7, "/*", "unterminated comment"),
    ("x = 09", 6, "9", "unexpected number '9'"),
])
def test_parse_errors_give_column_and_token(text, column, token, fragment):
    with pytest.raises(SelectorError) as caught:
        Selector(text)
    error = caught.value
    assert error.column == column, str(error)
    assert error.token == token, str(error)
    assert fragment in str(error)
    assert f"column {column}" in str(error)
    assert isinstance(error, ConfigError) and isinstance(error, ValueError)
    assert error.selector == text


def test_selector_of_the_wrong_type_is_a_type_error():
    with pytest.raises(TypeError):
        Selector(42)


def test_deep_nesting_is_refused_cleanly_not_with_recursion_error():
    shallow = "(" * SELECTOR_NESTING_DEPTH_MAX + "x = 1" + ")" * SELECTOR_NESTING_DEPTH_MAX
    assert Selector(shallow).matches({"x": 1})
    with pytest.raises(SelectorError, match="nesting deeper"):
        Selector("(" * (SELECTOR_NESTING_DEPTH_MAX + 5) + "x = 1" + ")" * (SELECTOR_NESTING_DEPTH_MAX + 5))
    with pytest.raises(SelectorError, match="nesting deeper"):
        Selector("NOT " * (SELECTOR_NESTING_DEPTH_MAX + 5) + "x = 1")


# ----------------------------------------------------------------------------- compile once, use often

def test_compiled_selector_is_reused():
    """How fast it matches is bench/test_bench_waits.py's (group selector)."""
    selector = compile_selector("color = 'red' AND weight BETWEEN 10 AND 20 AND kind IN ('a', 'b')")
    assert compile_selector("color = 'red' AND weight BETWEEN 10 AND 20 AND kind IN ('a', 'b')") is selector
    messages = [{"color": "red" if i % 2 else "blue", "weight": i % 30, "kind": "ab"[i % 2]} for i in range(2_000)]
    selected = sum(1 for m in messages if selector.matches(m))
    assert selected == sum(1 for m in messages if m["color"] == "red" and 10 <= m["weight"] <= 20 and m["kind"] in "ab")


def test_selector_equality_and_text():
    assert Selector("x = 1") == Selector("x = 1")
    assert hash(Selector("x = 1")) == hash(Selector("x = 1"))
    assert str(Selector("x = 1")) == "x = 1"
    assert math.isnan(float("nan"))   # the module's NaN handling relies on IEEE NaN
