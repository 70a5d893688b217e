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
so only plain containers, strings and numbers load.
"""

from __future__ import annotations

import io
import json
import pickle
import re
from pathlib import Path
from typing import Any

from envbuilder.errors import InputError
from envbuilder.diagnose.facts import FlightRecord

__all__ = ["analyse_dumps", "is_dump", "load_dump"]

MAX_DUMP_BYTES = 256 << 20
_RANK = re.compile(r"(\d+)(?:\.(?:pkl|pickle|json))?$")
_INTS = re.compile(r"-?\d+")


class _PlainUnpickler(pickle.Unpickler):
    """Loads dicts, lists, tuples, strings, numbers, booleans and None; nothing else."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused to load {module}.{name}: a flight-recorder dump "
                                     "holds only plain containers")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("refused a persistent id")


def is_dump(head: bytes) -> bool:
    """Whether a file starting with ``head`` is a flight-recorder dump (pickle or JSON)."""
    if head[:1] == b"\x80":
        return b"entries" in head or b"pg_config" in head
    text = head.lstrip()[:4096]
    return text[:1] == b"{" and b'"entries"' in text and (b'"pg_config"' in text or b'"version"' in text)


def load_dump(path: str) -> tuple[int, dict[str, Any]]:
    """(rank, dump) of one dump file; InputError naming the file when it is not one."""
    p = Path(path)
    m = _RANK.search(p.name)
    if m is None:
        raise InputError(f"{path}: a flight-recorder dump is named by its rank (e.g. nccl_trace_rank_3, "
                         "as torch writes it); rename it so the name ends with the rank")
    if p.stat().st_size > MAX_DUMP_BYTES:
        raise InputError(f"{path}: flight-recorder dump larger than {MAX_DUMP_BYTES >> 20} MiB")
    data = p.read_bytes()
    try:
        if data[:1] == b"\x80":
            dump = _PlainUnpickler(io.BytesIO(data)).load()
        else:
            dump = json.loads(data.decode("utf-8"))
    except (pickle.UnpicklingError, EOFError, ValueError, UnicodeDecodeError, IndexError,
            TypeError, AttributeError, KeyError) as exc:
        raise InputError(f"{path}: not a readable flight-recorder dump: {exc}") from None
    if not isinstance(dump, dict) or not isinstance(dump.get("entries"), list):
        raise InputError(f"{path}: not a flight-recorder dump (no 'entries' list)")
    return int(m.group(1)), dump


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
