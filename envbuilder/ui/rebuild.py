"""``envbuilder rebuild IMAGE@DIGEST`` (issue 42): the image built again from its provenance and
compared bit for bit; registered on the app by envbuilder.cli (one api call; the work is
envbuilder.run.rebuild's)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from envbuilder.errors import EXIT_FAILED
from envbuilder.ui.options import JsonOpt, MatrixOpt
from envbuilder.ui.output import Progress, command, echo_json
from envbuilder.ui.plain import say


def rebuild(image: str = typer.Argument(..., help="The image by digest, as build --push reports it: REPO@sha256:..."),
            key: Optional[str] = typer.Option(None, "--key", help="A cosign public key: read the provenance only if this key signed it (default: as stored, unverified)."),
            wheelhouse: Optional[Path] = typer.Option(None, "--wheelhouse", help="The wheels of an image built offline (the lock's hashes check them)."),
            ca_cert: Optional[Path] = typer.Option(None, "--ca-cert", help="A PEM CA bundle for the builder stage (this network's proxy)."),
            http_proxy: Optional[str] = typer.Option(None, "--http-proxy", help="HTTP proxy for the rebuild's downloads."),
            https_proxy: Optional[str] = typer.Option(None, "--https-proxy", help="HTTPS proxy for the rebuild's downloads."),
            source_date_epoch: Optional[int] = typer.Option(None, "--source-date-epoch", min=0, metavar="SECONDS", help="Rebuild as if the date had been this one (what one changed input changes; the digest then differs)."),
            keep: Optional[Path] = typer.Option(None, "--keep", metavar="DIR", help="Keep the build folder and the rebuilt OCI layout (rebuilt.oci.tar) in this new folder."),
            matrix: Optional[str] = MatrixOpt, as_json: bool = JsonOpt) -> None:
    """Build IMAGE again from what its provenance says it was built from, without cache, and compare bit for bit: exit 0 "reproduced", exit 1 naming the first layer that differs and its files."""
    from envbuilder import api

    with Progress(not as_json) as prog:
        r = api.rebuild(image, key=key, wheelhouse=wheelhouse, ca_cert=ca_cert,
                        proxies={"HTTP_PROXY": http_proxy, "HTTPS_PROXY": https_proxy}, keep=keep,
                        source_date_epoch=source_date_epoch,
                        matrix_dir=matrix, on_event=lambda kind, data: prog.event("rebuild", kind, data))
    d = r.to_dict()
    if as_json:
        echo_json(d)
    else:
        say(r.summary(),
            f"  provenance {'verified with ' + key if r.provenance_verified and key else 'read as stored (unverified: --key PUB verifies it)'}",
            f"  target {r.target}, SOURCE_DATE_EPOCH {r.source_date_epoch}, {r.seconds:.0f} s")
        if r.first_layer is not None:
            fl = r.first_layer
            say(f"  layer {fl.index + 1}: original {fl.original}, rebuilt {fl.rebuilt}",
                *(f"  {f.line()}" for f in r.files))
            if r.files_total > len(r.files):
                say(f"  ... and {r.files_total - len(r.files)} more files (--json lists {len(r.files)})")
        say(*(f"  config {c}" for c in r.config))
    if not r.reproduced:
        if not as_json:
            say(f"envbuilder: error: {r.summary()}", err=True)
        raise typer.Exit(EXIT_FAILED)


def register(app: typer.Typer) -> None:
    """Add rebuild to the app."""
    app.command("rebuild")(command(rebuild))
