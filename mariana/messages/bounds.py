"""How much a msgpack header frame would build, bounded before msgpack builds any of it.

msgpack's own limits bound each string, binary and container on its own, not their number: one
byte (``0x90``) is an empty list, so a 60 MB header can hold 60 million lists, 4 GB of Python
objects and many seconds of allocation and garbage collection. ``check`` refuses a header that
may hold more than ``max_containers`` lists and maps or more than ``max_items`` values (keys and
containers included) before anything is built, with work bounded by the budgets, not by the
header's content:

1. Every container starts with one of 36 byte values, so their count in the frame (a C-speed
   ``bytes.translate``/``count``) bounds the containers from above. (A frame no longer than
   both budgets needs no count at all: it holds no more values than bytes; codec.decode skips
   ``check`` for it.)
2. Only when that bound exceeds ``max_containers``, or the frame is longer than ``max_items``,
   does an exact walk over the items run (a str's or an array reference's bytes are jumped over,
   runs of one-byte items are matched in C). It stops as soon as a budget is exceeded.

Nesting depth (levels of containers, an empty one included) is the caller's (codec.decode): the
candidate count bounds it too, and where it does not, msgpack's own fixed stack of
``MSGPACK_STACK`` levels does the counting.

Cost: the count is ~0.4 ns a byte (0.2 us for a small header); the exact walk ~100 ns an item,
so a refusal costs at most about a budget's worth of items (a 60 MB frame of empty lists: ~20
ms; millions of lists of one short str each: ~1 s at the default ``max_containers``).
"""

from __future__ import annotations

import re

from ..errors import ProtocolError

#: the depth msgpack's C unpacker refuses beyond (its fixed stack: StackError)
MSGPACK_STACK = 1024

#: 1 for the bytes that start a container (fixmap, fixarray, array16/32, map16/32), else 0
_CONTAINER = bytes(1 if (0x80 <= b <= 0x9F or 0xDC <= b <= 0xDF) else 0 for b in range(256))

#: bytes of an item by its first byte, for the scalars of two bytes or more (fixstr, numbers,
#: fixext); 0 for the rest: one-byte items, containers, items whose length follows
_STEP = [0] * 256
for _b in range(0xA1, 0xC0):
    _STEP[_b] = 1 + (_b & 0x1F)
for _b, _n in {0xCA: 5, 0xCB: 9, 0xCC: 2, 0xCD: 3, 0xCE: 5, 0xCF: 9, 0xD0: 2, 0xD1: 3, 0xD2: 5, 0xD3: 9,
               0xD4: 3, 0xD5: 4, 0xD6: 6, 0xD7: 10, 0xD8: 18}.items():
    _STEP[_b] = _n
#: the containers' header bytes beyond fix- (array16/32, map16/32)
_WIDE = {0xDC: 3, 0xDD: 5, 0xDE: 3, 0xDF: 5}
#: 1 for the one-byte items: fixints, fixmaps, fixarrays, nil, booleans, the empty str
_ONE = bytes(1 if (b <= 0xA0 or b >= 0xE0 or b in (0xC0, 0xC2, 0xC3)) else 0 for b in range(256))
#: variable-length items: (bytes of the length field, bytes before the body)
_VAR = {0xC4: (1, 2), 0xC5: (2, 3), 0xC6: (4, 5), 0xC7: (1, 3), 0xC8: (2, 4), 0xC9: (4, 6),
        0xD9: (1, 2), 0xDA: (2, 3), 0xDB: (4, 5)}
#: a run of one-byte items (fixints, fixmaps, fixarrays, nil, booleans, the empty str)
_RUN = re.compile(rb"[\x00-\xa0\xc0\xc2\xc3\xe0-\xff]+")
_CHUNK = 1 << 20  # a run is matched and counted this many bytes at a time (the budget is checked between)


def containers_at_most(head: bytes | memoryview, stop: int) -> int:
    """An upper bound on the containers in ``head``: the count of bytes that may start one.
    Counting stops once it exceeds ``stop``."""
    if type(head) is bytes and len(head) <= _CHUNK:
        return head.translate(_CONTAINER).count(1)
    total = 0
    for i in range(0, len(head), _CHUNK):
        total += bytes(head[i:i + _CHUNK]).translate(_CONTAINER).count(1)
        if total > stop:
            break
    return total


def check(head: bytes | memoryview, max_containers: int, max_items: int) -> int:
    """Refuse (``ProtocolError("structure", ...)``) a header that may hold more than
    ``max_containers`` containers or ``max_items`` items; else return the upper bound on its
    containers (which also bounds its nesting depth)."""
    bound = containers_at_most(head, max_containers)
    if bound <= max_containers and len(head) <= max_items:
        return bound
    containers, items = _walk(head, max_containers, max_items)
    if containers > max_containers:
        raise ProtocolError("structure", f"header holds more than {max_containers} lists and maps (max_containers)")
    if items > max_items:
        raise ProtocolError("structure", f"header holds more than {max_items} values (max_items)")
    return containers


def _walk(data: bytes | memoryview, max_containers: int, max_items: int) -> tuple[int, int]:
    """(containers, items) of ``data`` in msgpack's order, or the counts when a budget was first
    exceeded. Malformed bytes end the walk (msgpack refuses them next)."""
    n = len(data)
    pos = items = containers = 0
    step_of, one, cont, wide, var, run = _STEP, _ONE, _CONTAINER, _WIDE, _VAR, _RUN.match
    while pos < n:
        b = data[pos]
        step = step_of[b]
        if step:  # a scalar of fixed size (the common case)
            pos += step
            items += 1
            if items > max_items:
                break
            continue
        if one[b]:
            if pos + 1 == n or not one[data[pos + 1]]:
                pos += 1
                items += 1
                if cont[b]:
                    containers += 1
                    if containers > max_containers:
                        break
                continue
            # a run of one-byte items (fixmaps and fixarrays among them): matched and counted in C
            end = run(data, pos, min(n, pos + _CHUNK)).end()  # type: ignore[union-attr]  # (data[pos] matches)
            items += end - pos
            containers += bytes(data[pos:end]).translate(_CONTAINER).count(1)
            pos = end
        elif b in wide:
            pos += wide[b]
            items += 1
            containers += 1
        elif b in var:
            width, before = var[b]
            if pos + before > n:
                break
            pos += before + int.from_bytes(data[pos + 1:pos + 1 + width], "big")
            items += 1
        else:  # 0xc1: never valid
            break
        if containers > max_containers or items > max_items:
            break
    return containers, items
