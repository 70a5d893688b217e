"""Hash-pinned locks (uv), conda environments and SBOMs for a resolved stack."""
