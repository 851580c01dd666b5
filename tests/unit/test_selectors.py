"""Label and field selectors behave, print and fail exactly like apimachinery v0.35.

Expected messages were checked against k8s.io/apimachinery v0.35.4 (labels.Parse,
fields.ParseSelector, metav1.LabelSelectorAsSelector) and the CRD field-label converter.
"""

from __future__ import annotations

import pytest

from apiserver.machinery.errors import ApiError
from apiserver.machinery.golang import go_bad_value, go_quote
from apiserver.machinery.selectors import (
    EVERYTHING,
    LabelSelector,
    Operator,
    escape_field_value,
    label_key_errors,
    label_value_errors,
    new_requirement,
    parse_field_selector,
    parse_label_selector,
    selector_from_label_selector,
    unescape_field_value,
)

KEY_NAME_REGEX = ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
                  "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
                  "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")
VALUE_REGEX = ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
               "and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
               "'12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")


def bad_label_selector(s: str) -> str:
    with pytest.raises(ApiError) as info:
        parse_label_selector(s)
    assert info.value.code == 400
    assert info.value.reason == "BadRequest"
    return info.value.message


def bad_field_selector(s: str, supported: tuple[str, ...] | None = ("metadata.name", "metadata.namespace")) -> str:
    with pytest.raises(ApiError) as info:
        parse_field_selector(s, supported)
    assert info.value.code == 400
    assert info.value.reason == "BadRequest"
    return info.value.message


# --- label selector: matching, one operator at a time ------------------------------------------


@pytest.mark.parametrize(("selector", "labels", "expected"), [
    ("a=b", {"a": "b"}, True),
    ("a=b", {"a": "c"}, False),
    ("a=b", {}, False),
    ("a==b", {"a": "b"}, True),
    ("a==b", {"a": "c"}, False),
    ("a!=b", {"a": "c"}, True),
    ("a!=b", {"a": "b"}, False),
    ("a in (b,c)", {"a": "c"}, True),
    ("a in (b,c)", {"a": "d"}, False),
    ("a in (b,c)", {}, False),
    ("a notin (b,c)", {"a": "d"}, True),
    ("a notin (b,c)", {"a": "b"}, False),
    ("a", {"a": ""}, True),
    ("a", {"b": "a"}, False),
    ("!a", {"b": "a"}, True),
    ("!a", {"a": "x"}, False),
    ("a>5", {"a": "6"}, True),
    ("a>5", {"a": "5"}, False),
    ("a<5", {"a": "-3"}, True),
    ("a<5", {"a": "5"}, False),
])
def test_each_operator_matches_like_kube(selector: str, labels: dict[str, str], expected: bool) -> None:
    assert parse_label_selector(selector).matches(labels) is expected


def test_notin_matches_objects_without_the_key() -> None:
    assert parse_label_selector("tier notin (db)").matches({"app": "web"})


def test_not_equals_matches_objects_without_the_key() -> None:
    assert parse_label_selector("tier!=db").matches({})


def test_gt_and_lt_never_match_non_integer_or_missing_labels() -> None:
    assert not parse_label_selector("a>1").matches({"a": "x"})
    assert not parse_label_selector("a<1").matches({})


def test_comma_means_and() -> None:
    sel = parse_label_selector("a=b,c in (d,e),!f")
    assert sel.matches({"a": "b", "c": "e"})
    assert not sel.matches({"a": "b", "c": "e", "f": ""})
    assert not sel.matches({"a": "b"})


def test_empty_selector_matches_everything_and_is_empty() -> None:
    for s in ("", "   ", "\t\n"):
        sel = parse_label_selector(s)
        assert sel.empty
        assert sel.matches({"x": "y"})
        assert sel.to_string() == ""
    assert EVERYTHING.empty and EVERYTHING.matches(None)


def test_empty_values_are_allowed() -> None:
    assert parse_label_selector("a=").matches({"a": ""})
    assert parse_label_selector("a in ()").matches({"a": ""})
    sel = parse_label_selector("x in (foo,,baz),y,z notin ()")
    assert sel.to_string() == "x in (,baz,foo),y,z notin ()"
    assert sel.matches({"x": "", "y": "1"})


def test_keywords_are_plain_identifiers_in_value_position() -> None:
    assert parse_label_selector("notin=in").matches({"notin": "in"})
    assert parse_label_selector("a in (in,notin)").matches({"a": "notin"})
    assert parse_label_selector("in").matches({"in": "x"})


def test_whitespace_between_tokens_is_ignored() -> None:
    sel = parse_label_selector(" a\tin\t( b , c )\n,\r d != e ")
    assert sel.to_string() == "a in (b,c),d!=e"


def test_prefixed_keys_are_accepted() -> None:
    assert parse_label_selector("example.com/app=web").matches({"example.com/app": "web"})


def test_to_string_is_kube_canonical_form() -> None:
    # Sorted by key, values sorted, operators spelled as kube prints them.
    sel = parse_label_selector("z=1, a notin (c,b), m, !n, g>3, h<4, k==v")
    assert sel.to_string() == "a notin (b,c),g>3,h<4,k==v,m,!n,z=1"
    assert str(sel) == sel.to_string()
    assert parse_label_selector("x= ,z= ").to_string() == "x=,z="


def test_requires_exact_match_reports_pinned_values() -> None:
    sel = parse_label_selector("a=b,c in (d),e in (f,g),h!=i")
    assert sel.requires_exact_match("a") == "b"
    assert sel.requires_exact_match("c") == "d"
    assert sel.requires_exact_match("e") is None
    assert sel.requires_exact_match("h") is None
    assert sel.requires_exact_match("zzz") is None


# --- label selector: malformed input and kube's messages ----------------------------------------


@pytest.mark.parametrize(("selector", "message"), [
    ("a b", "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"),
    ("a in b", "unable to parse requirement: found 'b' expected: '('"),
    ("a in", "unable to parse requirement: found '' expected: '('"),
    ("a in (b c)", "unable to parse requirement: found 'c', expected: ',' or ')'"),
    ("a in (b", "unable to parse requirement: found '', expected: ',' or ')'"),
    ("a in (b,", "unable to parse requirement: found '', expected: ',', or identifier"),
    ("a in (=)", "unable to parse requirement: found '=', expected: ',', ')' or identifier"),
    ("a=(", "unable to parse requirement: found '(', expected: identifier"),
    ("!", "unable to parse requirement: found '', expected: identifier"),
    ("!=a", "found '!=', expected: !, identifier, or 'end of string'"),
    ("a=b c", "found 'c', expected: ',' or 'end of string'"),
    ("!a=b", "found '=', expected: ',' or 'end of string'"),
    ("a=b)", "found ')', expected: ',' or 'end of string'"),
    ("a==b==c", "found '==', expected: ',' or 'end of string'"),
    ("a,", "found '', expected: identifier after ','"),
    ("a,,b", "found ',', expected: identifier after ','"),
    (",a", "found ',', expected: !, identifier, or 'end of string'"),
    ("(a)", "found '(', expected: !, identifier, or 'end of string'"),
    ("x=a||y=b", f'unable to parse requirement: values[0][x]: Invalid value: "a||y": {VALUE_REGEX}'),
])
def test_malformed_label_selectors_fail_with_kube_messages(selector: str, message: str) -> None:
    assert bad_label_selector(selector) == message


def test_invalid_key_is_reported_with_nil_field_path() -> None:
    assert bad_label_selector("a_=b") == f'unable to parse requirement: <nil>: Invalid value: "a_": {KEY_NAME_REGEX}'


def test_key_with_too_long_name_part() -> None:
    key = "a" * 64
    assert bad_label_selector(key) == (
        f'unable to parse requirement: <nil>: Invalid value: "{key}": name part must be no more than 63 bytes')


def test_key_with_empty_prefix_and_empty_name_lists_every_problem() -> None:
    assert bad_label_selector("/") == ('unable to parse requirement: <nil>: Invalid value: "/": prefix part must be '
                                       f"non-empty; name part must be non-empty; {KEY_NAME_REGEX}")


def test_key_with_two_slashes() -> None:
    assert bad_label_selector("a/b/c") == (
        'unable to parse requirement: <nil>: Invalid value: "a/b/c": a valid label key must consist of '
        "alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character "
        "(e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
        "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' "
        "(e.g. 'example.com/MyName')")


def test_invalid_value_is_reported_under_values_index_and_key() -> None:
    assert bad_label_selector("a=-b") == f'unable to parse requirement: values[0][a]: Invalid value: "-b": {VALUE_REGEX}'


def test_too_long_value() -> None:
    value = "v" * 64
    assert bad_label_selector(f"a={value}") == (
        f'unable to parse requirement: values[0][a]: Invalid value: "{value}": must be no more than 63 bytes')


def test_set_values_are_checked_in_sorted_order() -> None:
    assert bad_label_selector("a in (z-,-b)") == (
        'unable to parse requirement: [values[0][a]: Invalid value: "-b": ' + VALUE_REGEX
        + ', values[1][a]: Invalid value: "z-": ' + VALUE_REGEX + "]")


def test_gt_requires_an_integer() -> None:
    assert bad_label_selector("a>b") == ('unable to parse requirement: values[0]: Invalid value: "b": '
                                         "for 'Gt', 'Lt' operators, the value must be an integer")
    assert bad_label_selector("a<") == ('unable to parse requirement: values[0]: Invalid value: "": '
                                        "for 'Gt', 'Lt' operators, the value must be an integer")
    assert bad_label_selector("a>99999999999999999999").endswith("the value must be an integer")


def test_gt_value_must_also_be_a_valid_label_value() -> None:
    # "-1" parses as an integer but a label value must start with an alphanumeric character.
    assert bad_label_selector("a>-1") == f'unable to parse requirement: values[0][a]: Invalid value: "-1": {VALUE_REGEX}'
    assert bad_label_selector("a>+1").startswith('unable to parse requirement: values[0][a]: Invalid value: "+1"')
    assert parse_label_selector("a>01").matches({"a": "2"})


def test_messages_quote_values_like_go() -> None:
    assert go_quote('a"b\\c\n\x01\u00a0é\U0001f600') == '"a\\"b\\\\c\\n\\x01\\u00a0é😀"'
    message = bad_label_selector('a="b"')
    assert message.startswith('unable to parse requirement: values[0][a]: Invalid value: "\\"b\\"": ')


@pytest.mark.parametrize(("value", "shown"), [
    # Expected texts are Go's own fmt.Sprintf("%v", float64(...)) output.
    (1.0, "1"), (-1.5, "-1.5"), (123456.0, "123456"), (1e6, "1e+06"), (1234567.0, "1.234567e+06"),
    (1e21, "1e+21"), (0.0001, "0.0001"), (1e-05, "1e-05"), (1.5e-07, "1.5e-07"), (0.0, "0"),
])
def test_bad_float_values_print_like_go_percent_v(value: float, shown: str) -> None:
    assert go_bad_value(value) == shown


def test_bad_values_of_other_types_print_like_error_body() -> None:
    # %q for strings (not JSON's \u0001), %v for bools and ints, json.Marshal (HTML-escaped) otherwise.
    assert go_bad_value("a\x01") == '"a\\x01"'
    assert [go_bad_value(v) for v in (True, 7, None)] == ["true", "7", "null"]
    assert go_bad_value(["a", "<b>"]) == '["a","\\u003cb\\u003e"]'


# --- label rules shared with metadata validation -----------------------------------------------


def test_label_key_rules() -> None:
    assert label_key_errors("app") == []
    assert label_key_errors("Example.COM-x/My_Name.1") == [
        "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
        "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
        "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"]
    assert label_key_errors("p" * 254 + "/a")[0] == "prefix part must be no more than 253 bytes"
    assert label_key_errors("k8s.io/" + "n" * 63) == []


def test_label_value_rules() -> None:
    assert label_value_errors("") == []
    assert label_value_errors("My_value.1-x") == []
    assert label_value_errors("_x") == [VALUE_REGEX]
    assert label_value_errors("é" * 32) == ["must be no more than 63 bytes", VALUE_REGEX]


# --- metav1.LabelSelector ----------------------------------------------------------------------


def test_nil_or_empty_label_selector_selects_everything() -> None:
    # Deliberately unlike kube's LabelSelectorAsSelector(nil) (Nothing): our API says nil = any node.
    assert selector_from_label_selector(None).matches({"x": "y"})
    assert selector_from_label_selector({}).empty
    assert selector_from_label_selector({"matchLabels": {}, "matchExpressions": []}).matches({})


def test_match_labels_and_expressions_are_anded() -> None:
    sel = selector_from_label_selector({
        "matchLabels": {"zone": "a"},
        "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["web", "api"]},
            {"key": "gpu", "operator": "NotIn", "values": ["none"]},
            {"key": "ssd", "operator": "Exists"},
            {"key": "tainted", "operator": "DoesNotExist"},
        ],
    })
    assert sel.to_string() == "gpu notin (none),ssd,!tainted,tier in (api,web),zone=a"
    assert sel.matches({"zone": "a", "tier": "api", "ssd": ""})
    assert not sel.matches({"zone": "a", "tier": "api", "ssd": "", "tainted": "1"})
    assert not sel.matches({"zone": "b", "tier": "api", "ssd": ""})


@pytest.mark.parametrize(("selector", "message"), [
    ({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]},
     '"Gt" is not a valid label selector operator'),
    ({"matchExpressions": [{"key": "a", "operator": "In"}]},
     "values: Invalid value: null: for 'in', 'notin' operators, values set can't be empty"),
    ({"matchExpressions": [{"key": "a", "operator": "In", "values": []}]},
     "values: Invalid value: null: for 'in', 'notin' operators, values set can't be empty"),
    ({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
     'values: Invalid value: ["x"]: values set must be empty for exists and does not exist'),
    ({"matchLabels": {"a_": "b"}}, f'key: Invalid value: "a_": {KEY_NAME_REGEX}'),
    ({"matchLabels": {"a": "-"}}, f'values[0][a]: Invalid value: "-": {VALUE_REGEX}'),
])
def test_bad_label_selector_objects_fail_with_new_requirement_messages(selector: dict, message: str) -> None:
    with pytest.raises(ApiError) as info:
        selector_from_label_selector(selector)
    assert info.value.code == 400
    assert info.value.message == message


def test_new_requirement_aggregates_problems() -> None:
    with pytest.raises(ApiError) as info:
        new_requirement("-a", Operator.IN, [])
    assert info.value.message == (f'[key: Invalid value: "-a": {KEY_NAME_REGEX}, values: Invalid value: []: '
                                  "for 'in', 'notin' operators, values set can't be empty]")
    assert new_requirement("a", "in", ["x"]).matches({"a": "x"})


def test_label_selector_objects_are_immutable_values() -> None:
    sel = parse_label_selector("a=b")
    assert sel == LabelSelector((new_requirement("a", Operator.EQUALS, ["b"]),))
    with pytest.raises(AttributeError):
        sel.requirements = ()  # type: ignore[misc]


# --- field selectors ---------------------------------------------------------------------------


@pytest.mark.parametrize(("selector", "fields", "expected"), [
    ("metadata.name=a", {"metadata.name": "a"}, True),
    ("metadata.name==a", {"metadata.name": "a"}, True),
    ("metadata.name=a", {"metadata.name": "b"}, False),
    ("metadata.name!=a", {"metadata.name": "b"}, True),
    ("metadata.name!=a", {"metadata.name": "a"}, False),
    ("metadata.name=", {}, True),  # a missing field reads as ""
    ("metadata.name!=a", {}, True),
    ("metadata.name=a,metadata.namespace=ns", {"metadata.name": "a", "metadata.namespace": "ns"}, True),
    ("metadata.name=a,metadata.namespace=ns", {"metadata.name": "a", "metadata.namespace": "other"}, False),
])
def test_field_selector_operators(selector: str, fields: dict[str, str], expected: bool) -> None:
    assert parse_field_selector(selector, ("metadata.name", "metadata.namespace")).matches(fields) is expected


def test_empty_field_selector_matches_everything() -> None:
    for s in ("", ",", ",,", "=", "=="):
        sel = parse_field_selector(s, ())
        assert sel.empty and sel.matches({}) and sel.to_string() == ""


def test_field_selector_escapes_commas_equals_and_backslashes() -> None:
    sel = parse_field_selector(r"metadata.name=a\,b\=c\\d", ("metadata.name",))
    assert sel.matches({"metadata.name": "a,b=c\\d"})
    assert sel.to_string() == r"metadata.name=a\,b\=c\\d"
    assert escape_field_value("a,b=c\\d") == r"a\,b\=c\\d"
    assert unescape_field_value(r"a\,b\=c\\d") == "a,b=c\\d"


@pytest.mark.parametrize(("selector", "message"), [
    ("metadata.name=a=b", "invalid field selector: unescaped character in value: 61"),
    ("metadata.name=a\\,b,c", "invalid selector: 'metadata.name=a\\,b,c'; can't understand 'c'"),
    ("metadata.name=a\\b", "invalid field selector: invalid escape sequence: \\b"),
    ("metadata.name=a\\", "invalid field selector: invalid escape sequence: \\"),
    ("metadata.name", "invalid selector: 'metadata.name'; can't understand 'metadata.name'"),
    ("metadata.name=a,foo", "invalid selector: 'metadata.name=a,foo'; can't understand 'foo'"),
])
def test_malformed_field_selectors_fail_with_kube_messages(selector: str, message: str) -> None:
    assert bad_field_selector(selector) == message


def test_unsupported_field_is_rejected_with_the_custom_resource_message() -> None:
    assert bad_field_selector("spec.phase=Ready") == "field label not supported: spec.phase"
    # Nothing is trimmed: a leading blank makes a different (unknown) field.
    assert bad_field_selector(" metadata.name=a") == "field label not supported:  metadata.name"
    assert bad_field_selector("metadata.namespace=ns", ("metadata.name",)) == (
        "field label not supported: metadata.namespace")


def test_first_unsupported_field_in_sorted_term_order_is_reported() -> None:
    assert bad_field_selector("spec.b=1,spec.a=2") == "field label not supported: spec.a"


def test_syntax_errors_win_over_unsupported_fields() -> None:
    assert bad_field_selector("spec.a=1,metadata.name=x=y") == "invalid field selector: unescaped character in value: 61"


def test_operator_split_happens_at_the_first_operator() -> None:
    sel = parse_field_selector("metadata.name=!a", ("metadata.name",))
    assert sel.matches({"metadata.name": "!a"})
    assert bad_field_selector("metadata.name!==a") == "invalid field selector: unescaped character in value: 61"


def test_field_selector_to_string_sorts_terms() -> None:
    sel = parse_field_selector("metadata.namespace=ns,metadata.name==a", ("metadata.name", "metadata.namespace"))
    assert sel.to_string() == "metadata.name=a,metadata.namespace=ns"


def test_exact_name_is_the_pinned_metadata_name() -> None:
    assert parse_field_selector("metadata.name=web").exact_name() == "web"
    assert parse_field_selector("metadata.namespace=ns,metadata.name==web").exact_name() == "web"
    assert parse_field_selector("metadata.name!=web").exact_name() is None
    assert parse_field_selector("metadata.namespace=ns").exact_name() is None
    assert parse_field_selector("").exact_name() is None


def test_exact_name_ignores_names_that_are_not_path_segments() -> None:
    for bad in ("..", ".", "a/b", "a%2F"):
        assert parse_field_selector(f"metadata.name={bad}").exact_name() is None


def test_exact_name_can_be_read_without_the_supported_field_check() -> None:
    # Authorization parses the selector before (and regardless of) the field-label check.
    assert parse_field_selector("metadata.name=web,spec.x=1", None).exact_name() == "web"
