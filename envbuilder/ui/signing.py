"""``envbuilder verify IMAGE --key PUB``: the signature and attestations of an image's digest,
read from its registry (envbuilder.api.check_signed), printed; exit 1 when any is missing or
does not match the digest."""

from __future__ import annotations

from typing import Any, Sequence

import typer

from envbuilder.errors import EXIT_FAILED, InputError
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
            *_proof(p),
            f"by envbuilder {p['envbuilder_version']}"]


def _proof(p: dict[str, Any]) -> list[str]:
    """The lines of what a newer smoke attestation holds: device, transport, busbw against its
    floor, /dev/shm, what the components initialised (absent from older attestations)."""
    out = []
    dev, t, fl = p.get("device") or {}, p.get("transport") or {}, p.get("bandwidth_floor") or {}
    if dev:
        out.append(f"device: {dev.get('kind')}" + (f" ({', '.join(dev.get('gpus') or [])})" if dev.get("gpus") else ""))
    if t:
        out.append(f"transport: {t.get('summary')} (fabric used: {t.get('fabric_used', '?')}"
                   + (f", declared {t['declared_fabric']}" if t.get("declared_fabric") else "")
                   + (f", NCCL {t['nccl_version']}" if t.get("nccl_version") else "") + ")")
    rows = fl.get("rows") or []
    if rows:
        out.append("busbw vs floor: " + ", ".join(f"{r.get('size', r['bytes'])} {r['percent']:.0f}%" for r in rows))
    elif fl:
        out.append(f"busbw vs floor: {fl.get('why') or 'not compared'}")
    shm = p.get("shm") or {}
    if shm:
        out.append(f"/dev/shm: {'ok' if shm.get('ok') else 'FAILED'} ({shm.get('needed_bytes', 0) / 2**20:.0f} MiB "
                   f"needed for {shm.get('local_ranks')} local ranks)")
    from envbuilder.ui.output import component_line

    out += [component_line(name, c) for name, c in (p.get("components") or {}).items()]
    return out


def signed_verdict(image: str, key: str | None, as_json: bool, require: list[str] | None = None) -> None:
    from envbuilder.api import check_signed, safe_text
    from envbuilder.errors import InputError

    if not key:
        raise InputError("--require checks the signed smoke attestation: give --key PUB too")

    d = check_signed(image, key, require=require or ()).to_dict()
    if as_json:
        echo_json(d)
    else:
        # a failed signature check shows why (which check), not only the digest it was about
        why = next((e for e in d["errors"] if e.startswith("signature: ")), None)
        rows = [["signature", "ok" if d["signature"] else "FAIL",
                 d["ref"] if d["signature"] or why is None else why[len("signature: "):]]]
        rows += [[f"attestation {n}", "ok" if a["ok"] else "FAIL", a["error"] or a["type"]]
                 for n, a in d["attestations"].items()]
        rows += [[f"require {r['require']}", "ok" if r["ok"] else "FAIL", f"found {r['found']}"]
                 for r in d.get("requirements") or ()]
        table(f"envbuilder verify {image} --key {key}", ["check", "ok", "detail"], rows)
        say(*signed_lines(d))
    if not d["ok"]:
        if not as_json:
            say(f"envbuilder: error: {safe_text(d['ref'])} is not signed and attested "
                             f"by {safe_text(key)}: {safe_text('; '.join(d['errors']))}", err=True)
        raise typer.Exit(EXIT_FAILED)


def sif_verdict(sif: str, key: str | None, as_json: bool, require: Sequence[str] | None = None) -> None:
    """``envbuilder verify X.sif [--key PUB]``: the SIF against its labels, the image digest it
    came from, and with a key its attestation (envbuilder.api.verify_sif); exit 1 on a failure."""
    from envbuilder.api import verify_sif

    if require:
        raise InputError("--require checks an image's smoke attestation, not a SIF's: verify the "
                         "image the SIF names (io.envbuilder.image-ref) with --key and --require")

    r = verify_sif(sif, key=key)
    d = r.to_dict()
    if as_json:
        echo_json(d)
    else:
        rows = [[c["name"], "ok" if c["ok"] else "FAIL", c["detail"]] for c in d["verify"]["checks"]]
        if key is not None:
            a = d["attestation"] or {}
            rows.append(["attestation sif", "ok" if a.get("ok") else "FAIL",
                         a.get("error") or a.get("bundle") or ""])
        table(f"envbuilder verify {sif}", ["check", "ok", "detail"], rows)
        origin = (f"built from {d['image']} (config {d['config_digest']})" if d["image"] else
                  "built from a definition (envbuilder.def): no image digest is recorded")
        say(f"{sif}: sha256 {d['sha256']}, {origin}")
    if not d["ok"]:
        if not as_json:
            why = "; ".join(d["errors"]) or r.verify.summary()
            say(f"envbuilder: error: {sif} is not what its labels and attestation say: {why}",
                err=True)
        raise typer.Exit(EXIT_FAILED)
