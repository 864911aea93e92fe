"""JMS message selectors (queue filters): a tokenizer, a recursive-descent parser and a compiled evaluator.

``Selector(text).matches(properties, headers)`` is True only when the selector evaluates to TRUE;
FALSE and UNKNOWN both leave the message out. Parse once, evaluate many times: the parser turns the
text into a tree of Python closures, so evaluation does no parsing and no dictionary dispatch.

The language is the JMS 2.0 selector syntax with the extensions and value rules of Artemis's selector
(``artemis-selector``), which the tests replay case by case:

* literals: strings in single quotes (``''`` is a quote), integers (``123``, ``123L``, hex ``0x1F``,
  octal ``017``), approximate numbers (``1.5``, ``5.``, ``.5``, ``1e3``, ``1.5E-3``), TRUE, FALSE,
  NULL; keywords are case-insensitive, identifiers case-sensitive;
* operators, loosest first: OR; AND; NOT; ``=``, ``<>``, IS [NOT] NULL; ``<``, ``>``, ``<=``,
  ``>=``, [NOT] LIKE ... [ESCAPE ...], [NOT] BETWEEN ... AND ..., [NOT] IN (...); ``+``, ``-``;
  ``*``, ``/``, ``%``; unary ``+`` and ``-``; parentheses. Comments ``-- ...`` and ``/* ... */``;
* SQL three-valued logic: a missing or null identifier makes a comparison UNKNOWN, NOT UNKNOWN is
  UNKNOWN, FALSE AND UNKNOWN is FALSE, TRUE OR UNKNOWN is TRUE, ``x IS NULL`` is TRUE for a missing x;
* type rules: numbers compare across integer and floating point (the integer is promoted); a string
  never equals a number or a boolean (FALSE, so ``NOT ('1' = 1)`` is TRUE), LIKE on a non-string is
  FALSE, IN on a non-string is UNKNOWN; ``/`` always divides as floating point; ``+`` with a string
  on the left concatenates.

Errors are ``SelectorError`` (a ConfigError, so a ValueError) with the 1-based column and the
offending token. Checks made while parsing, as Artemis makes them: ``x = NULL`` (use IS NULL), a
string or boolean literal ordered with ``<``/``>``/BETWEEN, a non-boolean where a condition is needed
(``3 + 5``, ``TRUE AND 3``), IN on something other than an identifier, an ESCAPE that is not one
character. ``XPATH``/``XQUERY`` selectors are refused as unsupported.

One deliberate difference from Artemis's grammar: NOT binds looser than comparisons, as JMS and SQL
define it, so ``NOT x = 1`` means ``NOT (x = 1)`` (Artemis parses it as ``(NOT x) = 1``).
"""
from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass
from decimal import Decimal
from typing import Any

from ..limits import SELECTOR_LENGTH_MAX, SELECTOR_NESTING_DEPTH_MAX
from ..errors import SelectorError

__all__ = ["Selector", "SelectorError", "compile_selector", "KEYWORDS"]

KEYWORDS = frozenset({"NOT", "AND", "OR", "BETWEEN", "LIKE", "ESCAPE", "IN", "IS", "TRUE", "FALSE", "NULL",
                      "XPATH", "XQUERY"})

Env = Callable[[Any, Any], Any]     # compiled node: (properties, headers) -> value

# ---------------------------------------------------------------------------------------------- tokens

_FLOAT_RE = re.compile(r"\d+\.\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+")
_HEX_RE = re.compile(r"0[xX][0-9a-fA-F]+")
_DECIMAL_RE = re.compile(r"[1-9]\d*[lL]?")
_OCTAL_RE = re.compile(r"0[0-7]*")
_OPERATORS = ("<>", "<=", ">=", "=", "<", ">", "+", "-", "*", "/", "%", "(", ")", ",")
_WHITESPACE = " \t\n\r\f"


class _Token:
    __slots__ = ("kind", "value", "text", "pos")

    def __init__(self, kind: str, value: Any, text: str, pos: int) -> None:
        self.kind = kind        # KW, ID, STR, NUM, OP, EOF
        self.value = value      # keyword upper-cased, identifier, decoded string, number, operator
        self.text = text        # as written
        self.pos = pos          # 0-based offset

    def describe(self) -> str:
        if self.kind == "EOF":
            return "end of selector"
        return {"KW": "keyword", "ID": "identifier", "STR": "string", "NUM": "number", "OP": "operator"}[self.kind] \
            + f" {self.text!r}"


def _is_identifier_start(c: str) -> bool:
    return c.isalpha() or c == "_" or c == "$"


def _is_identifier_part(c: str) -> bool:
    return c.isalnum() or c == "_" or c == "$"


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c in _WHITESPACE:
            i += 1
            continue
        if text.startswith("--", i):
            end = text.find("\n", i)
            i = n if end < 0 else end + 1
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise SelectorError(text, "unterminated comment", column=i + 1, token="/*")
            i = end + 2
            continue
        if c == "'":
            j = i + 1
            parts: list[str] = []
            while True:
                k = text.find("'", j)
                if k < 0:
                    raise SelectorError(text, "unterminated string literal", column=i + 1, token=text[i:i + 20])
                parts.append(text[j:k])
                if k + 1 < n and text[k + 1] == "'":
                    parts.append("'")
                    j = k + 2
                    continue
                j = k + 1
                break
            tokens.append(_Token("STR", "".join(parts), text[i:j], i))
            i = j
            continue
        if c.isdigit() or (c == "." and i + 1 < n and text[i + 1].isdigit()):
            best = None
            for kind, regex in (("float", _FLOAT_RE), ("hex", _HEX_RE), ("decimal", _DECIMAL_RE), ("octal", _OCTAL_RE)):
                m = regex.match(text, i)
                if m and (best is None or m.end() > best[1].end()):
                    best = (kind, m)
            assert best is not None, "a digit always starts some numeric literal"
            kind, m = best
            image = m.group()
            if kind == "float":
                value: Any = float(image)
            elif kind == "hex":
                value = int(image[2:], 16)
            elif kind == "decimal":
                value = int(image.rstrip("lL"))
            else:
                value = int(image, 8)
            tokens.append(_Token("NUM", value, image, i))
            i = m.end()
            continue
        if _is_identifier_start(c):
            j = i + 1
            while j < n and _is_identifier_part(text[j]):
                j += 1
            word = text[i:j]
            upper = word.upper()
            if upper in KEYWORDS:
                tokens.append(_Token("KW", upper, word, i))
            else:
                tokens.append(_Token("ID", word, word, i))
            i = j
            continue
        for op in _OPERATORS:
            if text.startswith(op, i):
                tokens.append(_Token("OP", op, op, i))
                i += len(op)
                break
        else:
            if text.startswith("!=", i):
                raise SelectorError(text, "'!=' is not a selector operator; use '<>' for not-equal",
                                    column=i + 1, token="!=")
            if c == '"':
                raise SelectorError(text, "string literals take single quotes", column=i + 1, token=c)
            raise SelectorError(text, "unexpected character", column=i + 1, token=c)
    tokens.append(_Token("EOF", None, "", n))
    return tokens


# ------------------------------------------------------------------------------------------ value rules

def _is_number(v: Any) -> bool:
    return (type(v) is int or type(v) is float) or (isinstance(v, (int, float)) and not isinstance(v, bool))


def _number_compare(a: Any, b: Any) -> int:
    """Java's Number promotion then compareTo: a double total order (NaN above all, -0.0 below 0.0)."""
    if type(a) is float or type(b) is float or isinstance(a, float) or isinstance(b, float):
        try:
            x, y = float(a), float(b)
        except OverflowError:       # an integer beyond the double range: compare exactly
            return (a > b) - (a < b)
        if x < y:
            return -1
        if x > y:
            return 1
        if x == y:
            if x == 0.0:
                return (math.copysign(1.0, x) > math.copysign(1.0, y)) - (math.copysign(1.0, x) < math.copysign(1.0, y))
            return 0
        x_nan, y_nan = math.isnan(x), math.isnan(y)
        if x_nan and y_nan:
            return 0
        return 1 if x_nan else -1
    return (a > b) - (a < b)


def _equal(left: Any, right: Any) -> bool:
    """Both operands known (not None). Different kinds are never equal (FALSE, not UNKNOWN)."""
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    if isinstance(left, str):
        return isinstance(right, str) and left == right
    if _is_number(left):
        return _is_number(right) and _number_compare(left, right) == 0
    return type(left) is type(right) and left == right


def _order(left: Any, right: Any) -> int | None:
    """Comparison result, or None when the kinds cannot be ordered (the comparison is then FALSE)."""
    if isinstance(left, bool) or isinstance(right, bool):
        if isinstance(left, bool) and isinstance(right, bool):
            return (left > right) - (left < right)
        return None
    if _is_number(left):
        return _number_compare(left, right) if _is_number(right) else None
    if isinstance(left, str):
        return ((left > right) - (left < right)) if isinstance(right, str) else None
    if type(left) is type(right):
        try:
            return (left > right) - (left < right)
        except TypeError:
            return None
    return None


def _java_string(v: Any) -> str:
    """How Java's String concatenation prints a value (``'a' + 1.0`` is ``a1.0``)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        if math.isnan(v):
            return "NaN"
        if math.isinf(v):
            return "Infinity" if v > 0 else "-Infinity"
        if v == 0.0 or 1e-3 <= abs(v) < 1e7:
            return repr(v) if "e" not in repr(v) else format(v, "f")
        sign, digits, exponent = Decimal(repr(v)).as_tuple()
        digit_text = "".join(map(str, digits)).rstrip("0") or "0"
        scale = len(digits) - 1 + int(exponent)
        mantissa = digit_text[0] + "." + (digit_text[1:] or "0")
        return ("-" if sign else "") + f"{mantissa}E{scale}"
    return str(v)


def _arith(op: str, left: Any, right: Any) -> Any:
    """Both operands known. Returns None (UNKNOWN) when the operands are not numbers."""
    if op == "+" and isinstance(left, str):
        return left + _java_string(right)
    if not (_is_number(left) and _is_number(right)):
        return None
    if op == "/" or op == "%" or isinstance(left, float) or isinstance(right, float):
        x, y = float(left), float(right)
        if op == "+":
            return x + y
        if op == "-":
            return x - y
        if op == "*":
            return x * y
        if op == "/":
            if y == 0.0:
                if x == 0.0 or math.isnan(x):
                    return math.nan
                return math.copysign(math.inf, x) * math.copysign(1.0, y)
            return x / y
        if y == 0.0 or math.isinf(x) or math.isnan(x) or math.isnan(y):
            return math.nan
        return math.fmod(x, y)     # Java's % on doubles keeps the dividend's sign
    if op == "+":
        return left + right
    if op == "-":
        return left - right
    return left * right


def _like_regex(pattern: str, escape: str | None) -> re.Pattern[str]:
    """LIKE pattern to a regex: % any run, _ one character; ESCAPE before %, _ or itself makes it literal.

    An escape character followed by anything else keeps its own meaning (so with ESCAPE '%' a lone
    '%' is still a wildcard), which is how Artemis reads ``'%D7%_' ESCAPE '%'``.
    """
    parts: list[str] = []
    i = 0
    n = len(pattern)
    while i < n:
        c = pattern[i]
        if escape is not None and c == escape and i + 1 < n and pattern[i + 1] in ("%", "_", escape):
            parts.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        if c == "%":
            parts.append(".*")
        elif c == "_":
            parts.append(".")
        else:
            parts.append(re.escape(c))
        i += 1
    return re.compile("".join(parts), re.DOTALL)


# -------------------------------------------------------------------------------------------- the tree

@dataclass(frozen=True, slots=True, eq=False)
class _Node:
    """A parsed expression: ``boolean`` says it yields TRUE/FALSE/UNKNOWN, ``is_constant`` that it is a
    literal ``value``."""

    fn: Env
    token: _Token
    _: KW_ONLY
    boolean: bool = False
    is_identifier: bool = False
    is_constant: bool = False
    value: Any = None


def _constant(value: Any, token: _Token) -> _Node:
    return _Node(lambda p, h: value, token, boolean=isinstance(value, bool) or value is None,
                 is_constant=True, value=value)


def _identifier(name: str, token: _Token) -> _Node:
    def lookup(p: Any, h: Any) -> Any:
        if h is not None:
            v = h.get(name, _MISSING)
            if v is not _MISSING:
                return v
        return p.get(name) if p is not None else None
    return _Node(lookup, token, is_identifier=True)


_MISSING = object()


def _as_condition(node: _Node) -> Env:
    """The node's value as TRUE/FALSE/UNKNOWN: an identifier holding a non-boolean is UNKNOWN."""
    fn = node.fn
    if node.boolean:
        return fn

    def cast(p: Any, h: Any) -> Any:
        v = fn(p, h)
        return v if v is True or v is False else None
    return cast


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokenize(text)
        self.index = 0
        self.depth = 0
        self.identifiers: set[str] = set()

    # -- token helpers
    @property
    def token(self) -> _Token:
        return self.tokens[self.index]

    def peek(self, offset: int = 1) -> _Token:
        return self.tokens[min(self.index + offset, len(self.tokens) - 1)]

    def advance(self) -> _Token:
        token = self.tokens[self.index]
        if token.kind != "EOF":
            self.index += 1
        return token

    def at_keyword(self, *words: str) -> bool:
        return self.token.kind == "KW" and self.token.value in words

    def at_operator(self, *ops: str) -> bool:
        return self.token.kind == "OP" and self.token.value in ops

    def error(self, problem: str, token: _Token | None = None) -> SelectorError:
        token = token or self.token
        return SelectorError(self.text, problem, column=token.pos + 1,
                             token=None if token.kind == "EOF" else token.text)

    def expect_keyword(self, word: str, context: str) -> _Token:
        if not self.at_keyword(word):
            raise self.error(f"expected {word} {context}, found {self.token.describe()}")
        return self.advance()

    def expect_operator(self, op: str, context: str) -> _Token:
        if not self.at_operator(op):
            raise self.error(f"expected {op!r} {context}, found {self.token.describe()}")
        return self.advance()

    def expect_string(self, context: str) -> _Token:
        if self.token.kind != "STR":
            raise self.error(f"expected a string literal {context}, found {self.token.describe()}")
        return self.advance()

    def enter(self) -> None:
        self.depth += 1
        if self.depth > SELECTOR_NESTING_DEPTH_MAX:
            raise self.error(f"nesting deeper than {SELECTOR_NESTING_DEPTH_MAX} levels")

    # -- checks made while parsing
    def require_condition(self, node: _Node, where: str) -> Env:
        if node.boolean or node.is_identifier:
            return _as_condition(node)
        raise self.error(f"{where} needs a condition (a comparison, TRUE/FALSE or an identifier), "
                         f"not a {'literal' if node.is_constant else 'value expression'}", node.token)

    def check_equality_operand(self, node: _Node, op: str) -> None:
        if node.is_constant and node.value is None:
            raise self.error(f"NULL cannot be compared with {op!r}; use IS NULL or IS NOT NULL", node.token)

    def check_ordered_operand(self, node: _Node, op: str) -> None:
        if node.is_constant and not _is_number(node.value):
            raise self.error(f"only numbers can be compared with {op}; a "
                             f"{'string' if isinstance(node.value, str) else 'boolean or NULL'} literal cannot",
                             node.token)
        if node.boolean:
            raise self.error(f"a condition cannot be compared with {op}", node.token)

    def check_arithmetic_operand(self, node: _Node, op: str) -> None:
        if node.boolean:
            raise self.error(f"a condition or boolean literal cannot be an operand of {op!r}", node.token)
        if node.is_constant and isinstance(node.value, str) and op != "+":
            raise self.error(f"a string literal cannot be an operand of {op!r}", node.token)

    # -- grammar
    def parse(self) -> Env:
        if not self.text.strip():
            return lambda p, h: True
        node = self.parse_or()
        if self.token.kind != "EOF":
            raise self.error(f"unexpected {self.token.describe()}; expected AND, OR, an operator or the end")
        return self.require_condition(node, "a selector")

    def parse_or(self) -> _Node:
        return self.parse_connective("OR", self.parse_and, True)

    def parse_and(self) -> _Node:
        return self.parse_connective("AND", self.parse_not, False)

    def parse_connective(self, keyword: str, parse_operand, decisive: bool) -> _Node:
        """OR (decisive True) or AND (decisive False), in SQL's three-valued logic: an operand
        equal to `decisive` decides; otherwise the result is unknown (None) if either is unknown."""
        left = parse_operand()
        while self.at_keyword(keyword):
            self.advance()
            right = parse_operand()
            lf = self.require_condition(left, keyword)
            rf = self.require_condition(right, keyword)

            def connective(p: Any, h: Any, lf: Env = lf, rf: Env = rf, decisive: bool = decisive) -> Any:
                lv = lf(p, h)
                if lv is decisive:
                    return decisive
                rv = rf(p, h)
                if rv is decisive:
                    return decisive
                return None if lv is None or rv is None else not decisive
            left = _Node(connective, left.token, boolean=True)
        return left

    def parse_not(self) -> _Node:
        if self.at_keyword("NOT"):
            token = self.advance()
            self.enter()
            operand = self.parse_not()
            self.depth -= 1
            fn = self.require_condition(operand, "NOT")

            def negate(p: Any, h: Any, fn: Env = fn) -> Any:
                v = fn(p, h)
                return None if v is None else not v
            return _Node(negate, token, boolean=True)
        return self.parse_equality()

    def parse_equality(self) -> _Node:
        left = self.parse_comparison()
        while True:
            if self.at_operator("=", "<>"):
                op = self.advance().value
                right = self.parse_comparison()
                self.check_equality_operand(left, op)
                self.check_equality_operand(right, op)
                if left.is_constant and right.is_constant and isinstance(left.value, bool) != isinstance(right.value, bool):
                    raise self.error(f"a boolean literal cannot be compared with {right.token.text!r}", left.token)
                left = self.make_equality(op, left, right)
            elif self.at_keyword("IS"):
                self.advance()
                negated = False
                if self.at_keyword("NOT"):
                    self.advance()
                    negated = True
                self.expect_keyword("NULL", "after IS" + (" NOT" if negated else ""))
                fn = left.fn

                def is_null(p: Any, h: Any, fn: Env = fn, negated: bool = negated) -> bool:
                    return (fn(p, h) is None) != negated
                left = _Node(is_null, left.token, boolean=True)
            else:
                return left

    @staticmethod
    def make_equality(op: str, left: _Node, right: _Node) -> _Node:
        lf, rf = left.fn, right.fn

        negated = op != "="

        def equality(lv: Any, rv: Any) -> bool:
            return bool(_equal(lv, rv)) != negated
        return _Node(_on_known(lf, rf, equality), left.token, boolean=True)

    def parse_comparison(self) -> _Node:
        left = self.parse_additive()
        while True:
            if self.at_operator("<", ">", "<=", ">="):
                op = self.advance().value
                right = self.parse_additive()
                self.check_ordered_operand(left, op)
                self.check_ordered_operand(right, op)
                left = _Node(_ordered(op, left.fn, right.fn), left.token, boolean=True)
                continue
            negated = False
            if self.at_keyword("NOT") and self.peek().kind == "KW" and self.peek().value in ("LIKE", "BETWEEN", "IN"):
                self.advance()
                negated = True
            if self.at_keyword("LIKE"):
                left = self.parse_like(left, negated)
            elif self.at_keyword("BETWEEN"):
                left = self.parse_between(left, negated)
            elif self.at_keyword("IN"):
                left = self.parse_in(left, negated)
            else:
                return left

    def parse_like(self, operand: _Node, negated: bool) -> _Node:
        self.advance()
        pattern = self.expect_string("after LIKE").value
        escape = None
        if self.at_keyword("ESCAPE"):
            self.advance()
            escape_token = self.expect_string("after ESCAPE")
            escape = escape_token.value
            if len(escape) != 1:
                raise self.error("the ESCAPE literal must be exactly one character", escape_token)
        regex = _like_regex(pattern, escape)
        fn = operand.fn

        def like(p: Any, h: Any) -> Any:
            v = fn(p, h)
            if v is None:
                return None
            if not isinstance(v, str):
                return negated      # LIKE on a non-string is FALSE, so NOT LIKE is TRUE
            return (regex.fullmatch(v) is not None) != negated
        return _Node(like, operand.token, boolean=True)

    def parse_between(self, operand: _Node, negated: bool) -> _Node:
        keyword = self.advance().text.upper()
        low = self.parse_additive()
        self.expect_keyword("AND", "between the BETWEEN bounds")
        high = self.parse_additive()
        for node in (operand, low, high):
            self.check_ordered_operand(node, ("NOT " if negated else "") + keyword)
        vf, lf, hf = operand.fn, low.fn, high.fn
        # NOT BETWEEN is x < lo OR x > hi (TRUE decides), BETWEEN x >= lo AND x <= hi (FALSE decides)
        decisive = negated
        low_accept, high_accept = (_below, _above) if negated else (_at_least, _at_most)

        def between(p: Any, h: Any) -> Any:
            v, lo, hi = vf(p, h), lf(p, h), hf(p, h)
            a = _compare3(v, lo, low_accept)
            if a is decisive:
                return decisive
            b = _compare3(v, hi, high_accept)
            if b is decisive:
                return decisive
            return None if a is None or b is None else not decisive
        return _Node(between, operand.token, boolean=True)

    def parse_in(self, operand: _Node, negated: bool) -> _Node:
        in_token = self.advance()
        if not operand.is_identifier:
            raise self.error("IN needs an identifier on its left", operand.token if operand.token else in_token)
        self.expect_operator("(", "after IN")
        values = [self.expect_string("in the IN list").value]
        while self.at_operator(","):
            self.advance()
            values.append(self.expect_string("in the IN list").value)
        self.expect_operator(")", "to close the IN list")
        members = frozenset(values)
        fn = operand.fn

        def within(p: Any, h: Any) -> Any:
            v = fn(p, h)
            if v is None or not isinstance(v, str):
                return None
            return (v in members) != negated
        return _Node(within, operand.token, boolean=True)

    def parse_additive(self) -> _Node:
        left = self.parse_multiplicative()
        while self.at_operator("+", "-"):
            op = self.advance().value
            right = self.parse_multiplicative()
            left = self.make_arithmetic(op, left, right)
        return left

    def parse_multiplicative(self) -> _Node:
        left = self.parse_unary()
        while self.at_operator("*", "/", "%"):
            op = self.advance().value
            right = self.parse_unary()
            left = self.make_arithmetic(op, left, right)
        return left

    def make_arithmetic(self, op: str, left: _Node, right: _Node) -> _Node:
        self.check_arithmetic_operand(left, op)
        self.check_arithmetic_operand(right, op)
        return _Node(_on_known(left.fn, right.fn, functools.partial(_arith, op)), left.token)

    def parse_unary(self) -> _Node:
        if self.at_operator("+", "-"):
            token = self.advance()
            self.enter()
            operand = self.parse_unary()
            self.depth -= 1
            if operand.boolean or (operand.is_constant and not _is_number(operand.value)):
                raise self.error(f"unary {token.value!r} needs a number", operand.token)
            if token.value == "+":
                return operand
            if operand.is_constant:
                return _constant(-operand.value, token)
            fn = operand.fn

            def negative(p: Any, h: Any) -> Any:
                v = fn(p, h)
                return -v if _is_number(v) else None
            return _Node(negative, token)
        return self.parse_primary()

    def parse_primary(self) -> _Node:
        token = self.token
        if token.kind == "STR" or token.kind == "NUM":
            self.advance()
            return _constant(token.value, token)
        if token.kind == "ID":
            self.advance()
            self.identifiers.add(token.value)
            return _identifier(token.value, token)
        if token.kind == "KW":
            if token.value in ("TRUE", "FALSE", "NULL"):
                self.advance()
                return _constant({"TRUE": True, "FALSE": False, "NULL": None}[token.value], token)
            if token.value in ("XPATH", "XQUERY"):
                raise self.error(f"{token.value} selectors are not supported")
            raise self.error(f"unexpected keyword {token.text!r}; expected a value, an identifier or '('")
        if self.at_operator("("):
            self.advance()
            self.enter()
            inner = self.parse_or()
            self.depth -= 1
            self.expect_operator(")", "to close the parenthesis")
            return inner
        raise self.error(f"expected a value, an identifier or '(', found {token.describe()}")


def _below(c: int) -> bool:
    return c < 0


def _above(c: int) -> bool:
    return c > 0


def _at_most(c: int) -> bool:
    return c <= 0


def _at_least(c: int) -> bool:
    return c >= 0


_ACCEPT = {"<": _below, ">": _above, "<=": _at_most, ">=": _at_least}


def _compare3(left: Any, right: Any, accept: Callable[[int], bool]) -> bool | None:
    """An ordering comparison in three-valued logic: UNKNOWN for a null side, FALSE for unorderable kinds."""
    if left is None or right is None:
        return None
    c = _order(left, right)
    return False if c is None else accept(c)


def _ordered(op: str, lf: Env, rf: Env) -> Env:
    accept = _ACCEPT[op]

    def compare(lv: Any, rv: Any) -> bool:
        c = _order(lv, rv)
        return False if c is None else accept(c)
    return _on_known(lf, rf, compare)


def _on_known(lf: Env, rf: Env, combine: Callable[[Any, Any], Any]) -> Env:
    """A binary operator in three-valued logic: UNKNOWN (None) when either operand is, else
    ``combine`` of the two values (the right operand is not evaluated after an unknown left one)."""
    def on_known(p: Any, h: Any) -> Any:
        lv = lf(p, h)
        if lv is None:
            return None
        rv = rf(p, h)
        return None if rv is None else combine(lv, rv)
    return on_known


# ------------------------------------------------------------------------------------------ public API

class Selector:
    """A compiled JMS selector. An empty or None selector matches every message.

    ``matches(properties, headers)`` looks identifiers up in ``headers`` first (the header fields the
    broker exposes, such as ``JMSPriority`` or ``AMQAddress``), then in ``properties``; both are
    mappings and either may be None. Property values: None, bool, int, float, str (anything else is
    only ever equal to an equal value of the same type).
    """

    __slots__ = ("text", "identifiers", "_fn", "_match_all")

    def __init__(self, text: str | None = None) -> None:
        if text is not None and not isinstance(text, str):
            raise TypeError(f"a selector is a str, not {type(text).__name__}")
        self.text = text or ""
        if len(self.text) > SELECTOR_LENGTH_MAX:
            raise SelectorError(self.text[:60] + "...", f"longer than {SELECTOR_LENGTH_MAX} characters",
                                column=SELECTOR_LENGTH_MAX + 1, token=None)
        parser = _Parser(self.text)
        self._fn = parser.parse()
        self._match_all = not self.text.strip()
        self.identifiers: frozenset[str] = frozenset(parser.identifiers)

    @property
    def matches_everything(self) -> bool:
        """True for the empty selector (no filter)."""
        return self._match_all

    def evaluate(self, properties: Mapping[str, Any] | None = None,
                 headers: Mapping[str, Any] | None = None) -> bool | None:
        """TRUE, FALSE or UNKNOWN (None)."""
        return self._fn(properties, headers)

    def matches(self, properties: Mapping[str, Any] | None = None,
                headers: Mapping[str, Any] | None = None) -> bool:
        """True only when the selector evaluates to TRUE for this message."""
        return self._fn(properties, headers) is True

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Selector) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"Selector({self.text!r})"

    def __str__(self) -> str:
        return self.text


@functools.lru_cache(maxsize=1024)
def compile_selector(text: str | None) -> Selector:
    """A cached ``Selector(text)``: queues sharing a filter share its compiled form."""
    return Selector(text)
