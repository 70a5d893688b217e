"""PyTorch flight-recorder dumps: which ranks never joined the collective a job hung in.

With ``TORCH_FR_BUFFER_SIZE`` (formerly ``TORCH_NCCL_TRACE_BUFFER_SIZE``) set, every rank keeps a
ring buffer of its last collectives and writes it on a timeout (``TORCH_FR_DUMP_TEMP_FILE`` +
rank) or on request (``torch._C._distributed_c10d._dump_fr_trace()`` / ``_dump_fr_trace_json()``).
The dump is a dict (pickled, or JSON) with ``version``, ``pg_config`` (per process group its
``ranks``), ``pg_status`` and ``entries``: one per collective with ``collective_seq_id``,
``profiling_name`` (``nccl:all_reduce``), ``process_group`` (name, description), ``state``
(scheduled / started / completed) and ``is_p2p``. The format is torch's own:
torch/distributed/flight_recorder/components/loader.py reads it the same way (rank from the
file name's trailing digits).

A pickle can run code when loaded; dumps are read with an unpickler that refuses every class,
so only plain containers, strings and numbers load. A pickle can also be small and unpickle to
something huge (each one-byte opcode makes an object): before loading, its opcodes are walked
(``pickletools.genops``, nothing built) and the memory they would take is estimated, generously;
a dump over ``MAX_LOADED`` is refused unloaded. JSON grows at most about twenty-fold and is capped
on bytes. After loading, the fields analysed are checked for type (``check_dump``): a dump
whose ``ranks``, ``state`` or ``collective_seq_id`` is of another type is one line, exit 2.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

from envbuilder.errors import InputError
from envbuilder.diagnose.facts import FlightRecord

__all__ = ["analyse_dumps", "is_dump", "load_dump"]

MAX_DUMP_BYTES = 32 << 20  # a pickled dump (torch's default ring buffer: 2000 entries, a few MB)
MAX_JSON_BYTES = 12 << 20  # a JSON dump: at most about 20 times this once loaded
MAX_LOADED = 256 << 20  # the estimated memory a pickled dump may unpickle to
_OP_COST = 64  # bytes an opcode's object takes at most, besides its payload (a generous bound)
_RANK = re.compile(r"(\d+)(?:\.(?:pkl|pickle|json))?\Z")
_INTS = re.compile(r"-?\d+")


def _plain_load(data: bytes) -> Any:
    """Unpickle ``data`` allowing dicts, lists, tuples, strings, numbers, booleans and None;
    nothing else (pickle is imported here: explain reads a dump rarely, a log always)."""
    import pickle

    class _PlainUnpickler(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            raise pickle.UnpicklingError(f"refused to load {module}.{name}: a flight-recorder "
                                         "dump holds only plain containers")

        def persistent_load(self, pid: Any) -> Any:
            raise pickle.UnpicklingError("refused a persistent id")

    return _PlainUnpickler(io.BytesIO(data)).load()


def is_dump(head: bytes) -> bool:
    """Whether a file starting with ``head`` is a flight-recorder dump (pickle or JSON)."""
    if head[:1] == b"\x80":
        return b"entries" in head or b"pg_config" in head
    text = head.lstrip()[:4096]
    return text[:1] == b"{" and b'"entries"' in text and (b'"pg_config"' in text or b'"version"' in text)


def _pickle_cost(data: bytes, path: str) -> None:
    """Refuse a pickle whose objects would take more than MAX_LOADED (estimated from its
    opcodes before anything is built)."""
    import pickletools

    cost = 0
    try:
        for op, arg, _pos in pickletools.genops(io.BytesIO(data)):
            cost += _OP_COST
            if isinstance(arg, (str, bytes, bytearray)):
                cost += len(arg)
            elif isinstance(arg, int) and not isinstance(arg, bool) and op.name.startswith("LONG"):
                cost += arg.bit_length() // 8
            if cost > MAX_LOADED:
                raise InputError(f"{path}: this flight-recorder dump would take more than "
                                 f"{MAX_LOADED >> 20} MiB once loaded: not one torch wrote")
            if op.name == "STOP":
                break
    except InputError:
        raise
    except (ValueError, EOFError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not a readable flight-recorder dump: {exc}") from None


def load_dump(path: str) -> tuple[int, dict[str, Any]]:
    """(rank, dump) of one dump file; InputError naming the file when it is not one."""
    from envbuilder.core.readfile import read_bytes_capped

    p = Path(path)
    m = _RANK.search(p.name)
    if m is None:
        raise InputError(f"{path}: a flight-recorder dump is named by its rank (e.g. nccl_trace_rank_3, "
                         "as torch writes it); rename it so the name ends with the rank")
    data = read_bytes_capped(p, "flight-recorder dump", limit=MAX_DUMP_BYTES)
    from pickle import UnpicklingError

    try:
        if data[:1] == b"\x80":
            _pickle_cost(data, path)
            dump = _plain_load(data)
        else:
            if len(data) > MAX_JSON_BYTES:
                raise InputError(f"{path}: JSON flight-recorder dump larger than "
                                 f"{MAX_JSON_BYTES >> 20} MiB")
            dump = json.loads(data.decode("utf-8"))
    except (UnpicklingError, EOFError, ValueError, UnicodeDecodeError, IndexError,
            TypeError, AttributeError, KeyError, RecursionError, MemoryError) as exc:
        raise InputError(f"{path}: not a readable flight-recorder dump: {exc}") from None
    return int(m.group(1)), check_dump(dump, path)


def check_dump(dump: Any, path: str) -> dict[str, Any]:
    """``dump`` when the fields analysed have their types (an ``entries`` list of objects whose
    ``collective_seq_id`` is an int, ``state`` and ``profiling_name`` strings, ``is_p2p`` a bool,
    ``process_group`` a list; ``pg_config`` an object of objects whose ``ranks`` is a list of
    ints or their text); else InputError naming the file and the field."""
    def bad(where: str, v: Any, want: str) -> InputError:
        return InputError(f"{path}: {where} is {type(v).__name__}, not {want}: not a "
                          f"flight-recorder dump torch wrote")

    if not isinstance(dump, dict) or not isinstance(dump.get("entries"), list):
        raise InputError(f"{path}: not a flight-recorder dump (no 'entries' list)")
    for i, e in enumerate(dump["entries"]):
        if not isinstance(e, dict):
            continue  # not analysed
        for key, kind, want in (("collective_seq_id", int, "an int"), ("state", str, "a string"),
                                ("profiling_name", str, "a string"), ("is_p2p", bool, "a bool"),
                                ("process_group", (list, tuple), "a list"),
                                ("pg_id", (int, str), "an int")):
            v = e.get(key)
            if v is not None and (not isinstance(v, kind) or (kind is int and isinstance(v, bool))):
                raise bad(f"entries[{i}].{key}", v, want)
    config = dump.get("pg_config")
    if config is not None and not isinstance(config, dict):
        raise bad("pg_config", config, "an object")
    for name, body in (config or {}).items():
        if not isinstance(body, dict):
            continue
        ranks = body.get("ranks")
        if ranks is None or isinstance(ranks, str):
            continue
        if not isinstance(ranks, list) or not all(
                isinstance(r, int) and not isinstance(r, bool) for r in ranks):
            raise bad(f"pg_config[{str(name)[:40]!r}].ranks", ranks, "a list of ints")
    return dump


def _pg_key(entry: dict[str, Any]) -> str:
    pg = entry.get("process_group")
    if isinstance(pg, (list, tuple)) and pg:
        return str(pg[0])
    return str(entry.get("pg_id", "0"))


def _pg_ranks(dumps: dict[int, dict[str, Any]], pg: str) -> tuple[int, ...]:
    for dump in dumps.values():
        config = dump.get("pg_config")
        if isinstance(config, dict):
            for name, body in config.items():
                if str(name) == pg or (isinstance(body, dict) and str(body.get("name")) == pg):
                    ranks = body.get("ranks") if isinstance(body, dict) else None
                    if isinstance(ranks, str):
                        return tuple(int(x) for x in _INTS.findall(ranks))
                    if isinstance(ranks, list):
                        return tuple(int(x) for x in ranks)
    return tuple(sorted(dumps))


def analyse_dumps(dumps: dict[int, dict[str, Any]], source: str) -> list[FlightRecord]:
    """Per process group, the furthest collective any rank reached and the member ranks whose
    dump ends before it (ranks without a dump are not named). Groups where
    every rank reached the same collective and it completed are not reported."""
    per_pg: dict[str, dict[int, list[dict[str, Any]]]] = {}
    for rank, dump in dumps.items():
        for entry in dump["entries"]:
            if not isinstance(entry, dict) or entry.get("is_p2p"):
                continue
            seq = entry.get("collective_seq_id")
            if not isinstance(seq, int) or seq <= 0:
                continue
            per_pg.setdefault(_pg_key(entry), {}).setdefault(rank, []).append(entry)
    out: list[FlightRecord] = []
    for pg, by_rank in sorted(per_pg.items()):
        members = _pg_ranks(dumps, pg) or tuple(sorted(by_rank))
        last = {r: max(e["collective_seq_id"] for e in es) for r, es in by_rank.items()}
        top = max(last.values())
        entry = next(e for es in by_rank.values() for e in es if e["collective_seq_id"] == top)
        op = str(entry.get("profiling_name") or "collective").split(":")[-1]
        joined = tuple(sorted(r for r, s in last.items() if s >= top))
        missing = tuple(sorted(r for r in members if r in dumps and last.get(r, 0) < top))
        states = {e.get("state") for es in by_rank.values() for e in es if e["collective_seq_id"] == top}
        if not missing and states <= {"completed"}:
            continue
        out.append(FlightRecord(pg, top, op, members, joined, missing,
                                {r: last.get(r, 0) for r in members}, source))
    out.sort(key=lambda f: (-len(f.missing), f.process_group))
    return out
