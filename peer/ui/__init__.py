"""The peer's local web app: what a person who does not live in a terminal does with their peer.

Pages (one HTML document, ``static/``): *Follow* (a subscription built from a form, or typed as
QEL or SPARQL and checked as one types), *Inbox* (live, over server-sent events), *Fetch*
(progress, rendezvous with an offline owner, open or save), *Share* (publish a document or a
file with its metadata, advertise, change and retract what this peer published) and *Status*.

Modules: ``server`` (``serve_ui``, Hypercorn in the daemon's nursery), ``app`` (the routes,
acting through the daemon's commands), ``guard`` (who may use it: host, origin, token),
``http`` (ASGI plumbing), ``queries`` (form to QEL), ``documents`` (metadata to RDF, RDF for
reading), ``notify`` (desktop notifications), ``settings`` (what the page changes).
"""

from peer.ui.server import serve_ui

__all__ = ["serve_ui"]
