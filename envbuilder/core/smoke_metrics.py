"""The catalogue of the smoke job's Prometheus metrics: names, help, labels.

Data only, so that the writer (``envbuilder.run.metrics``) and the dashboard and alert rules
(``envbuilder.render.monitoring``) agree on names without the render layer importing the run
layer.
"""

from __future__ import annotations

JOB = "envbuilder_smoke"  # the Pushgateway job (and the textfile's file-name stem)
LABELS = ("target", "image", "image_digest", "node", "layout", "backend")
GROUPING = ("target", "node", "layout")  # one Pushgateway group per target, node and layout
OVERRIDABLE = ("target", "image", "image_digest", "node")

# name -> (help, extra label names). Every metric is a gauge: a smoke run is one observation.
METRICS: dict[str, tuple[str, tuple[str, ...]]] = {
    "envbuilder_smoke_success": ("1 when every check of the last smoke run passed, else 0.", ()),
    "envbuilder_smoke_check_status": ("Status of each check of the last smoke run: 1 on the "
                                      "status it ended in (pass, fail or skip), 0 on the others.",
                                      ("check", "status")),
    "envbuilder_smoke_duration_seconds": ("Wall time of the last smoke run.", ()),
    "envbuilder_smoke_phase_duration_seconds": ("Time of each check (phase) of the last smoke "
                                                "run, on its slowest rank.", ("phase",)),
    "envbuilder_smoke_rendezvous_seconds": ("Time to rendezvous (init_process_group) of the "
                                            "last smoke run, on its slowest rank.", ()),
    "envbuilder_smoke_rank_rendezvous_seconds": ("Time to rendezvous of each rank.",
                                                 ("rank", "host")),
    "envbuilder_smoke_rank_step_seconds": ("Mean DDP step time (forward, backward, optimizer) "
                                           "of each rank.", ("rank", "host")),
    "envbuilder_smoke_allreduce_busbw_bytes_per_second": (
        "All-reduce bus bandwidth (algbw x 2(n-1)/n, as nccl-tests) per message size.",
        ("message_bytes",)),
    "envbuilder_smoke_allreduce_algbw_bytes_per_second": (
        "All-reduce algorithm bandwidth (bytes / time) per message size.", ("message_bytes",)),
    "envbuilder_smoke_world_size": ("Ranks of the last smoke run.", ()),
    "envbuilder_smoke_nodes": ("Nodes of the last smoke run.", ()),
    "envbuilder_smoke_last_run_timestamp_seconds": ("When the last smoke run's metrics were "
                                                    "written (Unix time).", ()),
}
CHECK_STATES = ("pass", "fail", "skip")

__all__ = ["JOB", "LABELS", "GROUPING", "OVERRIDABLE", "METRICS", "CHECK_STATES"]
