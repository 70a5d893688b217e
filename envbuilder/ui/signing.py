"""``envbuilder verify IMAGE --key PUB``: the signature and attestations of an image's digest,
read from its registry (envbuilder.api.check_signed), printed; exit 1 when any is missing or
does not match the digest."""

from __future__ import annotations

from typing import Any

import typer

from envbuilder.errors import EXIT_FAILED
from envbuilder.ui.output import echo_json, say, table


def signed_lines(d: dict[str, Any]) -> list[str]:
    """What the digest was proven to do, one fact a line."""
    p = d.get("proven") or {}
    if not p:
        return []
    lay = p["layout"]
    bw = p.get("busbw_gbps")
    return [f"proven: {p['target']} passed the smoke job at world size {p['world_size']} "
            f"({lay['nnodes']}x{lay['nproc_per_node']}, {p['backend']}) on {p['host']}",
            "all-reduce busbw: " + (f"{bw:.3f} GB/s" if bw is not None else "not measured"),
            f"collectives: {', '.join(p['collectives'])}",
            f"by envbuilder {p['envbuilder_version']}"]


def signed_verdict(image: str, key: str, as_json: bool) -> None:
    from envbuilder.api import check_signed, safe_text

    d = check_signed(image, key).to_dict()
    if as_json:
        echo_json(d)
    else:
        # a failed signature check shows why (which check), not only the digest it was about
        why = next((e for e in d["errors"] if e.startswith("signature: ")), None)
        rows = [["signature", "ok" if d["signature"] else "FAIL",
                 d["ref"] if d["signature"] or why is None else why[len("signature: "):]]]
        rows += [[f"attestation {n}", "ok" if a["ok"] else "FAIL", a["error"] or a["type"]]
                 for n, a in d["attestations"].items()]
        table(f"envbuilder verify {image} --key {key}", ["check", "ok", "detail"], rows)
        say(*signed_lines(d))
    if not d["ok"]:
        if not as_json:
            say(f"envbuilder: error: {safe_text(d['ref'])} is not signed and attested "
                             f"by {safe_text(key)}: {safe_text('; '.join(d['errors']))}", err=True)
        raise typer.Exit(EXIT_FAILED)
