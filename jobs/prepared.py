"""Reads compiled once per process and shape, run again with new values (docs/processes.md,
"Reads compiled once").

Django builds and compiles a queryset's SQL at every run: for the pods of a node with their
jobs (`select_related`, 85 columns) 0.12 ms to build and 0.30 ms to compile, several times
in every busy heartbeat, a fifth of the web's CPU in the full Kueue variant. A
`PreparedRead` builds its queryset once per shape (the length of each list argument) with
stand-in values, compiles it, and finds where each stand-in landed among the statement's
parameters; a run fills those places with the real values and lets Django's own iterable
make the instances from the rows (converters, `select_related` included), as for any
queryset. Anything else in the parameters is a constant of the builder. If the stand-ins do
not come out one to one (a builder that drops or repeats a value; their order does not
matter, each is found by value), that shape is not prepared and every run builds its
queryset as before.

Only for reads whose SQL depends on nothing but the shape of their arguments: the builder
must use its arguments as filter values and nothing else.
"""

import copy
import threading
from collections.abc import Callable, Sequence
from typing import Any

from django.core.exceptions import EmptyResultSet
from django.db import connections
from django.db.models import Model, QuerySet

from protocol import limits

Arg = int | Sequence[int]

# Stand-ins far outside any id or count: each place in the statement is found by value.
_STAND_IN_BASE = -(10**15)


class _Compiled:
    """A compiled template: runs hand Django's iterable a copy of its compiler whose
    `as_sql` answers the statement with the run's parameters."""

    def __init__(self, queryset: QuerySet, slots: list[tuple[int, int | None] | None]):
        self.queryset = queryset
        self.compiler = queryset.query.get_compiler(using=queryset.db)
        self.sql, self.constants = self.compiler.as_sql()  # also sets up select, klass_info
        self.slots = slots

    def params(self, args: tuple[Arg, ...]) -> list[Any]:
        values: list[Any] = []
        for constant, slot in zip(self.constants, self.slots, strict=True):
            if slot is None:
                values.append(constant)
            else:
                arg, index = slot
                values.append(args[arg] if index is None else args[arg][index])
        return values

    def run(self, args: tuple[Arg, ...]) -> list[Model]:
        compiler = copy.copy(self.compiler)
        compiler.connection = connections[self.queryset.db]  # this thread's own connection
        sql, params = self.sql, self.params(args)
        compiler.as_sql = lambda *a, **k: (sql, params)  # this run's values, compiled once
        template = self.queryset
        query = _Compiled._Query(template.query, compiler)
        return list(type(template)(model=template.model, query=query, using=template.db))

    class _Query:
        """What Django's model iterable asks of a query: its compiler (the prepared one)."""

        def __init__(self, query, compiler) -> None:
            self._query, self._compiler = query, compiler

        def get_compiler(self, using=None, connection=None, elide_empty=True):
            return self._compiler

        def __getattr__(self, name: str) -> Any:
            return getattr(self._query, name)


class PreparedRead:
    """`read(*args)`: the instances `build(*args)` would give, its SQL compiled once per
    shape. Each argument is an id or a list of ids."""

    def __init__(self, build: Callable[..., QuerySet]) -> None:
        self._build = build
        self._lock = threading.Lock()
        self._shapes: dict[tuple, _Compiled | None] = {}

    def __call__(self, *args: Arg) -> list[Model]:
        args = tuple(a if isinstance(a, int) else list(a) for a in args)
        shape = (connections["default"].vendor, *(_shape(a) for a in args))
        compiled = self._shapes.get(shape, False)
        if compiled is False:
            compiled = self._prepare(shape, args)
        if compiled is None:
            return list(self._build(*args))
        return compiled.run(args)

    def _prepare(self, shape: tuple, args: tuple[Arg, ...]) -> _Compiled | None:
        stand_ins, places = _stand_ins(args)
        try:
            compiled = _Compiled(self._build(*stand_ins), [])
        except EmptyResultSet:  # an empty list that empties the read: Django answers it
            return self._remember(shape, None)
        slots = [
            places.get(value) if isinstance(value, int) else None for value in compiled.constants
        ]
        found = [slot for slot in slots if slot is not None]
        if len(found) != len(places) or len(set(found)) != len(found):
            compiled = None  # a stand-in dropped or repeated: not preparable
        else:
            compiled.slots = slots
        return self._remember(shape, compiled)

    def _remember(self, shape: tuple, compiled: _Compiled | None) -> _Compiled | None:
        with self._lock:
            if len(self._shapes) >= limits.PREPARED_SHAPES:
                self._shapes.clear()  # bounded: shapes are list lengths, few in practice
            self._shapes[shape] = compiled
        return compiled


def _shape(arg: Arg) -> int | None:
    return None if isinstance(arg, int) else len(arg)


def _stand_ins(args: tuple[Arg, ...]) -> tuple[tuple[Arg, ...], dict[int, tuple[int, int | None]]]:
    """Distinct stand-in values for every id, and where each came from."""
    places: dict[int, tuple[int, int | None]] = {}
    stand_ins: list[Arg] = []
    for position, arg in enumerate(args):
        if isinstance(arg, int):
            value = _STAND_IN_BASE - len(places)
            places[value] = (position, None)
            stand_ins.append(value)
            continue
        values = []
        for index in range(len(arg)):
            value = _STAND_IN_BASE - len(places)
            places[value] = (position, index)
            values.append(value)
        stand_ins.append(values)
    return tuple(stand_ins), places
