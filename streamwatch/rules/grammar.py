"""The condition language of ``[[rules]]``: a hand-written tokenizer and recursive-descent
parser (nothing is evaluated by Python itself), and the tree they build.

One module because the language is one thing: its tokens, its grammar and the tree the
parser builds change together, and are read together.

The grammar, loosest binding first::

    condition  := or
    or         := and ("or" and)*
    and        := not ("and" not)*
    not        := "not" not | comparison
    comparison := sum (("<" | "<=" | ">" | ">=" | "==" | "!=") sum)?
    sum        := product (("+" | "-") product)*
    product    := unary (("*" | "/") unary)*
    unary      := "-" unary | atom
    atom       := NUMBER | metric | FUNCTION "(" metric ["," INTEGER] ")" | "(" condition ")"
    metric     := a bare name (a letter or "_", then letters, digits, "/", ".", "@", "-",
                  "_") or any name in backticks: `my metric (%)`

A bare name swallows "/" and "-": write division and subtraction with spaces around them
(``timing_s/gen / timing_s/step``). The functions read the metric's logged values, one a
step: ``value(m)`` (= ``m``, its newest value), ``mean``, ``min``, ``max``, ``median`` and
``slope`` (least squares, per step) of the last N values, ``best(m)`` (its largest value so
far), ``start(m, N)`` (the mean of its first N values), ``drop_from_best(m)`` (best minus
value) and ``missing(m, N)`` (true when m was not logged at the run's last N steps, while
other metrics were). A condition is true or false: a comparison, or ``missing``, joined by
``and``, ``or``, ``not``.

>>> c = parse("mean(rewards/format/mean, 20) < 0.05 and not missing(`eval acc`, 5)")
>>> c.metrics
('rewards/format/mean', 'eval acc')
>>> c.text
'mean(rewards/format/mean, 20) < 0.05 and not missing(`eval acc`, 5)'
>>> c.windows()
{'rewards/format/mean': 20, 'eval acc': 1}
>>> parse("timing_s/gen / timing_s/step > 0.5").text
'timing_s/gen / timing_s/step > 0.5'
>>> parse("drop_from_best(val/pass@1) >= 0.1").metrics
('val/pass@1',)
>>> def error(text):
...     try:
...         parse(text)
...     except RuleSyntaxError as exc:
...         return f"line {exc.line}, column {exc.column}: {exc.reason}"
>>> error("mean(loss, 3) <")
"line 1, column 16: expected a number, a metric, a function or '(', found the end"
>>> error("loss + 1")  # doctest: +ELLIPSIS
'line 1, column 1: a condition must be true or false (...); this is a number'
>>> error("avg(loss, 3) > 1")  # doctest: +ELLIPSIS
"line 1, column 1: unknown function 'avg'; known: best, drop_from_best, max, ..."
>>> error("a > 0 and\\n  `val acc > 1")
'line 2, column 3: a name in backticks is not closed'
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final, Protocol

__all__ = [
    "FUNCTIONS",
    "MAX_WINDOW",
    "Condition",
    "Env",
    "Node",
    "RuleSyntaxError",
    "Term",
    "parse",
]

#: The largest window a function may ask for (values kept per metric).
MAX_WINDOW: Final = 10_000

#: A value a node takes: a number, a truth, or None (not known yet: a window not full).
Value = float | bool | None


@dataclass(frozen=True, slots=True)
class _Function:
    windowed: bool  # takes N
    least: int  # the smallest N
    truth: bool  # gives true or false, not a number


FUNCTIONS: Final = {
    "value": _Function(False, 1, False),
    "best": _Function(False, 1, False),
    "drop_from_best": _Function(False, 1, False),
    "mean": _Function(True, 1, False),
    "min": _Function(True, 1, False),
    "max": _Function(True, 1, False),
    "median": _Function(True, 1, False),
    "slope": _Function(True, 2, False),
    "start": _Function(True, 1, False),
    "missing": _Function(True, 1, True),
}

_KEYWORDS: Final = frozenset({"and", "or", "not"})
_BARE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_/.@\-]*")
_NUMBER: Final = re.compile(r"(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_OPERATORS: Final = ("<=", ">=", "==", "!=", "<", ">", "+", "-", "*", "/", "(", ")", ",")
_COMPARISONS: Final = frozenset({"<", "<=", ">", ">=", "==", "!="})


class RuleSyntaxError(ValueError):
    """A condition that does not parse: what was expected, at which line and column (both
    counted from 1)."""

    def __init__(self, message: str, line: int, column: int) -> None:
        super().__init__(f"line {line}, column {column}: {message}")
        self.reason = message
        self.line = line
        self.column = column


class Env(Protocol):
    """What a condition reads its terms from (a run's rule state)."""

    def read(self, term: Term) -> Value: ...


def _metric_text(name: str) -> str:
    bare = _BARE.fullmatch(name) is not None and name not in _KEYWORDS
    return name if bare and name not in FUNCTIONS else f"`{name}`"


@dataclass(frozen=True, slots=True)
class Num:
    value: float
    truth = False

    def eval(self, env: Env) -> Value:
        return self.value

    def text(self) -> str:
        return f"{self.value:g}"

    def terms(self) -> Iterator[Term]:
        return iter(())


@dataclass(frozen=True, slots=True)
class Term:
    """A metric read by a function: ``fn`` is ``value`` for a bare metric; ``n`` is 0 for a
    function without a window."""

    fn: str
    metric: str
    n: int = 0

    @property
    def truth(self) -> bool:
        return FUNCTIONS[self.fn].truth

    def eval(self, env: Env) -> Value:
        return env.read(self)

    def text(self) -> str:
        name = _metric_text(self.metric)
        if self.fn == "value":
            return name
        return f"{self.fn}({name}, {self.n})" if self.n else f"{self.fn}({name})"

    def terms(self) -> Iterator[Term]:
        yield self


@dataclass(frozen=True, slots=True)
class Neg:
    operand: Node
    truth = False

    def eval(self, env: Env) -> Value:
        x = self.operand.eval(env)
        return None if x is None else -float(x)

    def text(self) -> str:
        return f"-{_wrapped(self.operand)}"

    def terms(self) -> Iterator[Term]:
        return self.operand.terms()


@dataclass(frozen=True, slots=True)
class Binary:
    """Arithmetic (``+ - * /``), a comparison, or ``and``/``or``."""

    op: str
    left: Node
    right: Node

    @property
    def truth(self) -> bool:
        return self.op in _COMPARISONS or self.op in ("and", "or")

    def eval(self, env: Env) -> Value:
        op = self.op
        a = self.left.eval(env)
        if (op == "and" and a is False) or (op == "or" and a is True):
            return a
        b = self.right.eval(env)
        if op in ("and", "or"):
            return _logic(op, a, b)
        if a is None or b is None:
            return None
        return _compare(op, float(a), float(b)) if op in _COMPARISONS else _arith(op, a, b)

    def text(self) -> str:
        return f"{_wrapped(self.left, self)} {self.op} {_wrapped(self.right, self, right=True)}"

    def terms(self) -> Iterator[Term]:
        yield from self.left.terms()
        yield from self.right.terms()


@dataclass(frozen=True, slots=True)
class Not:
    operand: Node
    truth = True

    def eval(self, env: Env) -> Value:
        x = self.operand.eval(env)
        return None if x is None else not x

    def text(self) -> str:
        return f"not {_wrapped(self.operand, self)}"

    def terms(self) -> Iterator[Term]:
        return self.operand.terms()


Node = Num | Term | Neg | Binary | Not

#: how tightly each operator binds (a node of a looser one is wrapped in parentheses)
_BINDING: Final = {"or": 1, "and": 2, "not": 3, "+": 5, "-": 5, "*": 6, "/": 6}


def _binding(node: Node) -> int:
    if isinstance(node, Binary):
        return _BINDING.get(node.op, 4)
    return _BINDING["not"] if isinstance(node, Not) else 9


def _wrapped(node: Node, parent: Node | None = None, right: bool = False) -> str:
    outer = _binding(parent) if parent is not None else 7
    inner = _binding(node)
    loose = inner < outer or (right and inner == outer and inner != 9)
    return f"({node.text()})" if loose else node.text()


def _logic(op: str, a: Value, b: Value) -> Value:
    """Three-valued: unknown stays unknown unless the other side decides."""
    if op == "and":
        return False if b is False else (None if a is None or b is None else True)
    return True if b is True else (None if a is None or b is None else False)


def _compare(op: str, a: float, b: float) -> bool:
    if op == "<":
        return a < b
    if op == "<=":
        return a <= b
    if op == ">":
        return a > b
    if op == ">=":
        return a >= b
    return a == b if op == "==" else a != b


def _arith(op: str, a: float | bool, b: float | bool) -> float | None:
    x, y = float(a), float(b)
    if op == "+":
        return x + y
    if op == "-":
        return x - y
    if op == "*":
        return x * y
    return x / y if y != 0.0 else None  # a ratio over zero is not known


# -- tokens ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # "num", "name", "quoted", "op", "word" (and, or, not), "end"
    text: str
    at: int  # its offset in the condition


def _tokens(text: str) -> list[_Token]:
    out: list[_Token] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isspace():
            i += 1
            continue
        token = _token_at(text, i)
        out.append(token)
        i = token.at + len(token.text) + (2 if token.kind == "quoted" else 0)
    out.append(_Token("end", "", len(text)))
    return out


def _token_at(text: str, i: int) -> _Token:
    ch = text[i]
    if ch == "`":
        close = text.find("`", i + 1)
        if close < 0:
            raise _error(text, i, "a name in backticks is not closed")
        if close == i + 1 or "\n" in text[i + 1 : close]:
            raise _error(text, i, "a name in backticks must be one line, not empty")
        return _Token("quoted", text[i + 1 : close], i)
    number = _NUMBER.match(text, i)
    if number:
        return _Token("num", number.group(), i)
    name = _BARE.match(text, i)
    if name:
        word = name.group()
        return _Token("word" if word in _KEYWORDS else "name", word, i)
    for op in _OPERATORS:
        if text.startswith(op, i):
            return _Token("op", op, i)
    raise _error(text, i, f"unexpected character {ch!r}")


def _error(text: str, at: int, message: str) -> RuleSyntaxError:
    line = text.count("\n", 0, at) + 1
    column = at - (text.rfind("\n", 0, at) + 1) + 1
    return RuleSyntaxError(message, line, column)


def _shown(token: _Token) -> str:
    if token.kind == "end":
        return "the end"
    return f"`{token.text}`" if token.kind == "quoted" else repr(token.text)


# -- the parser --------------------------------------------------------------------------


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokens(text)
        self.i = 0

    @property
    def next(self) -> _Token:
        return self.tokens[self.i]

    def take(self) -> _Token:
        token = self.tokens[self.i]
        self.i += 1
        return token

    def at(self, *texts: str) -> bool:
        token = self.next
        return token.kind in ("op", "word") and token.text in texts

    def expect(self, text: str, what: str) -> _Token:
        if not self.at(text):
            raise self.error(self.next, f"expected {what}, found {_shown(self.next)}")
        return self.take()

    def error(self, token: _Token, message: str) -> RuleSyntaxError:
        return _error(self.text, token.at, message)

    def typed(self, node: Node, token: _Token, truth: bool, where: str) -> Node:
        """``node`` (begun at ``token``) when it is a truth, or a number, as ``where`` needs."""
        if node.truth != truth:
            want = "a comparison or a truth" if truth else "a number"
            got = "a truth" if node.truth else "a number"
            raise self.error(token, f"{where} needs {want}, not {got}")
        return node

    def condition(self) -> Node:
        first = self.next
        node = self.disjunction()
        if not node.truth:
            why = "a comparison, missing(), and/or/not"
            raise self.error(first, f"a condition must be true or false ({why}); this is a number")
        return node

    def disjunction(self) -> Node:
        first = self.next
        node = self.conjunction()
        while self.at("or"):
            self.take()
            self.typed(node, first, True, "'or'")
            right_first = self.next
            right = self.typed(self.conjunction(), right_first, True, "'or'")
            node = Binary("or", node, right)
        return node

    def conjunction(self) -> Node:
        first = self.next
        node = self.negation()
        while self.at("and"):
            self.take()
            self.typed(node, first, True, "'and'")
            right_first = self.next
            right = self.typed(self.negation(), right_first, True, "'and'")
            node = Binary("and", node, right)
        return node

    def negation(self) -> Node:
        if self.at("not"):
            self.take()
            first = self.next
            return Not(self.typed(self.negation(), first, True, "'not'"))
        return self.comparison()

    def comparison(self) -> Node:
        first = self.next
        node = self.sum()
        if self.next.kind == "op" and self.next.text in _COMPARISONS:
            op = self.take().text
            self.typed(node, first, False, f"{op!r}")
            right_first = self.next
            right = self.typed(self.sum(), right_first, False, f"{op!r}")
            node = Binary(op, node, right)
            if self.next.kind == "op" and self.next.text in _COMPARISONS:
                raise self.error(self.next, "comparisons do not chain: join them with 'and'")
        return node

    def sum(self) -> Node:
        return self.chain(("+", "-"), self.product)

    def product(self) -> Node:
        return self.chain(("*", "/"), self.unary)

    def chain(self, ops: tuple[str, ...], operand: _Operand) -> Node:
        first = self.next
        node = operand()
        while self.next.kind == "op" and self.next.text in ops:
            op = self.take().text
            self.typed(node, first, False, f"{op!r}")
            right_first = self.next
            node = Binary(op, node, self.typed(operand(), right_first, False, f"{op!r}"))
        return node

    def unary(self) -> Node:
        if self.at("-"):
            self.take()
            first = self.next
            return Neg(self.typed(self.unary(), first, False, "'-'"))
        return self.atom()

    def atom(self) -> Node:
        token = self.take()
        if token.kind == "num":
            return Num(float(token.text))
        if token.kind == "quoted":
            return Term("value", token.text)
        if token.kind == "name":
            return self.call(token) if self.at("(") else Term("value", token.text)
        if token.kind == "op" and token.text == "(":
            node = self.disjunction()
            self.expect(")", "')'")
            return node
        raise self.error(
            token, f"expected a number, a metric, a function or '(', found {_shown(token)}"
        )

    def call(self, name: _Token) -> Term:
        fn = FUNCTIONS.get(name.text)
        if fn is None:
            known = ", ".join(sorted(FUNCTIONS))
            raise self.error(name, f"unknown function {name.text!r}; known: {known}")
        self.take()  # (
        metric = self.take()
        if metric.kind not in ("name", "quoted"):
            raise self.error(metric, f"{name.text}() reads a metric, found {_shown(metric)}")
        n = self.window(name.text, fn) if fn.windowed else 0
        self.expect(")", f"')' after {name.text}()'s arguments")
        return Term(name.text, metric.text, n)

    def window(self, fn_name: str, fn: _Function) -> int:
        self.expect(",", f"',' and the number of steps of {fn_name}()")
        token = self.take()
        if token.kind != "num" or not token.text.isdigit():
            raise self.error(token, f"{fn_name}()'s steps must be a whole number")
        n = int(token.text)
        if not fn.least <= n <= MAX_WINDOW:
            raise self.error(token, f"{fn_name}()'s steps must be {fn.least}..{MAX_WINDOW}")
        return n


class _Operand(Protocol):
    def __call__(self) -> Node: ...


@dataclass(frozen=True, slots=True)
class Condition:
    """A parsed condition: its tree, its text as written back, the metrics it reads."""

    root: Node
    text: str
    metrics: tuple[str, ...]

    def terms(self) -> tuple[Term, ...]:
        """Every term read, once each, in the order of the text."""
        return tuple(dict.fromkeys(self.root.terms()))

    def windows(self) -> dict[str, int]:
        """Per metric: the most values a term keeps of it (at least 1)."""
        out = dict.fromkeys(self.metrics, 1)
        for t in self.terms():
            if t.fn != "missing":
                out[t.metric] = max(out[t.metric], t.n)
        return out

    def starts(self) -> dict[str, int]:
        """Per metric read by ``start()``: the most first values it averages."""
        out: dict[str, int] = {}
        for t in self.terms():
            if t.fn == "start":
                out[t.metric] = max(out.get(t.metric, 0), t.n)
        return out

    def eval(self, env: Env) -> Value:
        return self.root.eval(env)


def parse(text: str) -> Condition:
    """The condition ``text`` as a tree; :class:`RuleSyntaxError` says where it is wrong."""
    if not text.strip():
        raise RuleSyntaxError("the condition is empty", 1, 1)
    p = _Parser(text)
    root = p.condition()
    if p.next.kind != "end":
        raise p.error(p.next, f"expected an operator or the end, found {_shown(p.next)}")
    metrics = tuple(dict.fromkeys(t.metric for t in root.terms()))
    if not metrics:
        raise RuleSyntaxError("the condition reads no metric", 1, 1)
    return Condition(root, root.text(), metrics)
