"""CEL as the Kubernetes API server runs it: cel-expr-python (Google's cel-cpp) plus the
Kubernetes CEL libraries the API server adds (lists, regex, sets, quantity, url, ip/cidr, format).

Programs are compiled once per expression text and cached; evaluation returns the value or
the error text, never raises, so a broken rule becomes a finding instead of a traceback.
Kubernetes library values without a CEL type (Quantity, URL, IP, CIDR) are maps with one
marker key, which the library's member functions recognise.
"""

from __future__ import annotations

import ipaddress
import re
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

from cel_expr_python import cel
from cel_expr_python.ext import ext_bindings, ext_math, ext_optional, ext_strings

from .. import quantity as quantitymod
from . import formats

_D = cel.Type.DYN
_S = cel.Type.STRING
_B = cel.Type.BOOL
_I = cel.Type.INT
_F = cel.Type.DOUBLE
_L = cel.Type.LIST

_Q = "__kubernetes_quantity__"
_URL = "__kubernetes_url__"
_IP = "__kubernetes_ip__"
_CIDR = "__kubernetes_cidr__"
_FMT = "__kubernetes_format__"


class CelError(Exception):
    """A CEL evaluation error (raised from Python library functions, reported as CEL errors)."""


# ----------------------------------------------------------------------------- quantity
def _parses(parse: Any) -> Any:
    """isQuantity(), isIP(), isCIDR(): true when PARSE takes the text without a CEL error."""
    def test(text: str) -> bool:
        try:
            parse(text)
        except CelError:
            return False
        return True
    return test


def parse_quantity(text: str) -> Decimal:
    if not isinstance(text, str):
        raise CelError(f"expected a quantity string: {text!r}")
    try:
        return quantitymod.parse(text)
    except quantitymod.QuantityError as err:
        raise CelError(str(err)) from None


def _q(value: Any) -> Decimal:
    if isinstance(value, dict) and _Q in value:
        return Decimal(value[_Q])
    if isinstance(value, int) and not isinstance(value, bool):
        return Decimal(value)
    raise CelError("expected a quantity")


def _quantity(text: str) -> dict:
    return {_Q: str(parse_quantity(text))}


_is_quantity = _parses(parse_quantity)


def _as_integer(q: Any) -> int:
    value = _q(q)
    if value != value.to_integral_value() or abs(value) > 2**63 - 1:
        raise CelError("cannot convert value to integer: the quantity is not an integer or overflows int64")
    return int(value)


def _cmp(a: Any, b: Any) -> int:
    x, y = _q(a), _q(b)
    return (x > y) - (x < y)


# ----------------------------------------------------------------------------- url / ip / cidr
def _url(text: str) -> dict:
    if not _is_url(text):
        raise CelError(f"URL parse error during conversion from string: {text!r}")
    return {_URL: text}


def _is_url(text: str) -> bool:
    try:
        parts = urlsplit(text)
    except ValueError:
        return False
    return bool(parts.scheme) or text.startswith("/")


def _u(value: Any):
    if isinstance(value, dict) and _URL in value:
        return urlsplit(value[_URL])
    raise CelError("expected a URL")


def _ip(text: str) -> dict:
    try:
        address = ipaddress.ip_address(text)
    except ValueError as err:
        raise CelError(f"IP Address {text!r} parse error during conversion from string: {err}") from err
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        raise CelError(f"IPv4-mapped IPv6 address {text!r} is not allowed")
    return {_IP: str(address)}


_is_ip = _parses(_ip)


def _ipv(value: Any):
    if isinstance(value, dict) and _IP in value:
        return ipaddress.ip_address(value[_IP])
    raise CelError("expected an IP address")


def _cidr(text: str) -> dict:
    try:
        ipaddress.ip_interface(text)
        if "/" not in text:
            raise ValueError("missing prefix length")
    except ValueError as err:
        raise CelError(f"network address {text!r} parse error during conversion from string: {err}") from err
    return {_CIDR: text}


_is_cidr = _parses(_cidr)


def _net(value: Any):
    if isinstance(value, dict) and _CIDR in value:
        return ipaddress.ip_interface(value[_CIDR])
    raise CelError("expected a CIDR")


# ----------------------------------------------------------------------------- format library
_NAMED_FORMATS = {
    "dns1123Label": formats.dns1123_label,
    "dns1123Subdomain": formats.dns1123_subdomain,
    "dns1035Label": formats.dns1035_label,
    "qualifiedName": formats.qualified_name,
    "labelValue": formats.label_value,
    "dns1123LabelPrefix": lambda v: formats.dns1123_label(v[:-1] + "a" if v.endswith("-") else v),
    "dns1123SubdomainPrefix": lambda v: formats.dns1123_subdomain(v[:-1] + "a" if v.endswith("-") else v),
    "dns1035LabelPrefix": lambda v: formats.dns1035_label(v[:-1] + "a" if v.endswith("-") else v),
    "uri": lambda v: [] if _is_url(v) else ["invalid URI"],
    "uuid": lambda v: [] if re.match(formats.UUID_PATTERN, v) else ["invalid UUID"],
    "byte": lambda v: [] if re.match(formats.BASE64_PATTERN, v) else ["invalid base64"],
    "date": lambda v: [] if re.match(formats.CRD_DATE_PATTERN, v) else ["invalid date"],
    "datetime": lambda v: [] if re.match(formats.CRD_DATETIME_PATTERN, v) else ["invalid datetime"],
}


def _validate_format(fmt: Any, value: str) -> Any:
    checker = _NAMED_FORMATS[fmt[_FMT]]
    errors = checker(value)
    return errors  # the API server returns optional.of(errors) or optional.none(); see _FORMAT_WRAP


# ----------------------------------------------------------------------------- sets and lists
def _as_list(value: Any) -> list:
    return list(value)


def _is_sorted(items: Any) -> bool:
    values = _as_list(items)
    try:
        return all(values[i] <= values[i + 1] for i in range(len(values) - 1))
    except TypeError as err:
        raise CelError("isSorted: elements are not comparable") from err


def _lsum(items: Any) -> Any:
    values = _as_list(items)
    if values and all(isinstance(v, dict) and _Q in v for v in values):
        return {_Q: str(sum((_q(v) for v in values), Decimal(0)))}
    return sum(values) if values else 0


def _lmin(items: Any) -> Any:
    values = _as_list(items)
    if not values:
        raise CelError("min called on empty list")
    return min(values)


def _lmax(items: Any) -> Any:
    values = _as_list(items)
    if not values:
        raise CelError("max called on empty list")
    return max(values)


def _index_of(items: Any, value: Any) -> int:
    values = _as_list(items)
    return values.index(value) if value in values else -1


def _last_index_of(items: Any, value: Any) -> int:
    values = _as_list(items)
    for i in range(len(values) - 1, -1, -1):
        if values[i] == value:
            return i
    return -1


def _find(text: str, pattern: str) -> str:
    match = re.search(pattern, text)
    return match.group(0) if match else ""


def _find_all(text: str, pattern: str, limit: int = -1) -> list:
    found = [m.group(0) for m in re.finditer(pattern, text)]
    return found if limit < 0 else found[:limit]


def _ov(oid: str, ret, params, impl, member=False) -> cel.Overload:
    def safe(*args):
        try:
            return impl(*args)
        except CelError:
            raise
        except (ArithmeticError, ValueError, TypeError, KeyError, IndexError) as err:
            raise CelError(str(err)) from err
    return cel.Overload(oid, ret, params, is_member=member, impl=safe)


def _decl(name: str, *overloads: cel.Overload) -> cel.FunctionDecl:
    return cel.FunctionDecl(name, list(overloads))


def _library() -> cel.CelExtension:
    m = True
    fns = [
        _decl("isSorted", _ov("k8s_list_is_sorted", _B, [_L], _is_sorted, m)),
        _decl("sum", _ov("k8s_list_sum", _D, [_L], _lsum, m)),
        _decl("min", _ov("k8s_list_min", _D, [_L], _lmin, m)),
        _decl("max", _ov("k8s_list_max", _D, [_L], _lmax, m)),
        _decl("indexOf", _ov("k8s_list_index_of", _I, [_L, _D], _index_of, m)),
        _decl("lastIndexOf", _ov("k8s_list_last_index_of", _I, [_L, _D], _last_index_of, m)),
        _decl("find", _ov("k8s_string_find", _S, [_S, _S], _find, m)),
        _decl("findAll", _ov("k8s_string_find_all", _D, [_S, _S], _find_all, m),
              _ov("k8s_string_find_all_n", _D, [_S, _S, _I], _find_all, m)),
        _decl("sets.contains", _ov("k8s_sets_contains", _B, [_L, _L], lambda a, b: all(x in list(a) for x in b))),
        _decl("sets.equivalent", _ov("k8s_sets_equivalent", _B, [_L, _L],
                                     lambda a, b: all(x in list(a) for x in b) and all(x in list(b) for x in a))),
        _decl("sets.intersects", _ov("k8s_sets_intersects", _B, [_L, _L], lambda a, b: any(x in list(a) for x in b))),
        # quantity
        _decl("quantity", _ov("k8s_quantity", _D, [_S], _quantity)),
        _decl("isQuantity", _ov("k8s_is_quantity", _B, [_S], _is_quantity)),
        _decl("isInteger", _ov("k8s_q_is_integer", _B, [_D], lambda q: _q(q) == _q(q).to_integral_value(), m)),
        _decl("asInteger", _ov("k8s_q_as_integer", _I, [_D], _as_integer, m)),
        _decl("asApproximateFloat", _ov("k8s_q_as_float", _F, [_D], lambda q: float(_q(q)), m)),
        _decl("sign", _ov("k8s_q_sign", _I, [_D], lambda q: (_q(q) > 0) - (_q(q) < 0), m)),
        _decl("compareTo", _ov("k8s_q_compare", _I, [_D, _D], _cmp, m)),
        _decl("isGreaterThan", _ov("k8s_q_gt", _B, [_D, _D], lambda a, b: _cmp(a, b) > 0, m)),
        _decl("isLessThan", _ov("k8s_q_lt", _B, [_D, _D], lambda a, b: _cmp(a, b) < 0, m)),
        _decl("add", _ov("k8s_q_add", _D, [_D, _D], lambda a, b: {_Q: str(_q(a) + _q(b))}, m)),
        _decl("sub", _ov("k8s_q_sub", _D, [_D, _D], lambda a, b: {_Q: str(_q(a) - _q(b))}, m)),
        # url
        _decl("url", _ov("k8s_url", _D, [_S], _url)),
        _decl("isURL", _ov("k8s_is_url", _B, [_S], _is_url)),
        _decl("getScheme", _ov("k8s_url_scheme", _S, [_D], lambda u: _u(u).scheme, m)),
        _decl("getHost", _ov("k8s_url_host", _S, [_D], lambda u: _u(u).netloc.rsplit("@", 1)[-1], m)),
        _decl("getHostname", _ov("k8s_url_hostname", _S, [_D], lambda u: _u(u).hostname or "", m)),
        _decl("getPort", _ov("k8s_url_port", _S, [_D], lambda u: str(_u(u).port or ""), m)),
        _decl("getEscapedPath", _ov("k8s_url_path", _S, [_D], lambda u: _u(u).path, m)),
        # ip / cidr
        _decl("ip", _ov("k8s_ip", _D, [_S], _ip), _ov("k8s_cidr_ip", _D, [_D], lambda c: {_IP: str(_net(c).ip)}, m)),
        _decl("isIP", _ov("k8s_is_ip", _B, [_S], _is_ip)),
        _decl("cidr", _ov("k8s_cidr", _D, [_S], _cidr)),
        _decl("isCIDR", _ov("k8s_is_cidr", _B, [_S], _is_cidr)),
        _decl("family", _ov("k8s_ip_family", _I, [_D], lambda v: _ipv(v).version, m)),
        _decl("isLoopback", _ov("k8s_ip_loopback", _B, [_D], lambda v: _ipv(v).is_loopback, m)),
        _decl("isUnspecified", _ov("k8s_ip_unspecified", _B, [_D], lambda v: _ipv(v).is_unspecified, m)),
        _decl("prefixLength", _ov("k8s_cidr_prefix", _I, [_D], lambda c: _net(c).network.prefixlen, m)),
        _decl("containsIP", _ov("k8s_cidr_contains_ip", _B, [_D, _D],
                                lambda c, i: (_ipv(i) if isinstance(i, dict) else ipaddress.ip_address(i))
                                in _net(c).network, m)),
        _decl("containsCIDR", _ov("k8s_cidr_contains_cidr", _B, [_D, _D],
                                  lambda c, o: (_net(o) if isinstance(o, dict) else ipaddress.ip_interface(o)).network
                                  .subnet_of(_net(c).network), m)),
        _decl("masked", _ov("k8s_cidr_masked", _D, [_D], lambda c: {_CIDR: str(_net(c).network)}, m)),
        # format library: format.dns1123Label().validate(s) -> optional list of errors
        *[_decl(f"format.{name}", _ov(f"k8s_format_{name}", _D, [], lambda n=name: {_FMT: n}))
          for name in _NAMED_FORMATS],
        _decl("format.named", _ov("k8s_format_named", _D, [_S],
                                  lambda n: {_FMT: n} if n in _NAMED_FORMATS else None)),
    ]
    return cel.CelExtension("kubernetes", fns)


_VALIDATE = re.compile(r"(format\.(?:named\([^()]*\)|[A-Za-z0-9]+\(\)))\.validate\(")


def _rewrite(expression: str) -> str:
    """`format.X().validate(s)` returns optional<list<string>> in Kubernetes; expressed with optionals here."""
    if ".validate(" not in expression:
        return expression
    return _wrap_optional_errors(_VALIDATE.sub(lambda m: f"__k8s_optional_errors({m.group(1)}, ", expression))


class Environment:
    """One CEL environment (variables fixed), with a cache of compiled programs."""

    def __init__(self, variables: list[str]) -> None:
        decls = {name: _D for name in variables}
        validate = cel.CelExtension("kubernetes-format-validate", [
            _decl("__k8s_validate", _ov("k8s_format_validate", _D, [_D, _S], _validate_format)),
        ])
        self.env = cel.NewEnv(variables=decls, extensions=[
            ext_strings.ExtStrings(), ext_optional.ExtOptional(), ext_bindings.ExtBindings(), ext_math.ExtMath(),
            _library(), validate])
        self._programs: dict[str, Any] = {}

    def compile(self, expression: str) -> tuple[Any | None, str]:
        """(program, '') or (None, error message)."""
        found = self._programs.get(expression)
        if found is not None:
            return found
        source = _rewrite(expression)
        try:
            result = (self.env.compile(source, disable_check=True), "")
        except Exception as err:  # noqa: BLE001 - cel-cpp reports syntax errors as exceptions
            result = (None, _first_line(str(err)))
        self._programs[expression] = result
        return result

    def activation(self, data: dict[str, Any]) -> Any:
        """Variables converted once, for several programs over the same data."""
        try:
            return self.env.Activation(data)
        except Exception:  # noqa: BLE001 - a value cel cannot take: evaluate() reports it per program
            return data

    def evaluate(self, program: Any, data: Any) -> tuple[Any, str]:
        """(value, '') or (None, error message); data is a dict of variables or an activation()."""
        try:
            value = program.eval(data=data) if isinstance(data, dict) else program.eval(data)
        except Exception as err:  # noqa: BLE001 - unsupported value types and the like
            return None, _first_line(str(err))
        if value.type() == cel.Type.ERROR:
            return None, _first_line(str(value.value()))
        try:
            return value.plain_value(), ""
        except Exception:  # noqa: BLE001
            return value.value(), ""


def _wrap_optional_errors(source: str) -> str:
    """__k8s_optional_errors(fmt, s) -> cel.bind(e, __k8s_validate(fmt, s), e.size() > 0 ? optional.of(e) : optional.none())."""
    out = source
    token = "__k8s_optional_errors("
    while token in out:
        start = out.index(token)
        depth, i = 0, start + len(token) - 1
        while i < len(out):
            if out[i] == "(":
                depth += 1
            elif out[i] == ")":
                depth -= 1
                if depth == 0:
                    break
            i += 1
        args = out[start + len(token): i]
        replacement = (f"cel.bind(__e, __k8s_validate({args}), "
                       f"__e.size() > 0 ? optional.of(__e) : optional.none())")
        out = out[:start] + replacement + out[i + 1:]
    return out


def _first_line(text: str) -> str:
    text = text.strip().splitlines()[0] if text.strip() else "unknown CEL error"
    return re.sub(r"^(INVALID_ARGUMENT|NOT_FOUND|OUT_OF_RANGE|UNKNOWN|UNIMPLEMENTED|INTERNAL): ", "", text)


def uses_old_self(expression: str) -> bool:
    return re.search(r"\boldSelf\b", expression) is not None
