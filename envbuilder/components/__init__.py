"""One object per component: what torch, each compiled component, the fabric and the team's
layers need from the plan, the image, its checks and the lock (``base.Component``, one module
each), and the typed instructions they render with (``instructions``). ``registry.components()``
lists them in plan order; adding one is adding a module (docs/internals.md)."""
