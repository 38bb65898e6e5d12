"""Small, safe expressions for sweep specs: derived fields and constraints.

A derived field is a template: ``"${hw.core.systolic.rows}"`` copies a value (keeping its
type), ``"${workload.m} * 2"`` is evaluated as arithmetic, and anything that is not an
expression after substitution (``"${size}MiB"``) is kept as text and then read like a
``--set`` value.  A constraint is an expression that must be true, e.g.
``"${workload.m} % ${workload.tile_n} == 0"``; bare dotted paths work too
(``workload.m % workload.tile_n == 0``).

Only literals, arithmetic, comparisons, boolean logic, ``x if c else y`` and a few
functions (``min max abs int float round str len`` and the unit parsers ``size``,
``time_ps``, ``freq_hz``, ``bandwidth_bps``) are allowed: a spec file can never run
arbitrary code.  Nor can it exhaust the machine: an expression is at most
:data:`MAX_LENGTH` characters and :data:`MAX_DEPTH` levels deep, no operation may produce
an integer above :data:`MAX_INT_BITS` bits (``**`` is refused before it computes one) and
``*`` refuses to repeat text or a list past :data:`MAX_REPEAT` items (``9 ** 9 ** 9``
would otherwise run for hours).

An expression that fails says so in a sentence naming the failing part (``${...}``
references shown as written) and what is allowed, never as Python's own error text.
"""

from __future__ import annotations

import ast
import operator
import re
from typing import Any, Callable

from npusim.core.units import parse_bandwidth_bps, parse_bytes, parse_freq_hz, parse_time_ps

REF = re.compile(r"\$\{([^}]*)\}")

#: Longest expression or template, in characters (real ones fit on a line).
MAX_LENGTH = 2000
#: Deepest nesting (``-(-(-x))``; a chain ``a + b + c`` adds a level per operator).
#: Checking, path collection and evaluation recurse once per level, so this keeps them
#: far from Python's recursion limit.
MAX_DEPTH = 100
#: Largest integer any operation may produce, in bits (about 3000 decimal digits): every
#: intermediate result is checked, since a product of a few in-range powers would
#: otherwise grow past Python's 4300-digit limit for turning an integer into text (which
#: the override a derived value becomes needs).  ``**`` is checked before computing.
MAX_INT_BITS = 10_000
#: Longest text or list ``*`` may build by repetition.
MAX_REPEAT = 100_000


class ExprError(ValueError):
    """An expression is malformed, names an unknown field or fails to evaluate.

    ``syntax`` is true when the text is not an expression at all (a derived template
    then falls back to plain text substitution)."""

    def __init__(self, message: str, syntax: bool = False):
        super().__init__(message)
        self.syntax = syntax


Lookup = Callable[[str], Any]


def _short(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}..."


def _power(base: Any, exponent: Any) -> Any:
    """``base ** exponent``, refused before computing when an integer result would be
    huge (``9 ** 9 ** 9`` runs for hours): the result has more than (bit length of the
    base - 1) x exponent bits, known from the operands alone."""
    if (isinstance(base, int) and isinstance(exponent, int) and exponent > 0
            and (abs(base).bit_length() - 1) * exponent >= MAX_INT_BITS):
        shown = f"({base})" if base < 0 else _short(base)
        raise ExprError(f"{shown} ** {_short(exponent)} is too large: the result "
                        f"would have more than {MAX_INT_BITS} bits")
    return operator.pow(base, exponent)


def _multiply(left: Any, right: Any) -> Any:
    """``left * right``, refusing to repeat text or a list past :data:`MAX_REPEAT` items."""
    for seq, count in ((left, right), (right, left)):
        if isinstance(seq, (str, list)) and isinstance(count, int) \
                and len(seq) * count > MAX_REPEAT:
            raise ExprError(f"{_short(seq)} * {count} would repeat to {len(seq) * count} "
                            f"items; at most {MAX_REPEAT} are allowed")
    return operator.mul(left, right)


def _modulo(left: Any, right: Any) -> Any:
    """``left % right`` as arithmetic only: ``'%0999999999d' % 1`` would build a
    gigabyte of text, and ``'32MiB' % 2`` is a mistake, not a format."""
    if isinstance(left, str):
        raise ExprError(f"% on text ({_short(left)} % {_short(right)}) is not arithmetic; "
                        "convert it first, e.g. size(...) or int(...)")
    return operator.mod(left, right)


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "min": min, "max": max, "abs": abs, "int": int, "float": float, "round": round,
    "str": str, "len": len, "size": parse_bytes, "time_ps": parse_time_ps,
    "freq_hz": parse_freq_hz, "bandwidth_bps": parse_bandwidth_bps,
}
_CONSTANTS = {"True": True, "False": False, "None": None, "true": True, "false": False}
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: _multiply,
           ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: _modulo,
           ast.Pow: _power}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_,
          ast.Invert: operator.invert}
_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt,
            ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
            ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}


def references(text: str) -> list[str]:
    """Field paths named as ``${path}`` in ``text``."""
    return [match.strip() for match in REF.findall(text)]


def _substitute(text: str) -> tuple[str, dict[str, str]]:
    """Replace each ``${path}`` by a placeholder name; return the text and the mapping."""
    names: dict[str, str] = {}

    def repl(match: re.Match) -> str:
        name = f"__ref{len(names)}"
        names[name] = match[1].strip()
        return name

    return REF.sub(repl, text), names


def parse(text: str) -> tuple[ast.AST, dict[str, str]]:
    """Parse an expression (``${...}`` references allowed); raise :class:`ExprError`."""
    if len(text) > MAX_LENGTH:
        raise ExprError(f"expression is {len(text):,} characters long; at most {MAX_LENGTH:,} "
                        "are allowed")
    code, names = _substitute(text)
    try:
        tree = ast.parse(code.strip(), mode="eval")
    except SyntaxError as exc:
        raise ExprError(f"not a valid expression: {exc.msg}", syntax=True) from None
    except (RecursionError, MemoryError):  # Python's own parser gives up on deep nesting
        raise ExprError(f"expression nests too deeply; at most {MAX_DEPTH} levels are "
                        "allowed") from None
    except ValueError as exc:  # a NUL character
        raise ExprError(f"not a valid expression: {exc}", syntax=True) from None
    _check_depth(tree.body)
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    if not set(names) <= used:  # "${x}MiB" glued a reference into a longer name
        raise ExprError("a ${...} reference is part of a longer word, not an expression",
                        syntax=True)
    _check(tree.body, names)
    return tree.body, names


def _check_depth(node: ast.AST) -> None:
    """Refuse trees deeper than :data:`MAX_DEPTH` (measured without recursing, since
    recursing is what such a tree would break).  Only expressions count as levels, not
    the operator and context leaves under them."""
    stack = [(node, 1)]
    while stack:
        child, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ExprError(f"expression nests more than {MAX_DEPTH} levels deep")
        stack.extend((grandchild, depth + 1) for grandchild in ast.iter_child_nodes(child)
                     if isinstance(grandchild, ast.expr))


def _check(node: ast.AST, names: dict[str, str]) -> None:
    allowed = (ast.Constant, ast.Name, ast.Attribute, ast.Subscript, ast.BinOp, ast.UnaryOp,
               ast.BoolOp, ast.Compare, ast.IfExp, ast.Call, ast.List, ast.Tuple, ast.Load,
               ast.operator, ast.unaryop, ast.boolop, ast.cmpop)
    for child in ast.walk(node):
        if not isinstance(child, allowed):
            raise ExprError(f"{type(child).__name__} is not allowed in a sweep expression")
        if isinstance(child, ast.BinOp) and type(child.op) not in _BINARY:
            raise ExprError(f"operator {type(child.op).__name__} is not allowed")
        if isinstance(child, ast.Call) and not (isinstance(child.func, ast.Name)
                                                and child.func.id in _FUNCTIONS):
            known = ", ".join(sorted(_FUNCTIONS))
            raise ExprError(f"only these functions may be called: {known}")
        if isinstance(child, (ast.Attribute, ast.Subscript)):
            _check_path(child, names)


def _check_path(node: ast.Attribute | ast.Subscript, names: dict[str, str]) -> None:
    """``.name`` and ``[i]`` only spell field paths (``hw.cores[3].sram_bytes``): the
    evaluator reads them through the lookup, so anything else (``'abc'[0]``,
    ``${x}.__class__``) would fail later with an unreadable message, or not at all."""
    root = node
    while isinstance(root, (ast.Attribute, ast.Subscript)):
        root = root.value
    shown = _source(node, names)
    if _dotted(node) is None or not isinstance(root, ast.Name) or root.id in _CONSTANTS:
        raise ExprError(f"{shown}: '.' and '[...]' may only spell a field path with literal "
                        "indices, e.g. hw.cores[3].sram_bytes; indexing or attributes of "
                        "values are not allowed")
    if root.id in names:
        raise ExprError(f"{shown}: write the whole field path inside the braces, e.g. "
                        "${hw.cores[3].sram_bytes}; attributes and indices of a ${...} "
                        "value are not allowed")


def _dotted(node: ast.AST) -> str | None:
    """``a.b[2].c`` as a field path, or None if ``node`` is not such a chain."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base is not None else None
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) \
            and isinstance(node.slice.value, int):
        base = _dotted(node.value)
        return f"{base}[{node.slice.value}]" if base is not None else None
    return None


def field_paths(node: ast.AST, names: dict[str, str]) -> list[str]:
    """Every field path an expression reads (``${...}`` and bare dotted paths)."""
    paths = list(names.values())

    def visit(child: ast.AST) -> None:
        if isinstance(child, ast.Call):
            for arg in child.args:
                visit(arg)
            return
        path = _dotted(child)
        if path is not None and path not in names and path not in _CONSTANTS:
            paths.append(path)
            return
        for grandchild in ast.iter_child_nodes(child):
            visit(grandchild)

    visit(node)
    return paths


def _source(node: ast.AST, names: dict[str, str], limit: int = 80) -> str:
    """``node`` as the user wrote it (``${...}`` restored), quoted and cut short."""
    text = ast.unparse(node)
    text = re.sub(r"\b__ref\d+\b", lambda m: "${" + names.get(m[0], m[0]) + "}", text)
    return f"`{text}`" if len(text) <= limit else f"`{text[:limit]}...`"


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    return {int: "an integer", float: "a number", str: "text", list: "a list",
            type(None): "None"}.get(type(value), type(value).__name__)


def _described(value: Any) -> str:
    return f"{_short(value)} ({_kind(value)})"


#: What each function accepts, for the message when a call fails.
_ACCEPTS = {"min": "numbers, or one non-empty list", "max": "numbers, or one non-empty list",
            "abs": "a number", "int": "a number or numeric text", "float": "a number or "
            "numeric text", "round": "a number and optionally a number of digits",
            "str": "one value", "len": "text or a list"}
_SYMBOLS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
            ast.Mod: "%", ast.Pow: "**", ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<",
            ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.In: "in", ast.NotIn: "not in",
            ast.USub: "-", ast.UAdd: "+", ast.Not: "not", ast.Invert: "~"}
_CONVERT = ("convert text first with size(), time_ps(), freq_hz(), bandwidth_bps(), int() "
            "or float()")


def _failure(node: ast.AST, names: dict[str, str], op: Any, args: list, exc: Exception) -> str:
    """A sentence for an operation that raised: what failed, on which values, and what
    is allowed (Python's own wording, ``'<' not supported between...``, is not)."""
    shown = _source(node, names)
    if isinstance(exc, ZeroDivisionError):
        return f"{shown} divides by zero"
    if isinstance(exc, OverflowError):
        return f"{shown} is out of range: a float holds at most about 1.8e308"
    if isinstance(node, ast.Call):
        name = node.func.id
        if name in _ACCEPTS:
            given = ", ".join(_described(a) for a in args) or "no arguments"
            return f"{shown}: {name}() takes {_ACCEPTS[name]}, got {given}"
        return f"{shown}: {exc}"  # the unit parsers' messages are already sentences
    operands = " and ".join(_described(a) for a in args)
    return f"{shown}: '{_SYMBOLS.get(op, '?')}' cannot be applied to {operands}; {_CONVERT}"


def _result(value: Any, node: ast.AST, names: dict[str, str]) -> Any:
    """``value`` if an operation may produce it: no integer over :data:`MAX_INT_BITS` bits
    (see there) and no complex number (``(-8) ** 0.5``)."""
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise ExprError(f"{_source(node, names)} is too large: the result has "
                        f"{value.bit_length():,} bits; at most {MAX_INT_BITS:,} are allowed")
    if isinstance(value, complex):
        raise ExprError(f"{_source(node, names)} has no real value")
    return value


def _apply(node: ast.AST, names: dict[str, str], op: Any, function: Callable[..., Any],
           args: list) -> Any:
    """``function(*args)`` for one operation of ``node``, failures and results checked."""
    try:
        value = function(*args)
    except ExprError:
        raise
    except Exception as exc:  # wrong types, division by zero, overflow, bad units
        raise ExprError(_failure(node, names, op, args, exc)) from None
    return _result(value, node, names)


def evaluate_node(node: ast.AST, names: dict[str, str], lookup: Lookup) -> Any:
    """Evaluate a parsed expression; field paths are read through ``lookup``."""
    def ev(n: ast.AST) -> Any:
        if isinstance(n, ast.Constant):
            return n.value
        if isinstance(n, (ast.List, ast.Tuple)):
            return [ev(e) for e in n.elts]
        if isinstance(n, ast.Name) and n.id in names:
            return lookup(names[n.id])
        if isinstance(n, ast.Name) and n.id in _CONSTANTS:
            return _CONSTANTS[n.id]
        path = _dotted(n)
        if path is not None:
            return lookup(path)
        if isinstance(n, ast.BinOp):
            op = type(n.op)
            return _apply(n, names, op, _BINARY[op], [ev(n.left), ev(n.right)])
        if isinstance(n, ast.UnaryOp):
            op = type(n.op)
            return _apply(n, names, op, _UNARY[op], [ev(n.operand)])
        if isinstance(n, ast.BoolOp):
            return _boolean(n, ev)
        if isinstance(n, ast.Compare):
            left = ev(n.left)
            for op, comparator in zip(n.ops, n.comparators):
                right = ev(comparator)
                if not _apply(n, names, type(op), _COMPARE[type(op)], [left, right]):
                    return False
                left = right
            return True
        if isinstance(n, ast.IfExp):
            return ev(n.body) if ev(n.test) else ev(n.orelse)
        if isinstance(n, ast.Call):
            return _apply(n, names, None, _FUNCTIONS[n.func.id], [ev(a) for a in n.args])
        raise ExprError(f"{_source(n, names)} cannot be evaluated")  # unreachable after _check

    try:
        return ev(node)
    except ExprError:
        raise
    except Exception as exc:  # a lookup that raised something else: still one sentence
        raise ExprError(f"{_source(node, names)} cannot be evaluated: {exc}") from None


def _boolean(node: ast.BoolOp, ev: Callable[[ast.AST], Any]) -> Any:
    """``and`` / ``or`` with Python's short-circuit semantics."""
    result: Any = isinstance(node.op, ast.And)
    for value in node.values:
        result = ev(value)
        if bool(result) != isinstance(node.op, ast.And):
            return result
    return result


def evaluate(text: str, lookup: Lookup) -> Any:
    """Evaluate a constraint expression to a value."""
    node, names = parse(text)
    return evaluate_node(node, names, lookup)


def parse_condition(text: str) -> tuple[ast.AST, dict[str, str]]:
    """Parse a constraint; a literal other than true/false (``"5"``, ``"'abc'"``) is
    refused here, once, rather than at every point."""
    node, names = parse(text)
    if isinstance(node, ast.Constant) and not isinstance(node.value, bool):
        raise ExprError(_not_a_condition(node, names, node.value))
    return node, names


def condition(text: str, lookup: Lookup) -> bool:
    """Evaluate a constraint, which must give true or false: ``"${workload.m}"`` would
    otherwise hold for every point with a non-zero m, silently."""
    node, names = parse_condition(text)
    value = evaluate_node(node, names, lookup)
    if not isinstance(value, bool):
        raise ExprError(_not_a_condition(node, names, value))
    return value


def _not_a_condition(node: ast.AST, names: dict[str, str], value: Any) -> str:
    return (f"{_source(node, names)} gives {_described(value)}, not true or false; a "
            "constraint is a condition, e.g. ${workload.m} % 64 == 0")


def render(template: str, lookup: Lookup) -> Any:
    """Value of a derived-field template (see the module docstring for the rules)."""
    whole = REF.fullmatch(template.strip())
    if whole:
        return lookup(whole[1].strip())
    if not REF.search(template):
        return template
    try:
        node, names = parse(template)
    except ExprError as exc:
        if not exc.syntax:
            raise
        # Not an expression: plain text substitution, e.g. "${mib}MiB".
        return REF.sub(lambda m: str(lookup(m[1].strip())), template)
    return evaluate_node(node, names, lookup)
