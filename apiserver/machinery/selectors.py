"""Label and field selectors, parsed and matched exactly as k8s.io/apimachinery v0.35 does.

Clients (kubectl, controllers, the garbage collector) send selectors written for a Go
apiserver and compare our answers and error texts with it, so the grammar, the
normalised ``String()`` form and the messages follow apimachinery's ``labels.Parse``,
``fields.ParseSelector``, ``labels.NewRequirement`` and ``content.IsLabelKey``/
``IsLabelValue`` to the byte.  The label key/value rules live here and nowhere else;
:mod:`apiserver.machinery.validation` reuses them for ``metadata.labels`` and friends.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from apiserver.machinery.errors import bad_request
from apiserver.machinery.golang import byte_len, go_bad_value, go_quote, parse_int64

# ---------------------------------------------------------------------------
# Content rules (k8s.io/apimachinery/pkg/api/validate/content).
# ---------------------------------------------------------------------------

LABEL_KEY_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
LABEL_VALUE_FMT = "(" + LABEL_KEY_FMT + ")?"
DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN_FMT = DNS1123_LABEL_FMT + "(\\." + DNS1123_LABEL_FMT + ")*"
DNS1123_SUBDOMAIN_ERR = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                         "characters, '-' or '.', and must start and end with an alphanumeric character")
LABEL_KEY_MAX = 63
LABEL_VALUE_MAX = 63
DNS1123_LABEL_MAX = 63
DNS1123_SUBDOMAIN_MAX = 253

_LABEL_KEY_ERR = ("must consist of alphanumeric characters, '-', '_' or '.', "
                  "and must start and end with an alphanumeric character")
_LABEL_VALUE_ERR = ("a valid label must be an empty string or consist of alphanumeric characters, "
                    "'-', '_' or '.', and must start and end with an alphanumeric character")

_LABEL_KEY_RE = re.compile(LABEL_KEY_FMT)
_LABEL_VALUE_RE = re.compile(LABEL_VALUE_FMT)
DNS1123_LABEL_RE = re.compile(DNS1123_LABEL_FMT)
DNS1123_SUBDOMAIN_RE = re.compile(DNS1123_SUBDOMAIN_FMT)


def regex_error(msg: str, fmt: str, *examples: str) -> str:
    """kube's ``RegexError`` text, including its double space before each ``or``."""
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{msg} (e.g. {shown}regex used for validation is '{fmt}')"


def max_len_error(length: int, unit: str = "bytes") -> str:
    """``MaxLenError``: the ``content`` package says bytes, ``util/validation`` says characters."""
    return f"must be no more than {length} {unit}"


def label_key_errors(key: str) -> list[str]:
    """``content.IsLabelKey`` (a.k.a. ``IsQualifiedName``): one message per broken rule."""
    errs: list[str] = []
    parts = key.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            if byte_len(prefix) > DNS1123_SUBDOMAIN_MAX:
                errs.append("prefix part " + max_len_error(DNS1123_SUBDOMAIN_MAX))
            if not DNS1123_SUBDOMAIN_RE.fullmatch(prefix):
                errs.append("prefix part " + regex_error(DNS1123_SUBDOMAIN_ERR, DNS1123_SUBDOMAIN_FMT,
                                                         "example.com"))
    else:
        return ["a valid label key " + regex_error(_LABEL_KEY_ERR, LABEL_KEY_FMT, "MyName", "my.name", "123-abc")
                + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"]
    if not name:
        errs.append("name part must be non-empty")
    elif byte_len(name) > LABEL_KEY_MAX:
        errs.append("name part " + max_len_error(LABEL_KEY_MAX))
    if not _LABEL_KEY_RE.fullmatch(name):
        errs.append("name part " + regex_error(_LABEL_KEY_ERR, LABEL_KEY_FMT, "MyName", "my.name", "123-abc"))
    return errs


def label_value_errors(value: str) -> list[str]:
    """``content.IsLabelValue``: empty is fine, else ≤ 63 bytes of ``[-A-Za-z0-9_.]``."""
    errs: list[str] = []
    if byte_len(value) > LABEL_VALUE_MAX:
        errs.append(max_len_error(LABEL_VALUE_MAX))
    if not _LABEL_VALUE_RE.fullmatch(value):
        errs.append(regex_error(_LABEL_VALUE_ERR, LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return errs


def path_segment_name_errors(name: str, prefix: bool = False) -> list[str]:
    """``content.IsPathSegmentName`` (or ``...Prefix``): names end up in URLs and etcd keys."""
    if not prefix and name in (".", ".."):
        return [f"may not be '{name}'"]
    return [f"may not contain '{c}'" for c in ("/", "%") if c in name]


# ---------------------------------------------------------------------------
# Label selectors.
# ---------------------------------------------------------------------------


class Operator(StrEnum):
    """``selection.Operator`` values (their spelling shows up in error messages)."""

    DOES_NOT_EXIST = "!"
    EQUALS = "="
    DOUBLE_EQUALS = "=="
    IN = "in"
    NOT_EQUALS = "!="
    NOT_IN = "notin"
    EXISTS = "exists"
    GREATER_THAN = "gt"
    LESS_THAN = "lt"


_BINARY_OPERATORS = (Operator.IN, Operator.NOT_IN, Operator.EQUALS, Operator.DOUBLE_EQUALS,
                     Operator.NOT_EQUALS, Operator.GREATER_THAN, Operator.LESS_THAN)
def _aggregate(messages: Sequence[str]) -> str:
    """``utilerrors.NewAggregate(...).Error()``: one message bare, several deduplicated in brackets."""
    seen: list[str] = []
    for m in messages:
        if m not in seen:
            seen.append(m)
    return seen[0] if len(seen) == 1 else "[" + ", ".join(seen) + "]"


def _invalid(path: str, value: Any, detail: str) -> str:
    return f"{path}: Invalid value: {go_bad_value(value)}: {detail}"


@dataclass(frozen=True)
class Requirement:
    """One ``key op values`` term; build it through :func:`new_requirement` to get kube's checks."""

    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        if op in (Operator.IN, Operator.EQUALS, Operator.DOUBLE_EQUALS):
            return self.key in labels and labels[self.key] in self.values
        if op in (Operator.NOT_IN, Operator.NOT_EQUALS):
            # A missing key satisfies notin/!= (kube semantics, not SQL's).
            return self.key not in labels or labels[self.key] not in self.values
        if op is Operator.EXISTS:
            return self.key in labels
        if op is Operator.DOES_NOT_EXIST:
            return self.key not in labels
        if op in (Operator.GREATER_THAN, Operator.LESS_THAN):
            if self.key not in labels or len(self.values) != 1:
                return False
            have, want = parse_int64(labels[self.key]), parse_int64(self.values[0])
            if have is None or want is None:
                return False
            return have > want if op is Operator.GREATER_THAN else have < want
        return False

    def to_string(self) -> str:
        """``Requirement.String()``: values sorted, ``in``/``notin`` spaced and parenthesised."""
        op = self.operator
        if op is Operator.EXISTS:
            return self.key
        if op is Operator.DOES_NOT_EXIST:
            return "!" + self.key
        sym = {Operator.IN: " in ", Operator.NOT_IN: " notin ", Operator.GREATER_THAN: ">",
               Operator.LESS_THAN: "<"}.get(op, op.value)
        vals = ",".join(sorted(self.values))
        if op in (Operator.IN, Operator.NOT_IN):
            vals = f"({vals})"
        return f"{self.key}{sym}{vals}"

    def __str__(self) -> str:
        return self.to_string()


def _requirement_errors(key: str, op: Operator, values: Sequence[str] | None) -> list[str]:
    """``labels.NewRequirement`` checks, field paths rooted at nil as kube's callers leave them."""
    vals = list(values or [])
    errs: list[str] = []
    if key_errs := label_key_errors(key):
        errs.append(_invalid("key", key, "; ".join(key_errs)))
    # BadValue is the []string itself: a nil slice marshals as null, an empty one as [].
    shown = None if values is None else vals
    if op in (Operator.IN, Operator.NOT_IN):
        if not vals:
            errs.append(_invalid("values", shown, "for 'in', 'notin' operators, values set can't be empty"))
    elif op in (Operator.EQUALS, Operator.DOUBLE_EQUALS, Operator.NOT_EQUALS):
        if len(vals) != 1:
            errs.append(_invalid("values", shown, "exact-match compatibility requires one single value"))
    elif op in (Operator.EXISTS, Operator.DOES_NOT_EXIST):
        if vals:
            errs.append(_invalid("values", shown, "values set must be empty for exists and does not exist"))
    elif op in (Operator.GREATER_THAN, Operator.LESS_THAN):
        if len(vals) != 1:
            errs.append(_invalid("values", shown, "for 'Gt', 'Lt' operators, exactly one value is required"))
        for i, v in enumerate(vals):
            if parse_int64(v) is None:
                errs.append(_invalid(f"values[{i}]", v, "for 'Gt', 'Lt' operators, the value must be an integer"))
    for i, v in enumerate(vals):
        if value_errs := label_value_errors(v):
            errs.append(_invalid(f"values[{i}][{key}]", v, "; ".join(value_errs)))
    return errs


def new_requirement(key: str, operator: Operator | str, values: Sequence[str] | None = ()) -> Requirement:
    """Validated constructor (``labels.NewRequirement``); violations → 400 with kube's aggregate text."""
    op = Operator(operator)
    if errs := _requirement_errors(key, op, values):
        raise bad_request(_aggregate(errs))
    return Requirement(key, op, tuple(values or ()))


@dataclass(frozen=True)
class LabelSelector:
    """An AND of requirements, kept sorted by key like kube; no requirements = matches everything."""

    requirements: tuple[Requirement, ...] = ()

    @property
    def empty(self) -> bool:
        """True when the selector restricts nothing (``Selector.Empty()``)."""
        return not self.requirements

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)

    def indexable(self) -> Requirement | None:
        """A requirement naming the only values a label may have (``=``, ``==``, ``in``): the
        matching objects are among those an index on that label lists."""
        for r in self.requirements:
            if r.operator in (Operator.EQUALS, Operator.DOUBLE_EQUALS, Operator.IN):
                return r
        return None

    def requires_exact_match(self, key: str) -> str | None:
        """The single value ``key`` must have (``=``, ``==`` or one-value ``in``), if the selector pins it."""
        for r in self.requirements:
            if r.key == key:
                if r.operator in (Operator.EQUALS, Operator.DOUBLE_EQUALS, Operator.IN) and len(r.values) == 1:
                    return r.values[0]
                return None
        return None

    def to_string(self) -> str:
        """Canonical form (what kube echoes back), e.g. ``a in (x,y),!b,c=d``."""
        return ",".join(r.to_string() for r in self.requirements)

    def __str__(self) -> str:
        return self.to_string()


EVERYTHING = LabelSelector()


def _sorted_selector(reqs: Iterable[Requirement]) -> LabelSelector:
    return LabelSelector(tuple(sorted(reqs, key=lambda r: r.key)))


# Lexer tokens (labels.Token).
_ERROR, _EOS, _CLOSE, _COMMA, _NOT, _DEQ, _EQ, _GT, _IDENT, _IN, _LT, _NEQ, _NOTIN, _OPEN = range(14)
_TOKEN_OF = {")": _CLOSE, ",": _COMMA, "!": _NOT, "==": _DEQ, "=": _EQ, ">": _GT, "in": _IN,
             "<": _LT, "!=": _NEQ, "notin": _NOTIN, "(": _OPEN}
_SPECIAL = frozenset("=!(),><")
_SPACE = frozenset(" \t\r\n")
_END = "\0"  # Go's lexer reads byte 0 at end of input, so a NUL also ends a token.


class _ParseError(Exception):
    pass


class _Lexer:
    """Port of ``labels.Lexer``: identifiers run until whitespace or an operator character."""

    def __init__(self, s: str) -> None:
        self.s = s
        self.pos = 0

    def _read(self) -> str:
        if self.pos < len(self.s):
            self.pos += 1
            return self.s[self.pos - 1]
        return _END

    def _unread(self) -> None:
        self.pos -= 1

    def lex(self) -> tuple[int, str]:
        ch = self._read()
        while ch in _SPACE:
            ch = self._read()
        if ch == _END:
            return _EOS, ""
        self._unread()
        return self._special() if ch in _SPECIAL else self._identifier()

    def _identifier(self) -> tuple[int, str]:
        buf: list[str] = []
        while True:
            ch = self._read()
            if ch == _END:
                break
            if ch in _SPECIAL or ch in _SPACE:
                self._unread()
                break
            buf.append(ch)
        lit = "".join(buf)
        return _TOKEN_OF.get(lit, _IDENT), lit  # only "in"/"notin" can be keywords here

    def _special(self) -> tuple[int, str]:
        # Longest run of operator characters that still spells a token ("!=" but "=" then "(").
        buf = ""
        last: tuple[int, str] | None = None
        while True:
            ch = self._read()
            if ch == _END:
                break
            if ch not in _SPECIAL:
                self._unread()
                break
            buf += ch
            if buf in _TOKEN_OF:
                last = (_TOKEN_OF[buf], buf)
            elif last is not None:
                self._unread()
                break
        if last is None:
            return _ERROR, f"error expected: keyword found '{buf}'"
        return last


class _Parser:
    """Port of ``labels.Parser``: recursive descent over the pre-scanned token list."""

    def __init__(self, s: str) -> None:
        lexer = _Lexer(s)
        self.items: list[tuple[int, str]] = []
        while True:
            item = lexer.lex()
            self.items.append(item)
            if item[0] == _EOS:
                break
        self.pos = 0

    def _peek(self, values: bool) -> tuple[int, str]:
        tok, lit = self.items[min(self.pos, len(self.items) - 1)]
        # In value context the keywords "in"/"notin" are ordinary identifiers.
        if values and tok in (_IN, _NOTIN):
            tok = _IDENT
        return tok, lit

    def lookahead(self, values: bool = True) -> tuple[int, str]:
        return self._peek(values)

    def consume(self, values: bool = True) -> tuple[int, str]:
        item = self._peek(values)
        self.pos += 1
        return item

    def parse(self) -> list[Requirement]:
        reqs: list[Requirement] = []
        while True:
            tok, lit = self.lookahead()
            if tok in (_IDENT, _NOT):
                try:
                    reqs.append(self._requirement())
                except _ParseError as e:
                    raise _ParseError(f"unable to parse requirement: {e}") from None
                t, lit = self.consume()
                if t == _EOS:
                    return reqs
                if t != _COMMA:
                    raise _ParseError(f"found '{lit}', expected: ',' or 'end of string'")
                t2, lit2 = self.lookahead()
                if t2 not in (_IDENT, _NOT):
                    raise _ParseError(f"found '{lit2}', expected: identifier after ','")
            elif tok == _EOS:
                return reqs
            else:
                raise _ParseError(f"found '{lit}', expected: !, identifier, or 'end of string'")

    def _requirement(self) -> Requirement:
        key, op = self._key_and_inferred_operator()
        if op in (Operator.EXISTS, Operator.DOES_NOT_EXIST):
            return self._build(key, op, [])
        op = self._operator()
        values = self._set_values() if op in (Operator.IN, Operator.NOT_IN) else self._exact_value()
        return self._build(key, op, sorted(values))

    @staticmethod
    def _build(key: str, op: Operator, values: list[str]) -> Requirement:
        if errs := _requirement_errors(key, op, values):
            raise _ParseError(_aggregate(errs))
        return Requirement(key, op, tuple(values))

    def _key_and_inferred_operator(self) -> tuple[str, Operator | None]:
        op: Operator | None = None
        tok, lit = self.consume()
        if tok == _NOT:
            op = Operator.DOES_NOT_EXIST
            tok, lit = self.consume()
        if tok != _IDENT:
            raise _ParseError(f"found '{lit}', expected: identifier")
        if errs := label_key_errors(lit):
            # The parser validates with a nil field path, hence kube's literal "<nil>".
            raise _ParseError(_invalid("<nil>", lit, "; ".join(errs)))
        if self.lookahead()[0] in (_EOS, _COMMA) and op is None:
            op = Operator.EXISTS
        return lit, op

    def _operator(self) -> Operator:
        tok, lit = self.consume(values=False)
        op = {_IN: Operator.IN, _EQ: Operator.EQUALS, _DEQ: Operator.DOUBLE_EQUALS, _GT: Operator.GREATER_THAN,
              _LT: Operator.LESS_THAN, _NOTIN: Operator.NOT_IN, _NEQ: Operator.NOT_EQUALS}.get(tok)
        if op is None:
            raise _ParseError(f"found '{lit}', expected: {', '.join(o.value for o in _BINARY_OPERATORS)}")
        return op

    def _set_values(self) -> set[str]:
        tok, lit = self.consume()
        if tok != _OPEN:
            raise _ParseError(f"found '{lit}' expected: '('")
        tok, lit = self.lookahead()
        if tok in (_IDENT, _COMMA):
            values = self._identifier_list()
            if self.consume()[0] != _CLOSE:
                # kube reports the token after '(' here, not the offending one.
                raise _ParseError(f"found '{lit}', expected: ')'")
            return values
        if tok == _CLOSE:  # "()" means the empty value
            self.consume()
            return {""}
        raise _ParseError(f"found '{lit}', expected: ',', ')' or identifier")

    def _identifier_list(self) -> set[str]:
        values: set[str] = set()
        while True:
            tok, lit = self.consume()
            if tok == _IDENT:
                values.add(lit)
                tok2, lit2 = self.lookahead()
                if tok2 == _COMMA:
                    continue
                if tok2 == _CLOSE:
                    return values
                raise _ParseError(f"found '{lit2}', expected: ',' or ')'")
            if tok == _COMMA:  # empty members: "(,a", "a,,b", "a,)"
                if not values:
                    values.add("")
                tok2 = self.lookahead()[0]
                if tok2 == _CLOSE:
                    values.add("")
                    return values
                if tok2 == _COMMA:
                    values.add("")
                continue
            raise _ParseError(f"found '{lit}', expected: ',', or identifier")

    def _exact_value(self) -> set[str]:
        if self.lookahead()[0] in (_EOS, _COMMA):
            return {""}
        tok, lit = self.consume()
        if tok == _IDENT:
            return {lit}
        raise _ParseError(f"found '{lit}', expected: identifier")


def parse_label_selector(s: str) -> LabelSelector:
    """``labels.Parse``: the ``labelSelector`` query parameter; malformed → 400 with kube's text.

    Grammar: comma-separated requirements ``[!]key``, ``key (=|==|!=) [value]``,
    ``key (in|notin) (v1,v2,...)``, ``key (>|<) integer``; blanks/tabs/newlines between
    tokens are ignored; ``""`` selects everything.
    """
    try:
        return _sorted_selector(_Parser(s).parse())
    except _ParseError as e:
        raise bad_request(str(e)) from None


_EXPRESSION_OPERATORS = {"In": Operator.IN, "NotIn": Operator.NOT_IN, "Exists": Operator.EXISTS,
                         "DoesNotExist": Operator.DOES_NOT_EXIST}


def selector_from_label_selector(obj: Mapping[str, Any] | None) -> LabelSelector:
    """Turn a metav1.LabelSelector (``matchLabels`` AND ``matchExpressions``) into a selector.

    ``None`` and ``{}`` both select everything.  This deliberately differs from kube's
    ``LabelSelectorAsSelector``, where a nil selector selects nothing: our API documents an
    absent ``promotePolicies[].labelSelector`` as "any node".  Bad keys, values or operators
    raise a 400 :class:`ApiError` carrying ``NewRequirement``'s message; check specs with
    :func:`apiserver.machinery.validation.validate_label_selector` first to answer 422 with field paths instead.
    """
    if not obj:
        return EVERYTHING
    reqs: list[Requirement] = []
    for k, v in (obj.get("matchLabels") or {}).items():
        reqs.append(new_requirement(k, Operator.EQUALS, [v]))
    for expr in obj.get("matchExpressions") or []:
        raw_op = expr.get("operator", "")
        op = _EXPRESSION_OPERATORS.get(raw_op)
        if op is None:
            raise bad_request(f"{go_quote(str(raw_op))} is not a valid label selector operator")
        # kube copies values with append([]string(nil), ...): an empty list shows up as null.
        reqs.append(new_requirement(expr.get("key", ""), op, list(expr.get("values") or []) or None))
    return _sorted_selector(reqs)


# ---------------------------------------------------------------------------
# Field selectors.
# ---------------------------------------------------------------------------

NAME_FIELD = "metadata.name"
NAMESPACE_FIELD = "metadata.namespace"
DEFAULT_SELECTABLE_FIELDS = (NAME_FIELD, NAMESPACE_FIELD)


def escape_field_value(s: str) -> str:
    r"""``fields.EscapeValue``: ``\`` → ``\\``, ``,`` → ``\,``, ``=`` → ``\=``."""
    return s.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")


def unescape_field_value(s: str) -> str:
    """``fields.UnescapeValue``; raises 400 on a stray ``,``/``=`` or an unknown escape."""
    if not any(c in s for c in "\\,="):
        return s
    out: list[str] = []
    in_slash = False
    for c in s:
        if in_slash:
            if c not in "\\,=":
                raise bad_request(f"invalid field selector: invalid escape sequence: \\{c}")
            out.append(c)
            in_slash = False
        elif c == "\\":
            in_slash = True
        elif c in ",=":
            # Go prints the rune with %v, i.e. as its code point number.
            raise bad_request(f"invalid field selector: unescaped character in value: {ord(c)}")
        else:
            out.append(c)
    if in_slash:
        raise bad_request("invalid field selector: invalid escape sequence: \\")
    return "".join(out)


def _split_terms(s: str) -> list[str]:
    """Split on commas that are not backslash-escaped (escapes stay in the terms)."""
    if not s:
        return []
    terms: list[str] = []
    start, in_slash = 0, False
    for i, c in enumerate(s):
        if in_slash:
            in_slash = False
        elif c == "\\":
            in_slash = True
        elif c == ",":
            terms.append(s[start:i])
            start = i + 1
    terms.append(s[start:])
    return terms


def _split_term(term: str) -> tuple[str, str, str] | None:
    """First operator occurrence wins; ``!=`` and ``==`` are tried before ``=`` at each position."""
    for i in range(len(term)):
        for op in ("!=", "==", "="):
            if term.startswith(op, i):
                return term[:i], op, term[i + len(op):]
    return None


@dataclass(frozen=True)
class FieldRequirement:
    """``field=value`` (also written ``==``) or ``field!=value``; a missing field reads as ``""``."""

    field: str
    value: str
    negated: bool = False

    def matches(self, fields: Mapping[str, str]) -> bool:
        return (fields.get(self.field, "") == self.value) != self.negated

    def to_string(self) -> str:
        return f"{self.field}{'!=' if self.negated else '='}{escape_field_value(self.value)}"


@dataclass(frozen=True)
class FieldSelector:
    """An AND of field terms, in kube's order (terms sorted by their raw text)."""

    requirements: tuple[FieldRequirement, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.requirements

    def matches(self, fields: Mapping[str, str]) -> bool:
        return all(r.matches(fields) for r in self.requirements)

    def requires_exact_match(self, field: str) -> str | None:
        """Value of the first ``field=value`` term (``Selector.RequiresExactMatch``)."""
        for r in self.requirements:
            if r.field == field and not r.negated:
                return r.value
        return None

    def exact_name(self) -> str | None:
        """The name a list/watch is pinned to, for authorizing it as a named request.

        Mirrors kube's RequestInfo: only a ``metadata.name=X`` term counts, and only when
        X is a valid path segment (not ``.``/``..``, no ``/`` or ``%``).
        """
        name = self.requires_exact_match(NAME_FIELD)
        if name is None or path_segment_name_errors(name):
            return None
        return name

    def check_supported(self, supported: Collection[str]) -> None:
        """400 ``field label not supported: <field>`` for a field the resource cannot select on."""
        for r in self.requirements:
            if r.field not in supported:
                raise bad_request(f"field label not supported: {r.field}")

    def to_string(self) -> str:
        return ",".join(r.to_string() for r in self.requirements)

    def __str__(self) -> str:
        return self.to_string()


def parse_field_selector(s: str, supported: Collection[str] | None = DEFAULT_SELECTABLE_FIELDS) -> FieldSelector:
    """``fields.ParseSelector`` plus the custom-resource field label check.

    Terms are ``field=value``, ``field==value`` or ``field!=value`` separated by commas; in
    values ``\\``, ``,`` and ``=`` must be backslash-escaped; nothing is trimmed.  A field
    outside ``supported`` → 400 ``field label not supported: <field>`` (the CRD converter's
    text; built-in types say ``"x" is not a known field selector: ...`` instead).  Pass
    ``supported=None`` to skip that check, as kube's request-info (authorization) parse does.
    """
    terms: list[FieldRequirement] = []
    for part in sorted(_split_terms(s)):
        if not part:
            continue
        split = _split_term(part)
        if split is None:
            raise bad_request(f"invalid selector: '{s}'; can't understand '{part}'")
        lhs, op, rhs = split
        value = unescape_field_value(rhs)
        if lhs or value:  # kube's Transform drops a term whose field and value are both empty
            terms.append(FieldRequirement(lhs, value, negated=op == "!="))
    selector = FieldSelector(tuple(terms))
    if supported is not None:
        selector.check_supported(supported)
    return selector

