"""The status page of a super-peer's HTTP endpoint (``index.html``, served as ``/``).

One self-contained file (its style and script inline, no external assets, so it works on an
offline operator network): it reads ``/status.json`` every second and draws the cube as this
super-peer sees it, its neighbours per dimension with their state, its peers and outboxes, and
traffic rates computed from two successive readings.
"""
